#!/bin/sh
# tidal encode (src/cli/cmd_encode.c, doc/vae.md): bad arguments refused with exit 2 before any
# image is read; the VAE weights file refused where a name or a shape does not map; Fashion-MNIST
# to a latent data set that tidal train reads; and, with PyTorch and PIL, a folder of PNG files
# (ImageFolder classes, or a labels file) encoded as the reference DiT's pipeline does it:
# center_crop_arr with PIL, byte for byte, then the encoder's mean * 0.18215 of a plain-PyTorch
# AutoencoderKL (tests/reference/vae_torch.py) with the same random weights, within 1e-4.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
ref="$abs_top_builddir/tests/unit/vae_ref"
py=/usr/bin/python3
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
starts_ok() { case $1 in ok*) return 0 ;; esac; return 1; }
export PYTHONPATH="$abs_top_srcdir/tests/reference${PYTHONPATH:+:$PYTHONPATH}"

# usage ERRTEXT ARGS...: exit 2 and stderr naming ERRTEXT, no output file
usage() {
    want=$1; shift
    rm -f "$dir/u.h5"
    "$TIDAL" encode "$@" >"$dir/u.out" 2>"$dir/u.err"; rc=$?
    check "encode $*: exit 2 naming '$want' (rc=$rc: `head -c 200 "$dir/u.err"`)" \
        sh -c "[ $rc = 2 ] && grep -q -- '$want' '$dir/u.err' && [ ! -e '$dir/u.h5' ]"
}
mkdir -p "$dir/flat"
"$ref" save 32,64 1 8 dec random "$dir/dec.h5" 2>"$dir/err"
check "vae_ref save writes a decoder-only VAE file" [ -s "$dir/dec.h5" ]
"$ref" save 32,64 1 8 both random "$dir/both.h5" 2>"$dir/err"
check "and one with both halves" [ -s "$dir/both.h5" ]
usage "needs --data, --vae and --output" --data fmnist -o "$dir/u.h5"
usage "not a multiple of 8" --data fmnist --vae random:1 --resolution 12 -o "$dir/u.h5"
usage "not a multiple of 2" --data fmnist --vae "$dir/both.h5" --resolution 17 -o "$dir/u.h5"
usage "random:SEED takes a seed" --data fmnist --vae random:x -o "$dir/u.h5"
usage "decoder only" --data fmnist --vae "$dir/dec.h5" -o "$dir/u.h5"
usage "not a VAE weights file" --data fmnist --vae "$abs_top_srcdir/tests/reference/dit_tiny.h5" \
    -o "$dir/u.h5"
usage "no-such" --data "$dir/no-such.h5" --vae random:1 -o "$dir/u.h5"
usage "holds no PNG files" --data "$dir/flat" --vae random:1 -o "$dir/u.h5"
usage "--labels is for a folder" --data fmnist --labels "$dir/x" --vae random:1 -o "$dir/u.h5"
usage "takes no arguments" extra --data fmnist --vae random:1 -o "$dir/u.h5"

# names and shapes that do not map (h5py edits a copy of the file)
if "$py" -c 'import h5py' >/dev/null 2>&1; then
    cp "$dir/both.h5" "$dir/extra.h5"; cp "$dir/both.h5" "$dir/shape.h5"
    "$py" - "$dir" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/extra.h5", "a") as f:
    f.create_dataset("model/encoder.down_blocks.7.resnets.0.norm1.weight", data=np.ones(32, "f4"),
                     chunks=(32,), fletcher32=True)
with h5py.File(f"{d}/shape.h5", "a") as f:
    del f["model/encoder.conv_in.weight"]
    f.create_dataset("model/encoder.conv_in.weight", data=np.ones((32, 3, 1, 1), "f4"),
                     chunks=(32, 3, 1, 1), fletcher32=True)
