#!/bin/sh
# A latent model served with its VAE (tidal serve --vae): requests name the images' resolution,
# 8 times the latents' with the Stable Diffusion VAE, and DECODE runs the VAE's decoder to an RGB
# PNG, alone and on an executor under mpirun; the PNG is byte for byte what `tidal generate --vae`
# writes (the pixels of its one-cell grid), and both are 256x256 RGB. The VAE is the SD
# configuration with random weights (random:SEED: no trained weights can be downloaded here), the
# DiT a DiT-S/2 trained one step on latents `tidal encode` made; a resolution the VAE cannot make
# is a 400 that names the ones it can, and a VAE of other latents is refused at start-up. With
# --device cuda-emulated the VAE decodes on the DiT's device (cuda/dit.cu): the CPU's image.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
"$TIDAL" encode --data fmnist --limit 4 --resolution 16 --vae random:3 -o "$dir/lat.h5" \
    >"$dir/enc.log" 2>&1
"$TIDAL" train --model DiT-S/2 --data "$dir/lat.h5" --steps 1 --batch 2 --micro-batch 2 \
    --val-every 0 --objective ddpm --out "$dir/s2" >"$dir/train.log" 2>&1
check "a DiT-S/2 (4 latent channels, ddpm, learn_sigma) trained on encoded latents" \
    [ -s "$dir/s2/model.h5" ]
body='{"label": 7, "n": 1, "steps": 2, "cfg": 2.0, "seed": 11, "resolution": 256, "sampler": "ddim"}'
"$TIDAL" generate --ckpt "$dir/s2/model.h5" --vae random:1 --resolution 256 --n 1 --steps 2 \
    --cfg 2.0 --seed 11 --class 7 --sampler ddim -o "$dir/gen.png" >"$dir/gen.log" 2>&1
check "tidal generate --vae: a 260x260 RGB grid of one 256x256 image" \
    [ "`python3 "$abs_top_srcdir/tests/pngread.py" size "$dir/gen.png"`" = 260x260x3 ]
g64="--ckpt $dir/s2/model.h5 --vae random:1 --resolution 64 --n 1 --steps 2 --cfg 2.0 --seed 11"
"$TIDAL" generate $g64 --device cpu -o "$dir/cpu64.png" >"$dir/cpu64.log" 2>&1
"$TIDAL" generate $g64 --device cuda-emulated -o "$dir/emu64.png" >"$dir/emu64.log" 2>&1; rc=$?
worst=`python3 "$abs_top_srcdir/tests/pngread.py" maxdiff "$dir/cpu64.png" "$dir/emu64.png"`
check "generate --vae --device cuda-emulated: the CPU's image within 2 grey levels (worst $worst)" \
    [ $rc = 0 -a "${worst:-999}" -le 2 ]

same_cell() { # SERVED: its pixels are generate's one cell (2 px of padding around it)
    python3 - "$abs_top_srcdir/tests" "$dir/gen.png" "$1" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from pngread import pixels
gw, gh, gc, grid = pixels(open(sys.argv[2], "rb").read())
w, h, c, img = pixels(open(sys.argv[3], "rb").read())
cell = [row[2 * c:(2 + w) * c] for row in grid[2:2 + h]]
sys.exit(0 if (w, h, c) == (256, 256, 3) and cell == img and len(set(b"".join(img))) > 1 else 1)
EOF
}
for mode in alone mpi; do
    if [ $mode = alone ]; then
        serve_bg $mode "$TIDAL" serve --ckpt "$dir/s2/model.h5" --vae random:1 --max-resolution 32 \
            --listen 127.0.0.1:0 --progress-every 0
    else
        serve_bg $mode tidal_mpirun 2 "$TIDAL" serve --ckpt "$dir/s2/model.h5" --vae random:1 \
            --max-resolution 32 --listen 127.0.0.1:0 --progress-every 0 --sp 1
    fi
    code=`curl -s -o "$dir/$mode.png" -w '%{http_code}' -d "$body" "$base/v1/images?wait=1"`
    bad=`curl -s -o "$dir/$mode.bad" -w '%{http_code}' -d '{"label": 1, "resolution": 32}' "$base/v1/images"`
    if [ $mode = alone ]; then kill -TERM $pid; else pkill -TERM -P $pid; fi
    wait $pid
    same_cell "$dir/$mode.png"; sc=$?
    check "$mode: 200 ($code), a 256x256 RGB PNG, the pixels of tidal generate --vae" \
        [ "$code" = 200 -a $sc = 0 ]
    check "$mode: resolution 32 is a 400 naming 256 ($bad: `cat "$dir/$mode.bad"`)" \
        sh -c '[ "$1" = 400 ] && grep -q "256, 512 or 1024" "$2"' _ "$bad" "$dir/$mode.bad"
done
grep -q "decoded by a VAE of 49490199 parameters, 8x" "$dir/alone.out"
check "the start-up line names the VAE and its upscale" [ $? = 0 ]
err=`"$TIDAL" serve --ckpt "$dir/s2/model.h5" --vae "$dir/none.h5" --listen 127.0.0.1:0 2>&1`; rc=$?
check "--vae of a missing file: exit 2 naming it (rc=$rc)" \
    sh -c '[ "$1" = 2 ] && printf "%s" "$2" | grep -q "none.h5"' _ "$rc" "$err"
done_testing
