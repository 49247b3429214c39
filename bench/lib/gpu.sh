# bench/lib/gpu.sh: what the GPU benchmarks (gpu-codec, gpu-train, gpu-setup) share: each says why it
# did not run, and exits 0, where no GPU is.
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# Why a GPU benchmark cannot run here (nothing when it can): a build without CUDA, no GPU.
gpu_bench_why_not() {
    grep -q 'define TIDAL_HAVE_CUDA 1' "$builddir/config.h" 2>/dev/null ||
        { echo "tidal in $builddir was built without CUDA"; return; }
    command -v nvidia-smi >/dev/null 2>&1 || { echo "no GPU (no nvidia-smi)"; return; }
    nvidia-smi -L 2>/dev/null | grep -q '^GPU' || echo "no GPU (nvidia-smi -L lists none)"
}

# gpu_bench_not_run WHY "WHAT" KEY OP THRESHOLD: the report of a benchmark that did not run: its
# target marked NOT RUN, its headline n/a, the reason in the notes; exit status 0.
gpu_bench_not_run() {
    say "not run: $1"
    bench_note "NOT RUN: $1"
    bench_headline "$3" ""
    bench_targets+=("| $2 | $3 = n/a | $4 $5 | NOT RUN |")
}

# The GPUs nvidia-smi lists, as one line.
gpu_bench_gpus() {
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
        awk '{ printf "%s%s", sep, $0; sep = "; " }'
}
