# bench/run gpu-train: sourced by bench/run, whose helpers it uses (see bench/README.md).
# shellcheck shell=bash disable=SC2034,SC2154 # the harness sets the globals these use
. "$bench_dir/lib/gpu.sh"
. "$bench_dir/lib/train.sh"

bm_gpu_train() { # DiT training images/s on one GPU, tidal train --device cuda against PyTorch
    local model=fmnist batch=256 steps=50 warm=10 rounds=2 r side out tmp params="" ips rss
    local data why py="" c what="training images/s on one GPU, tidal / PyTorch (best round of each)"
    [ -n "$quick" ] && steps=20 warm=5 rounds=1
    set -- "${bench_extra[@]}"
    while [ $# -gt 0 ]; do
        case $1 in
        --model|--batch|--steps|--warmup-steps|--rounds|--python)
            [ $# -ge 2 ] || die "gpu-train: $1 needs a value"
            case $1 in --model) model=$2 ;; --batch) batch=$2 ;; --steps) steps=$2 ;;
                        --warmup-steps) warm=$2 ;; --rounds) rounds=$2 ;; --python) py=$2 ;; esac
            shift ;;
        *) die "gpu-train: unknown option '$1' (it takes --model M --batch B --steps N" \
               "--warmup-steps W --rounds R --python PYTHON)" ;;
        esac
        shift
    done
    for r in "$batch" "$steps" "$rounds"; do
        printf '%s' "$r" | grep -qE '^[1-9][0-9]*$' || die "gpu-train: '$r' is not a count"
    done
    printf '%s' "$warm" | grep -qE '^[0-9]+$' || die "gpu-train: '$warm' is not a count"
    bench_launch="no mpirun: one process per side on GPU ${CUDA_VISIBLE_DEVICES:-0}"
    bench_launch="$bench_launch ($(gpu_bench_gpus))"
    bench_ran_nps=1
    bench_table side round model batch steps warmup_steps params images_per_s_mean images_per_s \
        peak_rss_mib
    bench_note "model: $model DiT, float32 (PyTorch: TF32 off), global batch = micro-batch =" \
        "$batch (one forward and one backward per step); the step of bench/run train-throughput" \
        "(rectified-flow MSE, grad-norm clipping 1.0, AdamW lr 1e-3 with 100 warm-up steps, EMA" \
        "0.999, 10% label dropout), both sides reading the loss and the gradient norm on the" \
        "host every step"
    bench_note "tidal: \`tidal train --device cuda --micro-batch B --log-every 1 --val-every 0\`;" \
        "PyTorch: bench/train_throughput.py --device cuda (model, optimizer, EMA and the data" \
        "set on the GPU, default AdamW, torch.cuda.synchronize() before each clock reading)"
    bench_note "rates as train-throughput's: after warmup_steps untimed steps, images_per_s =" \
        "batch / the median step time, images_per_s_mean = images / summed time; headlines take" \
        "each side's best round; the sides alternate (round 1: tidal first)"
    if [ -z "$bench_norun" ]; then
        why=$(gpu_bench_why_not)
        # a python3 with torch: TIDAL_BENCH_PYTHON, --python, python3 on PATH, Debian's
        if [ -z "$why" ]; then
            for c in "$py" "${TIDAL_BENCH_PYTHON:-}" python3 /usr/bin/python3; do
                [ -n "$c" ] && "$c" -c 'import torch' 2>/dev/null && { py=$c; break; }
            done
            if ! "${py:-false}" -c 'import torch' 2>/dev/null; then
                why="no python3 with torch (set TIDAL_BENCH_PYTHON)"
            elif ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
                why="$py's torch $("$py" -c 'import torch; print(torch.__version__)') sees no GPU"
            fi
        fi
        if [ -n "$why" ]; then
            gpu_bench_not_run "$why" "$what" images_per_s_ratio_vs_pytorch_gpu '>=' 0.8
            return 0
        fi
        bench_build src/tidal
        tt_py=$py tt_script=$bench_dir/train_throughput.py
        tt_threads=$(nproc 2>/dev/null || echo 1)
        [ "$tt_threads" -gt 8 ] && tt_threads=8
        tmp=$(mktemp -d) || die "cannot create a temporary folder"
        # The data: Fashion-MNIST where installed (fmnist model), else random images in tidal's
        # HDF5 format, the same file for both sides.
        if [ "$model" = fmnist ] && [ -d /usr/share/datasets/fashion-mnist ]; then
            data=fmnist
        else
            data=$tmp/data.h5
            "$py" - "$data" "$model" <<'PY' || die "gpu-train: cannot write $data (h5py?)"
