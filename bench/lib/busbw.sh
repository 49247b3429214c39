# bench/lib/busbw.sh: the plot of the two bandwidth benchmarks (gfc-allreduce, gfc-alltoall).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# The layouts of the CSV's rows as words "HxR" (hosts x ranks per host; "0xN" where there was
# no emulated cluster and N ranks shared the machine), in order of appearance.
bench_busbw_layouts() {
    awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
             { k = ("hosts" in c) ? $c["hosts"] "x" $c["ranks_per_host"] : "0x" $c["np"]
               if (("hosts" in c) && $c["hosts"] == 0) k = "0x" $c["np"]
               if (!seen[k]++) printf "%s%s", sep, k; sep = " " }' "$bench_csv" 2>/dev/null
}

# Shared by the two bandwidth benchmarks: busbw against size per layout (emulated cluster, or
# rank count without one), then the ratio. $1: the CSV columns of the gfc sides, $2: their
# titles, $3: the ratio column.
bench_plot_busbw() {
    local lays has_hosts=0
    lays=$(bench_busbw_layouts)
    head -n 1 "$bench_csv" 2>/dev/null | tr ',' '\n' | grep -qx hosts && has_hosts=1
    bench_plot <<GP
width = 1500
cols = "$1"; titles = "$2"; ratio = "$3"; lays = "$lays"; has_hosts = $has_hosts
lay_h(i) = int(word(lays, i)[1:strstrt(word(lays, i), "x") - 1])
lay_r(i) = int(word(lays, i)[strstrt(word(lays, i), "x") + 1:*])
# column c of the rows of layout i: H hosts x R, or N ranks without a cluster (H = 0)
onl(i, c) = (has_hosts ? (column("hosts") == lay_h(i) && (lay_h(i) == 0 ? column("np") == lay_r(i) : column("ranks_per_host") == lay_r(i))) : column("np") == lay_r(i)) ? column(c) : NaN
lay_title(i) = lay_h(i) == 0 ? sprintf("%d ranks, no emulation", lay_r(i)) : sprintf("%d hosts x %d devices", lay_h(i), lay_r(i))
set multiplot layout 1, words(lays) + 1 title name . ": bus bandwidth, median (busbw = nccl-tests')"
@bytes_axis
do for [i = 1:words(lays)] {
    set title lay_title(i)
    set ylabel "busbw GB/s"
    plot csv using "bytes":(onl(i, "mpi_busbw_gbs")) title "Open MPI" lw 2, \\
        for [j = 1:words(cols)] "" using "bytes":(onl(i, word(cols, j))) title word(titles, j)
}
set title "gfc / Open MPI (target >= 1 from 1 MiB)"
set ylabel "ratio"
set logscale y
set yrange [*<0.5 : 2<*]
plot for [i = 1:words(lays)] csv using "bytes":(onl(i, ratio)) title lay_title(i), \\
    1 with lines dt 2 lc "black" notitle
unset multiplot
GP
}
