#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""
make_dit_reference.py -- PyTorch reference data for tidal's C Diffusion
Transformer (DiT).

Writes tests/reference/dit_tiny.h5 (or --out PATH): the parameters, inputs,
forward output, rectified-flow loss, a few intermediates and the gradient of
the loss with respect to every parameter of a tiny DiT.

The model is a self-contained re-implementation of the reference DiT of
Peebles & Xie (facebookresearch/DiT, models.py), including the pieces that
models.py imports from timm (PatchEmbed, Attention, Mlp).  Module names and
registration order are the same as in models.py, so `model.state_dict()` has
exactly the reference parameter names and shapes.  Differences to models.py,
all deliberate (they are tidal's conventions):

  * pos_embed is not a (frozen) nn.Parameter/state_dict entry; it is computed
    on the fly, in float64, for the token grid of the actual input, so one
    model accepts several input sizes.
  * The timestep fed to the sinusoidal embedding is t * T_SCALE (= t * 1000)
    because tidal trains with rectified flow and t in [0, 1].
  * learn_sigma = False (out_channels = in_channels) for dit_tiny.h5; the
    module takes learn_sigma=True as the reference's (out_channels = 2C, the
    noise then the variance value), which tools/ckpt_to_torch.py and
    tests/cli/test_ddpm_torch.sh use.  No label dropout (the null class index
    num_classes may still be given explicitly).
  * No zero initialisation: every parameter is i.i.d. N(0, 0.05^2), so that
    every gradient is non-trivial.
  * The whole forward/backward runs in float64 (parameters are drawn in
    float32, stored as float32, and cast to float64 for the computation).

Loss (rectified flow):  x_t = (1 - t) x0 + t noise,  target = noise - x0,
                        loss = mean((model(x_t, t, y) - target)^2).

Regenerate with (Debian's python, which has torch 1.13, numpy, h5py):

    /usr/bin/python3 tests/reference/make_dit_reference.py
    /usr/bin/python3 tests/reference/make_dit_reference.py --out some/where.h5

The output is deterministic: running the script twice gives byte-identical
datasets (single-threaded CPU, fixed seeds, no HDF5 timestamps).
"""

import argparse
import math
import os
import sys

import h5py
import numpy as np
import torch
import torch.nn as nn

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

CONFIG = dict(
    input_size=8,
    patch_size=2,
    in_channels=1,
    hidden_size=32,
    depth=2,
    num_heads=4,
    mlp_ratio=4.0,
    num_classes=10,
)
T_SCALE = 1000.0          # t in [0,1] -> timestep_embedding(t * 1000)
PARAM_SEED = 1234         # torch.manual_seed for the parameters
PARAM_STD = 0.05          # every parameter (weights and biases) ~ N(0, 0.05^2)
INPUT_SEED = 4321         # torch.Generator seed for x0 / noise

T_MAIN = [0.1, 0.5, 0.9]
Y_MAIN = [3, 7, 10]       # 10 == num_classes: the null (CFG) class
T_16 = [0.25, 0.75]
Y_16 = [0, 10]


# ---------------------------------------------------------------------------
# Position embedding -- DiT models.py: get_2d_sincos_pos_embed,
# get_2d_sincos_pos_embed_from_grid, get_1d_sincos_pos_embed_from_grid.
# Same numpy code, generalised from a square grid_size to (grid_h, grid_w)
# (identical to the original when grid_h == grid_w).  cls_token/extra_tokens
# are not used by DiT and are omitted.
# ---------------------------------------------------------------------------

def get_2d_sincos_pos_embed(embed_dim, grid_h_size, grid_w_size):
    grid_h = np.arange(grid_h_size, dtype=np.float32)
    grid_w = np.arange(grid_w_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first ('xy' indexing)
    grid = np.stack(grid, axis=0)       # grid[0] = column index, grid[1] = row index
    grid = grid.reshape([2, 1, grid_h_size, grid_w_size])
    return get_2d_sincos_pos_embed_from_grid(embed_dim, grid)   # [gh*gw, D] float64


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    # use half of dimensions to encode grid_h
    # (as in DiT: "emb_h" is computed from grid[0], which is the COLUMN coordinate)
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)
    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega  # (D/2,)
    pos = pos.reshape(-1)  # (M,)
    out = np.einsum('m,d->md', pos, omega)  # (M, D/2), outer product
    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)
    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


def modulate(x, shift, scale):
    # DiT models.py: modulate
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


# ---------------------------------------------------------------------------
# timm pieces used by DiT (timm.models.vision_transformer / timm.layers)
# ---------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    """timm PatchEmbed(img_size, patch_size, in_chans, embed_dim, bias=True),
    flatten=True, norm_layer=None:  proj = Conv2d(k=stride=patch), then
    x.flatten(2).transpose(1, 2) -> [B, T, D], token = row * grid_w + col.
    (timm's img_size check is dropped so several input sizes work.)"""

    def __init__(self, patch_size, in_chans, embed_dim):
        super().__init__()
        self.patch_size = (patch_size, patch_size)
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size,
                              stride=patch_size, bias=True)
        self.norm = nn.Identity()

    def forward(self, x):
        B, C, H, W = x.shape
        assert H % self.patch_size[0] == 0 and W % self.patch_size[1] == 0
        x = self.proj(x)                       # [B, D, H/p, W/p]
        x = x.flatten(2).transpose(1, 2)       # BCHW -> BNC
        return self.norm(x)


class Attention(nn.Module):
    """timm Attention(dim, num_heads, qkv_bias=True) with qk_norm=False,
    attn_drop=proj_drop=0 (the non-fused path)."""

    def __init__(self, dim, num_heads=8, qkv_bias=False):
        super().__init__()
        assert dim % num_heads == 0, 'dim should be divisible by num_heads'
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.q_norm = nn.Identity()
        self.k_norm = nn.Identity()
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(0.0)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)                # each [B, H, N, hd]
        q, k = self.q_norm(q), self.k_norm(k)
        q = q * self.scale                     # == (q @ k^T) * scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = attn @ v                           # [B, H, N, hd]
        x = x.transpose(1, 2).reshape(B, N, C)
        x = self.proj(x)
        x = self.proj_drop(x)
        return x


