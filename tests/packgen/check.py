#!/usr/bin/python3
"""check.py PACK_DIR [--template FILE]: an independent reading of a generated pack.

Parses model.q4nx itself (json + struct + numpy, no project code), following
docs/model-minicpm5.md §3.9, and checks it against config.json: every tensor's
name, dtype and shape; data_offsets tiling the data region without gaps or
overlap; BF16 values finite and plausible; every Q4_1 chunk dequantizing to a
consistent matrix (q from a group's min to its max, d >= 0, padding zero, row
std about 1/sqrt(in)). Then tokenizer.json (specials at the declared ids, ids
0..vocab-1 each exactly once, merges over existing tokens) and the small JSON
files. Debian's python3-numpy: run with /usr/bin/python3. Exit 0 = all good."""
import json
import os
import struct
import sys

import numpy as np

LOW_ADDED = ['<s>', '</s>', '<tool_call>', '</tool_call>', '<|im_sep|>', '<|fim_prefix|>',
             '<|fim_middle|>', '<|fim_suffix|>', '<think>', '</think>', '<tool_response>',
             '</tool_response>', '<tools>', '</tools>', '<arguments>', '</arguments>',
             '<parameters>', '</parameters>', '<function', '</function>', '<param', '</param>']
NOT_SPECIAL = {'<think>', '</think>'}

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
    return cond


