#!/bin/sh
# tools/cluster itself: layouts it refuses (exit 2, before any set-up), the hosts and devices a
# run gets, a starved device's rank not taken for dead, the shaped link's rate measured,
# COMMAND's exit status, and nothing left behind: after a run, a failed COMMAND, SIGINT, and a
# run killed outright (cleaned up by the next).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"

# inside the cluster: the ranks' host names and devices, one line per rank
ranks_report() {
    cluster_mpirun 4 sh -c 'g=`sed -n "s/^[0-9]*:cpu:\(.*\)/\1/p; s/^[0-9]*:cpu,cpuacct:\(.*\)/\1/p" /proc/self/cgroup | head -n 1`
        echo "rank=$OMPI_COMM_WORLD_RANK host=`hostname` cg=$g quota=`cat /sys/fs/cgroup/cpu$g/cpu.cfs_quota_us` period=`cat /sys/fs/cgroup/cpu$g/cpu.cfs_period_us`"'
}

# inside the cluster: 12.5 MB from h0 to h1 over TCP; prints the seconds it took
link_rate() {
    port=`awk 'BEGIN { srand(); print 40000 + int(rand() * 9000) }'`
    cluster_on h1 /usr/bin/python3 -c "
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $port)); s.listen(1); s.settimeout(30)
c, _ = s.accept(); n = 0
while True:
    b = c.recv(1 << 20)
    if not b: break
    n += len(b)
print(n, file=sys.stderr)" 2>"$TIDAL_CLUSTER_TMP.recv" &
    srv=$!
    sleep 0.5
    h1=`cluster_on h1 ip -4 -o addr show dev eth0 | sed 's#.* inet \([0-9.]*\)/.*#\1#'`
    cluster_on h0 /usr/bin/python3 -c "
import socket, time
s = socket.create_connection(('$h1', $port), timeout=30)
buf = b'x' * (1 << 20); t = time.time()
for _ in range(11): s.sendall(buf)
s.sendall(buf[:(12500000 - 11 * (1 << 20))]); s.shutdown(socket.SHUT_WR); s.recv(1)
print('%.3f' % (time.time() - t))"
    wait $srv
}

# inside the cluster: what UCX uses between each pair of ranks
transports() { cluster_mpirun 4 "$TIDAL" info --transports; }

# inside the cluster: gfc_failure's starved device (TAP from rank 0)
starved() { cluster_mpirun 3 "$abs_top_builddir/tests/gfc/gfc_failure" throttled; }

leftovers() {
    { ip netns list 2>/dev/null | awk '{ print $1 }'; ls /sys/fs/cgroup/cpu 2>/dev/null
      ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }'; } | grep "^$1" | tr '\n' ' '
}

cluster_enter "$@"
cluster_check
tmp=${TMPDIR:-/tmp}/tidal-cluster-test.$$
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
export TIDAL_CLUSTER_TMP=$tmp/x

# ---- refused layouts: exit 2, nothing made ----
# (each run's objects are named by its pid: other tests may run clusters of their own meanwhile)
made=""
refused() { "$CLUSTER" "$@" >"$tmp/refused" 2>&1 & rpid=$!; wait $rpid; rc=$?
            out=`cat "$tmp/refused"`; made="$made`leftovers tdlcl$rpid`"; }
refused --hosts 3 --ranks-per-host 3 --rank-cpu 0.25 -- true
check "9 devices of 0.25 core on `nproc` cores refused with exit 2 ($rc)" [ $rc = 2 ]
check "the refusal says how many cores the layout needs and what to do" sh -c \
    "printf '%s' \"\$1\" | grep -q 'need 2.25 cores' && printf '%s' \"\$1\" | grep -q 'Use --rank-cpu'" _ "$out"
for bad in "--hosts 0" "--hosts 17" "--ranks-per-host x" "--rank-cpu 1.5" "--link fast" \
    "--link 1gbit,soon" "--period-us 10" "--time-limit 0" "--bogus"; do
    # shellcheck disable=SC2086
    refused $bad -- true
    check "'$bad' refused with exit 2 and a reason ($rc: `printf '%s' "$out" | head -n 1`)" \
        sh -c "[ $rc = 2 ] && [ -n \"\$1\" ]" _ "$out"
done
out=`"$CLUSTER" --hosts 2 2>&1`; rc=$?
check "no COMMAND: exit 2 ($rc)" [ $rc = 2 ]
check "nothing was made by the refused runs" [ -z "$made" ]
"$CLUSTER" --help >"$tmp/help" 2>&1; rc=$?
check "--help: exit 0 and the options ($rc)" sh -c \
    "[ $rc = 0 ] && grep -q -- '--ranks-per-host' '$tmp/help' && grep -q -- '--rank-cpu' '$tmp/help'"
