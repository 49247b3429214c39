#!/bin/sh
# A checkpoint of the reference DiT's kind, end to end: a latent DiT with learn_sigma (4
# channels, 32x32 latents), saved as facebookresearch/DiT's train.py saves it ({model, ema, opt,
# args}), is imported by tools/torch_to_tidal.py, served by tidal serve with the Stable Diffusion
# VAE (--vae random:1: the SD configuration with random weights, since no trained weights can be
# downloaded on these machines), and answers POST /v1/images/generations (OpenAI's images API,
# "size": "256x256") and POST /v1/images with 256x256 RGB PNGs: the pixels tidal generate --vae
# samples from the same file (the diffusion's DDPM, guided as the reference guides). The DiT's
# weights are random too (normal(0, 0.02), so that the adaLN-Zero layers do not silence it).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
serve_test_setup
py=/usr/bin/python3
"$py" -c 'import torch, numpy, h5py' >/dev/null 2>&1 ||
    { echo "1..0 # SKIP $py cannot import torch, numpy and h5py (apt-get install python3-torch python3-h5py)"; exit 0; }
export OMP_NUM_THREADS=1 TIDAL
"$py" - "$abs_top_srcdir/tests/reference" "$dir/ref.pt" <<'PY'
import argparse, sys
import torch
sys.path.insert(0, sys.argv[1])
import make_dit_reference as R
torch.manual_seed(3)
m = R.ReferenceDiT(input_size=32, patch_size=2, in_channels=4, hidden_size=64, depth=2,
                   num_heads=4, num_classes=10, learn_sigma=True, class_dropout_prob=0.1)
with torch.no_grad():
    for name, p in m.named_parameters():
        if name != 'pos_embed':
            p.normal_(0.0, 0.02)
sd = m.state_dict()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
torch.save({"model": sd, "ema": sd, "opt": opt.state_dict(),
            "args": argparse.Namespace(model="custom", image_size=256, num_classes=10)},
           sys.argv[2])
PY
check "a reference-format checkpoint ({model, ema, opt, args}) written by PyTorch" [ -s "$dir/ref.pt" ]
"$py" "$abs_top_srcdir/tools/torch_to_tidal.py" "$dir/ref.pt" --out "$dir/model.h5" --heads 4 \
    --tidal "$TIDAL" >"$dir/import.log" 2>&1; rc=$?
check "tools/torch_to_tidal.py imports it (rc=$rc)" [ $rc = 0 -a -s "$dir/model.h5" ]
[ $rc = 0 ] || sed 's/^/# /' "$dir/import.log"

"$TIDAL" generate --ckpt "$dir/model.h5" --vae random:1 --resolution 256 --n 1 --steps 3 \
    --cfg 4 --seed 5 --class 3 -o "$dir/gen.png" >"$dir/gen.log" 2>&1
check "tidal generate --vae samples it (ddpm) to a 256x256 image" \
    [ "`python3 "$abs_top_srcdir/tests/pngread.py" size "$dir/gen.png" 2>&1`" = 260x260x3 ]

serve_bg ref "$TIDAL" serve --ckpt "$dir/model.h5" --vae random:1 --max-resolution 32 \
    --listen 127.0.0.1:0 --progress-every 0
code=`curl -s -o "$dir/openai.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": "class 3", "n": 1, "size": "256x256", "response_format": "b64_json", "seed": 5, "num_inference_steps": 3, "guidance_scale": 4}' \
    "$base/v1/images/generations"`
native=`curl -s -o "$dir/native.png" -w '%{http_code}' \
    -d '{"label": 3, "resolution": 256, "steps": 3, "cfg": 4, "seed": 5, "sampler": "ddpm"}' \
    "$base/v1/images?wait=1"`
small=`curl -s -o "$dir/small.json" -w '%{http_code}' -H 'Content-Type: application/json' \
    -d '{"prompt": "class 3", "size": "32x32"}' "$base/v1/images/generations"`
kill -TERM $pid; wait $pid

# PNG: the served image's pixels against generate's one-cell grid; b64: from OpenAI's answer
cmp_png() {
    "$py" - "$abs_top_srcdir/tests" "$dir/gen.png" "$@" <<'PY'
import base64, json, sys
sys.path.insert(0, sys.argv[1])
from pngread import pixels
gw, gh, gc, grid = pixels(open(sys.argv[2], "rb").read())
data = open(sys.argv[3], "rb").read()
if len(sys.argv) > 4:
    data = base64.b64decode(json.loads(data)["data"][0]["b64_json"])
w, h, c, img = pixels(data)
cell = [row[2 * c:(2 + w) * c] for row in grid[2:2 + h]]
ok = (w, h, c) == (256, 256, 3) and cell == img and len(set(b"".join(img))) > 1
print(f"{w}x{h}x{c}, {'the same pixels' if ok else 'other pixels'}")
sys.exit(0 if ok else 1)
PY
}
out=`cmp_png "$dir/openai.json" b64 2>&1`; rc=$?
check "POST /v1/images/generations, size 256x256: 200 ($code), a 256x256 RGB PNG, tidal generate's pixels ($out)" \
    [ "$code" = 200 -a $rc = 0 ]
out=`cmp_png "$dir/native.png" 2>&1`; rc=$?
check "POST /v1/images, resolution 256: 200 ($native), the same ($out)" [ "$native" = 200 -a $rc = 0 ]
check "size 32x32 is a 400 naming 256x256 ($small)" \
    sh -c '[ "$1" = 400 ] && grep -q "256x256" "$2"' _ "$small" "$dir/small.json"
done_testing
