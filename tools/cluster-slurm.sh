# tools/cluster-slurm.sh: Slurm on the emulated cluster, sourced by `tools/cluster --slurm`, which
# calls cl_slurm_up once the hosts exist and before it runs COMMAND. Debian's munge and slurm-wlm:
#   munged     in the root namespace, its own key and socket in the run's folder (a unix socket in
#              /tmp: the hosts' namespaces share the file system, so slurmd, the jobs, sbatch and
#              srun all reach it)
#   slurmctld  in the head namespace (where COMMAND runs), at 10.78.N.254 (the unshaped link to the switch)
#   slurmd     one per host, inside the host's namespace under its host name hK (NodeName=hK,
#              NodeAddr=10.78.N.(K+1)), with CPUs= the host's devices: a node holds as many tasks
#              as the host has devices, so `sbatch -N 2 --ntasks-per-node=R` fills the cluster
# Each task of a step joins a device through TaskProlog (tools/cluster task-prolog); under mpirun
# the fork agent puts the ranks in theirs, as without Slurm.
#
# Open MPI inside a job: tools/cluster's OMPI_MCA_* settings stay exported. Inside an allocation
# mpirun picks the slurm plm (srun starts its daemons) over the rsh agent by itself, and the
# default hostfile names the same hosts hK as the allocation, so it only confirms it (tested with
# the whole allocation and with one het component); the fork agent and the oob/btl networks of
# the cluster's subnet are what a job's mpirun needs. Outside a job, mpirun still runs on the
# hosts through the rsh agent. Only one is added: the daemons' srun marks them
# (TIDAL_CLUSTER_DAEMON), so that TaskProlog leaves them out of the ranks' devices.
#
# The globals are tools/cluster's: cl_prefix, cl_hosts, cl_rph, cl_extra.
# shellcheck disable=SC2154

# shellcheck source=tools/slurm-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/slurm-common.sh"

# cl_slurm_port_free PORT: nothing listens on PORT in the root namespace.
cl_slurm_port_free() { ! ss -Htln "sport = :$1" 2>/dev/null | grep -q .; }

# cl_slurm_conf DIR NET BASE: slurm.conf of this cluster, controller on port BASE, each slurmd on
# BASE+1 (the hosts' ports are their own), srun's ports BASE+2..BASE+29.
cl_slurm_conf() {
    local d=$1 net=$2 base=$3 k cpus nodes=""
    cat <<EOF
ClusterName=$cl_prefix
# job ids of its own: srun --mpi=pmix names its files in /tmp by job and step
FirstJobId=$base
SlurmctldHost=$(hostname -s)(10.78.$net.254)
SlurmctldPort=$base
SlurmdPort=$((base + 1))
SrunPortRange=$((base + 2))-$((base + 29))
# a temporary folder per node: srun --mpi=pmix makes spmix_appdir_UID_JOB.STEP there on every
# node of the step, and the hosts share /tmp
TmpFS=$d/tmp/%n
# every task joins its device (the cgroup of its host's next slot) before it runs
TaskProlog=$d/task-prolog
EOF
    slurm_conf_common "$d"
    for k in $(seq 0 $((cl_hosts - 1))); do
        cpus=$cl_rph
        [ "$k" = 0 ] && cpus=$((cl_rph + cl_extra))
        echo "NodeName=h$k NodeHostname=h$k NodeAddr=10.78.$net.$((k + 1)) CPUs=$cpus" \
            "RealMemory=4000 State=UNKNOWN"
        nodes="$nodes${nodes:+,}h$k"
    done
    echo "PartitionName=hosts Nodes=$nodes Default=YES MaxTime=INFINITE State=UP"
}

# cl_slurm_why DIR: the last lines of the daemons' logs, for a start that failed.
cl_slurm_why() {
    local f
    for f in "$1"/munged.log "$1"/munged.out "$1"/slurmctld.log "$1"/slurmctld.out \
        "$1"/slurmd-h*.log "$1"/slurmd-h*.out; do
        [ -s "$f" ] || continue
        echo "--- $f"
        tail -n 5 "$f"
    done
}

