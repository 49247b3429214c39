#!/bin/sh
# `tidal serve` under mpirun: rank 0 takes requests over HTTP and from a trace and places them on
# executor ranks, one per request or two in sequence parallel (--sp 2), or two with the guidance
# halves on one each (--cfg-parallel); a request served by one
# executor gives byte for byte the PNG a single-process server gives; SIGTERM to mpirun stops
# every rank.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
tiny_ckpt "$dir/run"
ckpt="$dir/run/model.h5"
check "a tiny checkpoint to serve" [ -s "$ckpt" ]

i=0
: >"$dir/t.jsonl"
while [ $i -lt 8 ]; do
    echo "{\"at_ms\": $((i * 5)), \"label\": $((i % 10)), \"n\": $((1 + i % 3)), \"resolution\": 32, \"steps\": 3, \"cfg\": 1.5, \"seed\": $i}" >>"$dir/t.jsonl"
    i=$((i + 1))
done
for sp in 1 2 2c; do
    extra=""
    [ $sp = 2c ] && extra="--cfg-parallel"
    tidal_mpirun 3 "$TIDAL" serve --ckpt "$ckpt" --listen none --trace "$dir/t.jsonl" \
        --exit-after-trace --sp ${sp%c} $extra --max-resolution 32 --progress-every 0 \
        >"$dir/sp$sp.out" 2>&1
    rc=$?
    check "a trace of 8 requests on 3 ranks, --sp ${sp%c} $extra: exit 0 (rc=$rc)" [ $rc = 0 ]
    check "--sp ${sp%c} $extra: all 8 done" grep -q "trace: 8 requests, 8 done, 0 failed" "$dir/sp$sp.out"
done

# one request over HTTP, the same from one process and from an executor rank
body='{"label": 7, "n": 2, "resolution": 32, "steps": 4, "cfg": 2.0, "seed": 11, "sampler": "euler"}'
serve_bg one "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 32 --progress-every 0
curl -s -o "$dir/one.png" -w '%{http_code}' -d "$body" "$base/v1/images?wait=1" >"$dir/one.code"
kill -TERM $pid; wait $pid
serve_bg many tidal_mpirun 3 "$TIDAL" serve --ckpt "$ckpt" --listen 127.0.0.1:0 --max-resolution 32 \
    --progress-every 0 --sp 1
curl -s -o "$dir/many.png" -w '%{http_code}' -d "$body" "$base/v1/images?wait=1" >"$dir/many.code"
curl -s -o "$dir/many2.png" -w '%{http_code}' -d "$body" "$base/v1/images?wait=1" >"$dir/many2.code"
check "HTTP under mpirun: 200 (`cat $dir/many.code`)" [ "`cat $dir/many.code`" = 200 ]
check "the PNG from an executor rank is byte for byte the single process's" cmp -s "$dir/one.png" "$dir/many.png"
check "and the same again (seeded)" cmp -s "$dir/many.png" "$dir/many2.png"
pkill -TERM -P $pid # mpirun, the background shell's child
wait $pid; rc=$?
check "SIGTERM to mpirun stops every rank (rc=$rc; mpirun answers 0 or 1)" [ $rc -le 1 ]
n=0
while pgrep -f "[t]idal serve --ckpt $ckpt" >/dev/null && [ $n -lt 100 ]; do sleep 0.1; n=$((n + 1)); done
check "no tidal serve left running" sh -c "! pgrep -f '[t]idal serve --ckpt $ckpt' >/dev/null"
done_testing
