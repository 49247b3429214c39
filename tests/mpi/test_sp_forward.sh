#!/bin/sh
# Sequence-parallel DiT forward over gfc (Ulysses) against the single-rank forward, at 2 and 4
# ranks (tests/mpi/sp_forward.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/sp_forward"
tmp="${TMPDIR:-/tmp}/tidal-sp.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 4; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
