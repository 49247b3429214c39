# tidal-job.sh: what the tidal batch scripts share (sourced by train/serve/run/hetjob.sbatch).
# It picks the launcher, binds one GPU per rank, forwards Slurm's warning signal to the ranks
# and requeues the job after they have checkpointed. bash, since Slurm runs batch scripts as
# they say and these use arrays and `wait -n`-free signal loops.
#
# Environment read (all optional):
#   TIDAL                the tidal program (default: `tidal` on PATH, else
#                        $SLURM_SUBMIT_DIR/build/src/tidal)
#   TIDAL_LAUNCHER       srun or mpirun (default: srun when `srun --mpi=list` offers pmix)
#   TIDAL_SRUN_FLAGS     extra srun flags, TIDAL_MPIRUN_FLAGS extra mpirun flags
#   TIDAL_REQUEUE        1 (default): after SIGUSR1 and a checkpoint, `scontrol requeue`; 0: exit
#   TIDAL_GPU_BIND       1 (default): one GPU per rank by node-local rank where GPUs exist; 0: off
#   TIDAL_RECOVERY       1 (default): a dead rank does not end the job (srun --no-kill
#                        --kill-on-bad-exit=0, mpirun --enable-recovery); the job's status is
#                        then rank 0's exit code, which each rank leaves in a folder of the
#                        launch (TIDAL_EXIT_DIR, doc/failures.md); 0: the first death ends it
#   TIDAL_RECOVER_GRACE  seconds a launch may go on once rank 0 has ended, before SIGTERM
#                        (default 10): a launcher can wait for ever on a dead rank's node

tidal_job_log() { printf 'tidal-job[%s]: %s\n' "${SLURM_JOB_ID:-local}" "$*"; }
tidal_job_die() { printf 'tidal-job[%s]: error: %s\n' "${SLURM_JOB_ID:-local}" "$*" >&2; exit "${2:-2}"; }

# tidal_job_param NAME DEFAULT [CONF]: a parameter's value as tidal will see it, without the
# command line: TIDAL_<NAME> in the environment, else 'NAME = value' in CONF, else DEFAULT.
tidal_job_param() {
    local name=$1 def=$2 conf=${3:-} var v
    var=TIDAL_$(printf '%s' "$name" | tr 'a-z-' 'A-Z_')
    if [ -n "${!var:-}" ]; then
        printf '%s\n' "${!var}"
        return
    fi
    if [ -n "$conf" ] && [ -r "$conf" ]; then
        v=$(sed -n "s/^[[:space:]]*\(--\)\{0,1\}$name[[:space:]]*=[[:space:]]*//p" "$conf" |
            sed 's/[[:space:]]*#.*$//; s/^"\(.*\)"$/\1/' | tail -n 1)
        if [ -n "$v" ]; then
            printf '%s\n' "$v"
            return
        fi
    fi
    printf '%s\n' "$def"
}

# tidal_job_conf NAME: the config file of command NAME: $TIDAL_<NAME>_CONF, else NAME.conf
# beside the batch script (jobs/), else none. Prints the path, or nothing.
tidal_job_conf() {
    local var f
    var=TIDAL_$(printf '%s' "$1" | tr 'a-z' 'A-Z')_CONF
    f=${!var:-}
    if [ -n "$f" ]; then
        [ -r "$f" ] || tidal_job_die "$var=$f: no such file"
        printf '%s\n' "$f"
    elif [ -r "$TIDAL_JOBS_DIR/$1.conf" ]; then
        printf '%s\n' "$TIDAL_JOBS_DIR/$1.conf"
    fi
}

