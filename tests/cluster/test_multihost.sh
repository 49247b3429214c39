#!/bin/sh
# tidal across hosts, on an emulated cluster of 2 hosts x 2 ranks (tools/cluster): the ranks are
# on both hosts (tidal info); `tidal train` completes with the f32 and the dynamiq all-reduce, its
# gradients cross both hosts' links (dynamiq with fewer bytes), and dynamiq's final loss is close
# to f32's; `tidal serve` moves requests' state between executors on different hosts and its
# PNGs are byte for byte those of one host; `tidal run` (a coordinator and 4 workers, 2 on each
# host) moves workers to serving for a burst and back to training, completes every request, and
# its losses are those of `tidal train` alone.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"

# ---- run inside the cluster ------------------------------------------------------------------
info4() { cluster_mpirun 4 "$TIDAL" info; }
train4() { cluster_mpirun 4 "$TIDAL" train "$@"; }
serve4() { # DIR IDS ARGS...: cluster_serve4, then what the hosts' links sent
    cluster_serve4 "$@"
    [ -n "${TIDAL_CLUSTER:-}" ] && echo "sent: h0 `cluster_sent h0` h1 `cluster_sent h1` bytes"
    return 0
}
run5() { cluster_mpirun 5 "$TIDAL" run "$@"; }
cluster_enter "$@"

# ---- the test ----------------------------------------------------------------------------------
cluster_check
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
layout="--hosts 2 --ranks-per-host 2 --rank-cpu 0.5 --link 1gbit"

# sent HOST FILE: the MiB host HOST's link sent, from tools/cluster's last lines
sent() { sed -n "s/^cluster: host $1 link: \([0-9.]*\) MiB sent.*/\1/p" "$2"; }
links_used() { # FILE: both hosts sent something over their links
    awk -v a="`sent h0 "$1"`" -v b="`sent h1 "$1"`" 'BEGIN { exit !(a > 0 && b > 0) }'
}

# ---- where the ranks are -----------------------------------------------------------------------
cluster_run $layout -- info4 >"$dir/info.out" 2>"$dir/info.err"
rc=$?
sed -n 's/^rank=\([0-9]*\) .* host=\([^ ]*\) .*/\1 \2/p' "$dir/info.out" | sort -n >"$dir/hosts"
check "tidal info on 2 x 2 (rc=$rc): ranks 0, 1 on h0 and 2, 3 on h1 (`tr '\n' ' ' <"$dir/hosts"`)" \
    [ "`tr '\n' ' ' <"$dir/hosts"`" = "0 h0 1 h0 2 h1 3 h1 " ]

# ---- training with f32 and with dynamiq --------------------------------------------------------
train="--model tiny --resolution 32 --steps 20 --batch 16 --micro-batch 2 --warmup 0 --lr 2e-3 --val-every 0 --log-every 1 --ckpt-every 0"
for ar in f32 dynamiq; do
    cluster_run $layout -- train4 $train --allreduce $ar --out "$dir/$ar" \
        >"$dir/$ar.out" 2>"$dir/$ar.err"
    rc=$?
    check "$ar: tidal train on 2 hosts x 2 ranks completes (rc=$rc)" \
        sh -c '[ $1 = 0 ] && grep -q "20 steps of 16 images on 4 ranks" "$2" &&
               grep -q "^tidal train: 20 steps" "$2"' _ $rc "$dir/$ar.out"
    [ $rc = 0 ] || tail -n 5 "$dir/$ar.err" | sed 's/^/# /'
    check "$ar: both hosts' links carried its all-reduce (h0 `sent h0 "$dir/$ar.err"` MiB, h1 `sent h1 "$dir/$ar.err"` MiB sent)" \
        links_used "$dir/$ar.err"
done
check "dynamiq sent less than half of f32's bytes over the links" \
    awk -v d="`sent h0 "$dir/dynamiq.err"`" -v f="`sent h0 "$dir/f32.err"`" \
    'BEGIN { exit !(d > 0 && d < f / 2) }'
