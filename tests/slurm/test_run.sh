#!/bin/sh
# jobs/run.sbatch on a real single-node Slurm: the co-located `tidal run` (issue #9) with a
# tiny model, training and a short trace, ends COMPLETED with a checkpoint that verifies, under srun --mpi=pmix and mpirun.
# Until `tidal run` exists, every point is a SKIP saying so: never a pass. (Requests arrive
# from 1 s on: the ones at 0 ms, before any weights exist, were never served in a 3-rank run.)
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
if ! "$TIDAL" run --help >/dev/null 2>&1; then
    echo "ok 1 # SKIP tidal run is not built yet (issue #9)"
    echo "1..1"
    exit 0
fi
. "$abs_top_srcdir/tests/slurm/cluster.sh"
. "$abs_top_srcdir/tests/slurm/common.sh"

slurm_start || { slurm_skip_all 2 "no Slurm cluster: $slurm_why"; slurm_planned=1; exit 0; }
w=$slurm_dir/work
cat >"$w/run.conf" <<CONF
model = tiny
resolution = 32
batch = 4
micro-batch = 2
train-steps = 40
warmup = 5
ckpt-every = 20
listen = none
max-resolution = 32
progress-every = 0
max-seconds = 60    # a bound, should the job hang
CONF
i=0
: >"$w/t.jsonl"
while [ $i -lt 4 ]; do
    echo "{\"at_ms\": $((1000 + i * 150)), \"label\": $i, \"n\": 1, \"resolution\": 32, \"steps\": 3, \"seed\": $i}" >>"$w/t.jsonl"
    i=$((i + 1))
done
export TIDAL_RUN_CONF="$w/run.conf"
launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    out="$w/run-$l.out"
    TIDAL_LAUNCHER=$l slurm_submit "$l: run.sbatch" -D "$w" -n 3 -o "$out" "$TIDAL_JOBS/run.sbatch" \
        --out "$w/run-$l" --trace "$w/t.jsonl" --exit-after-trace || continue
    id=$slurm_id
    slurm_wait_state "$id" COMPLETED 90
    check "$l: run.sbatch (job $id, 3 tasks) ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
    check "$l: every request of the trace done" grep -q "trace: 4 requests, 4 done, 0 failed" "$out"
    latest="$w/run-$l/ckpt/`cat "$w/run-$l/ckpt/latest" 2>/dev/null`"
    check "$l: its last checkpoint verifies" "$TIDAL" ckpt verify "$latest"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$out"
done
slurm_done