tidal_job_init() {
    : "${SLURM_SUBMIT_DIR:=$PWD}"
    if [ -z "${TIDAL:-}" ]; then
        if command -v tidal >/dev/null 2>&1; then
            TIDAL=$(command -v tidal)
        elif [ -x "$SLURM_SUBMIT_DIR/build/src/tidal" ]; then
            TIDAL=$SLURM_SUBMIT_DIR/build/src/tidal
        else
            tidal_job_die "no tidal program: put it on PATH or set TIDAL=/path/to/tidal"
        fi
    fi
    if [ -z "${TIDAL_LAUNCHER:-}" ]; then
        TIDAL_LAUNCHER=mpirun
        if command -v srun >/dev/null 2>&1 && srun --mpi=list 2>&1 | grep -qw pmix; then
            TIDAL_LAUNCHER=srun
        fi
    fi
    case $TIDAL_LAUNCHER in
    srun | mpirun) command -v "$TIDAL_LAUNCHER" >/dev/null 2>&1 ||
        tidal_job_die "TIDAL_LAUNCHER=$TIDAL_LAUNCHER is not on PATH" ;;
    *) tidal_job_die "TIDAL_LAUNCHER must be srun or mpirun, not '$TIDAL_LAUNCHER'" ;;
    esac
    # one BLAS thread per core the task holds
    export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}
    export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$OPENBLAS_NUM_THREADS}
    # GPUs: the list Slurm gave (--gres/--gpus), else every GPU nvidia-smi sees; each rank
    # keeps the one at its node-local rank (tidal_job_bind, below).
    TIDAL_JOB_NGPUS=0
    if [ "${TIDAL_GPU_BIND:-1}" = 1 ]; then
        if [ -z "${CUDA_VISIBLE_DEVICES:-}" ] && command -v nvidia-smi >/dev/null 2>&1; then
            local n
            n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
            [ "$n" -gt 0 ] && export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((n - 1)))
        fi
        if [ -n "${CUDA_VISIBLE_DEVICES:-}" ] && [ "$CUDA_VISIBLE_DEVICES" != NoDevFiles ]; then
            TIDAL_JOB_NGPUS=$(printf '%s\n' "$CUDA_VISIBLE_DEVICES" | tr , '\n' | grep -c .)
        fi
    fi
    [ "$TIDAL_JOB_NGPUS" -gt 0 ] && export TIDAL_JOB_GPUS=1
    TIDAL_JOB_PIDS=()
    declare -gA TIDAL_JOB_EXIT_DIRS=()
    TIDAL_JOB_SIGNALED=
    TIDAL_JOB_GOT=0
    trap 'tidal_job_forward USR1' USR1
    trap 'tidal_job_forward TERM' TERM
    trap 'tidal_job_forward INT' INT
    tidal_job_log "job ${SLURM_JOB_ID:-none} (${SLURM_JOB_NAME:-}), restart ${SLURM_RESTART_COUNT:-0}," \
        "${SLURM_NTASKS:-1} tasks on ${SLURM_JOB_NODELIST:-$(hostname)}, launcher $TIDAL_LAUNCHER," \
        "$TIDAL_JOB_NGPUS GPUs, program $TIDAL"
}