# the mean loss of the last 5 steps: the same data and noise, gradients rounded on the way
python3 - "$dir/f32/loss.csv" "$dir/dynamiq/loss.csv" >"$dir/close" 2>&1 <<'EOF'
import csv, sys
tail = lambda p: [float(r["loss"]) for r in csv.DictReader(open(p))][-5:]
f, d = tail(sys.argv[1]), tail(sys.argv[2])
mf, md = sum(f) / len(f), sum(d) / len(d)
print(f"last 5 steps: f32 {mf:.5f}, dynamiq {md:.5f}, {abs(md - mf) / mf:.2%} apart")
sys.exit(0 if len(f) == len(d) == 5 and abs(md - mf) <= 0.02 * mf else 1)
EOF
rc=$?
sed 's/^/# /' "$dir/close"
check "dynamiq's final loss is within 2% of f32's" [ $rc = 0 ]

# ---- serving: requests' state moves between hosts ------------------------------------------------
tiny_ckpt "$dir/ckpt"
ckpt="$dir/ckpt/model.h5"
# a cost model with degree 1 only: every task on one rank, so that a move changes the rank, not
# the arithmetic (the PNG must not depend on where the steps ran)
"$TIDAL" profile --model tiny --sides 32 --reps 1 --out "$dir/cost.json" >"$dir/profile.out" 2>&1
check "a tiny checkpoint and a degree-1 cost model" [ -s "$ckpt" -a -s "$dir/cost.json" ]
# four long requests on three executors, then short ones that srtf (least time left first) puts
# ahead of them at their step boundaries: a long one resumes on whichever executor frees first
ids=""
: >"$dir/trace.jsonl"
for j in 0 1 2 3; do
    ids="$ids l$j"
    echo "{\"at_ms\": 0, \"id\": \"l$j\", \"label\": $j, \"n\": 1, \"resolution\": 32, \"steps\": $((14 + 2 * j)), \"sampler\": \"euler\", \"seed\": $((1 + j))}" >>"$dir/trace.jsonl"
done
i=0
while [ $i -lt 20 ]; do
    ids="$ids s$i"
    echo "{\"at_ms\": $((60 + 40 * i)), \"id\": \"s$i\", \"label\": $((i % 10)), \"n\": 1, \"resolution\": 32, \"steps\": 2, \"sampler\": \"euler\", \"seed\": $((10 + i))}" >>"$dir/trace.jsonl"
    i=$((i + 1))
