# What the Slurm tests share, sourced after tests/env.sh and tests/slurm/cluster.sh: the
# checks that make a run meaningful, a hard time limit, the environment of the jobs.
[ -d /usr/share/datasets/fashion-mnist ] || { echo "1..0 # SKIP dataset-fashion-mnist is not installed"; exit 0; }

# A hard limit on the whole test: past it the test says so, and the EXIT trap tears down.
slurm_limit=${TIDAL_SLURM_TIMEOUT:-240}
( sleep "$slurm_limit" & sp=$!; trap 'kill $sp 2>/dev/null; exit 0' TERM; wait $sp; kill -ALRM $$ ) &
slurm_watchdog=$!
slurm_timeout() { not_ok "the test ran past its limit of $slurm_limit s"; slurm_diag $slurm_dir/work/*.out "$slurm_dir/slurmctld.log"; exit 1; }
trap slurm_timeout ALRM
trap 'exit 1' INT TERM HUP
trap 'kill $slurm_watchdog 2>/dev/null; slurm_stop; [ -z "$slurm_planned" ] && echo "1..$tap_n"' EXIT
slurm_planned=""

# Every job: the program of this build, small oversubscribed mpirun launches, quiet Open MPI.
TIDAL_JOBS=$abs_top_srcdir/jobs
export TIDAL
export TIDAL_MPIRUN_FLAGS="--oversubscribe --bind-to none"
export OMPI_MCA_btl_base_warn_component_unused=0
export OPENBLAS_NUM_THREADS=1

# the launchers to test: mpirun always, srun where Slurm offers pmix
slurm_launchers() {
    if srun --mpi=list 2>&1 | grep -qw pmix; then echo "srun mpirun"; else echo "mpirun"; fi
}
slurm_no_pmix="srun --mpi=list offers no pmix (Debian's slurm-wlm-basic-plugins has mpi_pmix): srun --mpi=pmix not tested"

slurm_done() { slurm_planned=1; done_testing; }
