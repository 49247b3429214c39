# bench/run gfc-setup: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_gfc_setup() { # forming a group and its first barrier, against MPI_Comm_split/create_group
    bench_build bench-programs
    bench_mpi_sweep "2 4 8" bench/gfc_setup
    bench_headline form_us "$(csv_agg max 'form_ns / 1000')"
    bench_headline first_barrier_over_warm "$(csv_agg max first_barrier_over_warm)"
    bench_headline speedup_vs_comm_create_group_4 \
        "$(csv_agg first speedup_vs_comm_create_group 'np == 4')"
    bench_headline speedup_vs_comm_split_4 "$(csv_agg first speedup_vs_comm_split 'np == 4')"
    bench_headline new_group_barrier_us_4 "$(csv_agg first new_group_barrier_us 'np == 4')"
    bench_headline comm_create_group_us_4 "$(csv_agg first comm_create_group_us 'np == 4')"
    bench_target "forming a group (gfc_group_init), worst rank count" form_us '<' 1
    bench_target "a new group's first barrier against a warm group's barrier, worst rank count" \
        first_barrier_over_warm '<=' 1.5
    bench_target "(MPI_Comm_create_group + barrier + free) / (gfc form + first barrier), 4 ranks" \
        speedup_vs_comm_create_group_4 '>=' 20
    bench_table np form_ns warm_barrier_us new_group_barrier_us comm_split_us \
        comm_create_group_us first_barrier_over_warm speedup_vs_comm_split \
        speedup_vs_comm_create_group first_contact_us
    bench_note "times are medians over samples of the slowest rank, per operation; a sample is" \
        "back-to-back operations after a world barrier, gfc and MPI interleaved"
    bench_note "new group = gfc_group_init with a namespace never used before, then gfc_barrier;" \
        "first_contact_us = the first barrier of the process (connection set-up), not a target"
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        bench_note "nccl: skipped (tidal's benchmarks are not built with NCCL)"
    else
        bench_note "nccl: skipped (no GPU)"
    fi
    bench_plot <<'GP'
set title "group set-up per request (median of the slowest rank)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.01:*]
set ylabel "microseconds per operation"
set xlabel "ranks"
set key outside right top
plot csv using (column("form_ns") / 1000):xtic(1) title "gfc form", \
     "" using "warm_barrier_us" title "gfc warm barrier", \
     "" using "new_group_barrier_us" title "gfc form + first barrier", \
     "" using "comm_split_us" title "MPI_Comm_split + barrier + free", \
     "" using "comm_create_group_us" title "MPI_Comm_create_group + barrier + free"
GP
}
