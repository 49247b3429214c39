# bench/run gfc-allreduce: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/busbw.sh"

bm_gfc_allreduce() { # f32 sum bus bandwidth, gfc ring and butterfly against MPI_Allreduce, on 8 devices of one host and 2 hosts x 4
    bench_build bench-programs
    # gfc polls as Open MPI does (tools/cluster would have it sleep when idle): like for like
    TIDAL_GFC_IDLE_SLEEP_US=0 bench_cluster_sweep "1x8 2x4" bench/gfc_allreduce
    local ge='bytes >= 1048576' lay h r
    for lay in $(bench_busbw_layouts); do
        h=${lay%x*} r=${lay#*x}
        bench_headline "ratio_vs_mpi_allreduce_min_ge_1MiB_$lay" \
            "$(csv_agg min best_ratio "$ge && hosts == $h && (hosts == 0 ? np : ranks_per_host) == $r")"
    done
    bench_headline ratio_vs_mpi_allreduce_min_ge_1MiB "$(csv_agg min best_ratio "$ge")"
    bench_headline ratio_ring_vs_mpi_min_ge_1MiB "$(csv_agg min ring_ratio "$ge")"
    bench_headline ratio_butterfly_vs_mpi_min_ge_1MiB "$(csv_agg min butterfly_ratio "$ge")"
    bench_headline gfc_best_busbw_gbs_max "$(csv_agg max \
        'ring_busbw_gbs > butterfly_busbw_gbs ? ring_busbw_gbs : butterfly_busbw_gbs')"
    bench_headline mpi_busbw_gbs_max "$(csv_agg max mpi_busbw_gbs)"
    bench_headline verify_failures "$(csv_agg count 1 'ring_ok == 0 || butterfly_ok == 0')"
    bench_target "all-reduce busbw gfc/Open MPI, every size >= 1 MiB, every layout" \
        ratio_vs_mpi_allreduce_min_ge_1MiB '>=' 1.0
    bench_table hosts ranks_per_host np bytes mpi_busbw_gbs ring_busbw_gbs butterfly_busbw_gbs ring_ratio \
        butterfly_ratio best_ratio mpi_us ring_us butterfly_us ring_ok butterfly_ok
    bench_note "busbw = 2(n-1)/n x bytes / median time; ratio = MPI time / gfc time (0 when" \
        "gfc's result failed the check against MPI_Allreduce); *_us are median microseconds"
    bench_plot_busbw "ring_busbw_gbs butterfly_busbw_gbs" "gfc-ring gfc-butterfly" best_ratio
}
