#!/usr/bin/python3
"""ref.py — an independent numpy reference of the MiniCPM5 (plain Llama) forward
pass, the oracle that engine/model/model.c is checked against.

Nothing here comes from the C side: the pack is read with this file's own
safetensors parser (json + struct + numpy), the Q4_1 chunks of model.q4nx are
unpacked from the layout of docs/model-minicpm5.md §3.9 (the doc's nibble-index
form, k = (r//16)*4096 + bc*512 + i*16 + r%16), and the forward pass is §1.2:

    x = embed[token]                                     (BF16 lookup, no scale)
    per layer: n = RMSNorm(x) ; q,k,v = n.W^T ; NeoX RoPE (theta from config, the
      whole head_dim) on q,k ; causal GQA attention, Q head h -> KV head
      h // (n_heads / n_kv), scale head_dim^-0.5 ; x += ctx.Wo^T ;
      n = RMSNorm(x) ; x += Wdown.(silu(Wgate.n) * (Wup.n))
    logits = RMSNorm(x_last).Wlm^T

Arithmetic is float64 throughout: the reference should be (as nearly as
possible) the exact value of the documented computation, so that what the
comparison measures is the C engine's float32 error, not a mix of two float32
roundings in different orders. Weights are what the pack stores: Q4_1 dequantized
as w = q*d + m in float32 (q4nx.h: one rounding for the product, one for the sum),
BF16 widened exactly; both then used in float64.

Two places where the C engine deliberately departs from exact math are mirrored,
since their effect is far larger than float32 noise:
  * the KV cache holds BF16: K (after RoPE) and V are rounded to float32, then to
    BF16 round-to-nearest-even, before attention reads them -- for every
    position, the current one included;
  * --act q8: every matmul input vector is quantized per 32 columns as
    eng_q8x_quantize does (x as float32; d = amax/127 in float32; q =
    rint(x * float32(1/d)) half-to-even, clamped to +-127; the min term takes
    the sum of the quantized x of the group, d_x*sum(q_x)), and each (row,
    group) adds d_w*d_x*sum(q_w*q_x) + m_w*d_x*sum(q_x). Quantized inputs: q/k/v
    (normed x), o_proj (attention output), gate/up (normed x), down
    (silu(g)*u), lm_head (final normed x). BF16 (Hugging Face) weights are never
    quantized: q8 applies to Q4_1 weights only.

--act q8t is the textbook form of the same quantization, for judging the
engine's int8 error: each quantized input x^ = d_x*q_x times the dequantized
weights, x^ . w, with no integer arithmetic of the engine's mirrored.

Usage:
  ref.py PACK --tokens 1,2,3 [--steps 20] [--act f32|q8|q8t] [--force 5,6,...]
         [--weights auto|q4nx|hf] [--out FILE.json]
Prefills the prompt in one batch, then decodes `steps` tokens one at a time: the
greedy token (argmax, ties -> lowest id), or with --force the given tokens (so
a second implementation can be compared on the same sequence). JSON out:
  {"act", "tokens", "prompt_logits": [V], "steps": [{"token", "logits": [V]}],
   "greedy": [argmax of prompt_logits, then of each step's logits]}
--tokenwise feeds the prompt one token at a time instead (a self-check: the same
logits to float64 rounding). Debian's /usr/bin/python3 with python3-numpy.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

# ---- safetensors, read here -------------------------------------------------------

ST_DTYPES = {'BF16': np.dtype('<u2'), 'F16': np.dtype('<f2'), 'F32': np.dtype('<f4'),
             'I8': np.dtype('i1'), 'U8': np.dtype('u1')}


def read_safetensors(path):
    """{name: (dtype string, shape, raw uint8 view)} of one safetensors file:
    u64 LE header length N, N bytes of JSON, then data (offsets relative to 8+N)."""
    data = np.memmap(path, dtype=np.uint8, mode='r')
    (n,) = struct.unpack('<Q', bytes(data[:8]))
    header = json.loads(bytes(data[8:8 + n]))
    header.pop('__metadata__', None)
    base = 8 + n
    out = {}
    for name, ent in header.items():
        b, e = ent['data_offsets']
        out[name] = (ent['dtype'], tuple(ent['shape']), data[base + b:base + e])
    return out


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x):
    """float64 -> float32 (as the C engine holds it) -> BF16 round-to-nearest-even,
    returned as float64. (No NaNs expected here.)"""
    u = np.asarray(x, np.float64).astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return bf16_to_f32(u.astype(np.uint16)).astype(np.float64)


# ---- Q4_1 chunks (§3.9) -------------------------------------------------------------

def unpack_q4_1(raw, rows, cols):
    """q [rows, cols_padded] (uint8 0..15), d and m [rows, groups_padded] (float32)
    of W[rows, cols] stored as 5,120-byte chunks, chunk f = rb*ncol + cb."""
    ncol = -(-cols // 256)
    nrb = rows // 32
    assert rows % 32 == 0 and raw.size == nrb * ncol * 5120, (rows, cols, raw.size)
    c = np.asarray(raw).reshape(nrb, ncol, 5120)
    # Scales and mins: 256 BF16 each, index g*32 + r.
    d = bf16_to_f32(c[..., :512].copy().view('<u2')).reshape(nrb, ncol, 8, 32)
    m = bf16_to_f32(c[..., 512:1024].copy().view('<u2')).reshape(nrb, ncol, 8, 32)
    # Nibble k at byte k//2, even k in the low nibble; k = (r//16)*4096 + bc*512 +
    # i*16 + r%16 for chunk-local row r and column c = 32*bc + i.
    b = c[..., 1024:]
    nib = np.empty(b.shape[:-1] + (8192,), np.uint8)
    nib[..., 0::2] = b & 15
    nib[..., 1::2] = b >> 4
    nib = nib.reshape(nrb, ncol, 2, 8, 32, 16)          # rb, cb, r//16, bc, i, r%16
    q = nib.transpose(0, 2, 5, 1, 3, 4).reshape(rows, ncol * 256)   # (rb, r//16, r%16), (cb, bc, i)
    d = d.transpose(0, 3, 1, 2).reshape(rows, ncol * 8)             # (rb, r), (cb, g)
    m = m.transpose(0, 3, 1, 2).reshape(rows, ncol * 8)
    return q, d, m


class Q4Weight:
    """A Q4_1 matrix W[rows, cols]: the float32 dequantization (.w, for exact
    products) and the integer parts (.q/.d/.m, for q8 mode), padding columns
    dropped; each built on first use."""

    def __init__(self, raw, rows, cols):
        self.raw, self.rows, self.cols = raw, rows, cols
        self.ng = -(-cols // 32)
        self._w = self._parts = None

    @property
    def w(self):
        if self._w is None:
            q, d, m = unpack_q4_1(self.raw, self.rows, self.cols)
            # w = q*d + m in float32: the product rounds, then the sum (no FMA).
            w32 = q.astype(np.float32) * np.repeat(d, 32, axis=1) + np.repeat(m, 32, axis=1)
            self._w = w32[:, :self.cols].astype(np.float64)
        return self._w

    def parts(self):
        if self._parts is None:
            q, d, m = unpack_q4_1(self.raw, self.rows, self.cols)
            ng, cols = self.ng, self.cols
            q = q[:, :ng * 32].astype(np.float64).reshape(self.rows, ng, 32)   # ints, exact
            if ng * 32 > cols:   # a group straddling `in`: its padding q must not count
                q[:, ng - 1, cols - (ng - 1) * 32:] = 0
            self._parts = (q, d[:, :ng].astype(np.float64), m[:, :ng].astype(np.float64))
        return self._parts


class BF16Weight:
    def __init__(self, bits, rows, cols):
        self.rows, self.cols = rows, cols
        self.w = bf16_to_f32(np.asarray(bits).view('<u2').reshape(rows, cols)).astype(np.float64)


def quantize_q8(x, cols):
    """x [T, cols] float64 -> (q [T, G, 32] float64 ints, d [T, G], sum [T, G]) as
    eng_q8x_quantize computes them from the float32 x; sum = d * sum(q), the
    group's sum of the quantized x (exact here: d has 24 bits, sum(q) 12)."""
    T = x.shape[0]
    G = -(-cols // 32)
    x32 = np.zeros((T, G * 32), np.float32)
    x32[:, :cols] = x.astype(np.float32)
    g = x32.reshape(T, G, 32)
    amax = np.abs(g).max(axis=2)
    d = amax / np.float32(127.0)                          # float32 division
    with np.errstate(divide='ignore'):
        inv = np.where(d > 0, np.float32(1.0) / d, np.float32(0.0)).astype(np.float32)
    p = g * inv[:, :, None]                               # float32 product
    q = np.clip(np.rint(p), -127, 127).astype(np.float64)  # rint: half to even, like lrintf
    d = d.astype(np.float64)
    return q, d, d * q.sum(axis=2)


def matmul(W, x, act):
    """y [T, rows] = W . x_t for x [T, cols], in float64."""
    if act == 'q8' and isinstance(W, Q4Weight):
        qw, dw, mw = W.parts()
        qx, dx, sx = quantize_q8(x, W.cols)
        y = sx @ mw.T                                     # sum_g m_w * sum_x
        for g in range(W.ng):
            isum = qx[:, g, :] @ qw[:, g, :].T            # exact integers
            y += isum * (dx[:, g:g + 1] * dw[None, :, g])
        return y
    if act == 'q8t' and isinstance(W, Q4Weight):
        qx, dx, _ = quantize_q8(x, W.cols)
        xh = (qx * dx[:, :, None]).reshape(x.shape[0], -1)[:, :W.cols]
        return xh @ W.w.T
    return x @ W.w.T


# ---- the pack ---------------------------------------------------------------------

class Model:
    def __init__(self, pack, weights='auto', qk_norm='error'):
        with open(os.path.join(pack, 'config.json')) as f:
            cfg = json.load(f)
        self.cfg = cfg
        self.h = cfg['hidden_size']
        self.L = cfg['num_hidden_layers']
        self.nh = cfg['num_attention_heads']
        self.nkv = cfg['num_key_value_heads']
        self.hd = cfg.get('head_dim') or self.h // self.nh
        self.ff = cfg['intermediate_size']
        self.V = cfg['vocab_size']
        self.eps = float(cfg['rms_norm_eps'])
        self.theta = float(cfg['rope_theta'])
        assert self.nh % self.nkv == 0
        assert not cfg.get('rope_scaling'), 'rope_scaling is not supported'

        q4 = os.path.join(pack, 'model.q4nx')
        if weights == 'auto':
            weights = 'q4nx' if os.path.exists(q4) else 'hf'
        self.format = weights
        if weights == 'q4nx':
            tensors = read_safetensors(q4)
        else:
            tensors = {}
            idx = os.path.join(pack, 'model.safetensors.index.json')
            if os.path.exists(idx):
                with open(idx) as f:
                    files = sorted(set(json.load(f)['weight_map'].values()))
            else:
                files = ['model.safetensors']
            for fn in files:
                tensors.update(read_safetensors(os.path.join(pack, fn)))
        self.tensors = tensors

        for n in tensors:
            if n.endswith('q_norm.weight') or n.endswith('k_norm.weight'):
                if qk_norm == 'error':
                    raise SystemExit(f'ref.py: {n}: QK-norm tensors are not modelled here '
                                     '(pass --qk-norm ignore to skip them)')
        tied = cfg.get('tie_word_embeddings', False)
        self.embed = self.vec('model.embed_tokens.weight', (self.V, self.h))
        self.norm = self.vec('model.norm.weight', (self.h,))
        if 'lm_head.weight' in tensors:
            self.lm = self.mat('lm_head.weight', self.V, self.h)
        else:
            assert tied, 'no lm_head.weight and tie_word_embeddings is false'
            self.lm = BF16Weight(tensors['model.embed_tokens.weight'][2], self.V, self.h)
        qd, kvd = self.nh * self.hd, self.nkv * self.hd
        self.layers = []
        for i in range(self.L):
            p = f'model.layers.{i}.'
            self.layers.append({
                'in_norm': self.vec(p + 'input_layernorm.weight', (self.h,)),
                'post_norm': self.vec(p + 'post_attention_layernorm.weight', (self.h,)),
                'q': self.mat(p + 'self_attn.q_proj.weight', qd, self.h),
                'k': self.mat(p + 'self_attn.k_proj.weight', kvd, self.h),
                'v': self.mat(p + 'self_attn.v_proj.weight', kvd, self.h),
                'o': self.mat(p + 'self_attn.o_proj.weight', self.h, qd),
                'gate': self.mat(p + 'mlp.gate_proj.weight', self.ff, self.h),
                'up': self.mat(p + 'mlp.up_proj.weight', self.ff, self.h),
                'down': self.mat(p + 'mlp.down_proj.weight', self.h, self.ff),
            })
        # inv_freq[i] = theta^(-2i/head_dim), i < head_dim/2 (NeoX pairs d, d + hd/2).
        self.inv_freq = self.theta ** (-2.0 * np.arange(self.hd // 2) / self.hd)

    def vec(self, name, shape):
        dtype, sh, raw = self.tensors[name]
        assert dtype == 'BF16' and sh == shape, (name, dtype, sh, shape)
        return bf16_to_f32(np.asarray(raw).view('<u2')).reshape(shape).astype(np.float64)

    def mat(self, name, rows, cols):
        dtype, sh, raw = self.tensors[name]
        if dtype == 'I8':
            assert sh == (rows // 32 * -(-cols // 256), 5120), (name, sh)
            return Q4Weight(raw, rows, cols)
        assert dtype == 'BF16' and sh == (rows, cols), (name, dtype, sh)
        return BF16Weight(raw, rows, cols)

    def rmsnorm(self, x, w):
        return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps))

    def rope(self, v, pos):
        """v [T, heads, hd] at positions pos [T]: NeoX rotate_half."""
        ang = pos[:, None].astype(np.float64) * self.inv_freq[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        half = self.hd // 2
        x1, x2 = v[..., :half], v[..., half:]
        return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


class Seq:
    """A sequence: the KV cache (BF16 values kept as float64) of every layer."""

    def __init__(self, model, act):
        self.m, self.act = model, act
        self.k = [np.zeros((0, model.nkv, model.hd)) for _ in range(model.L)]
        self.v = [np.zeros((0, model.nkv, model.hd)) for _ in range(model.L)]
        self.len = 0

    def forward(self, tokens, every=False):
        """Run a batch of tokens at positions len..len+T-1; logits of the last
        ([V]), or with `every` of each position ([T, V], causal: each the logits
        that position would have had fed alone after the ones before)."""
        m, act = self.m, self.act
        tokens = np.asarray(tokens, np.int64)
        assert ((tokens >= 0) & (tokens < m.V)).all()
        T = len(tokens)
        pos = np.arange(self.len, self.len + T)
        x = m.embed[tokens]
        rep = m.nh // m.nkv
        scale = m.hd ** -0.5
        for i, Lw in enumerate(m.layers):
            n = m.rmsnorm(x, Lw['in_norm'])
            q = matmul(Lw['q'], n, act).reshape(T, m.nh, m.hd)
            k = matmul(Lw['k'], n, act).reshape(T, m.nkv, m.hd)
            v = matmul(Lw['v'], n, act).reshape(T, m.nkv, m.hd)
            q = m.rope(q, pos)
            k = round_bf16(m.rope(k, pos))
            v = round_bf16(v)
            self.k[i] = K = np.concatenate([self.k[i], k])
            self.v[i] = Vc = np.concatenate([self.v[i], v])
            P = K.shape[0]
            kv_of_q = np.arange(m.nh) // rep
            Kh = K[:, kv_of_q, :].transpose(1, 0, 2)                     # nh, P, hd
            Vh = Vc[:, kv_of_q, :].transpose(1, 0, 2)
            s = np.einsum('thd,hpd->htp', q, Kh) * scale                  # nh, T, P
            causal = np.arange(P)[None, :] <= pos[:, None]                # T, P
            s = np.where(causal[None], s, -np.inf)
            s = np.exp(s - s.max(axis=2, keepdims=True))
            p = s / s.sum(axis=2, keepdims=True)
            ctx = np.einsum('htp,hpd->thd', p, Vh).reshape(T, m.nh * m.hd)
            x = x + matmul(Lw['o'], ctx, act)
            n = m.rmsnorm(x, Lw['post_norm'])
            g = matmul(Lw['gate'], n, act)
            u = matmul(Lw['up'], n, act)
            a = g / (1.0 + np.exp(-g)) * u
            x = x + matmul(Lw['down'], a, act)
        self.len += T
        if every:
            return matmul(m.lm, m.rmsnorm(x, m.norm), act)
        h = m.rmsnorm(x[-1:], m.norm)
        return matmul(m.lm, h, act)[0]


def run(model, act, prompt, steps, force=None, tokenwise=False):
    seq = Seq(model, act)
    if tokenwise:
        for t in prompt:
            logits = seq.forward([t])
    else:
        logits = seq.forward(prompt)
    out = {'act': act, 'format': model.format, 'tokens': list(prompt),
           'prompt_logits': logits.tolist(), 'steps': [],
           'greedy': [int(np.argmax(logits))]}   # np.argmax: first max = lowest id
    for i in range(steps):
        tok = force[i] if force is not None else out['greedy'][-1]
        logits = seq.forward([tok])
        out['steps'].append({'token': int(tok), 'logits': logits.tolist()})
        out['greedy'].append(int(np.argmax(logits)))
    return out


def parse_ids(s):
    return [int(t) for t in s.split(',') if t.strip()] if s else []


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('pack')
    ap.add_argument('--tokens', required=True)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--act', choices=('f32', 'q8', 'q8t'), default='f32')
    ap.add_argument('--force', help='feed these tokens instead of the greedy ones')
    ap.add_argument('--weights', choices=('auto', 'q4nx', 'hf'), default='auto')
    ap.add_argument('--qk-norm', choices=('error', 'ignore'), default='error')
    ap.add_argument('--tokenwise', action='store_true')
    ap.add_argument('--out')
    a = ap.parse_args(argv[1:])
    prompt = parse_ids(a.tokens)
    force = parse_ids(a.force) if a.force is not None else None
    if not prompt:
        ap.error('--tokens: at least one token')
    if force is not None and len(force) < a.steps:
        ap.error('--force: fewer tokens than --steps')
    model = Model(a.pack, a.weights, a.qk_norm)
    out = run(model, a.act, prompt, a.steps, force, a.tokenwise)
    text = json.dumps(out)
    if a.out:
        with open(a.out, 'w') as f:
            f.write(text)
    else:
        sys.stdout.write(text + '\n')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