out=`"$CLUSTER" layout --hosts 2 --ranks-per-host 4 --rank-cpu 0.25 --link 1gbit`
check "the layout line says hosts, ranks per host, the device's share and the link" sh -c \
    "printf '%s' \"\$1\" | grep -q '2 hosts x 4 ranks, each rank a device of 0.25 core' &&
     printf '%s' \"\$1\" | grep -q 'host links 1gbit'" _ "$out"

# ---- a run: hosts, devices, exit status ----
cluster_run --hosts 2 --ranks-per-host 2 --rank-cpu 0.25 --link 1gbit -- ranks_report \
    >"$tmp/ranks" 2>"$tmp/ranks.err"; rc=$?
check "a run of 4 ranks on 2 hosts x 2 exits 0 ($rc)" [ $rc = 0 ]
diag "`sort "$tmp/ranks" | tr '\n' ';'`"
check "ranks 0-1 on host h0, 2-3 on h1" sh -c \
    "[ \"\`sort '$tmp/ranks' | sed 's/.*host=\([^ ]*\).*/\1/' | tr '\n' ' '\`\" = 'h0 h0 h1 h1 ' ]"
check "each rank in a cgroup of its own" sh -c \
    "[ \`sed 's/.*cg=\([^ ]*\).*/\1/' '$tmp/ranks' | sort -u | grep -c r\` = 4 ]"
