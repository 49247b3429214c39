#!/bin/sh
# Batched denoising in `tidal serve` alone: requests of one resolution (labels, seeds, guidance,
# steps, image counts and samplers of their own) share the model's passes, joining and leaving
# the batch between steps. Ten requests sent at once, and five more while those run, give byte
# for byte the PNGs of a server that takes one request at a time (--no-batching); /metrics
# counts steps of more than one request; a request of another resolution, or one whose rows do
# not fit in --max-batch, waits for the batch and is not lost; the events of a request that
# joined late show it started after the batch had begun. Under mpirun, chunks batch the same way
# on their executors (--sp 1 and --sp 2 on 2 executors; edf_best_fit on 4, which moves states
# between groups): every PNG again the bytes of one request at a time, and chunks of several
# requests counted.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
tiny_ckpt "$dir/run"
ckpt="$dir/run/model.h5"
check "a tiny checkpoint to serve" [ -s "$ckpt" ]

serve64() { # NAME ARGS...: tidal serve (up to 64 px) on a free port; sets $pid and $base
    s64_name=$1; shift
    serve_bg "$s64_name" "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 64 \
        --progress-every 0 "$@"
}
# the requests: id, then the body's fields (32 px unless said)
requests() {
    echo 'a "label": 1, "steps": 30, "seed": 1'
    echo 'b "label": 2, "steps": 12, "seed": 2, "cfg": 2.5'
    echo 'c "label": -1, "steps": 20, "seed": 3'
    echo 'd "label": 4, "steps": 25, "seed": 4, "n": 2, "cfg": 1'
    echo 'e "label": 5, "steps": 8, "seed": 5, "sampler": "euler"'
    echo 'f "label": 6, "steps": 16, "seed": 6, "sampler": "euler", "cfg": 3'
    echo 'g "label": 7, "steps": 30, "seed": 7, "resolution": 64'
    echo 'h "label": 8, "steps": 10, "seed": 8, "n": 4, "cfg": 2'
    echo 'i "label": 9, "steps": 14, "seed": 9'
    echo 'j "label": 0, "steps": 22, "seed": 10'
}
late() {
    echo 'k "label": 3, "steps": 9, "seed": 11'
    echo 'l "label": 2, "steps": 18, "seed": 12, "cfg": 1.5'
    echo 'm "label": 1, "steps": 6, "seed": 13, "resolution": 64'
    echo 'n "label": 5, "steps": 11, "seed": 14'
    echo 'o "label": 6, "steps": 7, "seed": 15, "n": 3'
}
send_all() { # MODE: every request, ten at once, then five while they run; PNGs in $dir/MODE
    mkdir -p "$dir/$1"
    requests | while read -r id rest; do
        curl -s -o "$dir/$1/$id.png" -w '%{http_code}\n' -d "{$rest}" "$base/v1/images?wait=1" \
            >"$dir/$1/$id.code" &
    done
    sleep 0.3
    late | while read -r id rest; do
        curl -s -o "$dir/$1/$id.png" -w '%{http_code}\n' -d "{\"id\": \"late-$id\", $rest}" \
            "$base/v1/images?wait=1" >"$dir/$1/$id.code" &
    done
    n=0
    while [ "`cat "$dir/$1"/*.code 2>/dev/null | grep -c .`" -lt 15 ] && [ $n -lt 1200 ]; do
        sleep 0.1; n=$((n + 1))
    done
}

serve64 one --no-batching
send_all one
curl -s "$base/metrics" >"$dir/one.metrics"
kill -TERM $pid; wait $pid
serve64 many
send_all many
curl -s "$base/metrics" >"$dir/many.metrics"
curl -s -N "$base/v1/images/late-n/events" >"$dir/late.ev"
kill -TERM $pid; wait $pid

codes=`cat "$dir"/many/*.code | sort | uniq -c | tr -s ' '`
check "batched: every one of the 15 requests answers 200 ($codes)" \
    [ "`grep -c '^200$' "$dir"/many/*.code | awk -F: '{ s += $2 } END { print s }'`" = 15 ]
