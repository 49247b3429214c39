#!/usr/bin/python3
"""ckpt_to_torch.py: load a tidal weights or checkpoint file into the reference PyTorch DiT.

    /usr/bin/python3 tools/ckpt_to_torch.py FILE [--group model|ema] [--out state_dict.pt]
        [--pos-embed] [--check]

Reads the model configuration from FILE's root attributes (hidden_size, depth, num_heads,
patch_size, in_channels, num_classes, input_size, mlp_ratio, class_dropout_prob, learn_sigma
(the reference's 2C output channels), t_scale, objective; doc/checkpoint.md), builds the reference DiT of tests/reference/make_dit_reference.py
(facebookresearch/DiT's module names, so its state_dict names are the file's dataset names),
loads /<group> with load_state_dict(strict=True) and runs one forward pass on a fixed random
input (seeded), printing the output's shape, mean and std. --out saves the state_dict with
torch.save, for use elsewhere (with --pos-embed, the frozen pos_embed of the reference's models.py too,
so that its DiT loads it strictly, and tools/torch_to_tidal.py imports it back); --check also verifies that every tensor of the group was loaded
bit for bit and that the output is finite and deterministic.

Needs torch and h5py (Debian's /usr/bin/python3 has both). Exit status: 0 success, 1 the file
cannot be used (the message says why), 2 bad arguments.
"""

import argparse
import importlib.util
import json
import os
import sys

PROG = 'ckpt_to_torch.py'
REFERENCE = 'make_dit_reference.py'


class Fail(Exception):
    """A file or model that cannot be used: message for the user, exit status 1."""


