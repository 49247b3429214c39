# A single-node Slurm cluster for one test, sourced after tests/env.sh: munged, slurmctld and
# slurmd (Debian's munge and slurm-wlm) on this host, every file in a temporary directory, on
# ports of their own, torn down on exit. It never touches the system's munge or Slurm.
#
#   slurm_nodes=2  # before sourcing, for more than one node
#   slurm_start || { skip_all "$slurm_why"; exit 0; }     # sets SLURM_CONF, $slurm_dir
#   id=`sbatch --parsable ...`; slurm_wait_state $id COMPLETED 120
#
# The test's own points are its business; slurm_start says why it could not start in $slurm_why.

. "$abs_top_srcdir/tools/slurm-common.sh"

slurm_dir=""
slurm_pids=""
slurm_nodes=${slurm_nodes:-1}
slurm_why=""

# slurm_skip_all N REASON: N skipped points and the plan (nothing could be tested)
slurm_skip_all() {
    n=$1; shift
    i=0
    while [ $i -lt "$n" ]; do skip "$*"; i=$((i + 1)); done
    done_testing
}

slurm_port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

slurm_start() {
    for c in munged slurmctld slurmd sbatch scontrol srun ss; do
        command -v $c >/dev/null 2>&1 || PATH=$PATH:/usr/sbin command -v $c >/dev/null 2>&1 || {
            slurm_why="$c is not installed (Debian: slurm-wlm munge iproute2)"
            return 1
        }
    done
    PATH=$PATH:/usr/sbin
    slurm_dir=`mktemp -d /tmp/tidal-slurm.XXXXXX` || { slurm_why="mktemp failed"; return 1; }
    d=$slurm_dir
    mkdir -p "$d/state" "$d/work"
    i=0
    while [ $i -lt "$slurm_nodes" ]; do mkdir -p "$d/spool/tidal$i"; i=$((i + 1)); done
    slurm_munged_start "$d"
    st=$?
    slurm_pids=$slurm_munged_pid
    [ $st = 0 ] || { slurm_why=$slurm_munged_why; return 1; }
    host=`hostname -s`
    # ports of our own (the controller's, then ten for each slurmd): several tests may each
    # run a cluster at once
    munge_pid=$slurm_pids
    attempt=0
    while :; do
        attempt=$((attempt + 1))
        tries=0
        while :; do
            tries=$((tries + 1))
            # below the kernel's ephemeral range (32768 and up), where outgoing connections take theirs
            base=$((20000 + (($$ * 7 + tries * 131 + `od -An -N2 -tu2 /dev/urandom`) % 400) * 30))
            slurm_port_free $base && slurm_port_free $((base + 1)) && slurm_port_free $((base + 11)) && break
            [ $tries -lt 20 ] || { slurm_why="no free ports"; return 1; }
        done
        cat >"$d/slurm.conf" <<EOF
ClusterName=tidaltest
# job ids of its own too: srun --mpi=pmix names its files in /tmp by job and step
FirstJobId=$base
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$base
SrunPortRange=$((base + 2))-$((base + 9))
EOF
        slurm_conf_common "$d" >>"$d/slurm.conf"
        # $slurm_nodes nodes, each a slurmd of its own on this host (the components of a
        # heterogeneous job never share a node: the backfill scheduler plans whole nodes)
        nodes=""
        i=0
        while [ $i -lt "$slurm_nodes" ]; do
            echo "NodeName=tidal$i NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base + 1 + i * 10)) CPUs=8 RealMemory=4000 State=UNKNOWN" >>"$d/slurm.conf"
            nodes="$nodes${nodes:+,}tidal$i"
            i=$((i + 1))
        done
        echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$d/slurm.conf"
        SLURM_CONF=$d/slurm.conf
        export SLURM_CONF
        slurmctld -D -i >"$d/slurmctld.out" 2>&1 &
        slurm_pids="$slurm_pids $!"
        i=0
        while [ $i -lt "$slurm_nodes" ]; do
            slurmd -D -N tidal$i >"$d/slurmd-tidal$i.out" 2>&1 &
            slurm_pids="$slurm_pids $!"
            i=$((i + 1))
        done
        # up to 40 s for the nodes to come up idle. A daemon that dies (a port taken by another
        # test between our check and its bind) means another attempt on other ports; sinfo is
        # bounded, since with no controller it waits MessageTimeout per call.
        n=0
        dead=""
        while [ $n -lt 200 ]; do
            for p in $slurm_pids; do kill -0 "$p" 2>/dev/null || dead=$p; done
            [ -n "$dead" ] && break
            st=`timeout 5 sinfo -h -o %T 2>/dev/null | sort -u | tr '\n' ' '`
            [ "$st" = "idle " ] && return 0
            sleep 0.2; n=$((n + 1))
        done
        slurm_why="the nodes did not come up (state '$st'${dead:+, a daemon exited}): `tail -n 2 "$d/slurmctld.log" "$d"/slurmd-*.log 2>/dev/null | tr '\n' ' '`"
        for p in $slurm_pids; do [ "$p" = "$munge_pid" ] || kill -KILL "$p" 2>/dev/null; done
        slurm_pids=$munge_pid
        rm -rf "$d/state"/* "$d/spool"/*/* 2>/dev/null
        [ $attempt -lt 3 ] || return 1
    done
}

