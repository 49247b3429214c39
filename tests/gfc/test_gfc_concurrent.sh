#!/bin/sh
# Concurrent collectives on overlapping groups and namespaces, and group churn
# (tests/gfc/gfc_concurrent.c) at 2, 3, 4 and 8 ranks, oversubscribed. The program's TAP points
# come through as this test's points.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
prog="$abs_top_builddir/tests/gfc/gfc_concurrent"
tmp="${TMPDIR:-/tmp}/tidal-gfc-concurrent.$$"
trap 'rm -f "$tmp.out" "$tmp.err"' EXIT
# A lost message costs this long per operation instead of gfc's default.
TIDAL_GFC_TIMEOUT_MS=${TIDAL_GFC_TIMEOUT_MS:-20000}
export TIDAL_GFC_TIMEOUT_MS
pass_env="-x TIDAL_GFC_TIMEOUT_MS"
[ -n "$TIDAL_TEST_SEED" ] && pass_env="$pass_env -x TIDAL_TEST_SEED"

# relay LABEL FILE RC: re-emits FILE's TAP points under LABEL, then one point for the run.
relay() {
    label=$1; file=$2; rc=$3; got=0; plan=""
    while IFS= read -r line; do
        case $line in
        "ok "*) got=$((got + 1)); ok "$label: ${line#ok * - }" ;;
        "not ok "*) got=$((got + 1)); not_ok "$label: ${line#not ok * - }" ;;
        "Bail out!"*) not_ok "$label: ${line#Bail out! }" ;;
        "#"*) echo "$line" ;;
        1..*) plan=${line#1..} ;;
        esac
    done <"$file"
    if [ "$rc" = 0 ] && [ -n "$plan" ] && [ "$plan" = "$got" ] && [ "$got" -gt 0 ]; then
        ok "$label: exit 0, $got of $plan points"
    else
        not_ok "$label: exit $rc, $got points, plan '${plan}'"
        [ -s "$tmp.err" ] && tail -n 40 "$tmp.err" | sed 's/^/# stderr: /'
    fi
}

for np in 2 3 4 8; do
    t0=`date +%s`
    tidal_mpirun $np $pass_env "$prog" >"$tmp.out" 2>"$tmp.err"; rc=$?
    relay "np=$np" "$tmp.out" $rc
    diag "np=$np: `expr \`date +%s\` - $t0` s"
done
done_testing
