#!/bin/sh
# POST /v1/images/generations, OpenAI's images API on `tidal serve`. With curl: an image asked for
# by class name, by "class N" and by "N" is byte for byte the native API's PNG for the same
# label, seed, steps and guidance; n = 2 and 3 give one PNG per image, each pixel for pixel the
# tile of the native grid (both read by tests/pngread.py, independent of libpng); bad prompts
# (the 400 lists the names), sizes, n, response_format, unknown fields, wrong types and queries
# are 400 with OpenAI's error object naming the param; 401 without the token, 405, 413, 504 and
# 503 in the same object. The names come from the weights file that tidal train wrote (tidal
# ckpt info shows them); a file without them takes "class N" only, and a forged attribute stops
# tidal serve naming the file and the attribute. Then the official `openai` npm package,
# installed into a temporary directory (its checks skipped, with the reason, where npm or the
# registry is missing), generates images and meets a BadRequestError and an AuthenticationError.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=`command -v python3`
[ -n "$PY" ] || { echo "1..0 # SKIP no python3 to decode PNGs with"; exit 0; }
serve_test_setup
TOKEN=s3cret-openai

tiny_ckpt "$dir/run"
check "a tiny checkpoint to serve" [ -s "$dir/run/model.h5" ]
ckpt="$dir/run/model.h5"

# start_server NAME CKPT ARGS...: tidal serve on a port it picks; sets $pid and $base, waits for
# /healthz
start_server() {
    ss_name=$1 ss_file=$2; shift 2
    serve_bg "$ss_name" "$TIDAL" serve --ckpt "$ss_file" --listen 127.0.0.1:0 --max-resolution 32 \
        --progress-every 0 --steps 2 "$@"
}

stop_server() {
    kill -TERM "$1"
    n=0
    while kill -0 "$1" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    wait "$1"; rc=$?
}

# The comparisons' PNG reader is tests/pngread.py (independent of libpng); the OpenAI answer's
# own checks are here.
cat >"$dir/png.py" <<'EOF'
import base64, json, sys
sys.path.insert(0, sys.argv.pop(1))
import pngread

def on_error(kind, value, tb):  # one line, for the test's description
    print("%s: %s" % (kind.__name__, value))
    sys.exit(1)
sys.excepthook = on_error
cmd = sys.argv[1]
if cmd == "unpack":  # unpack ANSWER PREFIX: the b64_json images as PREFIX.I.png; prints how many
    ans = json.load(open(sys.argv[2]))
    assert set(ans) == {"created", "data"} and isinstance(ans["created"], int), "answer keys"
    for i, d in enumerate(ans["data"]):
        assert set(d) == {"b64_json"}, "image keys"
        open("%s.%d.png" % (sys.argv[3], i), "wb").write(base64.b64decode(d["b64_json"], validate=True))
    print(len(ans["data"]))
elif cmd in ("size", "tile"):
    sys.exit(pngread.main(sys.argv))
elif cmd == "error":  # error BODY -> "PARAM TYPE" of OpenAI's error object (exactly its keys)
    e = json.load(open(sys.argv[2]))
    assert set(e) == {"error"} and set(e["error"]) == {"message", "type", "param", "code"}, "keys"
    e = e["error"]
    assert isinstance(e["message"], str) and e["message"] and e["code"] is None, "message, code"
    print(e["param"] if e["param"] is not None else "null", e["type"])
EOF
png() { "$PY" "$dir/png.py" "$abs_top_srcdir/tests" "$@" 2>&1; }

start_server main "$ckpt" --token "$TOKEN" --max-body 8192
check "the server starts and answers /healthz" [ -n "$port" ]
main=$pid mainbase=$base
auth="Authorization: Bearer $TOKEN"

# gen NAME BODY: POST /v1/images/generations with the token -> $dir/NAME.json, its code in $code
gen() { code=`curl -s -o "$dir/$1.json" -w '%{http_code}' -H "$auth" -X POST "$mainbase/v1/images/generations" --data-binary "$2"`; }
# native NAME BODY: POST /v1/images?wait=1 -> $dir/NAME.png
native() { curl -s -o "$dir/$1.png" -w '%{http_code}' -H "$auth" -X POST "$mainbase/v1/images?wait=1" --data-binary "$2" >/dev/null; }

