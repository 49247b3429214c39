#!/bin/sh
# Preemption and crashes: SIGUSR1 or SIGTERM stop training after the step, write a checkpoint
# and exit 0, and resuming gives bitwise the weights of a run never stopped; a second signal
# exits at once; kill -9 at many moments while checkpoints are written (in the background or
# not) leaves every checkpoint file whole and resume working; background and foreground writes
# give the same files.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v h5diff >/dev/null 2>&1 || { echo "1..0 # SKIP h5diff (hdf5-tools) is not installed"; exit 0; }
export OPENBLAS_NUM_THREADS=1
args="--model tiny --resolution 32 --batch 4 --micro-batch 2 --log-every 50 --warmup 5 --val-every 0"

# waits up to 60 s for a file to appear
wait_for() { n=0; while [ ! -s "$1" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done; }

"$TIDAL" train $args --steps 400 --ckpt-every 100 --out "$dir/straight" >/dev/null 2>&1
check "a straight run of 400 steps" [ -s "$dir/straight/model.h5" ]

for sig in USR1 TERM; do
    out="$dir/$sig"
    "$TIDAL" train $args --steps 400 --ckpt-every 1000 --out "$out" >"$out.log" 2>&1 &
    pid=$!
    wait_for "$out/loss.csv"
    sleep 1
    kill -$sig $pid
    wait $pid; rc=$?
    check "SIG$sig: exit 0 (rc=$rc)" [ $rc = 0 ]
    stopped=`sed -n 's/.*stopped after step \([0-9]*\).*/\1/p' "$out.log"`
    check "SIG$sig: it says where it stopped (step ${stopped:-none})" [ -n "$stopped" ]
    [ -n "$stopped" ] || stopped=0
    ck="$out/ckpt/ckpt-`printf %08d "$stopped"`.h5"
    check "SIG$sig: the checkpoint of that step exists and verifies" "$TIDAL" ckpt verify "$ck"
    "$TIDAL" train $args --steps 400 --ckpt-every 1000 --out "$out" >"$out.log2" 2>&1
    check "SIG$sig: the same command resumes and finishes" grep -q "resumed from $ck at step $stopped" "$out.log2"
    check "SIG$sig: stopped at $stopped and resumed: bitwise the weights of the straight run" \
        h5diff -q "$dir/straight/model.h5" "$out/model.h5" /model /model
    check "SIG$sig: and its EMA" h5diff -q "$dir/straight/model.h5" "$out/model.h5" /ema /ema
done

# a second signal, 50 ms after the first, lands in the step (the default model, ~0.2 s a step):
# out at once, nothing on disk damaged
out="$dir/twice"
"$TIDAL" train --model fmnist --batch 64 --micro-batch 32 --val-every 0 --steps 100000 \
    --ckpt-every 3 --out "$out" >"$out.log" 2>&1 &
pid=$!
wait_for "$out/ckpt/latest"
kill -USR1 $pid; sleep 0.05; kill -USR1 $pid
wait $pid; rc=$?
check "a second signal exits at once with 128 + SIGUSR1 (rc=$rc)" [ $rc = 138 ]
bad=0
for f in "$out"/ckpt/ckpt-*.h5; do "$TIDAL" ckpt verify "$f" >/dev/null 2>&1 || bad=$((bad + 1)); done
check "every checkpoint file left verifies ($bad bad)" [ $bad = 0 ]

# kill -9 at many moments while checkpoints are being written, every step, in the background
# (the default) and in the foreground
for mode in true false; do
    out="$dir/kill-$mode"
    bad=0 resumed=0
    for delay in 0.3 0.5 0.7 0.9 1.1 1.3 1.5 1.7; do
        "$TIDAL" train $args --steps 100000 --ckpt-every 1 --keep 3 --ckpt-async=$mode --out "$out" >/dev/null 2>&1 &
        pid=$!
        sleep $delay
        kill -9 $pid; wait $pid 2>/dev/null
        for f in "$out"/ckpt/ckpt-*.h5; do
            [ -e "$f" ] || continue
            "$TIDAL" ckpt verify "$f" >/dev/null 2>&1 || { bad=$((bad + 1)); echo "# damaged: $f"; }
        done
        latest=`cat "$out/ckpt/latest" 2>/dev/null`
        [ -z "$latest" ] || "$TIDAL" ckpt verify "$out/ckpt/$latest" >/dev/null 2>&1 || bad=$((bad + 1))
    done
    step=`sed -n 's/.*ckpt-0*\([0-9][0-9]*\)\.h5/\1/p' "$out/ckpt/latest"`
    "$TIDAL" train $args --steps $((step + 2)) --ckpt-every 1 --ckpt-async=$mode --out "$out" >"$out.log" 2>&1
    rc=$?
    check "kill -9 at 8 moments, async=$mode: no damaged checkpoint ($bad)" [ $bad = 0 ]
    check "kill -9, async=$mode: resume from step $step works (rc=$rc)" [ $rc = 0 ]
    check "kill -9, async=$mode: it resumed rather than starting over" grep -q "resumed from" "$out.log"
done

# background and foreground writes of the same run give the same checkpoint
"$TIDAL" train $args --steps 20 --ckpt-every 5 --ckpt-async=true --out "$dir/as" >/dev/null 2>&1
"$TIDAL" train $args --steps 20 --ckpt-every 5 --ckpt-async=false --out "$dir/sy" >/dev/null 2>&1
for grp in /model /ema /optim /train; do
    check "async and sync checkpoints of step 15 agree in $grp" \
        h5diff -q "$dir/as/ckpt/ckpt-00000015.h5" "$dir/sy/ckpt/ckpt-00000015.h5" $grp $grp
done
done_testing
