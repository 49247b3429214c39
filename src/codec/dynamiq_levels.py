#!/usr/bin/python3
"""Fits dynamiq's non-uniform quantization levels and writes src/codec/dynamiq_levels.h.

For each width w = 1..8 the table holds 2^w levels in [-1, 1], symmetric, with -1 and 1 at the
ends (so every value of a group divided by its scale lies between two levels and stochastic
rounding between them is unbiased). The interior levels minimize the mean squared error of
stochastic rounding, E[(v - L[k]) (L[k+1] - v)] over the interval [L[k], L[k+1]] holding v,
for the values v a group of 32 holds once divided by its scale: dynamiq's own scale rule (the
super-group maximum rounded up to bf16, then the group's half-octave step above its maximum).

The values come from DiT gradients written by `tidal train --dump-grads DIR` (the .h5 files
under DIR, all tensors flattened in the file's order), sums of 1 to 8 of them so the partial
sums of later hops are represented, and as a fall-back a heavy-tailed synthetic mixture.

    /usr/bin/python3 src/codec/dynamiq_levels.py [--grads DIR] > src/codec/dynamiq_levels.h

Needs numpy (and h5py with --grads). The optimum is found by Gauss-Seidel sweeps: the
stationarity condition of level k, sum over [L[k-1], L[k]] of (v - L[k-1]) = sum over
[L[k], L[k+1]] of (L[k+1] - v), is solved by bisection for each level in turn.
"""
import argparse
import glob
import sys

import numpy as np

GROUP = 32
SUPER = 256
E_MAX = 30  # relative exponents 0..30 in half octaves; 31 marks a zero group


def bf16_round_up(x):
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    up = ((b & 0xFFFF) != 0).astype(np.uint64)
    return (((b >> 16) + up) << 16).astype(np.uint32).view(np.float32)


