# What the emulated-cluster tests share, sourced after tests/env.sh: a skip where no cluster can
# be made here, a command run on one (tools/cluster), and mpirun inside it.
#
#   cluster_check                                  # skips the whole test, with the reason
#   cluster_run --hosts 2 --ranks-per-host 2 -- CMD...
#   cluster_enter "$@"                             # once the test's functions are defined
#   cluster_mpirun N PROGRAM...                    # inside: N ranks placed on the hosts
#   cluster_on h0 CMD...                           # inside: CMD in host h0's network
#   cluster_serve4 DIR "ID..." SERVE-ARGS...       # a trace's PNGs, inside or outside
#
# CMD may be one of the test's shell functions: the test script then runs again inside the
# cluster (so its functions must come before cluster_enter, and its side effects after), and
# cluster_enter calls that function there and exits with its status.
CLUSTER="$abs_top_srcdir/tools/cluster"

cluster_check() {
    cl_why=`"$CLUSTER" check 2>&1` ||
        { echo "1..0 # SKIP no emulated cluster here: `printf '%s' "$cl_why" | tail -n 1`"; exit 0; }
}

# cluster_run LAYOUT_OPTS... -- CMD...: CMD on a cluster of that layout, bounded in time. CMD
# runs in the test script started again with --in-cluster (cluster_enter), so that it may be one
# of the test's functions. tools/cluster's lines (the layout, the links' counters) go to stderr.
cluster_run() {
    cl_n=$#; cl_seen=""
    for cl_a in "$@"; do
        if [ "$cl_a" = -- ] && [ -z "$cl_seen" ]; then
            cl_seen=1; set -- "$@" -- sh "$cluster_self" --in-cluster
        else
            set -- "$@" "$cl_a"
        fi
    done
    shift $cl_n
    # the bound is on CMD once the cluster is up (--time-limit), not on a wait for the cores that
    # another test's cluster holds meanwhile; the outer one only catches a set-up that hangs
    cl_t=${TIDAL_TEST_TIMEOUT:-300}
    timeout $((cl_t + ${TIDAL_CLUSTER_WAIT:-600} + 120)) "$CLUSTER" --time-limit "$cl_t" "$@"
}
cluster_self=$0
cluster_enter() {
    [ "${1:-}" = --in-cluster ] || return 0
    shift
    "$@"
    exit $?
}

# mpirun inside the cluster, as tidal_mpirun outside it: the hosts' slots place the ranks,
# oversubscribed only past them (TIDAL_CLUSTER_RANKS).
cluster_mpirun() {
    cl_np=$1; shift
    set -- -np "$cl_np" --bind-to none -x OPENBLAS_NUM_THREADS=1 -x OMP_NUM_THREADS=1 \
        ${TIDAL_MPIRUN_FLAGS:-} "$@"
    [ "$cl_np" -le "${TIDAL_CLUSTER_RANKS:-0}" ] || set -- --oversubscribe "$@"
    if [ "`id -u`" = 0 ]; then set -- --allow-run-as-root "$@"; fi
    timeout "${TIDAL_TEST_TIMEOUT:-300}" "${TIDAL_LAUNCH:-$MPIRUN}" "$@"
}

# cluster_on HOST CMD...: CMD in the network namespace of host HOST (h0, h1, ...) of this cluster.
cluster_on() {
    cl_h=$1; shift
    nsenter --net="/run/netns/$TIDAL_CLUSTER-$cl_h" "$@"
}

