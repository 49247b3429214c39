#!/bin/sh
# tools/ckpt_to_torch.py takes tidal's weights into PyTorch: a training checkpoint and a weights
# file (its EMA) load strictly into the reference DiT of tests/reference/make_dit_reference.py,
# every tensor bit for bit, and a forward pass gives a finite output of the image's shape;
# --out writes a state_dict torch.load reads back; a truncated or foreign file is refused with a
# message and exit 1.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
py=/usr/bin/python3
"$py" -c 'import torch, h5py' >/dev/null 2>&1 ||
    { echo "1..0 # SKIP $py cannot import torch and h5py"; exit 0; }
tool="$abs_top_srcdir/tools/ckpt_to_torch.py"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$TIDAL" train --model tiny --resolution 32 --batch 4 --micro-batch 2 --steps 3 --val-every 0 \
    --out "$dir/run" >"$dir/train.log" 2>&1
check "tidal train writes a checkpoint and a weights file" \
    [ -s "$dir/run/ckpt/ckpt-00000003.h5" -a -s "$dir/run/model.h5" ]

out=`"$py" "$tool" "$dir/run/ckpt/ckpt-00000003.h5" --check --out "$dir/ckpt.pt" 2>&1`; rc=$?
check "checkpoint: exit 0 (rc=$rc)" [ $rc = 0 ]
case $out in *"loaded 31 tensors"*"from /model"*) ok "checkpoint: all 31 tensors of /model loaded";;
    *) not_ok "checkpoint: tensors loaded: $out";; esac
case $out in *"output shape: [2, 1, 32, 32]"*) ok "checkpoint: forward output of shape [2, 1, 32, 32]";;
    *) not_ok "checkpoint: output shape: $out";; esac
case $out in *"check: ok"*) ok "checkpoint: bit for bit, finite and deterministic";;
    *) not_ok "checkpoint: --check: $out";; esac
check "checkpoint: --out writes the state_dict" [ -s "$dir/ckpt.pt" ]
n=`"$py" -c 'import sys, torch; print(len(torch.load(sys.argv[1])))' "$dir/ckpt.pt" 2>&1`
check "checkpoint: torch.load reads it back, 31 tensors ($n)" [ "$n" = 31 ]
printf '%s\n' "$out" | sed 's/^/# /'

out=`"$py" "$tool" "$dir/run/model.h5" --group ema --check --out "$dir/ema.pt" 2>&1`; rc=$?
check "weights file, --group ema: exit 0 (rc=$rc)" [ $rc = 0 ]
case $out in *"from /ema"*"output shape: [2, 1, 32, 32]"*"check: ok"*) ok "ema: loaded and run";;
    *) not_ok "ema: $out";; esac
check "ema: --out writes the state_dict" [ -s "$dir/ema.pt" ]

# learn_sigma: the reference DiT's 2C output channels, final_layer.linear [p*p*2C, D]
"$TIDAL" train --model tiny --resolution 32 --batch 4 --micro-batch 2 --steps 2 --val-every 0 \
    --objective ddpm --learn-sigma on --out "$dir/sigma" >"$dir/sigma.log" 2>&1
out=`"$py" "$tool" "$dir/sigma/model.h5" --group ema --check 2>&1`; rc=$?
case "$rc $out" in "0 "*"learn_sigma 1, objective ddpm"*"output shape: [2, 2, 32, 32]"*"check: ok"*)
    ok "learn_sigma: loaded strictly into the reference DiT with learn_sigma, 2 output channels";;
    *) not_ok "learn_sigma: rc=$rc $out";; esac

size=`stat -c %s "$dir/run/model.h5"`
head -c $((size / 2)) "$dir/run/model.h5" >"$dir/trunc.h5"
err=`"$py" "$tool" "$dir/trunc.h5" 2>&1`; rc=$?
check "a truncated file: exit 1 (rc=$rc)" [ $rc = 1 ]
case $err in *"error: cannot read the checkpoint $dir/trunc.h5"*truncated*) ok "with a message naming it";;
    *) not_ok "truncated: $err";; esac
"$py" -c 'import sys, h5py; h5py.File(sys.argv[1], "w").create_dataset("x", data=[1.0])' \
    "$dir/other.h5"
err=`"$py" "$tool" "$dir/other.h5" 2>&1`; rc=$?
case "$rc $err" in "1 "*"has no attribute"*"not a tidal weights or checkpoint file"*)
    ok "an HDF5 file that is not tidal's: exit 1, saying so";;
    *) not_ok "foreign file: rc=$rc $err";; esac
err=`"$py" "$tool" "$dir/run/model.h5" --group ema --reference "$dir/none.py" 2>&1`; rc=$?
case "$rc $err" in "1 "*"cannot find the reference DiT"*) ok "no reference model: exit 1, saying so";;
    *) not_ok "no reference: rc=$rc $err";; esac
done_testing
