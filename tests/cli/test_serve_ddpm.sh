#!/bin/sh
# Serving the reference DiT's kind of model: trained with the Gaussian diffusion (--objective
# ddpm) and learn_sigma (2C outputs), sampled with DDPM or DDIM as the reference's forward_with_cfg
# guides it. Alone and under mpirun (one executor, two in sequence parallel, batched chunks), each
# PNG is byte for byte what `tidal generate` samples with the training model (one image: the pixels
# of generate's one-cell grid); a sampler of the
# other objective is a 400 naming the ones the model takes; a rectified-flow model with
# learn_sigma serves with its first C channels.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
OPENBLAS_NUM_THREADS=1 "$TIDAL" train --model tiny --resolution 32 --batch 4 --micro-batch 2 \
    --steps 2 --val-every 0 --objective ddpm --learn-sigma on --out "$dir/ddpm" >"$dir/ddpm.log" 2>&1
check "a tiny ddpm model with learn_sigma" [ -s "$dir/ddpm/model.h5" ]
OPENBLAS_NUM_THREADS=1 "$TIDAL" train --model tiny --resolution 32 --batch 4 --micro-batch 2 \
    --steps 2 --val-every 0 --learn-sigma on --out "$dir/rfls" >"$dir/rfls.log" 2>&1
check "a tiny rectified-flow model with learn_sigma" [ -s "$dir/rfls/model.h5" ]

# the requests: name, sampler, label, n, steps, cfg, seed
cases() {
    echo "p ddpm 3 2 8 2.5 5"
    echo "i ddim 7 1 6 1.5 9"
    echo "u ddpm -1 3 5 1 2"
    echo "q ddim 1 2 10 4 4"
}
body() { # SAMPLER LABEL N STEPS CFG SEED
    echo "{\"sampler\": \"$1\", \"label\": $2, \"n\": $3, \"steps\": $4, \"cfg\": $5, \"seed\": $6, \"resolution\": 32}"
}
cases | while read -r id sampler label n steps cfg seed; do
    set -- --ckpt "$dir/ddpm/model.h5" --n $n --resolution 32 --steps $steps --cfg $cfg \
        --seed $seed --sampler $sampler -o "$dir/gen-$id.png"
    [ "$label" -ge 0 ] && set -- "$@" --class $label
    "$TIDAL" generate "$@" >"$dir/gen-$id.log" 2>&1 || echo "generate $id failed" >>"$dir/gen.err"
done
check "tidal generate samples each request's images" [ ! -e "$dir/gen.err" ]

# send MODE: every request at once, each PNG into $dir/MODE
send() {
    mkdir -p "$dir/$1"
    cases | while read -r id sampler label n steps cfg seed; do
        curl -s -o "$dir/$1/$id.png" -w '%{http_code}\n' \
            -d "`body $sampler $label $n $steps $cfg $seed`" "$base/v1/images?wait=1" >"$dir/$1/$id.code" &
    done
    w=0
    while [ "`cat "$dir/$1"/*.code 2>/dev/null | grep -c .`" -lt 4 ] && [ $w -lt 1200 ]; do
        sleep 0.1; w=$((w + 1))
    done
}
same_as_generate() { # MODE: how many of the four PNGs are generate's, and which are not (one
    # image is answered bare: it is the only cell of generate's grid, which pads it)
    s=0 d=""
    for id in p i u q; do
        if cmp -s "$dir/gen-$id.png" "$dir/$1/$id.png" || { [ $id = i ] &&
            python3 - "$abs_top_srcdir/tests" "$dir/gen-$id.png" "$dir/$1/$id.png" <<'EOF'; }; then
import sys
sys.path.insert(0, sys.argv[1])
from pngread import pixels
gw, gh, gc, grid = pixels(open(sys.argv[2], "rb").read())
w, h, c, img = pixels(open(sys.argv[3], "rb").read())
cell = [row[2 * c:(2 + w) * c] for row in grid[2:2 + h]]
sys.exit(0 if (gw, gh, gc) == (w + 4, h + 4, c) and cell == img and len(set(b"".join(img))) > 1 else 1)
EOF
            s=$((s + 1))
        else
            d="$d $id"
        fi
    done
    echo "$s${d:+ (differ:$d)}"
}
cat >"$dir/cost.json" <<'EOF'
{"model": "tiny", "patch": 2, "per_image": true,
 "stages": {"prepare": {"1": {"a": 0, "b": 0, "c": 0.0001}},
            "step": {"1": {"a": 0, "b": 0, "c": 0.004}, "2": {"a": 0, "b": 0, "c": 0.003}},
            "decode": {"1": {"a": 0, "b": 0, "c": 0.001}}},
 "migration": {"latency_s": 0.0005, "bytes_per_s": 1e10, "state_bytes_per_token": 128},
 "step_batch": {"256": {"1": 1, "8": 0.5}}}
