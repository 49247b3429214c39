#!/bin/sh
# jobs/train.sbatch on a real single-node Slurm (munged, slurmctld, slurmd started for the test):
# under srun --mpi=pmix and under mpirun, a small data-parallel training job ends COMPLETED with
# its weights, loss curve and a checkpoint `tidal ckpt verify` accepts; the parameters come from
# a config file named by TIDAL_TRAIN_CONF, the script finds its helper from the spool copy.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/slurm/cluster.sh"
. "$abs_top_srcdir/tests/slurm/common.sh"

slurm_start || { slurm_skip_all 2 "no Slurm cluster: $slurm_why"; slurm_planned=1; exit 0; }
w=$slurm_dir/work
slurm_train_conf "$w/train.conf" 60 2 20 20
export TIDAL_TRAIN_CONF="$w/train.conf"

launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    TIDAL_LAUNCHER=$l slurm_submit "$l: train.sbatch" -D "$w" -n 2 -o "$w/train-$l.out" \
        "$TIDAL_JOBS/train.sbatch" --out "$w/run-$l" || continue
    id=$slurm_id
    slurm_wait_state "$id" COMPLETED 90
    check "$l: train.sbatch (job $id, 2 tasks) ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
    check "$l: exit code 0:0" [ "`slurm_job_field $id ExitCode`" = 0:0 ]
    check "$l: the job used $l on 2 ranks" grep -q "launcher $l" "$w/train-$l.out"
    check "$l: tidal train ran its 60 steps" grep -q "tidal train: 60 steps" "$w/train-$l.out"
    check "$l: weights and loss curve written" [ -s "$w/run-$l/model.h5" -a -s "$w/run-$l/loss.csv" ]
    latest="$w/run-$l/ckpt/`cat "$w/run-$l/ckpt/latest" 2>/dev/null`"
    check "$l: the last checkpoint (${latest##*/}) verifies" "$TIDAL" ckpt verify "$latest"
    check "$l: it holds step 60, saved by 2 ranks" sh -c "'$TIDAL' ckpt info '$latest' | grep -q 'step  *60$' &&
        '$TIDAL' ckpt info '$latest' | grep -q 'world size  *2 ranks'"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$w/train-$l.out" "$slurm_dir/slurmd.log"
done
slurm_done
