#!/usr/bin/python3
"""A small GGUF v3 writer and reader in numpy, written from the GGUF spec
(gguf.md of the ggml repository: file layout, metadata value types) and the
block layouts of ggml-common.h as documented there (Q4_0: f16 d + 16 bytes of nibbles, element j low nibble of
byte j and element j+16 high; Q4_1: f16 d, f16 m, nibbles; Q8_0: f16 d, 32 int8).
The quantizers follow the reference (non-SIMD) ones of ggml-quants.c in
behaviour. Independent of the C reader in tools/pack/gguf.c: tests write GGUFs
with it and read the C side's exports with it.

Nothing here is llama.cpp's code; the Q/K permutation is the one
convert_hf_to_gguf.py documents for the llama architecture:
  W.reshape(n_head, 2, hd // 2, cols).swapaxes(1, 2).reshape(W.shape)."""
import struct

import numpy as np

# Metadata value types and ggml tensor types used here.
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0, T_BF16 = 0, 1, 2, 3, 8, 30
TYPE_NAMES = {T_F32: 'F32', T_F16: 'F16', T_Q4_0: 'Q4_0', T_Q4_1: 'Q4_1', T_Q8_0: 'Q8_0',
              T_BF16: 'BF16'}
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_BF16: (1, 2), T_Q4_0: (32, 18), T_Q4_1: (32, 20),
         T_Q8_0: (32, 34)}
SCALAR_FMT = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i', F32: '<f',
              BOOL: '<?', U64: '<Q', I64: '<q', F64: '<d'}


