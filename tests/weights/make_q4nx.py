"""Independent numpy oracle for the weight-file readers (engine/model/safetensors.c,
engine/model/q4nx.c).

Writes OUTDIR/model.q4nx with a safetensors writer written here (json + struct,
nothing from the C code): a random BF16 embedding and norm, and Q4_1 matmul
weights packed into 5,120-byte chunks from random q (0..15), d and m (BF16) by the
layout of docs/model-minicpm5.md §3.9, using the doc's nibble-index form
    k = (r//16)*4096 + bc*512 + i*16 + r%16,  c = 32*bc + i,  byte k//2, even k low
(the C reader uses the byte-index form; both must agree). Then writes what the C
side must read back: OUTDIR/manifest.json and, per tensor, raw little-endian
arrays: <name>.f32 the dequantized float32 matrix (Q4_1: rows x padded cols,
computed in numpy float32 as q*d + m, one rounding each -- the C reader must match
bit for bit), and for Q4_1 also <name>.q (uint8), <name>.d / <name>.m (BF16 bits,
rows x groups).

Usage: make_q4nx.py OUTDIR [CHECKER]   (runs CHECKER OUTDIR and returns its status)
       make_q4nx.py --seeds DIR        (small valid files for the fuzz corpus)
Debian's /usr/bin/python3 with python3-numpy.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np


def to_bf16_bits(a):
    """float32 -> BF16 bits by truncation (any BF16 value will do for test data)."""
    return (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def write_safetensors(path, tensors, order, metadata=None):
    """tensors: {name: (dtype string, shape, bytes)}; data laid out in `order`
    (not name order, as a real writer may do). Header padded with spaces to a
    multiple of 8, like the safetensors library."""
    header, off, blobs = {}, 0, []
    for name in order:
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(blob)]}
        off += len(blob)
        blobs.append(blob)
    if metadata is not None:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-(8 + len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def random_q4_1(rng, rows, cols):
    """Random q, d, m for W[rows, cols]; padding columns get q = 0, and groups
    wholly in the padding d = m = 0. Returns q (rows, padded), d/m bits
    (rows, padded/32)."""
    ncol = -(-cols // 256)
    cp = ncol * 256
    q = rng.integers(0, 16, size=(rows, cp), dtype=np.uint8)
    q[:, cols:] = 0
    d = to_bf16_bits(rng.uniform(1e-3, 0.05, size=(rows, cp // 32)).astype(np.float32))
    m = to_bf16_bits(rng.uniform(-0.4, 0.1, size=(rows, cp // 32)).astype(np.float32))
    used = -(-cols // 32)
    d[:, used:] = 0
    m[:, used:] = 0
    return q, d, m


def pack_chunks(q, d, m):
    """Chunk f = rb*ncol + cb; per chunk 256 d, 256 m (index g*32 + r), 4096 nibble bytes."""
    rows, cp = q.shape
    nrow, ncol = rows // 32, cp // 256
    r = np.arange(32)[:, None]          # chunk-local row
    c = np.arange(256)[None, :]         # chunk-local column
    k = (r // 16) * 4096 + (c // 32) * 512 + (c % 32) * 16 + r % 16   # nibble index
    g = np.arange(8)[:, None]
    gi = (g * 32 + np.arange(32)[None, :])                              # (8, 32): g*32 + r
    out = np.zeros((nrow * ncol, 5120), np.uint8)
    for rb in range(nrow):
        for cb in range(ncol):
            f = rb * ncol + cb
            qt = q[rb * 32:(rb + 1) * 32, cb * 256:(cb + 1) * 256]
            dt = d[rb * 32:(rb + 1) * 32, cb * 8:(cb + 1) * 8]          # (r, g)
            mt = m[rb * 32:(rb + 1) * 32, cb * 8:(cb + 1) * 8]
            ds = np.zeros(256, np.uint16)
            ms = np.zeros(256, np.uint16)
            ds[gi] = dt.T
            ms[gi] = mt.T
            nib = np.zeros(8192, np.uint8)
            nib[k] = qt
            out[f, 0:512] = np.frombuffer(ds.astype("<u2").tobytes(), np.uint8)
            out[f, 512:1024] = np.frombuffer(ms.astype("<u2").tobytes(), np.uint8)
            out[f, 1024:] = nib[0::2] | (nib[1::2] << 4)
    return out


def dequant(q, d, m):
    """float32 q*d + m: numpy rounds the product, then the sum (no FMA)."""
    df = np.repeat(bf16_to_f32(d), 32, axis=1)
    mf = np.repeat(bf16_to_f32(m), 32, axis=1)
    return q.astype(np.float32) * df + mf


def make(outdir, seed, vocab, hidden, q4_shapes):
    rng = np.random.default_rng(seed)
    os.makedirs(outdir, exist_ok=True)
    tensors, manifest = {}, []
    emb = to_bf16_bits(rng.standard_normal((vocab, hidden)).astype(np.float32))
    norm = to_bf16_bits(rng.uniform(0.5, 1.5, size=hidden).astype(np.float32))
    for name, bits in (("model.embed_tokens.weight", emb), ("model.norm.weight", norm)):
        tensors[name] = ("BF16", bits.shape, bits.astype("<u2").tobytes())
        bf16_to_f32(bits).astype("<f4").tofile(os.path.join(outdir, name + ".f32"))
        manifest.append({"name": name, "kind": "bf16", "shape": list(bits.shape)})
    for name, rows, cols in q4_shapes:
        q, d, m = random_q4_1(rng, rows, cols)
        chunks = pack_chunks(q, d, m)
        tensors[name] = ("I8", chunks.shape, chunks.tobytes())
        dequant(q, d, m).astype("<f4").tofile(os.path.join(outdir, name + ".f32"))
        q.tofile(os.path.join(outdir, name + ".q"))
        d.astype("<u2").tofile(os.path.join(outdir, name + ".d"))
        m.astype("<u2").tofile(os.path.join(outdir, name + ".m"))
        manifest.append({"name": name, "kind": "q4_1", "rows": rows, "cols": cols,
                         "padded_cols": q.shape[1], "num_chunks": chunks.shape[0]})
    order = sorted(tensors, reverse=True)   # data order differs from name order
    write_safetensors(os.path.join(outdir, "model.q4nx"), tensors, order,
                      {"format": "pt", "generator": "tests/weights/make_q4nx.py"})
    with open(os.path.join(outdir, "manifest.json"), "w") as f:
        json.dump({"file": "model.q4nx", "tensors": manifest}, f, indent=1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        # Small seeds: one chunk each, so the fuzzer starts from valid Q4NX files.
        make(os.path.join(sys.argv[2], "tmp"), 7, 4, 8, [("w", 32, 40)])
        os.replace(os.path.join(sys.argv[2], "tmp", "model.q4nx"), os.path.join(sys.argv[2], "q4nx-1chunk"))
        import shutil
        shutil.rmtree(os.path.join(sys.argv[2], "tmp"))
        write_safetensors(os.path.join(sys.argv[2], "empty"), {}, [])
        write_safetensors(os.path.join(sys.argv[2], "mixed"), {
            "a": ("F32", (2, 3), bytes(range(24))),
            "b": ("BF16", (3,), bytes(6)),
            "c": ("I64", (0, 4), b""),
            "d": ("U8", (), b"\x07"),
        }, ["b", "a", "c", "d"], {"format": "pt"})
        return 0
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    outdir = sys.argv[1]
    L = "model.layers.0."
    make(outdir, 20261202, vocab=96, hidden=300, q4_shapes=[
        (L + "self_attn.q_proj.weight", 64, 512),     # in a multiple of 256
        (L + "self_attn.k_proj.weight", 32, 300),     # padded: 2 column blocks, 1 partial group
        (L + "self_attn.v_proj.weight", 32, 40),      # in < 256
        (L + "mlp.down_proj.weight", 96, 800),        # 3 row blocks x 4 column blocks
        ("lm_head.weight", 128, 300),
    ])
    if len(sys.argv) == 3:
        return subprocess.call([sys.argv[2], outdir])
    return 0


if __name__ == "__main__":
    sys.exit(main())
