#!/usr/bin/python3
# -*- coding: utf-8 -*-
"""
train_throughput.py -- the PyTorch side of `bench/run train-throughput`.

Trains the same Diffusion Transformer as `tidal train` (the model classes of
tests/reference/make_dit_reference.py, imported by path: identical parameter
names and shapes) with the same step: rectified flow x_t = (1 - t) x0 +
t * noise, target noise - x0, MSE, backward, gradient-norm clipping,
AdamW (betas 0.9/0.999, eps 1e-8, no weight decay, linear lr warm-up), EMA
update of a copy of the weights, and 10% label dropout to the null class;
float32 throughout. It runs W untimed warm-up steps, then times N steps and
prints the images per second.

    /usr/bin/python3 bench/train_throughput.py --threads 2 --batch 64 \\
        --warmup-steps 5 --steps 40 [--data fmnist|random|FILE.h5] [--expect-params N] \\
        [--device cpu|cuda] [--objective rf|ddpm] [--learn-sigma model|on|off]

The data: --data fmnist (the default when Debian's dataset-fashion-mnist is
installed) holds the training images in memory as uint8, as tidal does, and
makes each batch the way tidal does (pad 28x28 to 32x32 with -1, scale to
[-1, 1]); --data FILE.h5 reads tidal's HDF5 format (doc/data.md: uint8 /images
[N, H, W] or [N, C, H, W] at the model's resolution, /labels) and scales it the
same way, or a latent set (float32 /latents [N, C, H, W], used as stored, as
tidal does; `bench/run latent-train`); --data random draws the batch from N(0, 1). Data loading is not what
the benchmark compares; both are a small part of a step.

--device cuda (`bench/run gpu-train`): model, optimizer state, EMA and the data
set live on the GPU (torch.cuda.current_device(), CUDA_VISIBLE_DEVICES
respected), float32 with TF32 off for matrix products and convolutions, and
torch.cuda.synchronize() before every clock reading. Each step reads the loss
and checks the gradient norm on the host, as on the CPU, so every step ends
synchronized on both sides.

--objective rf|ddpm and --learn-sigma model|on|off as `tidal train`'s: rf (the
default) is the rectified-flow MSE (on the first C channels with learn_sigma);
ddpm the reference's Gaussian diffusion (1000 linear-beta steps, k uniform,
embedded as k / 1000; the noise's MSE plus, with learn_sigma, the variational
bound of the LEARNED_RANGE variance with the noise half frozen), written from
the formulas tests/cli/test_ddpm_torch.sh holds tidal's to, in float32.
--learn-sigma model: on for DiT-S/2 ... DiT-XL/8, off for tiny and fmnist.

--expect-params N: exit with status 3 unless the model has N parameters (the
count `tidal train` prints for the same configuration).

The other mode measures the peak resident set size of a command, the same way
for both sides (getrusage(RUSAGE_CHILDREN).ru_maxrss of the waited-for child,
which a libtool wrapper script exec's into):

    /usr/bin/python3 bench/train_throughput.py measure -- COMMAND [ARGS...]

It passes COMMAND's exit status through and ends with a line
`train_throughput: peak_rss_kib N` on stderr.

Use Debian's /usr/bin/python3 (torch 1.13 CPU), or for --device cuda a python3
whose torch has CUDA; set OMP_NUM_THREADS=T in the environment as well as
--threads T, so that OpenMP starts T threads.
"""

import argparse
import gzip
import importlib.util
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.join(HERE, '..', 'tests', 'reference', 'make_dit_reference.py')
FMNIST_DIR = '/usr/share/datasets/fashion-mnist'

# src/dit/config.c: name -> (input, patch, channels, hidden, depth, heads, classes)
REFERENCE_SIZES = {'S': (384, 12, 6), 'B': (768, 12, 12), 'L': (1024, 24, 16),
                   'XL': (1152, 28, 16)}


def dit_config(name):
    if name == 'tiny':
        return dict(input_size=8, patch_size=2, in_channels=1, hidden_size=32, depth=2,
                    num_heads=4, num_classes=10)
    if name == 'fmnist':
        return dict(input_size=32, patch_size=4, in_channels=1, hidden_size=128, depth=4,
                    num_heads=4, num_classes=10)
    n = name[4:] if name.startswith('DiT-') else name
    size, _, patch = n.partition('/')
    if size not in REFERENCE_SIZES or patch not in ('2', '4', '8'):
        raise SystemExit('train_throughput.py: unknown DiT configuration %r' % name)
    hidden, depth, heads = REFERENCE_SIZES[size]
    return dict(input_size=32, patch_size=int(patch), in_channels=4, hidden_size=hidden,
                depth=depth, num_heads=heads, num_classes=1000)