PY
    "$TIDAL" encode --data fmnist --limit 1 --resolution 16 --vae "$dir/extra.h5" -o "$dir/u.h5" \
        >/dev/null 2>"$dir/e.err"; rc=$?
    check "a tensor that maps to no part of the VAE is refused, named (rc=$rc: `cat "$dir/e.err"`)" \
        sh -c "[ $rc = 1 ] && grep -q 'down_blocks.7.resnets.0.norm1.weight is no tensor' '$dir/e.err'"
    "$TIDAL" encode --data fmnist --limit 1 --resolution 16 --vae "$dir/shape.h5" -o "$dir/u.h5" \
        >/dev/null 2>"$dir/e.err"; rc=$?
    check "a misshapen tensor is refused, named (rc=$rc: `cat "$dir/e.err"`)" \
        sh -c "[ $rc = 1 ] && grep -q 'encoder.conv_in.weight has shape' '$dir/e.err'"
else
    skip "h5py is not installed: the refusals of unmapped and misshapen tensors"
fi

# Fashion-MNIST, SD width with random weights at 16x16: latents 4x2x2; tidal train reads them
if [ -d /usr/share/datasets/fashion-mnist ]; then
    "$TIDAL" encode --data fmnist --limit 5 --resolution 16 --vae random:3 --progress 2 \
        -o "$dir/fm.h5" >"$dir/fm.out" 2>"$dir/fm.err"; rc=$?
    check "fmnist, 5 images at 16x16 with random:3: exit 0 (rc=$rc `cat "$dir/fm.err"`)" [ $rc = 0 ]
    check "progress lines 2/5, 4/5, 5/5" sh -c "grep -q '2/5 images' '$dir/fm.out' &&
        grep -q '4/5 images' '$dir/fm.out' && grep -q '5/5 images' '$dir/fm.out'"
    check "the summary names the layout" grep -q 'latents \[5, 4, 2, 2\] float32' "$dir/fm.out"
    # where the BLAS is OpenBLAS (vae_ref names its core) and the CPU has AVX-512
    if grep -q avx512f /proc/cpuinfo 2>/dev/null &&
        OPENBLAS_CORETYPE=Haswell "$ref" time 32,64 1 8 2 2 1 | grep -q 'blas core: Haswell'; then
        OPENBLAS_CORETYPE=Haswell "$TIDAL" encode --data fmnist --limit 1 --resolution 8 \
            --vae random:1 -o "$dir/h.h5" >"$dir/h.out" 2>&1
        check "on this AVX-512 CPU, OPENBLAS_CORETYPE=Haswell draws a hint on the first line" \
            grep -q "OPENBLAS_CORETYPE=Haswell keeps OpenBLAS off this CPU's AVX-512" "$dir/h.out"
    fi
    "$TIDAL" encode --data fmnist --limit 5 --resolution 16 --vae random:3 --latent mean \
        -o "$dir/fm_mean.h5" >/dev/null 2>&1
    "$TIDAL" train --latent --data "$dir/fm.h5" --model DiT-S/2 --steps 1 --batch 2 \
        --micro-batch 2 --val-every 0 --out "$dir/tr" >"$dir/tr.out" 2>&1; rc=$?
    check "tidal train --latent --data latents.h5 (DiT-S/2, 4 channels) trains a step (rc=$rc)" \
        sh -c "[ $rc = 0 ] && [ -s '$dir/tr/model.h5' ]"
    [ $rc = 0 ] || tail -n 5 "$dir/tr.out" | sed 's/^/# /'
    # --latent refuses a data set of images, naming it and the way to latents
    "$TIDAL" train --latent --data fmnist --model fmnist --steps 1 --batch 2 --val-every 0 \
        --out "$dir/tr_img" >"$dir/tr_img.out" 2>&1; rc=$?
    check "tidal train --latent --data fmnist: refused, naming tidal encode (rc=$rc)" \
        sh -c "[ $rc = 1 ] && grep -q \"data set 'fmnist' holds images, not latents\" \
            '$dir/tr_img.out' && grep -q 'tidal encode --data fmnist' '$dir/tr_img.out' &&
            [ ! -e '$dir/tr_img/model.h5' ]"
    if "$py" -c 'import h5py' >/dev/null 2>&1; then
        out=`"$py" - "$dir" <<'PY'
import sys, gzip, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/fm.h5") as f, h5py.File(f"{d}/fm_mean.h5") as g:
    lab = gzip.open("/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz").read()[8:13]
    ok = (f["latents"].shape == (5, 4, 2, 2) and f["latents"].dtype == np.float32 and
          list(f["labels"][:]) == list(lab) and f.attrs["num_classes"] == 10 and
          f.attrs["latent_sample"] == "sample" and g.attrs["latent_sample"] == "mean" and
          abs(f.attrs["scaling_factor"] - 0.18215) < 1e-7 and f.attrs["resolution"] == 16)
    diff = np.abs(f["latents"][:] - g["latents"][:]).max()
    print(f"{'ok' if ok and diff > 0 else 'bad'}: shape {f['latents'].shape}, labels "
          f"{list(f['labels'][:])} (idx {list(lab)}), sample - mean up to {diff:.3g}")
PY`
        check "the file: [5, 4, 2, 2] float32, Fashion-MNIST's labels, attributes; a sample is not the mean ($out)" \
            starts_ok "$out"
    fi