# cluster_serve4 DIR "ID..." ARGS...: `tidal serve --listen 127.0.0.1:0 ARGS` (a --trace whose
# requests have these ids) on 4 ranks in the background, on the cluster's hosts when inside one
# (whose layout it prints first) and on this host otherwise; each request's PNG into DIR/ID.png,
# its HTTP status into DIR/codes, /metrics into DIR/metrics; then SIGTERM to rank 0, which ends
# the job as a user's ^C would, and the launcher's exit status into DIR/rc (SIGTERM to mpirun
# instead can lose the closing lines: it stops forwarding output as it ends the ranks). The
# server's output is DIR/serve.out. On a cluster rank 0 is on h0, and curl goes there.
cluster_serve4() {
    cl_dir=$1 cl_ids=$2
    shift 2
    cl_on="" cl_launch=tidal_mpirun
    if [ -n "${TIDAL_CLUSTER:-}" ]; then
        cl_on="cluster_on h0" cl_launch=cluster_mpirun
        echo "layout: $TIDAL_CLUSTER_LAYOUT"
    fi
    : >"$cl_dir/codes"
    $cl_launch 4 "$TIDAL" serve --listen 127.0.0.1:0 --progress-every 0 --max-resolution 32 \
        "$@" >"$cl_dir/serve.out" 2>&1 &
    cl_pid=$!
    cl_port="" cl_n=0
    while [ -z "$cl_port" ] && [ $cl_n -lt 600 ] && kill -0 $cl_pid 2>/dev/null; do
        sleep 0.1; cl_n=$((cl_n + 1))
        cl_port=`sed -n 's/.*listening on http:\/\/[^ ]*:\([0-9][0-9]*\).*/\1/p' "$cl_dir/serve.out"`
    done
    for cl_id in $cl_ids; do
        cl_code=none cl_n=0
        while [ -n "$cl_port" ] && [ $cl_n -lt 300 ]; do # a trace request is 404 until it arrives
            cl_code=`$cl_on curl -s -o "$cl_dir/$cl_id.png" -w '%{http_code}' \
                "http://127.0.0.1:$cl_port/v1/images/$cl_id?format=png&wait=1"`
            [ "$cl_code" = 404 ] || break
            sleep 0.1; cl_n=$((cl_n + 1))
        done
        echo "$cl_id $cl_code" >>"$cl_dir/codes"
    done
    [ -n "$cl_port" ] && $cl_on curl -s -o "$cl_dir/metrics" "http://127.0.0.1:$cl_port/metrics"
    cl_r0=`cluster_rank0_of $cl_pid`
    if [ -n "$cl_r0" ]; then kill -TERM $cl_r0; else kill -TERM `ps -o pid= --ppid $cl_pid` 2>/dev/null; fi
    wait $cl_pid
    echo $? >"$cl_dir/rc"
}

# cluster_rank0_of PID: the pid of world rank 0 among PID's descendants (mpirun starts rank 0 on
# its own host), if any
cluster_rank0_of() {
    for cl_c in `ps -o pid= --ppid $1`; do
        tr '\0' '\n' <"/proc/$cl_c/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 &&
            { echo $cl_c; return 0; }
        cluster_rank0_of $cl_c && return 0
    done
    return 1
}

# cluster_sent HOST: the bytes HOST's link has sent so far (the tbf counter of its end), where
# tools/cluster's summary in MiB is too coarse
cluster_sent() {
    tc -n "$TIDAL_CLUSTER-$1" -s qdisc show dev eth0 2>/dev/null |
        awk '$1 == "qdisc" && $2 == "tbf" { t = 1 } t && $1 == "Sent" { print $2; exit }'
}

# cluster_losses_equal RUN_CSV REF_CSV OUT: whether every step of tidal train's loss.csv (REF,
# with a header) is in tidal run's (RUN) within a relative 1e-5; OUT gets the figures.
cluster_losses_equal() {
    python3 - "$1" "$2" >"$3" 2>&1 <<'EOF'
import csv, sys
run = {int(r[0]): float(r[1]) for r in csv.reader(open(sys.argv[1]))}
ref = {int(r[0]): float(r[1]) for r in list(csv.reader(open(sys.argv[2])))[1:]}
missing = [k for k in ref if k not in run]
worst = max((abs(run[k] - ref[k]) / abs(ref[k]) for k in ref if k in run), default=1)
print(f"steps {sorted(ref)}: largest relative difference {worst:.3g}, missing {missing}")
sys.exit(0 if ref and not missing and worst < 1e-5 else 1)
EOF
}