def permute(w, n_head):
    """HF (halves) rows -> llama.cpp's interleaved rows, per head."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]) \
        .swapaxes(1, 2).reshape(w.shape)


def bf16_round(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return u.astype(np.uint32).view(np.float32)


# ---- quantizers: rows [R, C] float32 -> bytes [R, C/32 * block] ----------------------

def _scale(d, bf16_scales):
    d = np.asarray(d, np.float32)
    return (bf16_round(d) if bf16_scales else d).astype(np.float16)


def quant_q4_0(w, bf16_scales=False):
    R, C = w.shape
    b = w.astype(np.float32).reshape(R, C // 32, 32)
    idx = np.abs(b).argmax(axis=2)
    mx = np.take_along_axis(b, idx[..., None], axis=2)[..., 0]
    d16 = _scale(mx / np.float32(-8), bf16_scales)
    d = d16.astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))
    q = np.minimum(15, np.trunc(b * inv[..., None] + np.float32(8.5))).astype(np.uint8)
    out = np.empty((R, C // 32, 18), np.uint8)
    out[..., :2] = d16[..., None].view(np.uint8).reshape(R, C // 32, 2)
    out[..., 2:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(R, -1)


def quant_q4_1(w, bf16_scales=False):
    R, C = w.shape
    b = w.astype(np.float32).reshape(R, C // 32, 32)
    mn, mx = b.min(axis=2), b.max(axis=2)
    d16 = _scale((mx - mn) / np.float32(15), bf16_scales)
    m16 = _scale(mn, bf16_scales)
    d, m = d16.astype(np.float32), m16.astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))
    q = np.clip(np.trunc((b - m[..., None]) * inv[..., None] + np.float32(0.5)), 0, 15) \
        .astype(np.uint8)
    out = np.empty((R, C // 32, 20), np.uint8)
    out[..., 0:2] = d16[..., None].view(np.uint8).reshape(R, C // 32, 2)
    out[..., 2:4] = m16[..., None].view(np.uint8).reshape(R, C // 32, 2)
    out[..., 4:] = q[..., :16] | (q[..., 16:] << 4)
    return out.reshape(R, -1)


def quant_q8_0(w):
    R, C = w.shape
    b = w.astype(np.float32).reshape(R, C // 32, 32)
    d16 = (np.abs(b).max(axis=2) / np.float32(127)).astype(np.float16)
    d = d16.astype(np.float32)
    inv = np.where(d != 0, np.float32(1) / np.where(d != 0, d, 1), np.float32(0))
    q = np.clip(np.round(b * inv[..., None]), -127, 127).astype(np.int8)
    out = np.empty((R, C // 32, 34), np.uint8)
    out[..., :2] = d16[..., None].view(np.uint8).reshape(R, C // 32, 2)
    out[..., 2:] = q.view(np.uint8)
    return out.reshape(R, -1)


def encode(w, ttype, bf16_scales=False):
    w = np.asarray(w, np.float32)
    w2 = w.reshape(-1, w.shape[-1])
    if ttype == T_F32:
        return w2.astype('<f4').view(np.uint8)
    if ttype == T_F16:
        return w2.astype('<f2').view(np.uint8)
    if ttype == T_BF16:
        return (bf16_round(w2).view(np.uint32) >> 16).astype('<u2').view(np.uint8)
    if ttype == T_Q4_0:
        return quant_q4_0(w2, bf16_scales)
    if ttype == T_Q4_1:
        return quant_q4_1(w2, bf16_scales)
    if ttype == T_Q8_0:
        return quant_q8_0(w2)
    raise ValueError(ttype)


def decode(raw, ttype, shape):
    """bytes of a tensor of `shape` (outermost first) -> float32, as ggml dequantizes."""
    R, C = int(np.prod(shape[:-1])), shape[-1]
    raw = np.asarray(raw, np.uint8).reshape(R, -1)
    if ttype == T_F32:
        return raw.copy().view('<f4').reshape(shape)
    if ttype == T_F16:
        return raw.copy().view('<f2').astype(np.float32).reshape(shape)
    if ttype == T_BF16:
        return (raw.copy().view('<u2').astype(np.uint32) << 16).view(np.float32).reshape(shape)
    nb = C // 32
    if ttype == T_Q8_0:
        b = raw.reshape(R, nb, 34)
        d = b[..., :2].copy().view('<f2').astype(np.float32)
        return (b[..., 2:].view(np.int8).astype(np.float32) * d).reshape(shape)
    if ttype in (T_Q4_0, T_Q4_1):
        q, d, m = q4_parts(raw, ttype, R, C)
        return (q.astype(np.float32) * np.repeat(d, 32, axis=1) +
                np.repeat(m, 32, axis=1)).reshape(shape)
    raise ValueError(ttype)


def q4_parts(raw, ttype, R, C):
    """codes [R, C], d and m [R, C/32] float32 of a Q4_0/Q4_1 tensor (Q4_0: m = -8 d)."""
    nb = C // 32
    size = 18 if ttype == T_Q4_0 else 20
    b = np.asarray(raw, np.uint8).reshape(R, nb, size)
    d = b[..., :2].copy().view('<f2')[..., 0].astype(np.float32)
    m = -8 * d if ttype == T_Q4_0 else b[..., 2:4].copy().view('<f2')[..., 0].astype(np.float32)
    qs = b[..., size - 16:]
    q = np.concatenate([qs & 15, qs >> 4], axis=2).reshape(R, C)
    return q, d, m


# ---- the container --------------------------------------------------------------

def _str(s):
    b = s.encode() if isinstance(s, str) else bytes(s)
    return struct.pack('<Q', len(b)) + b


def _value(vtype, v):
    if vtype == STRING:
        return _str(v)
    if vtype == ARRAY:
        atype, items = v
        out = struct.pack('<IQ', atype, len(items))
        if atype == STRING:
            return out + b''.join(_str(x) for x in items)
        return out + np.asarray(items, np.dtype(SCALAR_FMT[atype])).tobytes()
    return struct.pack(SCALAR_FMT[vtype], v)


def write(path, kv, tensors, alignment=32, version=3):
    """kv: [(key, vtype, value)], value (atype, list) for arrays; tensors:
    [(name, ttype, shape outermost-first, raw bytes)]."""
    head = bytearray(b'GGUF' + struct.pack('<IQQ', version, len(tensors), len(kv)))
    for key, vtype, v in kv:
        head += _str(key) + struct.pack('<I', vtype) + _value(vtype, v)
    off, blobs = 0, []
    for name, ttype, shape, raw in tensors:
        raw = bytes(np.asarray(raw, np.uint8).reshape(-1))
        ne = list(reversed(shape))
        head += _str(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n)
                                                                   for n in ne)
        head += struct.pack('<IQ', ttype, off)
        pad = -len(raw) % alignment
        blobs.append(raw + b'\0' * pad)
        off += len(raw) + pad
    head += b'\0' * (-len(head) % alignment)
    with open(path, 'wb') as f:
        f.write(head)
        for b in blobs:
            f.write(b)


def read(path):
    """(kv {key: value}, tensors {name: (ttype, shape outermost-first, raw uint8)})."""
    data = np.memmap(path, dtype=np.uint8, mode='r')
    buf = bytes(data[:min(len(data), 64 << 20)])
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take('<Q')
        s = buf[pos:pos + n]
        pos += n
        return s.decode()

    def value(t):
        nonlocal pos
        if t == STRING:
            return string()
        if t == ARRAY:
            at, n = take('<I'), take('<Q')
            if at == STRING:
                return [string() for _ in range(n)]
            dt = np.dtype(SCALAR_FMT[at])
            v = np.frombuffer(buf, dt, n, pos).tolist()
            pos += n * dt.itemsize
            return v
        return take(SCALAR_FMT[t])

    assert buf[:4] == b'GGUF'
    pos = 4
    version, nt, nkv = take('<I'), take('<Q'), take('<Q')
    assert version in (2, 3)
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = value(take('<I'))
    infos = []
    for _ in range(nt):
        name = string()
        nd = take('<I')
        ne = [take('<Q') for _ in range(nd)]
        infos.append((name, take('<I'), tuple(reversed(ne)), take('<Q')))
    align = kv.get('general.alignment', 32)
    start = pos + (-pos % align)
    tensors = {}
    for name, t, shape, off in infos:
        per, size = BLOCK[t]
        n = int(np.prod(shape)) // per * size
        tensors[name] = (t, shape, data[start + off:start + off + n])
    return kv, tensors
