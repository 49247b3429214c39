# bench/run train-throughput: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/train.sh"

bm_train_throughput() { # DiT training images/s and peak RSS, tidal train against PyTorch
    local threads batch=64 steps=40 warm=5 rounds=3 r side out tmp params="" ips rss load pol
    threads=$(nproc 2>/dev/null || echo 1)
    [ -n "$quick" ] && steps=10 warm=3 rounds=1
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --threads|--batch|--steps|--warmup-steps|--rounds)
            [ $# -ge 2 ] || die "train-throughput: $1 needs a value"
            case $1 in --threads) threads=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;;
                        --warmup-steps) warm=$2 ;; --rounds) rounds=$2 ;; esac
            shift ;;
        *) die "train-throughput: unknown option '$1' (it takes --threads T --batch B" \
               "--steps N --warmup-steps W --rounds R)" ;;
        esac
        shift
    done
    for r in "$threads" "$batch" "$steps" "$rounds"; do
        printf '%s' "$r" | grep -qE '^[1-9][0-9]*$' || die "train-throughput: '$r' is not a count"
    done
    printf '%s' "$warm" | grep -qE '^[0-9]+$' || die "train-throughput: '$warm' is not a count"
    [ -n "$bench_norun" ] && threads=$(csv_agg first threads)
    bench_launch="no mpirun: one process per side, ${threads:-?} BLAS/OpenMP threads each"
    bench_launch="$bench_launch (OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, torch.set_num_threads)"
    bench_ran_nps=1
    if [ -z "$bench_norun" ]; then
        bench_build src/tidal
        tt_py=/usr/bin/python3 tt_script=$bench_dir/train_throughput.py tt_threads=$threads
        "$tt_py" -c 'import torch, numpy' 2>/dev/null ||
            die "$tt_py cannot import torch and numpy (Debian: python3-torch, python3-numpy)"
        tmp=$(mktemp -d) || die "cannot create a temporary folder"
        printf '%s\n' "side,round,threads,batch,steps,warmup_steps,params,images_per_s_mean,$(
            )images_per_s,peak_rss_mib,load1" >"$bench_csv"
        for r in $(seq 1 "$rounds"); do
            # tidal first in odd rounds (it tells the parameter count), last in even ones
            for side in $( [ $((r % 2)) -eq 1 ] && echo tidal pytorch pytorch-passive ||
                           echo pytorch-passive pytorch tidal); do
                out=$tmp/$side.$r.txt
                load=$(bench_load)
                # Both print a progress line every step, numbered from the first warm-up step.
                if [ "$side" = tidal ]; then
                    # a folder of its own each round: in one folder a later round resumes the
                    # first one's finished run and trains 0 steps
                    train_throughput_launch tidal "$r" "$out" "$builddir/src/tidal" train \
                        --model fmnist --data fmnist --batch "$batch" --micro-batch "$batch" \
                        --steps $((warm + steps)) --log-every 1 --out "$tmp/tidal-out.$r" ||
                        continue
                    params=$(sed -n 's/^tidal train: .* (\([0-9]*\) parameters).*/\1/p' "$out")
                else
                    # pytorch-passive: the same with OMP_WAIT_POLICY=PASSIVE (no spin-waiting)
                    pol=${side#pytorch}
                    train_throughput_launch "$side" "$r" "$out" \
                        env ${pol:+OMP_WAIT_POLICY=PASSIVE} "$tt_py" "$tt_script" \
                        --model fmnist --threads "$threads" --batch "$batch" --steps "$steps" \
                        --warmup-steps "$warm" --log-every 1 \
                        ${params:+--expect-params "$params"} || continue
                    [ -n "$params" ] || params=$(awk '$1 == "parameters:" { print $2 }' "$out")
                fi
                if [ "$(train_throughput_steps "$out")" -ne $((warm + steps)) ]; then
                    bench_failed+=("$side, round $r: $(train_throughput_steps "$out") progress" \
                        "lines, not the $((warm + steps)) steps asked for")
                    continue
                fi
                ips=$(train_throughput_rates "$out" "$warm" "$batch")
                rss=$(train_throughput_rss "$out")
                if [ -z "$ips" ] || [ -z "$rss" ]; then
                    bench_failed+=("$side, round $r: no rate or peak RSS in its output")
                    continue
                fi
                printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$side" "$r" "$threads" "$batch" \
                    "$steps" "$warm" "${params:-0}" "${ips% *}" "${ips#* }" "$rss" "$load" \
                    >>"$bench_csv"
            done
        done
        rm -rf "$tmp"
    fi
    # side is a text column, which csv_agg reads as 0: the sides are chosen by their text.
    local tb pb qb tm pm
    tb=$(train_throughput_max tidal images_per_s) pb=$(train_throughput_max pytorch images_per_s)
    qb=$(train_throughput_max pytorch-passive images_per_s)
    tm=$(train_throughput_max tidal peak_rss_mib) pm=$(train_throughput_max pytorch peak_rss_mib)
    bench_headline threads "$(csv_agg first threads)"
    bench_headline batch "$(csv_agg first batch)"
    bench_headline tidal_images_per_s "$tb"
    bench_headline pytorch_images_per_s "$pb"
    bench_headline pytorch_passive_images_per_s "$qb"
    bench_headline tidal_peak_rss_mib "$tm"
    bench_headline pytorch_peak_rss_mib "$pm"
    bench_headline images_per_s_mean_ratio_vs_pytorch "$(train_throughput_ratio \
        "$(train_throughput_max tidal images_per_s_mean)" \
        "$(train_throughput_max pytorch images_per_s_mean)")"
    bench_headline images_per_s_ratio_vs_pytorch_passive "$(train_throughput_ratio "$tb" "$qb")"
    bench_headline images_per_s_median_ratio_vs_pytorch "$(train_throughput_ratio \
        "$(train_throughput_median tidal images_per_s)" \
        "$(train_throughput_median pytorch images_per_s)")"
    bench_headline images_per_s_median_ratio_vs_pytorch_passive "$(train_throughput_ratio \
        "$(train_throughput_median tidal images_per_s)" \
        "$(train_throughput_median pytorch-passive images_per_s)")"
    bench_headline tidal_rounds "$(awk -F, '$1 == "tidal"' "$bench_csv" | wc -l)"
    bench_headline pytorch_rounds "$(awk -F, '$1 == "pytorch"' "$bench_csv" | wc -l)"
    bench_headline images_per_s_ratio_vs_pytorch "$(train_throughput_ratio "$tb" "$pb")"
    bench_headline peak_rss_ratio_vs_pytorch "$(train_throughput_ratio "$tm" "$pm")"
    bench_target "training images/s, tidal / PyTorch (best round of each)" \
        images_per_s_ratio_vs_pytorch '>=' 1.0
    bench_target "peak resident set size, tidal / PyTorch (largest of each)" \
        peak_rss_ratio_vs_pytorch '<=' 1.0
    bench_target "training images/s, tidal / PyTorch with OMP_WAIT_POLICY=PASSIVE" \
        images_per_s_ratio_vs_pytorch_passive '>=' 1.0
    bench_table side round threads batch steps warmup_steps params images_per_s_mean \
        images_per_s peak_rss_mib load1
    bench_note "model: the fmnist DiT (32x32x1 images, patch 4, hidden 128, depth 4, heads 4," \
        "10 classes; params = parameter count, checked equal on both sides); float32; global" \
        "batch = micro-batch = batch (one forward and one backward per step); each step:" \
        "rectified-flow MSE, backward, grad-norm clipping 1.0, AdamW (lr 1e-3, linear warm-up" \
        "over 100 steps, no weight decay), EMA update of a copy of the weights (0.999)," \
        "10% label dropout"
    bench_note "tidal: \`tidal train --model fmnist --data fmnist --micro-batch B --log-every 1\`" \
        "(OpenBLAS, its own threads) on Debian's Fashion-MNIST"
    bench_note "PyTorch: bench/train_throughput.py (torch $("${tt_py:-/usr/bin/python3}" -c \
        'import torch; print(torch.__version__)' 2>/dev/null || echo '?') with T OpenMP threads" \
        "and OpenBLAS; the model classes of tests/reference/make_dit_reference.py; default" \
        "AdamW and clip_grad_norm_, EMA with torch._foreach ops) on the same Fashion-MNIST" \
        "images, held in memory as uint8 and batched as tidal does (pad to 32x32, scale to" \
        "[-1, 1]): both sides load data, a small part of a step, and it is not what is compared"
    bench_note "pytorch-passive: PyTorch again with OMP_WAIT_POLICY=PASSIVE, nothing else" \
        "changed: by default libgomp's threads spin-wait between parallel regions, and with" \
        "OpenBLAS's own worker that is T + 1 busy threads on T cores; the headline" \
        "images_per_s_ratio_vs_pytorch is against PyTorch as it starts by default"
    bench_note "rates: both print a progress line every step; after warmup_steps untimed steps," \
        "images_per_s = batch / the median step time of the steps timed steps," \
        "images_per_s_mean = their images / their summed time; the headlines take each side's" \
        "best round (other work only slows a run down) and images_per_s, the steady-state" \
        "rate that bursts of other work disturb least; *_median_ratio_* divide the medians" \
        "over the rounds instead; every round of every side trains from scratch (tidal in a" \
        "new folder) and counts only if it printed all its steps (tidal_rounds," \
        "pytorch_rounds: the rounds that did); the sides run alternately (round 1:" \
        "tidal first, round 2: PyTorch first, ...); load1 = the 1-minute load average as the" \
        "run started (the machine's other work, which this process tree may not see)"
    bench_note "PyTorch's threading: the headline images_per_s_ratio_vs_pytorch (and its median" \
        "ratio) is against PyTorch as it starts by default (torch.set_num_threads(T), libgomp's" \
        "default OMP_WAIT_POLICY, which spin-waits); the *_passive ratios against the same run" \
        "with OMP_WAIT_POLICY=PASSIVE"
    bench_note "peak_rss_mib = the process's peak resident set size (getrusage(RUSAGE_CHILDREN)" \
        "ru_maxrss of the waited-for process; whole run, start-up and data included), the" \
        "headline the largest round"
    bench_plot <<'GP'
height = 520
set multiplot layout 1, 2 title name . ": the fmnist DiT, training (bars: rounds)"
set style fill solid 0.8 border -1
set boxwidth 0.7
set yrange [0:*]
set key off
set xtics rotate by 35 right
label(i) = sprintf("%s %d", strcol("side"), column("round"))
colour(i) = strcol("side") eq "tidal" ? 0x1f77b4 : strcol("side") eq "pytorch" ? 0xff7f0e : 0x2ca02c
set title "images per second (higher is better)"
set ylabel "images/s"
plot csv using 0:"images_per_s":(colour(0)):xtic(label(0)) with boxes lc rgb variable
set title "peak resident set size (lower is better)"
set ylabel "MiB"
plot csv using 0:"peak_rss_mib":(colour(0)):xtic(label(0)) with boxes lc rgb variable
unset multiplot
GP
}
