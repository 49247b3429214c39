# bench/lib/busbw.sh: the plot of the two bandwidth benchmarks (gfc-allreduce, gfc-alltoall).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# Shared by the two bandwidth benchmarks: busbw against size per rank count, then the ratio.
# $1: the CSV columns of the gfc sides, $2: their titles, $3: the ratio column.
bench_plot_busbw() {
    bench_plot <<GP
width = 1500
cols = "$1"; titles = "$2"; ratio = "$3"
set multiplot layout 1, np_count + 1 title name . ": bus bandwidth, median (busbw = nccl-tests')"
@bytes_axis
do for [i = 1:np_count] {
    n = np_at(i)
    set title sprintf("%d ranks", n)
    set ylabel "busbw GB/s"
    plot csv using "bytes":(on(n, "mpi_busbw_gbs")) title "Open MPI" lw 2, \\
        for [j = 1:words(cols)] "" using "bytes":(on(n, word(cols, j))) title word(titles, j)
}
set title "gfc / Open MPI (target >= 1 from 1 MiB)"
set ylabel "ratio"
set logscale y
set yrange [*<0.5 : 2<*]
plot for [i = 1:np_count] csv using "bytes":(on(np_at(i), ratio)) \\
        title sprintf("%d ranks", np_at(i)), 1 with lines dt 2 lc "black" notitle
unset multiplot
GP
}
