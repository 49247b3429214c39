# bench/run serve-steps: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_serve_steps() { # one denoising step by resolution and sequence-parallel degree (GF-DiT's cost table)
    bench_build bench-programs
    bench_mpi_sweep "4" bench/serve_steps
    local r p
    for r in 32 64 128; do
        for p in 1 2 4; do
            bench_headline "step_ms_${r}_sp$p" "$(awk -F, -v r=$r -v p=$p \
                '$2 == r && $4 == p { print $6; exit }' "$bench_csv" 2>/dev/null)"
        done
    done
    bench_headline speedup_128_sp2 "$(awk -F, '$2 == 128 && $4 == 2 { print $8; exit }' \
        "$bench_csv" 2>/dev/null)"
    bench_headline speedup_32_sp2 "$(awk -F, '$2 == 32 && $4 == 2 { print $8; exit }' \
        "$bench_csv" 2>/dev/null)"
    bench_table model res tokens sp np step_ms min_ms speedup_vs_sp1
    bench_note "one image, the fmnist DiT (depth 4, hidden 128, 4 heads, patch 4) with random" \
        "weights; SP P = the first P ranks of 4 as a gfc group running dit_sp_forward (Ulysses)," \
        "median of the slowest member; 4 ranks share this machine's 2 cores, so SP4 pays for" \
        "oversubscription and SP2 can use both cores"
    awk -F, 'NR > 1 { v[$2 "," $4] = $6 }
             END { print "sp,32x32,64x64,128x128"
                   for (p = 1; p <= 4; p *= 2)
                       if (v[32 "," p] != "")
                           print "SP" p "," v[32 "," p] "," v[64 "," p] "," v[128 "," p] }' \
        "$bench_csv" >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
width = 1000
set datafile separator ","
set title name . ": ms per denoising step (one image), by resolution and SP degree"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set ylabel "ms per step"
set key top left
bars = "$results/$bench_name.bars.csv"
plot for [i = 2:4] bars using i:xtic(1) title columnhead(i)
GP
}
