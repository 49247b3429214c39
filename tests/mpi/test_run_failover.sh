#!/bin/sh
# A training member that dies does not end `tidal run`: on 4 ranks (the coordinator and 3
# workers) under tools/mpirun-recover, with a bursty trace moving ranks between training and
# serving, TIDAL_FAULT kills a member in its backward pass, the training leader (the first
# member, which writes the checkpoints; also while it holds a resize that the members do not
# know yet), and two members at once. The survivors report to the coordinator, which names them;
# they redo the step that failed on the same global batch. When the only member dies, a serving
# rank takes training up again from the newest checkpoint. Every request completes, the job
# exits 0 and names the dead ranks, training reaches its step count with the losses of `tidal
# train` alone, and the checkpoints verify. Rank 0's death ends the job, with exit 1, a line
# from each worker and the checkpoints intact.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
train="--model tiny --batch 8 --micro-batch 4 --warmup 100 --seed 3"

burst_trace "$dir/burst.jsonl"
# 200 steps and a 1.5 s cooldown, as tests/mpi/test_run.sh: training outlasts the first burst and
# its cooldown, so the second resize (back to training) happens before training ends (150 steps
# and 2 s once ended first, once gfc's single copy made the steps faster)
steps=200

"$TIDAL" train $train --steps $steps --val-every 0 --log-every 25 --ckpt-every 1000 \
    --out "$dir/ref" >"$dir/ref.out" 2>&1
check "the reference: training alone" [ -s "$dir/ref/loss.csv" ]

# run4 NAME FAULT [ARGS...]: `tidal run` on 4 ranks into $dir/NAME with TIDAL_FAULT=FAULT (none
# if empty)
run4() {
    r4_name=$1 r4_fault=${2:+-x TIDAL_FAULT=$2}
    shift 2
    TIDAL_MPIRUN_FLAGS="$r4_fault" TIDAL_TEST_TIMEOUT=150 \
        TIDAL_LAUNCH="$abs_top_srcdir/tools/mpirun-recover" \
        tidal_mpirun 4 "$TIDAL" run $train --train-steps $steps --ckpt-every 50 --listen none \
        --trace "$dir/burst.jsonl" --exit-after-trace --out "$dir/$r4_name" --max-resolution 32 \
        --progress-every 0 --cooldown 1.5 "$@" >"$dir/$r4_name.out" 2>&1
    echo $? >"$dir/$r4_name.rc"
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
# (SURVIVED_HOW, when set: the line of the coordinator that says how training went on)
survived() {
    name=$1 what=$2; shift 2
    rc=`cat "$dir/$name.rc"`
    check "$what: it happened" grep -q "TIDAL_FAULT: SIGKILL" "$dir/$name.out"
    check "$what: the job exits 0 (rc=$rc)" [ "$rc" = 0 ]
    [ "$rc" = 0 ] || grep -E "warn|error|tidal(\[[0-9]+\])?: " "$dir/$name.out" | head -n 60 | sed 's/^/# /'
    check "$what: every request of the trace completed" \
        grep -q "trace: 24 requests, 24 done, 0 failed" "$dir/$name.out"
    check "$what: training finished at step $steps" \
        grep -q "training finished at step $steps" "$dir/$name.out"
    how=${SURVIVED_HOW:-training lost ranks}
    check "$what: the coordinator says '$how'" grep -qE "$how" "$dir/$name.out"
    grep -E "$how" "$dir/$name.out" | sed 's/^.*warn: /# /'
    for r in "$@"; do
        check "$what: the closing lines name rank $r" \
            grep -qE "rank[s]? ([0-9, ]*)?$r[ ,:(]|ranks? died: ([0-9, ]*)?$r " "$dir/$name.out"
    done
    dead=`tail -n 1 "$dir/$name/timeline.csv" | cut -d, -f11`
    check "$what: the timeline's last row counts $# dead (${dead:-none})" [ "$dead" = $# ]
    check "$what: losses equal those of training alone" same_losses $name
    check "$what: the checkpoints verify" "$TIDAL" ckpt verify "$dir/$name"/ckpt/ckpt-*.h5
}

run4 member train.backward:3:20:KILL
survived member "SIGKILL of training member 3" 3
# the leader at its 3rd step, while all 3 workers still train (before the first burst)
# (on a loaded machine the first burst can come first and leave the leader training alone: then
# a serving rank takes training up again, from the first step, which is as right)
run4 leader train.backward:1:3:KILL
SURVIVED_HOW="training lost (ranks 1|every member \(ranks 1\))" \
    survived leader "SIGKILL of the training leader (rank 1)" 1
run4 two train.backward:2+3:20:KILL
survived two "SIGKILL of ranks 2 and 3 at once" 2 3
# the leader with a resize in hand that no member knows yet: the first (ranks move to serving
# for the first burst) and the second (they come back to training after it)
run4 shrink train.resize:1:1:KILL
survived shrink "SIGKILL of the leader holding a resize to serving" 1
run4 grow train.resize:1:2:KILL
survived grow "SIGKILL of the leader holding the second resize" 1
# the only training member: a static split keeps ranks 2 and 3 serving and rank 1 training
# alone (two micro-batches a step), killed in its 61st step, after the checkpoint of step 50;
# a serving rank takes training up again from that checkpoint
run4 orphan train.backward:1:121:KILL --realloc static --serve-ranks 2
SURVIVED_HOW="training starts again on ranks [23] from .*ckpt-00000050.h5" \
    survived orphan "SIGKILL of the only training member (rank 1)" 1
check "the only member's death: training lost every member first" \
    grep -q "training lost every member (ranks 1)" "$dir/orphan.out"

# rank 0 (the coordinator) killed once training has written its first checkpoint: the job ends,
# every worker saying that rank 0 died, the launcher exits 1, and the checkpoint verifies
kill_rank0() { # LOG PATTERN MARK: once LOG shows PATTERN, SIGKILL world rank 0 of MARK's job
    kr_n=0
    while [ $kr_n -lt 600 ] && ! grep -q "$2" "$1" 2>/dev/null; do
        sleep 0.1; kr_n=$((kr_n + 1))
    done
    for kr_p in `pgrep -f "tidal run .*$3"`; do
        tr '\0' '\n' <"/proc/$kr_p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 &&
            { echo "killing rank 0 (pid $kr_p)" >"$3.killed"; kill -KILL $kr_p; }
    done
}
(kill_rank0 "$dir/rank0.out" "checkpoint .*ckpt-00000050.h5" "$dir/rank0" &)
run4 rank0 ""
rc=`cat "$dir/rank0.rc"`
check "SIGKILL of rank 0: it happened" [ -s "$dir/rank0.killed" ]
check "SIGKILL of rank 0: the job ends by itself, with exit 1 (rc=$rc)" [ "$rc" = 1 ]
check "SIGKILL of rank 0: each of the 3 workers says the coordinator died and the job ends" \
    [ "`grep -c 'rank 0, the coordinator, died (.*): the job ends' "$dir/rank0.out"`" = 3 ]
grep -m 1 "rank 0, the coordinator, died" "$dir/rank0.out" | sed 's/^/# /'
# ([t]: the pattern does not match the shell that runs it)
check "SIGKILL of rank 0: no rank of the job is left running" \
    sh -c "! pgrep -f '[t]idal run .*$dir/rank0' >/dev/null"
check "SIGKILL of rank 0: the checkpoint written before verifies" \
    "$TIDAL" ckpt verify "$dir/rank0/ckpt/ckpt-00000050.h5"
done_testing