class Mlp(nn.Module):
    """timm Mlp(in_features, hidden_features, act_layer, drop=0):
    fc1 -> act -> drop -> norm(Identity) -> fc2 -> drop."""

    def __init__(self, in_features, hidden_features, act_layer, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features, bias=True)
        self.act = act_layer()
        self.drop1 = nn.Dropout(drop)
        self.norm = nn.Identity()
        self.fc2 = nn.Linear(hidden_features, in_features, bias=True)
        self.drop2 = nn.Dropout(drop)

    def forward(self, x):
        x = self.fc1(x)
        x = self.act(x)
        x = self.drop1(x)
        x = self.norm(x)
        x = self.fc2(x)
        x = self.drop2(x)
        return x


# ---------------------------------------------------------------------------
# DiT models.py modules
# ---------------------------------------------------------------------------

class TimestepEmbedder(nn.Module):
    """DiT TimestepEmbedder: mlp = Sequential(Linear(256, D), SiLU(), Linear(D, D))."""

    def __init__(self, hidden_size, frequency_embedding_size=256):
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(frequency_embedding_size, hidden_size, bias=True),
            nn.SiLU(),
            nn.Linear(hidden_size, hidden_size, bias=True),
        )
        self.frequency_embedding_size = frequency_embedding_size

    @staticmethod
    def timestep_embedding(t, dim, max_period=10000):
        # DiT: freqs = exp(-ln(max_period) * arange(half) / half);
        #      embedding = cat([cos(t*freqs), sin(t*freqs)]).
        # DiT does this in float32 (t.float()); here it is done in t's dtype
        # (float64) for an accurate reference.
        half = dim // 2
        freqs = torch.exp(
            -math.log(max_period) * torch.arange(start=0, end=half, dtype=t.dtype) / half
        ).to(device=t.device)
        args = t[:, None] * freqs[None]
        embedding = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        if dim % 2:
            embedding = torch.cat([embedding, torch.zeros_like(embedding[:, :1])], dim=-1)
        return embedding

    def forward(self, t):
        t_freq = self.timestep_embedding(t, self.frequency_embedding_size)
        t_emb = self.mlp(t_freq)
        return t_emb


class LabelEmbedder(nn.Module):
    """DiT LabelEmbedder with class_dropout_prob > 0: embedding_table has
    num_classes + 1 rows; row num_classes is the null class for CFG.
    Random label dropout (token_drop) is not applied in the reference."""

    def __init__(self, num_classes, hidden_size, dropout_prob):
        super().__init__()
        use_cfg_embedding = dropout_prob > 0
        self.embedding_table = nn.Embedding(num_classes + use_cfg_embedding, hidden_size)
        self.num_classes = num_classes
        self.dropout_prob = dropout_prob

    def forward(self, labels):
        return self.embedding_table(labels)