check "each device: a quarter of a core (quota / period = 0.25)" sh -c \
    "awk '{ for (i = 1; i <= NF; i++) { split(\$i, kv, \"=\"); v[kv[1]] = kv[2] }
            if (v[\"period\"] + 0 == 0 || v[\"quota\"] / v[\"period\"] != 0.25) bad = 1; n++ }
          END { exit bad || n != 4 }' '$tmp/ranks'"
check "the run printed its layout" grep -q 'emulated cluster: 2 hosts x 2 ranks' "$tmp/ranks.err"
"$CLUSTER" --quiet --hosts 1 --ranks-per-host 1 -- sh -c "echo \$TIDAL_CLUSTER >'$tmp/p7'; exit 7" \
    2>/dev/null; rc=$?
check "COMMAND's exit status is the run's (7: $rc)" [ $rc = 7 ]
p4=`sed -n 's#.*cg=/\(tdlcl[0-9]*\)/.*#\1#p' "$tmp/ranks" | head -n 1`
p7=`cat "$tmp/p7" 2>/dev/null`
check "nothing left after a run ($p4) and a failed COMMAND ($p7)" \
    sh -c "[ -n '$p4' ] && [ -n '$p7' ] && [ -z \"$(leftovers $p4)$(leftovers $p7)\" ]"

# ---- a starved device is not a dead rank ----
# A device's quota can hold its rank back for seconds (after long kernel work it owes its quota
# for as long as it overran), but its keep-alive thread runs beside the device
# (TIDAL_GFC_KEEPALIVE_CGROUP): rank 2 starved to 1 ms a second for 4 s is never declared dead.
cluster_run --hosts 1 --ranks-per-host 3 --rank-cpu 0.25 -- starved >"$tmp/starved" \
    2>"$tmp/starved.err"; rc=$?
grep '^#\|^not ok' "$tmp/starved" | sed 's/^/# /'
check "a device starved for 4 s: gfc_failure throttled exits 0 ($rc)" [ $rc = 0 ]
check "the keep-alive thread beside the device, the main thread in it" \
    grep -q '^ok 1 - the keep-alive thread is in gfc-keepalive-cgroup' "$tmp/starved"
check "nobody declared the starved rank dead; the all-reduce completed" \
    grep -q '^ok 2 - rank 2 starved to 1 ms a second for 4 s: nobody declared dead' "$tmp/starved"

# ---- the transports: shared memory within a host, TCP on eth0 between hosts ----
cluster_run --hosts 2 --ranks-per-host 2 --rank-cpu 0.25 -- transports >"$tmp/tl" 2>"$tmp/tl.err"
rc=$?
diag "`grep '^transports:' "$tmp/tl"`"
check "tidal info --transports on 2 hosts x 2: 12 pairs (exit $rc)" \
    [ "`grep -c '^transport from=' "$tmp/tl"`" = 12 ]
check "every pair within a host uses shared memory, never TCP" sh -c \
    "grep '^transport from=' '$tmp/tl' | awk '{ split(\$4, a, \"=\"); split(\$5, b, \"=\")
        if (a[2] == b[2]) { n++; if (\$6 ~ /tcp/ || \$6 !~ /(sysv|posix|cma)/) bad = 1 } }
        END { exit bad || n != 4 }'"
check "every pair across hosts uses TCP on eth0, the shaped link" sh -c \
    "grep '^transport from=' '$tmp/tl' | awk '{ split(\$4, a, \"=\"); split(\$5, b, \"=\")
        if (a[2] != b[2]) { n++; if (\$6 != \"tl=tcp/eth0\") bad = 1 } }
        END { exit bad || n != 8 }'"

# ---- the link: 12.5 MB at 100 Mbit/s take about a second ----
cluster_run --hosts 2 --ranks-per-host 1 --link 100mbit -- link_rate >"$tmp/rate" 2>"$tmp/rate.err"
secs=`tail -n 1 "$tmp/rate"`
diag "12.5 MB from h0 to h1 at 100mbit: ${secs:-?} s (`cat "$tmp/x.recv" 2>/dev/null` bytes received)"
check "the link runs at its rate: 12.5 MB at 100 Mbit/s in 0.85-1.5 s (${secs:-none})" \
    awk -v s="${secs:-0}" 'BEGIN { exit !(s >= 0.85 && s <= 1.5) }'
check "the link's counters show the bytes (host h0 sent > 11 MiB)" sh -c \
    "grep 'host h0 link' '$tmp/rate.err' | awk '{ exit !(\$5 + 0 > 11) }'"

# ---- SIGINT: COMMAND stopped, everything removed, exit 130 ----
# (a background job of a script starts with SIGINT ignored, which no trap can undo: env resets it)
env --default-signal=INT "$CLUSTER" --quiet --hosts 2 --ranks-per-host 1 -- sleep 61.5 >/dev/null 2>&1 &
pid=$!
n=0
while [ -z "`leftovers tdlcl$pid`" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
check "a run's namespaces and cgroups exist while it runs (`leftovers tdlcl$pid | wc -w` objects)" \
    [ -n "`leftovers tdlcl$pid`" ]
kill -INT $pid
wait $pid; rc=$?
check "SIGINT: the run exits 130 ($rc)" [ $rc = 130 ]
check "SIGINT: nothing left" [ -z "`leftovers tdlcl$pid`" ]
check "SIGINT: its COMMAND is gone" sh -c "! pgrep -f '^sleep 61.5$' >/dev/null"

# ---- --time-limit: COMMAND ended with exit 124, everything removed ----
t0=`date +%s`
"$CLUSTER" --hosts 2 --ranks-per-host 1 --time-limit 2 -- sleep 63.5 >/dev/null 2>"$tmp/limit" &
pid=$!
wait $pid; rc=$?
secs=$((`date +%s` - t0))
check "--time-limit 2: a command of 63.5 s ended, exit 124 ($rc, after $secs s)" \
    [ $rc = 124 -a $secs -lt 30 ]
check "--time-limit: it says why" grep -q 'ran past --time-limit 2 s' "$tmp/limit"
check "--time-limit: nothing left, its COMMAND gone" \
    sh -c "[ -z \"\$1\" ] && ! pgrep -f '^sleep 63.5$' >/dev/null" _ "`leftovers tdlcl$pid`"
# a command that ends well within its limit keeps its own status (the limit's watcher, ended
# with it, must not end the run on its way out: it did, in about half of such runs)
bad=0
for i in 1 2 3 4 5 6 7 8 9 10; do
    "$CLUSTER" --quiet --hosts 1 --ranks-per-host 1 --time-limit 100 -- sh -c 'exit 3' 2>/dev/null
    [ $? = 3 ] || bad=$((bad + 1))
done
check "--time-limit 100: 10 quick commands each exit with their own status (3); $bad did not" [ $bad = 0 ]

# ---- killed outright: the next run (or cleanup) removes what it left ----
"$CLUSTER" --quiet --hosts 2 --ranks-per-host 1 -- sleep 62.5 >/dev/null 2>&1 &
pid=$!
n=0
# killed once its set-up is done (its last step: the devices), not in the middle of it
while [ ! -d "/sys/fs/cgroup/cpu/tdlcl$pid/r1" ] && [ $n -lt 600 ]; do sleep 0.1; n=$((n + 1)); done
sleep 0.5
kill -KILL $pid
wait $pid 2>/dev/null
pkill -f "^sleep 62.5$" 2>/dev/null # the orphaned COMMAND: no namespace holds it
check "a run killed with SIGKILL leaves its namespaces behind" [ -n "`leftovers tdlcl$pid`" ]
"$CLUSTER" cleanup 2>"$tmp/cleanup"
left=`leftovers tdlcl$pid`
# (another test's run starting meanwhile may have removed them first: any run cleans up)
diag "cleanup: `cat "$tmp/cleanup"`"
check "tools/cluster cleanup leaves nothing of the killed run" [ -z "$left" ]

done_testing
