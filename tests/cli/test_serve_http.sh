#!/bin/sh
# `tidal serve` over HTTP with real curl: a table of malformed and hostile requests, each with
# its 4xx and a JSON error naming the field; a good request returns a PNG an independent decoder
# reads; GET by id; /metrics; bearer tokens; 200 concurrent requests; 503 with Retry-After
# from a full queue; a trace replay with its summary; the server still healthy after all of it
# and out with exit 0 on SIGTERM.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
PY=/usr/bin/python3
[ -x "$PY" ] || PY=`command -v python3`

tiny_ckpt "$dir/run"
check "a tiny checkpoint to serve" [ -s "$dir/run/model.h5" ]
ckpt="$dir/run/model.h5"

# start_server NAME ARGS...: tidal serve on a port it picks (--listen 127.0.0.1:0) and prints;
# sets $pid and $base, and waits until /healthz answers.
start_server() {
    ss_name=$1; shift
    serve_bg "$ss_name" "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 32 \
        --progress-every 0 "$@"
}

# stop_server PID: SIGTERM, then its exit status in $rc
stop_server() {
    kill -TERM "$1"
    n=0
    while kill -0 "$1" 2>/dev/null && [ $n -lt 300 ]; do sleep 0.1; n=$((n + 1)); done
    wait "$1"; rc=$?
}

# pngs_ok FILE...: every file is a whole PNG, read by tests/pngread.py (chunk CRCs, IHDR, the
# inflated size, the filters) and by pngcheck where installed
pngs_ok() {
    "$PY" "$abs_top_srcdir/tests/pngread.py" check "$@" >/dev/null || return 1
    if command -v pngcheck >/dev/null 2>&1; then pngcheck -q "$@" >/dev/null || return 1; fi
    return 0
}

png_size() { "$PY" -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); print("%dx%d" % struct.unpack(">II", d[16:24]))' "$1"; }

start_server main --queue-max 256
check "the server starts on a port it picked and answers /healthz" [ -n "$port" ]
main=$pid mainbase=$base

# expect CODE FIELD DESCRIPTION CURL-ARGS...: the status, and {"error": ..., "field": FIELD}
# ("-" for answers libmicrohttpd gives itself, which are not JSON)
expect() {
    code=$1 field=$2 desc=$3; shift 3
    got=`curl -s -o "$dir/body" -w '%{http_code}' "$@"`
    if [ "$got" != "$code" ]; then
        not_ok "$desc -> $got, expected $code: `head -c 200 "$dir/body"`"
    elif [ "$field" != - ] && ! grep -q "\"error\":.*\"field\":\"$field\"" "$dir/body"; then
        not_ok "$desc -> $code but the error does not name '$field': `head -c 200 "$dir/body"`"
    else
        [ "$field" = - ] && ok "$desc -> $code" || ok "$desc -> $code naming '$field'"
    fi
}
post() { expect "$1" "$2" "$3" -X POST "$mainbase/v1/images$5" --data-binary "$4"; }

# framing libmicrohttpd lets through or holds, sent raw from threads with a client timeout each
# (so that a regression fails in seconds, not in --connection-timeout's 600), in the background
# while the table goes on: NAME CODE FIELD closed|held|reset SECONDS, one line a case
if [ -n "$PY" ]; then
    "$PY" - "$port" <<'EOF' >"$dir/framing.log" 2>&1 &
import re, socket, sys, threading, time
port = int(sys.argv[1])
post = b"POST /v1/images HTTP/1.1\r\nHost: x\r\n"
body = b'{"steps":1}'
chunks = b"b\r\n" + body + b"\r\n0\r\n\r\n"
cases = [  # name, bytes, client timeout (s)
    ("garbage", b"\x00\xff garbage \r\n\r\n", 25),
    ("te-gzip", post + b"Transfer-Encoding: gzip\r\n\r\n" + body, 5),
    ("te-chunked-chunked", post + b"Transfer-Encoding: chunked, chunked\r\n\r\n" + chunks, 5),
    ("te-twice", post + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
     + chunks, 5),
    ("te-and-cl", post + b"Transfer-Encoding: chunked\r\nContent-Length: 11\r\n\r\n" + chunks, 5),
    ("two-cl", post + b"Content-Length: 11\r\nContent-Length: 5\r\n\r\n" + body, 5),
    ("no-host", b"GET /healthz HTTP/1.1\r\n\r\n", 5),
    ("two-hosts", b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 5),
    ("http10-no-host", b"GET /healthz HTTP/1.0\r\n\r\n", 5),
    ("chunked", post + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks, 5),
]
lock = threading.Lock()
def say(line):  # one write a line, under a lock: print() from threads can splice two lines
    with lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