def bf16(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


# ---- Q4_1 chunks (§3.9) -------------------------------------------------------

def q4_1_parts(raw, rows, cols):
    """(q, d, m) of W[rows, cols]: q as [rows, cols_padded], d and m per
    (row, 32-column group) as [rows, cols_padded // 32]."""
    ncol = (cols + 255) // 256
    nrb = rows // 32
    c = raw.reshape(nrb * ncol, 5120)
    # Bytes 0..511: BF16 d at index g*32 + r; 512..1023: BF16 m, same index.
    d = bf16(c[:, :512].copy().view('<u2')).reshape(-1, 8, 32)
    m = bf16(c[:, 512:1024].copy().view('<u2')).reshape(-1, 8, 32)
    # Nibble byte (r//16)*2048 + col*8 + (r%16)//2; even row low nibble.
    nib = c[:, 1024:].reshape(-1, 2, 256, 8)           # chunk, half, col, row pair
    q = np.stack([nib & 15, nib >> 4], axis=-1)        # ..., pair, lo/hi
    q = q.transpose(0, 1, 3, 4, 2).reshape(-1, 32, 256)  # chunk, row, col
    # Chunk f covers rows 32*(f // ncol), cols 256*(f % ncol): row-block-major.
    q = q.reshape(nrb, ncol, 32, 256).transpose(0, 2, 1, 3).reshape(rows, ncol * 256)
    d = d.transpose(0, 2, 1).reshape(nrb, ncol, 32, 8).transpose(0, 2, 1, 3).reshape(rows, ncol * 8)
    m = m.transpose(0, 2, 1).reshape(nrb, ncol, 32, 8).transpose(0, 2, 1, 3).reshape(rows, ncol * 8)
    return q, d, m


def dequant(raw, rows, cols):
    q, d, m = q4_1_parts(raw, rows, cols)
    w = q.astype(np.float32) * np.repeat(d, 32, axis=1) + np.repeat(m, 32, axis=1)
    return w[:, :cols]


def check_q4_1(name, raw, rows, cols):
    q, d, m = q4_1_parts(raw, rows, cols)
    check(np.isfinite(d).all() and np.isfinite(m).all(), f'{name}: non-finite d or m')
    check((d >= 0).all(), f'{name}: negative d')
    g = q.reshape(rows, -1, 32)
    live = d > 0
    # m = min and d = (max - min)/15: in every group the minimum quantizes to 0
    # and the maximum to 15.
    check((g.min(axis=2)[live] == 0).all(), f'{name}: a group whose smallest q is not 0')
    check((g.max(axis=2)[live] == 15).all(), f'{name}: a group whose largest q is not 15')
    ngroups = (cols + 31) // 32
    pad = np.zeros_like(live)
    pad[:, ngroups:] = True
    check((d[pad] == 0).all() and (m[pad] == 0).all() and (g[pad] == 0).all(),
          f'{name}: padding columns are not zero')
    w = dequant(raw, rows, cols)
    std = float(w.std(axis=1).mean())
    want = 1 / np.sqrt(cols)
    check(0.7 * want < std < 1.3 * want, f'{name}: row std {std:.4g}, expected about {want:.4g}')
    check(abs(float(w.mean())) < 0.1 * want, f'{name}: mean {float(w.mean()):.3g} is not ~0')
    return w


# ---- model.q4nx -------------------------------------------------------------------

def expected_tensors(cfg):
    h, L = cfg['hidden_size'], cfg['num_hidden_layers']
    hd, ff, V = cfg['head_dim'], cfg['intermediate_size'], cfg['vocab_size']
    q, kv = cfg['num_attention_heads'] * hd, cfg['num_key_value_heads'] * hd
    t = {'model.embed_tokens.weight': ('BF16', (V, h)), 'model.norm.weight': ('BF16', (h,)),
         'lm_head.weight': ('Q4_1', (V, h))}
    for i in range(L):
        p = f'model.layers.{i}.'
        t[p + 'input_layernorm.weight'] = ('BF16', (h,))
        t[p + 'post_attention_layernorm.weight'] = ('BF16', (h,))
        for n, shape in (('self_attn.q_proj', (q, h)), ('self_attn.k_proj', (kv, h)),
                         ('self_attn.v_proj', (kv, h)), ('self_attn.o_proj', (h, q)),
                         ('mlp.gate_proj', (ff, h)), ('mlp.up_proj', (ff, h)),
                         ('mlp.down_proj', (h, ff))):
            t[p + n + '.weight'] = ('Q4_1', shape)
    return t


def read_q4nx(path):
    with open(path, 'rb') as f:
        blob = f.read()
    (n,) = struct.unpack('<Q', blob[:8])
    hdr = blob[8:8 + n]
    check((8 + n) % 8 == 0, f'header length {n}: data does not start 8-byte aligned')
    check(hdr.rstrip(b' ').endswith(b'}') and len(hdr) - len(hdr.rstrip(b' ')) < 8,
          'header is not JSON padded with fewer than 8 spaces')
    return json.loads(hdr), memoryview(blob)[8 + n:]


def check_weights(pack, cfg):
    header, data = read_q4nx(os.path.join(pack, 'model.q4nx'))
    header.pop('__metadata__', None)
    want = expected_tensors(cfg)
    check(set(header) == set(want), 'tensor names differ: missing %s, extra %s'
          % (sorted(set(want) - set(header))[:5], sorted(set(header) - set(want))[:5]))
    spans = sorted((v['data_offsets'][0], v['data_offsets'][1], k) for k, v in header.items())
    pos = 0
    for b, e, k in spans:
        check(b == pos, f'{k}: begins at {b}, expected {pos} (gap or overlap)')
        pos = max(pos, e)
    check(pos == len(data), f'tensors end at {pos}, data region is {len(data)} bytes')
    weights = {}
    for name, (kind, shape) in want.items():
        if name not in header:
            continue
        ent = header[name]
        b, e = ent['data_offsets']
        raw = np.frombuffer(data[b:e], dtype=np.uint8)
        if kind == 'BF16':
            if not (check(ent['dtype'] == 'BF16', f'{name}: dtype {ent["dtype"]}, want BF16') and
                    check(tuple(ent['shape']) == shape, f'{name}: shape {ent["shape"]} != {shape}') and
                    check(e - b == 2 * int(np.prod(shape)), f'{name}: {e - b} bytes')):
                continue
            x = bf16(raw.view('<u2')).reshape(shape)
            check(np.isfinite(x).all(), f'{name}: non-finite values')
            if name == 'model.embed_tokens.weight':
                check(0.8 < float(x.std()) < 1.2, f'{name}: std {float(x.std()):.3g}, want ~1')
            else:
                check(abs(float(x.mean()) - 1) < 0.01 and float(np.abs(x - 1).max()) < 0.2,
                      f'{name}: a norm should be 1 +- small noise')
            weights[name] = x
        else:
            rows, cols = shape
            chunks = rows // 32 * ((cols + 255) // 256)
            if not (check(rows % 32 == 0, f'{name}: {rows} rows, not a multiple of 32') and
                    check(ent['dtype'] == 'I8', f'{name}: dtype {ent["dtype"]}, want I8') and
                    check(ent['shape'] == [chunks, 5120],
                          f'{name}: shape {ent["shape"]} != [{chunks}, 5120]') and
                    check(e - b == chunks * 5120, f'{name}: {e - b} bytes')):
                continue
            weights[name] = check_q4_1(name, raw, rows, cols)
    return weights


# ---- the other files ----------------------------------------------------------------

def check_tokenizer(pack, cfg):
    with open(os.path.join(pack, 'tokenizer.json'), encoding='utf-8') as f:
        tok = json.load(f)
    V = cfg['vocab_size']
    im_end = cfg['eos_token_id'][1]
    by_id = {}
    for a in tok['added_tokens']:
        check(a['id'] not in by_id, f'added token id {a["id"]} twice')
        by_id[a['id']] = a
    for i, s in enumerate(LOW_ADDED):
        a = by_id.get(i)
        if check(a is not None and a['content'] == s, f'id {i} should be added token {s!r}'):
            check(a['special'] == (s not in NOT_SPECIAL), f'{s}: wrong special flag')
    for i, s in ((im_end - 1, '<|im_start|>'), (im_end, '<|im_end|>')):
        a = by_id.get(i)
        check(a is not None and a['content'] == s and a['special'], f'id {i} should be {s}')
    model = tok['model']
    check(model['type'] == 'BPE' and model['ignore_merges'] is True, 'model: BPE, ignore_merges')
    vocab = model['vocab']
    ids = sorted(list(vocab.values()) + list(by_id))
    check(ids == list(range(V)), f'vocab + added ids are not exactly 0..{V - 1}')
    for mg in model['merges']:
        a, b = mg.split(' ') if isinstance(mg, str) else mg
        if not check(a in vocab and b in vocab and a + b in vocab, f'merge {mg!r} not over tokens'):
            break
    pre = tok['pre_tokenizer']
    steps = [(p['type'], p.get('pattern', {}).get('Regex')) for p in pre['pretokenizers']]
    check(pre['type'] == 'Sequence' and steps[0] == ('Split', '\\p{N}{1,3}') and
          steps[1][0] == 'Split' and steps[1][1].startswith("(?i:'s|'t|'re|'ve|'m|'ll|'d)") and
          steps[2][0] == 'ByteLevel' and pre['pretokenizers'][2]['use_regex'] is False,
          f'pre_tokenizer is not MiniCPM5\'s: {steps}')
    check(tok['decoder']['type'] == 'ByteLevel', 'decoder is not ByteLevel')


def check_small_files(pack, cfg, template):
    def load(n):
        with open(os.path.join(pack, n)) as f:
            return json.load(f)
    check(cfg['architectures'] == ['LlamaForCausalLM'] and cfg['model_type'] == 'llama',
          'config: not a LlamaForCausalLM / llama')
    check(cfg['rms_norm_eps'] == 1e-6 and cfg['rope_theta'] == 5e6, 'config: eps / theta')
    check(cfg['tie_word_embeddings'] is False and cfg['bos_token_id'] == 0 and
          cfg['eos_token_id'][0] == 1 and cfg['pad_token_id'] == 1, 'config: ids / tying')
    tc = load('tokenizer_config.json')
    check(tc['add_bos_token'] is False and tc['bos_token'] == '<s>' and tc['eos_token'] == '</s>'
          and 'chat_template' not in tc, 'tokenizer_config.json')
    gc = load('generation_config.json')
    check(gc == {'do_sample': True, 'temperature': 1.0, 'top_p': 0.95,
                 'eos_token_id': cfg['eos_token_id'], 'bos_token_id': 0, 'pad_token_id': 1},
          f'generation_config.json: {gc}')
    if template:
        with open(template, 'rb') as a, open(os.path.join(pack, 'chat_template.jinja'), 'rb') as b:
            check(a.read() == b.read(), 'chat_template.jinja differs from the reference')


def main(argv):
    pack = argv[1]
    template = argv[argv.index('--template') + 1] if '--template' in argv else None
    with open(os.path.join(pack, 'config.json')) as f:
        cfg = json.load(f)
    check_small_files(pack, cfg, template)
    check_tokenizer(pack, cfg)
    weights = check_weights(pack, cfg)
    for f in failures[:40]:
        print('FAIL:', f)
    if failures:
        print(f'{len(failures)} problem(s) in {pack}')
        return 1
    print(f'ok: {pack}: {len(weights)} tensors')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