# slurm_submit DESC SBATCH-ARGS...: submits, sets $slurm_id; on failure a failed point naming
# sbatch's error, and false (the caller skips that case rather than waiting for nothing).
slurm_submit() {
    desc=$1; shift
    slurm_id=`sbatch --parsable "$@" 2>"$slurm_dir/sbatch.err"`
    slurm_id=${slurm_id%%;*}
    [ -n "$slurm_id" ] && return 0
    not_ok "$desc: sbatch failed: `tr '\n' ' ' <"$slurm_dir/sbatch.err"`"
    return 1
}

# slurm_job_field ID FIELD: a field of `scontrol show job` (JobState, Restarts, ExitCode...)
slurm_job_field() {
    scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# slurm_wait_state ID STATE SECONDS: waits for the job to reach STATE (or any end state);
# true if it is STATE. $slurm_state holds the last state seen.
slurm_wait_state() {
    n=0
    while [ $n -lt $(($3 * 5)) ]; do
        slurm_state=`slurm_job_field "$1" JobState`
        [ "$slurm_state" = "$2" ] && return 0
        case $slurm_state in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
            return 1 ;;
        esac
        sleep 0.2; n=$((n + 1))
    done
    return 1
}

# slurm_wait_file FILE PATTERN SECONDS: waits for a line matching PATTERN in FILE
slurm_wait_file() {
    n=0
    while [ $n -lt $(($3 * 5)) ]; do
        grep -q "$2" "$1" 2>/dev/null && return 0
        sleep 0.2; n=$((n + 1))
    done
    return 1
}

# Cancels the jobs, stops the daemons, then ends whatever still runs with this cluster's
# SLURM_CONF in its environment (job scripts and ranks) and removes the directory.
slurm_stop() {
    [ -n "$slurm_dir" ] || return 0
    if [ -n "$slurm_pids" ]; then
        scancel --full --quiet `squeue -h -o %A 2>/dev/null` 2>/dev/null
        n=0
        while [ -n "`squeue -h -o %A 2>/dev/null`" ] && [ $n -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
    fi
    for p in $slurm_pids; do kill -TERM "$p" 2>/dev/null; done
    n=0
    while [ $n -lt 50 ]; do
        alive=""
        for p in $slurm_pids; do kill -0 "$p" 2>/dev/null && alive="$alive $p"; done
        [ -z "$alive" ] && break
        sleep 0.1; n=$((n + 1))
    done
    for p in $slurm_pids; do kill -KILL "$p" 2>/dev/null; done
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}; p=${p%/environ}
        [ "$p" = $$ ] && continue
        if { tr "\0" "\n" <"$e"; } 2>/dev/null | grep -qx "SLURM_CONF=$slurm_dir/slurm.conf"; then
            kill -KILL "$p" 2>/dev/null
        fi
    done
    wait 2>/dev/null
    if [ -n "${TIDAL_SLURM_KEEP:-}" ]; then
        echo "# kept $slurm_dir"
    else
        rm -rf "$slurm_dir"
    fi
    slurm_dir=""
}

# slurm_train_conf FILE STEPS MICRO-BATCH EVERY CKPT-EVERY: a tidal config of the tiny model at
# 32x32, a global batch of 4, logging every EVERY steps, for TIDAL_TRAIN_CONF
slurm_train_conf() {
    cat >"$1" <<CONF
model = tiny
resolution = 32
batch = 4
micro-batch = $3
steps = $2
warmup = 5
val-every = 0
log-every = $4
ckpt-every = $5
CONF
}

# slurm_requeue_checks L ID OUT RUN STEPS [NODES]: the time-limit warning sent by hand (what
# --signal=B:USR1@60 sends) to job ID's batch shell once RUN has a checkpoint, then the checks of
# preemption under launcher L: the ranks stopped after a step, the script requeued the job,
# Slurm ran it a second time (on nodes NODES, a pattern, when given), which resumed from the
# checkpoint of that step and completed its STEPS steps with a last checkpoint that verifies.
slurm_requeue_checks() {
    _l=$1 _id=$2 _out=$3 _run=$4 _steps=$5 _nodes=${6:-}
    _n=0
    while [ ! -s "$_run/ckpt/latest" ] && [ $_n -lt 300 ]; do sleep 0.2; _n=$((_n + 1)); done
    if ! scancel --signal=USR1 --batch "$_id" 2>"$slurm_dir/scancel.err"; then
        not_ok "$_l: scancel --signal=USR1 --batch $_id: `cat "$slurm_dir/scancel.err"`" \
            "(`slurm_job_field "$_id" JobState`)"
        slurm_diag "$_out"
        return 1
    fi
    slurm_wait_file "$_out" "stopped after step" 60
    _stopped=`sed -n 's/.*stopped after step \([0-9]*\) on SIGUSR1.*/\1/p' "$_out" | head -n 1`
    check "$_l: SIGUSR1 reached the ranks, which stopped after step ${_stopped:-none}" \
        [ -n "$_stopped" ]
    [ -n "$_stopped" ] || _stopped=0
    check "$_l: the script requeued the job" slurm_wait_file "$_out" "scontrol requeue $_id" 10
    slurm_wait_state "$_id" COMPLETED 120
    _restarts=`slurm_job_field "$_id" Restarts`
    check "$_l: the job (job $_id) ends COMPLETED ($slurm_state), run twice (Restarts=$_restarts)" \
        [ "$slurm_state:$_restarts" = COMPLETED:1 ]
    check "$_l: the second run saw SLURM_RESTART_COUNT=1${_nodes:+ and ran on $_nodes}" \
        grep -q "restart 1, ${_nodes:+[0-9]* tasks on $_nodes}" "$_out"
    _ck=`printf 'ckpt-%08d.h5' "$_stopped"`
    check "$_l: it resumed from $_ck at step $_stopped" \
        grep -q "resumed from .*/$_ck at step $_stopped\$" "$_out"
    _latest="$_run/ckpt/`cat "$_run/ckpt/latest" 2>/dev/null`"
    check "$_l: it finished its $_steps steps; the last checkpoint verifies, at step $_steps" \
        sh -c "grep -q 'step  *$_steps/$_steps' '$_out' && '$TIDAL' ckpt verify '$_latest' >/dev/null &&
               '$TIDAL' ckpt info '$_latest' | grep -q 'step  *$_steps\$'"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$_out" "$slurm_dir/slurmctld.log"
}

# slurm_diag FILE...: the tail of each file as TAP comments (after a failure)
slurm_diag() {
    for f in "$@"; do
        [ -f "$f" ] || continue
        echo "# --- $f"
        tail -n 25 "$f" | sed 's/^/#   /'
    done
}