def load_reference(explicit):
    """The reference DiT module: --reference, else ../tests/reference/ (a source or dist tree),
    else beside this script. One definition of the model, shared with tidal's tests."""
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [explicit] if explicit else [
        os.path.join(here, os.pardir, 'tests', 'reference', REFERENCE),
        os.path.join(here, REFERENCE),
    ]
    for path in paths:
        if os.path.isfile(path):
            spec = importlib.util.spec_from_file_location('make_dit_reference', path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise Fail('cannot find the reference DiT %s (looked for %s)' % (REFERENCE, ', '.join(
        os.path.normpath(p) for p in paths)))


def attr_value(v):
    """h5py attribute -> plain Python (numpy scalars, bytes from fixed-length strings)."""
    if isinstance(v, bytes):
        return v.decode('utf-8')
    if hasattr(v, 'item') and getattr(v, 'shape', ()) == ():
        return v.item()
    return v


def read_config(f, path):
    """The model configuration: root attributes, with config_json filling gaps."""
    attrs = {k: attr_value(v) for k, v in f.attrs.items()}
    if 'config_json' in attrs:
        try:
            for k, v in json.loads(attrs['config_json']).items():
                attrs.setdefault(k, v)
        except (ValueError, AttributeError) as e:
            raise Fail('%s: the attribute config_json is not JSON: %s' % (path, e))
    required = ('hidden_size', 'depth', 'num_heads', 'patch_size', 'in_channels', 'num_classes')
    missing = [k for k in required if k not in attrs]
    if missing:
        raise Fail('%s has no attribute %s: not a tidal weights or checkpoint file '
                   '(doc/checkpoint.md)' % (path, ', '.join(missing)))
    cfg = {k: int(attrs[k]) for k in required}
    cfg['input_size'] = int(attrs.get('input_size', 32))
    cfg['mlp_ratio'] = float(attrs.get('mlp_ratio', 4.0))
    cfg['class_dropout_prob'] = float(attrs.get('class_dropout_prob', 0.1))
    cfg['learn_sigma'] = bool(int(attrs.get('learn_sigma', 0)))
    cfg['t_scale'] = float(attrs.get('t_scale', 1000.0))
    cfg['objective'] = str(attrs.get('objective', 'rf'))  # ddpm: the output's first C are noise
    if min(cfg[k] for k in required) < 1 or cfg['hidden_size'] % cfg['num_heads'] or \
            cfg['input_size'] % cfg['patch_size']:
        raise Fail('%s: the configuration does not describe a DiT: %s' % (path, cfg))
    return cfg, attrs


def read_group(f, path, group, np):
    """Every dataset of /<group> as float32 numpy arrays, by name."""
    if group not in f or not hasattr(f[group], 'items'):
        have = ', '.join('/' + k for k in f.keys()) or 'nothing'
        raise Fail('%s has no group /%s (it holds %s)' % (path, group, have))
    tensors = {}
    for name, ds in f[group].items():
        if not hasattr(ds, 'dtype'):
            continue  # a subgroup: not a tensor
        if ds.dtype.kind != 'f':
            raise Fail('%s: /%s/%s holds %s data, expected float32' % (path, group, name,
                                                                       ds.dtype))
        try:
            tensors[name] = np.asarray(ds[...], dtype=np.float32)
        except OSError as e:
            raise Fail('%s: cannot read /%s/%s: the data fails its Fletcher32 checksum or the '
                       'file is damaged (h5py: %s)' % (path, group, name, e))
    if not tensors:
        raise Fail('%s: /%s holds no tensors' % (path, group))
    return tensors


def build_model(ref, cfg, torch):
    ref.T_SCALE = cfg['t_scale']  # the reference embeds t * T_SCALE
    model = ref.DiT(input_size=cfg['input_size'], patch_size=cfg['patch_size'],
                    in_channels=cfg['in_channels'], hidden_size=cfg['hidden_size'],
                    depth=cfg['depth'], num_heads=cfg['num_heads'], mlp_ratio=cfg['mlp_ratio'],
                    class_dropout_prob=cfg['class_dropout_prob'],
                    num_classes=cfg['num_classes'], learn_sigma=cfg['learn_sigma'])
    return model.eval()


def forward(model, cfg, batch, seed, torch):
    """One forward pass on a seeded input: x ~ N(0, 1), t evenly in (0, 1), labels 0, 1, ..."""
    g = torch.Generator().manual_seed(seed)
    s, c = cfg['input_size'], cfg['in_channels']
    x = torch.randn((batch, c, s, s), generator=g, dtype=torch.float32)
    t = (torch.arange(batch, dtype=torch.float32) + 0.5) / batch
    y = torch.arange(batch, dtype=torch.int64) % cfg['num_classes']
    with torch.no_grad():
        return model(x, t, y)


def main(argv):
    ap = argparse.ArgumentParser(
        prog=PROG, description='Load a tidal weights or checkpoint file into the reference '
        'PyTorch DiT and run one forward pass.')
    ap.add_argument('file', metavar='FILE', help='weights or checkpoint file (HDF5)')
    ap.add_argument('--group', choices=('model', 'ema'), default='model',
                    help='which weights: the parameters (model, default) or their EMA')
    ap.add_argument('--out', metavar='PT', help='save the state_dict here with torch.save')
    ap.add_argument('--pos-embed', action='store_true',
                    help='--out adds pos_embed [1, T, D], the frozen sin-cos embedding of the '
                    'input_size grid, as facebookresearch/DiT\'s models.py keeps it in its '
                    'state_dict (its load_state_dict(strict=True) needs it)')
    ap.add_argument('--check', action='store_true',
                    help='also check: every tensor loaded bit for bit, output finite and '
                    'deterministic (exit 1 otherwise)')
    ap.add_argument('--batch', type=int, default=2, help='images in the forward pass (2)')
    ap.add_argument('--seed', type=int, default=0, help='seed of the input (0)')
    ap.add_argument('--reference', metavar='PY',
                    help='path of %s (default: found beside tidal\'s tests)' % REFERENCE)
    args = ap.parse_args(argv)
    if args.batch < 1:
        ap.error('--batch must be at least 1')

    try:
        import h5py
        import numpy as np
        import torch
    except ImportError as e:
        raise Fail('needs torch, h5py and numpy (%s); Debian\'s /usr/bin/python3 has them' % e)
    ref = load_reference(args.reference)

    path = args.file
    if not os.path.exists(path):
        raise Fail('cannot read the checkpoint %s: no such file' % path)
    try:
        f = h5py.File(path, 'r')
    except OSError as e:
        raise Fail('cannot read the checkpoint %s: not an HDF5 file, or truncated or damaged '
                   '(h5py: %s)' % (path, e))
    with f:
        cfg, attrs = read_config(f, path)
        tensors = read_group(f, path, args.group, np)
    model = build_model(ref, cfg, torch)
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as e:
        raise Fail('%s: /%s does not fit the reference DiT of its configuration: %s' %
                   (path, args.group, ' '.join(str(e).split())))
    nparams = sum(v.size for v in tensors.values())
    print('%s: %s, step %s: hidden_size %d, depth %d, num_heads %d, patch_size %d, '
          'in_channels %d, num_classes %d, input_size %d, learn_sigma %d, objective %s' %
          (path, attrs.get('model', 'DiT'), attrs.get('step', '?'), cfg['hidden_size'],
           cfg['depth'], cfg['num_heads'], cfg['patch_size'], cfg['in_channels'],
           cfg['num_classes'], cfg['input_size'], cfg['learn_sigma'], cfg['objective']))
    print('loaded %d tensors (%d parameters) from /%s into the reference DiT (strict)' %
          (len(tensors), nparams, args.group))

    out = forward(model, cfg, args.batch, args.seed, torch)
    print('forward: x ~ N(0, 1) seed %d, t = (i + 0.5) / %d, labels i mod %d' %
          (args.seed, args.batch, cfg['num_classes']))
    print('output shape: [%s]  mean: %.6g  std: %.6g' %
          (', '.join(str(d) for d in out.shape), out.mean().item(), out.std().item()))

    if args.check:
        problems = []
        if len(model.state_dict()) != len(tensors):
            problems.append('the model has %d tensors, /%s %d' %
                            (len(model.state_dict()), args.group, len(tensors)))
        for k, v in model.state_dict().items():
            if k not in tensors or not np.array_equal(v.numpy(), tensors[k]):
                problems.append('%s differs from /%s/%s' % (k, args.group, k))
        want = (args.batch, cfg['in_channels'] * (2 if cfg['learn_sigma'] else 1),
                cfg['input_size'], cfg['input_size'])
        if tuple(out.shape) != want:
            problems.append('output shape %s, expected %s' % (tuple(out.shape), want))
        if not torch.isfinite(out).all():
            problems.append('the output holds %d values that are not finite' %
                            int((~torch.isfinite(out)).sum()))
        if not torch.equal(out, forward(model, cfg, args.batch, args.seed, torch)):
            problems.append('a second forward pass gives another output')
        if problems:
            raise Fail('%s: check failed: %s' % (path, '; '.join(problems)))
        print('check: ok: %d of %d tensors loaded bit for bit, output finite and deterministic' %
              (len(tensors), len(tensors)))

    if args.out:
        sd = model.state_dict()
        if args.pos_embed:  # first, where models.py's registration puts it
            g = cfg['input_size'] // cfg['patch_size']
            pe = ref.get_2d_sincos_pos_embed(cfg['hidden_size'], g, g)
            sd = dict([('pos_embed', torch.from_numpy(pe).float().unsqueeze(0))] +
                      list(sd.items()))
        try:
            torch.save(sd, args.out)
        except OSError as e:
            raise Fail('cannot write %s: %s' % (args.out, e))
        print('saved the state_dict (%d tensors%s) to %s' %
              (len(sd), ', pos_embed of a %dx%d grid' % (g, g) if args.pos_embed else '',
               args.out))
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main(sys.argv[1:]))
    except Fail as e:
        print('%s: error: %s' % (PROG, e), file=sys.stderr)
        sys.exit(1)
