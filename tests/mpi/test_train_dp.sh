#!/bin/sh
# Data-parallel training at 2, 3 and 4 ranks ends with the weights of one rank training on the
# same global batch (tests/mpi/train_dp.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/train_dp"
tmp="${TMPDIR:-/tmp}/tidal-train-dp.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 3 4; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
