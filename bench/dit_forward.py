#!/usr/bin/env python3
"""bench/dit-xl-forward's PyTorch side: the reference DiT of tests/reference/make_dit_reference.py
(learn_sigma, the position embedding computed once per grid as tidal keeps it), float32, with
the weights and inputs bench/dit_forward --dump DIR wrote.

  dit_forward.py time MODEL DIR REPEATS THREADS
      one untimed forward, then the median ms of REPEATS under torch.no_grad(); then the largest
      difference from tidal's output DIR/out.bin, relative to its largest magnitude
"""
import importlib.util
import os
import statistics
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, '..', 'tests', 'reference', 'make_dit_reference.py')
# src/dit/config.c: size -> (hidden, depth, heads), at input 32, 4 channels, 1000 classes
SIZES = {'S': (384, 12, 6), 'B': (768, 12, 12), 'L': (1024, 24, 16), 'XL': (1152, 28, 16)}


def load_reference():
    spec = importlib.util.spec_from_file_location('make_dit_reference', REFERENCE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build(ref, name):
    size, _, patch = (name[4:] if name.startswith('DiT-') else name).partition('/')
    if size not in SIZES or patch not in ('2', '4', '8'):
        sys.exit('dit_forward.py: unknown DiT configuration %r' % name)
    hidden, depth, heads = SIZES[size]

    class BenchDiT(ref.DiT):
        def pos_embed(self, grid_h, grid_w, dtype):
            key = (grid_h, grid_w, dtype)
            if getattr(self, '_pe_key', None) != key:
                self._pe = ref.DiT.pos_embed(self, grid_h, grid_w, dtype)
                self._pe_key = key
            return self._pe

    return BenchDiT(input_size=32, patch_size=int(patch), in_channels=4, hidden_size=hidden,
                    depth=depth, num_heads=heads, mlp_ratio=4.0, class_dropout_prob=0.1,
                    num_classes=1000, learn_sigma=True)


def main():
    if len(sys.argv) != 6 or sys.argv[1] != 'time':
        sys.exit(__doc__)
    name, d, reps, threads = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    torch.set_num_threads(threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    model = build(load_reference(), name)
    model.eval()
    sd = model.state_dict()
    rows = [line.split() for line in open(os.path.join(d, 'names.txt'))]
    names = [r[0] for r in rows]
    bad = [r[0] for r in rows if r[0] not in sd or list(sd[r[0]].shape) != [int(v) for v in r[1:]]]
    if bad or sorted(names) != sorted(sd):
        sys.exit('dit_forward.py: the C tensors are not the state_dict\'s: %s'
                 % (bad or sorted(set(sd) ^ set(names))))
    # read each tensor straight into its storage: no second copy of the weights in memory
    with open(os.path.join(d, 'weights.bin'), 'rb') as f:
        for n in names:
            buf = memoryview(sd[n].numpy()).cast('B')
            if f.readinto(buf) != len(buf):
                sys.exit('dit_forward.py: weights.bin is short at %s' % n)
        if f.read(1):
            sys.exit('dit_forward.py: weights.bin is longer than the model')
    b = np.fromfile(os.path.join(d, 't.bin'), dtype=np.float32).size
    x = torch.from_numpy(np.fromfile(os.path.join(d, 'x.bin'), dtype=np.float32)
                         .reshape(b, 4, 32, 32))
    t = torch.from_numpy(np.fromfile(os.path.join(d, 't.bin'), dtype=np.float32))
    y = torch.from_numpy(np.fromfile(os.path.join(d, 'y.bin'), dtype=np.int32).astype(np.int64))
    ms = []
    with torch.no_grad():
        model(x, t, y)  # warm-up
        for _ in range(reps):
            t0 = time.perf_counter()
            out = model(x, t, y)
            ms.append(1e3 * (time.perf_counter() - t0))
    want = np.fromfile(os.path.join(d, 'out.bin'), dtype=np.float32).reshape(tuple(out.shape))
    got = out.numpy().astype(np.float64)
    rel = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
    print('forward %s, batch %d at 32x32: %.1f ms (median of %d), %d parameters, torch %s, '
          '%d threads' % (name, b, statistics.median(ms), reps,
                          sum(p.numel() for p in model.parameters()), torch.__version__,
                          torch.get_num_threads()))
    print('best: %.1f ms' % min(ms))
    print('max relative difference: %.3g (max |pytorch - tidal| / max |tidal|, max |tidal| %.3g)'
          % (rel, np.abs(want).max()))


if __name__ == '__main__':
    main()