def normalized_values(x):
    """The values v = x / s_g of every non-zero group, dynamiq's scale rule."""
    n = len(x) // SUPER * SUPER
    sg = x[:n].reshape(-1, SUPER // GROUP, GROUP).astype(np.float32)
    smax = bf16_round_up(np.abs(sg).max(axis=(1, 2)))
    gmax = np.abs(sg).max(axis=2)
    half = (2.0 ** (-np.arange(E_MAX + 1) / 2.0)).astype(np.float32)
    scales = smax[:, None, None] * half[None, None, :]            # [sg, 1, e]
    ok = scales >= gmax[:, :, None]                               # [sg, g, e]
    e = np.where(ok, np.arange(E_MAX + 1), -1).max(axis=2)        # largest e still >= gmax
    s = smax[:, None] * half[np.clip(e, 0, E_MAX)]
    v = sg / np.where(s > 0, s, 1)[:, :, None]
    keep = (gmax > 0)[:, :, None] & np.ones_like(v, dtype=bool)
    return np.clip(v[keep], -1, 1).astype(np.float64)


def load_grads(folder):
    import h5py
    vecs = []
    for path in sorted(glob.glob(folder + "/*.h5")):
        with h5py.File(path, "r") as f:
            parts = []
            f.visititems(lambda name, d: parts.append(np.asarray(d, np.float32).ravel())
                         if isinstance(d, h5py.Dataset) else None)
            vecs.append(np.concatenate(parts))
    return vecs


def synthetic(rng, n):
    # blocks of 4096 with log-normal scales, Student-t (3 dof) inside: heavy tails at two levels
    blocks = n // 4096
    scale = np.exp(rng.normal(0, 1.5, blocks)).repeat(4096)
    return (rng.standard_t(3, blocks * 4096) * scale).astype(np.float32)


def sr_cost(levels, v):
    k = np.clip(np.searchsorted(levels, v, side="right") - 1, 0, len(levels) - 2)
    return np.mean((v - levels[k]) * (levels[k + 1] - v))


def fit(v, w, sweeps, start):
    """Positive half P[0..h-1] (P[h-1] = 1); the full table is -P[::-1] then P. start is the
    positive half of the table one bit narrower: its levels and the midpoints between them
    (and zero) are where the sweeps start, which converges far faster than any fixed guess."""
    if w == 1:
        return np.array([-1.0, 1.0])
    h = 2 ** (w - 1)
    a = np.sort(np.abs(v))            # symmetric: fit on |v|, the zero-crossing interval is
    c = np.concatenate([[0], np.cumsum(a)])  # [-P0, P0]
    n = len(a)

    def s(lo, hi):  # (count, sum) of a in [lo, hi)
        i, j = np.searchsorted(a, lo), np.searchsorted(a, hi)
        return j - i, c[j] - c[i]

    prev = np.concatenate([[0.0], start])
    p = np.empty(h)
    p[1::2] = start
    p[0::2] = 0.5 * (prev[:-1] + prev[1:])
    for _ in range(sweeps):
        old = p.copy()
        for k in range(h - 1):
            lo = -p[0] if k == 0 else p[k - 1]
            hi = p[k + 1]

            def g(x):
                # derivative of the cost in level x: values below it pull it up, values above
                # pull it down. For k = 0 the interval below is [-x, x] (cost x^2 - v^2 per
                # value, derivative 2x); otherwise [lo, x] (cost (v - lo)(x - v), derivative
                # v - lo).
                if k == 0:
                    cnt, sm = s(0, x)
                    left = 2 * cnt * x
                else:
                    cnt, sm = s(lo, x)
                    left = sm - cnt * lo
                cnt2, sm2 = s(x, hi)
                right = cnt2 * hi - sm2
                return left - right

            x0, x1 = (0.0 if k == 0 else lo), hi
            for _ in range(40):
                m = 0.5 * (x0 + x1)
                if g(m) < 0:
                    x0 = m
                else:
                    x1 = m
            p[k] = 0.5 * (x0 + x1)
        if np.max(np.abs(p - old)) < 1e-7:
            break
    return np.concatenate([-p[::-1], p])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--grads", help="folder of tidal train --dump-grads files")
    ap.add_argument("--samples", type=int, default=4_000_000)
    ap.add_argument("--sweeps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    sources = []
    if args.grads:
        vecs = load_grads(args.grads)
        if not vecs:
            sys.exit("dynamiq_levels.py: no .h5 files in %s" % args.grads)
        for k in range(1, min(8, len(vecs)) + 1):  # partial sums of 1..8 contributions
            idx = rng.choice(len(vecs), k, replace=False)
            sources.append(sum(vecs[i] for i in idx))
        what = "%d gradient dumps in %s, sums of 1 to %d" % (len(vecs), args.grads,
                                                                min(8, len(vecs)))
    else:
        what = "synthetic heavy-tailed vectors"
    sources.append(synthetic(rng, 2_000_000))
    v = np.concatenate([normalized_values(x) for x in sources])
    if len(v) > args.samples:
        v = rng.choice(v, args.samples, replace=False)
    v = np.concatenate([v, -v])  # the sign is irrelevant: fit the symmetric distribution

    out = sys.stdout
    out.write("/* Generated by src/codec/dynamiq_levels.py: do not edit. Fit on %s\n"
              " * (%d normalized values). Levels minimize the stochastic-rounding MSE; the\n"
              " * comment of each width compares it with uniform levels on the same values. */\n"
              % (what, len(v)))
    out.write("#ifndef TIDAL_DYNAMIQ_LEVELS_H\n#define TIDAL_DYNAMIQ_LEVELS_H\n\n")
    out.write("#define DQ_MAX_WIDTH 8\n\n")
    out.write("/* dq_levels[w][k]: level k of width w (k < 2^w); dq_inv_gap[w][k] = "
              "1 / (level k+1 - level k) */\n")
    lv, ig = [], []
    half = np.array([1.0])
    for w in range(1, 9):
        L = fit(v, w, args.sweeps, half)
        U = np.linspace(-1, 1, 2 ** w)
        if sr_cost(L, v) > sr_cost(U, v):  # never worse than uniform levels
            L = U
        half = L[2 ** (w - 1):]
        L = L.astype(np.float32)
        sys.stderr.write("width %d: SR mse %.3e (uniform %.3e)\n"
                         % (w, sr_cost(L.astype(np.float64), v), sr_cost(U, v)))
        lv.append((w, L, sr_cost(L.astype(np.float64), v), sr_cost(U, v)))
        ig.append((np.float32(1) / (L[1:] - L[:-1])).astype(np.float32))
    out.write("static const float dq_levels[DQ_MAX_WIDTH + 1][256] = {\n    {0},\n")
    for (w, L, c, cu) in lv:
        out.write("    /* width %d: SR mse %.3e, uniform levels %.3e */\n    {" % (w, c, cu))
        out.write(", ".join(float(x).hex() + "f" for x in L))
        out.write("},\n")
    out.write("};\n\nstatic const float dq_inv_gap[DQ_MAX_WIDTH + 1][256] = {\n    {0},\n")
    for g in ig:
        out.write("    {" + ", ".join(float(x).hex() + "f" for x in g) + "},\n")
    out.write("};\n\n#endif /* TIDAL_DYNAMIQ_LEVELS_H */\n")


if __name__ == "__main__":
    main()
