#!/usr/bin/python3
"""vae_to_tidal.py: a diffusers AutoencoderKL state_dict as a tidal VAE weights file (doc/vae.md).

    /usr/bin/python3 tools/vae_to_tidal.py IN OUT.h5 [--parts encoder|decoder|both]
        [--config config.json] [--norm-num-groups 32] [--scaling-factor 0.18215]

IN is a state_dict saved with torch.save (diffusion_pytorch_model.bin), a .safetensors file
(needs the safetensors package), or a diffusers model folder holding one of them and its
config.json (sd-vae-ft-ema, sd-vae-ft-mse). Names of diffusers before 0.15 (the mid block's
attention as query, key, value, proj_attn) are renamed to to_q, to_k, to_v, to_out.0, and 1x1
convolution weights of those linears squeezed. The configuration comes from config.json
(block_out_channels, layers_per_block, norm_num_groups, latent_channels, in_channels,
out_channels, scaling_factor), else from the tensors' shapes with --norm-num-groups and
--scaling-factor (SD's by default). --parts keeps the encoder (encoder.*, quant_conv), the
decoder (post_quant_conv, decoder.*) or both (default: what IN holds).

OUT gets /model/<name> float32, chunked, with the Fletcher32 checksum, as tidal's own files,
and the root attributes kind "vae", vae_class, parts and the configuration's fields; tidal
checks every name and shape when it loads the file (tidal encode --vae OUT.h5). Needs torch
and h5py (Debian's /usr/bin/python3 has both). Exit status: 0 success, 1 the input cannot be
used (the message says why), 2 bad arguments.
"""

import argparse
import json
import os
import re
import sys

PROG = 'vae_to_tidal.py'
OLD_ATTN = {'query': 'to_q', 'key': 'to_k', 'value': 'to_v', 'proj_attn': 'to_out.0'}


class Fail(Exception):
    """An input that cannot be used: message for the user, exit status 1."""


def load_state_dict(path):
    import torch
    if os.path.isdir(path):
        for name in ('diffusion_pytorch_model.safetensors', 'diffusion_pytorch_model.bin'):
            if os.path.exists(os.path.join(path, name)):
                return load_state_dict(os.path.join(path, name))
        raise Fail(f'{path}: no diffusion_pytorch_model.safetensors or .bin in the folder')
    if path.endswith('.safetensors'):
        try:
            from safetensors.torch import load_file
        except ImportError:
            raise Fail(f'{path}: reading .safetensors needs the safetensors package')
        return load_file(path)
    sd = torch.load(path, map_location='cpu')
    if isinstance(sd, dict) and 'state_dict' in sd and isinstance(sd['state_dict'], dict):
        sd = sd['state_dict']
    if not isinstance(sd, dict):
        raise Fail(f'{path}: holds a {type(sd).__name__}, not a state_dict')
    return sd


def rename(sd):
    """diffusers' current names: the old attention names renamed, the linears squeezed."""
    out = {}
    for k, v in sd.items():
        m = re.match(r'^(.*\.attentions\.\d+\.)(query|key|value|proj_attn)\.(weight|bias)$', k)
        if m:
            k = m.group(1) + OLD_ATTN[m.group(2)] + '.' + m.group(3)
            if v.dim() == 4:
                v = v[:, :, 0, 0]
        out[k] = v
    return out


