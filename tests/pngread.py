"""The tests' PNG reader, independent of libpng: chunks and their CRCs, IHDR, IEND, zlib, and the
five row filters undone. The tests compare tidal's images with it, so that a PNG that only
libpng can read, or that libpng writes wrongly, is caught.

    python3 tests/pngread.py check FILE...     every file a whole 8-bit gray or RGB PNG
    python3 tests/pngread.py size FILE         WxHxC
    python3 tests/pngread.py maxdiff A B       the largest difference of two images' bytes
                                               (999 when their sizes differ)
    python3 tests/pngread.py tile GRID N TILE K
                                               TILE's pixels are the K-th cell of GRID, the grid
                                               tidal draws for N images (src/serve: 2 px padding)

A failure prints one line (for the test's description) and exits 1. Other test scripts import
pixels() from here (sys.path)."""
import struct
import sys
import zlib


def pixels(data, name="PNG"):
    """(width, height, channels, rows of bytes) of an 8-bit gray or RGB PNG, every check made."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", name + ": no PNG signature"
    pos, idat, ihdr, end = 8, b"", None, False
    while pos < len(data):
        assert pos + 12 <= len(data), name + ": a cut chunk"
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        crc, = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert zlib.crc32(kind + body) & 0xffffffff == crc, name + ": bad CRC"
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        if kind == b"IDAT":
            idat += body
        if kind == b"IEND":
            end = True
        pos += 12 + n
    assert ihdr and end, name + ": no IHDR or IEND"
    w, h, depth, color, _, _, interlace = ihdr
    assert depth == 8 and interlace == 0 and color in (0, 2), name + ": not 8-bit gray or RGB"
    ch = 1 if color == 0 else 3
    raw, stride, rows, prev = zlib.decompress(idat), w * ch, [], bytearray(w * ch)
    assert len(raw) == h * (1 + stride), name + ": wrong image size"
    for y in range(h):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - ch] if i >= ch else 0
            b, c = prev[i], prev[i - ch] if i >= ch else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                assert f == 0, name + ": bad filter byte"
        rows.append(bytes(line))
        prev = line
    return w, h, ch, rows


def read(path):
    with open(path, "rb") as f:
        return pixels(f.read(), path)


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "check" and len(argv) > 2:
        for path in argv[2:]:
            read(path)
    elif cmd == "size" and len(argv) == 3:
        w, h, ch, _ = read(argv[2])
        print("%dx%dx%d" % (w, h, ch))
    elif cmd == "maxdiff" and len(argv) == 4:
        a, b = b"".join(read(argv[2])[3]), b"".join(read(argv[3])[3])
        print(max((abs(x - y) for x, y in zip(a, b)), default=0) if len(a) == len(b) else 999)
    elif cmd == "tile" and len(argv) == 6:
        gw, gh, gch, grid = read(argv[2])
        n, k = int(argv[3]), int(argv[5])
        w, h, ch, tile = read(argv[4])
        cols = 1
        while cols * cols < n:
            cols += 1
        pad = 2 if n > 1 else 0
        x0, y0 = pad + (k % cols) * (w + pad), pad + (k // cols) * (h + pad)
        assert ch == gch and gw == cols * w + (cols + 1) * pad, "grid and tile do not fit"
        cell = [grid[y0 + y][x0 * ch:(x0 + w) * ch] for y in range(h)]
        assert cell == tile, "tile %d differs from the grid's cell" % k
        assert len(set(b"".join(tile))) > 1, "a blank tile"
        print("same")
    else:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except (AssertionError, OSError, ValueError, zlib.error, struct.error) as e:
        print("%s: %s" % (type(e).__name__, e))
        sys.exit(1)
