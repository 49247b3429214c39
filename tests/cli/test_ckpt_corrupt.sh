#!/bin/sh
# Corrupt checkpoints: a byte flipped anywhere (data or metadata) is found by `tidal ckpt verify`
# or leaves the file's contents unchanged (free space), never a silently different weight; a
# file truncated anywhere fails verify and loading; another model's checkpoint, another format
# version and NaN weights are refused with a message naming what is wrong. Nothing crashes (this
# test also runs under ASan: make check-unit in a --enable-sanitizers build).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
py=`command -v python3`
[ -n "$py" ] || { echo "1..0 # SKIP no python3 to damage files with"; exit 0; }
export OPENBLAS_NUM_THREADS=1
args="--model tiny --resolution 32 --batch 4 --micro-batch 2 --log-every 50 --warmup 2 --val-every 0"
"$TIDAL" train $args --steps 3 --ckpt-every 3 --out "$dir/run" >/dev/null 2>&1
good="$dir/run/ckpt/ckpt-00000003.h5"
check "a good checkpoint verifies" "$TIDAL" ckpt verify "$good"
size=`stat -c %s "$good"`

# one byte flipped at 120 places spread over the file
found=0 harmless=0 silent=0 crashed=0
i=0
while [ $i -lt 120 ]; do
    off=$((size * i / 120 + i % 7))
    cp "$good" "$dir/f.h5"
    "$py" -c "import sys
f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2])); b = f.read(1)
f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x5a]))" "$dir/f.h5" $off
    "$TIDAL" ckpt verify "$dir/f.h5" >/dev/null 2>"$dir/err"; rc=$?
    if [ $rc = 1 ]; then
        found=$((found + 1))
    elif [ $rc = 0 ]; then
        if "$TIDAL" ckpt diff "$good" "$dir/f.h5" >/dev/null 2>&1; then harmless=$((harmless + 1))
        else silent=$((silent + 1)); echo "# silent corruption at byte $off"; fi
    else
        crashed=$((crashed + 1)); echo "# verify exited $rc at byte $off: `head -c 300 "$dir/err"`"
    fi
    i=$((i + 1))
done
diag "flipped bytes: $found found by verify, $harmless in free space (contents unchanged), $silent silent"
check "no flipped byte changes a weight unnoticed ($silent)" [ $silent = 0 ]
check "no flipped byte crashes verify ($crashed)" [ $crashed = 0 ]
check "most flips are found ($found of 120)" [ $found -ge 60 ]

# truncated at 40 places
bad=0
i=1
while [ $i -le 40 ]; do
    n=$((size * i / 41))
    head -c $n "$good" >"$dir/t.h5"
    "$TIDAL" ckpt verify "$dir/t.h5" >/dev/null 2>&1 && { bad=$((bad + 1)); echo "# truncated to $n verifies"; }
    i=$((i + 1))
done
check "every truncation fails verify ($bad pass)" [ $bad = 0 ]
head -c $((size / 2)) "$good" >"$dir/half.h5"
err=`"$TIDAL" train $args --steps 5 --resume "$dir/half.h5" --out "$dir/r1" 2>&1`; rc=$?
check "resuming from a truncated file fails (rc=$rc)" [ $rc = 1 ]
case $err in *"half.h5"*"truncated or damaged"*) ok "naming the file and saying it is truncated";;
    *) not_ok "truncation message: $err";; esac

# another model's checkpoint
"$TIDAL" train --model fmnist --batch 4 --micro-batch 2 --steps 1 --val-every 0 --out "$dir/big" >/dev/null 2>&1
err=`"$TIDAL" train $args --steps 5 --resume "$dir/big/ckpt/ckpt-00000001.h5" --out "$dir/r2" 2>&1`; rc=$?
check "another model's checkpoint is refused (rc=$rc)" [ $rc = 1 ]
case $err in *"hidden_size = 128, this run has 32"*) ok "naming the setting that differs";;
    *) not_ok "model mismatch message: $err";; esac

# another format version, NaN weights (h5py edits the file)
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
    cp "$good" "$dir/v.h5"
    /usr/bin/python3 -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f: f.attrs['format_version'] = 99" "$dir/v.h5"
    err=`"$TIDAL" ckpt verify "$dir/v.h5" 2>&1`; rc=$?
    case "$rc $err" in "1 "*"format_version 99"*) ok "a newer format version is refused: $err";;
        *) not_ok "version: rc=$rc $err";; esac
    cp "$good" "$dir/n.h5"
    /usr/bin/python3 -c "import h5py, sys
with h5py.File(sys.argv[1], 'r+') as f:
    d = f['ema']['blocks.0.attn.qkv.weight']; a = d[...]; a[1, 2] = float('nan'); d[...] = a" "$dir/n.h5"
    err=`"$TIDAL" ckpt verify "$dir/n.h5" 2>&1`; rc=$?
    case "$rc $err" in "1 "*"/ema/blocks.0.attn.qkv.weight holds NaN"*) ok "NaN weights are found, naming the tensor";;
        *) not_ok "NaN: rc=$rc $err";; esac
else
    skip "h5py is not installed: format version and NaN edits"
    skip "h5py is not installed"
fi
done_testing
