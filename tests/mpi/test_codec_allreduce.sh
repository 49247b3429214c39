#!/bin/sh
# Every codec through gfc's ring and butterfly all-reduce at 2, 3, 4, 5 and 8 ranks: the same
# bits on every rank and a vNMSE below the recorded threshold (tests/mpi/codec_allreduce.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/codec_allreduce"
tmp="${TMPDIR:-/tmp}/tidal-codec-ar.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 3 4 5 8; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