# cl_slurm_up PREFIX DIR NET: munged, slurmctld and one slurmd per host; exports SLURM_CONF and
# returns 0 once every node is idle. Root-namespace daemons' pids go to DIR/slurm.pids, which
# tools/cluster's clean-up kills; the slurmds die with their namespace's processes.
cl_slurm_up() {
    local p=$1 d=$2 net=$3 k base tries attempt n st dead pid ctld pids munge_pid
    case :$PATH: in *:/usr/sbin:*) ;; *) PATH=$PATH:/usr/sbin ;; esac
    export PATH
    slurm_munged_start "$d"
    st=$?
    munge_pid=$slurm_munged_pid
    echo "$munge_pid" >"$d/slurm.pids"
    disown "$munge_pid"
    [ "$st" = 0 ] || { echo "$slurm_munged_why"; cl_slurm_why "$d"; return 1; }
    export SLURM_CONF=$d/slurm.conf
    export OMPI_MCA_plm_slurm_args=${OMPI_MCA_plm_slurm_args:---export=ALL,TIDAL_CLUSTER_DAEMON=1}
    # A controller port nobody listens on; the hosts' ports are their own. A daemon that dies
    # (the port taken between the check and the bind) means another try on other ports.
    for attempt in 1 2 3; do
        for tries in $(seq 1 40); do
            # 12000-19800: below the ephemeral range, apart from tests/slurm/cluster.sh's ports
            base=$((12000 + (($$ * 7 + tries * 131 + $(od -An -N2 -tu2 /dev/urandom)) % 260) * 30))
            cl_slurm_port_free "$base" && break
            [ "$tries" -lt 40 ] || { echo "no free port for slurmctld"; return 1; }
        done
        rm -rf "$d/state" "$d/spool" "$d/tmp"
        mkdir -p "$d/state"
        for k in $(seq 0 $((cl_hosts - 1))); do mkdir -p "$d/spool/h$k" "$d/tmp/h$k"; done
        chmod 1777 "$d/tmp"/h*
        cl_slurm_conf "$d" "$net" "$base" >"$d/slurm.conf"
        nsenter --net="/run/netns/$p-head" slurmctld -D -i >"$d/slurmctld.out" 2>&1 &
        ctld=$!
        echo "$ctld" >>"$d/slurm.pids"
        pids=""
        for k in $(seq 0 $((cl_hosts - 1))); do
            # nsenter, not ip netns exec, which remounts /sys and hides the devices' cgroups
            nsenter --net="/run/netns/$p-h$k" unshare --uts \
                sh -c "hostname h$k && exec slurmd -D -N h$k" >"$d/slurmd-h$k.out" 2>&1 &
            pids="$pids $!"
        done
        # up to 40 s for the nodes to come up idle; sinfo is bounded, since with no controller
        # it waits MessageTimeout per call
        n=0
        dead=""
        st=""
        while [ $n -lt 160 ]; do
            for pid in $ctld $pids; do kill -0 "$pid" 2>/dev/null || dead=$pid; done
            [ -n "$dead" ] && break
            st=$(timeout 5 nsenter --net="/run/netns/$p-head" sinfo -h -o %T 2>/dev/null |
                 sort -u | tr '\n' ' ')
            if [ "$st" = "idle " ]; then
                # no "Killed" notices from this shell when tools/cluster's clean-up ends them
                # shellcheck disable=SC2086
                disown $ctld $pids
                echo "Slurm up: slurmctld at 10.78.$net.254:$base, $cl_hosts nodes idle"
                return 0
            fi
            sleep 0.25
            n=$((n + 1))
        done
        # shellcheck disable=SC2086
        kill -KILL $ctld $pids 2>/dev/null
        # shellcheck disable=SC2086
        wait $ctld $pids 2>/dev/null
        # a pid that is gone must not stay where the clean-up kills (it may be reused)
        echo $munge_pid >"$d/slurm.pids"
        cl_slurm_why "$d"
        [ -n "$dead" ] && dead=", daemon $dead exited"
        echo "the nodes did not come up (attempt $attempt, state '${st% }'$dead)"
        [ -n "$dead" ] || break
    done
    return 1
}
