# bench/run latent-train: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/train.sh"

bm_latent_train() { # DiT-S/2 training on 4x32x32 latents (learn_sigma, the Gaussian diffusion), images/s and peak RSS, tidal train against PyTorch on the same threads
    local threads=1 batch=8 steps=10 warm=2 rounds=1 objective=ddpm n=64 r side out tmp
    local params="" ips rss load ct cts envct=${OPENBLAS_CORETYPE:-} oct
    [ -n "$quick" ] && steps=4 warm=1
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --threads|--batch|--steps|--warmup-steps|--rounds|--objective)
            [ $# -ge 2 ] || die "latent-train: $1 needs a value"
            case $1 in --threads) threads=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;;
                        --warmup-steps) warm=$2 ;; --rounds) rounds=$2 ;;
                        --objective) objective=$2 ;; esac
            shift ;;
        *) die "latent-train: unknown option '$1' (it takes --threads T --batch B --steps N" \
               "--warmup-steps W --rounds R --objective ddpm|rf)" ;;
        esac
        shift
    done
    for r in "$threads" "$batch" "$steps" "$rounds"; do
        printf '%s' "$r" | grep -qE '^[1-9][0-9]*$' || die "latent-train: '$r' is not a count"
    done
    printf '%s' "$warm" | grep -qE '^[0-9]+$' || die "latent-train: '$warm' is not a count"
    case $objective in ddpm|rf) ;; *) die "latent-train: --objective is ddpm or rf" ;; esac
    [ -n "$bench_norun" ] && threads=$(csv_agg first threads)
    bench_launch="no mpirun: one process per side, ${threads:-?} BLAS/OpenMP thread(s) each"
    bench_launch="$bench_launch (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, torch.set_num_threads)"
    bench_ran_nps=1
    if [ -z "$bench_norun" ]; then
        bench_build src/tidal
        tt_py=/usr/bin/python3 tt_script=$bench_dir/train_throughput.py tt_threads=$threads
        "$tt_py" -c 'import torch, numpy, h5py' 2>/dev/null ||
            die "$tt_py cannot import torch, numpy and h5py (Debian: python3-torch, python3-h5py)"
        tmp=$(mktemp -d) || die "cannot create a temporary folder"
        # random latents in the layout of doc/data.md: a step's cost does not depend on the values
        "$tt_py" -c 'import sys, h5py, numpy as np
