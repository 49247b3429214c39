#!/usr/bin/python3
"""Which Fashion-MNIST classes a grid of generated samples shows, judged by a classifier that
owes nothing to tidal: k nearest neighbours among the 60,000 training images of Debian's
dataset-fashion-mnist, by the cosine of their pixels less each image's mean (so that a sample a
little brighter or darker than the data is judged by its shape). On the first 2,000 test images
it is right 86% of the time, 62% for shirts, the hardest class (--self-test measures it).

    tools/fmnist_classify.py runs/quickstart/samples.png [--columns 10] [--json]

The grid is the one `tidal run` and `tidal generate --class -1` write: one column per class
(column c shows class c), cells of 32x32 pixels 2 pixels apart; each cell's centre 28x28 is the
image (tidal pads Fashion-MNIST's 28x28 to 32x32). Prints one line per class and a total; --json
prints them as one JSON object. Exit status 2 for bad arguments or an unreadable file."""
import argparse
import gzip
import json
import os
import struct
import sys
import zlib

import numpy as np

DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker",
           "Bag", "Ankle boot"]


def fail(msg):
    print(f"fmnist_classify: {msg}", file=sys.stderr)
    sys.exit(2)


def read_idx(name):
    path = os.path.join(DATA, name)
    try:
        with gzip.open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        fail(f"cannot read {path} ({e}): install dataset-fashion-mnist")
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def read_png(path):
    """An 8-bit, non-interlaced grey, grey+alpha, RGB or RGBA PNG as a float array in [0, 1]
    (grey: the mean of the colour channels)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        fail(f"{path} is not a PNG file")
    pos, idat, hdr = 8, b"", None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
        pos += 12 + length
    if not hdr:
        fail(f"{path}: no IHDR chunk")
    width, height, depth, colour, _, _, interlace = hdr
    chans = {0: 1, 4: 2, 2: 3, 6: 4}.get(colour)
    if depth != 8 or not chans or interlace:
        fail(f"{path}: only 8-bit non-interlaced grey or RGB(A) PNGs are read")
    raw = zlib.decompress(idat)
    stride = width * chans
    out = np.zeros((height, stride), np.int32)
    prev = np.zeros(stride, np.int32)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = np.frombuffer(raw, np.uint8, stride, y * (stride + 1) + 1).astype(np.int32)
        if ftype == 0:
            cur = line
        elif ftype == 2:
            cur = (line + prev) & 255
        elif ftype in (1, 3, 4):
            cur = np.zeros(stride, np.int32)
            for x in range(stride):
                a = cur[x - chans] if x >= chans else 0
                b = prev[x]
                c = prev[x - chans] if x >= chans else 0
                if ftype == 1:
                    pred = a
                elif ftype == 3:
                    pred = (a + b) // 2
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                cur[x] = (line[x] + pred) & 255
        else:
            fail(f"{path}: unknown PNG filter {ftype}")
        out[y] = cur
        prev = cur
    img = out.reshape(height, width, chans).astype(np.float32) / 255.0
    colours = img[:, :, :3] if chans >= 3 else img[:, :, :1]
    return colours.mean(axis=2)


def centred_unit(x):
    x = x.reshape(len(x), 784).astype(np.float32)
    x = x - x.mean(axis=1, keepdims=True)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-6)


class Knn:
    def __init__(self, k):
        self.k = k
        self.x = centred_unit(read_idx("train-images-idx3-ubyte.gz") / 255.0)
        self.y = read_idx("train-labels-idx1-ubyte.gz").astype(np.int64)

    def predict(self, q):
        q = centred_unit(q)
        preds = []
        for start in range(0, len(q), 256):
            sim = q[start:start + 256] @ self.x.T
            near = np.argpartition(-sim, self.k, axis=1)[:, :self.k]
            for row in self.y[near]:
                preds.append(int(np.bincount(row, minlength=10).argmax()))
        return np.array(preds)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("grid", nargs="?", help="PNG grid of samples, one column per class")
    ap.add_argument("--columns", type=int, default=10, help="columns of the grid (default 10)")
    ap.add_argument("--cell", type=int, default=32, help="cell side in pixels (default 32)")
    ap.add_argument("--pad", type=int, default=2, help="pixels between cells (default 2)")
    ap.add_argument("-k", type=int, default=5, help="neighbours (default 5)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--self-test", action="store_true",
                    help="the classifier's accuracy on the first 2000 test images")
    a = ap.parse_args()
    if not a.self_test and not a.grid:
        ap.error("give a PNG grid, or --self-test")
    if a.columns < 1 or a.columns > 10 or a.cell < 28 or a.pad < 0 or a.k < 1:
        ap.error("--columns in [1, 10], --cell >= 28, --pad >= 0, -k >= 1")
    knn = Knn(a.k)
    if a.self_test:
        x = read_idx("t10k-images-idx3-ubyte.gz")[:2000].astype(np.float32) / 255
        y = read_idx("t10k-labels-idx1-ubyte.gz")[:2000]
        acc = float((knn.predict(x) == y).mean())
        print(json.dumps({"test_images": 2000, "accuracy": round(acc, 4)}) if a.json
              else f"accuracy on 2000 Fashion-MNIST test images: {acc:.3f}")
        return
    img = read_png(a.grid)
    step = a.cell + a.pad
    rows = (img.shape[0] + a.pad) // step
    if rows < 1 or (img.shape[1] + a.pad) // step < a.columns:
        fail(f"{a.grid}: {img.shape[1]}x{img.shape[0]} pixels hold no {a.columns} columns of "
             f"{a.cell}-pixel cells")
    off = (a.cell - 28) // 2
    cells, labels = [], []
    for r in range(rows):
        for c in range(a.columns):
            y0, x0 = r * step + off, c * step + off
            cells.append(img[y0:y0 + 28, x0:x0 + 28])
            labels.append(c)
    pred = knn.predict(np.stack(cells))
    labels = np.array(labels)
    per = {}
    for c in range(a.columns):
        sel = labels == c
        per[CLASSES[c]] = {"recognized": int((pred[sel] == c).sum()), "of": int(sel.sum()),
                           "seen_as": [CLASSES[p] for p in pred[sel]]}
    total = int((pred == labels).sum())
    classes_ok = sum(1 for v in per.values() if v["recognized"] * 2 >= v["of"])
    if a.json:
        print(json.dumps({"recognized": total, "of": len(labels),
                          "classes_half_recognized": classes_ok, "classes": per}))
        return
    for name, v in per.items():
        print(f"{name:12s} {v['recognized']}/{v['of']}  seen as: {', '.join(v['seen_as'])}")
    print(f"recognized {total}/{len(labels)} ({100 * total / len(labels):.0f}%); "
          f"{classes_ok}/{a.columns} classes at least half recognized")


if __name__ == "__main__":
    main()
