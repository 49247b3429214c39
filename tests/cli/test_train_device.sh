#!/bin/sh
# --device: the CUDA backend's code (cuda/dit.cu) run on the CPU (--device cuda-emulated) trains
# and samples like the CPU backend: alone and under mpirun -np 2, the same losses step by step
# (the GPU code sums in another order: within 1e-3 relative), a checkpoint that resumes on the
# other device, generated images within a few grey levels. Bad devices are refused.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
args="--model tiny --resolution 32 --steps 12 --batch 8 --micro-batch 4 --log-every 1 --warmup 2 --val-every 6 --val-images 16"

# losses A B: the largest relative difference of the loss, val_loss and val_loss_ema columns
losses_close() {
    awk -F, 'NR == FNR { if (FNR > 1) { a[FNR] = $2; v[FNR] = $6; e[FNR] = $7 } next }
             FNR > 1 { d = $2 - a[FNR]; if (d < 0) d = -d; r = d / a[FNR]; if (r > w) w = r
                       if ($6 != "") { d = $6 - v[FNR]; if (d < 0) d = -d; r = d / v[FNR]; if (r > w) w = r }
                       if ($7 != "") { d = $7 - e[FNR]; if (d < 0) d = -d; r = d / e[FNR]; if (r > w) w = r }
                       else if ($6 != "") w = 1 }
             END { printf "%.2e\n", w; exit !(w <= 1e-3 && FNR == 13) }' "$1" "$2"
}

out=`OPENBLAS_NUM_THREADS=1 "$TIDAL" train $args --device cpu --out "$dir/cpu" 2>&1`; rc=$?
check "train on the CPU exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
out=`OPENBLAS_NUM_THREADS=1 "$TIDAL" train $args --device cuda-emulated --out "$dir/emu" 2>&1`; rc=$?
check "train --device cuda-emulated exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
check "it says where the model runs" sh -c "printf '%s' \"\$1\" | grep -q 'runs on the GPU (cuda-emulated'" _ "$out"
w=`losses_close "$dir/cpu/loss.csv" "$dir/emu/loss.csv"`; rc=$?
check "the same losses and validation losses, step by step (worst relative difference $w)" [ $rc = 0 ]

out=`TIDAL_DEVICE=cuda-emulated tidal_mpirun 2 "$TIDAL" train $args --out "$dir/emu2" 2>&1`; rc=$?
check "TIDAL_DEVICE=cuda-emulated under mpirun -np 2 exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
w=`losses_close "$dir/cpu/loss.csv" "$dir/emu2/loss.csv"`; rc=$?
check "2 ranks on the device: the CPU's losses (worst relative difference $w)" [ $rc = 0 ]

# a checkpoint written on the device resumes on the CPU and goes on as the CPU run did
out=`OPENBLAS_NUM_THREADS=1 "$TIDAL" train $args --steps 16 --device cpu --out "$dir/emu" 2>&1`; rc=$?
check "a device checkpoint resumes on the CPU" sh -c "[ $rc = 0 ] && printf '%s' \"\$1\" | grep -q 'resumed from .* at step 12'" _ "$out"
[ $rc = 0 ] || diag "$out"

g="--ckpt $dir/cpu/model.h5 --n 4 --steps 4 --seed 3"
"$TIDAL" generate $g --device cpu -o "$dir/cpu.png" >/dev/null 2>&1
out=`"$TIDAL" generate $g --device cuda-emulated -o "$dir/emu.png" 2>&1`; rc=$?
check "generate --device cuda-emulated exits 0" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
if python3 -c 'import zlib' 2>/dev/null; then
    worst=`python3 "$abs_top_srcdir/tests/pngread.py" maxdiff "$dir/cpu.png" "$dir/emu.png"`
    check "the images match the CPU's within 2 grey levels of 255 (worst $worst)" [ "${worst:-999}" -le 2 ]
fi

# serving on the device: a trace alone, and under mpirun with one image per executor
cat >"$dir/trace.jsonl" <<'TRACE'
{"at_ms": 0, "label": 1, "n": 2, "resolution": 32, "steps": 3, "cfg": 1.5, "seed": 1}
{"at_ms": 30, "n": 1, "resolution": 32, "steps": 3, "seed": 2}
{"at_ms": 60, "label": 3, "n": 1, "resolution": 32, "steps": 3, "seed": 3}
TRACE
out=`"$TIDAL" serve --ckpt "$dir/cpu/model.h5" --device cuda-emulated --listen none \
    --trace "$dir/trace.jsonl" --exit-after-trace --max-resolution 32 2>&1`; rc=$?
check "serve --device cuda-emulated: the trace's 3 requests done" \
    sh -c "[ $rc = 0 ] && printf '%s' \"\$1\" | grep -q 'trace: 3 requests, 3 done, 0 failed'" _ "$out"
[ $rc = 0 ] || diag "$out"
out=`TIDAL_DEVICE=cuda-emulated tidal_mpirun 3 "$TIDAL" serve --ckpt "$dir/cpu/model.h5" \
    --policy static_sp1 --listen none --trace "$dir/trace.jsonl" --exit-after-trace \
    --max-resolution 32 2>&1`; rc=$?
check "... and under mpirun -np 3 with static_sp1" \
    sh -c "[ $rc = 0 ] && printf '%s' \"\$1\" | grep -q 'trace: 3 requests, 3 done, 0 failed'" _ "$out"
[ $rc = 0 ] || diag "$out"

err=`"$TIDAL" train --device gpu 2>&1`; rc=$?
check "an unknown device: exit 2 naming it" sh -c "[ $rc = 2 ] && printf '%s' \"\$1\" | grep -q \"'gpu'\"" _ "$err"
err=`TIDAL_DEVICE=tpu "$TIDAL" generate --ckpt "$dir/cpu/model.h5" 2>&1`; rc=$?
check "an unknown TIDAL_DEVICE: exit 2 naming it" sh -c "[ $rc = 2 ] && printf '%s' \"\$1\" | grep -q tpu" _ "$err"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    err=`"$TIDAL" train $args --device cuda --out "$dir/none" 2>&1`; rc=$?
    check "--device cuda without a GPU: exit 1, saying so and what to do" \
        sh -c "[ $rc = 1 ] && printf '%s' \"\$1\" | grep -q -- '--device cpu'" _ "$err"
    [ $rc = 1 ] || diag "$err"
fi
done_testing
