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

# Large messages within the host (all of them here) by each of gfc's ways, checked against MPI
# alike: shared memory's copies (single copy off), the single copy from 1 KiB (odd sizes, ring
# chunks, butterfly halves), its fallback where the receiver cannot read the sender (every probe
# made to fail), and the default (64 KiB).
for run in "2 0 none" "3 1024 fallback" "4 1024 read" "8 65536 read"; do
    set -- $run
    np=$1
    t0=`date +%s`
    skew=; [ $3 = fallback ] && skew="-x TIDAL_GFC_TEST_COOKIE_SKEW=1"
    TIDAL_GFC_SINGLE_COPY=$2 TIDAL_TEST_SINGLE_COPY=$3 tidal_mpirun $np $pass_env $skew \
        -x TIDAL_GFC_SINGLE_COPY -x TIDAL_TEST_SINGLE_COPY "$prog" >"$tmp.out" 2>"$tmp.err"
    rc=$?
    relay "np=$np, single copy $2 ($3)" "$tmp.out" $rc
    diag "np=$np: `expr \`date +%s\` - $t0` s"
done
done_testing
