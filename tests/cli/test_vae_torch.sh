#!/bin/sh
# The VAE decoder (src/dit/vae.c) against PyTorch: diffusers' AutoencoderKL decoder written here
# in plain torch from its published design (ResnetBlock2D, the mid block's one-head Attention,
# UpDecoderBlock2D with nearest Upsample2D, post_quant_conv), module attributes named as
# diffusers names them, so its state_dict's names are the ones an importer will meet. At reduced
# widths with random weights (GroupNorm's affine too), the C decoder's list of tensors is exactly
# the state_dict's, name and shape; the weights cross as raw float32 in that list's order; and
# its output on scaled latents is the reference's (float64, from the same float32 inputs) within
# 1e-4 of the output's largest magnitude.
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
py=/usr/bin/python3
"$py" -c 'import torch' >/dev/null 2>&1 ||
    { echo "1..0 # SKIP $py cannot import torch (apt-get install python3-torch)"; exit 0; }
ref="$abs_top_builddir/tests/unit/vae_ref"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

cat >"$dir/ref.py" <<'PY'
# usage: ref.py gen|compare BLOCKS LAYERS GROUPS N H W DIR
import math, sys
import torch
import torch.nn as nn
import torch.nn.functional as F

cmd, blocks, layers, groups = sys.argv[1], [int(c) for c in sys.argv[2].split(",")], \
    int(sys.argv[3]), int(sys.argv[4])
n, h, w, d = int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
SCALE = 0.18215
torch.set_default_dtype(torch.float64)


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.norm1 = nn.GroupNorm(groups, cin, eps=1e-6, affine=True)
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=1, padding=1)
        self.norm2 = nn.GroupNorm(groups, cout, eps=1e-6, affine=True)
        self.dropout = nn.Dropout(0.0)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1)
        self.conv_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x):
        hid = self.conv1(F.silu(self.norm1(x)))
        hid = self.conv2(self.dropout(F.silu(self.norm2(hid))))
        if self.conv_shortcut is not None:
            x = self.conv_shortcut(x)
        return x + hid  # output_scale_factor 1


class Attention(nn.Module):
    """diffusers' Attention as the VAE's mid block builds it: heads = 1, dim_head = channels,
    GroupNorm first, biases on, residual connection, rescale_output_factor 1."""
    def __init__(self, c):
        super().__init__()
        self.group_norm = nn.GroupNorm(groups, c, eps=1e-6, affine=True)
        self.to_q, self.to_k, self.to_v = nn.Linear(c, c), nn.Linear(c, c), nn.Linear(c, c)
        self.to_out = nn.ModuleList([nn.Linear(c, c), nn.Dropout(0.0)])

    def forward(self, x):
        b, c, hh, ww = x.shape
        t = self.group_norm(x).view(b, c, hh * ww).transpose(1, 2)
        q, k, v = self.to_q(t), self.to_k(t), self.to_v(t)
        p = torch.softmax(q @ k.transpose(1, 2) * c ** -0.5, dim=-1)
        o = self.to_out[1](self.to_out[0](p @ v))
        return o.transpose(1, 2).reshape(b, c, hh, ww) + x


