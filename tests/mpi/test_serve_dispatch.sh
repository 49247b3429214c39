#!/bin/sh
# Rank 0 placing requests on executors over gfc, at 2, 3 and 4 ranks (tests/mpi/serve_dispatch.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/serve_dispatch"
tmp="${TMPDIR:-/tmp}/tidal-dispatch.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 3 4; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
