# diffusers' AutoencoderKL (the Stable Diffusion VAE) in plain PyTorch, written from its published
# design: Encoder (conv_in, DownEncoderBlock2D with Downsample2D's F.pad (0, 1, 0, 1) and stride-2
# convolution on all but the last block, UNetMidBlock2D, conv_norm_out, SiLU, conv_out to
# 2 * latent_channels), quant_conv, post_quant_conv and Decoder (conv_in, UNetMidBlock2D,
# UpDecoderBlock2D with nearest Upsample2D, conv_norm_out, SiLU, conv_out). Module attributes are
# named as diffusers names them, so the state_dict's names are the ones an importer meets.
# Shared by tests/cli/test_vae_torch.sh (the C VAE against it) and bench/vae-decode.sh (its
# speed against tidal's); no diffusers needed.
import torch
import torch.nn as nn
import torch.nn.functional as F

SCALE = 0.18215


class ResnetBlock2D(nn.Module):
    def __init__(self, cin, cout, groups):
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

    def __init__(self, c, groups):
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
    def __init__(self, c, groups):
        super().__init__()
        self.attentions = nn.ModuleList([Attention(c, groups)])
        self.resnets = nn.ModuleList([ResnetBlock2D(c, c, groups), ResnetBlock2D(c, c, groups)])

    def forward(self, x):
        x = self.resnets[0](x)
        for attn, res in zip(self.attentions, self.resnets[1:]):
            x = res(attn(x))
        return x


class Downsample2D(nn.Module):
    """use_conv=True, padding=0 (the VAE's downsample_padding): pad one zero row and column at
    the bottom and right, then a 3x3 convolution of stride 2 without padding."""

    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2, padding=0)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1), mode="constant", value=0))


class DownEncoderBlock2D(nn.Module):
    def __init__(self, cin, cout, num_layers, add_downsample, groups):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if i == 0 else cout, cout, groups) for i in range(num_layers)])
        self.downsamplers = nn.ModuleList([Downsample2D(cout)]) if add_downsample else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.downsamplers is not None:
            x = self.downsamplers[0](x)
        return x


class Upsample2D(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class UpDecoderBlock2D(nn.Module):
    def __init__(self, cin, cout, num_layers, add_upsample, groups):
        super().__init__()
        self.resnets = nn.ModuleList(
            [ResnetBlock2D(cin if i == 0 else cout, cout, groups) for i in range(num_layers)])
        self.upsamplers = nn.ModuleList([Upsample2D(cout)]) if add_upsample else None

    def forward(self, x):
        for r in self.resnets:
            x = r(x)
        if self.upsamplers is not None:
            x = self.upsamplers[0](x)
        return x


class Encoder(nn.Module):
    def __init__(self, blocks, layers, groups, in_channels=3, latent_channels=4):
        super().__init__()
        self.conv_in = nn.Conv2d(in_channels, blocks[0], 3, stride=1, padding=1)
        self.down_blocks = nn.ModuleList([])
        out_ch = blocks[0]
        for i, ch in enumerate(blocks):
            prev, out_ch = out_ch, ch
            self.down_blocks.append(
                DownEncoderBlock2D(prev, out_ch, layers, i != len(blocks) - 1, groups))
        self.mid_block = UNetMidBlock2D(blocks[-1], groups)
        self.conv_norm_out = nn.GroupNorm(groups, blocks[-1], eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(blocks[-1], 2 * latent_channels, 3, padding=1)  # double_z

    def forward(self, x):
        x = self.conv_in(x)
        for down in self.down_blocks:
            x = down(x)
        x = self.mid_block(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class Decoder(nn.Module):
    def __init__(self, blocks, layers, groups, out_channels=3, latent_channels=4):
        super().__init__()
        self.conv_in = nn.Conv2d(latent_channels, blocks[-1], 3, stride=1, padding=1)
        self.up_blocks = nn.ModuleList([])
        self.mid_block = UNetMidBlock2D(blocks[-1], groups)
        rev = list(reversed(blocks))
        out_ch = rev[0]
        for i, ch in enumerate(rev):
            prev, out_ch = out_ch, ch
            self.up_blocks.append(
                UpDecoderBlock2D(prev, out_ch, layers + 1, i != len(rev) - 1, groups))
        self.conv_norm_out = nn.GroupNorm(groups, blocks[0], eps=1e-6)
        self.conv_act = nn.SiLU()
        self.conv_out = nn.Conv2d(blocks[0], out_channels, 3, padding=1)

    def forward(self, z):
        x = self.mid_block(self.conv_in(z))
        for up in self.up_blocks:
            x = up(x)
        return self.conv_out(self.conv_act(self.conv_norm_out(x)))


class AutoencoderKL(nn.Module):
    """The encoder and quant_conv when encoder, post_quant_conv and the decoder when decoder."""

    def __init__(self, blocks, layers, groups, encoder=True, decoder=True, latent_channels=4):
        super().__init__()
        if encoder:
            self.encoder = Encoder(blocks, layers, groups, latent_channels=latent_channels)
            self.quant_conv = nn.Conv2d(2 * latent_channels, 2 * latent_channels, 1)
        if decoder:
            self.decoder = Decoder(blocks, layers, groups, latent_channels=latent_channels)
            self.post_quant_conv = nn.Conv2d(latent_channels, latent_channels, 1)

    def moments(self, x):  # x in [-1, 1]: mean and logvar, as DiagonalGaussianDistribution
        mean, logvar = torch.chunk(self.quant_conv(self.encoder(x)), 2, dim=1)
        return mean, logvar

    def encode_sample(self, x, eps):  # latent_dist.sample() * SCALE, eps given
        mean, logvar = self.moments(x)
        std = torch.exp(0.5 * torch.clamp(logvar, -30.0, 20.0))
        return SCALE * (mean + std * eps)

    def decode(self, latents):  # latents as the DiT samples them: z * SCALE
        return self.decoder(self.post_quant_conv(latents / SCALE))


def randomize(model, seed):
    """Random weights reproducible from seed, GroupNorm's affine away from 1 and 0 so that it is
    tested, every value exactly a float32 (whatever the default dtype)."""
    torch.manual_seed(seed)
    for m in model.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            m.reset_parameters()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
            p.copy_(p.float().to(p.dtype))


def write_weights(model, names, path):
    """Every tensor of names (the C side's order) as raw float32."""
    sd = model.state_dict()
    with open(path, "wb") as f:
        for name in names:
            f.write(sd[name].float().contiguous().numpy().tobytes())


def check_names(model, rows):
    """rows: [name, dims...] from vae_ref names. An empty string when they are the state_dict's
    exactly, names and shapes; else what differs."""
    sd = model.state_dict()
    names = [r[0] for r in rows]
    missing = sorted(set(sd) - set(names))
    extra = sorted(set(names) - set(sd))
    bad = [r[0] for r in rows if r[0] in sd and list(sd[r[0]].shape) != [int(x) for x in r[1:]]]
    if missing or extra or bad or len(names) != len(set(names)):
        return f"missing {missing} extra {extra} misshapen {bad}"
    return ""
