#!/bin/sh
# jobs/hetjob.sbatch on a real Slurm of two nodes on this host (two slurmd: the components of
# a heterogeneous job never share a node): component 0 serving on 2 ranks, component 1 training
# on 2 ranks, each launched on its own component, with srun --mpi=pmix and with mpirun. The
# server starts on the training's first checkpoint and answers a request with a PNG while
# training goes on; the job ends COMPLETED with the weights and a checkpoint that verifies.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
slurm_nodes=2 # a node for each component
. "$abs_top_srcdir/tests/slurm/cluster.sh"
. "$abs_top_srcdir/tests/slurm/common.sh"
command -v curl >/dev/null 2>&1 || { echo "1..0 # SKIP curl is not installed"; slurm_planned=1; exit 0; }

slurm_start || { slurm_skip_all 2 "no Slurm cluster: $slurm_why"; slurm_planned=1; exit 0; }
w=$slurm_dir/work
slurm_train_conf "$w/train.conf" 400 2 100 20
cat >"$w/serve.conf" <<CONF
listen = 127.0.0.1:0
max-resolution = 32
max-batch = 4
progress-every = 0
max-seconds = 120
CONF
export TIDAL_TRAIN_CONF="$w/train.conf" TIDAL_SERVE_CONF="$w/serve.conf"
body='{"label": 1, "n": 1, "resolution": 32, "steps": 3}'

# mpirun: each component's mpirun starts its daemons on the component's node through
# `srun --het-group=N` (jobs/tidal-job.sh), here the same host again;
# tests/cluster/test_slurm_nodes.sh runs it on two emulated hosts.
launchers=`slurm_launchers`
case $launchers in srun*) ;; *) skip "$slurm_no_pmix" ;; esac
for l in $launchers; do
    out="$w/het-$l.out"
    TIDAL_LAUNCHER=$l TIDAL_OUT="$w/run-$l" slurm_submit "$l: hetjob.sbatch" -D "$w" -o "$out" \
        --ntasks=2 : --ntasks=2 "$TIDAL_JOBS/hetjob.sbatch" || continue
    id=$slurm_id
    slurm_wait_file "$out" "listening on http://" 60
    url=`sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$out" | head -n 1`
    check "$l: component 0 serves (${url:-nowhere})" [ -n "$url" ]
    code=`curl -s --max-time 60 -o "$w/het-$l.png" -w '%{http_code}' -d "$body" "$url/v1/images?wait=1"`
    check "$l: a request answered 200 with a PNG ($code)" sh -c \
        "[ '$code' = 200 ] && head -c 8 '$w/het-$l.png' | od -An -c | grep -q 'P   N   G'"
    slurm_wait_state "$id" COMPLETED 90
    check "$l: hetjob.sbatch (job $id) ends COMPLETED ($slurm_state)" [ "$slurm_state" = COMPLETED ]
    check "$l: training ran on component 1, 2 ranks, serving on component 0" sh -c \
        "grep -q 'component 1: .* train' '$out' && grep -q 'component 0: .* serve' '$out' &&
         grep -q '400 steps of 4 images on 2 ranks' '$out' && grep -q 'ranks 1..1 execute' '$out'"
    check "$l: training finished, the server stopped after it" sh -c \
        "grep -q 'tidal train: 400 steps' '$out' && grep -q 'stopping (SIGTERM)' '$out'"
    latest="$w/run-$l/ckpt/`cat "$w/run-$l/ckpt/latest" 2>/dev/null`"
    check "$l: weights written, the last checkpoint verifies" sh -c \
        "[ -s '$w/run-$l/model.h5' ] && '$TIDAL' ckpt verify '$latest' >/dev/null"
    [ "$slurm_state" = COMPLETED ] || slurm_diag "$out"
done
slurm_done