def probe(name, data, timeout):
    try:
        probe1(name, data, timeout)
    except Exception as e:
        say("%s error - %r" % (name, e))
def probe1(name, data, timeout):
    t0 = time.time()
    out, how = b"", "closed"
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        while True:
            d = s.recv(65536)
            if not d: break
            out += d
    except socket.timeout: how = "held"
    except OSError: how = "reset"
    s.close()
    head, _, rest = out.partition(b"\r\n\r\n")
    code = head.split(b" ")[1].decode() if head.startswith(b"HTTP/1.") else "none"
    field = re.search(rb'"field":"([^"]*)"', rest)
    say("%s %s %s %s %.1f" % (name, code, field.group(1).decode() if field else "-", how,
                              time.time() - t0))
threads = [threading.Thread(target=probe, args=c) for c in cases]
for t in threads: t.start()
for t in threads: t.join()
EOF
    framing=$!
fi
# framed NAME "CODE FIELD closed" DESCRIPTION: the line of case NAME in framing.log
framed() {
    line=`grep "^$1 " "$dir/framing.log"`
    check "$3 -> $2 (${line:-no line: `tail -n 2 "$dir/framing.log" | tr '\n' ' '`})" \
        grep -q "^$1 $2 " "$dir/framing.log"
}

post 400 body "not JSON" '{"n":'
post 400 body "a JSON array" '[1,2]'
post 400 body "a JSON string" '"hello"'
post 400 body "an empty body" ''
post 400 body "trailing garbage" '{"n":1} x'
post 400 body "a duplicate field" '{"n":1,"n":2}'
post 400 body "an integer too big for 64 bits" '{"seed":99999999999999999999999}'
post 400 body "a real too big" '{"cfg":1e400}'
post 400 bogus "an unknown field" '{"bogus":1}'
post 400 n "n as a string" '{"n":"1"}'
post 400 n "n as a real" '{"n":1.5}'
post 400 n "n = 0" '{"n":0}'
post 400 n "n = 17" '{"n":17}'
post 400 n "n as an object" '{"n":{"a":1}}'
post 400 resolution "resolution 48" '{"resolution":48}'
post 400 resolution "resolution 64 over --max-resolution 32" '{"resolution":64}'
post 400 resolution "resolution -32" '{"resolution":-32}'
post 400 steps "steps 0" '{"steps":0}'
post 400 steps "steps 1001" '{"steps":1001}'
post 400 cfg "cfg -1" '{"cfg":-1}'
post 400 cfg "cfg 21" '{"cfg":21}'
post 400 cfg "cfg as a string" '{"cfg":"high"}'
post 400 seed "seed -1" '{"seed":-1}'
post 400 seed "seed 2^53 + 1" '{"seed":9007199254740993}'
post 400 label "label 10 of 10 classes" '{"label":10}'
post 400 label "label -2" '{"label":-2}'
post 400 label "label true" '{"label":true}'
post 400 priority "priority as a string" '{"priority":"high"}'
post 400 priority "priority 1e9" '{"priority":1000000000}'
post 400 deadline_ms "deadline_ms -5" '{"deadline_ms":-5}'
post 400 sampler "sampler ddim" '{"sampler":"ddim"}'
post 400 id "an id with a slash" '{"id":"../etc/passwd"}'
post 400 id "an empty id" '{"id":""}'
post 400 id "an id of 65 characters" "{\"id\":\"`printf '%065d' 0`\"}"
post 400 id "the id '.' (URL-normalizing clients cannot reach /v1/images/.)" '{"id":"."}'
post 400 id "the id '..'" '{"id":".."}'
post 400 wait "?wait=maybe" '{"n":1}' '?wait=maybe'
post 400 foo "an unknown query argument" '{"n":1}' '?foo=1'
post 400 query "a query argument without a name (?=1)" '{"steps":1}' '?=1'
post 400 query "a query argument whose name decodes to a NUL (?%00wait=zz)" '{"steps":1}' \
    '?%00wait=zz'
