# tools/slurm-common.sh: what a private Slurm cluster needs wherever it runs, sourced (POSIX sh)
# by tools/cluster-slurm.sh (a node per emulated host) and tests/slurm/cluster.sh (nodes on this
# host): munged with a key and socket of its own, and the slurm.conf settings both share. Neither
# ever touches the system's munge or Slurm.

# slurm_munged_start DIR: a munged of its own (key, socket, logs in DIR), running when it returns
# 0; its pid is in $slurm_munged_pid. Returns 1, with the reason in $slurm_munged_why, otherwise.
slurm_munged_start() {
    chmod 755 "$1" # munged wants its socket's directory searchable by all
    if command -v mungekey >/dev/null 2>&1; then
        mungekey -c -k "$1/munge.key" >/dev/null 2>&1
    else
        dd if=/dev/urandom of="$1/munge.key" bs=1024 count=1 2>/dev/null
    fi
    chmod 600 "$1/munge.key"
    munged -F -f --socket="$1/munge.sock" --key-file="$1/munge.key" --pid-file="$1/munged.pid" \
        --log-file="$1/munged.log" --seed-file="$1/munged.seed" >"$1/munged.out" 2>&1 &
    slurm_munged_pid=$!
    slurm_munged_why=""
    _n=0
    while [ ! -S "$1/munge.sock" ] && [ $_n -lt 50 ]; do sleep 0.1; _n=$((_n + 1)); done
    if ! munge -S "$1/munge.sock" -n 2>/dev/null | unmunge -S "$1/munge.sock" >/dev/null 2>&1
    then
        slurm_munged_why="munged did not start: $(tail -n 1 "$1/munged.log" "$1/munged.out" \
            2>/dev/null | tr '\n' ' ')"
        return 1
    fi
}

# slurm_conf_common DIR: the slurm.conf lines every private cluster shares (munge in DIR, state,
# spool, pid and log files in DIR, no accounting, scheduling every second); the caller adds the
# cluster's name, ports, nodes and partition.
slurm_conf_common() {
    cat <<EOF
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start once the last run's credential expires (default 120 s)
AuthInfo=socket=$1/munge.sock,cred_expire=5
StateSaveLocation=$1/state
SlurmdSpoolDir=$1/spool/%n
SlurmctldPidFile=$1/slurmctld.pid
SlurmdPidFile=$1/slurmd-%n.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmdLogFile=$1/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# backfill: heterogeneous jobs need it
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$1/jobcomp.txt
# the nodes' CPUs are those of their NodeName lines, not the machine's
SlurmdParameters=config_overrides
ReturnToService=2
MinJobAge=600
KillWait=5
InactiveLimit=0
MessageTimeout=20
# schedule every second, so a requeued job starts once its credential has expired
SchedulerParameters=sched_interval=1,bf_interval=1
EOF
}
