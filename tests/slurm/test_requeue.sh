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
slurm_train_conf "$w/train.conf" $steps 2 50 50
export TIDAL_TRAIN_CONF="$w/train.conf"

launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    out="$w/req-$l.out"
    TIDAL_LAUNCHER=$l slurm_submit "$l: train.sbatch" -D "$w" -n 2 -o "$out" \
        "$TIDAL_JOBS/train.sbatch" --out "$w/run-$l" || continue
    slurm_requeue_checks $l $slurm_id "$out" "$w/run-$l" $steps
done
slurm_done
