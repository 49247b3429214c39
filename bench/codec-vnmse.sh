# bench/run codec-vnmse: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

bm_codec_vnmse() { # all-reduce error (vNMSE) and bits per value of every codec, 2-16 ranks
    bench_build bench-programs src/tidal
    bench_launch="one process replays the all-reduce hop by hop (no mpirun); gradients from mpirun"
    local grads=$results/codec-vnmse.grads np=8 steps=101
    [ -n "$quick" ] && np=4 steps=51
    if [ -z "$bench_norun" ]; then
        if ! ls "$grads"/grads-*.h5 >/dev/null 2>&1; then
            say "capturing DiT gradients: tidal train on $np ranks, $steps steps"
            mkdir -p "$grads"
            tidal_mpirun "$np" "$builddir/src/tidal" train --steps "$steps" \
                --dump-grads "$grads" --dump-grads-every $((steps - 1)) --val-every 0 \
                --ckpt-every 0 --log-every 10 --out "$grads/run" >>"$bench_log" 2>&1 ||
                bench_failed+=("gradient capture (see $(basename "$bench_log"))")
        fi
        local args=(--csv "$bench_csv" --grads "$grads")
        [ -n "$quick" ] && args+=(--quick)
        say "running codec_vnmse"
        "$builddir/bench/codec_vnmse" "${args[@]}" "${bench_extra[@]}" \
            2>&1 | tee -a "$bench_log" >&2 || bench_failed+=("codec_vnmse")
    fi
    # the CSV has name columns (data, format, variant, algo): read with awk, not csv_agg
    cv() { awk -F, -v d="$1" -v f="$2" -v v="$3" -v a="$4" -v n="$5" -v c="$6" \
        '$1 == d && $2 == f && $3 == v && $4 == a && $5 == n { print $c; exit }' \
        "$bench_csv" 2>/dev/null; }
    bench_headline dynamiq_bits_per_coord "$(cv dit dynamiq - ring 8 7)"
    bench_headline dynamiq_vnmse_ring8 "$(cv dit dynamiq - ring 8 6)"
    bench_headline mxfp8_vnmse_ring8 "$(cv dit mxfp8_e4m3 - ring 8 6)"
    bench_headline dynamiq_vnmse_ring8_synthetic "$(cv synthetic dynamiq - ring 8 6)"
    bench_headline mxfp8_vnmse_ring8_synthetic "$(cv synthetic mxfp8_e4m3 - ring 8 6)"
    bench_headline dynamiq_vnmse_ring8_iid "$(cv iid dynamiq - ring 8 6)"
    bench_headline mxfp8_vnmse_ring8_iid "$(cv iid mxfp8_e4m3 - ring 8 6)"
    bench_headline dynamiq_vnmse_butterfly8 "$(cv dit dynamiq - butterfly 8 6)"
    bench_headline bf16_vnmse_ring8 "$(cv dit bf16 - ring 8 6)"
    local mx mxs
    mx=$(bench_headline_get mxfp8_vnmse_ring8)
    mxs=$(bench_headline_get mxfp8_vnmse_ring8_synthetic)
    bench_target "dynamiq's bits per value on the wire, metadata included (ring, 8 ranks)" \
        dynamiq_bits_per_coord '<=' 5.0
    bench_target "dynamiq vNMSE below MXFP8 (E4M3)'s, ring of 8, DiT gradients" \
        dynamiq_vnmse_ring8 '<' "${mx:-0}"
    bench_target "the same on synthetic heavy-tailed vectors" \
        dynamiq_vnmse_ring8_synthetic '<' "${mxs:-0}"
    bench_table data format variant algo np vnmse bits_per_coord
    bench_note "vNMSE = |sum^ - sum|^2 / |sum|^2 against the exact sum in double, mean over" \
        "seeds; bits per value = all bytes sent (final encodings counted once per receiver) / values"
    bench_note "dit = gradients of the fmnist DiT from tidal train --dump-grads (one step, its" \
        "ranks' gradients reused cyclically above their count); synthetic = shared heavy-tailed" \
        "signal plus per-rank noise, Student-t(3) in blocks of log-normal scale; iid = each rank" \
        "its own Student-t(4) values, no shared signal (where dynamiq's 5 bits lose to MXFP8)"
    bench_note "rows with a variant other than '-' are dynamiq with one design choice switched" \
        "off or changed (the ablation behind doc/dynamiq.md)"
    bench_note "the ring is replayed in gfc's chunks (256 KiB of f32, each its own encoding, as" \
        "gfc-ring-codec-chunk's default; codec_vnmse --chunk 0 replays whole blocks); the" \
        "butterfly sends whole halves, as gfc's does"
    awk -F, 'NR > 1 && $3 == "-" && $4 == "ring" { v[$1 "," $2 "," $5] = $6
             if (!($2 in seen)) { seen[$2] = 1; order[nf++] = $2 }
             if (!($5 in sn)) { sn[$5] = 1; nps[nn++] = $5 } }
             END { for (d = 0; d < 3; d++) { ds = d == 0 ? "dit" : d == 1 ? "synthetic" : "iid"
                 printf "np"; for (i = 0; i < nf; i++) printf ",%s", order[i]; print ""
                 for (j = 0; j < nn; j++) { printf "%s", nps[j]
                     for (i = 0; i < nf; i++) printf ",%s", v[ds "," order[i] "," nps[j]]
                     print "" }
                 print ""; print "" } }' "$bench_csv" >"$results/$bench_name.lines.csv" 2>/dev/null
    bench_plot <<GP
width = 1800
set datafile separator ","
lines = "$results/$bench_name.lines.csv"
set multiplot layout 1, 3 title name . ": ring all-reduce error against ranks (log scale)"
set logscale y
set logscale x 2
set xlabel "ranks"
set ylabel "vNMSE"
set key outside right top
set format y "%.0e"
colors = "#9400d3 #009e73 #56b4e9 #e69f00 #f0e442 #0072b2 #e51e10 #000000 #888888 #ff1493"
do for [d = 0:2] {
    set title (d == 0 ? "DiT gradients" : d == 1 ? "synthetic, shared signal" : "independent ranks")
    plot for [i = 2:11] lines index d using 1:i with linespoints lw (i == 11 ? 4 : 2) \\
        lc rgb word(colors, i - 1) pt i title columnhead(i)
}
unset multiplot
GP
}
