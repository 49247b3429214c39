# bench/run gfc-alltoall: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/busbw.sh"

bm_gfc_alltoall() { # all-to-all bus bandwidth, gfc_alltoall against MPI_Alltoall, on 8 devices of one host and 2 hosts x 4
    bench_build bench-programs
    # gfc polls as Open MPI does (tools/cluster would have it sleep when idle): like for like
    TIDAL_GFC_IDLE_SLEEP_US=0 bench_cluster_sweep "1x8 2x4" bench/gfc_alltoall
    local lay h r
    for lay in $(bench_busbw_layouts); do
        h=${lay%x*} r=${lay#*x}
        bench_headline "ratio_vs_mpi_alltoall_min_ge_1MiB_$lay" \
            "$(csv_agg min ratio "bytes >= 1048576 && hosts == $h && (hosts == 0 ? np : ranks_per_host) == $r")"
    done
    bench_headline ratio_vs_mpi_alltoall_min_ge_1MiB "$(csv_agg min ratio 'bytes >= 1048576')"
    bench_headline gfc_busbw_gbs_max "$(csv_agg max gfc_busbw_gbs)"
    bench_headline mpi_busbw_gbs_max "$(csv_agg max mpi_busbw_gbs)"
    bench_headline verify_failures "$(csv_agg count 1 'gfc_ok == 0 || mpi_ok == 0')"
    bench_target "all-to-all busbw gfc/Open MPI, every size >= 1 MiB, every layout" \
        ratio_vs_mpi_alltoall_min_ge_1MiB '>=' 1.0
    bench_table hosts ranks_per_host np bytes mpi_busbw_gbs gfc_busbw_gbs ratio mpi_us gfc_us gfc_ok
    bench_note "bytes = what each rank sends in all; busbw = (n-1)/n x bytes / median time;" \
        "ratio = MPI time / gfc time (0 when gfc's result was wrong)"
    bench_plot_busbw "gfc_busbw_gbs" "gfc" ratio
}