class UNetMidBlock2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attentions = nn.ModuleList([Attention(c)])
        self.resnets = nn.ModuleList([ResnetBlock2D(c, c), ResnetBlock2D(c, c)])

    def forward(self, x):
        x = self.resnets[0](x)
        for attn, res in zip(self.attentions, self.resnets[1:]):
            x = res(attn(x))
        return x


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UpDecoderBlock2D(nn.Module):
    def __init__(self, cin, cout, num_layers, add_upsample):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if i == 0 else cout, cout) for i in range(num_layers)])
        self.upsamplers = nn.ModuleList([Upsample2D(cout)]) if add_upsample else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv_in = nn.Conv2d(4, blocks[-1], 3, stride=1, padding=1)
        self.up_blocks = nn.ModuleList([])
        self.mid_block = UNetMidBlock2D(blocks[-1])
        rev = list(reversed(blocks))
        out_ch = rev[0]
        for i, ch in enumerate(rev):
            prev, out_ch = out_ch, ch
            self.up_blocks.append(UpDecoderBlock2D(prev, out_ch, layers + 1, i != len(rev) - 1))
        self.conv_norm_out = nn.GroupNorm(groups, blocks[0], eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(blocks[0], 3, 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for up in self.up_blocks:
            x = up(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class AutoencoderKLDecode(nn.Module):
    def __init__(self):
        super().__init__()
        self.decoder = Decoder()
        self.post_quant_conv = nn.Conv2d(4, 4, 1)

    def decode(self, latents):  # latents as the DiT samples them: z * 0.18215
        return self.decoder(self.post_quant_conv(latents / SCALE))


torch.manual_seed(25)
model = AutoencoderKLDecode()
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name:  # GroupNorm's affine away from 1 and 0, so that it is tested
            p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
        p.copy_(p.float().double())  # exactly the float32 values the C side reads
sd = model.state_dict()
rows = [line.split() for line in open(f"{d}/names.txt")]
s = 2 ** (len(blocks) - 1)

if cmd == "gen":
    names = [r[0] for r in rows]
    missing = sorted(set(sd) - set(names))
    extra = sorted(set(names) - set(sd))
    bad = [r[0] for r in rows if r[0] in sd and list(sd[r[0]].shape) != [int(x) for x in r[1:]]]
    if missing or extra or bad or len(names) != len(set(names)):
        print(f"names: missing {missing} extra {extra} misshapen {bad}")
        sys.exit(1)
    print(f"names: all {len(names)} tensors of the state_dict, with their shapes")
    with open(f"{d}/weights.bin", "wb") as f:
        for name in names:
            f.write(sd[name].float().contiguous().numpy().tobytes())
    lat = (SCALE * torch.randn(n, 4, h, w)).float()
    open(f"{d}/latents.bin", "wb").write(lat.numpy().tobytes())
    with torch.no_grad():
        out = model.decode(lat.double())
    assert list(out.shape) == [n, 3, h * s, w * s]
    open(f"{d}/ref.bin", "wb").write(out.contiguous().numpy().tobytes())
else:
    import numpy as np
    ref = np.fromfile(f"{d}/ref.bin", dtype=np.float64)
    got = np.fromfile(f"{d}/out.bin", dtype=np.float32).astype(np.float64)
    if got.size != ref.size:
        print(f"compare: {got.size} values, the reference has {ref.size}")
        sys.exit(1)
    rel = np.abs(got - ref).max() / np.abs(ref).max()
    print(f"compare: max |c - torch| / max |torch| = {rel:.3g} over {ref.size} values "
          f"(max |torch| {np.abs(ref).max():.3g})")
    sys.exit(0 if rel < 1e-4 else 1)
PY

# run BLOCKS LAYERS GROUPS N H W: one configuration, four points
run() {
    tag="{$1} layers $2 groups $3, $4 x 4x$5x$6"
    sub="$dir/$1-$2-$3"
    mkdir -p "$sub"
    "$ref" names "$1" "$2" "$3" >"$sub/names.txt" 2>"$sub/err"
    check "$tag: vae_ref names" [ -s "$sub/names.txt" ]
    out=`"$py" "$dir/ref.py" gen "$@" "$sub" 2>&1`; rc=$?
    check "$tag: the C tensors are the state_dict's, names and shapes ($out)" [ $rc = 0 ]
    "$ref" decode "$1" "$2" "$3" "$sub/weights.bin" "$sub/latents.bin" "$4" "$5" "$6" \
        "$sub/out.bin" 2>"$sub/err"; rc=$?
    check "$tag: vae_ref decode, exit 0 (rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || sed 's/^/# /' "$sub/err"
    out=`"$py" "$dir/ref.py" compare "$@" "$sub" 2>&1`; rc=$?
    check "$tag: within 1e-4 relative of PyTorch ($out)" [ $rc = 0 ]
}
run 32,64 2 8 2 8 8
run 32,64 1 16 1 8 8
run 32,32,64 1 16 2 8 8
run 32,64 2 8 1 6 10
done_testing
