#!/bin/sh
# Resuming under mpirun: a run checkpointed on 2 ranks and resumed on 3 follows the loss
# trajectory of a run that stayed on 2 (the global batch and the data order do not depend on the
# ranks; only the summation order does); with the dynamiq all-reduce, stop and resume on the
# same ranks gives bitwise the weights of the straight run (its rounding follows the step); with
# error feedback the residuals' sum is kept in /codec/residual and a resume on other ranks works.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v h5diff >/dev/null 2>&1 || { echo "1..0 # SKIP h5diff (hdf5-tools) is not installed"; exit 0; }
args="--model tiny --resolution 32 --batch 12 --micro-batch 2 --log-every 1 --warmup 2 --val-every 0 --ckpt-every 4"

tidal_mpirun 2 "$TIDAL" train $args --steps 8 --out "$dir/a" >"$dir/a.log" 2>&1
check "8 steps on 2 ranks" [ -s "$dir/a/model.h5" ]
tidal_mpirun 2 "$TIDAL" train $args --steps 4 --out "$dir/b" >"$dir/b.log" 2>&1
tidal_mpirun 3 "$TIDAL" train $args --steps 8 --out "$dir/b" >"$dir/b2.log" 2>&1; rc=$?
check "4 steps on 2 ranks, then 4 more on 3 ranks (rc=$rc)" [ $rc = 0 ]
check "the 3-rank run resumed at step 4" grep -q "resumed from .*ckpt-00000004.h5 at step 4" "$dir/b2.log"
worst=`awk -F, 'FNR == 1 { next } NR == FNR { a[$1] = $2; next }
    ($1 in a) && $1 > 4 { d = a[$1] - $2; if (d < 0) d = -d; r = d / a[$1]; if (r > w) w = r }
    END { printf "%.3g", w + 0 }' "$dir/a/loss.csv" "$dir/b/loss.csv"`
rows=`awk -F, 'FNR > 1 && $1 > 4' "$dir/b/loss.csv" | wc -l`
check "the resumed run logged steps 5 to 8 once each ($rows rows)" [ "$rows" = 4 ]
check "steps 5-8 on 3 ranks follow the 2-rank losses within 1e-4 (worst relative difference $worst)" \
    awk -v w="$worst" 'BEGIN { exit !(w < 1e-4) }'
"$TIDAL" ckpt diff "$dir/a/model.h5" "$dir/b/model.h5" >"$dir/diff.txt" 2>&1
largest=`sed -n 's/^largest difference \([^ ]*\).*/\1/p' "$dir/diff.txt"`
check "and end with weights within 1e-5 of them (largest difference ${largest:-?})" \
    awk -v d="${largest:-1}" 'BEGIN { exit !(d < 1e-5) }'

q="--allreduce dynamiq"
tidal_mpirun 2 "$TIDAL" train $args $q --steps 8 --out "$dir/c" >/dev/null 2>&1
tidal_mpirun 2 "$TIDAL" train $args $q --steps 4 --out "$dir/d" >/dev/null 2>&1
tidal_mpirun 2 "$TIDAL" train $args $q --steps 8 --out "$dir/d" >"$dir/d2.log" 2>&1
check "dynamiq: 4 + 4 steps resumed on 2 ranks give bitwise the weights of 8 straight" \
    h5diff -q "$dir/c/model.h5" "$dir/d/model.h5" /model /model
check "dynamiq: and the same optimizer moments" \
    h5diff -q "$dir/c/ckpt/ckpt-00000008.h5" "$dir/d/ckpt/ckpt-00000008.h5" /optim /optim

ef="--allreduce dynamiq --allreduce-ef --allreduce-round nearest --allreduce-bits 3"
tidal_mpirun 2 "$TIDAL" train $args $ef --steps 4 --out "$dir/e" >/dev/null 2>&1
check "error feedback: the checkpoint holds the residuals" \
    sh -c "h5ls '$dir/e/ckpt/ckpt-00000004.h5/codec/residual' | grep -q 'blocks.0.attn.qkv.weight'"
tidal_mpirun 3 "$TIDAL" train $args $ef --steps 8 --out "$dir/e" >"$dir/e2.log" 2>&1; rc=$?
check "error feedback: resumed on 3 ranks and finished (rc=$rc)" [ $rc = 0 ]
check "error feedback: its checkpoints verify" "$TIDAL" ckpt verify "$dir/e/ckpt/ckpt-00000008.h5"
done_testing
