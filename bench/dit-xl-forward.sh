# bench/run dit-xl-forward: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use

# dx_field SIDE CORETYPE COLUMN: that row's value in the CSV.
dx_field() {
    awk -F, -v s="$1" -v c="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) k[$i] = i; next }
        $1 == s && $3 == c { print $k[col]; exit }' "$bench_csv" 2>/dev/null
}
# dx_ratio A B: A / B to 3 decimals, empty when either is missing.
dx_ratio() {
    [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.3f", a / b }'
}

bm_dit_xl_forward() { # one DiT-XL/2 forward at 256 (4x32x32 latents, batch 2 as guided sampling runs it), tidal against PyTorch on the same threads: time, peak RSS, agreement
    local threads=1 reps=3 model=DiT-XL/2 tmp prog ct side out err ms best rss core load diff
    [ -n "$quick" ] && model=DiT-S/2
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --threads|--repeats|--model)
            [ $# -ge 2 ] || die "dit-xl-forward: $1 needs a value"
            case $1 in --threads) threads=$2 ;; --repeats) reps=$2 ;; --model) model=$2 ;; esac
            shift ;;
        *) die "dit-xl-forward: unknown option '$1' (it takes --model DiT-X/P --threads N" \
               "--repeats N)" ;;
        esac
        shift
    done
    for r in "$threads" "$reps"; do
        printf '%s' "$r" | grep -qE '^[1-9][0-9]*$' || die "dit-xl-forward: '$r' is not a count"
    done
    printf '%s' "$model" | grep -qE '^DiT-(S|B|L|XL)/(2|4|8)$' ||
        die "dit-xl-forward: --model '$model' is not one of DiT-S/2 ... DiT-XL/8"
    if [ -n "$bench_norun" ]; then
        threads=$(awk -F, 'NR == 2 { print $5 }' "$bench_csv")
        model=$(awk -F, 'NR == 2 { print $4 }' "$bench_csv")
    fi
    bench_launch="no mpirun: one process per side and BLAS setting, ${threads:-?} thread(s) each"
    bench_launch="$bench_launch (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, torch.set_num_threads)"
    bench_ran_nps=1
    if [ -z "$bench_norun" ]; then
        bench_build bench/dit_forward
        /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null ||
            die "/usr/bin/python3 cannot import torch and numpy (Debian: python3-torch)"
        [ -x /usr/bin/time ] || die "dit-xl-forward needs /usr/bin/time (Debian: time) for peak RSS"
        prog=$builddir/bench/dit_forward
        tmp=$(mktemp -d) || die "cannot create a temporary folder"
        say "$model: tidal writes its random weights, inputs and output for PyTorch" \
            "(free memory: $(awk '/^MemAvailable/ { printf "%.1f GiB", $2 / 1048576 }' \
            /proc/meminfo))"
        if ! env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" \
            "$prog" --model "$model" --dump "$tmp" >>"$bench_log" 2>&1; then
            rm -rf "$tmp"
            die "dit_forward --dump failed (see $bench_log)"
        fi
        printf '%s\n' "side,blas_core,coretype,model,threads,repeats,median_ms,best_ms,$(
            )peak_rss_mib,max_rel_diff,load1" >"$bench_csv"
        # auto: OpenBLAS's own choice (OPENBLAS_CORETYPE unset); and the environment's setting,
        # where it sets one
        local cts=auto envct=${OPENBLAS_CORETYPE:-}
        [ -n "$envct" ] && cts="$cts env:$envct"
        for ct in $cts; do
            for side in tidal pytorch; do
                out=$tmp/$side.$ct.out err=$tmp/$side.$ct.err load=$(bench_load)
                say "$side, $model, OPENBLAS_CORETYPE $ct: 1 + $reps forward(s), $threads thread(s)"
                set -- env -u OPENBLAS_CORETYPE OPENBLAS_NUM_THREADS="$threads" \
                    OMP_NUM_THREADS="$threads"
                [ "$ct" = auto ] || set -- "$@" OPENBLAS_CORETYPE="${ct#env:}"
                if [ "$side" = tidal ]; then
                    set -- "$@" "$prog" --model "$model" --repeats "$reps"
                else
                    set -- "$@" /usr/bin/python3 "$bench_dir/dit_forward.py" time "$model" \
                        "$tmp" "$reps" "$threads"
                fi
                if ! /usr/bin/time -v "$@" >"$out" 2>"$err"; then
                    cat "$out" "$err" >>"$bench_log"
                    bench_failed+=("$side with OPENBLAS_CORETYPE $ct failed (see the log)")
                    continue
                fi
                cat "$out" >>"$bench_log"
                ms=$(sed -n 's/^forward .*: \([0-9.]*\) ms (median.*/\1/p' "$out")
                best=$(sed -n 's/^best: \([0-9.]*\) ms$/\1/p' "$out")
                rss=$(awk -F: '/Maximum resident set size/ { printf "%.1f", $2 / 1024 }' "$err")
                core=$(sed -n 's/^blas core: //p' "$out")
                diff=$(sed -n 's/^max relative difference: \([^ ]*\) .*/\1/p' "$out")
                [ "$side" = pytorch ] && core="torch $(/usr/bin/python3 -c \
                    'import torch; print(torch.__version__)' 2>/dev/null)"
                printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$side" "${core:-?}" "$ct" "$model" \
                    "$threads" "$reps" "$ms" "$best" "$rss" "${diff:-}" "$load" >>"$bench_csv"
                if [ "$side" = pytorch ] && ! awk -v d="${diff:-x}" \
                    'BEGIN { exit !(d ~ /^[0-9.e+-]+$/ && d + 0 < 1e-3) }'; then
                    bench_failed+=("$model, OPENBLAS_CORETYPE $ct: PyTorch's output differs" \
                        "from tidal's by ${diff:-?} (relative), not below 1e-3")
                fi
            done
        done
        rm -rf "$tmp"
    fi
    local tm pm trs prs envct te pe
    tm=$(dx_field tidal auto median_ms) pm=$(dx_field pytorch auto median_ms)
    trs=$(dx_field tidal auto peak_rss_mib) prs=$(dx_field pytorch auto peak_rss_mib)
    envct=$(awk -F, '$3 ~ /^env:/ { print $3; exit }' "$bench_csv" 2>/dev/null)
    bench_headline dit_xl_forward_model "$model"
    bench_headline dit_xl_forward_threads "$threads"
    bench_headline dit_xl_forward_blas_core "$(dx_field tidal auto blas_core)"
    bench_headline dit_xl_forward_ms_tidal "$tm"
    bench_headline dit_xl_forward_ms_pytorch "$pm"
    bench_headline dit_xl_forward_ratio_vs_pytorch "$(dx_ratio "$pm" "$tm")"
    bench_headline dit_xl_forward_best_ratio_vs_pytorch "$(dx_ratio \
        "$(dx_field pytorch auto best_ms)" "$(dx_field tidal auto best_ms)")"
    bench_headline dit_xl_forward_peak_rss_mib_tidal "$trs"
    bench_headline dit_xl_forward_peak_rss_mib_pytorch "$prs"
    bench_headline dit_xl_forward_rss_ratio_vs_pytorch "$(dx_ratio "$trs" "$prs")"
    bench_headline dit_xl_forward_max_rel_diff "$(awk -F, '$1 == "pytorch" && $10 != "" {
        if (!n++ || $10 + 0 > m) m = $10 + 0 } END { if (n) print m }' "$bench_csv" 2>/dev/null)"
    if [ -n "$envct" ]; then
        te=$(dx_field tidal "$envct" median_ms) pe=$(dx_field pytorch "$envct" median_ms)
        bench_headline dit_xl_forward_coretype_env "OPENBLAS_CORETYPE=${envct#env:}"
        bench_headline dit_xl_forward_blas_core_env "$(dx_field tidal "$envct" blas_core)"
        bench_headline dit_xl_forward_ms_tidal_env "$te"
        bench_headline dit_xl_forward_ms_pytorch_env "$pe"
        bench_headline dit_xl_forward_ratio_vs_pytorch_env "$(dx_ratio "$pe" "$te")"
    fi
    bench_target "tidal's forward at PyTorch's speed or better, OpenBLAS's own kernel choice" \
        dit_xl_forward_ratio_vs_pytorch '>=' 1.0
    bench_target "with no more memory than PyTorch" dit_xl_forward_rss_ratio_vs_pytorch '<=' 1.0
    bench_target "the same output (max |PyTorch - tidal| / max |tidal|)" \
        dit_xl_forward_max_rel_diff '<' 1e-3
    bench_table side blas_core coretype model threads repeats median_ms best_ms peak_rss_mib \
        max_rel_diff load1
    bench_note "one forward of $model (4x32x32 latents, the latents of a 256x256 image;" \
        "learn_sigma: 8 output channels; 1000 classes), batch 2 as guided sampling runs it:" \
        "both rows at t = 0.5, labels 1 and the null class 1000; float32 on both sides"
    bench_note "tidal: bench/dit_forward, dit_sp_forward (one rank, comm NULL) on an inference" \
        "model (dit_model_create_inference: no gradients, one block's buffers shared by every" \
        "block); PyTorch: bench/dit_forward.py, the module of" \
        "tests/reference/make_dit_reference.py (the position embedding computed once, as tidal" \
        "keeps it) under torch.no_grad(), torch.set_num_threads(T)"
    bench_note "weights: the reference's initialization (dit_model_init_weights, seed 1) plus" \
        "uniform noise of +-0.02 on every parameter (so the zero-initialized adaLN and output" \
        "layers do not zero the output), written once by tidal (dit_forward --dump) with the" \
        "inputs and its output, and read by PyTorch straight into its parameters;" \
        "max_rel_diff = max |PyTorch - tidal| / max |tidal| over the outputs (below 1e-3, or" \
        "the run records a failure)"
    bench_note "each side one process per BLAS setting: 1 untimed forward, then the median of" \
        "the repeats; peak_rss_mib = the process's peak RSS by /usr/bin/time -v (weights," \
        "buffers, runtime). Coretype auto is OpenBLAS's own choice of kernels" \
        "(OPENBLAS_CORETYPE unset), env:X the environment's OPENBLAS_CORETYPE=X, set for both" \
        "sides of its row pair (PyTorch's matrix products run in its own BLAS, which may" \
        "ignore it); load1 = the 1-minute load average as the process started"
    awk -F, 'NR > 1 { print $1 " (" $3 ")," $7 / 1000 }' "$bench_csv" \
        >"$results/$bench_name.bars.csv" 2>/dev/null
    bench_plot <<GP
set datafile separator ","
set title name . ": seconds per forward ($model, batch 2, ${threads:-?} thread(s))"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "s per forward"
set key off
plot "$results/$bench_name.bars.csv" using 2:xtic(1)
GP
}