def measure(argv):
    """Runs argv, returns its exit status; its peak RSS goes to stderr."""
    if argv and argv[0] == '--':
        argv = argv[1:]
    if not argv:
        raise SystemExit('usage: train_throughput.py measure -- COMMAND [ARGS...]')
    try:
        rc = subprocess.call(argv)
    except OSError as e:
        print('train_throughput: cannot run %s: %s' % (argv[0], e), file=sys.stderr)
        return 127
    kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    print('train_throughput: peak_rss_kib %d' % kib, file=sys.stderr, flush=True)
    return rc if rc >= 0 else 128 - rc


def load_reference():
    spec = importlib.util.spec_from_file_location('make_dit_reference', REFERENCE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_fmnist(np):
    """Fashion-MNIST training images [60000, 28, 28] uint8 and labels, from the IDX files."""
    def read(name, offset):
        for path in (os.path.join(FMNIST_DIR, name + '.gz'), os.path.join(FMNIST_DIR, name)):
            if os.path.exists(path):
                opener = gzip.open if path.endswith('.gz') else open
                with opener(path, 'rb') as f:
                    return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
        return None
    images = read('train-images-idx3-ubyte', 16)
    labels = read('train-labels-idx1-ubyte', 8)
    if images is None or labels is None:
        return None, None
    return images.reshape(-1, 28, 28), labels.astype(np.int64)


def load_h5(path, res):
    """tidal's HDF5 data format: /images uint8 [N, H, W] or [N, C, H, W], or /latents float32
    [N, C, H, W] (read first where both are), and /labels [N]."""
    import h5py
    import numpy as np
    with h5py.File(path, 'r') as f:
        if 'latents' in f:
            images = np.asarray(f['latents'], dtype=np.float32)
        else:
            images = np.asarray(f['images'], dtype=np.uint8)
        labels = np.asarray(f['labels']).astype(np.int64)
    if images.ndim == 3:
        images = images[:, None]
    if images.ndim != 4 or images.shape[2] != res or images.shape[3] != res:
        raise SystemExit('train_throughput.py: %s: images %s are not [N, C, %d, %d]'
                         % (path, images.shape, res, res))
    return images, labels


class GaussianDiffusion:
    """The reference's Gaussian diffusion for training (create_diffusion(""): 1000 linear-beta
    steps, LossType.MSE, LEARNED_RANGE variance with learn_sigma), from the formulas of
    tests/cli/test_ddpm_torch.sh, its tables float64 as computed and float32 as used."""

    def __init__(self, torch, np, learn_sigma, dev, T=1000):
        b = np.linspace(0.0001, 0.02, T, dtype=np.float64)
        ab = np.cumprod(1.0 - b)
        b = 1.0 - ab / np.append(1.0, ab[:-1])   # recomputed from alphas_cumprod, as respaced
        abp = np.append(1.0, ab[:-1])
        post_var = b * (1.0 - abp) / (1.0 - ab)
        tabs = dict(sqrt_ab=np.sqrt(ab), sqrt_1mab=np.sqrt(1.0 - ab), sra=np.sqrt(1.0 / ab),
                    srm1=np.sqrt(1.0 / ab - 1), c1=b * np.sqrt(abp) / (1.0 - ab),
                    c2=(1.0 - abp) * np.sqrt(1.0 - b) / (1.0 - ab), log_b=np.log(b),
                    plvc=np.log(np.append(post_var[1], post_var[1:])))
        self.torch, self.learn_sigma = torch, learn_sigma
        self.tab = {k: torch.tensor(v, dtype=torch.float32, device=dev) for k, v in tabs.items()}

    def ex(self, name, k):
        return self.tab[name].index_select(0, k).view(-1, 1, 1, 1)

    def q_sample(self, x0, noise, k):
        return self.ex('sqrt_ab', k) * x0 + self.ex('sqrt_1mab', k) * noise

    def loss(self, x0, xt, noise, k, out):
        torch, c = self.torch, x0.shape[1]
        eps = out[:, :c]
        mse = ((noise - eps) ** 2).mean(dim=(1, 2, 3))
        if not self.learn_sigma:
            return mse.mean()
        v = out[:, c:]                          # the noise half frozen: the bound trains v only
        min_log, max_log = self.ex('plvc', k), self.ex('log_b', k)
        frac = (v + 1) / 2
        logvar = frac * max_log + (1 - frac) * min_log
        pred_x0 = self.ex('sra', k) * xt - self.ex('srm1', k) * eps.detach()
        mean = self.ex('c1', k) * pred_x0 + self.ex('c2', k) * xt
        true_mean = self.ex('c1', k) * x0 + self.ex('c2', k) * xt
        true_logvar = min_log
        kl = 0.5 * (-1.0 + logvar - true_logvar + torch.exp(true_logvar - logvar) +
                    (true_mean - mean) ** 2 * torch.exp(-logvar))
        kl = kl.mean(dim=(1, 2, 3)) / math.log(2.0)
        nll = -self.disc_log_likelihood(x0, mean, 0.5 * logvar).mean(dim=(1, 2, 3)) / \
            math.log(2.0)
        return (mse + torch.where(k == 0, nll, kl)).mean()

    def disc_log_likelihood(self, x, means, log_scales):
        torch = self.torch

        def cdf(z):
            return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (z + 0.044715 * z ** 3)))
        centered, inv = x - means, torch.exp(-log_scales)
        cdf_plus = cdf(inv * (centered + 1.0 / 255.0))
        cdf_min = cdf(inv * (centered - 1.0 / 255.0))
        log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
        log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
        log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
        return torch.where(x < -0.999, log_cdf_plus,
                           torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))


