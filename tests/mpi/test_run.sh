#!/bin/sh
# `tidal run` on 4 ranks (a coordinator, 3 workers) under a bursty trace: ranks move to serving
# for the bursts and back to training between them; every request completes; the training loss
# trajectory equals that of `tidal train` alone with the same seeds; the checkpoints written while
# ranks moved verify, and a second run resumes from the last one and follows the reference on;
# a worker killed mid-run ends the job with a message naming it and the last checkpoint intact.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1
train="--model tiny --batch 8 --micro-batch 4 --warmup 100 --seed 3"

# two bursts of 12 small requests, 7 s apart. Training must outlast the first burst and its
# cooldown for ranks to move back: 150 steps and a 2 s cooldown left 1 s of room, and under a
# loaded make check training once ended first. 200 steps, not more: the losses drift apart from
# the reference (sums in another order, growing) past 1e-5 from about step 300.
burst_trace "$dir/burst.jsonl"
tidal_mpirun 4 "$TIDAL" run $train --train-steps 200 --ckpt-every 50 --listen none \
    --trace "$dir/burst.jsonl" --exit-after-trace --out "$dir/run" --max-resolution 32 \
    --progress-every 0 --cooldown 1.5 >"$dir/run.out" 2>&1
rc=$?
check "tidal run on 4 ranks exits 0 (rc=$rc)" [ $rc = 0 ]
[ $rc = 0 ] || tail -n 30 "$dir/run.out" | sed 's/^/# /'
check "every request of the trace completed" grep -q "trace: 24 requests, 24 done, 0 failed" "$dir/run.out"
grep "tidal run:" "$dir/run.out" | sed 's/^/# /'

# the allocation moved both ways: more serving ranks during a burst, fewer after it
python3 - "$dir/run/timeline.csv" >"$dir/moves" 2>&1 <<'EOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
serving = [int(r["serving"]) for r in rows]
up = any(b > a for a, b in zip(serving, serving[1:]))
down = any(b < a for a, b in zip(serving, serving[1:]) if int(rows[0]["training"]) > 0)
print(f"serving ranks over time: {serving[:40]}")
sys.exit(0 if up and down else 1)
EOF
rc=$?
sed 's/^/# /' "$dir/moves"
check "ranks moved to serving and back to training" [ $rc = 0 ]
# each move measured against the step it waited for and the step before: numbers, positive when
# moves were measured (not timings)
check "the moves are reported against both steps" awk '
    /moves to serving against the training step they waited for/ {
        for (i = 1; i <= NF; i++) { v = $(i + 1); sub(/,$/, "", v)
            if ($i == "p50" || $i == "p95") { n++; pos += v + 0 > 0 }
            if ($(i + 1) ~ /^moves\)/) { moves = $i; sub(/^\(/, "", moves); moves += 0 } }
        found = 1 }
    END { exit !(found && n == 4 && pos == (moves > 0 ? 4 : 0)) }' "$dir/run.out"
plotted=no
[ -s "$dir/run/timeline.csv" ] && { [ -s "$dir/run/timeline.png" ] ||
    grep -q "gnuplot did not draw" "$dir/run.out"; } && plotted=yes
check "the timeline was written (and plotted where gnuplot is)" [ $plotted = yes ]

# the reference: training alone, same seeds and global batch
"$TIDAL" train $train --steps 250 --val-every 0 --log-every 25 --ckpt-every 1000 \
    --out "$dir/ref" >"$dir/ref.out" 2>&1
check "the reference training run" [ -s "$dir/ref/loss.csv" ]
cmp_losses() { # FROM TO: the run's losses at the reference's logged steps in [FROM, TO]
    python3 - "$dir/run/loss.csv" "$dir/ref/loss.csv" "$1" "$2" <<'EOF'
import csv, sys
run = {int(r[0]): float(r[1]) for r in csv.reader(open(sys.argv[1]))}
ref = {int(r[0]): float(r[1]) for r in list(csv.reader(open(sys.argv[2])))[1:]}
lo, hi = int(sys.argv[3]), int(sys.argv[4])
ks = [k for k in sorted(ref) if lo <= k <= hi]
missing = [k for k in ks if k not in run]
worst = max((abs(run[k] - ref[k]) / abs(ref[k]) for k in ks if k in run), default=1)
print(f"steps {ks}: largest relative difference {worst:.3g}, missing {missing}")
sys.exit(0 if ks and not missing and worst < 1e-5 else 1)
EOF
}
cmp_losses 1 200 >"$dir/cmp1" 2>&1
rc=$?
sed 's/^/# /' "$dir/cmp1"
check "the loss trajectory equals training alone (within 1e-5)" [ $rc = 0 ]
ok_all=yes
for s in 100 150 200; do
    f=`printf "%s/run/ckpt/ckpt-%08d.h5" "$dir" $s`
    "$TIDAL" ckpt verify "$f" >/dev/null 2>&1 || ok_all=no