else
    skip "dataset-fashion-mnist is not installed"
fi

# PNG folders against PIL + PyTorch
if ! "$py" -c 'import torch, PIL, numpy' >/dev/null 2>&1; then
    skip "$py cannot import torch, PIL and numpy (apt-get install python3-torch python3-pil): the PNG folder against the reference pipeline"
    done_testing; exit $?
fi
"$ref" names 32,64 1 8 both >"$dir/names.txt"
"$py" - "$dir" gen <<'PY'
import sys, os, numpy as np, torch
from PIL import Image
from vae_torch import AutoencoderKL, randomize, write_weights, check_names
d = sys.argv[1]
torch.set_default_dtype(torch.float64)
model = AutoencoderKL([32, 64], 1, 8)
randomize(model, 7)
rows = [l.split() for l in open(f"{d}/names.txt")]
assert not check_names(model, rows), check_names(model, rows)
write_weights(model, [r[0] for r in rows], f"{d}/w.bin")
# the same as a state_dict file, with diffusers' names before 0.15 for the encoder's attention
old = {"to_q": "query", "to_k": "key", "to_v": "value", "to_out.0": "proj_attn"}
sd = {}
for k, v in model.state_dict().items():
    for new, was in old.items():
        if k.startswith("encoder.mid_block.attentions.0." + new + "."):
            k = k.replace("." + new + ".", "." + was + ".")
    sd[k] = v.float()
torch.save(sd, f"{d}/vae.pt")
rng = np.random.default_rng(3)
sizes = {"cat/a.png": (40, 30, "RGB"), "cat/b.png": (17, 23, "L"), "dog/c.png": (64, 64, "RGBA"),
         "dog/d.png": (90, 33, "RGB"), "dog/e.png": (16, 16, "P")}
