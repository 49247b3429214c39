#!/bin/sh
# The DiT with learn_sigma and the Gaussian diffusion (src/dit/diffusion.c) against PyTorch. The
# model is tests/reference/make_dit_reference.py's re-implementation of the reference DiT with
# learn_sigma (2C output channels); the diffusion is written below from the reference's published
# formulas (facebookresearch/DiT diffusion/: linear betas, space_timesteps and SpacedDiffusion,
# LEARNED_RANGE and FIXED_LARGE variances, normal_kl and the discretized Gaussian decoder NLL in
# bits, the MSE loss with the bound of the frozen-mean output, p_sample and ddim_sample with
# clip_denoised=False, forward_with_cfg), in float64, the gradient by autograd. Checked, each
# within its bound relative to the reference's largest magnitude: the forward of the training
# model and of an inference model (sp.c) on 1- and 4-channel inputs (1e-4); the loss, its two
# terms and d loss / d out at steps 0 (decoder NLL), 1, 500, 999, learned and fixed variance
# (1e-4); one DDPM and one DDIM step of the process respaced to 250, at respaced steps 249, 100
# and 0 (1e-4); whole guided samplers of 10 respaced steps from the same noise (1e-3).
. "${TIDAL_BUILDDIR:-.}/tests/env.sh"
py=/usr/bin/python3
"$py" -c 'import torch, numpy, h5py' >/dev/null 2>&1 ||
    { echo "1..0 # SKIP $py cannot import torch, numpy and h5py (apt-get install python3-torch python3-h5py)"; exit 0; }
ref="$abs_top_builddir/tests/unit/ddpm_ref"
dir=`mktemp -d`
trap 'rm -rf "$dir"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

cat >"$dir/ref.py" <<'PY'
# usage: ref.py REFDIR CMD C SIGMA DIR [args]: gen-* writes inputs, cmp-* compares the C outputs
import math, sys
import numpy as np
import torch

sys.path.insert(0, sys.argv[1])
import make_dit_reference as R

cmd, C, sigma, d = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
args = sys.argv[6:]
torch.set_default_dtype(torch.float64)
torch.set_num_threads(1)
CO = 2 * C if sigma else C


def f32(a):
    return np.ascontiguousarray(np.asarray(a, dtype=np.float32))


def save(name, a):
    open(f"{d}/{name}", "wb").write(np.ascontiguousarray(a).tobytes())


def load(name, dtype=np.float32, shape=None):
    a = np.fromfile(f"{d}/{name}", dtype=dtype)
    return a.reshape(shape) if shape else a


def rel(got, want, what):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        print(f"{what}: shape {got.shape}, the reference's {want.shape}")
        return float("inf")
    r = np.abs(got - want).max() / max(np.abs(want).max(), 1e-300)
    return r


def report(pairs, bound):
    worst = max(r for _, r in pairs)
    print(", ".join(f"{w} {r:.2g}" for w, r in pairs) + f" (bound {bound:g})")
    sys.exit(0 if worst < bound else 1)


# ---- the reference's Gaussian diffusion, from its formulas ---------------------------------

def space_timesteps(num, count):
    frac = 1 if count <= 1 else (num - 1) / (count - 1)
    cur, taken = 0.0, []
    for _ in range(count):
        taken.append(round(cur))
        cur += frac
    return set(taken)