def config_of(sd, args):
    cfg = {}
    if args.config or os.path.isdir(args.input):
        path = args.config or os.path.join(args.input, 'config.json')
        if os.path.exists(path):
            cfg = json.load(open(path))
    half = 'encoder' if any(k.startswith('encoder.') for k in sd) else 'decoder'
    blocks = cfg.get('block_out_channels')
    if not blocks:
        blocks, i = [], 0
        while f'{half}.{"down" if half == "encoder" else "up"}_blocks.{i}.resnets.0.conv1.weight' in sd:
            w = sd[f'{half}.{"down" if half == "encoder" else "up"}_blocks.{i}.resnets.0.conv1.weight']
            blocks.append(int(w.shape[0]))
            i += 1
        if half == 'decoder':
            blocks = blocks[::-1]
        if not blocks:
            raise Fail('no encoder.down_blocks or decoder.up_blocks in the state_dict: not an '
                       'AutoencoderKL')
    layers = cfg.get('layers_per_block')
    if layers is None:
        pre = 'encoder.down_blocks.0.resnets.' if half == 'encoder' else 'decoder.up_blocks.0.resnets.'
        n = len({k[len(pre):].split('.')[0] for k in sd if k.startswith(pre)})
        layers = n if half == 'encoder' else n - 1
    lat = cfg.get('latent_channels', int(sd['quant_conv.weight'].shape[0]) // 2
                  if 'quant_conv.weight' in sd else int(sd['post_quant_conv.weight'].shape[0]))
    return {
        'latent_channels': int(lat),
        'in_channels': int(cfg.get('in_channels', 3)),
        'out_channels': int(cfg.get('out_channels', 3)),
        'block_out_channels': ','.join(str(int(b)) for b in blocks),
        'layers_per_block': int(layers),
        'norm_num_groups': int(cfg.get('norm_num_groups', args.norm_num_groups)),
        'scaling_factor': float(cfg.get('scaling_factor', args.scaling_factor)),
    }


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split('\n')[0])
    ap.add_argument('input')
    ap.add_argument('output')
    ap.add_argument('--parts', choices=['encoder', 'decoder', 'both'])
    ap.add_argument('--config')
    ap.add_argument('--norm-num-groups', type=int, default=32)
    ap.add_argument('--scaling-factor', type=float, default=0.18215)
    args = ap.parse_args()
    try:
        import h5py
        import numpy as np
        sd = rename(load_state_dict(args.input))
        enc = {k: v for k, v in sd.items() if k.startswith(('encoder.', 'quant_conv.'))}
        dec = {k: v for k, v in sd.items() if k.startswith(('decoder.', 'post_quant_conv.'))}
        other = sorted(set(sd) - set(enc) - set(dec))
        if other:
            raise Fail(f'{args.input}: {len(other)} tensors are neither the encoder\'s nor the '
                       f'decoder\'s (the first: {other[0]}): not an AutoencoderKL state_dict')
        parts = args.parts or ('both' if enc and dec else 'encoder' if enc else 'decoder')
        keep = {**(enc if parts in ('encoder', 'both') else {}),
                **(dec if parts in ('decoder', 'both') else {})}
        if not keep or (parts == 'both' and not (enc and dec)):
            raise Fail(f'{args.input} holds no {parts} tensors')
        cfg = config_of(sd, args)
        tmp = f'{args.output}.tmp.{os.getpid()}'
        with h5py.File(tmp, 'w') as f:
            g = f.create_group('model')
            g.attrs['group'] = 'model'
            for k in sorted(keep):
                a = keep[k].detach().float().contiguous().numpy().astype('<f4')
                g.create_dataset(k, data=a, chunks=True, fletcher32=True)
            f.attrs['kind'] = 'vae'
            f.attrs['vae_class'] = 'AutoencoderKL'
            f.attrs['parts'] = {'both': 'encoder+decoder'}.get(parts, parts)
            for k, v in cfg.items():
                f.attrs[k] = np.int64(v) if isinstance(v, int) else v
            f.attrs['format_version'] = np.int64(1)
        os.replace(tmp, args.output)
        print(f'{PROG}: {len(keep)} tensors ({parts}, blocks {cfg["block_out_channels"]}, '
              f'{cfg["layers_per_block"]} layers a block, {cfg["norm_num_groups"]} groups) -> '
              f'{args.output}')
        return 0
    except Fail as e:
        print(f'{PROG}: {e}', file=sys.stderr)
        return 1


if __name__ == '__main__':
    sys.exit(main())
