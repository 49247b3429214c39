#!/bin/sh
# The VAE (src/dit/vae.c) against PyTorch: diffusers' AutoencoderKL written in plain torch from its
# published design (tests/reference/vae_torch.py: Encoder with DownEncoderBlock2D and Downsample2D's
# one-sided pad, Decoder with UpDecoderBlock2D and nearest Upsample2D, the mid block's one-head
# Attention, quant_conv and post_quant_conv), module attributes named as diffusers names them, so
# its state_dict's names are the ones an importer will meet. At reduced widths with random weights
# (GroupNorm's affine too): the C list of tensors is exactly the state_dict's, name and shape, for
# the decoder, the encoder and both; the weights cross as raw float32 in that list's order; the
# decoder's output, the encoder's mean and logvar, and decode(encode mean) are the reference's
# (float64, from the same float32 inputs) within 1e-4 of their largest magnitude. The SD encoder's
# parameters are counted in PyTorch against the C count.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
py=/usr/bin/python3
"$py" -c 'import torch' >/dev/null 2>&1 ||
    { echo "1..0 # SKIP $py cannot import torch (apt-get install python3-torch)"; exit 0; }
ref="$abs_top_builddir/tests/unit/vae_ref"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
export PYTHONPATH="$abs_top_srcdir/tests/reference${PYTHONPATH:+:$PYTHONPATH}"

cat >"$dir/ref.py" <<'PY'
# usage: ref.py gen|compare dec|enc|both BLOCKS LAYERS GROUPS N H W DIR
#   gen: check DIR/names.txt against the state_dict, write weights.bin, the inputs and ref.bin
#   compare: out.bin against ref.bin (enc: mean and logvar each)
import sys
import numpy as np
import torch
from vae_torch import AutoencoderKL, SCALE, randomize, write_weights, check_names

cmd, parts = sys.argv[1], sys.argv[2]
blocks, layers, groups = [int(c) for c in sys.argv[3].split(",")], int(sys.argv[4]), int(sys.argv[5])
n, h, w, d = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8]), sys.argv[9]
torch.set_default_dtype(torch.float64)
model = AutoencoderKL(blocks, layers, groups, encoder=parts != "dec", decoder=parts != "enc")
randomize(model, 25)
s = 2 ** (len(blocks) - 1)

if cmd == "gen":
    rows = [line.split() for line in open(f"{d}/names.txt")]
    why = check_names(model, rows)
    if why:
        print(f"names: {why}")
        sys.exit(1)
    print(f"names: all {len(rows)} tensors of the state_dict, with their shapes")
    write_weights(model, [r[0] for r in rows], f"{d}/weights.bin")
    torch.manual_seed(5)
    with torch.no_grad():
        if parts == "dec":
            x = (SCALE * torch.randn(n, 4, h, w)).float()
            out = model.decode(x.double())
            assert list(out.shape) == [n, 3, h * s, w * s]
        else:
            x = (2 * torch.rand(n, 3, h, w) - 1).float()
            mean, logvar = model.moments(x.double())
            out = torch.cat([mean, logvar], 1)
            assert list(out.shape) == [n, 8, h // s, w // s]
            if parts == "both":
                out = model.decode(SCALE * mean)
                assert list(out.shape) == [n, 3, h, w], out.shape
    open(f"{d}/input.bin", "wb").write(x.numpy().tobytes())
    open(f"{d}/ref.bin", "wb").write(out.contiguous().numpy().tobytes())
else:
    ref = np.fromfile(f"{d}/ref.bin", dtype=np.float64)
    got = np.fromfile(f"{d}/out.bin", dtype=np.float32).astype(np.float64)
    if got.size != ref.size:
        print(f"compare: {got.size} values, the reference has {ref.size}")
        sys.exit(1)
    halves = [("", ref, got)]
    if parts == "enc":
        r, g = ref.reshape(n, 2, -1), got.reshape(n, 2, -1)
        halves = [("mean ", r[:, 0], g[:, 0]), ("logvar ", r[:, 1], g[:, 1])]
    worst, text = 0.0, []
    for tag, r, g in halves:
        rel = np.abs(g - r).max() / np.abs(r).max()
        worst = max(worst, rel)
        text.append(f"{tag}max |c - torch| / max |torch| = {rel:.3g} (max |torch| {np.abs(r).max():.3g})")
    print("compare: " + ", ".join(text) + f" over {ref.size} values")
    sys.exit(0 if worst < 1e-4 else 1)
PY

# run dec|enc|both BLOCKS LAYERS GROUPS N H W: one configuration, four points
run() {
    what=$1; shift
    case $what in dec) cmd=decode io="4x$5x$6";; enc) cmd=encode io="3x$5x$6";;
        both) cmd=roundtrip io="3x$5x$6 round trip";; esac
    tag="$what {$1} layers $2 groups $3, $4 x $io"
    sub="$dir/$what-$1-$2-$3-$5"
    mkdir -p "$sub"
    "$ref" names "$1" "$2" "$3" "$what" >"$sub/names.txt" 2>"$sub/err"
    check "$tag: vae_ref names" [ -s "$sub/names.txt" ]
    out=`"$py" "$dir/ref.py" gen "$what" "$@" "$sub" 2>&1`; rc=$?
    check "$tag: the C tensors are the state_dict's, names and shapes ($out)" [ $rc = 0 ]
    "$ref" $cmd "$1" "$2" "$3" "$sub/weights.bin" "$sub/input.bin" "$4" "$5" "$6" \
        "$sub/out.bin" 2>"$sub/err"; rc=$?
    check "$tag: vae_ref $cmd, exit 0 (rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || sed 's/^/# /' "$sub/err"
    out=`"$py" "$dir/ref.py" compare "$what" "$@" "$sub" 2>&1`; rc=$?
    check "$tag: within 1e-4 relative of PyTorch ($out)" [ $rc = 0 ]
}
run dec 32,64 2 8 2 8 8
run dec 32,64 1 16 1 8 8
run dec 32,32,64 1 16 2 8 8
run dec 32,64 2 8 1 6 10
run enc 32,64 2 8 2 16 16
run enc 32,32,64 1 16 1 16 24
run enc 32,64 2 8 1 6 10
run both 32,64 1 8 2 16 12

# The SD encoder's size, counted in PyTorch, against the C list of its tensors
c_count=`"$ref" names sd 2 32 enc | awk '{ n = 1; for (i = 2; i <= NF; i++) n *= $i; s += n } END { print s }'`
t_count=`"$py" -c '
from vae_torch import AutoencoderKL
m = AutoencoderKL([128, 256, 512, 512], 2, 32, decoder=False)
e = sum(p.numel() for p in m.encoder.parameters())
q = sum(p.numel() for p in m.quant_conv.parameters())
print(e, q, e + q)' 2>&1`
echo "# PyTorch: SD encoder, quant_conv, both: $t_count; C: $c_count"
check "the SD encoder and quant_conv have as many parameters in C ($c_count) as in PyTorch ($t_count)" \
    [ "${t_count##* }" = "$c_count" ]
done_testing
