"""Independent float64 oracle for the CPU kernels (engine/kernels/kernels.h).

Generates random Q4_1 weights (q, d, m), packs them into 5,120-byte chunks by
the layout of docs/model-minicpm5.md §3.9 written out here from scratch, and
computes y = W.x in float64 from the dequantized W; likewise a row-major BF16
matvec, RMSNorm, NeoX RoPE, softmax and SwiGLU. Writes inputs and expected
outputs to OUTDIR (manifest.txt + raw little-endian arrays), then runs the C
driver (tests/kernels/oracle-check.c) on them and returns its exit status.

Usage: oracle.py OUTDIR DRIVER   (Debian's /usr/bin/python3 with python3-numpy)
"""
import os
import subprocess
import sys

import numpy as np

rng = np.random.default_rng(20260912)


def bf16_round(a):
    """float32 values truncated to BF16, returned as (uint16 bits, float64 value)."""
    bits = (np.asarray(a, np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def pack_q4_1(q, dbits, mbits):
    """q: (out, in_p) ints 0..15; dbits, mbits: (out, in_p/32) BF16 bits.
    Returns the chunk bytes, row-block-major, chunk f = (f // ncol, f % ncol)."""
    out, in_p = q.shape
    R, C = out // 32, in_p // 256
    # scales/mins: chunk-local index g*32 + r
    d = dbits.reshape(R, 32, C, 8).transpose(0, 2, 3, 1).reshape(R, C, 256)
    m = mbits.reshape(R, 32, C, 8).transpose(0, 2, 3, 1).reshape(R, C, 256)
    # nibbles (8,192 per chunk): index (r//16)*4096 + c*16 + r%16, byte k//2,
    # even k in the low nibble
    qc = q.reshape(R, 2, 16, C, 256).transpose(0, 3, 1, 4, 2).reshape(R, C, 8192)
    nib = (qc[..., 0::2] | (qc[..., 1::2] << 4)).astype(np.uint8)
    chunks = np.concatenate([d.astype('<u2').view(np.uint8).reshape(R, C, 512),
                             m.astype('<u2').view(np.uint8).reshape(R, C, 512), nib], axis=2)
    assert chunks.shape == (R, C, 5120)
    return chunks.reshape(-1)


def save(outdir, name, **arrays):
    for ext, a in arrays.items():
        a.tofile(os.path.join(outdir, f"{name}.{ext}"))


def case_q4_1(outdir, manifest, out, n_in):
    name = f"q4_1_{out}x{n_in}"
    in_p = (n_in + 255) // 256 * 256
    # Padding columns get random weights too: the kernels must ignore them.
    q = rng.integers(0, 16, size=(out, in_p), dtype=np.uint8)
    dbits, d = bf16_round(rng.uniform(0.001, 0.02, size=(out, in_p // 32)))
    mbits, m = bf16_round(rng.uniform(-0.15, 0.0, size=(out, in_p // 32)))
    w = q.astype(np.float64) * np.repeat(d, 32, axis=1) + np.repeat(m, 32, axis=1)
    w = w[:, :n_in]
    x = rng.uniform(-2, 2, size=n_in).astype(np.float32)
    y = w @ x.astype(np.float64)
    s = np.abs(w) @ np.abs(x.astype(np.float64))
    ng = in_p // 32
    wp = np.zeros((out, in_p))
    wp[:, :n_in] = np.abs(w)
    aw = wp.reshape(out, ng, 32).sum(axis=2)  # sum |w| per (row, group), for the int8 bound
    save(outdir, name, chunks=pack_q4_1(q, dbits, mbits), x=x, y=y, s=s, aw=aw)
    manifest.append(f"q4_1 {out} {n_in} {name}")


def case_bf16(outdir, manifest, out, n_in):
    name = f"bf16_{out}x{n_in}"
    wbits, w = bf16_round(rng.uniform(-0.1, 0.1, size=(out, n_in)))
    x = rng.uniform(-2, 2, size=n_in).astype(np.float32)
    xd = x.astype(np.float64)
    save(outdir, name, w=wbits, x=x, y=w @ xd, s=np.abs(w) @ np.abs(xd))
    manifest.append(f"bf16 {out} {n_in} {name}")


def main():
    outdir, driver = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    manifest = []
    for out, n_in in [(2048, 2048), (256, 2048), (6144, 2048), (2048, 6144),
                      (32, 100), (32, 300), (96, 513), (64, 7)]:
        case_q4_1(outdir, manifest, out, n_in)
    for out, n_in in [(256, 2048), (9, 1000), (4, 33)]:
        case_bf16(outdir, manifest, out, n_in)

    # RMSNorm, eps 1e-6, BF16 weight
    n = 2048
    x = rng.normal(0, 3, size=n).astype(np.float32)
    wbits, w = bf16_round(rng.uniform(0.5, 1.5, size=n))
    xd = x.astype(np.float64)
    save(outdir, "rmsnorm", x=x, w=wbits, y=w * xd / np.sqrt(np.mean(xd * xd) + 1e-6))
    manifest.append(f"rmsnorm {n} rmsnorm")

    for n in (1, 7, 1000, 4096):
        x = rng.normal(0, 4, size=n).astype(np.float32)
        e = np.exp(x.astype(np.float64) - x.max())
        save(outdir, f"softmax_{n}", x=x, y=e / e.sum())
        manifest.append(f"softmax {n} softmax_{n}")

    n = 6144
    g = rng.normal(0, 3, size=n).astype(np.float32)
    u = rng.normal(0, 1, size=n).astype(np.float32)
    gd = g.astype(np.float64)
    save(outdir, "silu", g=g, u=u, y=gd / (1 + np.exp(-gd)) * u.astype(np.float64))
    manifest.append(f"silu {n} silu")

    with open(os.path.join(outdir, "manifest.txt"), "w") as f:
        f.write("\n".join(manifest) + "\n")
    return subprocess.run([driver, outdir]).returncode


if __name__ == "__main__":
    sys.exit(main())
