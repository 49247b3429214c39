#!/bin/sh
# Trajectory tasks moving between gfc groups of other sizes mid-request, at 2 and 4 ranks
# (tests/mpi/serve_migrate.c).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/mpi/serve_migrate"
tmp="${TMPDIR:-/tmp}/tidal-migrate.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
for np in 2 4; do
    tidal_mpirun $np "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
done
done_testing