import sys, h5py, numpy as np
path, model = sys.argv[1], sys.argv[2]
ch, classes = (1, 10) if model in ('fmnist', 'tiny') else (4, 1000)
res = 8 if model == 'tiny' else 32
rng = np.random.default_rng(1)
with h5py.File(path, 'w') as f:
    f['images'] = rng.integers(0, 256, (8192, ch, res, res), dtype=np.uint8)
    f['labels'] = rng.integers(0, classes, 8192).astype(np.int32)
    f.attrs['num_classes'] = classes
PY
        fi
        bench_note "data: $([ "$data" = fmnist ] && echo "Debian's Fashion-MNIST" ||
            echo "8192 random uint8 images in tidal's HDF5 format (no Fashion-MNIST here)");" \
            "$tt_threads CPU threads per side; PyTorch: torch $("$py" -c \
            'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)"
        printf '%s\n' "side,round,model,batch,steps,warmup_steps,params,images_per_s_mean,$(
            )images_per_s,peak_rss_mib" >"$bench_csv"
        for r in $(seq 1 "$rounds"); do
            for side in $( [ $((r % 2)) -eq 1 ] && echo tidal pytorch || echo pytorch tidal); do
                out=$tmp/$side.$r.txt
                if [ "$side" = tidal ]; then
                    train_throughput_launch tidal "$r" "$out" "$builddir/src/tidal" train \
                        --device cuda --model "$model" --data "$data" --batch "$batch" \
                        --micro-batch "$batch" --steps $((warm + steps)) --log-every 1 \
                        --val-every 0 --ckpt-every 0 --resume none --out "$tmp/tidal-out.$r" ||
                        continue
                    params=$(sed -n 's/^tidal train: .* (\([0-9]*\) parameters).*/\1/p' "$out")
                else
                    train_throughput_launch pytorch "$r" "$out" "$py" "$tt_script" \
                        --device cuda --model "$model" --data "$data" --threads "$tt_threads" \
                        --batch "$batch" --steps "$steps" --warmup-steps "$warm" --log-every 1 \
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
                if [ -z "$ips" ]; then
                    bench_failed+=("$side, round $r: no rate in its output")
                    continue
                fi
                printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$side" "$r" "$model" "$batch" \
                    "$steps" "$warm" "${params:-0}" "${ips% *}" "${ips#* }" "${rss:-0}" \
                    >>"$bench_csv"
            done
        done
        rm -rf "$tmp"
    fi
    local tb pb
    tb=$(train_throughput_max tidal images_per_s) pb=$(train_throughput_max pytorch images_per_s)
    bench_headline tidal_images_per_s "$tb"
    bench_headline pytorch_images_per_s "$pb"
    bench_headline images_per_s_mean_ratio_vs_pytorch_gpu "$(train_throughput_ratio \
        "$(train_throughput_max tidal images_per_s_mean)" \
        "$(train_throughput_max pytorch images_per_s_mean)")"
    bench_headline images_per_s_ratio_vs_pytorch_gpu "$(train_throughput_ratio "$tb" "$pb")"
    bench_target "$what" images_per_s_ratio_vs_pytorch_gpu '>=' 0.8
    bench_plot <<'GP'
height = 480
set title name . ": images per second on one GPU (bars: rounds; higher is better)"
set style fill solid 0.8 border -1
set boxwidth 0.7
set yrange [0:*]
set key off
set ylabel "images/s"
label(i) = sprintf("%s %d", strcol("side"), column("round"))
colour(i) = strcol("side") eq "tidal" ? 0x1f77b4 : 0xff7f0e
plot csv using 0:"images_per_s":(colour(0)):xtic(label(0)) with boxes lc rgb variable
GP
}
