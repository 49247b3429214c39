#!/usr/bin/env bash
# bench/netns_link.sh: emulated network links on one machine, one network namespace per MPI rank.
#
#   bench/netns_link.sh run [--np P] [--rate R] -- COMMAND...
#       Creates the namespaces, runs COMMAND in the root namespace with the environment below,
#       removes everything again (also when COMMAND fails or the script is interrupted) and
#       exits with COMMAND's status. COMMAND launches the ranks with mpirun as usual, each as
#       `bench/netns_link.sh exec-rank PROGRAM ARGS...`.
#   bench/netns_link.sh exec-rank PROGRAM ARGS...
#       Run by mpirun once per rank: PROGRAM in namespace r<OMPI_COMM_WORLD_RANK> of the run.
#   bench/netns_link.sh rate R
#       Inside COMMAND: sets every link of the current run to R (1gbit, 10gbit, 500mbit ...).
#   bench/netns_link.sh check
#       Exit 0 when namespaces, veth pairs, bridges and tbf can be made here; else says why.
#   bench/netns_link.sh cleanup
#       Removes what runs that were killed left behind (their process is gone).
#
# Topology of a run with prefix tdlnl<PID> (PID: this script's, so that runs do not clash):
#
#   rank k: netns tdlnl<PID>-r<k>, device "tdlnet0" = 10.77.N.<k+1>/24
#              | veth, tbf rate R on the egress of both ends
#   hub:    netns tdlnl<PID>-hub, bridge "br0" with the hub ends "r<k>" and "up"
#              | veth "uplink" <-> "tdlnl<PID>" in the root namespace = 10.77.N.254/24, not limited
#   root:   mpirun and its PMIx server
#
# Every byte between two ranks crosses two rate-limited links (the sender's uplink and the
# receiver's downlink) and the bridge. The root link exists only because Open MPI 4's PMIx
# reaches its ranks over TCP: without it MPI_Init in a namespace finds no server. N is the first
# third octet not already on a root-namespace device.
#
# The environment COMMAND (and so every rank) gets: TIDAL_NETNS (the prefix), UCX_TLS=tcp,self
# and UCX_NET_DEVICES=tdlnet0 (gfc's traffic goes over the limited link), OMPI_MCA_pml=ob1 and
# OMPI_MCA_btl=self,vader (MPI's own start-up and barriers use shared memory, never the link),
# PMIX_MCA_ptl_tcp_remote_connections=1 and PMIX_MCA_ptl_tcp_if_include=<root device> (the
# PMIx server listens on the root link).
set -u -o pipefail

nl_tag=tdlnl
nl_dev=tdlnet0

nl_die() { printf 'netns_link: error: %s\n' "$*" >&2; exit 1; }
nl_say() { printf 'netns_link: %s\n' "$*" >&2; }

# R ("25gbit", "500mbit", "1000000bit") -> bits per second; fails on anything else.
nl_rate_bits() {
    awk -v r="$1" 'BEGIN {
        if (!match(r, /^[0-9]+(\.[0-9]+)?/)) exit 1
        v = substr(r, 1, RLENGTH) + 0; u = tolower(substr(r, RLENGTH + 1))
        m = u == "bit" ? 1 : u == "kbit" ? 1e3 : u == "mbit" ? 1e6 : u == "gbit" ? 1e9 : 0
        if (m == 0 || v <= 0) exit 1
        printf "%.0f\n", v * m }'
}

# The token bucket of one direction: 1 ms of traffic at the rate, at least 256 KiB, so that
# one TCP segment train passes whole and the rate, not the bucket, bounds the throughput.
nl_tbf_args() {
    local bits burst
    bits=$(nl_rate_bits "$1") || nl_die "rate '$1' is not N[.N]{bit,kbit,mbit,gbit}"
    burst=$(awk -v b="$bits" 'BEGIN { x = b / 8 / 1000; if (x < 262144) x = 262144
                                      printf "%d", x }')
    echo "rate $1 burst $burst latency 50ms"
}

# The namespaces of prefix $1.
nl_list() {
    ip netns list 2>/dev/null | awk -v p="$1-" 'index($1, p) == 1 { print $1 }'
}

# Removes everything of prefix $1: the rank namespaces first, then the hub (whose end of the
# root link takes the root end with it), then a root end left over from a setup cut short.
nl_remove() {
    local p=$1 ns
    for ns in $(nl_list "$p" | grep -v -- '-hub$'); do ip netns del "$ns" 2>/dev/null; done
    for ns in $(nl_list "$p"); do ip netns del "$ns" 2>/dev/null; done
    ip link del "$p" 2>/dev/null
    return 0
}