# Every rank runs as `bash -c "$TIDAL_JOB_RANK" tidal-rank SIGNAL CMD...`. Where GPUs exist it
# keeps the one at its node-local rank (modulo their number) of a list of several; a list of
# one (srun --gpus-per-task) is left as it is. SIGUSR1 (which srun and mpirun both pass on) is
# given to CMD as SIGNAL: `tidal train` checkpoints on USR1 itself, `tidal serve` stops cleanly
# on TERM (SIGTERM to srun or mpirun would end the ranks rather than pass it on).
TIDAL_JOB_RANK='
sig=$1; shift
if [ -n "${TIDAL_JOB_GPUS:-}" ]; then
    r=${SLURM_LOCALID:-${OMPI_COMM_WORLD_LOCAL_RANK:-${PMIX_LOCAL_RANK:-0}}}
    IFS=, read -r -a gpus <<<"${CUDA_VISIBLE_DEVICES:-}"
    if [ ${#gpus[@]} -gt 1 ]; then export CUDA_VISIBLE_DEVICES=${gpus[$((r % ${#gpus[@]}))]}; fi
fi
[ "$sig" = USR1 ] && exec "$@"
# the launcher may signal the whole process group: CMD ignores SIGUSR1 and gets SIGNAL from here
trap "" USR1
"$@" &
child=$!
trap "got=1; kill -s $sig \$child 2>/dev/null" USR1
while :; do got=0; wait $child; rc=$?; [ $got = 1 ] || exit $rc; done'

# tidal_job_launch GROUP SIGNAL NTASKS CMD...: starts CMD on every task of het component GROUP
# ('' for an ordinary job) in the background; on SIGUSR1 its ranks get SIGNAL (above). Sets
# TIDAL_JOB_LAST to the launcher's pid.
tidal_job_launch() {
    local group=$1 sig=$2 ntasks=$3 cmd v
    shift 3
    local recover=${TIDAL_RECOVERY:-1} exit_dir=
    if [ "$recover" = 1 ]; then
        # on the shared file system, where the batch shell reads what rank 0 (on any node) wrote
        exit_dir=$(mktemp -d "$PWD/.tidal-exit.${SLURM_JOB_ID:-local}.XXXXXX") ||
            tidal_job_die "cannot make a folder for the ranks' exit codes in $PWD" 1
    fi
    if [ "$TIDAL_LAUNCHER" = srun ]; then
        cmd=(srun --mpi=pmix)
        if [ "$recover" = 1 ]; then
            cmd+=(--no-kill --kill-on-bad-exit=0)
        else
            cmd+=(--kill-on-bad-exit=1)
        fi
        [ -n "$group" ] && cmd+=(--het-group="$group")
        # shellcheck disable=SC2206
        cmd+=($TIDAL_SRUN_FLAGS)
    else
        cmd=(mpirun -np "$ntasks")
        [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
        if [ -n "$group" ]; then
            # mpirun reads the allocation from SLURM_* and starts its daemons with srun: give
            # it the component's nodes and tasks, and its daemons' srun the component
            # (--het-group). SLURM_JOB_ID stays the job's: srun refuses a component's own id
            # ("Job not heterogeneous job leader").
            local pair n
            cmd=(env)
            for pair in JOB_NODELIST:JOB_NODELIST NODELIST:JOB_NODELIST \
                NNODES:JOB_NUM_NODES JOB_NUM_NODES:JOB_NUM_NODES NTASKS:NTASKS NPROCS:NTASKS \
                TASKS_PER_NODE:TASKS_PER_NODE JOB_CPUS_PER_NODE:JOB_CPUS_PER_NODE; do
                n=SLURM_${pair#*:}_HET_GROUP_$group
                [ -n "${!n:-}" ] && cmd+=("SLURM_${pair%%:*}=${!n}")
            done
            cmd+=("OMPI_MCA_plm_slurm_args=${OMPI_MCA_plm_slurm_args:+$OMPI_MCA_plm_slurm_args }--het-group=$group")
            cmd+=(mpirun -np "$ntasks")
            [ "$(id -u)" = 0 ] && cmd+=(--allow-run-as-root)
        fi
        for v in OPENBLAS_NUM_THREADS OMP_NUM_THREADS \
            $(env | sed -n 's/^\(TIDAL_[A-Z0-9_]*\)=.*/\1/p'); do
            cmd+=(-x "$v")
        done
        [ "$recover" = 1 ] && cmd+=(--enable-recovery -x TIDAL_EXIT_DIR)
        # shellcheck disable=SC2206
        cmd+=($TIDAL_MPIRUN_FLAGS)
    fi
    tidal_job_log "${group:+component $group: }${cmd[*]} $*"
    TIDAL_EXIT_DIR=$exit_dir "${cmd[@]}" bash -c "$TIDAL_JOB_RANK" tidal-rank "$sig" "$@" &
    TIDAL_JOB_PIDS+=($!)
    TIDAL_JOB_LAST=$!
    [ -n "$exit_dir" ] && TIDAL_JOB_EXIT_DIRS[$!]=$exit_dir
}

# tidal_job_status PID RC: the status of a launch that ended with RC. With recovery the
# launcher's own code says little (mpirun --enable-recovery exits 0 whatever the ranks did;
# srun --no-kill counts a dead rank the job survived): rank 0's exit code is the job's; with
# none (rank 0 died) the launch failed.
tidal_job_status() {
    local pid=$1 rc=$2 dir=${TIDAL_JOB_EXIT_DIRS[$1]:-}
    if [ -n "$dir" ]; then
        if [ -f "$dir/exit.0" ]; then
            rc=$(cat "$dir/exit.0")
        elif ls "$dir"/exit.* >/dev/null 2>&1; then
            tidal_job_log "rank 0 left no exit code (it died): the launch failed"
            rc=1
        fi
        rm -rf "$dir"
        unset "TIDAL_JOB_EXIT_DIRS[$pid]"
    fi
    return "$rc"
}

# The batch shell got SIGUSR1 (Slurm's --signal=B:USR1@N, `scancel --signal=USR1 --batch`),
# SIGTERM or SIGINT: every launch gets SIGUSR1, which srun and mpirun pass to every rank.
tidal_job_forward() {
    local pid
    [ -z "$TIDAL_JOB_SIGNALED" ] && TIDAL_JOB_SIGNALED=$1
    TIDAL_JOB_GOT=1
    tidal_job_log "got SIG$1: passing SIGUSR1 to the ranks"
    for pid in "${TIDAL_JOB_PIDS[@]}"; do kill -s USR1 "$pid" 2>/dev/null; done
}

# tidal_job_stop PID: ask one launch to stop as on SIGUSR1 (the hetjob's server, after training).
tidal_job_stop() { kill -s USR1 "$1" 2>/dev/null; }

# tidal_job_watch PID DIR: once rank 0 has left its code in DIR, the launch PID gets
# TIDAL_RECOVER_GRACE seconds (default 10) to end, then SIGTERM: after a rank on another node
# died, Open MPI 4.1's mpirun --enable-recovery can wait for ever once every rank has exited
# (tools/mpirun-recover does the same).
tidal_job_watch() {
    local n=0 grace=${TIDAL_RECOVER_GRACE:-10}
    while kill -0 "$1" 2>/dev/null && [ ! -f "$2/exit.0" ]; do sleep 0.5; done
    while kill -0 "$1" 2>/dev/null && [ $n -lt $((grace * 2)) ]; do sleep 0.5; n=$((n + 1)); done
    if kill -0 "$1" 2>/dev/null; then
        tidal_job_log "the launcher still waits $grace s after rank 0 ended: stopping it"
        kill -TERM "$1" 2>/dev/null
    fi
}

# tidal_job_wait PID: waits for one launch, through any number of forwarded signals; its status.
tidal_job_wait() {
    local rc watch=""
    if [ -n "${TIDAL_JOB_EXIT_DIRS[$1]:-}" ]; then
        tidal_job_watch "$1" "${TIDAL_JOB_EXIT_DIRS[$1]}" &
        watch=$!
    fi
    while :; do
        TIDAL_JOB_GOT=0
        wait "$1"
        rc=$?
        # a wait cut short by a trap: wait again (bash keeps the status of a finished child)
        if [ "$TIDAL_JOB_GOT" != 1 ]; then
            [ -n "$watch" ] && kill "$watch" 2>/dev/null
            tidal_job_status "$1" "$rc"
            return
        fi
    done
}

# tidal_job_finish RC: the end of a batch script. After SIGUSR1 with every launch out cleanly,
# the ranks have checkpointed: requeue (Slurm runs the same script again; it resumes).
tidal_job_finish() {
    local rc=$1
    if [ "$TIDAL_JOB_SIGNALED" = USR1 ] && [ "$rc" = 0 ] && [ "${TIDAL_REQUEUE:-1}" = 1 ] &&
        [ -n "${SLURM_JOB_ID:-}" ]; then
        tidal_job_log "checkpointed after SIGUSR1: scontrol requeue $SLURM_JOB_ID"
        if scontrol requeue "$SLURM_JOB_ID"; then
            # Slurm ends this run now; the wait only covers the moment until it does
            sleep 60
            exit 0
        fi
        tidal_job_log "scontrol requeue failed: the job ends here; submit it again to resume"
    fi
    tidal_job_log "done, exit status $rc${TIDAL_JOB_SIGNALED:+ (after SIG$TIDAL_JOB_SIGNALED)}"
    exit "$rc"
}