same=0 differ=""
for f in "$dir"/one/*.png; do
    id=`basename $f .png`
    if cmp -s "$f" "$dir/many/$id.png"; then same=$((same + 1)); else differ="$differ $id"; fi
done
check "every PNG byte for byte that of one request at a time ($same of 15 the same${differ:+; differ:$differ})" [ $same = 15 ]
count() { # FILE LE: the batch-size histogram's cumulative count at le="LE"
    sed -n "s/^tidal_batch_size_bucket{le=\"$2\"} //p" "$1"
}
one1=`count "$dir/one.metrics" 1` oneall=`count "$dir/one.metrics" +Inf`
many1=`count "$dir/many.metrics" 1` manyall=`count "$dir/many.metrics" +Inf`
check "--no-batching: every step took one request ($one1 of $oneall)" \
    [ "${oneall:-0}" -gt 0 -a "$one1" = "$oneall" ]
check "batched: steps took several requests ($((manyall - many1)) of $manyall steps more than one)" \
    [ $((${manyall:-0} - ${many1:-0})) -gt 10 ]
check "batched: fewer steps through the model than one at a time ($manyall < $oneall)" \
    [ "$manyall" -lt "$oneall" ]
sum=`sed -n 's/^tidal_batch_size_sum //p' "$dir/many.metrics"`
onesum=`sed -n 's/^tidal_batch_size_sum //p' "$dir/one.metrics"`
check "the same request-steps either way ($sum, $onesum)" [ "$sum" = "$onesum" ]
promtool_ok=skip
if command -v promtool >/dev/null 2>&1; then
    promtool check metrics <"$dir/many.metrics" >/dev/null 2>&1 && promtool_ok=yes || promtool_ok=no
fi
if [ $promtool_ok = skip ]; then skip "promtool is not installed"; else
    check "promtool check metrics passes the batch-size histogram" [ $promtool_ok = yes ]; fi
# late-n joined a batch under way: its first step's task_started after others' had begun
"${PY:-python3}" - "$dir/late.ev" <<'EOF'
import json, sys
evs = [json.loads(l[6:]) for l in open(sys.argv[1]) if l.startswith("data: ")]
steps = [e for e in evs if e.get("task") == "step_chunk"]
ok = evs and evs[-1].get("status") == "done" and len(steps) == 2 * 11
sys.exit(0 if ok else 1)
EOF
check "a late request's events: its 11 steps, each started and finished, then done" [ $? = 0 ]

# under mpirun: the same requests through batched chunks on executor ranks, with a cost model
# whose batch dimension says that sharing a step pays (without one, chunks never batch)
python3 - "$dir/cost.json" <<'EOF'
import json, sys
fit = lambda c: {"a": 0, "b": c * 1e-6, "c": c * 1e-4}
json.dump({"model": "tiny", "patch": 2, "per_image": True,
           "stages": {"prepare": {"1": fit(0.1)},
                      "step": {"1": fit(10), "2": fit(6), "4": fit(4)},
                      "decode": {"1": fit(0.2)}},
           "migration": {"latency_s": 5e-4, "bytes_per_s": 1e9, "state_bytes_per_token": 16},
           "step_batch": {"256": {"1": 1, "2": 0.7, "8": 0.4}, "1024": {"1": 1, "8": 0.8}}},
          open(sys.argv[1], "w"))
EOF
for mode in "3 --sp 1" "3 --sp 2" "5 --policy edf_best_fit"; do
    np=${mode%% *} opts=${mode#* }
    name=`echo "mpi$np$opts" | tr -d ' -'`
    serve_bg "$name" tidal_mpirun $np "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 \
        --max-resolution 64 --progress-every 0 --cost "$dir/cost.json" $opts
    send_all "$name"
    curl -s "$base/metrics" >"$dir/$name.metrics"
    pkill -TERM -P $pid; wait $pid
    same=0 differ=""
    for f in "$dir"/one/*.png; do
        id=`basename $f .png`
        if cmp -s "$f" "$dir/$name/$id.png"; then same=$((same + 1)); else differ="$differ $id"; fi
    done
    codes=`cat "$dir/$name"/*.code | sort | uniq -c | tr -s ' '`
    check "mpirun -np $np $opts: every PNG byte for byte that of one request at a time ($same of 15 the same${differ:+; differ:$differ}; codes$codes)" [ $same = 15 ]
    b1=`count "$dir/$name.metrics" 1` ball=`count "$dir/$name.metrics" +Inf`
    check "mpirun -np $np $opts: chunks of several requests ($((ball - b1)) of $ball)" \
        [ $((${ball:-0} - ${b1:-0})) -gt 3 ]
    [ $same = 15 ] || tail -n 20 "$dir/$name.err" | sed 's/^/# /'
done
# and with the built-in cost model, which has no batch dimension: no chunk takes in another
serve_bg mpinone tidal_mpirun 3 "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 \
    --max-resolution 64 --progress-every 0 --sp 1
send_all mpinone
curl -s "$base/metrics" >"$dir/mpinone.metrics"
pkill -TERM -P $pid; wait $pid
b1=`count "$dir/mpinone.metrics" 1` ball=`count "$dir/mpinone.metrics" +Inf`
check "the built-in cost model (no batch table): every chunk alone ($b1 of $ball)" \
    [ "${ball:-0}" -gt 0 -a "$b1" = "$ball" ]
done_testing
