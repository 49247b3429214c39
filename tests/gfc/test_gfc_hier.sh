#!/bin/sh
# The hierarchical all-reduce (tests/gfc/gfc_hier.c: hier against MPI_Allreduce, every codec,
# uneven hosts, bit-identical results, auto's choice; its TAP points come through as this test's):
# - on this machine with the hosts gfc-hosts makes up (TIDAL_GFC_HOSTS: 2 x 2, 3 + 1, 3 + 2 + 1,
#   4 x 2 interleaved in rank order), where only the topology is made up;
# - on emulated clusters (tools/cluster: hosts as network namespaces, TCP between them), where
#   gfc finds the hosts itself: 2 x 2, 4 x 1 (hier is the ring), 3 + 1, 3 x 2, 4 x 2 and 2 x 4;
#   skipped, saying why, where no cluster can be made here;
# - a member killed, and one stopped, in the middle of hier (tests/gfc/gfc_failure.c with
#   TIDAL_GFC_FAILURE_ALGO=hier) on made-up hosts and on a cluster of 2 x 2: every survivor gets
#   an error naming it in bounded time; and one whose endpoint failed before hier started (the
#   starts that post to it fail naming allreduce/hier).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"
prog="$abs_top_builddir/tests/gfc/gfc_hier"
fprog="$abs_top_builddir/tests/gfc/gfc_failure"
# auto's threshold and the pieces small, so that 64 Ki values already cross them
TIDAL_GFC_HIER_MIN=262144 TIDAL_GFC_HIER_PIECE=262144
TIDAL_GFC_TIMEOUT_MS=${TIDAL_GFC_TIMEOUT_MS:-20000}
export TIDAL_GFC_HIER_MIN TIDAL_GFC_HIER_PIECE TIDAL_GFC_TIMEOUT_MS
pass="-x TIDAL_GFC_HIER_MIN -x TIDAL_GFC_HIER_PIECE -x TIDAL_GFC_TIMEOUT_MS"
[ -n "$TIDAL_TEST_SEED" ] && pass="$pass -x TIDAL_TEST_SEED"

# ---- run inside a cluster ----------------------------------------------------------------------
hier_in() { # NP: gfc_hier on the cluster's hosts
    echo "# layout: $TIDAL_CLUSTER_LAYOUT"
    cluster_mpirun "$1" $pass "$prog"
}
# NP MODE OUT: gfc_failure MODE into OUT. Open MPI 4.1's mpirun --enable-recovery may wait for
# ever once its ranks are gone when the dead one was on another host (tools/mpirun-recover): once
# every survivor has destroyed its runtime it gets 5 s to end, then SIGTERM (through timeout).
kill_in() {
    echo "# layout: $TIDAL_CLUSTER_LAYOUT"
    TIDAL_GFC_FAILURE_ALGO=hier cluster_mpirun "$1" --enable-recovery -x TIDAL_GFC_FAILURE_ALGO \
        "$fprog" "$2" >"$3" 2>&1 &
    ki_pid=$! ki_n=0
    while kill -0 $ki_pid 2>/dev/null && [ $ki_n -lt 1200 ] &&
        [ "`grep -c '^DESTROYED' "$3"`" -lt $(($1 - 1)) ]; do
        sleep 0.1; ki_n=$((ki_n + 1))
    done
    ki_n=0
    while kill -0 $ki_pid 2>/dev/null && [ $ki_n -lt 50 ]; do sleep 0.1; ki_n=$((ki_n + 1)); done
    for ki_c in `ps -o pid= --ppid $ki_pid`; do kill -TERM $ki_c 2>/dev/null; done
    wait $ki_pid
    return 0
}
cluster_enter "$@"

# ---- the test ----------------------------------------------------------------------------------
tmp="${TMPDIR:-/tmp}/tidal-gfc-hier.$$"
trap 'rm -f "$tmp.out" "$tmp.err" "$tmp.kill"' EXIT
TIDAL_TEST_TIMEOUT=${TIDAL_TEST_TIMEOUT:-180}