def train(args):
    import numpy as np
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if args.device == 'cuda':
        if not torch.cuda.is_available():
            print('train_throughput: --device cuda, but torch %s sees no GPU' % torch.__version__,
                  file=sys.stderr)
            sys.exit(4)
        # fp32 as tidal computes it: no TF32 in matrix products or convolutions
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision('highest')
    dev = torch.device(args.device)

    def sync():
        if dev.type == 'cuda':
            torch.cuda.synchronize()

    torch.set_num_threads(args.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    torch.manual_seed(args.seed)

    ref = load_reference()
    cfg = dit_config(args.model)

    class BenchDiT(ref.DiT):
        """The reference DiT with its position embedding computed once per grid (tidal keeps
        it too), not in numpy on every forward."""

        def pos_embed(self, grid_h, grid_w, dtype):
            key = (grid_h, grid_w, dtype)
            if getattr(self, '_pe_key', None) != key:
                self._pe = ref.DiT.pos_embed(self, grid_h, grid_w, dtype)
                self._pe_key = key
            return self._pe

    sigma = args.learn_sigma == 'on' or (args.learn_sigma == 'model' and
                                          args.model not in ('tiny', 'fmnist'))
    model = BenchDiT(input_size=cfg['input_size'], patch_size=cfg['patch_size'],
                     in_channels=cfg['in_channels'], hidden_size=cfg['hidden_size'],
                     depth=cfg['depth'], num_heads=cfg['num_heads'], mlp_ratio=4.0,
                     class_dropout_prob=0.1, num_classes=cfg['num_classes'], learn_sigma=sigma)
    got = [(k, tuple(v.shape)) for k, v in model.state_dict().items()]
    assert got == ref.expected_state_dict_shapes(dict(cfg, mlp_ratio=4.0, learn_sigma=sigma)), \
        'state_dict differs from the reference DiT'
    nparams = sum(p.numel() for p in model.parameters())
    if args.expect_params is not None and nparams != args.expect_params:
        print('train_throughput: MISMATCH: the PyTorch %s has %d parameters, tidal %d'
              % (args.model, nparams, args.expect_params), file=sys.stderr)
        sys.exit(3)

    # DiT's initialize_weights (as dit_model_init_weights): Xavier-uniform linears with zero
    # biases, the patch projection as a [D, C*p*p] matrix, normal(0.02) label table and timestep
    # MLP, zero adaLN modulations and output layer.
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, nn.Linear):
                nn.init.xavier_uniform_(mod.weight)
                nn.init.zeros_(mod.bias)
        w = model.x_embedder.proj.weight
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(model.x_embedder.proj.bias)
        nn.init.normal_(model.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(model.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(model.t_embedder.mlp[2].weight, std=0.02)
        for blk in model.blocks:
            nn.init.zeros_(blk.adaLN_modulation[-1].weight)
            nn.init.zeros_(blk.adaLN_modulation[-1].bias)
        for lin in (model.final_layer.adaLN_modulation[-1], model.final_layer.linear):
            nn.init.zeros_(lin.weight)
            nn.init.zeros_(lin.bias)
    model.to(dev)
    model.train()
    params = list(model.parameters())
    ema = [p.detach().clone() for p in params]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)

    res, C, B = cfg['input_size'], cfg['in_channels'], args.batch
    images = labels = None
    data = args.data
    if data == 'auto':
        data = 'fmnist' if args.model == 'fmnist' else 'random'
    if data not in ('fmnist', 'random'):
        images, labels = load_h5(data, res)
        if images.shape[1] != C or labels.shape[0] != images.shape[0]:
            raise SystemExit('train_throughput.py: %s: %d channels and %d labels for %d images; '
                             'the model takes %d channels' % (data, images.shape[1],
                                                              labels.shape[0], images.shape[0], C))
        images = torch.from_numpy(images).to(dev)  # [n, C, res, res] uint8
        labels = torch.from_numpy(labels).to(dev)
    elif data == 'fmnist':
        if args.model != 'fmnist':
            raise SystemExit('train_throughput.py: --data fmnist needs --model fmnist')
        images, labels = load_fmnist(np)
        if images is None:
            print('train_throughput: no Fashion-MNIST in %s: random data' % FMNIST_DIR,
                  file=sys.stderr)
            data = 'random'
        else:
            images = torch.from_numpy(images.copy()).to(dev)  # [n, 28, 28] uint8, as tidal
            labels = torch.from_numpy(labels).to(dev)
    order, pos = None, 0

    def next_batch():
        nonlocal order, pos
        if images is None:
            return (torch.randn(B, C, res, res, device=dev),
                    torch.randint(0, cfg['num_classes'], (B,), device=dev))
        idx, have = [], 0
        while have < B:                      # epoch shuffles, as tidal's sampler
            if order is None or pos == len(order):
                order, pos = torch.randperm(images.shape[0], device=dev), 0
            take = min(B - have, len(order) - pos)
            idx.append(order[pos:pos + take])
            pos += take
            have += take
        idx = torch.cat(idx)
        x = images.index_select(0, idx)
        if x.dtype != torch.float32:         # images; latents are used as stored
            x = x.float().div_(127.5).sub_(1.0)
        if x.dim() == 3:                     # Fashion-MNIST: pad 28x28 to res x res with -1
            pad = (res - 28) // 2
            x = F.pad(x.unsqueeze(1), (pad, pad, pad, pad), value=-1.0)
        return x, labels.index_select(0, idx)

    decay = args.ema
    gauss = GaussianDiffusion(torch, np, sigma, dev) if args.objective == 'ddpm' else None

    def step(k):
        lr = args.lr if args.warmup == 0 or k >= args.warmup else \
            args.lr * (k + 1) / args.warmup
        for g in opt.param_groups:
            g['lr'] = lr
        x0, y = next_batch()
        drop = torch.rand(B, device=dev) < 0.1
        y = torch.where(drop, torch.full_like(y, cfg['num_classes']), y)
        noise = torch.randn_like(x0)
        opt.zero_grad(set_to_none=True)
        if gauss is not None:
            k = (torch.rand(B, device=dev) * 1000).long().clamp_(max=999)
            x_t = gauss.q_sample(x0, noise, k)
            loss = gauss.loss(x0, x_t, noise, k, model(x_t, k.float() / 1000, y))
        else:
            t = torch.rand(B, device=dev)
            tb = t.view(-1, 1, 1, 1)
            x_t = (1 - tb) * x0 + tb * noise
            out = model(x_t, t, y)
            loss = F.mse_loss(out[:, :C] if sigma else out, noise - x0)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, args.clip)
        if torch.isfinite(norm):
            opt.step()
            with torch.no_grad():
                torch._foreach_mul_(ema, decay)
                torch._foreach_add_(ema, [p.detach() for p in params], alpha=1.0 - decay)
        return loss.item()

    where = 'cpu'
    if dev.type == 'cuda':
        where = 'cuda:%d %s' % (torch.cuda.current_device(), torch.cuda.get_device_name())
    print('pytorch: %s (%d parameters, objective %s, learn_sigma %s), %s data, torch %s on %s, '
          '%d thread%s, batch %d, %d warm-up + %d timed steps'
          % (args.model, nparams, args.objective, 'on' if sigma else 'off', data,
             torch.__version__, where, torch.get_num_threads(),
             '' if torch.get_num_threads() == 1 else 's', B, args.warmup_steps, args.steps),
          flush=True)
    # Steps are numbered over the whole run, warm-up included, as tidal numbers them; a progress
    # line every --log-every steps gives the rate since the previous line.
    total, W = args.warmup_steps + args.steps, args.warmup_steps
    prof = None
    t_last, ema_loss, t0 = time.perf_counter(), None, None
    for k in range(total):
        if k == W:
            if args.profile:
                prof = (torch.autograd.profiler.profile(use_device='cuda')
                        if dev.type == 'cuda' else torch.autograd.profiler.profile())
                prof.__enter__()
            sync()
            t0 = time.perf_counter()
        loss = step(k)
        ema_loss = loss if ema_loss is None else 0.95 * ema_loss + 0.05 * loss
        if args.log_every and ((k + 1) % args.log_every == 0 or k + 1 == total):
            sync()
            now = time.perf_counter()
            n = (k + 1) % args.log_every or args.log_every
            print('step %6d/%d  loss %.4f (avg %.4f)  %.2f img/s'
                  % (k + 1, total, loss, ema_loss, n * B / (now - t_last)), flush=True)
            t_last = now
    sync()
    secs = time.perf_counter() - t0
    if prof is not None:
        prof.__exit__(None, None, None)
        print(prof.key_averages().table(sort_by='self_cpu_time_total', row_limit=20),
              file=sys.stderr)
    ips = args.steps * B / secs if secs > 0 else 0.0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print('pytorch: %d steps in %.3f s, %.2f images/s, final loss %.4f, peak RSS %.1f MiB'
          % (args.steps, secs, ips, ema_loss if ema_loss is not None else float('nan'),
             rss / 1024.0), flush=True)
    if dev.type == 'cuda':
        print('pytorch: peak GPU memory %.1f MiB (torch.cuda.max_memory_allocated)'
              % (torch.cuda.max_memory_allocated() / 1048576.0), flush=True)
    print('images_per_s: %.3f' % ips)
    print('parameters: %d' % nparams)
    return 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == 'measure':
        return measure(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--model', default='fmnist', help='DiT configuration (tidal train --model)')
    ap.add_argument('--data', default='auto',
                    help='auto, fmnist, random or FILE.h5 (tidal\'s HDF5 format); auto: '
                         'Fashion-MNIST for --model fmnist when installed, else random')
    ap.add_argument('--objective', default='rf', choices=('rf', 'ddpm'),
                    help="tidal train --objective: rf (rectified flow) or ddpm (the reference's "
                         "Gaussian diffusion)")
    ap.add_argument('--learn-sigma', default='model', choices=('model', 'on', 'off'),
                    help="tidal train --learn-sigma: model (on for the reference's sizes), on, off")
    ap.add_argument('--device', default='cpu', choices=('cpu', 'cuda'),
                    help='where the model, optimizer and data live (cuda: fp32, TF32 off)')
    ap.add_argument('--threads', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--batch', type=int, default=64)
    ap.add_argument('--steps', type=int, default=40, help='timed steps')
    ap.add_argument('--warmup-steps', type=int, default=5, help='untimed steps first')
    ap.add_argument('--lr', type=float, default=1e-3)
    ap.add_argument('--warmup', type=int, default=100, help='linear lr warm-up steps')
    ap.add_argument('--clip', type=float, default=1.0)
    ap.add_argument('--ema', type=float, default=0.999)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--log-every', type=int, default=0,
                    help='progress line every N steps (numbered from the first warm-up step)')
    ap.add_argument('--profile', action='store_true',
                    help="the timed steps under torch's profiler: its op table on stderr (the "
                         "profiler slows the steps down)")
    ap.add_argument('--expect-params', type=int, default=None,
                    help="tidal's parameter count for the same --model; exit 3 if different")
    args = ap.parse_args()
    if args.threads < 1 or args.batch < 1 or args.steps < 1 or args.warmup_steps < 0:
        ap.error('--threads, --batch and --steps must be >= 1, --warmup-steps >= 0')
    if args.data not in ('auto', 'fmnist', 'random') and not os.path.isfile(args.data):
        ap.error('--data: %s is not auto, fmnist, random or an HDF5 file' % args.data)
    return train(args)


if __name__ == '__main__':
    sys.exit(main())
