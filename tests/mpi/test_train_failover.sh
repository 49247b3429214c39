#!/bin/sh
# A training member that dies does not end `tidal train`: on 4 ranks under tools/mpirun-recover
# (`mpirun --enable-recovery`, with an exit code), TIDAL_FAULT kills members in the backward
# pass (SIGKILL, and SIGSTOP then SIGKILL), in the all-reduce (ring and butterfly, with the
# dynamiq codec), as rank 0 writes a checkpoint, and two members at once. The survivors regroup
# and redo the step that failed with the same global batch: the job exits 0, names the dead
# ranks, reaches its step count with the losses of a run without the failure, and its
# checkpoints verify. Rank 0's death (it writes the checkpoints) ends the job with a failure and a
# message naming it, within the detection bound, and leaves its checkpoints intact.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap '[ -n "$KEEP" ] || rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
train="--model tiny --resolution 32 --batch 8 --micro-batch 2 --steps 12 --log-every 1 --ckpt-every 4 --val-every 0"

# train4 NAME FAULT ARGS...: `tidal train` on 4 ranks into $dir/NAME (FAULT: a TIDAL_FAULT or -)
train4() {
    name=$1 fault=$2; shift 2
    flags=""
    [ "$fault" != - ] && flags="-x TIDAL_FAULT=$fault"
    TIDAL_MPIRUN_FLAGS="$flags" TIDAL_TEST_TIMEOUT=120 TIDAL_LAUNCH="$abs_top_srcdir/tools/mpirun-recover" \
        tidal_mpirun 4 "$TIDAL" train $train --out "$dir/$name" "$@" >"$dir/$name.out" 2>&1
    echo $? >"$dir/$name.rc"
}


# same_losses REF NAME TOL: loss.csv of NAME has every step of REF's, each within TOL (relative)
same_losses() {
    python3 - "$dir/$1/loss.csv" "$dir/$2/loss.csv" "$3" <<'PY'
import csv, sys
ref = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[1]))}
got = {int(r["step"]): float(r["loss"]) for r in csv.DictReader(open(sys.argv[2]))}
tol = float(sys.argv[3])
worst = max(abs(got[k] - v) / abs(v) for k, v in ref.items() if k in got) if got else 1
missing = sorted(set(ref) - set(got))
print(f"# {len(got)} of {len(ref)} steps, worst relative difference {worst:.2e} (tolerance {tol:g})"
      + (f", missing steps {missing}" if missing else ""))
sys.exit(0 if not missing and worst <= tol else 1)
PY
}

verify_ckpts() {
    "$TIDAL" ckpt verify "$dir/$1"/ckpt/ckpt-*.h5 >"$dir/$1.verify" 2>&1
}

# survived NAME REF TOL DEAD WHAT: the checks of a run whose member(s) DEAD died
survived() {
    name=$1 ref=$2 tol=$3 dead=$4 what=$5
    rc=`cat "$dir/$name.rc"`
    check "$what: it happened" grep -q "TIDAL_FAULT: SIG" "$dir/$name.out"
    check "$what: the job exits 0 (rc=$rc)" [ "$rc" = 0 ]
    [ "$rc" = 0 ] || grep -E "warn|error|tidal" "$dir/$name.out" | head -n 60 | sed 's/^/# /'
    check "$what: it reached step 12 without a restart" \
        grep -q "^tidal train: 12 steps" "$dir/$name.out"
    for r in $dead; do
        check "$what: the closing line names rank $r" \
            grep -qE "training went on .* rank $r \(" "$dir/$name.out"
    done
    check "$what: losses equal those of the run without a failure" same_losses $ref $name $tol
    check "$what: its checkpoints verify" verify_ckpts $name
}

train4 ref -
train4 ring - --allreduce dynamiq --gfc-allreduce ring
train4 bfly - --allreduce dynamiq --gfc-allreduce butterfly
for r in ref ring bfly; do
    check "$r: the run without a failure exits 0" [ "`cat "$dir/$r.rc"`" = 0 ]
done

train4 backward train.backward:2:6:KILL
survived backward ref 1e-5 2 "SIGKILL of rank 2 in the backward pass"
grep "ranks lost at step" "$dir/backward.out" | sed 's/^/# /'

(stop_then_kill "$dir/stop.out" "declared rank [0-9] dead" "$dir/stop" "$dir/stop.rc" &)
train4 stop train.backward:2:6:STOP
survived stop ref 1e-5 2 "SIGSTOP then SIGKILL of rank 2 in the backward pass"
check "SIGSTOP: the stopped rank is declared dead for its silence" \
    grep -q "no keep-alive for" "$dir/stop.out"

train4 ring-kill train.encode:1:20:KILL --allreduce dynamiq --gfc-allreduce ring
survived ring-kill ring 2e-3 1 "SIGKILL of rank 1 in the ring all-reduce (dynamiq)"
train4 bfly-kill train.encode:1:20:KILL --allreduce dynamiq --gfc-allreduce butterfly
survived bfly-kill bfly 2e-3 1 "SIGKILL of rank 1 in the butterfly all-reduce (dynamiq)"

train4 ckpt train.ckpt:3:2:KILL --ckpt-async
survived ckpt ref 1e-5 3 "SIGKILL of rank 3 as rank 0 writes checkpoint 8"

train4 two train.backward:1+3:6:KILL
survived two ref 1e-5 "1 3" "SIGKILL of ranks 1 and 3 at once"
check "two at once: 2 of 4 ranks go on" grep -q "ranks lost at step .* 2 go on" "$dir/two.out"

# rank 0 writes the checkpoints: its death ends the job, which says so
start=`date +%s`
# at step 10: step 4's checkpoint is on disk by then (one checkpoint is in flight at a time, so
# step 8's waits for it); killed at step 6, a loaded machine could still be writing step 4's
train4 leader train.backward:0:10:KILL
took=$((`date +%s` - start))
rc=`cat "$dir/leader.rc"`
check "rank 0 killed: it happened" grep -q "TIDAL_FAULT: SIGKILL" "$dir/leader.out"
check "rank 0 killed: the job fails (rc=$rc) within 30 s ($took s)" [ "$rc" != 0 -a $took -le 30 ]
check "rank 0 killed: the survivors say rank 0 died and where the checkpoints are" \
    grep -q "rank 0, which writes the checkpoints, died" "$dir/leader.out"
check "rank 0 killed: the checkpoints it wrote verify (`ls "$dir/leader/ckpt" 2>/dev/null | grep -c '^ckpt-.*\.h5$'`)" verify_ckpts leader
sed 's/^/# /' "$dir/leader.verify"
done_testing