# failure MODE LABEL: gfc_failure's survivors' verdicts in $tmp.out, $2 ranks
failure_verdicts() {
    pass_n=`grep -c '^SURVIVOR .* verdict=PASS' "$tmp.out"`
    named=`grep '^SURVIVOR' "$tmp.out" | grep -c 'allreduce/hier'`
    check "$1: $pass_n of $2 survivors got an error in bounded time, then an all-reduce among themselves" \
        [ "$pass_n" = "$2" ]
    check "$1: $named of $2 survivors' errors name allreduce/hier" [ "$named" = "$2" ]
    [ "$pass_n" = "$2" ] || grep -v 'PMIX ERROR' "$tmp.out" "$tmp.err" | tail -n 20 | sed 's/^/# /'
}

# ---- hosts made up on this machine --------------------------------------------------------------
for layout in 4:0,0,1,1 4:0,0,0,1 6:0,0,0,1,1,2 8:1,0,1,0,3,2,3,2; do
    np=${layout%%:*} hosts=${layout#*:}
    t0=`date +%s`
    TIDAL_GFC_HOSTS=$hosts tidal_mpirun $np $pass -x TIDAL_GFC_HOSTS "$prog" >"$tmp.out" 2>"$tmp.err"
    relay "np=$np hosts $hosts" "$tmp.out" $?
    diag "np=$np hosts $hosts: `expr \`date +%s\` - $t0` s"
done
# the victim's endpoint failed before hier starts: the members that post to it at once fail
# naming allreduce/hier (a kill met in that window named nothing in a CI run)
TIDAL_GFC_FAILURE_ALGO=hier TIDAL_GFC_HOSTS=0,0,1,1 tidal_mpirun 4 $pass -x TIDAL_GFC_FAILURE_ALGO \
    -x TIDAL_GFC_HOSTS "$fprog" refused >"$tmp.out" 2>"$tmp.err"
relay "hosts 0,0,1,1, hier, endpoint failed before the start" "$tmp.out" $?
for mode in kill stop; do
    t0=`date +%s`
    TIDAL_GFC_FAILURE_ALGO=hier TIDAL_GFC_HOSTS=0,0,1,1 tidal_mpirun 4 --enable-recovery \
        -x TIDAL_GFC_FAILURE_ALGO -x TIDAL_GFC_HOSTS "$fprog" $mode >"$tmp.out" 2>"$tmp.err"
    grep '^SURVIVOR\|^FENCED' "$tmp.out" | sed 's/^/# /'
    failure_verdicts "hosts 0,0,1,1, hier, member $mode" 3
    diag "hier $mode: `expr \`date +%s\` - $t0` s"
done

# ---- emulated clusters ------------------------------------------------------------------------
if ! why=`"$CLUSTER" check 2>&1`; then
    skip "no emulated cluster here: `printf '%s' "$why" | tail -n 1`"
    done_testing
    exit 0
fi
for layout in 2x2@0.45 4x1@0.45 2x1+2@0.45 3x2@0.3 4x2@0.22 2x4@0.22; do
    h=${layout%%x*} rest=${layout#*x} cpu=${layout#*@}
    r=${rest%%[+@]*} e=0
    case $rest in *+*) e=${rest#*+}; e=${e%@*} ;; esac
    np=$((h * r + e))
    opts="--hosts $h --ranks-per-host $r --extra-ranks $e --rank-cpu $cpu --link 1gbit"
    if ! why=`"$CLUSTER" layout $opts 2>&1`; then
        skip "cluster $layout cannot run here: `printf '%s' "$why" | tail -n 1`"
        continue
    fi
    t0=`date +%s`
    cluster_run $opts --quiet -- hier_in $np >"$tmp.out" 2>"$tmp.err"
    relay "cluster $layout" "$tmp.out" $?
    diag "cluster $layout: `expr \`date +%s\` - $t0` s"
done
opts="--hosts 2 --ranks-per-host 2 --rank-cpu 0.45 --link 1gbit"
if why=`"$CLUSTER" layout $opts 2>&1`; then
    t0=`date +%s`
    cluster_run $opts --quiet -- kill_in 4 kill "$tmp.kill" >"$tmp.err" 2>&1
    cat "$tmp.kill" >"$tmp.out" 2>/dev/null
    grep '^SURVIVOR' "$tmp.out" | sed 's/^/# /'
    failure_verdicts "cluster 2x2, hier, member killed" 3
    diag "cluster kill: `expr \`date +%s\` - $t0` s"
else
    skip "cluster 2x2 for the killed member cannot run here: `printf '%s' "$why" | tail -n 1`"
fi
done_testing
