#!/usr/bin/env python3
"""bench/vae-decode's PyTorch side: the Stable Diffusion VAE decoder of tests/reference/vae_torch.py
(plain PyTorch, diffusers' names), float32, with random weights shared with tidal.

  vae_decode.py gen NAMES WEIGHTS LATENT   random weights (seed 1) in the order of NAMES (vae_ref
                                           names sd 2 32), as raw float32, and one 4x32x32 latent
  vae_decode.py time NAMES WEIGHTS LATENT REPEATS THREADS
                                           those weights loaded; the median ms of REPEATS decodes
"""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "reference"))
import numpy as np  # noqa: E402
import torch  # noqa: E402
from vae_torch import AutoencoderKL, SCALE, randomize, write_weights, check_names  # noqa: E402

SD = ([128, 256, 512, 512], 2, 32)


def main():
    cmd, names_path, weights, latent = sys.argv[1:5]
    rows = [line.split() for line in open(names_path)]
    model = AutoencoderKL(*SD, encoder=False)
    why = check_names(model, rows)
    if why:
        sys.exit(f"vae_decode.py: the C tensors are not the state_dict's: {why}")
    if cmd == "gen":
        randomize(model, 1)
        write_weights(model, [r[0] for r in rows], weights)
        torch.manual_seed(2)
        open(latent, "wb").write((SCALE * torch.randn(1, 4, 32, 32)).numpy().tobytes())
        return
    reps, threads = int(sys.argv[5]), int(sys.argv[6])
    torch.set_num_threads(threads)
    sd = model.state_dict()
    flat = np.fromfile(weights, dtype=np.float32)
    off = 0
    with torch.no_grad():
        for r in rows:
            t = sd[r[0]]
            t.copy_(torch.from_numpy(flat[off:off + t.numel()].reshape(t.shape)))
            off += t.numel()
    assert off == flat.size, (off, flat.size)
    model.eval()
    z = torch.from_numpy(np.fromfile(latent, dtype=np.float32).reshape(1, 4, 32, 32))
    ms = []
    with torch.inference_mode():
        for _ in range(reps):
            t0 = time.perf_counter()
            out = model.decode(z)
            ms.append(1e3 * (time.perf_counter() - t0))
    assert tuple(out.shape) == (1, 3, 256, 256)
    print(f"decode 32x32 -> 256x256: {statistics.median(ms):.1f} ms (median of {reps}), "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"best: {min(ms):.1f} ms")


if __name__ == "__main__":
    main()