class Diffusion:
    def __init__(self, steps, learn_sigma, T=1000):
        scale = 1000 / T
        base = np.linspace(scale * 0.0001, scale * 0.02, T, dtype=np.float64)
        abar = np.cumprod(1.0 - base, axis=0)
        use, last, betas, self.map = space_timesteps(T, steps), 1.0, [], []
        for i, a in enumerate(abar):
            if i in use:
                betas.append(1 - a / last)
                last = a
                self.map.append(i)
        b = np.array(betas, dtype=np.float64)
        self.learn_sigma, self.betas = learn_sigma, b
        ab = np.cumprod(1.0 - b, axis=0)
        abp = np.append(1.0, ab[:-1])
        self.ab, self.abp = ab, abp
        self.sqrt_ab, self.sqrt_1mab = np.sqrt(ab), np.sqrt(1.0 - ab)
        self.sra, self.srm1 = np.sqrt(1.0 / ab), np.sqrt(1.0 / ab - 1)
        self.post_var = b * (1.0 - abp) / (1.0 - ab)
        self.plvc = np.log(np.append(self.post_var[1], self.post_var[1:]))
        self.c1 = b * np.sqrt(abp) / (1.0 - ab)
        self.c2 = (1.0 - abp) * np.sqrt(1.0 - b) / (1.0 - ab)
        self.fixed_large = np.log(np.append(self.post_var[1], b[1:]))

    @staticmethod
    def ex(arr, t, ndim=4):
        return torch.from_numpy(np.asarray(arr)[t]).view(-1, *([1] * (ndim - 1)))

    def split(self, out, c):
        return (out[:, :c], out[:, c:]) if self.learn_sigma else (out, None)

    def p_mean_variance(self, out, x, t):
        c = x.shape[1]
        eps, v = self.split(out, c)
        if self.learn_sigma:
            min_log, max_log = self.ex(self.plvc, t), self.ex(np.log(self.betas), t)
            frac = (v + 1) / 2
            logvar = frac * max_log + (1 - frac) * min_log
        else:
            logvar = self.ex(self.fixed_large, t) * torch.ones_like(x)
        pred_x0 = self.ex(self.sra, t) * x - self.ex(self.srm1, t) * eps  # not clipped
        mean = self.ex(self.c1, t) * pred_x0 + self.ex(self.c2, t) * x
        return mean, logvar, pred_x0

    def loss(self, x0, noise, t, out):
        xt = self.ex(self.sqrt_ab, t) * x0 + self.ex(self.sqrt_1mab, t) * noise
        c = x0.shape[1]
        eps, v = self.split(out, c)
        mse = ((noise - eps) ** 2).mean(dim=(1, 2, 3))
        vb = torch.zeros_like(mse)
        if self.learn_sigma:
            frozen = torch.cat([eps.detach(), v], dim=1)
            mean, logvar, _ = self.p_mean_variance(frozen, xt, t)
            true_mean = self.ex(self.c1, t) * x0 + self.ex(self.c2, t) * xt
            true_logvar = self.ex(self.plvc, t)
            kl = 0.5 * (-1.0 + logvar - true_logvar + torch.exp(true_logvar - logvar) +
                        (true_mean - mean) ** 2 * torch.exp(-logvar))
            kl = kl.mean(dim=(1, 2, 3)) / np.log(2.0)
            nll = -disc_log_likelihood(x0, mean, 0.5 * logvar).mean(dim=(1, 2, 3)) / np.log(2.0)
            vb = torch.where(torch.from_numpy(np.asarray(t)) == 0, nll, kl)
        return (mse + vb).mean(), mse.mean(), vb.mean(), xt

    def step(self, kind, k, x, out, z):
        t = np.full(x.shape[0], k)
        mean, logvar, pred_x0 = self.p_mean_variance(out, x, t)
        if kind == "ddim":  # eta 0
            eps = (self.ex(self.sra, t) * x - pred_x0) / self.ex(self.srm1, t)
            return pred_x0 * math.sqrt(self.abp[k]) + math.sqrt(1 - self.abp[k]) * eps
        return mean if k == 0 else mean + torch.exp(0.5 * logvar) * z  # no noise at step 0


def cdf(x):
    return 0.5 * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * torch.pow(x, 3))))


def disc_log_likelihood(x, means, log_scales):
    centered, inv = x - means, torch.exp(-log_scales)
    cdf_plus, cdf_min = cdf(inv * (centered + 1.0 / 255.0)), cdf(inv * (centered - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus,
                       torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))


# ---- the model --------------------------------------------------------------------------------

