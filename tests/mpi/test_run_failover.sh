#!/bin/sh
# A training member that dies does not end `tidal run`: on 4 ranks (the coordinator and 3
# workers) under tools/mpirun-recover, with a bursty trace moving ranks between training and
# serving, TIDAL_FAULT kills a member in its backward pass, the training leader (the first
# member, which writes the checkpoints), and two members at once. The survivors report to the
# coordinator, which names them; they redo the step that failed on the same global batch. Every
# request completes, the job exits 0 and names the dead ranks, training reaches its step count
# with the losses of `tidal train` alone, and the checkpoints verify.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
train="--model tiny --batch 8 --micro-batch 4 --warmup 100 --seed 3"

burst_trace "$dir/burst.jsonl"

"$TIDAL" train $train --steps 150 --val-every 0 --log-every 25 --ckpt-every 1000 \
    --out "$dir/ref" >"$dir/ref.out" 2>&1
check "the reference: training alone" [ -s "$dir/ref/loss.csv" ]

# run4 NAME FAULT: `tidal run` on 4 ranks into $dir/NAME with TIDAL_FAULT=FAULT
run4() {
    TIDAL_MPIRUN_FLAGS="-x TIDAL_FAULT=$2" TIDAL_TEST_TIMEOUT=150 \
        TIDAL_LAUNCH="$abs_top_srcdir/tools/mpirun-recover" \
        tidal_mpirun 4 "$TIDAL" run $train --train-steps 150 --ckpt-every 50 --listen none \
        --trace "$dir/burst.jsonl" --exit-after-trace --out "$dir/$1" --max-resolution 32 \
        --progress-every 0 --cooldown 2 >"$dir/$1.out" 2>&1
    echo $? >"$dir/$1.rc"
}

same_losses() { # NAME: its losses at the reference's logged steps, within 1e-5
    python3 - "$dir/$1/loss.csv" "$dir/ref/loss.csv" <<'PY'
import csv, sys
run = {int(r[0]): float(r[1]) for r in csv.reader(open(sys.argv[1]))}
ref = {int(r[0]): float(r[1]) for r in list(csv.reader(open(sys.argv[2])))[1:]}
ks = sorted(ref)
missing = [k for k in ks if k not in run]
worst = max((abs(run[k] - ref[k]) / abs(ref[k]) for k in ks if k in run), default=1)
print(f"# steps {ks}: largest relative difference {worst:.3g}, missing {missing}")
sys.exit(0 if ks and not missing and worst < 1e-5 else 1)
PY
}

# survived NAME WHAT DEAD...: the checks of a run whose ranks DEAD were killed
survived() {
    name=$1 what=$2; shift 2
    rc=`cat "$dir/$name.rc"`
    check "$what: it happened" grep -q "TIDAL_FAULT: SIGKILL" "$dir/$name.out"
    check "$what: the job exits 0 (rc=$rc)" [ "$rc" = 0 ]
    [ "$rc" = 0 ] || grep -E "warn|error|tidal(\[[0-9]+\])?: " "$dir/$name.out" | head -n 60 | sed 's/^/# /'
    check "$what: every request of the trace completed" \
        grep -q "trace: 24 requests, 24 done, 0 failed" "$dir/$name.out"
    check "$what: training finished at step 150" \
        grep -q "training finished at step 150" "$dir/$name.out"
    check "$what: the coordinator regrouped training" grep -q "training lost ranks" "$dir/$name.out"
    grep "training lost ranks" "$dir/$name.out" | sed 's/^.*warn: /# /'
    for r in "$@"; do
        check "$what: the closing lines name rank $r" \
            grep -qE "rank[s]? ([0-9, ]*)?$r[ ,:(]|ranks? died: ([0-9, ]*)?$r " "$dir/$name.out"
    done
    check "$what: losses equal those of training alone" same_losses $name
    check "$what: the checkpoints verify" "$TIDAL" ckpt verify "$dir/$name"/ckpt/ckpt-*.h5
}

run4 member train.backward:3:20:KILL
survived member "SIGKILL of training member 3" 3
# the leader at its 3rd step, while all 3 workers still train (before the first burst)
run4 leader train.backward:1:3:KILL
survived leader "SIGKILL of the training leader (rank 1)" 1
run4 two train.backward:2+3:20:KILL
survived two "SIGKILL of ranks 2 and 3 at once" 2 3
done_testing
