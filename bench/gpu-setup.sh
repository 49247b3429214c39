# bench/run gpu-setup: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/gpu.sh"

bm_gpu_setup() { # GPU group formation, gfc against ncclCommInitRank and ncclCommSplit
    local why gpus nps what="(ncclCommInitRank + first all-reduce) / (gfc form + first barrier)"
    what="$what, the same ranks, one per GPU, largest rank count"
    bench_launch="mpirun --oversubscribe --bind-to none; rank r on GPU (local rank mod GPUs)"
    bench_table np gpus nccl_ranks gpu nccl_version form_ns gfc_new_group_us \
        gfc_new_group_all_us nccl_first_init_ms nccl_init_us nccl_split_us nccl_destroy_us \
        speedup_vs_nccl_init speedup_vs_nccl_split
    bench_note "NCCL allows one rank per GPU in a communicator: NCCL runs over the first" \
        "nccl_ranks = min(np, GPUs) ranks, each on its own GPU (on one GPU, a communicator of" \
        "one rank); gfc_new_group_us is gfc over the same ranks, gfc_new_group_all_us over all np"
    bench_note "nccl_init_us = ncclGetUniqueId + its MPI broadcast + ncclCommInitRank + a first" \
        "1-float ncclAllReduce and stream synchronize; nccl_split_us = ncclCommSplit (color 0)" \
        "of a communicator over the same ranks + the same all-reduce; gfc = gfc_group_init with" \
        "a namespace never used before + gfc_barrier; medians of the slowest rank; the first" \
        "NCCL communicator of the process (nccl_first_init_ms) is reported apart"
    if [ -z "$bench_norun" ]; then
        why=$(gpu_bench_why_not)
        if [ -n "$why" ]; then
            gpu_bench_not_run "$why" "$what" speedup_vs_nccl_init '>=' 1
            return 0
        fi
        gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
        [ -n "${CUDA_VISIBLE_DEVICES:-}" ] &&
            gpus=$(printf '%s' "$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | grep -c .)
        # one rank per GPU, and twice that (ranks sharing GPUs: gfc over all, NCCL over one
        # per GPU); at most 8
        nps=$gpus
        [ $((2 * gpus)) -le 8 ] && nps="$nps $((2 * gpus))"
        bench_note "GPUs: $(gpu_bench_gpus)"
        bench_build bench/gpu_setup
        bench_mpi_sweep "$nps" bench/gpu_setup
    fi
    local top_np
    top_np=$(csv_agg max np 'nccl_ranks > 0')
    bench_headline nccl_ranks_max "$(csv_agg max nccl_ranks)"
    bench_headline nccl_init_us "$(csv_agg last nccl_init_us "np == ${top_np:-0}")"
    bench_headline nccl_split_us "$(csv_agg last nccl_split_us "np == ${top_np:-0}")"
    bench_headline gfc_new_group_us "$(csv_agg last gfc_new_group_us "np == ${top_np:-0}")"
    bench_headline nccl_first_init_ms "$(csv_agg max nccl_first_init_ms)"
    bench_headline speedup_vs_nccl_split "$(csv_agg last speedup_vs_nccl_split \
        "np == ${top_np:-0}")"
    bench_headline speedup_vs_nccl_init "$(csv_agg last speedup_vs_nccl_init "np == ${top_np:-0}")"
    bench_target "$what" speedup_vs_nccl_init '>=' 1
    bench_plot <<'GP'
set title "group set-up on the GPUs present (median of the slowest rank)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.01:*]
set ylabel "microseconds"
set xlabel "ranks"
set key outside right top
plot csv using "gfc_new_group_us":xtic(1) title "gfc form + first barrier (NCCL's ranks)", \
     "" using "gfc_new_group_all_us" title "gfc form + first barrier (all ranks)", \
     "" using "nccl_split_us" title "ncclCommSplit + first all-reduce", \
     "" using "nccl_init_us" title "ncclCommInitRank + first all-reduce"
GP
}