post 400 query "?wait=1%00 (a NUL in a value)" '{"steps":1}' '?wait=1%00'
printf '{"n":1,"id":"a\000b"}' >"$dir/nul.json"
expect 400 body "a NUL inside a string" -X POST "$mainbase/v1/images" --data-binary @"$dir/nul.json"
printf '{"id":"\377\376"}' >"$dir/utf8.json"
expect 400 body "invalid UTF-8" -X POST "$mainbase/v1/images" --data-binary @"$dir/utf8.json"
"$PY" -c 'print("[" * 100000 + "]" * 100000)' >"$dir/deep.json"
expect 413 body "100000 nested arrays (200 kB)" -X POST "$mainbase/v1/images" --data-binary @"$dir/deep.json"
"$PY" -c 'print("[" * 20000 + "]" * 20000)' >"$dir/deep40k.json"
expect 400 body "20000 nested arrays (40 kB)" -X POST "$mainbase/v1/images" --data-binary @"$dir/deep40k.json"
head -c 100000 /dev/zero | tr '\0' ' ' >"$dir/100k"
expect 413 body "a 100 kB body" -X POST "$mainbase/v1/images" --data-binary @"$dir/100k"
head -c 3000000 /dev/zero | tr '\0' ' ' >"$dir/3m"
expect 413 body "a 3 MB body" -X POST "$mainbase/v1/images" --data-binary @"$dir/3m"
expect 413 body "a 3 MB chunked body (no length)" -X POST -H 'Transfer-Encoding: chunked' \
    "$mainbase/v1/images" --data-binary @"$dir/3m"
# the server answers 413 and closes while curl is still sending: curl may then report the send
# failure (code 000) although the answer arrived; the answer is what counts
got=`curl -s -o "$dir/body" -w '%{http_code}' -X POST -H 'Expect:' "$mainbase/v1/images" \
    --data-binary @"$dir/3m"`
answered=no
case $got in 413 | 000) grep -q '"error":"the body is larger than .*"field":"body"' "$dir/body" && answered=yes ;; esac
check "a 3 MB body without Expect: 100-continue -> 413 naming 'body' (curl: $got)" [ $answered = yes ]
expect 404 path "an unknown path" "$mainbase/nope"
expect 404 path "the root" "$mainbase/"
expect 404 path "/v1/images/ with no id" "$mainbase/v1/images/"
expect 404 path "a path with .. in it" --path-as-is "$mainbase/v1/images/../../etc/passwd"
expect 400 id "GET /v1/images/." --path-as-is "$mainbase/v1/images/."
expect 400 id "GET /v1/images/.." --path-as-is "$mainbase/v1/images/.."
expect 400 id "GET /v1/images/%2e%2e" "$mainbase/v1/images/%2e%2e"
expect 404 id "GET /v1/images/... (not a dot-segment)" "$mainbase/v1/images/..."
# a NUL in the decoded path used to end the URL there: dupid%00junk read request dupid
curl -s -o /dev/null -X POST "$mainbase/v1/images" -d '{"id":"dupid","steps":1}'
expect 400 path "GET /v1/images/dupid%00junk (dupid exists)" "$mainbase/v1/images/dupid%00junk"
expect 400 path "GET /healthz%00x" "$mainbase/healthz%00x"
expect 400 path "GET /metrics%00" "$mainbase/metrics%00"
expect 400 path "GET /v1/images%00/dupid" "$mainbase/v1/images%00/dupid"
expect 400 Host "HTTP/1.1 without Host (curl -H 'Host:')" -H 'Host:' "$mainbase/healthz"
expect 404 id "an unknown id" "$mainbase/v1/images/no-such-request"
expect 405 method "DELETE /v1/images" -X DELETE "$mainbase/v1/images"
expect 405 method "GET /v1/images" "$mainbase/v1/images"
expect 405 method "POST /healthz" -X POST "$mainbase/healthz" -d x
expect 405 method "PUT /metrics" -X PUT "$mainbase/metrics" -d x
expect 405 method "a made-up method" -X FROB "$mainbase/v1/images"
long=`head -c 100000 /dev/zero | tr '\0' a`
expect 414 - "a URL of 100 kB" "$mainbase/v1/images/$long"
expect 431 - "a header of 100 kB" -H "X-Junk: $long" "$mainbase/healthz"
if [ -n "$PY" ]; then
    # bytes curl will not send: garbage, a request cut short, a bad chunk size, slow headers
    "$PY" - "$port" <<'EOF' >"$dir/raw.log" 2>&1
