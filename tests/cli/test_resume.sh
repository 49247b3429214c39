#!/bin/sh
# Checkpoint and resume from the command line: 6 steps straight and 3 + 3 with a restart give
# bit-identical weights; a corrupt newest checkpoint is skipped with a message; a checkpoint
# from another global batch is refused; --keep bounds the files kept.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
command -v h5diff >/dev/null 2>&1 || { echo "1..0 # SKIP h5diff (hdf5-tools) is not installed"; exit 0; }
export OPENBLAS_NUM_THREADS=1
args="--model tiny --resolution 32 --batch 4 --micro-batch 2 --log-every 1 --warmup 2"

"$TIDAL" train $args --steps 6 --ckpt-every 3 --out "$dir/a" >/dev/null 2>&1
check "straight run of 6 steps" [ -s "$dir/a/model.h5" ]
"$TIDAL" train $args --steps 3 --ckpt-every 3 --out "$dir/b" >/dev/null 2>&1
out=`"$TIDAL" train $args --steps 6 --ckpt-every 3 --out "$dir/b" 2>&1`
case $out in *"resumed from $dir/b/ckpt/ckpt-00000003.h5 at step 3"*) ok "restart resumes at step 3";;
    *) not_ok "restart resumes at step 3: $out";; esac
check "3 + 3 steps give bit-identical model weights" h5diff -q "$dir/a/model.h5" "$dir/b/model.h5" /model /model
check "and bit-identical EMA weights" h5diff -q "$dir/a/model.h5" "$dir/b/model.h5" /ema /ema
check "and identical optimizer moments" \
    h5diff -q "$dir/a/ckpt/ckpt-00000006.h5" "$dir/b/ckpt/ckpt-00000006.h5" /optim /optim
check "latest names the newest checkpoint" [ "`cat "$dir/b/ckpt/latest"`" = ckpt-00000006.h5 ]

# corrupt the newest: resume falls back to the older one, saying so
cp -r "$dir/b" "$dir/c"
printf 'garbage' | dd of="$dir/c/ckpt/ckpt-00000006.h5" bs=1 seek=0 conv=notrunc 2>/dev/null
out=`"$TIDAL" train $args --steps 7 --ckpt-every 3 --out "$dir/c" 2>&1`; rc=$?
check "corrupt newest checkpoint: the run still succeeds (rc=$rc)" [ $rc = 0 ]
case $out in *"skipping checkpoint $dir/c/ckpt/ckpt-00000006.h5"*) ok "it says which file it skipped";;
    *) not_ok "skip message: $out";; esac
case $out in *"resumed from $dir/c/ckpt/ckpt-00000003.h5"*) ok "and resumes from the older one";;
    *) not_ok "older one: $out";; esac

err=`"$TIDAL" train $args --batch 8 --steps 7 --out "$dir/b" 2>&1`; rc=$?
check "another global batch is refused (rc=$rc)" [ $rc = 1 ]
case $err in *"batch = 4"*) ok "naming the setting";; *) not_ok "batch message: $err";; esac

"$TIDAL" train $args --steps 10 --ckpt-every 2 --keep 2 --out "$dir/d" >/dev/null 2>&1
n=`ls "$dir/d/ckpt" | grep -c '^ckpt-.*\.h5$'`
check "--keep 2 keeps 2 checkpoints ($n)" [ "$n" = 2 ]
check "no temporary files are left" sh -c "! ls '$dir/d/ckpt' | grep -q tmp"
out=`"$TIDAL" ckpt verify "$dir/a/ckpt/ckpt-00000006.h5" 2>&1`; rc=$?
case "$rc $out" in "0 "*"groups model, ema, optim/adamw/m, optim/adamw/v, train: ok"*) ok "ckpt verify accepts a good checkpoint";;
    *) not_ok "ckpt verify good: rc=$rc $out";; esac
cp "$dir/a/ckpt/ckpt-00000006.h5" "$dir/flip.h5"
size=`stat -c %s "$dir/flip.h5"`
for k in 3 4 5 6 7 8 9 10; do # bytes through the middle of the file (some fall in free space)
    printf '\377' | dd of="$dir/flip.h5" bs=1 seek=$((size * k / 13)) conv=notrunc 2>/dev/null
done
out=`"$TIDAL" ckpt verify "$dir/flip.h5" 2>&1`; rc=$?
case "$rc $out" in "1 "*"cannot read /"*) ok "ckpt verify refuses flipped bytes, naming what is damaged";;
    *) not_ok "ckpt verify flipped: rc=$rc $out";; esac
"$TIDAL" ckpt verify >/dev/null 2>&1
check "ckpt verify without a file: exit 2" [ $? = 2 ]
out=`"$TIDAL" train $args --steps 10 --resume none --out "$dir/e" 2>&1`
case $out in *resumed*) not_ok "--resume none starts afresh";; *) ok "--resume none starts afresh";; esac
done_testing