class DiTBlock(nn.Module):
    """DiT DiTBlock: adaLN-Zero block (norm1, attn, norm2, mlp, adaLN_modulation)."""

    def __init__(self, hidden_size, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden_size, num_heads=num_heads, qkv_bias=True)
        self.norm2 = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        mlp_hidden_dim = int(hidden_size * mlp_ratio)
        approx_gelu = lambda: nn.GELU(approximate="tanh")  # noqa: E731
        self.mlp = Mlp(in_features=hidden_size, hidden_features=mlp_hidden_dim,
                       act_layer=approx_gelu, drop=0)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(),
            nn.Linear(hidden_size, 6 * hidden_size, bias=True)
        )

    def forward(self, x, c):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = \
            self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + gate_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), shift_msa, scale_msa))
        x = x + gate_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), shift_mlp, scale_mlp))
        return x


class FinalLayer(nn.Module):
    """DiT FinalLayer: norm_final, linear, adaLN_modulation (shift, scale)."""

    def __init__(self, hidden_size, patch_size, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden_size, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden_size, patch_size * patch_size * out_channels, bias=True)
        self.adaLN_modulation = nn.Sequential(
            nn.SiLU(),
            nn.Linear(hidden_size, 2 * hidden_size, bias=True)
        )

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        x = modulate(self.norm_final(x), shift, scale)
        x = self.linear(x)
        return x


class DiT(nn.Module):
    """DiT models.py: DiT (learn_sigma=False, pos_embed computed per input)."""

    def __init__(self, input_size=32, patch_size=2, in_channels=4, hidden_size=1152,
                 depth=28, num_heads=16, mlp_ratio=4.0, class_dropout_prob=0.1,
                 num_classes=1000, learn_sigma=False):
        super().__init__()
        self.learn_sigma = learn_sigma
        self.in_channels = in_channels
        self.out_channels = in_channels * 2 if learn_sigma else in_channels
        self.patch_size = patch_size
        self.num_heads = num_heads
        self.hidden_size = hidden_size

        self.x_embedder = PatchEmbed(patch_size, in_channels, hidden_size)
        self.t_embedder = TimestepEmbedder(hidden_size)
        self.y_embedder = LabelEmbedder(num_classes, hidden_size, class_dropout_prob)
        # DiT registers a frozen nn.Parameter pos_embed here; tidal computes
        # it per input grid (see pos_embed()), so it is not in state_dict.
        self.blocks = nn.ModuleList([
            DiTBlock(hidden_size, num_heads, mlp_ratio=mlp_ratio) for _ in range(depth)
        ])
        self.final_layer = FinalLayer(hidden_size, patch_size, self.out_channels)

    def pos_embed(self, grid_h, grid_w, dtype):
        pe = get_2d_sincos_pos_embed(self.hidden_size, grid_h, grid_w)  # float64
        return torch.from_numpy(pe).to(dtype).unsqueeze(0)            # [1, T, D]

    def unpatchify(self, x, h, w):
        """x: (N, T, patch_size**2 * C) -> imgs: (N, C, h*p, w*p)."""
        c = self.out_channels
        p = self.x_embedder.patch_size[0]
        assert h * w == x.shape[1]
        x = x.reshape(shape=(x.shape[0], h, w, p, p, c))
        x = torch.einsum('nhwpqc->nchpwq', x)
        imgs = x.reshape(shape=(x.shape[0], c, h * p, w * p))
        return imgs

    def forward(self, x, t, y, record=None):
        """x: (N, C, H, W) images/latents; t: (N,) rectified-flow time in
        [0, 1]; y: (N,) labels (num_classes = null class).  If `record` is a
        dict, intermediates are stored in it."""
        p = self.patch_size
        gh, gw = x.shape[-2] // p, x.shape[-1] // p
        pe = self.pos_embed(gh, gw, x.dtype)
        x = self.x_embedder(x) + pe             # (N, T, D)
        t = self.t_embedder(t * T_SCALE)        # (N, D)  -- tidal: t * 1000
        y = self.y_embedder(y)                  # (N, D)
        c = t + y                               # (N, D)
        if record is not None:
            record['pos_embed'] = pe[0]
            record['c'] = c
        for i, block in enumerate(self.blocks):
            x = block(x, c)                     # (N, T, D)
            if record is not None:
                record['block%d_out' % i] = x
        x = self.final_layer(x, c)              # (N, T, p*p*out_channels)
        x = self.unpatchify(x, gh, gw)          # (N, out_channels, H, W)
        return x