# Removes what runs whose process is gone left behind.
nl_cleanup_stale() {
    local p pid
    for p in $( { ip netns list 2>/dev/null | awk '{ print $1 }'
                  ip -o link show 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }'; } |
               sed -n "s/^\(${nl_tag}[0-9][0-9]*\).*/\1/p" | sort -u); do
        pid=${p#"$nl_tag"}
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q netns_link
        then
            continue
        fi
        nl_say "removing $p, left by a run that ended without cleaning up"
        nl_remove "$p"
    done
}

# The first third octet N for which no root-namespace device has an address in 10.77.N.0/24.
nl_subnet_pick() {
    local used n
    used=$(ip -4 -o addr show 2>/dev/null | awk '{ print $4 }' |
           sed -n 's#^10\.77\.\([0-9]*\)\..*#\1#p')
    for n in $(seq 0 254); do
        printf '%s\n' "$used" | grep -qx "$n" || { echo "$n"; return 0; }
    done
    return 1
}

# nl_up PREFIX NP RATE: the namespaces, links and rate limits of a run.
nl_up() {
    local p=$1 np=$2 rate=$3 hub=$1-hub k ns tbf net
    tbf=$(nl_tbf_args "$rate") || exit 1
    net=$(nl_subnet_pick) || nl_die "no free subnet 10.77.N.0/24 in the root namespace"
    nl_remove "$p"
    ip netns add "$hub" || return 1
    ip -n "$hub" link set dev lo up &&
        ip -n "$hub" link add br0 type bridge &&
        ip -n "$hub" link set dev br0 up || return 1
    # the root link: no rate limit, only PMIx's start-up messages cross it
    ip link add "$p" type veth peer name uplink netns "$hub" &&
        ip -n "$hub" link set dev uplink master br0 &&
        ip -n "$hub" link set dev uplink up &&
        ip addr add "10.77.$net.254/24" dev "$p" &&
        ip link set dev "$p" up || return 1
    for k in $(seq 0 $((np - 1))); do
        ns=$p-r$k
        ip netns add "$ns" &&
            ip -n "$ns" link set dev lo up &&
            ip link add "$nl_dev" netns "$ns" type veth peer name "r$k" netns "$hub" &&
            ip -n "$hub" link set dev "r$k" master br0 &&
            ip -n "$hub" link set dev "r$k" up &&
            ip -n "$ns" addr add "10.77.$net.$((k + 1))/24" dev "$nl_dev" &&
            ip -n "$ns" link set dev "$nl_dev" up || return 1
        # both directions: what rank k sends (its end) and what it receives (the hub's end)
        # shellcheck disable=SC2086
        tc -n "$ns" qdisc replace dev "$nl_dev" root tbf $tbf &&
            tc -n "$hub" qdisc replace dev "r$k" root tbf $tbf || return 1
    done
    nl_net=$net
    return 0
}

# nl_rate PREFIX RATE: every link of a run to RATE.
nl_rate() {
    local p=$1 tbf ns k
    tbf=$(nl_tbf_args "$2") || exit 1
    for ns in $(nl_list "$p" | grep -v -- '-hub$'); do
        k=${ns##*-r}
        # shellcheck disable=SC2086
        if ! { tc -n "$ns" qdisc replace dev "$nl_dev" root tbf $tbf &&
               tc -n "$p-hub" qdisc replace dev "r$k" root tbf $tbf; }; then
            nl_die "cannot set the rate of $ns to $2"
        fi
    done
}

# What crossed each rank's limited link (the tbf counters of both ends), one line per rank: the
# proof that the traffic took the link and not some shortcut.
nl_stats() {
    local p=$1 ns k out in
    for ns in $(nl_list "$p" | grep -v -- '-hub$' | sort -t r -k 2 -n); do
        k=${ns##*-r}
        out=$(tc -n "$ns" -s qdisc show dev "$nl_dev" | awk '$1 == "Sent" { print $2; exit }')
        in=$(tc -n "$p-hub" -s qdisc show dev "r$k" | awk '$1 == "Sent" { print $2; exit }')
        awk -v k="$k" -v o="${out:-0}" -v i="${in:-0}" 'BEGIN {
            printf "netns_link: rank %s link: %.1f MiB sent, %.1f MiB received\n", k,
                o / 1048576, i / 1048576 }' >&2
    done
}

# Process $1 and all its descendants, parents first.
nl_tree() {
    local c
    echo "$1"
    for c in $(ps -o pid= --ppid "$1" 2>/dev/null); do nl_tree "$c"; done
}

# On a signal: ends COMMAND and everything it started (timeout and mpirun make process groups
# of their own, so the whole tree, not one group), waits for it, exits with status $1; the EXIT
# trap then removes the namespaces.
nl_child=""
nl_stop() {
    local pids
    if [ -n "$nl_child" ]; then
        pids=$(nl_tree "$nl_child")
        # shellcheck disable=SC2086
        kill -TERM $pids 2>/dev/null
        wait "$nl_child" 2>/dev/null
        sleep 1
        # shellcheck disable=SC2086
        kill -KILL $pids 2>/dev/null
    fi
    exit "$1"
}

# Whether this machine lets us build a run; prints the reason when it does not.
nl_check() {
    local p=${nl_tag}$$ err
    if ! command -v ip >/dev/null 2>&1 || ! command -v tc >/dev/null 2>&1; then
        echo "no 'ip' or 'tc' command (Debian: iproute2)"
        return 1
    fi
    if ! err=$(nl_up "$p" 1 1gbit 2>&1); then
        nl_remove "$p"
        echo "cannot create network namespaces, veth pairs, a bridge or a tbf qdisc (needs root" \
            "or CAP_NET_ADMIN + CAP_SYS_ADMIN): $(printf '%s' "$err" | head -n 1)"
        return 1
    fi
    nl_remove "$p"
}

nl_usage() {
    sed -n '2,/^$/{s/^# \{0,1\}//; p}' "$0" | sed '/^$/d' >&2
    exit 2
}

nl_main() {
    [ $# -ge 1 ] || nl_usage
    local cmd=$1 np=4 rate=1gbit rc p
    shift
    case $cmd in
    run)
        while [ $# -gt 0 ]; do
            case $1 in
            --np) [ $# -ge 2 ] || nl_usage; np=$2; shift ;;
            --rate) [ $# -ge 2 ] || nl_usage; rate=$2; shift ;;
            --) shift; break ;;
            *) nl_usage ;;
            esac
            shift
        done
        [ $# -ge 1 ] || nl_usage
        printf '%s' "$np" | grep -qE '^[1-9][0-9]?$' || nl_die "--np $np: 1 to 99 ranks"
        [ "$(id -u)" = 0 ] || nl_die "namespaces need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)"
        p=${nl_tag}$$
        nl_cleanup_stale
        trap 'nl_remove "$p"' EXIT
        trap 'nl_stop 130' INT
        trap 'nl_stop 143' TERM
        trap 'nl_stop 129' HUP
        nl_up "$p" "$np" "$rate" || nl_die "could not set up $np namespaces (see above)"
        nl_say "$np ranks in namespaces $p-r0..$((np - 1)), links 10.77.$nl_net.x at $rate"
        # COMMAND in the background, so that a signal reaches the trap at once and nl_stop
        # ends COMMAND's processes before the namespaces go; its stdin is not the terminal's
        TIDAL_NETNS=$p UCX_TLS=tcp,self UCX_NET_DEVICES=$nl_dev \
            OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader \
            PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include=$p \
            "$@" </dev/null &
        nl_child=$!
        wait "$nl_child"
        rc=$?
        nl_child=""
        nl_stats "$p"
        exit $rc
        ;;
    exec-rank)
        [ $# -ge 1 ] || nl_usage
        local rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}
        [ -n "${TIDAL_NETNS:-}" ] || nl_die "exec-rank: TIDAL_NETNS is not set (use 'run')"
        [ -n "$rank" ] || nl_die "exec-rank: no OMPI_COMM_WORLD_RANK (start it with mpirun)"
        [ -e "/run/netns/$TIDAL_NETNS-r$rank" ] ||
            nl_die "exec-rank: rank $rank has no namespace $TIDAL_NETNS-r$rank (more ranks" \
                "than the run's --np?)"
        exec ip netns exec "$TIDAL_NETNS-r$rank" "$@"
        ;;
    rate)
        [ $# -eq 1 ] || nl_usage
        [ -n "${TIDAL_NETNS:-}" ] || nl_die "rate: TIDAL_NETNS is not set (use it inside 'run')"
        nl_rate "$TIDAL_NETNS" "$1"
        ;;
    check) nl_check ;;
    cleanup) nl_cleanup_stale ;;
    *) nl_usage ;;
    esac
}

nl_main "$@"
