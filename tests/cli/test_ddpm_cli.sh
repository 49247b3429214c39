#!/bin/sh
# tidal train --objective ddpm and tidal generate --sampler ddpm|ddim from the command line: the
# tiny DiT with learn_sigma trains to a finite loss that falls over a short run, its weights file
# says its objective and learn_sigma, both samplers write a PNG, a sampler of the other objective
# and a bad --steps are refused with exit 2 naming the mismatch before any weights are read,
# tidal serve --vae refuses a VAE whose latents are not the model's, a resume with another
# objective is refused, and a rectified-flow run is what it was.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
export OPENBLAS_NUM_THREADS=1
args="--model tiny --resolution 32 --batch 8 --micro-batch 8 --log-every 1 --warmup 5 --lr 3e-3 \
--val-every 0"

out=`"$TIDAL" train $args --steps 30 --objective ddpm --learn-sigma on --out "$dir/d" 2>&1`; rc=$?
check "train --objective ddpm --learn-sigma on exits 0 (rc=$rc)" [ $rc = 0 ]
[ $rc = 0 ] || diag "$out"
case $out in *"objective ddpm, learn_sigma on"*) ok "the start says the objective";;
    *) not_ok "start line: $out";; esac
losses=`cut -d, -f2 "$dir/d/loss.csv" | tail -n +2`
check "loss.csv has 30 finite losses" \
    [ "`printf '%s\n' $losses | awk '$1 + 0 == $1 && $1 > 0 && $1 < 100' | wc -l`" = 30 ]
first=`printf '%s\n' $losses | head -5 | awk '{s += $1} END {printf "%.4f", s / NR}'`
last=`printf '%s\n' $losses | tail -5 | awk '{s += $1} END {printf "%.4f", s / NR}'`
check "the loss falls: mean of steps 1-5 $first, of 26-30 $last (less than 0.7 of it)" \
    awk -v a="$first" -v b="$last" 'BEGIN {exit !(b < 0.7 * a)}'
info=`"$TIDAL" ckpt info "$dir/d/model.h5" 2>&1`
case $info in *"objective    ddpm, learn_sigma on (2 output channels)"*) ok "ckpt info: objective and learn_sigma";;
    *) not_ok "ckpt info: $info";; esac
if command -v h5ls >/dev/null 2>&1; then
    check "final_layer.linear.weight is [p*p*2C, D] = [8, 32]" \
        sh -c "h5ls -r '$dir/d/model.h5' | grep -q '^/model/final_layer.linear.weight Dataset {8, 32}'"
fi

for s in ddpm ddim; do
    out=`"$TIDAL" generate --ckpt "$dir/d/model.h5" --n 4 --steps 10 --sampler $s --cfg 2 \
        -o "$dir/$s.png" 2>&1`; rc=$?
    check "generate --sampler $s exits 0 and writes a PNG (rc=$rc)" \
        sh -c "[ $rc = 0 ] && head -c 8 '$dir/$s.png' | od -An -c | grep -q 'P   N   G'"
    [ $rc = 0 ] || diag "$out"
done
out=`"$TIDAL" generate --ckpt "$dir/d/model.h5" --n 4 --steps 10 --cfg 2 -o "$dir/auto.png" 2>&1`
case $out in *"10 ddpm steps"*) ok "--sampler auto samples a ddpm model with ddpm";;
    *) not_ok "auto: $out";; esac
check "--sampler auto is ddpm, the same seed the same bytes" cmp -s "$dir/ddpm.png" "$dir/auto.png"
check "ddim's images are not ddpm's" sh -c "! cmp -s '$dir/ddpm.png' '$dir/ddim.png'"
err=`"$TIDAL" generate --ckpt "$dir/d/model.h5" --sampler heun -o "$dir/x.png" 2>&1`; rc=$?
case "$rc $err" in "2 "*"sampler heun"*"objective ddpm"*"ddpm or ddim"*)
    ok "heun on a ddpm model: exit 2, naming both";; *) not_ok "heun on ddpm: rc=$rc $err";; esac
err=`"$TIDAL" generate --ckpt "$dir/d/model.h5" --steps 1001 -o "$dir/x.png" 2>&1`; rc=$?
case "$rc $err" in "2 "*"--steps 1001"*"1000"*) ok "--steps 1001 of a ddpm model: exit 2";;
    *) not_ok "steps 1001: rc=$rc $err";; esac