for name, (w, h, mode) in sizes.items():
    os.makedirs(f"{d}/tree/{os.path.dirname(name)}", exist_ok=True)
    yy, xx = np.mgrid[0:h, 0:w]
    a = np.stack([(xx * 255 // max(w - 1, 1)), (yy * 255 // max(h - 1, 1)), (xx + yy) % 256,
                  np.full((h, w), 200)], -1)
    a = np.clip(a + rng.integers(-40, 40, a.shape), 0, 255).astype(np.uint8)
    img = {"RGB": lambda: Image.fromarray(a[..., :3]), "L": lambda: Image.fromarray(a[..., 0]),
           "RGBA": lambda: Image.fromarray(a), "P": lambda: Image.fromarray(a[..., :3]).convert("P")}[mode]()
    img.save(f"{d}/tree/{name}")
    img.save(f"{d}/flat/{os.path.basename(name)}")
with open(f"{d}/labels.txt", "w") as f:
    f.write("# name label\n")
    for i, name in enumerate(sorted(os.path.basename(n) for n in sizes)):
        f.write(f"{name} {[2, 0, 1, 1, 2][i]}\n")
PY
check "PyTorch's state_dict is the C list of tensors; PNG files of 5 sizes and modes written" \
    [ -s "$dir/w.bin" -a -s "$dir/tree/dog/e.png" ]
"$ref" save 32,64 1 8 both "$dir/w.bin" "$dir/torch.h5" 2>"$dir/err"
check "the PyTorch weights as a tidal VAE file (vae_ref save)" [ -s "$dir/torch.h5" ]
for p in cat/a cat/b dog/c dog/d dog/e; do
    "$ref" crop "$dir/tree/$p.png" 16 "$dir/crop-`basename $p`.bin"
done
"$TIDAL" encode --data "$dir/tree" --vae "$dir/torch.h5" --resolution 16 --latent mean \
    -o "$dir/tree.h5" >"$dir/tree.out" 2>"$dir/tree.err"; rc=$?
check "encode the ImageFolder tree (2 classes): exit 0 (rc=$rc `cat "$dir/tree.err"`)" [ $rc = 0 ]
"$TIDAL" encode --data "$dir/flat" --labels "$dir/labels.txt" --vae "$dir/torch.h5" \
    --resolution 16 --latent mean -o "$dir/flat.h5" >"$dir/flat.out" 2>"$dir/flat.err"; rc=$?
check "encode the flat folder with a labels file: exit 0 (rc=$rc `cat "$dir/flat.err"`)" [ $rc = 0 ]
printf 'a.png 0\nzz.png 1\n' >"$dir/bad_labels.txt"
usage "zz.png is no PNG file" --data "$dir/flat" --labels "$dir/bad_labels.txt" --vae random:1 \
    -o "$dir/u.h5"
printf 'a.png 0\n' >"$dir/short_labels.txt"
usage "has no line for b.png" --data "$dir/flat" --labels "$dir/short_labels.txt" --vae random:1 \
    -o "$dir/u.h5"
out=`"$py" - "$dir" cmp <<'PY' 2>&1
import sys, numpy as np, torch, h5py
from PIL import Image
from vae_torch import AutoencoderKL, SCALE, randomize
d = sys.argv[1]
torch.set_default_dtype(torch.float64)
model = AutoencoderKL([32, 64], 1, 8)
randomize(model, 7)

def center_crop_arr(pil_image, image_size):  # the reference DiT's, as ADM wrote it
    while min(*pil_image.size) >= 2 * image_size:
        pil_image = pil_image.resize(tuple(x // 2 for x in pil_image.size), resample=Image.BOX)
    scale = image_size / min(*pil_image.size)
    pil_image = pil_image.resize(tuple(round(x * scale) for x in pil_image.size),
                                 resample=Image.BICUBIC)
    arr = np.array(pil_image)
    crop_y = (arr.shape[0] - image_size) // 2
    crop_x = (arr.shape[1] - image_size) // 2
    return arr[crop_y: crop_y + image_size, crop_x: crop_x + image_size]

files = ["cat/a", "cat/b", "dog/c", "dog/d", "dog/e"]
crops = [center_crop_arr(Image.open(f"{d}/tree/{p}.png").convert("RGB"), 16) for p in files]
cdiff = max(int(np.abs(np.fromfile(f"{d}/crop-{p[4:]}.bin", np.uint8).reshape(3, 16, 16)
                       .transpose(1, 2, 0).astype(int) - c.astype(int)).max())
            for p, c in zip(files, crops))
x = torch.tensor(np.stack(crops).transpose(0, 3, 1, 2) / 127.5 - 1.0)
with torch.no_grad():
    want = (SCALE * model.moments(x)[0]).numpy()
worst = 0
for name, labels in (("tree", [0, 0, 1, 1, 1]), ("flat", [2, 0, 1, 1, 2])):
    with h5py.File(f"{d}/{name}.h5") as f:
        got, lab = f["latents"][:], list(f["labels"][:])
        assert got.shape == (5, 4, 8, 8), got.shape
        assert lab == labels, (name, lab, labels)
        assert f.attrs["num_classes"] == max(labels) + 1
    worst = max(worst, np.abs(got - want).max() / np.abs(want).max())
print(f"{'ok' if cdiff == 0 and worst < 1e-4 else 'bad'}: crops differ from PIL's by at most "
      f"{cdiff}; latents max |c - torch| / max |torch| = {worst:.3g}; labels as ImageFolder and "
      f"the labels file")
PY`
check "the PNG folders: PIL's center_crop_arr byte for byte, PyTorch's mean latents within 1e-4, labels ($out)" \
    starts_ok "$out"

# tools/vae_to_tidal.py: the state_dict file (old attention names) to a VAE file that encodes
# to the same bytes
if "$py" -c 'import h5py' >/dev/null 2>&1; then
    "$py" "$abs_top_srcdir/tools/vae_to_tidal.py" "$dir/vae.pt" "$dir/conv.h5" \
        --norm-num-groups 8 >"$dir/conv.out" 2>&1; rc=$?
    check "vae_to_tidal.py converts a state_dict (rc=$rc: `cat "$dir/conv.out"`)" [ $rc = 0 ]
    "$TIDAL" encode --data "$dir/tree" --vae "$dir/conv.h5" --resolution 16 --latent mean \
        -o "$dir/tree_conv.h5" >/dev/null 2>"$dir/conv.err"; rc=$?
    out=`"$py" -c "
import h5py, numpy as np
a, b = h5py.File('$dir/tree.h5'), h5py.File('$dir/tree_conv.h5')
print('ok' if np.array_equal(a['latents'][:], b['latents'][:]) else 'bad')" 2>&1`
    check "tidal encode with the converted file gives the same latents, bytes (rc=$rc $out)" \
        starts_ok "$out"
    "$py" "$abs_top_srcdir/tools/vae_to_tidal.py" "$dir/vae.pt" "$dir/conv_dec.h5" \
        --parts decoder --norm-num-groups 8 >/dev/null 2>&1
    usage "decoder only" --data "$dir/tree" --vae "$dir/conv_dec.h5" -o "$dir/u.h5"
fi

# An HDF5 image data set encodes to the bytes its images give as PNG files
"$py" - "$dir" <<'PY'
import os, sys, h5py, numpy as np
from PIL import Image
d = sys.argv[1]
rng = np.random.default_rng(9)
imgs = rng.integers(0, 256, size=(3, 3, 24, 24), dtype=np.uint8)
os.makedirs(f"{d}/sq", exist_ok=True)
for i, im in enumerate(imgs):
    Image.fromarray(im.transpose(1, 2, 0)).save(f"{d}/sq/{i}.png")
with h5py.File(f"{d}/sq.h5", "w") as f:
    f["images"] = imgs
    f["labels"] = np.array([1, 0, 1], dtype=np.int32)
open(f"{d}/sq.txt", "w").write("0.png 1\n1.png 0\n2.png 1\n")
PY
"$TIDAL" encode --data "$dir/sq.h5" --vae "$dir/torch.h5" --resolution 16 --latent mean \
    -o "$dir/sq_h5.h5" >/dev/null 2>"$dir/sq.err"; rc1=$?
"$TIDAL" encode --data "$dir/sq" --labels "$dir/sq.txt" --vae "$dir/torch.h5" --resolution 16 \
    --latent mean -o "$dir/sq_png.h5" >/dev/null 2>>"$dir/sq.err"; rc2=$?
out=`"$py" - "$dir" <<'PY' 2>&1
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/sq_h5.h5") as a, h5py.File(f"{d}/sq_png.h5") as b:
    same = np.array_equal(a["latents"][:], b["latents"][:]) and list(a["labels"][:]) == [1, 0, 1]
    print(("ok" if same else "bad") + f": {a['latents'].shape}, labels {list(a['labels'][:])}")
PY`
check "an HDF5 image data set (3x24x24) and the same images as PNG files give the same latents ($rc1 $rc2 $out)" \
    starts_ok "$out"
done_testing