import socket, sys, time
port = int(sys.argv[1])
def send(data, wait=0.2):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(data)
        time.sleep(wait)
        s.shutdown(socket.SHUT_WR)
        while s.recv(65536): pass
    except OSError: pass
    s.close()
send(b"\x00\xff garbage \r\n\r\n")
send(b"GET /healthz HTTP/9.9\r\n\r\n")
send(b"POST /v1/images HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"n\":1")
send(b"POST /v1/images HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
send(b"POST /v1/images HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n")
send(b"POST /v1/images HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n")
send(b"GET /healthz HTTP/1.1\r\nHo")
print("sent")
EOF
    check "raw garbage, cut requests, bad lengths and chunk sizes sent" grep -q sent "$dir/raw.log"
fi
if [ -n "$PY" ]; then
    wait $framing
    framed te-gzip "501 Transfer-Encoding closed" "Transfer-Encoding: gzip (was held until the client left)"
    framed te-chunked-chunked "501 Transfer-Encoding closed" "Transfer-Encoding: chunked, chunked"
    framed te-twice "501 Transfer-Encoding closed" "two Transfer-Encoding: chunked headers"
    framed te-and-cl "400 Transfer-Encoding closed" "Transfer-Encoding: chunked beside a Content-Length"
    framed two-cl "400 Content-Length closed" "Content-Length 11, then 5 (the first won)"
    framed no-host "400 Host closed" "HTTP/1.1 without Host"
    framed two-hosts "400 Host closed" "HTTP/1.1 with two Host headers"
    framed http10-no-host "200 - closed" "HTTP/1.0 without Host"
    framed chunked "202 - closed" "a chunked body"
    # libmicrohttpd skips a line that starts with a NUL as a blank one and waits for a request
    # line: the 10 s a header has ends it, where --connection-timeout (600 s) did
    framed garbage "none - closed" "a garbage request line, closed unanswered within 25 s"
fi
check "the server is alive after the hostile table" [ "`curl -s $mainbase/healthz`" = ok ]

# a good request, waited for: a PNG grid of 4 images of 32 (2 x 2 with 2 pixels of padding)
code=`curl -s -o "$dir/good.png" -D "$dir/good.h" -w '%{http_code}' -X POST \
    "$mainbase/v1/images?wait=1" -d '{"label":3,"n":4,"resolution":32,"steps":2,"cfg":1.5,"seed":7}'`
check "POST ?wait=1 -> 200 ($code)" [ "$code" = 200 ]
check "... as image/png" grep -qi '^content-type: image/png' "$dir/good.h"
check "... a PNG that decodes" pngs_ok "$dir/good.png"
command -v pngcheck >/dev/null 2>&1 || skip "pngcheck is not installed: Python's zlib check only (apt-get install pngcheck)"
size=`png_size "$dir/good.png"`
check "... of 70x70 pixels ($size)" [ "$size" = 70x70 ]
curl -s -o "$dir/again.png" -X POST "$mainbase/v1/images?wait=1" \
    -d '{"label":3,"n":4,"resolution":32,"steps":2,"cfg":1.5,"seed":7}'
check "the same seed gives the same bytes" cmp -s "$dir/good.png" "$dir/again.png"

# submitted without waiting, then read by id
curl -s -o "$dir/post.json" -D "$dir/post.h" -X POST "$mainbase/v1/images" -d '{"n":1,"steps":2}'
id=`sed -n 's/.*"id":"\([^"]*\)".*/\1/p' "$dir/post.json"`
check "POST -> 202 with an id ($id) and a Location" grep -qi "^location: /v1/images/$id" "$dir/post.h"
code=`curl -s -o "$dir/byid.png" -w '%{http_code}' "$mainbase/v1/images/$id?format=png&wait=1"`
check "GET /v1/images/ID?format=png&wait=1 -> 200 ($code), a PNG" pngs_ok "$dir/byid.png"
curl -s -o "$dir/byid.json" "$mainbase/v1/images/$id"
check "GET /v1/images/ID -> JSON status done" grep -q '"status":"done"' "$dir/byid.json"
check "... with the seed the server chose" grep -q '"seed":[0-9]' "$dir/byid.json"
expect 202 - "a client's own id" -X POST "$mainbase/v1/images" -d '{"id":"mine-1","steps":2}'
expect 409 id "the same id again" -X POST "$mainbase/v1/images" -d '{"id":"mine-1","steps":2}'
expect 400 format "?format=gif" "$mainbase/v1/images/mine-1?format=gif"

# /metrics: the names, and counts that went up
curl -s "$mainbase/metrics" >"$dir/m1"
missing=""
for name in tidal_queue_length tidal_requests_total tidal_request_latency_seconds_bucket \
    tidal_request_latency_seconds_count tidal_slo_violations_total tidal_ranks \
    tidal_http_responses_total; do
    grep -q "^$name" "$dir/m1" || missing="$missing $name"
done
check "/metrics has every metric (missing:${missing:- none})" [ -z "$missing" ]
check "/metrics: ranks per role" grep -q '^tidal_ranks{role="serving"} 1' "$dir/m1"
done1=`sed -n 's/^tidal_requests_total{status="done",source="http"} //p' "$dir/m1"`
bad1=`sed -n 's/^tidal_http_responses_total{code="400"} //p' "$dir/m1"`
check "/metrics counts the 400s answered ($bad1)" [ "${bad1:-0}" -ge 30 ]
curl -s -o /dev/null -X POST "$mainbase/v1/images?wait=1" -d '{"steps":1}'
curl -s "$mainbase/metrics" >"$dir/m2"
done2=`sed -n 's/^tidal_requests_total{status="done",source="http"} //p' "$dir/m2"`
check "/metrics: requests done went up ($done1 -> $done2)" [ "${done2:-0}" -gt "${done1:-0}" ]

# 200 concurrent requests, all answered with a PNG
mkdir "$dir/c"
t0=`date +%s`
seq 1 200 | xargs -P 200 -I{} curl -s -o "$dir/c/{}.png" -w '%{http_code}\n' --max-time 120 \
    -X POST "$mainbase/v1/images?wait=1" -d '{"n":1,"resolution":32,"steps":2,"seed":{}}' \
    >"$dir/c/codes"
n200=`grep -c '^200$' "$dir/c/codes"`
check "200 concurrent requests: all 200 ($n200) in $((`date +%s` - t0)) s" [ "$n200" = 200 ]
check "... and their 200 PNGs decode" pngs_ok "$dir"/c/*.png

# a bearer token: 401 with WWW-Authenticate without it or with a wrong one; /healthz is open
start_server token --token s3cret
tokbase=$base
expect 401 authorization "no token" -X POST "$tokbase/v1/images" -d '{"steps":1}'
check "... with WWW-Authenticate: Bearer" sh -c "curl -s -D - -o /dev/null '$tokbase/metrics' | grep -qi '^www-authenticate: bearer'"
expect 401 authorization "a wrong token" -H 'Authorization: Bearer s3cre' "$tokbase/metrics"
expect 401 authorization "a longer wrong token" -H 'Authorization: Bearer s3cret!' "$tokbase/metrics"
expect 401 authorization "the token as Basic" -H 'Authorization: Basic s3cret' "$tokbase/metrics"
expect 200 - "the right token" -H 'Authorization: Bearer s3cret' "$tokbase/metrics"
expect 200 - "/healthz without a token" "$tokbase/healthz"
expect 200 - "a request with the token" -H 'Authorization: Bearer s3cret' -X POST \
    "$tokbase/v1/images?wait=1" -d '{"steps":1}'
stop_server $pid
check "token server: SIGTERM -> exit 0 ($rc)" [ $rc = 0 ]

# a full queue: 2 places, slow requests, a flood -> 503 with Retry-After
start_server full --queue-max 2
fullbase=$base fullpid=$pid
for i in 1 2 3 4 5 6 7 8; do
    curl -s -D "$dir/full$i.h" -o "$dir/full$i.json" -w '%{http_code}\n' -X POST "$fullbase/v1/images" \
        -d "{\"n\":16,\"steps\":15,\"seed\":$i}"
done >"$dir/full.codes"
n503=`grep -c '^503$' "$dir/full.codes"`; n202=`grep -c '^202$' "$dir/full.codes"`
check "a flood of 8 on a queue of 2: some 202 ($n202), the rest 503 ($n503)" \
    [ "$n202" -ge 2 -a "$n503" -ge 3 -a $((n202 + n503)) = 8 ]
check "... 503 carries Retry-After" sh -c "grep -li '^retry-after: [0-9]' '$dir'/full*.h | grep -q ."
check "the full server still answers /healthz" [ "`curl -s $fullbase/healthz`" = ok ]
# a client waiting on a queued request when the server stops gets 503, not a hang
qid=`cat "$dir"/full*.json | sed -n 's/.*"id":"\([^"]*\)".*"position":1.*/\1/p' | tail -n 1`
curl -s -o "$dir/waiter.json" -w '%{http_code}' --max-time 60 \
    "$fullbase/v1/images/$qid?format=png&wait=1" >"$dir/waiter.code" &
waiter=$!
sleep 0.3
stop_server $fullpid
check "full server: SIGTERM with requests waiting -> exit 0 ($rc)" [ $rc = 0 ]
check "... and says how it stopped" grep -q 'stopping (SIGTERM)' "$dir/full.out"
wait $waiter
check "a client waiting on a queued request gets 503 at shutdown (`cat "$dir/waiter.code"`: `head -c 100 "$dir/waiter.json"`)" \
    sh -c "[ \"\`cat '$dir/waiter.code'\`\" = 503 ] && grep -q '\"field\":\"queue\"' '$dir/waiter.json'"

# cannot bind: the address is named, exit 1
"$TIDAL" serve --ckpt "$ckpt" --listen "127.0.0.1:${mainbase##*:}" --max-resolution 32 \
    >/dev/null 2>"$dir/bind.err"; rc=$?
check "a port in use: exit 1 naming it ($rc: `head -c 120 "$dir/bind.err"`)" \
    sh -c "[ $rc = 1 ] && grep -q '127.0.0.1:${mainbase##*:}' '$dir/bind.err'"
"$TIDAL" serve >/dev/null 2>&1; rc=$?
check "no --ckpt: exit 2 ($rc)" [ $rc = 2 ]
"$TIDAL" serve --ckpt "$ckpt" --max-resolution 48 >/dev/null 2>&1; rc=$?
check "--max-resolution 48: exit 2 ($rc)" [ $rc = 2 ]
"$TIDAL" serve --ckpt "$dir/none.h5" --listen 127.0.0.1:0 >/dev/null 2>&1; rc=$?
check "a missing checkpoint: exit 1 ($rc)" [ $rc = 1 ]

# a trace, replayed alone, with its summary
cat >"$dir/trace.jsonl" <<'EOF'
{"at_ms": 0, "label": 1, "n": 1, "resolution": 32, "steps": 2, "cfg": 1.5, "seed": 1}
{"at_ms": 50, "n": 2, "resolution": 32, "steps": 2, "seed": 2}

{"at_ms": 20, "label": 3, "n": 1, "resolution": 32, "steps": 2, "seed": 3, "deadline_ms": 1}
{"at_ms": 100, "n": 1, "resolution": 32, "steps": 2, "seed": 4, "priority": 5}
EOF
"$TIDAL" serve --ckpt "$ckpt" --listen none --trace "$dir/trace.jsonl" --exit-after-trace \
    --max-resolution 32 >"$dir/trace.out" 2>&1; rc=$?
check "a trace with --exit-after-trace: exit 0 ($rc)" [ $rc = 0 ]
check "... a summary of its 4 requests" grep -q 'trace: 4 requests, 4 done, 0 failed' "$dir/trace.out"
check "... with latency percentiles" grep -q 'latency p50 [0-9.]* s, p95 [0-9.]* s, p99' "$dir/trace.out"
check "... and the missed deadline of 1 ms" grep -q '[1-9][0-9]* SLO violations' "$dir/trace.out"
echo '{"at_ms": 0, "n": 99}' >"$dir/bad.jsonl"
"$TIDAL" serve --ckpt "$ckpt" --listen none --trace "$dir/bad.jsonl" --max-resolution 32 \
    >/dev/null 2>"$dir/badtrace.err"; rc=$?
check "a bad trace line: exit 2 naming line and field ($rc)" \
    sh -c "[ $rc = 2 ] && grep -q 'bad.jsonl:1: field .n.' '$dir/badtrace.err'"

check "the main server still answers /healthz after all of that" [ "`curl -s $mainbase/healthz`" = ok ]
stop_server $main
check "main server: SIGTERM -> exit 0 ($rc)" [ $rc = 0 ]
check "... with a summary line" grep -q 'http: [0-9]* requests, [0-9]* done' "$dir/main.out"
grep -q 'AddressSanitizer\|runtime error' "$dir"/*.err && not_ok "sanitizer reports: `grep -l 'AddressSanitizer\|runtime error' "$dir"/*.err`"
done_testing