EOF
for mode in alone mpi1 mpi2; do
    case $mode in
    alone) serve_bg $mode "$TIDAL" serve --ckpt "$dir/ddpm/model.h5" --listen 127.0.0.1:0 \
               --max-resolution 32 --progress-every 0 ;;
    mpi1) serve_bg $mode tidal_mpirun 3 "$TIDAL" serve --ckpt "$dir/ddpm/model.h5" \
              --listen 127.0.0.1:0 --max-resolution 32 --progress-every 0 --sp 1 \
              --cost "$dir/cost.json" ;;
    mpi2) serve_bg $mode tidal_mpirun 3 "$TIDAL" serve --ckpt "$dir/ddpm/model.h5" \
              --listen 127.0.0.1:0 --max-resolution 32 --progress-every 0 --sp 2 \
              --cost "$dir/cost.json" ;;
    esac
    send $mode
    if [ $mode = alone ]; then
        code=`curl -s -o "$dir/bad.json" -w '%{http_code}' -d '{"sampler": "heun", "label": 1}' \
            "$base/v1/images"`
        check "alone: a heun request to a ddpm model: 400 naming ddpm and ddim ($code)" \
            sh -c '[ "$1" = 400 ] && grep -q "ddpm.*ddim" "$2"' _ "$code" "$dir/bad.json"
    fi
    curl -s "$base/metrics" >"$dir/$mode.metrics"
    if [ $mode = alone ]; then kill -TERM $pid; else pkill -TERM -P $pid; fi
    wait $pid
    codes=`cat "$dir/$mode"/*.code | tr '\n' ' '`
    got=`same_as_generate $mode`
    check "$mode: the four ddpm/ddim requests answer 200 ($codes)" \
        [ "`grep -c '^200$' "$dir/$mode"/*.code | awk -F: '{ s += $2 } END { print s }'`" = 4 ]
    check "$mode: every PNG byte for byte tidal generate's ($got of 4)" [ "${got%% *}" = 4 ]
    [ "${got%% *}" = 4 ] || grep -E "warn|error" "$dir/$mode.err" | head -n 5 | sed 's/^/# /'
done
b1=`sed -n 's/^tidal_batch_size_bucket{le="1"} //p' "$dir/mpi1.metrics"`
ball=`sed -n 's/^tidal_batch_size_bucket{le="+Inf"} //p' "$dir/mpi1.metrics"`
check "mpi1: ddpm chunks batched ($((${ball:-0} - ${b1:-0})) of ${ball:-0} of several requests)" \
    [ $((${ball:-0} - ${b1:-0})) -gt 0 ]

# rectified flow with learn_sigma: heun on the first C channels, as tidal generate samples it
"$TIDAL" generate --ckpt "$dir/rfls/model.h5" --class 2 --n 2 --resolution 32 --steps 4 --cfg 3 \
    --seed 3 -o "$dir/gen-rf.png" >"$dir/gen-rf.log" 2>&1
serve_bg rf "$TIDAL" serve --ckpt "$dir/rfls/model.h5" --listen 127.0.0.1:0 --max-resolution 32 \
    --progress-every 0
code=`curl -s -o "$dir/rf.png" -w '%{http_code}' \
    -d '{"label": 2, "n": 2, "steps": 4, "cfg": 3, "seed": 3, "resolution": 32}' "$base/v1/images?wait=1"`
code2=`curl -s -o "$dir/rf2.json" -w '%{http_code}' -d '{"sampler": "ddim", "label": 2}' "$base/v1/images"`
kill -TERM $pid; wait $pid
check "rf with learn_sigma: 200 ($code), the PNG tidal generate's" \
    sh -c '[ "$1" = 200 ] && cmp -s "$2" "$3"' _ "$code" "$dir/rf.png" "$dir/gen-rf.png"
check "rf: a ddim request is a 400 naming euler and heun ($code2)" \
    sh -c '[ "$1" = 400 ] && grep -q "euler.*heun" "$2"' _ "$code2" "$dir/rf2.json"
done_testing