# (tidal serve serves it: tests/cli/test_serve_ddpm.sh) but not with a VAE of other latents
err=`timeout 60 "$TIDAL" serve --ckpt "$dir/d/model.h5" --vae random:1 --listen 127.0.0.1:0 2>&1`; rc=$?
case "$rc $err" in "2 "*"--vae random:1"*"4 channels"*"has 1"*)
    ok "tidal serve --vae of 4-channel latents for a 1-channel model: exit 2, naming both";;
    *) not_ok "serve --vae: rc=$rc $err";; esac

out=`"$TIDAL" train $args --steps 2 --out "$dir/r" 2>&1`; rc=$?
check "a rectified-flow run beside it exits 0 (rc=$rc)" [ $rc = 0 ]
case $out in *"objective"*) not_ok "rf prints no objective line: $out";;
    *) ok "rectified flow without learn_sigma: no objective line";; esac
err=`"$TIDAL" generate --ckpt "$dir/r/model.h5" --sampler ddim -o "$dir/x.png" 2>&1`; rc=$?
case "$rc $err" in "2 "*"sampler ddim"*"objective rf"*"euler or heun"*)
    ok "ddim on a rectified-flow model: exit 2, naming both";; *) not_ok "ddim on rf: rc=$rc $err";; esac
# rectified flow with learn_sigma (the reference configurations' default): the loss reads the
# first C channels, so the variance rows of the zero-initialized output layer get no gradient
out=`"$TIDAL" train $args --steps 3 --learn-sigma on --out "$dir/rs" 2>&1`; rc=$?
check "rf with --learn-sigma on trains (rc=$rc)" [ $rc = 0 ]
check "and samples with heun" "$TIDAL" generate --ckpt "$dir/rs/model.h5" --n 2 --steps 2 \
    -o "$dir/rs.png"
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    z=`/usr/bin/python3 -c 'import sys, h5py, numpy as np
w = np.asarray(h5py.File(sys.argv[1], "r")["model/final_layer.linear.weight"])
print(int(np.all(w[1::2] == 0)), int(np.any(w[0::2] != 0)))' "$dir/rs/model.h5" 2>&1`
    check "rf, learn_sigma: the variance rows stay 0, the velocity rows trained ($z)" [ "$z" = "1 1" ]
fi

# a file from before learn_sigma and the objective were stored: off, and rectified flow
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    for m in r d; do
        cp "$dir/$m/model.h5" "$dir/old-$m.h5"
        /usr/bin/python3 -c 'import sys, h5py
f = h5py.File(sys.argv[1], "r+"); del f.attrs["objective"]; del f.attrs["learn_sigma"]' \
            "$dir/old-$m.h5"
    done
    info=`"$TIDAL" ckpt info "$dir/old-r.h5" 2>&1`
    case $info in *"objective    rf, learn_sigma off (1 output channels)"*)
        ok "a file without the attributes reads as rf, learn_sigma off";; *) not_ok "old: $info";; esac
    check "and samples with heun" "$TIDAL" generate --ckpt "$dir/old-r.h5" --n 2 --steps 2 \
        -o "$dir/old.png"
    err=`"$TIDAL" ckpt verify "$dir/old-d.h5" 2>&1`; rc=$?
    case "$rc $err" in "1 "*"final_layer.linear.weight has shape [8, 32], expected [4, 32]"*)
        ok "a learn_sigma model stripped of its attribute: refused by the output layer's shape";;
        *) not_ok "stripped learn_sigma: rc=$rc $err";; esac
fi
err=`"$TIDAL" train $args --steps 4 --objective ddpm --out "$dir/r" 2>&1`; rc=$?
case "$rc $err" in "1 "*"objective = rf, this run has ddpm"*) ok "resuming an rf run as ddpm: refused";;
    *) not_ok "resume across objectives: rc=$rc $err";; esac
err=`"$TIDAL" train $args --steps 2 --objective dpm --out "$dir/bad" 2>&1`; rc=$?
case "$rc $err" in "2 "*dpm*) ok "--objective dpm: exit 2";; *) not_ok "bad objective: rc=$rc $err";; esac
done_testing
