# bench/run vae-decode: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# vd_field SIDE CORETYPE COLUMN: that row's value in the CSV.
vd_field() {
    awk -F, -v s="$1" -v c="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        $1 == s && $3 == c { print $k[col]; exit }' "$bench_csv" 2>/dev/null
}
# vd_ratio A B: A / B to 3 decimals, empty when either is missing.
vd_ratio() {
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }'
}

bm_vae_decode() { # one 256x256 image from a 4x32x32 latent through the SD VAE decoder, tidal against PyTorch on the same threads: time and peak RSS
    local threads=1 reps=3 tmp ref ct side out err ms best rss core load
    [ -n "$quick" ] && reps=1
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --threads|--repeats)
            [ $# -ge 2 ] || die "vae-decode: $1 needs a value"
            case $1 in --threads) threads=$2 ;; --repeats) reps=$2 ;; esac
            shift ;;
        *) die "vae-decode: unknown option '$1' (it takes --threads N --repeats N)" ;;
        esac
        shift
    done
    for r in "$threads" "$reps"; do
        printf '%s' "$r" | grep -qE '^[1-9][0-9]*$' || die "vae-decode: '$r' is not a count"
    done
    [ -n "$bench_norun" ] && threads=$(awk -F, 'NR == 2 { print $4 }' "$bench_csv")
    bench_launch="no mpirun: one process per side and BLAS setting, ${threads:-?} thread(s) each"
    bench_launch="$bench_launch (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, torch.set_num_threads)"
    bench_ran_nps=1
    if [ -z "$bench_norun" ]; then
        bench_build tests/unit/vae_ref
        /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null ||
            die "/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch)"
        [ -x /usr/bin/time ] || die "vae-decode needs /usr/bin/time (Debian: time) for peak RSS"
        tmp=$(mktemp -d) || die "cannot create a temporary folder"
        ref=$builddir/tests/unit/vae_ref
        "$ref" names sd 2 32 dec >"$tmp/names.txt" || die "vae_ref names failed"
        say "writing the SD decoder's random weights (198 MB) for both sides"
        /usr/bin/python3 "$bench_dir/vae_decode.py" gen "$tmp/names.txt" "$tmp/w.bin" \
            "$tmp/z.bin" >>"$bench_log" 2>&1 || die "vae_decode.py gen failed (see $bench_log)"
        printf '%s\n' "side,blas_core,coretype,threads,repeats,median_ms,best_ms,peak_rss_mib,load1" \
            >"$bench_csv"
        # auto: OpenBLAS's own choice (OPENBLAS_CORETYPE unset); SKYLAKEX: its AVX-512 kernels;
        # and the environment's setting, where it sets another
        local cts="auto SKYLAKEX" envct=${OPENBLAS_CORETYPE:-}
        [ -n "$envct" ] && [ "$envct" != SKYLAKEX ] && cts="$cts env:$envct"
        for ct in $cts; do
            for side in tidal pytorch; do
                out=$tmp/$side.$ct.out err=$tmp/$side.$ct.err load=$(bench_load)
                say "$side, OPENBLAS_CORETYPE $ct: $reps decode(s)"
                set -- env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS="$threads" \
                    OMP_NUM_THREADS="$threads"
                [ "$ct" = auto ] || set -- "$@" OPENBLAS_CORETYPE="${ct#env:}"
                if [ "$side" = tidal ]; then
                    set -- "$@" "$ref" time sd 2 32 32 32 "$reps" "$tmp/w.bin"
                else
                    set -- "$@" /usr/bin/python3 "$bench_dir/vae_decode.py" time \
                        "$tmp/names.txt" "$tmp/w.bin" "$tmp/z.bin" "$reps" "$threads"
                fi
                if ! /usr/bin/time -v "$@" >"$out" 2>"$err"; then
                    cat "$out" "$err" >>"$bench_log"
                    bench_failed+=("$side with OPENBLAS_CORETYPE $ct failed (see the log)")
                    continue
                fi
                cat "$out" >>"$bench_log"
                ms=$(sed -n 's/^decode .*: \([0-9.]*\) ms (median.*/\1/p' "$out")
                best=$(sed -n 's/^best: \([0-9.]*\) ms$/\1/p' "$out")
                rss=$(awk -F: '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$err")
                core=$(sed -n 's/^blas core: //p' "$out")
                [ "$side" = pytorch ] && core="torch $(/usr/bin/python3 -c \
                    'import torch; print(torch.__version__)' 2>/dev/null)"
                printf '%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$side" "${core:-?}" "$ct" "$threads" \
                    "$reps" "$ms" "$best" "$rss" "$load" >>"$bench_csv"
            done
        done
        rm -rf "$tmp"
    fi
    local tm pm ts ps trs prs envct te pe
    tm=$(vd_field tidal auto median_ms) pm=$(vd_field pytorch auto median_ms)
    ts=$(vd_field tidal SKYLAKEX median_ms) ps=$(vd_field pytorch SKYLAKEX median_ms)
    trs=$(vd_field tidal auto peak_rss_mib) prs=$(vd_field pytorch auto peak_rss_mib)
    envct=$(awk -F, '$3 ~ /^env:/ { print $3; exit }' "$bench_csv" 2>/dev/null)
    bench_headline vae_decode_blas_core "$(vd_field tidal auto blas_core)"
    bench_headline vae_decode_ms_tidal "$tm"
    bench_headline vae_decode_ms_pytorch "$pm"
    bench_headline vae_decode_ratio_vs_pytorch "$(vd_ratio "$pm" "$tm")"
    bench_headline vae_decode_peak_rss_mib_tidal "$trs"
    bench_headline vae_decode_peak_rss_mib_pytorch "$prs"
    bench_headline vae_decode_rss_ratio_vs_pytorch "$(vd_ratio "$trs" "$prs")"
    bench_headline vae_decode_blas_core_skylakex "$(vd_field tidal SKYLAKEX blas_core)"
    bench_headline vae_decode_ms_tidal_skylakex "$ts"
    bench_headline vae_decode_ratio_vs_pytorch_skylakex "$(vd_ratio "$ps" "$ts")"
    # the best of the repeats too: other work on the machine only ever slows a decode down
    bench_headline vae_decode_best_ratio_vs_pytorch "$(vd_ratio "$(vd_field pytorch auto best_ms)" \
        "$(vd_field tidal auto best_ms)")"
    bench_headline vae_decode_best_ratio_vs_pytorch_skylakex "$(vd_ratio \
        "$(vd_field pytorch SKYLAKEX best_ms)" "$(vd_field tidal SKYLAKEX best_ms)")"
    if [ -n "$envct" ]; then
        te=$(vd_field tidal "$envct" median_ms) pe=$(vd_field pytorch "$envct" median_ms)
        bench_headline vae_decode_coretype_env "OPENBLAS_CORETYPE=${envct#env:}"
        bench_headline vae_decode_blas_core_env "$(vd_field tidal "$envct" blas_core)"
        bench_headline vae_decode_ms_tidal_env "$te"
        bench_headline vae_decode_ratio_vs_pytorch_env "$(vd_ratio "$pe" "$te")"
    fi
    bench_target "tidal's decode at PyTorch's speed or better, OpenBLAS's own kernel choice" \
        vae_decode_ratio_vs_pytorch '>=' 1.0
    bench_target "with no more memory than PyTorch" vae_decode_rss_ratio_vs_pytorch '<=' 1.0
    bench_target "with OpenBLAS's AVX-512 kernels (OPENBLAS_CORETYPE=SKYLAKEX)" \
        vae_decode_ratio_vs_pytorch_skylakex '>=' 1.0
    bench_table side blas_core coretype threads repeats median_ms best_ms peak_rss_mib load1
    bench_note "one 4x32x32 latent (scaled by 0.18215) to a 256x256 image through the SD decoder" \
        "(block_out_channels 128,256,512,512, 2 layers a block, post_quant_conv; 49,490,199" \
        "parameters, 622 GFLOP), float32, the same random weights on both sides (written once," \
        "loaded by both); PyTorch is tests/reference/vae_torch.py, the module the correctness" \
        "test holds tidal to. Each side is one process per BLAS setting: the median of the" \
        "repeats' decode times (weights loaded, before the first decode), and the process's" \
        "peak RSS by /usr/bin/time -v (tidal: weights, the call's buffers; PyTorch: its" \
        "runtime, weights, activations). Coretype auto is OpenBLAS's own choice of kernels" \
        "(OPENBLAS_CORETYPE unset), SKYLAKEX its AVX-512 kernels, env:X the environment's" \
        "OPENBLAS_CORETYPE=X where it sets one (a Haswell setting keeps it on AVX2 kernels);" \
        "each is set for both sides of its row pair (PyTorch 1.13 runs its convolutions in" \
        "oneDNN, not OpenBLAS)."
    awk -F, 'NR > 1 { print $1 " (" $3 ")," $6 / 1000 }' "$bench_csv" \
        >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
set datafile separator ","
set title name . ": seconds per 256x256 decode (SD VAE, ${threads:-?} thread(s))"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "s per decode"
set key off
plot "$results/$bench_name.bars.csv" using 2:xtic(1)
GP
}
