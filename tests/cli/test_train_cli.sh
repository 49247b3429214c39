#!/bin/sh
# tidal train and tidal generate from the command line: alone and under mpirun -np 2 (the same
# global batch gives the same losses), the files they write, and bad arguments.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
args="--model tiny --resolution 32 --steps 3 --batch 4 --micro-batch 2 --log-every 1 --warmup 1"

out=`OPENBLAS_NUM_THREADS=1 "$TIDAL" train $args --out "$dir/one" 2>&1`; rc=$?
check "train alone exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
check "progress lines name step, loss, img/s, lr and eta" \
    sh -c "printf '%s\n' \"\$1\" | grep -q 'step .*3/3  loss .* img/s  lr .*  eta'" _ "$out"
check "loss.csv has a header and 3 rows" [ "`wc -l < "$dir/one/loss.csv"`" = 4 ]
check "model.h5 written" [ -s "$dir/one/model.h5" ]
if command -v h5ls >/dev/null 2>&1; then
    check "model.h5 holds /ema and /model under PyTorch names" \
        sh -c "h5ls -r '$dir/one/model.h5' | grep -q '^/model/blocks.1.attn.qkv.weight Dataset {96, 32}' &&
               h5ls -r '$dir/one/model.h5' | grep -q '^/ema/y_embedder.embedding_table.weight'"
fi

out=`tidal_mpirun 2 "$TIDAL" train $args --out "$dir/two" --dump-grads "$dir/grads" \
    --dump-grads-every 2 2>&1`; rc=$?
check "train under mpirun -np 2 exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
# Same global batch and data order: the loss columns agree to the printed precision (4 places
# here, ~1e-6 of rounding between one and two ranks' sums).
l1=`cut -d, -f2 "$dir/one/loss.csv" | tail -n +2 | awk '{printf "%.4f ", $1}'`
l2=`cut -d, -f2 "$dir/two/loss.csv" | tail -n +2 | awk '{printf "%.4f ", $1}'`
check "1 and 2 ranks give the same losses ($l1/ $l2)" [ "$l1" = "$l2" ]
check "--dump-grads: each rank wrote its gradient at steps 0 and 2" \
    [ "`ls "$dir/grads" | grep -c '^grads-0000000[02]-rank[01].h5$'`" = 4 ]
check "the dumps are readable weights files under the model's names" \
    "$TIDAL" ckpt verify "$dir/grads/grads-00000002-rank1.h5"

out=`"$TIDAL" generate --ckpt "$dir/one/model.h5" --n 6 --steps 3 --seed 5 -o "$dir/a.png" 2>&1`
rc=$?
check "generate exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
"$TIDAL" generate --ckpt "$dir/one/model.h5" --n 6 --steps 3 --seed 5 -o "$dir/b.png" >/dev/null
check "generate is deterministic for a seed" cmp -s "$dir/a.png" "$dir/b.png"
"$TIDAL" generate --ckpt "$dir/one/model.h5" --n 6 --steps 3 --seed 6 -o "$dir/c.png" >/dev/null
check "another seed gives other images" sh -c "! cmp -s '$dir/a.png' '$dir/c.png'"
# 6 tiles of 32 px in a 3x2 grid with 2 px borders: 3*32 + 4*2 = 104 by 2*32 + 3*2 = 70
check "the grid is 104x70 pixels" sh -c "file '$dir/a.png' 2>/dev/null | grep -q '104 x 70' ||
    od -An -tx1 -j16 -N8 '$dir/a.png' | tr -d ' \n' | grep -q '0000006800000046'"

err=`"$TIDAL" train --model bogus 2>&1`; rc=$?
check "unknown model: exit 2 naming it" sh -c "[ $rc = 2 ] && printf '%s' \"\$1\" | grep -q bogus" _ "$err"
err=`"$TIDAL" generate 2>&1`; rc=$?
check "generate without --ckpt: exit 2" [ $rc = 2 ]
err=`"$TIDAL" generate --ckpt "$dir/one/loss.csv" 2>&1`; rc=$?
check "generate on a file that is not HDF5: exit 1 naming it" \
    sh -c "[ $rc = 1 ] && printf '%s' \"\$1\" | grep -q 'loss.csv'" _ "$err"
done_testing
