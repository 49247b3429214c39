#!/bin/sh
# Every gfc operation against MPI on the equivalent communicator (tests/gfc/gfc_ops.c) at 2, 3,
# 4 and 8 ranks, oversubscribed. The program's TAP points come through as this test's points.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/gfc/gfc_ops"
tmp="${TMPDIR:-/tmp}/tidal-gfc-ops.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
# A lost message costs this long per operation instead of gfc's default.
TIDAL_GFC_TIMEOUT_MS=${TIDAL_GFC_TIMEOUT_MS:-20000}
export TIDAL_GFC_TIMEOUT_MS
pass_env="-x TIDAL_GFC_TIMEOUT_MS"
[ -n "$TIDAL_TEST_SEED" ] && pass_env="$pass_env -x TIDAL_TEST_SEED"

for np in 2 3 4 8; do
    t0=`date +%s`
    tidal_mpirun $np $pass_env "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
    diag "np=$np: `expr \`date +%s\` - $t0` s"
done
done_testing
