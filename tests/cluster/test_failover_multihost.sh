#!/bin/sh
# A rank that dies on another host does not end the job, on an emulated cluster (tools/cluster):
# there no survivor on the coordinator's host can look up the victim's process, so it is found
# from its connection or from its silence. `tidal serve` on 2 hosts x 2 ranks (rank 0 and
# executor 1 on h0, executors 2 and 3 on h1): executor 3 killed (SIGKILL), or stopped (SIGSTOP,
# then SIGKILL once declared dead), at its 3rd step chunk; every request answers 200 with the
# PNG, byte for byte, of a run without the failure. `tidal run` on 2 hosts x 2 ranks + 1 (the
# coordinator and workers 1, 2 on h0; workers 3, 4 on h1): worker 4 killed in its backward pass
# while every worker trains; the survivors regroup across the hosts, training reaches its step
# count with the losses of `tidal train` alone, every request completes, and the job exits 0.
# Each run is under tools/mpirun-recover, as the job scripts launch.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"

# ---- run inside the cluster ------------------------------------------------------------------
serve4() { cluster_serve4 "$@"; }
run5() { cluster_mpirun 5 "$TIDAL" run "$@"; }
cluster_enter "$@"

# ---- the test ----------------------------------------------------------------------------------
cluster_check
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; exit 0; }
dir=`mktemp -d`
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
layout="--hosts 2 --ranks-per-host 2 --rank-cpu 0.5 --link 1gbit"
recover="$abs_top_srcdir/tools/mpirun-recover"

# ---- serving: an executor on the other host ----------------------------------------------------
tiny_ckpt "$dir/ckpt"
check "a tiny checkpoint to serve" [ -s "$dir/ckpt/model.h5" ]
ids=""
: >"$dir/trace.jsonl"
for i in 0 1 2 3 4 5 6 7; do # at once: every executor runs chunks
    ids="$ids r$i"
    echo "{\"at_ms\": $((5 * i)), \"id\": \"r$i\", \"label\": $i, \"n\": 1, \"resolution\": 32, \"steps\": 8, \"sampler\": \"euler\", \"seed\": $((i + 1))}" >>"$dir/trace.jsonl"
done
serve="--ckpt $dir/ckpt/model.h5 --trace $dir/trace.jsonl"
mkdir "$dir/ref"
cluster_serve4 "$dir/ref" "$ids" $serve >/dev/null 2>&1
check "one host, without a failure: 8 requests answer 200" [ "`grep -c ' 200$' "$dir/ref/codes"`" = 8 ]
for how in KILL STOP; do
    w="$dir/$how"
    mkdir "$w"
    [ $how = STOP ] && (stop_then_kill "$w/serve.out" "is dead (" "$dir/ckpt" "$w/rc" &)
    TIDAL_LAUNCH="$recover" TIDAL_MPIRUN_FLAGS="-x TIDAL_FAULT=serve.chunk:3:3:$how" \
        cluster_run $layout -- serve4 "$w" "$ids" $serve >"$w/cluster.out" 2>"$w/cluster.err"
    check "SIG$how of executor 3 on h1 at its 3rd chunk: it happened" \
        grep -q "TIDAL_FAULT: SIG$how at serve.chunk" "$w/serve.out"
    check "SIG$how: rank 0 (on h0) took rank 3 out of the pool" \
        grep -q "rank 3 is dead (.*): it leaves the pool, 2 of 3 executors are left" "$w/serve.out"
    grep -m 1 "rank 0 declared rank 3 dead" "$w/serve.out" | sed 's/^.*warn: /# /'
    check "SIG$how: every request answered 200" [ "`grep -c ' 200$' "$w/codes"`" = 8 ]
    [ "`grep -c ' 200$' "$w/codes"`" = 8 ] || { tr '\n' ' ' <"$w/codes"; echo
        grep -E "warn|error" "$w/serve.out" | tail -n 20; tail -n 5 "$w/cluster.err"; } | sed 's/^/# /'
    same=yes
    for id in $ids; do cmp -s "$dir/ref/$id.png" "$w/$id.png" || same=no; done
    check "SIG$how: every PNG is byte for byte the one of one host without a failure" [ $same = yes ]
    [ $same = yes ] || grep -E "warn|error" "$w/serve.out" | head -n 20 | sed 's/^/# /'
done

# ---- tidal run: a training member on the other host ---------------------------------------------
burst_trace "$dir/burst.jsonl"
job="--model tiny --batch 8 --micro-batch 4 --warmup 100 --seed 3"
"$TIDAL" train $job --steps 60 --val-every 0 --log-every 20 --ckpt-every 1000 \
    --out "$dir/tref" >"$dir/tref.out" 2>&1
check "the reference: training alone" [ -s "$dir/tref/loss.csv" ]
TIDAL_LAUNCH="$recover" TIDAL_MPIRUN_FLAGS="-x TIDAL_FAULT=train.backward:4:5:KILL" \
    cluster_run --hosts 2 --ranks-per-host 2 --extra-ranks 1 --rank-cpu 0.4 --link 1gbit -- \
    run5 $job --train-steps 60 --ckpt-every 30 --listen none --trace "$dir/burst.jsonl" \
    --exit-after-trace --out "$dir/run" --max-resolution 32 --progress-every 0 --cooldown 1 \
    >"$dir/run.out" 2>&1
rc=$?
check "SIGKILL of worker 4 on h1 in its 5th backward pass: it happened" \
    grep -q "TIDAL_FAULT: SIGKILL at train.backward" "$dir/run.out"
check "tidal run on 2 hosts x 2 ranks + 1 exits 0 (rc=$rc)" [ $rc = 0 ]
[ $rc = 0 ] || grep -E "warn|error|tidal(\[[0-9]+\])?: " "$dir/run.out" | head -n 40 | sed 's/^/# /'
check "the coordinator regrouped training without rank 4" \
    grep -q "training lost ranks 4: 3 members go on" "$dir/run.out"
grep "training lost ranks" "$dir/run.out" | sed 's/^.*warn: /# /'
check "every request of the trace completed" \
    grep -q "trace: 24 requests, 24 done, 0 failed" "$dir/run.out"
check "training finished at step 60" grep -q "training finished at step 60" "$dir/run.out"
cluster_losses_equal "$dir/run/loss.csv" "$dir/tref/loss.csv" "$dir/cmp"
rc=$?
sed 's/^/# /' "$dir/cmp"
check "its losses equal those of tidal train alone (within 1e-5)" [ $rc = 0 ]
check "the checkpoints verify" "$TIDAL" ckpt verify "$dir/run"/ckpt/ckpt-*.h5
done_testing
