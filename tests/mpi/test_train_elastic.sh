#!/bin/sh
# Elastic data-parallel training at 3 and 4 ranks: ranks leave and join at step boundaries, a
# joiner takes a member's state over gfc, and losses and weights follow the run in which every
# rank trained from the start (tests/mpi/train_elastic.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }
prog="$abs_top_builddir/tests/mpi/train_elastic"
tmp="${TMPDIR:-/tmp}/tidal-train-elastic.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 3 4; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
