#!/bin/sh
# The progress rule (tests/gfc/gfc_progress.c) at 2, 3, 4, 6 and 8 ranks, oversubscribed: a wait
# on one request advances every outstanding one, so members that start and wait for collectives
# on overlapping groups in orders of their own never deadlock. The program's TAP points come
# through as this test's points.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/gfc/gfc_progress"
tmp="${TMPDIR:-/tmp}/tidal-gfc-progress.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
# A deadlock fails in seconds instead of gfc's default minute; the slowest honest wait here (8
# ranks on 2 cores) takes milliseconds.
TIDAL_GFC_TIMEOUT_MS=${TIDAL_GFC_TIMEOUT_MS:-5000}
# Small ring chunks: the larger all-reduces pipeline several chunks per block.
TIDAL_GFC_RING_CHUNK=${TIDAL_GFC_RING_CHUNK:-4096}
TIDAL_TEST_TIMEOUT=${TIDAL_TEST_TIMEOUT:-120}
export TIDAL_GFC_TIMEOUT_MS TIDAL_GFC_RING_CHUNK
pass_env="-x TIDAL_GFC_TIMEOUT_MS -x TIDAL_GFC_RING_CHUNK"
[ -n "$TIDAL_TEST_SEED" ] && pass_env="$pass_env -x TIDAL_TEST_SEED"
[ -n "$TIDAL_GFC_PROGRESS_ROUNDS" ] && pass_env="$pass_env -x TIDAL_GFC_PROGRESS_ROUNDS"

for np in 2 3 4 6 8; do
    t0=`date +%s`
    tidal_mpirun $np $pass_env "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
    diag "np=$np: `expr \`date +%s\` - $t0` s"
done
done_testing