r = np.random.default_rng(1)
with h5py.File(sys.argv[1], "w") as f:
    f["latents"] = (0.18215 * r.standard_normal((int(sys.argv[2]), 4, 32, 32))).astype("float32")
    f["labels"] = r.integers(0, 1000, int(sys.argv[2])).astype("int32")
    f.attrs["num_classes"] = 1000' "$tmp/latents.h5" "$n" ||
            die "cannot write the latent data set"
        printf '%s\n' "side,round,coretype,model,objective,threads,batch,steps,warmup_steps,$(
            )params,images_per_s_mean,images_per_s,peak_rss_mib,load1" >"$bench_csv"
        # auto: OpenBLAS's own choice (OPENBLAS_CORETYPE unset); and the environment's setting
        cts=auto
        [ -n "$envct" ] && cts="$cts env:$envct"
        for ct in $cts; do
            [ "$ct" = auto ] && unset OPENBLAS_CORETYPE
            [ "$ct" = auto ] || export OPENBLAS_CORETYPE=$envct
            for r in $(seq 1 "$rounds"); do
                # tidal first in odd rounds (it tells the parameter count), last in even ones
                for side in $( [ $((r % 2)) -eq 1 ] && echo tidal pytorch || echo pytorch tidal); do
                    out=$tmp/$side.$r.txt
                    load=$(bench_load)
                    if [ "$side" = tidal ]; then
                        train_throughput_launch tidal "$r" "$out" "$builddir/src/tidal" train \
                            --model DiT-S/2 --data "$tmp/latents.h5" --objective "$objective" \
                            --batch "$batch" --micro-batch "$batch" --steps $((warm + steps)) \
                            --log-every 1 --val-every 0 --out "$tmp/tidal-out.$r.$ct" || continue
                        params=$(sed -n 's/^tidal train: .* (\([0-9]*\) parameters).*/\1/p' "$out")
                        # the rates of loss.csv (2 decimals; the progress lines have 1) as lines
                        awk -F, 'NR > 1 { print "step " $1 "/0 " $4 " img/s" }' \
                            "$tmp/tidal-out.$r.$ct/loss.csv" >"$out.rates" 2>/dev/null
                    else
                        train_throughput_launch pytorch "$r" "$out" "$tt_py" "$tt_script" \
                            --model DiT-S/2 --data "$tmp/latents.h5" --objective "$objective" \
                            --threads "$threads" --batch "$batch" --steps "$steps" \
                            --warmup-steps "$warm" --log-every 1 \
                            ${params:+--expect-params "$params"} || continue
                        [ -n "$params" ] || params=$(awk '$1 == "parameters:" { print $2 }' "$out")
                    fi
                    if [ "$(train_throughput_steps "$out")" -ne $((warm + steps)) ]; then
                        bench_failed+=("$side, round $r: $(train_throughput_steps "$out")" \
                            "progress lines, not the $((warm + steps)) steps asked for")
                        continue
                    fi
                    if [ "$side" = tidal ]; then
                        ips=$(train_throughput_rates "$out.rates" "$warm" "$batch")
                    else
                        ips=$(train_throughput_rates "$out" "$warm" "$batch")
                    fi
                    rss=$(train_throughput_rss "$out")
                    if [ -z "$ips" ] || [ -z "$rss" ]; then
                        bench_failed+=("$side, round $r: no rate or peak RSS in its output")
                        continue
                    fi
                    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$side" "$r" "$ct" \
                        DiT-S/2 "$objective" "$threads" "$batch" "$steps" "$warm" "${params:-0}" \
                        "${ips% *}" "${ips#* }" "$rss" "$load" >>"$bench_csv"
                done
            done
        done
        if [ -n "$envct" ]; then export OPENBLAS_CORETYPE=$envct; else unset OPENBLAS_CORETYPE; fi
        rm -rf "$tmp"
    fi
    local tb pb tm pm te pe csv_all=$bench_csv
    # the auto rows' figures, then the environment's (train_throughput_max reads $bench_csv)
    bench_csv=$results/$bench_name.sel.csv
    awk -F, 'NR == 1 || $3 == "auto"' "$csv_all" >"$bench_csv"
    tb=$(train_throughput_max tidal images_per_s) pb=$(train_throughput_max pytorch images_per_s)
    tm=$(train_throughput_max tidal peak_rss_mib) pm=$(train_throughput_max pytorch peak_rss_mib)
    oct=$(awk -F, '$3 ~ /^env:/ { print $3; exit }' "$csv_all")
    awk -F, 'NR == 1 || $3 ~ /^env:/' "$csv_all" >"$bench_csv"
    te=$(train_throughput_max tidal images_per_s) pe=$(train_throughput_max pytorch images_per_s)
    rm -f "$bench_csv"
    bench_csv=$csv_all
    bench_headline latent_train_model DiT-S/2
    bench_headline latent_train_objective "$(awk -F, 'NR == 2 { print $5 }' "$bench_csv")"
    bench_headline latent_train_threads "$(csv_agg first threads)"
    bench_headline latent_train_batch "$(csv_agg first batch)"
    bench_headline latent_train_blas_core "$(env -u OPENBLAS_CORETYPE \
        "${tt_py:-/usr/bin/python3}" -c 'import ctypes
try:
    f = ctypes.CDLL("libopenblas.so.0").openblas_get_corename
    f.restype = ctypes.c_char_p
    print(f().decode())
except (OSError, AttributeError):
    print("unknown")' 2>/dev/null) (OPENBLAS_CORETYPE unset)"
    bench_headline latent_train_images_per_s_tidal "$tb"
    bench_headline latent_train_images_per_s_pytorch "$pb"
    bench_headline latent_train_peak_rss_mib_tidal "$tm"
    bench_headline latent_train_peak_rss_mib_pytorch "$pm"
    bench_headline latent_train_ratio_vs_pytorch "$(train_throughput_ratio "$tb" "$pb")"
    bench_headline latent_train_rss_ratio_vs_pytorch "$(train_throughput_ratio "$tm" "$pm")"
    if [ -n "$oct" ]; then
        bench_headline latent_train_coretype_env "OPENBLAS_CORETYPE=${oct#env:}"
        bench_headline latent_train_images_per_s_tidal_env "$te"
        bench_headline latent_train_images_per_s_pytorch_env "$pe"
        bench_headline latent_train_ratio_vs_pytorch_env "$(train_throughput_ratio "$te" "$pe")"
    fi
    bench_target "training images/s, tidal / PyTorch (best round of each)" \
        latent_train_ratio_vs_pytorch '>=' 1.0
    bench_target "peak resident set size, tidal / PyTorch (largest of each)" \
        latent_train_rss_ratio_vs_pytorch '<=' 1.0
    bench_table side round coretype model objective threads batch steps warmup_steps params \
        images_per_s_mean images_per_s peak_rss_mib load1
    bench_note "model: DiT-S/2 on 4x32x32 latents (256 tokens; hidden 384, depth 12, 6 heads," \
        "1000 classes, learn_sigma: 8 output channels; params checked equal on both sides)," \
        "float32; global batch = micro-batch = batch; each step: the objective's loss, backward," \
        "grad-norm clipping 1.0, AdamW, EMA update, 10% label dropout"
    bench_note "objective ddpm (the default; --objective rf for rectified flow): the reference's" \
        "Gaussian diffusion, k uniform in 0..999, the noise's MSE plus the variational bound of" \
        "the learned variance (noise half frozen): tidal's src/dit/diffusion.c against" \
        "bench/train_throughput.py's GaussianDiffusion, written from the formulas" \
        "tests/cli/test_ddpm_torch.sh holds tidal's to"
    bench_note "data: a latent set of random numbers (64 latents N(0, 1) * 0.18215 and random" \
        "labels, written with h5py in doc/data.md's layout: /latents float32 [N,4,32,32]," \
        "/labels), not the SD VAE's encodings of images: a step's compute does not depend on" \
        "the values, and encoding at 256 costs 2-3 s an image on one thread; both sides read" \
        "the same file (\`tidal train --data FILE.h5 --val-every 0\`, train_throughput.py" \
        "--data FILE.h5) and hold it in memory"
    bench_note "rates: both print a progress line every step; after warmup_steps untimed steps," \
        "images_per_s = batch / the median step time of the steps timed steps," \
        "images_per_s_mean = their images / their summed time (tidal's from its loss.csv, whose" \
        "rates have 2 decimals, PyTorch's from its progress lines; tidal's final checkpoint is" \
        "written after the last step, outside both); coretype auto: OpenBLAS's own choice of" \
        "kernels (OPENBLAS_CORETYPE unset), env:X the environment's OPENBLAS_CORETYPE=X for both" \
        "sides; peak_rss_mib = the process's" \
        "peak RSS (getrusage(RUSAGE_CHILDREN) of the waited-for process, whole run); load1 =" \
        "the 1-minute load average as the run started"
    bench_plot <<'GP'
height = 520
set multiplot layout 1, 2 title name . ": DiT-S/2 on 4x32x32 latents, training"
set style fill solid 0.8 border -1
set boxwidth 0.7
set yrange [0:*]
set key off
label(i) = sprintf("%s %s %d", strcol("side"), strcol("coretype"), column("round"))
colour(i) = strcol("side") eq "tidal" ? 0x1f77b4 : 0xff7f0e
set title "images per second (higher is better)"
set ylabel "images/s"
plot csv using 0:"images_per_s":(colour(0)):xtic(label(0)) with boxes lc rgb variable
set title "peak resident set size (lower is better)"
set ylabel "MiB"
plot csv using 0:"peak_rss_mib":(colour(0)):xtic(label(0)) with boxes lc rgb variable
unset multiplot
GP
}