class ReferenceDiT(DiT):
    """The DiT as facebookresearch/DiT models.py keeps it, for importing its checkpoints
    (tests/cli/test_ckpt_import.sh): pos_embed is the frozen nn.Parameter [1, T, D] of the
    input_size grid, float32 as models.py stores it, and first in state_dict() as there; the
    timestep t is the diffusion step as given (0 to 999: no T_SCALE). Set class_dropout_prob
    to 0 for a label table without the null class, learn_sigma=True for the reference's
    2C output channels."""

    def __init__(self, input_size=32, patch_size=2, **kw):
        super().__init__(input_size=input_size, patch_size=patch_size, **kw)
        g = input_size // patch_size
        pe = get_2d_sincos_pos_embed(self.hidden_size, g, g)
        # registered by hand: DiT.pos_embed is the method that computes it per grid
        self._parameters['pos_embed'] = nn.Parameter(torch.from_numpy(pe).float().unsqueeze(0),
                                                     requires_grad=False)

    def forward(self, x, t, y):
        p = self.patch_size
        gh, gw = x.shape[-2] // p, x.shape[-1] // p
        x = self.x_embedder(x) + self._parameters['pos_embed'].to(x.dtype)
        c = self.t_embedder(t) + self.y_embedder(y)
        for block in self.blocks:
            x = block(x, c)
        x = self.final_layer(x, c)
        return self.unpatchify(x, gh, gw)


def rf_loss(model, x0, noise, t, y, record=None):
    """Rectified-flow loss: x_t = (1-t) x0 + t noise, target = noise - x0."""
    tb = t.view(-1, *([1] * (x0.dim() - 1)))
    x_t = (1 - tb) * x0 + tb * noise
    out = model(x_t, t, y, record=record)
    target = noise - x0
    loss = ((out - target) ** 2).mean()
    return loss, x_t, out


# Parameter names and shapes of the reference DiT (models.py + timm) for the
# tiny configuration, in state_dict order; checked below.
def expected_state_dict_shapes(cfg):
    D = cfg['hidden_size']
    p = cfg['patch_size']
    C = cfg['in_channels']
    Hm = int(D * cfg['mlp_ratio'])
    shapes = [
        ('x_embedder.proj.weight', (D, C, p, p)),
        ('x_embedder.proj.bias', (D,)),
        ('t_embedder.mlp.0.weight', (D, 256)),
        ('t_embedder.mlp.0.bias', (D,)),
        ('t_embedder.mlp.2.weight', (D, D)),
        ('t_embedder.mlp.2.bias', (D,)),
        ('y_embedder.embedding_table.weight', (cfg['num_classes'] + 1, D)),
    ]
    for i in range(cfg['depth']):
        b = 'blocks.%d.' % i
        shapes += [
            (b + 'attn.qkv.weight', (3 * D, D)),
            (b + 'attn.qkv.bias', (3 * D,)),
            (b + 'attn.proj.weight', (D, D)),
            (b + 'attn.proj.bias', (D,)),
            (b + 'mlp.fc1.weight', (Hm, D)),
            (b + 'mlp.fc1.bias', (Hm,)),
            (b + 'mlp.fc2.weight', (D, Hm)),
            (b + 'mlp.fc2.bias', (D,)),
            (b + 'adaLN_modulation.1.weight', (6 * D, D)),
            (b + 'adaLN_modulation.1.bias', (6 * D,)),
        ]
    Co = 2 * C if cfg.get('learn_sigma') else C  # learn_sigma: noise and variance halves
    shapes += [
        ('final_layer.linear.weight', (p * p * Co, D)),
        ('final_layer.linear.bias', (p * p * Co,)),
        ('final_layer.adaLN_modulation.1.weight', (2 * D, D)),
        ('final_layer.adaLN_modulation.1.bias', (2 * D,)),
    ]
    return shapes


# ---------------------------------------------------------------------------
# Self-check: autograd vs. central finite differences (float64)
# ---------------------------------------------------------------------------

