#!/bin/sh
# The first picture a newcomer sees: `./quickstart run`'s job (`mpirun -np 4 tidal run` with
# jobs/quickstart.conf, its serving bursts included) must train a model whose samples a
# classifier that owes nothing to tidal recognizes (tools/fmnist_classify.py: k nearest
# neighbours among Fashion-MNIST's training images, 86% right on its test images). Judged on
# 200 samples, 20 per class, from the job's last checkpoint, so that the counts mean something.
# The recipe this replaced (400 steps of 32 images at lr 1e-3) scored 77 of 200 (38%), 4 classes
# at least half recognized.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
/usr/bin/python3 -c 'import numpy' 2>/dev/null || { echo "1..0 # SKIP no numpy for the classifier (python3-numpy)"; exit 0; }
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
TIDAL_TEST_TIMEOUT=${TIDAL_TEST_TIMEOUT_LONG:-1200}
start=`date +%s`
tidal_mpirun 4 "$TIDAL" run --config "$abs_top_srcdir/jobs/quickstart.conf" --listen none \
    --out "$dir/q" --progress-every 0 >"$dir/run.out" 2>&1
rc=$?
check "the quickstart's job exits 0 (rc=$rc, `expr \`date +%s\` - $start` s)" [ $rc = 0 ]
[ $rc = 0 ] || tail -n 30 "$dir/run.out" | sed 's/^/# /'
grep "tidal run: training" "$dir/run.out" | sed 's/^/# /'
check "its sample grid was written" [ -s "$dir/q/samples.png" ]
latest=`cat "$dir/q/ckpt/latest" 2>/dev/null`
"$TIDAL" generate --ckpt "$dir/q/ckpt/$latest" --class -1 --n 200 --steps 20 --cfg 3 \
    --seed 7 --sampler heun -o "$dir/s200.png" >"$dir/gen.out" 2>&1
check "200 samples, 20 of each class, from its last checkpoint ($latest)" [ -s "$dir/s200.png" ]
/usr/bin/python3 "$abs_top_srcdir/tools/fmnist_classify.py" "$dir/s200.png" >"$dir/judge.txt" 2>&1
sed 's/^/# /' "$dir/judge.txt"
/usr/bin/python3 "$abs_top_srcdir/tools/fmnist_classify.py" --json "$dir/s200.png" >"$dir/judge.json" 2>&1
read_key() { /usr/bin/python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['$1'])" "$dir/judge.json" 2>/dev/null || echo 0; }
got=`read_key recognized`; classes=`read_key classes_half_recognized`
check "the classifier recognizes at least half of the 200 samples ($got)" [ "$got" -ge 100 ]
check "and at least half of the samples of 5 or more classes ($classes)" [ "$classes" -ge 5 ]
done_testing
