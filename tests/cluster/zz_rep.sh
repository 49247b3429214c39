#!/bin/sh
# repro: the f32 training of test_fidelity on 2x2, N times
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
. "$abs_top_srcdir/tests/cluster/common.sh"
train4() { [ -n "${TIDAL_CLUSTER:-}" ] && echo "layout: $TIDAL_CLUSTER_LAYOUT"; cluster_mpirun 4 "$TIDAL" train "$@"; }
cluster_enter "$@"
export OPENBLAS_NUM_THREADS=1
export TIDAL_TEST_TIMEOUT=120
train="--model tiny --resolution 32 --steps 8 --batch 16 --micro-batch 2 --val-every 0 --log-every 1 --ckpt-every 0"
for i in `seq 1 ${N:-10}`; do
  d=/tmp/rep/f$i; rm -rf $d; mkdir -p $d
  t0=`date +%s`
  cluster_run --hosts 2 --ranks-per-host 2 --rank-cpu 0.25 --link 1gbit -- \
        train4 $train --allreduce ${AR:-f32} --out "$d/t" >"$d/out" 2>"$d/err"
  echo "run $i rc=$? `expr \`date +%s\` - $t0` s"
done
