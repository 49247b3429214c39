#!/bin/sh
# Failing peers (tests/gfc/gfc_failure.c) at 3 and 4 ranks: a member that never joins gets the
# others a timeout naming it (TAP from the program); a member killed mid-collective gets every
# survivor an error in bounded time. Open MPI's mpirun aborts the whole job when a process dies
# unless started with --enable-recovery; the survivors report on stdout and _exit(0).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/gfc/gfc_failure"
tmp="${TMPDIR:-/tmp}/tidal-gfc-failure.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
# A hang must end the test, not the CI job.
TIDAL_TEST_TIMEOUT=${TIDAL_TEST_TIMEOUT:-120}

for np in 3 4; do
    t0=`date +%s`
    tidal_mpirun $np "$prog" silent >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np silent peer" "$tmp.out" $rc
    diag "np=$np silent peer: `expr \`date +%s\` - $t0` s"

    t0=`date +%s`
    tidal_mpirun $np --enable-recovery "$prog" kill >"$tmp.out" 2>"$tmp.err"; rc=$?
    survivors=$((np - 1))
    grep '^#' "$tmp.out"
    grep '^SURVIVOR' "$tmp.out" | sed 's/^/# /'
    case $rc in
    124 | 137) not_ok "np=$np killed peer: mpirun hung and was killed (exit $rc)" ;;
    *) ok "np=$np killed peer: mpirun ended by itself (exit $rc)" ;;
    esac
    pass=`grep -c '^SURVIVOR .* verdict=PASS' "$tmp.out"`
    check "np=$np killed peer: $pass of $survivors survivors got a peer error or timeout in \
bounded time, then ran an allreduce among themselves" [ "$pass" = $survivors ]
    gone=`grep -c '^DESTROYED' "$tmp.out"`
    check "np=$np killed peer: $gone of $survivors survivors destroyed their runtime" \
        [ "$gone" = $survivors ]
    if [ "$pass" != $survivors ] || [ "$gone" != $survivors ]; then
        grep -v 'PMIX ERROR: BAD-PARAM' "$tmp.err" | tail -n 40 | sed 's/^/# stderr: /'
    fi
    diag "np=$np killed peer: `expr \`date +%s\` - $t0` s"
done
done_testing