# one image: by name, by "class N", by "N", each equal to the native PNG of its label
for case in "sneaker|7" "  SNEAKER |7" "class 3|3" "Ankle boot|9" "4|4" "T-shirt/top|0"; do
    prompt=${case%|*} label=${case#*|}
    gen one "{\"prompt\":\"$prompt\",\"n\":1,\"size\":\"32x32\",\"response_format\":\"b64_json\",\"seed\":5,\"num_inference_steps\":2,\"guidance_scale\":1.5}"
    count=`png unpack "$dir/one.json" "$dir/one"`
    native ref "{\"label\":$label,\"n\":1,\"resolution\":32,\"seed\":5,\"steps\":2,\"cfg\":1.5}"
    check "prompt '$prompt': 200 ($code) with 1 image ($count), byte for byte the native PNG of label $label" \
        sh -c "[ '$code' = 200 ] && [ '$count' = 1 ] && cmp -s '$dir/one.0.png' '$dir/ref.png'"
done
gen other '{"prompt":"sneaker","seed":6,"num_inference_steps":2,"guidance_scale":1.5}'
png unpack "$dir/other.json" "$dir/other" >/dev/null
check "... another seed, another image" sh -c "! cmp -s '$dir/other.0.png' '$dir/one.0.png'"
gen dflt '{"prompt":"Bag","seed":11}'
png unpack "$dir/dflt.json" "$dir/dflt" >/dev/null
native dref '{"label":8,"seed":11}'
check "only a prompt and a seed: the server's defaults (32x32, --steps, --cfg), as the native API's" \
    sh -c "[ '$code' = 200 ] && cmp -s '$dir/dflt.0.png' '$dir/dref.png'"
gen ign '{"prompt":"bag","seed":11,"model":"dall-e-2","quality":"standard","style":"vivid","user":"u-1","size":"auto","n":null}'
png unpack "$dir/ign.json" "$dir/ign" >/dev/null
check "model, quality, style, user (strings), size auto and null are accepted and change nothing ($code)" \
    sh -c "[ '$code' = 200 ] && cmp -s '$dir/ign.0.png' '$dir/dref.png'"

# several images: one PNG each, the tiles of the native grid (image i: noise stream i of the seed)
for n in 2 3; do
    gen multi "{\"prompt\":\"Bag\",\"n\":$n,\"size\":\"32x32\",\"seed\":9,\"num_inference_steps\":2,\"guidance_scale\":1.5}"
    count=`png unpack "$dir/multi.json" "$dir/multi$n"`
    native grid$n "{\"label\":8,\"n\":$n,\"resolution\":32,\"seed\":9,\"steps\":2,\"cfg\":1.5}"
    check "n = $n: 200 ($code) with $n images ($count)" [ "$code" = 200 -a "$count" = $n ]
    k=0
    while [ $k -lt $n ]; do
        size=`png size "$dir/multi$n.$k.png"`
        check "... image $k is a 32x32 grayscale PNG ($size)" [ "$size" = 32x32x1 ]
        got=`png tile "$dir/grid$n.png" $n "$dir/multi$n.$k.png" $k`
        check "... image $k is pixel for pixel tile $k of the native grid ($got)" [ "$got" = same ]
        k=$((k + 1))
    done
done
check "n = 2: the two images differ" sh -c "! cmp -s '$dir/multi2.0.png' '$dir/multi2.1.png'"

# errors: the status and OpenAI's error object, naming the param ("null": none)
# oexpect CODE PARAM DESCRIPTION CURL-ARGS...
oexpect() {
    want=$1 param=$2 desc=$3; shift 3
    got=`curl -s -o "$dir/err.json" -w '%{http_code}' "$@"`
    shape=`png error "$dir/err.json"`
    type=invalid_request_error
    [ "$want" -ge 500 ] && type=server_error
    if [ "$got" != "$want" ]; then
        not_ok "$desc -> $got, expected $want: `head -c 300 "$dir/err.json"`"
    elif [ "$shape" != "$param $type" ]; then
        not_ok "$desc -> $want but not OpenAI's error object with param $param ($shape): `head -c 300 "$dir/err.json"`"
    else
        ok "$desc -> $want, param $param"
    fi
}
obad() { nbad=$((nbad + 1)); oexpect 400 "$1" "$2" -H "$auth" -X POST "$mainbase/v1/images/generations$4" --data-binary "$3"; }
count400() { curl -s -H "$auth" "$mainbase/metrics" | sed -n 's/^tidal_http_responses_total{code="400"} //p'; }
nbad=0 before400=`count400`
obad prompt "an unknown class name" '{"prompt":"dog"}'
check "... its message lists the class names" sh -c "grep -q \"'Sneaker', 'Bag', 'Ankle boot'\" '$dir/err.json' && grep -q \"'T-shirt/top'\" '$dir/err.json'"
obad prompt "class 10 of 10" '{"prompt":"class 10"}'
obad prompt "10" '{"prompt":"10"}'
obad prompt "an empty prompt" '{"prompt":"  "}'
obad prompt "no prompt" '{"n":1}'
obad prompt "prompt null" '{"prompt":null}'
obad prompt "prompt as a number" '{"prompt":7}'
obad prompt "prompt as an array" '{"prompt":["bag"]}'
obad size "size 48x48" '{"prompt":"bag","size":"48x48"}'
obad size "size 64x64 over --max-resolution 32" '{"prompt":"bag","size":"64x64"}'
check "... saying what this server takes" grep -q 'at most 32x32 on this server' "$dir/err.json"
obad size "size 32x64 (not square)" '{"prompt":"bag","size":"32x64"}'
obad size "size 1024x1024" '{"prompt":"bag","size":"1024x1024"}'
obad size "size big" '{"prompt":"bag","size":"big"}'
obad size "size 32 (a number)" '{"prompt":"bag","size":32}'
obad size "size 32x32x1" '{"prompt":"bag","size":"32x32x1"}'
obad n "n = 0" '{"prompt":"bag","n":0}'
obad n "n = 17" '{"prompt":"bag","n":17}'
obad n "n as a string" '{"prompt":"bag","n":"2"}'
obad n "n = 1.5" '{"prompt":"bag","n":1.5}'
obad response_format "response_format url" '{"prompt":"bag","response_format":"url"}'
check "... saying only b64_json is supported" grep -q 'only b64_json' "$dir/err.json"
obad response_format "response_format png" '{"prompt":"bag","response_format":"png"}'
obad response_format "response_format as a number" '{"prompt":"bag","response_format":1}'
obad num_inference_steps "num_inference_steps 0" '{"prompt":"bag","num_inference_steps":0}'
check "... told by its own name" grep -q "'num_inference_steps' must be in" "$dir/err.json"
obad num_inference_steps "num_inference_steps as a string" '{"prompt":"bag","num_inference_steps":"ten"}'
obad guidance_scale "guidance_scale 21" '{"prompt":"bag","guidance_scale":21}'
obad guidance_scale "guidance_scale as a string" '{"prompt":"bag","guidance_scale":"high"}'
obad seed "seed -1" '{"prompt":"bag","seed":-1}'
obad seed "seed as a string" '{"prompt":"bag","seed":"5"}'
obad model "model as a number" '{"prompt":"bag","model":3}'
obad user "user as an object" '{"prompt":"bag","user":{}}'
obad bogus "an unknown field" '{"prompt":"bag","bogus":1}'
obad label "a native field (label)" '{"prompt":"bag","label":3}'
obad null "not JSON" '{"prompt":'
obad null "a JSON array" '["bag"]'
obad null "an empty body" ''
obad null "a duplicate field" '{"prompt":"bag","prompt":"coat"}'
obad wait "a query argument" '{"prompt":"bag"}' '?wait=1'
after400=`count400`
check "/metrics counts each 400 of the route ($before400 -> $after400, $nbad sent)" \
    [ "$((after400 - before400))" = "$nbad" ]
oexpect 401 null "no token" -X POST "$mainbase/v1/images/generations" -d '{"prompt":"bag"}'
check "... with WWW-Authenticate: Bearer" sh -c "curl -s -D - -o /dev/null -X POST '$mainbase/v1/images/generations' -d '{}' | grep -qi '^www-authenticate: bearer'"
oexpect 401 null "a wrong token" -H 'Authorization: Bearer wrong' -X POST "$mainbase/v1/images/generations" -d '{"prompt":"bag"}'
oexpect 405 null "GET" -H "$auth" "$mainbase/v1/images/generations"
check "... with Allow: POST" sh -c "curl -s -D - -o /dev/null -H '$auth' '$mainbase/v1/images/generations' | grep -qi '^allow: POST'"
head -c 10000 /dev/zero | tr '\0' ' ' >"$dir/10k"
oexpect 413 null "a body over --max-body (Content-Length)" -H "$auth" -X POST "$mainbase/v1/images/generations" --data-binary @"$dir/10k"
oexpect 413 null "a chunked body over --max-body" -H "$auth" -H 'Transfer-Encoding: chunked' -X POST "$mainbase/v1/images/generations" --data-binary @"$dir/10k"
code=`curl -s -o "$dir/id.json" -w '%{http_code}' -H "$auth" -X POST "$mainbase/v1/images" -d '{"id":"generations"}'`
check "the native API refuses the id 'generations' ($code), which /v1/images/generations hides" \
    sh -c "[ $code = 400 ] && grep -q '\"field\":\"id\"' '$dir/id.json'"
code=`curl -s -o /dev/null -w '%{http_code}' -H "$auth" "$mainbase/v1/images/generations/x"`
check "/v1/images/generations/x is no path (404: $code)" [ "$code" = 404 ]
check "the server is alive after the errors" [ "`curl -s $mainbase/healthz`" = ok ]

# the class names: what tidal train wrote, shown by tidal ckpt info
"$TIDAL" ckpt info "$ckpt" >"$dir/info.out" 2>&1
check "tidal ckpt info shows the class names" \
    grep -q '^  classes      0 T-shirt/top, 1 Trouser, .*7 Sneaker, 8 Bag, 9 Ankle boot$' "$dir/info.out"
latest=`ls "$dir"/run/ckpt/ckpt-*.h5 2>/dev/null | tail -n 1`
"$TIDAL" ckpt info "$latest" >"$dir/info2.out" 2>&1
check "... and a training checkpoint carries them too (`basename "$latest"`)" grep -q '^  classes .*9 Ankle boot$' "$dir/info2.out"

# a file without names (an older one), and forged names, edited with h5py
H5PY=""
for p in "$PY" python3; do "$p" -c 'import h5py' 2>/dev/null && { H5PY=$p; break; }; done
if [ -n "$H5PY" ]; then
    cp "$ckpt" "$dir/plain.h5"
    "$H5PY" -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: del f.attrs['class_names']" "$dir/plain.h5"
    start_server plain "$dir/plain.h5"
    plainpid=$pid
    code=`curl -s -o "$dir/p.json" -w '%{http_code}' -X POST "$base/v1/images/generations" -d '{"prompt":"sneaker"}'`
    check "a file without class names: 'sneaker' -> 400 ($code) saying the file has none" \
        sh -c "[ $code = 400 ] && grep -q 'no class names' '$dir/p.json'"
    curl -s -o "$dir/p.json" -X POST "$base/v1/images/generations" -d '{"prompt":"class 3","seed":5,"num_inference_steps":2,"guidance_scale":1.5}'
    png unpack "$dir/p.json" "$dir/p" >/dev/null
    native ref3 '{"label":3,"n":1,"resolution":32,"seed":5,"steps":2,"cfg":1.5}'
    check "... 'class 3' is the native PNG of label 3 from the named file (same weights)" cmp -s "$dir/p.0.png" "$dir/ref3.png"
    stop_server $plainpid
    check "... and the server stops with exit 0 ($rc)" [ "$rc" = 0 ]
    for forged in '["a","b"]' 'sneaker' '["T-shirt/top","Trouser","Pullover","Dress","Coat","Sandal","Shirt","Sneaker","Bag","bag"]'; do
        cp "$ckpt" "$dir/forged.h5"
        "$H5PY" -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['class_names'] = sys.argv[2]" "$dir/forged.h5" "$forged"
        "$TIDAL" serve --ckpt "$dir/forged.h5" --listen 127.0.0.1:0 --max-resolution 32 \
            >/dev/null 2>"$dir/forged.err"; rc=$?
        check "forged class_names '$forged': tidal serve exits 1 naming the file and the attribute ($rc: `head -c 200 "$dir/forged.err"`)" \
            sh -c "[ $rc = 1 ] && grep -q 'forged.h5.*class_names' '$dir/forged.err'"
    done
    cp "$ckpt" "$dir/forged.h5"
    "$H5PY" -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['class_names'] = 7" "$dir/forged.h5"
    "$TIDAL" ckpt info "$dir/forged.h5" >/dev/null 2>"$dir/forged.err"; rc=$?
    check "class_names as an integer: tidal ckpt info refuses it too ($rc: `head -c 200 "$dir/forged.err"`)" \
        sh -c "[ $rc != 0 ] && grep -q 'class_names' '$dir/forged.err'"
else
    skip "h5py is not installed: a file without class names, and forged ones"
fi

# a queue of one place and a wait of 0.2 s: 504 for the slow ones, then 503 with Retry-After
start_server slow "$ckpt" --queue-max 1 --wait-timeout 0.2
slowpid=$pid slowbase=$base
slow='{"prompt":"coat","n":8,"num_inference_steps":30,"guidance_scale":2}'
oexpect 504 null "a request slower than --wait-timeout" -X POST "$slowbase/v1/images/generations" -d "$slow"
check "... naming the native request to fetch it from" grep -q 'GET /v1/images/img-[0-9a-f]*?format=png&wait=1' "$dir/err.json"
oexpect 504 null "a second one, queued" -X POST "$slowbase/v1/images/generations" -d "$slow"
oexpect 503 null "a third one, the queue full" -X POST "$slowbase/v1/images/generations" -d "$slow"
check "... with Retry-After" sh -c "curl -s -D - -o /dev/null -X POST '$slowbase/v1/images/generations' -d '$slow' | grep -qi '^retry-after: [0-9]'"
stop_server $slowpid
check "the slow server stops on SIGTERM with exit 0 ($rc)" [ "$rc" = 0 ]

# --cancel-on-disconnect: a client that gives up cancels its request, as on ?wait=1
start_server gone "$ckpt" --cancel-on-disconnect
gonepid=$pid
curl -s -o /dev/null --max-time 1 -X POST "$base/v1/images/generations" -d "$slow"
n=0 cancelled=""
while [ $n -lt 100 ]; do
    cancelled=`curl -s "$base/metrics" | sed -n 's/^tidal_requests_total{status="cancelled",source="http"} //p'`
    [ "$cancelled" = 1 ] && break
    sleep 0.1; n=$((n + 1))
done
check "--cancel-on-disconnect: a client gone after 1 s cancels its request (cancelled: ${cancelled:-none})" \
    [ "$cancelled" = 1 ]
stop_server $gonepid
check "... and the server stops on SIGTERM with exit 0 ($rc)" [ "$rc" = 0 ]

# the official client library: npm's openai, installed here for this test
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    skip "node or npm is not installed: the openai client library checks (apt-get install npm)"
elif ! (mkdir "$dir/npm" && cd "$dir/npm" && echo '{"private":true}' >package.json &&
        timeout 300 npm install --no-audit --no-fund --loglevel=error openai >"$dir/npm.log" 2>&1); then
    skip "npm install openai failed (offline, or no registry): the client library checks: `tail -n 3 "$dir/npm.log" | tr '\n' ' ' | head -c 200`"
else
    diag "openai `node -p "require('$dir/npm/node_modules/openai/package.json').version"` from npm"
    cat >"$dir/npm/client.mjs" <<'EOF'
import fs from "node:fs";
import OpenAI from "openai";
const [port, token, out] = process.argv.slice(2);
const baseURL = `http://127.0.0.1:${port}/v1`;
const say = (good, what) => console.log(`${good ? "ok" : "not ok"} ${what}`);
const client = new OpenAI({ apiKey: token, baseURL, maxRetries: 0, timeout: 120000 });
try {
  // seed and the extensions travel in the body beside OpenAI's own fields
  const r = await client.images.generate({ prompt: "sneaker", n: 2, size: "32x32",
    response_format: "b64_json", seed: 5, num_inference_steps: 2, guidance_scale: 1.5 });
  say(Number.isInteger(r.created) && Array.isArray(r.data) && r.data.length === 2,
      `images.generate: created ${r.created} and ${r.data && r.data.length} images`);
  r.data.forEach((d, i) => {
    const png = Buffer.from(d.b64_json, "base64");
    const sig = png.subarray(0, 8).equals(Buffer.from([137, 80, 78, 71, 13, 10, 26, 10]));
    const w = png.readUInt32BE(16), h = png.readUInt32BE(20);
    say(sig && w === 32 && h === 32, `image ${i}: a PNG of ${w}x${h}`);
    fs.writeFileSync(`${out}/client.${i}.png`, png);
  });
} catch (e) {
  say(false, `images.generate threw ${e}`);
}
for (const [body, param, text] of [
  [{ prompt: "dog", n: 1, size: "32x32", response_format: "b64_json" }, "prompt", "'Sneaker'"],
  [{ prompt: "bag", size: "1024x1024" }, "size", "32x32"],
  [{ prompt: "bag", response_format: "url" }, "response_format", "only b64_json"],
]) {
  try {
    await client.images.generate(body);
    say(false, `${JSON.stringify(body)} did not throw`);
  } catch (e) {
    say(e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === param &&
        e.type === "invalid_request_error" && e.message.includes(text),
        `${JSON.stringify(body)}: BadRequestError, status ${e.status}, param ${e.param}: ${e.message}`);
  }
}
try {
  await new OpenAI({ apiKey: "wrong", baseURL, maxRetries: 0 }).images.generate({ prompt: "bag" });
  say(false, "a wrong key did not throw");
} catch (e) {
  say(e instanceof OpenAI.AuthenticationError && e.status === 401,
      `a wrong key: AuthenticationError, status ${e.status}: ${e.message}`);
}
EOF
    (cd "$dir/npm" && timeout 300 node client.mjs "${mainbase##*:}" "$TOKEN" "$dir") >"$dir/client.out" 2>&1
    rc=$?
    while IFS= read -r line; do
        case $line in
        "ok "*) ok "openai client: ${line#ok }" ;;
        "not ok "*) not_ok "openai client: ${line#not ok }" ;;
        *) diag "client: $line" ;;
        esac
    done <"$dir/client.out"
    check "openai client: the script ran to its end (exit $rc) with 7 points" \
        sh -c "[ $rc = 0 ] && [ \"\`grep -c '^ok ' '$dir/client.out'\`\" = 7 ]"
    gen same '{"prompt":"sneaker","n":2,"size":"32x32","response_format":"b64_json","seed":5,"num_inference_steps":2,"guidance_scale":1.5}'
    png unpack "$dir/same.json" "$dir/same" >/dev/null
    check "openai client: its two images are the bytes curl gets for the same request" \
        sh -c "cmp -s '$dir/client.0.png' '$dir/same.0.png' && cmp -s '$dir/client.1.png' '$dir/same.1.png'"
fi

stop_server $main
check "main server: SIGTERM -> exit 0 ($rc)" [ "$rc" = 0 ]
grep -q 'AddressSanitizer\|runtime error' "$dir"/*.err && not_ok "sanitizer reports: `grep -l 'AddressSanitizer\|runtime error' "$dir"/*.err`"
done_testing