def fd_check(model, params, name, inputs, grad, n_elems=4, h=1e-5, tol=1e-6):
    """Check grad of `name`: (a) a few single elements (largest |grad|) and
    (b) the directional derivative along a fixed random direction over the
    whole tensor, both against central differences."""
    p = params[name]
    worst = 0.0

    def loss_at():
        with torch.no_grad():
            return rf_loss(model, *inputs)[0].item()

    flat = p.data.view(-1)
    gflat = grad.view(-1)
    idx = torch.argsort(gflat.abs(), descending=True)[:n_elems].tolist()
    for i in idx:
        orig = flat[i].item()
        flat[i] = orig + h
        lp = loss_at()
        flat[i] = orig - h
        lm = loss_at()
        flat[i] = orig
        fd = (lp - lm) / (2 * h)
        ad = gflat[i].item()
        rel = abs(fd - ad) / max(abs(ad), 1e-12)
        worst = max(worst, rel)
        assert rel < tol, 'FD check %s[%d]: autograd %.12e fd %.12e rel %.3e' % (name, i, ad, fd, rel)

    g = torch.Generator().manual_seed(99)
    v = torch.randn(p.shape, dtype=p.dtype, generator=g)
    orig = p.data.clone()
    p.data.copy_(orig + h * v)
    lp = loss_at()
    p.data.copy_(orig - h * v)
    lm = loss_at()
    p.data.copy_(orig)
    fd = (lp - lm) / (2 * h)
    ad = (grad * v).sum().item()
    rel = abs(fd - ad) / max(abs(ad), 1e-12)
    worst = max(worst, rel)
    assert rel < tol, 'FD directional check %s: autograd %.12e fd %.12e rel %.3e' % (name, ad, fd, rel)
    return worst


