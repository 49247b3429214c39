# bench/run codec-throughput: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_codec_throughput() { # encode, decode and fused pass of every codec in GB/s, against memcpy
    bench_build bench-programs
    bench_launch="one process, one core (no mpirun)"
    if [ -z "$bench_norun" ]; then
        local args=(--csv "$bench_csv")
        [ -n "$quick" ] && args+=(--quick)
        say "running codec_throughput"
        "$builddir/bench/codec_throughput" "${args[@]}" "${bench_extra[@]}" \
            2>&1 | tee -a "$bench_log" >&2 || bench_failed+=("codec_throughput")
    fi
    # csv_agg reads every column as a number; the format and op columns are names
    local f
    bench_headline fused_over_memcpy "$(awk -F, '$1 == "dynamiq" && $2 == "fused" { print $6; exit }' \
        "$bench_csv" 2>/dev/null)"
    for f in bf16 fp16 mxfp8_e4m3 mxfp6_e3m2 mxfp4_e2m1; do
        bench_headline "fused_over_memcpy_$f" "$(awk -F, -v f="$f" \
            '$1 == f && $2 == "fused" { print $6; exit }' "$bench_csv" 2>/dev/null)"
    done
    bench_headline memcpy_gbps "$(awk -F, '$1 == "memcpy" { print $5; exit }' "$bench_csv" \
        2>/dev/null)"
    bench_target "dynamiq's fused pass against memcpy, per core" fused_over_memcpy '>=' 0.5
    bench_target "fused pass of MXFP8 (E4M3) against memcpy, per core" \
        fused_over_memcpy_mxfp8_e4m3 '>=' 0.5
    bench_table format op gbps over_memcpy bits_per_coord
    # one bar per (format, pass): a table re-shaped by awk into format,encode,decode,fused
    awk -F, 'NR > 1 && $1 != "memcpy" { v[$1 "," $2] = $5; if (!($1 in seen)) { seen[$1] = 1;
             order[n++] = $1 } } $1 == "memcpy" { m = $5 }
             END { print "format,encode,decode,fused,memcpy";
                   for (i = 0; i < n; i++) { f = order[i]
                       print f "," v[f ",encode"] "," v[f ",decode"] "," v[f ",fused"] "," m } }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
width = 1100
set datafile separator ","
set title name . ": GB/s of f32 input on one core (line: memcpy)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "GB/s"
set xtics rotate by -30
set key top right
bars = "$results/$bench_name.bars.csv"
plot bars using 2:xtic(1) title "encode", "" using 3 title "decode", "" using 4 title "fused", \
    "" using 0:5 with lines lw 2 lc rgb "black" title "memcpy"
GP
    bench_note "GB/s of f32 input on one core, median of the repetitions; fused_over_memcpy is" \
        "dynamiq's fused decode-accumulate-encode pass"
}