done
mkdir "$dir/one" "$dir/two"
serve="--ckpt $ckpt --trace $dir/trace.jsonl --policy srtf --cost $dir/cost.json --log-level debug"
serve4 "$dir/one" "$ids" $serve >"$dir/serve1.out" 2>&1
# every move, and those whose old and new ranks are on different hosts: rank 0's log names the
# ranks of every task ("request ID: step_chunk (moved) on ranks A..B (N)")
count_moves() {
    awk 'NR == FNR { host[$1] = $2; next }
         /debug: request .*: [a-z_]* (\(moved\) )?on ranks/ {
            id = $0; sub(/.*request /, "", id); sub(/:.*/, "", id)
            r = $0; sub(/.* on ranks /, "", r); split(r, a, /[. ]+/); h = host[a[1]]
            if (/\(moved\)/) { m++; if ((id in last) && last[id] != h) x++ }
            last[id] = h }
         END { print m + 0, x + 0 }' "$dir/hosts" "$dir/two/serve.out"
}
# Where a preempted request resumes depends on when the short ones reach a step boundary, so a
# loaded machine can see every move stay on one host: a run without a move between hosts shows
# nothing and is tried again (at most 3 runs); what is checked is the run that had one.
tries=0 xmoves=0
while [ $tries -lt 3 ] && [ "$xmoves" = 0 ]; do
    tries=$((tries + 1))
    rm -f "$dir"/two/*
    cluster_run $layout -- serve4 "$dir/two" "$ids" $serve >"$dir/serve2.out" 2>"$dir/serve2.err"
    read moves xmoves <<EOF2
`count_moves`
EOF2
    echo "# two hosts, run $tries: $moves moves, $xmoves between hosts"
done
for w in one two; do # one host, two hosts
    check "$w: the 24 requests answered 200" [ "`grep -c ' 200$' "$dir/$w/codes"`" = 24 ]
done
[ "`grep -c ' 200$' "$dir/two/codes"`" = 24 ] || tail -n 20 "$dir/two/serve.out" | sed 's/^/# /'
check "requests' state moved between executors on different hosts ($moves moves, $xmoves between hosts, run $tries of at most 3)" \
    [ "$xmoves" -gt 0 ]
bytes=`sed -n 's/^sent: //p' "$dir/serve2.out"`
check "both hosts' links carried it ($bytes)" \
    sh -c 'set -- $1; [ "${2:-0}" -gt 0 ] && [ "${4:-0}" -gt 0 ]' _ "$bytes"
same=yes
for id in $ids; do cmp -s "$dir/one/$id.png" "$dir/two/$id.png" || same=no; done
check "every PNG on 2 hosts is byte for byte the one of one host" [ $same = yes ]

# ---- tidal run: workers move to serving for a burst and back, across hosts ---------------------
# rank 0 (the coordinator) and workers 1, 2 on h0; workers 3, 4 on h1
python3 - "$dir/burst.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(10):
        f.write(json.dumps({"at_ms": 1500 + 100 * i, "label": i % 10, "n": 1, "resolution": 32,
                            "steps": 6, "sampler": "euler", "seed": 100 + i,
                            "deadline_ms": 3000}) + "\n")
EOF
# training must outlast the burst (1.5 to 3 s) and the cooldown after it: 80 steps took 3.0 s
# once gfc's small broadcasts went flat, and no worker came back to a finished run; 160 take
# about 6. Not many more: the sums' order changes with the members, and by step 280 the
# rounding has grown past the 1e-5 the losses are held to (2.4e-5 in a run of 320 steps).
job="--model tiny --batch 8 --micro-batch 4 --warmup 100 --seed 3"
cluster_run --hosts 2 --ranks-per-host 2 --extra-ranks 1 --rank-cpu 0.4 --link 1gbit -- \
    run5 $job --train-steps 160 --ckpt-every 80 --listen none --trace "$dir/burst.jsonl" \
    --exit-after-trace --out "$dir/run" --max-resolution 32 --progress-every 0 --cooldown 1 \
    >"$dir/run.out" 2>"$dir/run.err"
rc=$?
check "tidal run on 2 hosts x 2 ranks + 1 exits 0 (rc=$rc)" [ $rc = 0 ]
[ $rc = 0 ] || tail -n 20 "$dir/run.out" "$dir/run.err" | sed 's/^/# /'
check "every request of the burst completed" \
    grep -q "trace: 10 requests, 10 done, 0 failed" "$dir/run.out"
grep "moves to serving," "$dir/run.out" | sed 's/^/# /'
check "workers moved to serving and back to training" \
    grep -qE "tidal run: [1-9][0-9]* moves to serving, [1-9][0-9]* to training" "$dir/run.out"
check "the links carried it (h0 `sent h0 "$dir/run.err"` MiB, h1 `sent h1 "$dir/run.err"` MiB sent)" \
    links_used "$dir/run.err"
"$TIDAL" train $job --steps 160 --val-every 0 --log-every 20 --ckpt-every 1000 \
    --out "$dir/ref" >"$dir/ref.out" 2>&1
cluster_losses_equal "$dir/run/loss.csv" "$dir/ref/loss.csv" "$dir/cmp"
rc=$?
sed 's/^/# /' "$dir/cmp"
check "its losses while workers moved equal tidal train alone (within 1e-5)" [ $rc = 0 ]
done_testing