def model():
    torch.manual_seed(25 + C)
    m = R.DiT(input_size=8, patch_size=2, in_channels=C, hidden_size=32, depth=2, num_heads=4,
              mlp_ratio=4.0, class_dropout_prob=0.1, num_classes=10, learn_sigma=bool(sigma))
    with torch.no_grad():
        for p in m.parameters():  # every tensor random (no zeroed layers), in float32's values
            p.copy_(torch.from_numpy(f32(0.05 * torch.randn(p.shape).numpy())).double())
    return m.eval()


def write_weights(m):
    sd = m.state_dict()
    rows = [line.split() for line in open(f"{d}/names.txt")]
    names = [r[0] for r in rows]
    bad = [r[0] for r in rows if r[0] not in sd or list(sd[r[0]].shape) != [int(x) for x in r[1:]]]
    if bad or sorted(names) != sorted(sd):
        print(f"names: the C tensors are not the state_dict's: {bad or sorted(set(sd) ^ set(names))}")
        sys.exit(1)
    save("weights.bin", np.concatenate([f32(sd[n].numpy()).ravel() for n in names]))
    print(f"all {len(names)} tensors, names and shapes")


def forward_with_cfg(m, x, t, y, cfg):
    """The reference's forward_with_cfg: guidance on model_out[:, :3], the rest as it comes."""
    half = x[: len(x) // 2]
    combined = torch.cat([half, half], dim=0)
    out = m(combined, t, y)
    eps, rest = out[:, :3], out[:, 3:]
    cond_eps, uncond_eps = torch.split(eps, len(eps) // 2, dim=0)
    half_eps = uncond_eps + cfg * (cond_eps - uncond_eps)
    eps = torch.cat([half_eps, half_eps], dim=0)
    return torch.cat([eps, rest], dim=1)


rng = np.random.RandomState(7 + C)
if cmd == "gen-forward":
    n, h, w = map(int, args)
    write_weights(model())
    save("x.bin", f32(rng.randn(n, C, h, w)))
    save("t.bin", f32(np.array([0, 1, 250, 999, 500, 42][:n]) / np.float32(1000)))
    save("y.bin", np.array([3, 10, 7, 0, 10, 5][:n], dtype=np.int32))
elif cmd == "cmp-forward":
    n, h, w = map(int, args)
    m = model()
    x = torch.from_numpy(load("x.bin", shape=(n, C, h, w)).astype(np.float64))
    t = torch.from_numpy(load("t.bin").astype(np.float64))
    y = torch.from_numpy(load("y.bin", np.int32).astype(np.int64))
    with torch.no_grad():
        want = m(x, t, y).numpy()
    report([("training model", rel(load("out.bin", shape=want.shape), want, "out")),
            ("inference model (sp.c)", rel(load("out_sp.bin", shape=want.shape), want, "out_sp"))],
           1e-4)
elif cmd == "gen-loss":
    n, h, w = map(int, args)
    x0 = rng.uniform(-1, 1, (n, C, h, w))
    x0.flat[::7], x0.flat[3::11] = -1.0, 1.0  # the decoder's end bins
    noise = rng.randn(n, C, h, w)
    save("x0.bin", f32(x0)), save("noise.bin", f32(noise))
    save("t.bin", np.array([0, 1, 500, 999, 0, 250][:n], dtype=np.int32))
    out = np.concatenate([noise + 0.3 * rng.randn(n, C, h, w), rng.uniform(-1, 1, (n, C, h, w))],
                         axis=1) if sigma else noise + 0.3 * rng.randn(n, C, h, w)
    save("out.bin", f32(out))
elif cmd == "cmp-loss":
    n, h, w = map(int, args)
    x0 = torch.from_numpy(load("x0.bin", shape=(n, C, h, w)).astype(np.float64))
    noise = torch.from_numpy(load("noise.bin", shape=(n, C, h, w)).astype(np.float64))
    t = load("t.bin", np.int32).astype(np.int64)
    out = torch.from_numpy(load("out.bin", shape=(n, CO, h, w)).astype(np.float64))
    out.requires_grad_(True)
    loss, mse, vb, xt = Diffusion(1000, bool(sigma)).loss(x0, noise, t, out)
    loss.backward()
    got = load("loss.bin", np.float64)
    pairs = [("q_sample", rel(load("x_t.bin", shape=(n, C, h, w)), xt.detach().numpy(), "x_t")),
             ("loss", rel(got[0], loss.item(), "loss")), ("mse", rel(got[1], mse.item(), "mse"))]
    if sigma:
        pairs.append(("vb", rel(got[2], vb.item(), "vb")))
    g, dout = out.grad.numpy(), load("dout.bin", shape=(n, CO, h, w))
    pairs.append(("d/d eps", rel(dout[:, :C], g[:, :C], "dout")))
    if sigma:
        pairs.append(("d/d v", rel(dout[:, C:], g[:, C:], "dout")))
    print(f"loss {loss.item():.6g} (mse {mse.item():.6g}, vb {vb.item():.6g}): ", end="")
    report(pairs, 1e-4)
elif cmd == "gen-step":
    n, h, w = map(int, args[:3])
    save("x.bin", f32(rng.randn(n, C, h, w)))
    save("noise.bin", f32(rng.randn(n, C, h, w)))
    out = np.concatenate([rng.randn(n, C, h, w), rng.uniform(-1, 1, (n, C, h, w))], axis=1) \
        if sigma else rng.randn(n, C, h, w)
    save("out.bin", f32(out))
elif cmd == "cmp-step":
    n, h, w = map(int, args[:3])
    kind, steps, k = args[3], int(args[4]), int(args[5])
    D = Diffusion(steps, bool(sigma))
    x = torch.from_numpy(load("x.bin", shape=(n, C, h, w)).astype(np.float64))
    z = torch.from_numpy(load("noise.bin", shape=(n, C, h, w)).astype(np.float64))
    out = torch.from_numpy(load("out.bin", shape=(n, CO, h, w)).astype(np.float64))
    want = D.step(kind, k, x, out, z).numpy()
    pairs = [("timestep map", 0.0 if list(load("map.bin", np.int32)) == D.map else 1.0),
             ("x_next", rel(load("next.bin", shape=(n, C, h, w)), want, "next"))]
    print(f"map {D.map[:4]}...{D.map[-2:]}: ", end="")
    report(pairs, 1e-4)
elif cmd == "gen-sample":
    write_weights(model())
    save("y.bin", np.array([3, 7], dtype=np.int32))
elif cmd == "cmp-sample":
    n, h, w = map(int, args[:3])
    kind, steps, cfg = args[3], int(args[4]), float(args[5])
    m, D = model(), Diffusion(steps, bool(sigma))
    y = torch.from_numpy(load("y.bin", np.int32).astype(np.int64))
    x = torch.from_numpy(load("noise.bin", shape=(n, C, h, w)).astype(np.float64))
    with torch.no_grad():
        for k in reversed(range(steps)):
            tt = torch.full((2 * n,), float(np.float32(D.map[k]) / np.float32(1000)))
            out = forward_with_cfg(m, torch.cat([x, x]), tt, torch.cat([y, torch.full_like(y, 10)]),
                                   np.float32(cfg))[:n]
            z = torch.from_numpy(load(f"z{k}.bin", shape=(n, C, h, w)).astype(np.float64)) \
                if kind == "ddpm" and k > 0 else None
            x = D.step(kind, k, x, out, z)
    print(f"max |x| {np.abs(x.numpy()).max():.3g}: ", end="")
    report([("sample", rel(load("sample.bin", shape=(n, C, h, w)), x.numpy(), "sample"))], 1e-3)
PY

# pyref CMD C SIGMA SUB ARGS...
pyref() {
    pc=$1 pC=$2 pS=$3 psub=$4; shift 4
    "$py" "$dir/ref.py" "$abs_top_srcdir/tests/reference" "$pc" "$pC" "$pS" "$psub" "$@" 2>&1
}

# forward C N H W
forward() {
    sub="$dir/fwd-$1-$2-$3x$4"
    mkdir -p "$sub"
    tag="forward, learn_sigma, C=$1, $2 x $3x$4"
    "$ref" names "$1" 1 >"$sub/names.txt" 2>"$sub/err"
    out=`pyref gen-forward "$1" 1 "$sub" "$2" "$3" "$4"`; rc=$?
    check "$tag: the C tensors are the reference's state_dict ($out)" [ $rc = 0 ]
    "$ref" forward "$1" 1 "$sub" "$2" "$3" "$4" 2>"$sub/err"; rc=$?
    check "$tag: ddpm_ref forward, exit 0 (rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || sed 's/^/# /' "$sub/err"
    out=`pyref cmp-forward "$1" 1 "$sub" "$2" "$3" "$4"`; rc=$?
    check "$tag: within 1e-4 of PyTorch ($out)" [ $rc = 0 ]
    check "$tag: the inference model's output is the training model's, byte for byte" \
        cmp -s "$sub/out.bin" "$sub/out_sp.bin"
}
forward 1 4 8 8
forward 4 3 8 8
forward 4 2 6 10

# loss C SIGMA N
loss() {
    sub="$dir/loss-$1-$2"
    mkdir -p "$sub"
    tag="loss, C=$1, `[ $2 = 1 ] && echo learned range || echo fixed large` variance"
    pyref gen-loss "$1" "$2" "$sub" "$3" 8 8 >/dev/null
    "$ref" loss "$1" "$2" "$sub" "$3" 8 8 2>"$sub/err"; rc=$?
    check "$tag: ddpm_ref loss, exit 0 (rc=$rc)" [ $rc = 0 ]
    out=`pyref cmp-loss "$1" "$2" "$sub" "$3" 8 8`; rc=$?
    check "$tag, steps 0 1 500 999 ...: loss and gradient within 1e-4 of autograd ($out)" [ $rc = 0 ]
}
loss 1 1 4
loss 4 1 6
loss 4 0 4

# step KIND C SIGMA K
step() {
    sub="$dir/step-$1-$2-$3-$4"
    mkdir -p "$sub"
    tag="$1 step, C=$2, learn_sigma $3, respaced 250, from step $4"
    pyref gen-step "$2" "$3" "$sub" 2 8 8 >/dev/null
    "$ref" step "$2" "$3" "$sub" 2 8 8 "$1" 250 "$4" 2>"$sub/err"; rc=$?
    check "$tag: ddpm_ref step, exit 0 (rc=$rc)" [ $rc = 0 ]
    out=`pyref cmp-step "$2" "$3" "$sub" 2 8 8 "$1" 250 "$4"`; rc=$?
    check "$tag: within 1e-4 of the reference ($out)" [ $rc = 0 ]
}
for k in 249 100 0; do
    step ddpm 4 1 $k
    step ddim 4 1 $k
done
step ddpm 1 0 100

# sample KIND C SIGMA STEPS CFG
sample() {
    sub="$dir/sample-$1-$2-$3-$5"
    mkdir -p "$sub"
    tag="$1 sampler, C=$2, learn_sigma $3, $4 respaced steps, cfg $5, 2 images"
    "$ref" names "$2" "$3" >"$sub/names.txt" 2>"$sub/err"
    pyref gen-sample "$2" "$3" "$sub" >/dev/null
    "$ref" sample "$2" "$3" "$sub" 2 8 8 "$1" "$4" "$5" 11 2>"$sub/err"; rc=$?
    check "$tag: ddpm_ref sample, exit 0 (rc=$rc)" [ $rc = 0 ]
    [ $rc = 0 ] || sed 's/^/# /' "$sub/err"
    out=`pyref cmp-sample "$2" "$3" "$sub" 2 8 8 "$1" "$4" "$5"`; rc=$?
    check "$tag: within 1e-3 of the reference's loop with forward_with_cfg ($out)" [ $rc = 0 ]
}
sample ddpm 4 1 10 4.0
sample ddim 4 1 10 4.0
sample ddpm 1 1 10 1.5
sample ddpm 4 0 10 1.0
done_testing
