#!/bin/sh
# Preemption on a real single-node Slurm: jobs/train.sbatch gets SIGUSR1 through
# `scancel --signal=USR1 --batch` (what --signal=B:USR1@60 sends before the time limit), passes
# it to the ranks, which checkpoint and exit 0; the script requeues the job; Slurm runs it again
# (Restarts=1, SLURM_RESTART_COUNT=1) and the same command resumes at the step it stopped after
# and completes. Under srun --mpi=pmix and under mpirun.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/slurm/cluster.sh"
. "$abs_top_srcdir/tests/slurm/common.sh"

slurm_start || { slurm_skip_all 2 "no Slurm cluster: $slurm_why"; slurm_planned=1; exit 0; }
w=$slurm_dir/work
steps=500
cat >"$w/train.conf" <<CONF
model = tiny
resolution = 32
batch = 4
micro-batch = 2
steps = $steps
warmup = 5
val-every = 0
log-every = 50
ckpt-every = 50
CONF
export TIDAL_TRAIN_CONF="$w/train.conf"

launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    out="$w/req-$l.out"
    TIDAL_LAUNCHER=$l slurm_submit "$l: train.sbatch" -D "$w" -n 2 -o "$out" \
        "$TIDAL_JOBS/train.sbatch" --out "$w/run-$l" || continue
    id=$slurm_id
    # once it has written a checkpoint, the warning signal, to the batch shell only
    n=0
    while [ ! -s "$w/run-$l/ckpt/latest" ] && [ $n -lt 300 ]; do sleep 0.2; n=$((n + 1)); done
    if ! scancel --signal=USR1 --batch "$id" 2>"$w/scancel.err"; then
        not_ok "$l: scancel --signal=USR1 --batch $id: `cat "$w/scancel.err"` (`slurm_job_field $id JobState`)"
        slurm_diag "$out"
        continue
    fi
    slurm_wait_file "$out" "stopped after step" 60
    stopped=`sed -n 's/.*stopped after step \([0-9]*\) on SIGUSR1.*/\1/p' "$out" | head -n 1`
    check "$l: SIGUSR1 reached the ranks, which stopped after step ${stopped:-none}" [ -n "$stopped" ]
    [ -n "$stopped" ] || stopped=0
    check "$l: the script requeued the job" slurm_wait_file "$out" "scontrol requeue $id" 10
    slurm_wait_state "$id" COMPLETED 120
    check "$l: the job (job $id) ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
    check "$l: Slurm ran it twice (Restarts=`slurm_job_field $id Restarts`)" \
        [ "`slurm_job_field $id Restarts`" = 1 ]
    check "$l: the second run saw SLURM_RESTART_COUNT=1" grep -q "restart 1," "$out"
    ck=`printf 'ckpt-%08d.h5' "$stopped"`
    check "$l: it resumed from $ck at step $stopped" grep -q "resumed from .*/$ck at step $stopped\$" "$out"
    check "$l: and finished its $steps steps" grep -q "step  *$steps/$steps" "$out"
    latest="$w/run-$l/ckpt/`cat "$w/run-$l/ckpt/latest" 2>/dev/null`"
    check "$l: the last checkpoint verifies and holds step $steps" sh -c \
        "'$TIDAL' ckpt verify '$latest' >/dev/null && '$TIDAL' ckpt info '$latest' | grep -q 'step  *$steps\$'"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$out" "$slurm_dir/slurmctld.log"
done
slurm_done