done
check "the checkpoints taken while ranks moved verify" [ $ok_all = yes ]

# a second run resumes from step 200 and follows the reference to 250
tidal_mpirun 4 "$TIDAL" run $train --train-steps 250 --ckpt-every 50 --listen none \
    --trace "$dir/burst.jsonl" --exit-after-trace --out "$dir/run" --max-resolution 32 \
    --progress-every 0 --cooldown 1.5 >"$dir/run2.out" 2>&1
rc=$?
check "the second run exits 0 (rc=$rc)" [ $rc = 0 ]
check "it resumed from the checkpoint of step 200" grep -q "resumes from .*ckpt-00000200.h5 at step 200" "$dir/run2.out"
check "its summary counts the 50 steps of this job, to step 250" sh -c \
    'grep -q "training at step 250," "$1" && grep -q "training: 50 steps in this job" "$1"' _ \
    "$dir/run2.out"
# a third run finds training finished: it serves, and its summary still names step 250 and the
# checkpoint it resumed from
tidal_mpirun 3 "$TIDAL" run $train --train-steps 250 --listen none --out "$dir/run" \
    --trace "$dir/burst.jsonl" --max-resolution 32 --progress-every 0 --max-seconds 3 \
    >"$dir/run3.out" 2>&1
rc=$?
check "a run with nothing left to train names its step and checkpoint (rc=$rc)" sh -c \
    '[ $2 = 0 ] && grep -q "training at step 250, no step in this job; last checkpoint .*ckpt-00000250.h5" "$1"' \
    _ "$dir/run3.out" "$rc"
[ $rc = 0 ] || tail -n 20 "$dir/run3.out" | sed 's/^/# /'
cmp_losses 201 250 >"$dir/cmp2" 2>&1
rc=$?
sed 's/^/# /' "$dir/cmp2"
check "after the resume the losses still equal training alone" [ $rc = 0 ]

# a worker killed mid-run: the job ends, naming it; the last checkpoint is intact
rm -rf "$dir/kill"
tidal_mpirun 4 "$TIDAL" run $train --train-steps 100000 --ckpt-every 20 --listen none \
    --trace "$dir/burst.jsonl" --out "$dir/kill" --max-resolution 32 --progress-every 0 \
    >"$dir/kill.out" 2>&1 &
job=$!
n=0
until ls "$dir"/kill/ckpt/ckpt-*.h5 >/dev/null 2>&1 || [ $n -ge 200 ]; do sleep 0.1; n=$((n + 1)); done
sleep 1.5 # into the first burst: ranks are moving
victim=`ps -eo pid,args | grep "[t]idal run .*$dir/kill" | grep -v mpirun | awk 'NR == 3 { print $1 }'`
[ -n "$victim" ] && kill -9 "$victim"
n=0
while kill -0 $job 2>/dev/null && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
kill -0 $job 2>/dev/null && { kill -9 $job; diag "the job did not end within 60 s"; }
wait $job
rc=$?
ended=no; [ $rc != 0 ] && [ -n "$victim" ] && ended=yes
check "killing a worker ends the job with a failure (rc=$rc)" [ $ended = yes ]
grep -E "rank [0-9]+|process rank" "$dir/kill.out" | head -n 3 | sed 's/^/# /'
check "the message names the rank" grep -qE "rank [123]" "$dir/kill.out"
latest=`ls "$dir"/kill/ckpt/ckpt-*.h5 | tail -n 1`
check "the last checkpoint is intact ($latest)" "$TIDAL" ckpt verify "$latest"
done_testing
