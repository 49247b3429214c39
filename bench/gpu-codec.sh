# bench/run gpu-codec: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/gpu.sh"

bm_gpu_codec() { # encode, decode and fused pass of dynamiq and MX on one GPU, against a device-to-device copy
    local why="" rc f what="dynamiq's fused pass against a device-to-device copy, one GPU"
    bench_launch="no mpirun: one process on GPU ${CUDA_VISIBLE_DEVICES:-0}"
    bench_table format op gbps over_d2d bits_per_coord same_as_cpu
    bench_note "codecs: GB/s of f32 input (4 bytes a value) per second; d2d: bytes copied per" \
        "second by cudaMemcpyAsync device to device; over_d2d = copy time / codec time on the" \
        "same bytes (64 MiB, 16 MiB with --quick); CUDA events around back-to-back calls, the" \
        "median of the samples; dynamiq's calls (cuda/dynamiq.cu) allocate scratch memory and" \
        "wait for the GPU on each call, which its figures include; same_as_cpu = 1 when the" \
        "GPU's bytes (decoded floats for decode) are the CPU codec's"
    if [ -z "$bench_norun" ]; then
        why=$(gpu_bench_why_not)
        if [ -z "$why" ]; then
            bench_launch="$bench_launch ($(gpu_bench_gpus))"
            bench_build bench/gpu_codec
            say "running gpu_codec"
            "$builddir/bench/gpu_codec" --csv "$bench_csv" $quick "${bench_extra[@]}" \
                2>&1 | tee -a "$bench_log" >&2
            rc=${PIPESTATUS[0]}
            if [ "$rc" -eq 77 ]; then
                why="no GPU visible to the CUDA runtime (see $(basename "$bench_log"))"
            elif [ "$rc" -ne 0 ]; then
                bench_failed+=("gpu_codec (exit $rc; see $(basename "$bench_log"))")
            fi
        fi
        if [ -n "$why" ]; then
            rm -f "$bench_csv"
            gpu_bench_not_run "$why" "$what" fused_over_d2d '>=' 0.5
            for f in mxfp8_e4m3 mxfp6_e3m2 mxfp4_e2m1; do
                bench_headline "fused_over_d2d_$f" ""
            done
            return 0
        fi
    fi
    # csv_agg reads every column as a number; the format and op columns are names
    bench_headline fused_over_d2d "$(awk -F, '$1 == "dynamiq" && $2 == "fused" { print $6; exit }' \
        "$bench_csv" 2>/dev/null)"
    for f in mxfp8_e4m3 mxfp6_e3m2 mxfp4_e2m1; do
        bench_headline "fused_over_d2d_$f" "$(awk -F, -v f="$f" \
            '$1 == f && $2 == "fused" { print $6; exit }' "$bench_csv" 2>/dev/null)"
    done
    bench_headline d2d_gbps "$(awk -F, '$1 == "d2d" { print $5; exit }' "$bench_csv" 2>/dev/null)"
    bench_headline cpu_mismatches "$(awk -F, 'NR > 1 { n++; bad += $8 != 1 }
        END { if (n) print bad + 0 }' "$bench_csv" 2>/dev/null)"
    bench_target "$what" fused_over_d2d '>=' 0.5
    bench_target "GPU results that differ from the CPU codec's" cpu_mismatches '<=' 0
    awk -F, 'NR > 1 && $1 != "d2d" { v[$1 "," $2] = $5; if (!($1 in seen)) { seen[$1] = 1;
             order[n++] = $1 } } $1 == "d2d" { m = $5 }
             END { print "format,encode,decode,fused,d2d";
                   for (i = 0; i < n; i++) { f = order[i]
                       print f "," v[f ",encode"] "," v[f ",decode"] "," v[f ",fused"] "," m } }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
width = 1000
set datafile separator ","
set title name . ": GB/s of f32 input on one GPU (line: device-to-device copy, bytes copied)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "GB/s"
set key top right
bars = "$results/$bench_name.bars.csv"
plot bars using 2:xtic(1) title "encode", "" using 3 title "decode", "" using 4 title "fused", \
    "" using 0:5 with lines lw 2 lc rgb "black" title "d2d copy"
GP
}