# ---------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--out', default=os.path.join(here, 'dit_tiny.h5'),
                    help='output HDF5 file (default: dit_tiny.h5 next to this script)')
    args = ap.parse_args()

    # Determinism: single-threaded CPU, deterministic algorithms.
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    cfg = CONFIG
    model = DiT(input_size=cfg['input_size'], patch_size=cfg['patch_size'],
                in_channels=cfg['in_channels'], hidden_size=cfg['hidden_size'],
                depth=cfg['depth'], num_heads=cfg['num_heads'],
                mlp_ratio=cfg['mlp_ratio'], class_dropout_prob=0.1,
                num_classes=cfg['num_classes'], learn_sigma=False)
    model.eval()  # dropout layers are p=0 anyway; no label dropout

    # Structure check: exactly the reference parameter names/shapes/order.
    got = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert got == expected_state_dict_shapes(cfg), 'state_dict differs from reference DiT'

    # Parameters: after construction, torch.manual_seed(1234), then each
    # parameter in state_dict (= named_parameters) order is filled in place
    # with normal_(0, 0.05) in float32 (so they are exactly float32 values).
    torch.manual_seed(PARAM_SEED)
    with torch.no_grad():
        for _, prm in model.named_parameters():
            assert prm.dtype == torch.float32
            prm.normal_(mean=0.0, std=PARAM_STD)
    params32 = {k: v.detach().clone().numpy() for k, v in model.state_dict().items()}

    # Compute in float64 (exact upcast of the float32 values).
    model.double()
    params = dict(model.named_parameters())
    for k, v in params.items():
        assert np.array_equal(v.detach().numpy().astype(np.float32), params32[k])

    # Inputs.
    gen = torch.Generator().manual_seed(INPUT_SEED)
    s = cfg['input_size']
    C = cfg['in_channels']
    x0 = torch.rand((3, C, s, s), dtype=torch.float64, generator=gen) * 2 - 1
    noise = torch.randn((3, C, s, s), dtype=torch.float64, generator=gen)
    t = torch.tensor(T_MAIN, dtype=torch.float64)
    y = torch.tensor(Y_MAIN, dtype=torch.int64)
    x0_16 = torch.rand((2, C, 16, 16), dtype=torch.float64, generator=gen) * 2 - 1
    noise_16 = torch.randn((2, C, 16, 16), dtype=torch.float64, generator=gen)
    t_16 = torch.tensor(T_16, dtype=torch.float64)
    y_16 = torch.tensor(Y_16, dtype=torch.int64)

    # Main case: forward + backward.
    rec = {}
    model.zero_grad(set_to_none=True)
    loss, x_t, out = rf_loss(model, x0, noise, t, y, record=rec)
    assert out.shape == x0.shape == (3, C, s, s), out.shape
    loss.backward()
    grads = {k: v.grad.detach().clone() for k, v in params.items()}
    for k, g in grads.items():
        assert g is not None and g.shape == params[k].shape and torch.isfinite(g).all(), k
        assert g.abs().max() > 0, 'zero gradient for %s' % k

    # Sanity of the pos-embed intermediate against a direct float64 formula
    # (column coordinate in the first D/2 channels, row in the last D/2).
    D = cfg['hidden_size']
    g = s // cfg['patch_size']
    pe = rec['pos_embed'].numpy()
    om = 1.0 / 10000 ** (np.arange(D // 4, dtype=np.float64) / (D // 4))
    for tok in range(g * g):
        r, col = divmod(tok, g)
        ref = np.concatenate([np.sin(col * om), np.cos(col * om), np.sin(r * om), np.cos(r * om)])
        assert np.array_equal(pe[tok], ref), tok

    # Self-check of the reference: autograd vs. central finite differences.
    inputs = (x0, noise, t, y)
    fd_names = list(params)  # every parameter (the brief asks for at least two)
    fd_worst = {n: fd_check(model, params, n, inputs, grads[n]) for n in fd_names}
    # the FD probes restore parameters exactly; confirm the loss is unchanged
    with torch.no_grad():
        assert rf_loss(model, *inputs)[0].item() == loss.item()

    # Second resolution (16x16 -> 8x8 token grid): forward only.
    with torch.no_grad():
        loss_16, x_t_16, out_16 = rf_loss(model, x0_16, noise_16, t_16, y_16)
    assert out_16.shape == x0_16.shape == (2, C, 16, 16), out_16.shape

    # Write HDF5.
    def ds(f, name, arr):
        f.create_dataset(name, data=arr, track_times=False)

    npd = lambda a: a.detach().numpy().astype(np.float64)  # noqa: E731
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with h5py.File(args.out, 'w', track_order=False) as f:
        for k in ('input_size', 'patch_size', 'in_channels', 'hidden_size',
                  'depth', 'num_heads', 'num_classes'):
            f.attrs[k] = np.int64(cfg[k])
        f.attrs['mlp_ratio'] = np.float64(cfg['mlp_ratio'])
        f.attrs['t_scale'] = np.float64(T_SCALE)
        f.attrs['description'] = (
            'Tiny DiT (Peebles & Xie, facebookresearch/DiT models.py with timm '
            'PatchEmbed/Attention/Mlp; learn_sigma=False; pos_embed computed per '
            'input grid; timestep_embedding(t * t_scale)) reference for tidal. '
            'Params i.i.d. N(0, 0.05^2) from torch.manual_seed(1234), float32; '
            'forward/backward in float64. Rectified-flow loss: x_t=(1-t)x0+t*noise, '
            'target=noise-x0, loss=mean((out-target)^2). Generated by '
            'tests/reference/make_dit_reference.py; regenerate with '
            '/usr/bin/python3 tests/reference/make_dit_reference.py [--out PATH].')
        f.attrs['torch_version'] = str(torch.__version__)

        for k, v in params32.items():
            ds(f, 'params/' + k, v.astype(np.float32))

        ds(f, 'inputs/x0', npd(x0))
        ds(f, 'inputs/noise', npd(noise))
        ds(f, 'inputs/t', npd(t))
        ds(f, 'inputs/y', y.numpy().astype(np.int64))

        ds(f, 'outputs/x_t', npd(x_t))
        ds(f, 'outputs/out', npd(out))
        ds(f, 'outputs/loss', np.float64(loss.item()))
        ds(f, 'outputs/pos_embed', npd(rec['pos_embed']))
        ds(f, 'outputs/c', npd(rec['c']))
        ds(f, 'outputs/block0_out', npd(rec['block0_out']))

        for k, v in grads.items():
            ds(f, 'grads/' + k, npd(v))

        ds(f, 'res16/x0', npd(x0_16))
        ds(f, 'res16/noise', npd(noise_16))
        ds(f, 'res16/t', npd(t_16))
        ds(f, 'res16/y', y_16.numpy().astype(np.int64))
        ds(f, 'res16/x_t', npd(x_t_16))
        ds(f, 'res16/out', npd(out_16))
        ds(f, 'res16/loss', np.float64(loss_16.item()))

    nparam = sum(v.size for v in params32.values())
    print('DiT tiny reference: %s' % args.out)
    print('  config: %s' % ', '.join('%s=%s' % kv for kv in cfg.items()))
    print('  parameters: %d in %d tensors' % (nparam, len(params32)))
    print('  loss (8x8, B=3):   %.17g' % loss.item())
    print('  loss (16x16, B=2): %.17g' % loss_16.item())
    for n, w in fd_worst.items():
        print('  FD check %-28s worst rel err %.2e' % (n, w))
    print('  file size: %d bytes' % os.path.getsize(args.out))
    return 0


if __name__ == '__main__':
    sys.exit(main())
