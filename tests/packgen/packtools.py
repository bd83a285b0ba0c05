#!/usr/bin/python3
"""Meson tests of `minicpmd-pack gen --format hf`, `convert` and `inspect` (suite unit,
names packtools-*):

  packtools.py hf PACK_BIN WORKDIR          gen --format hf of the tiny preset read by our own
                                            safetensors parser: names, dtypes, shapes; the
                                            Q4NX pack of the same seed is its Q4_1 quantization
                                            (within d/2 + BF16 rounding of d and m per group,
                                            and bit-exact when re-quantized here in numpy)
  packtools.py convert PACK_BIN WORKDIR     convert of that HF pack (single file and sharded)
                                            == gen's model.q4nx byte for byte; bad inputs fail
                                            with a message naming the file/tensor, leave nothing
  packtools.py inspect PACK_BIN WORKDIR     good packs exit 0 with the right counts (text and
                                            --json); replication and the QK-norm shim reported;
                                            truncated file, missing tensor, shape mismatch -> 1
  packtools.py convert-kv PACK_BIN WORKDIR  convert --kv-heads 4 == gen --kv-heads 4 (bytes),
                                            and gen --format hf --kv-heads 4 repeats HF heads

Independent of the project's code: the safetensors reading and writing here is
json + struct + numpy; the Q4_1 chunk decoding is check.py's
(docs/model-minicpm5.md §3.9). Debian's python3-numpy: /usr/bin/python3. Each
mode works under WORKDIR/<mode>."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

SIDE = ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json',
        'chat_template.jinja']


class Fail(Exception):
    pass


def need(cond, msg):
    if not cond:
        raise Fail(msg)


def run(pack_bin, *args, ok=(0,)):
    r = subprocess.run([pack_bin, *args], capture_output=True, text=True)
    if r.returncode not in ok:
        sys.stdout.write(r.stdout + r.stderr)
        raise Fail(f'minicpmd-pack {" ".join(args)}: exit {r.returncode}, want {ok}')
    return r


def gen(pack_bin, out, preset='tiny', seed=11, extra=()):
    shutil.rmtree(out, ignore_errors=True)
    run(pack_bin, 'gen', '--preset', preset, '--seed', str(seed), '--out', out, *extra)
    return out


def read(path):
    with open(path, 'rb') as f:
        return f.read()


# ---- safetensors, independently ----------------------------------------------------

def st_read(path):
    """(header without __metadata__, metadata, data memoryview), checking the
    container: header length inside the file, data region tiled exactly."""
    blob = read(path)
    need(len(blob) >= 8, f'{path}: shorter than 8 bytes')
    (n,) = struct.unpack('<Q', blob[:8])
    need(8 + n <= len(blob), f'{path}: header length {n} past the end')
    hdr = json.loads(blob[8:8 + n])
    meta = hdr.pop('__metadata__', None)
    data = memoryview(blob)[8 + n:]
    pos = 0
    for b, e, k in sorted((v['data_offsets'][0], v['data_offsets'][1], k) for k, v in hdr.items()):
        need(b == pos, f'{path}: {k} begins at {b}, expected {pos}')
        pos = e
    need(pos == len(data), f'{path}: tensors end at {pos}, data is {len(data)} bytes')
    return hdr, meta, data


def st_tensor(hdr, data, name):
    b, e = hdr[name]['data_offsets']
    return bytes(data[b:e])


def st_write(path, tensors, meta=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in that order."""
    hdr, off = {}, 0
    if meta is not None:
        hdr['__metadata__'] = meta
    for name, dtype, shape, raw in tensors:
        hdr[name] = {'dtype': dtype, 'shape': list(shape), 'data_offsets': [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(hdr, separators=(',', ':')).encode()
    h += b' ' * (-len(h) % 8)
    with open(path, 'wb') as f:
        f.write(struct.pack('<Q', len(h)) + h)
        for t in tensors:
            f.write(t[3])


def st_entries(path):
    hdr, meta, data = st_read(path)
    order = sorted(hdr, key=lambda k: hdr[k]['data_offsets'][0])
    return [(k, hdr[k]['dtype'], hdr[k]['shape'], st_tensor(hdr, data, k)) for k in order], meta


def bf16_array(raw, shape):
    return check.bf16(np.frombuffer(raw, dtype='<u2')).reshape(shape)


def to_bf16_bits(x):
    """float32 -> bfloat16 bits, round to nearest even (finite values)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def quantize_q4_1(w):
    """gguf-py's Q4_1 as §3.9 / q4nx-write.c describe it, in float32: per row and
    32-column group m = min, d = (max - min) / 15, q = floor((w - m) / d + 0.5)
    clamped, the nibbles from the unrounded d and m, d and m then stored BF16.
    Returns q [rows, cols_padded], d and m bits [rows, groups]."""
    rows, cols = w.shape
    pad = -cols % 256
    g = np.pad(w.astype(np.float32), ((0, 0), (0, pad))).reshape(rows, -1, 32)
    mn, mx = g.min(axis=2), g.max(axis=2)
    d = (mx - mn) / np.float32(15)
    with np.errstate(divide='ignore'):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q = np.floor((g - mn[:, :, None]) * inv[:, :, None] + np.float32(0.5))
    q = np.clip(q, 0, 15).astype(np.uint8).reshape(rows, -1)
    return q, to_bf16_bits(d), to_bf16_bits(mn)


# ---- (a) gen --format hf -------------------------------------------------------------

def hf_expected(cfg):
    """check.py's table with every tensor BF16 at its logical shape."""
    return {k: shape for k, (_, shape) in check.expected_tensors(cfg).items()}


def check_hf_pack(d):
    cfg = json.loads(read(os.path.join(d, 'config.json')))
    need(not os.path.exists(os.path.join(d, 'model.q4nx')), f'{d}: model.q4nx next to the HF file')
    hdr, meta, data = st_read(os.path.join(d, 'model.safetensors'))
    need(meta == {'format': 'pt'}, f'__metadata__ {meta}, want {{"format": "pt"}}')
    want = hf_expected(cfg)
    need(set(hdr) == set(want), f'names: missing {sorted(set(want) - set(hdr))[:5]}, '
         f'extra {sorted(set(hdr) - set(want))[:5]}')
    w = {}
    for name, shape in want.items():
        e = hdr[name]
        need(e['dtype'] == 'BF16', f'{name}: dtype {e["dtype"]}')
        need(tuple(e['shape']) == shape, f'{name}: shape {e["shape"]}, want {list(shape)}')
        raw = st_tensor(hdr, data, name)
        need(len(raw) == 2 * int(np.prod(shape)), f'{name}: {len(raw)} bytes')
        w[name] = bf16_array(raw, shape)
        need(np.isfinite(w[name]).all(), f'{name}: non-finite')
    return cfg, hdr, data, w


def compare_q4nx_hf(q4_dir, cfg, hf_hdr, hf_data, w):
    """The Q4NX pack holds the Q4_1 quantization of the HF weights."""
    qh, qd = check.read_q4nx(os.path.join(q4_dir, 'model.q4nx'))
    qh.pop('__metadata__', None)
    worst = 0.0
    for name, (kind, shape) in check.expected_tensors(cfg).items():
        raw = bytes(qd[qh[name]['data_offsets'][0]:qh[name]['data_offsets'][1]])
        if kind == 'BF16':
            need(raw == st_tensor(hf_hdr, hf_data, name), f'{name}: BF16 bytes differ from HF')
            continue
        rows, cols = shape
        x = w[name]
        q, d, m = check.q4_1_parts(np.frombuffer(raw, np.uint8), rows, cols)
        deq = check.dequant(np.frombuffer(raw, np.uint8), rows, cols)
        # Per group: |w - (q d' + m')| <= d/2 (rounding to the nearest level)
        # + 15 |d - d'| + |m - m'| (d', m' are d, m rounded to BF16, 8 significant
        # bits: <= 2^-8 relative each; d' for d costs another 2^-8) + float32 slack.
        ng = (cols + 31) // 32
        dd, mm = d[:, :ng], m[:, :ng]
        bound = (dd * (0.5 + 15 / 256) + np.abs(mm) / 256) * (1 + 2 ** -7) + 1e-6
        err = np.abs(np.pad(deq - x, ((0, 0), (0, -cols % 32)))).reshape(rows, ng, 32).max(axis=2)
        need((err <= bound).all(), f'{name}: dequantized Q4NX off the HF weights by '
             f'{float((err - bound).max()):.3g} more than the Q4_1 bound')
        worst = max(worst, float((err / np.maximum(dd, 1e-30)).max()))
        # Stronger: re-quantized here from the HF floats, the file's q, d and m
        # come out bit for bit.
        q2, d2, m2 = quantize_q4_1(x)
        need(np.array_equal(q2, q), f'{name}: nibbles differ from numpy re-quantization '
             f'({int((q2 != q).sum())} of {q.size})')
        bits = lambda a: a.view(np.uint32) >> 16  # noqa: E731
        need(np.array_equal(d2[:, :ng], bits(dd)) and np.array_equal(m2[:, :ng], bits(mm)),
             f'{name}: BF16 d/m differ from numpy re-quantization')
    return worst


def mode_hf(pack_bin, work):
    q4 = gen(pack_bin, os.path.join(work, 'q4nx'))
    hf = gen(pack_bin, os.path.join(work, 'hf'), extra=('--format', 'hf'))
    for f in SIDE:
        need(read(os.path.join(q4, f)) == read(os.path.join(hf, f)), f'{f}: differs between formats')
    cfg, hdr, data, w = check_hf_pack(hf)
    # The HF weights look like gen's: norms 1 +- small, matmul std 1/sqrt(in).
    for name, x in w.items():
        if x.ndim == 1:
            need(abs(float(x.mean()) - 1) < 0.01, f'{name}: norm mean {float(x.mean())}')
        elif name != 'model.embed_tokens.weight':
            want = 1 / np.sqrt(x.shape[1])
            need(0.9 * want < float(x.std()) < 1.1 * want, f'{name}: std {float(x.std())}')
    worst = compare_q4nx_hf(q4, cfg, hdr, data, w)
    # Determinism of the HF file too.
    hf2 = gen(pack_bin, os.path.join(work, 'hf2'), extra=('--format', 'hf'))
    need(read(os.path.join(hf, 'model.safetensors')) == read(os.path.join(hf2, 'model.safetensors')),
         'gen --format hf is not deterministic')
    # A new format into the same directory replaces the old weights.
    gen_into = os.path.join(work, 'q4nx')
    run(pack_bin, 'gen', '--preset', 'tiny', '--seed', '11', '--out', gen_into, '--format', 'hf')
    need(not os.path.exists(os.path.join(gen_into, 'model.q4nx')),
         'gen --format hf left the old model.q4nx (which the engine would load instead)')
    print(f'ok: HF pack {len(w)} BF16 tensors; Q4NX within the Q4_1 bound (worst |err| = '
          f'{worst:.3f} d) and bit-exact under numpy re-quantization')
    return 0


# ---- (b) convert ---------------------------------------------------------------------

def shard(hf_dir, out_dir, parts=3):
    """The HF pack split into `parts` shards plus model.safetensors.index.json."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for f in SIDE:
        shutil.copy(os.path.join(hf_dir, f), out_dir)
    entries, meta = st_entries(os.path.join(hf_dir, 'model.safetensors'))
    wmap, total = {}, 0
    for i in range(parts):
        part = entries[i::parts]  # interleaved: every shard holds every kind
        fn = f'model-{i + 1:05d}-of-{parts:05d}.safetensors'
        st_write(os.path.join(out_dir, fn), part, meta)
        for e in part:
            wmap[e[0]] = fn
            total += len(e[3])
    with open(os.path.join(out_dir, 'model.safetensors.index.json'), 'w') as f:
        json.dump({'metadata': {'total_size': total}, 'weight_map': wmap}, f, indent=2)
    return out_dir


def expect_fail(pack_bin, args, words, out_dir=None, code=1):
    r = run(pack_bin, *args, ok=(code,))
    for w in words:
        need(w in r.stderr + r.stdout, f'minicpmd-pack {" ".join(args)}: message lacks {w!r}:\n'
             f'{r.stderr}{r.stdout}')
    if out_dir and os.path.exists(out_dir):
        need(not os.path.exists(os.path.join(out_dir, 'model.q4nx')) and
             not any(f.endswith('.tmp') for f in (os.listdir(out_dir) if os.path.isdir(out_dir)
                                                  else [])),
             f'{out_dir}: a failed convert left files: {os.listdir(out_dir)}')
    return r


def mode_convert(pack_bin, work):
    q4 = gen(pack_bin, os.path.join(work, 'q4nx'))
    hf = gen(pack_bin, os.path.join(work, 'hf'), extra=('--format', 'hf'))
    out = os.path.join(work, 'out')
    shutil.rmtree(out, ignore_errors=True)
    run(pack_bin, 'convert', hf, out)
    for f in ['model.q4nx'] + SIDE:
        need(read(os.path.join(out, f)) == read(os.path.join(q4, f)),
             f'convert: {f} differs from gen\'s for the same preset and seed')
    need(sorted(os.listdir(out)) == sorted(os.listdir(q4)), f'convert wrote {os.listdir(out)}')

    sh = shard(hf, os.path.join(work, 'sharded'))
    out2 = os.path.join(work, 'out-sharded')
    shutil.rmtree(out2, ignore_errors=True)
    run(pack_bin, 'convert', sh, out2)
    need(read(os.path.join(out2, 'model.q4nx')) == read(os.path.join(q4, 'model.q4nx')),
         'convert of the sharded checkpoint differs')

    # Bad inputs: one clear message, exit 1 (2 for usage), nothing left behind.
    entries, meta = st_entries(os.path.join(hf, 'model.safetensors'))
    bad = os.path.join(work, 'bad')

    def bad_pack(tensors, config=None):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(hf, bad)
        st_write(os.path.join(bad, 'model.safetensors'), tensors, meta)
        if config:
            with open(os.path.join(bad, 'config.json'), 'w') as f:
                json.dump(config, f)
        return bad

    cfg = json.loads(read(os.path.join(hf, 'config.json')))
    fresh = os.path.join(work, 'fail-out', 'deeper')
    shutil.rmtree(os.path.dirname(fresh), ignore_errors=True)
    miss = 'model.layers.2.mlp.up_proj.weight'
    expect_fail(pack_bin, ['convert', bad_pack([e for e in entries if e[0] != miss]), fresh],
                [miss, 'not found'], fresh)
    need(not os.path.exists(fresh), 'a failed convert left the new output directory')
    # Wrong shape against config.json.
    expect_fail(pack_bin, ['convert', bad_pack(entries, {**cfg, 'intermediate_size': 512}), out2],
                ['mlp.gate_proj.weight', 'expected BF16 [512, 256]', '[768, 256]'])
    need(read(os.path.join(out2, 'model.q4nx')) == read(os.path.join(q4, 'model.q4nx')),
         'a failed convert touched the existing pack in OUT_DIR')
    # An integer dtype where a weight should be.
    ent = [(n, 'I16' if n == miss else dt, s, r) for n, dt, s, r in entries]
    expect_fail(pack_bin, ['convert', bad_pack(ent), fresh], [miss, 'I16'], fresh)
    # A tensor convert does not know (a bias) is refused, not dropped.
    extra = entries + [('model.layers.0.self_attn.q_proj.bias', 'BF16', [256], bytes(512))]
    expect_fail(pack_bin, ['convert', bad_pack(extra), fresh], ['q_proj.bias', 'unexpected'], fresh)
    # Truncated file (eng_st_open validates before anything is written).
    bad_pack(entries)
    p = os.path.join(bad, 'model.safetensors')
    os.truncate(p, os.path.getsize(p) - 1000)
    expect_fail(pack_bin, ['convert', bad, fresh], ['model.safetensors'], fresh)
    # A shard missing from the index's directory.
    sh2 = shard(hf, os.path.join(work, 'sharded-bad'))
    os.remove(os.path.join(sh2, 'model-00002-of-00003.safetensors'))
    expect_fail(pack_bin, ['convert', sh2, fresh], ['model-00002-of-00003.safetensors'], fresh)
    # No config.json; a Q4NX pack as input; OUT_DIR == HF_DIR; --kv-heads invalid.
    os.remove(os.path.join(bad, 'config.json'))
    expect_fail(pack_bin, ['convert', bad, fresh], ['config.json'], fresh)
    expect_fail(pack_bin, ['convert', q4, fresh], ['model.q4nx'], fresh)
    expect_fail(pack_bin, ['convert', hf, hf], ['must not be'], code=2)
    expect_fail(pack_bin, ['convert', hf, fresh, '--kv-heads', '3'], ['--kv-heads 3'], fresh,
                code=2)
    expect_fail(pack_bin, ['convert', hf], [], code=2)
    print('ok: convert == gen byte for byte (single file and 3 shards); 9 bad inputs refused '
          'cleanly')
    return 0


# ---- (c) inspect ---------------------------------------------------------------------

def inspect(pack_bin, d, code=0, strict=False):
    args = ['inspect', d, '--json'] + (['--strict'] if strict else [])
    r = run(pack_bin, *args, ok=(code,))
    rep = json.loads(r.stdout)
    t = run(pack_bin, 'inspect', d, *(['--strict'] if strict else []), ok=(code,)).stdout
    return rep, t


def problems(rep, severity='error'):
    return [p['message'] for p in rep['problems'] if p['severity'] == severity]


def mode_inspect(pack_bin, work):
    q4 = gen(pack_bin, os.path.join(work, 'q4nx'))
    hf = gen(pack_bin, os.path.join(work, 'hf'), extra=('--format', 'hf'))
    kv = gen(pack_bin, os.path.join(work, 'kv4'), extra=('--kv-heads', '4'))
    kvhf = gen(pack_bin, os.path.join(work, 'kv4hf'), extra=('--kv-heads', '4', '--format', 'hf'))
    sh = shard(hf, os.path.join(work, 'sharded'))
    deep = gen(pack_bin, os.path.join(work, 'deep'), 'deep')
    for d, fmt, kvh, rep_f in ((q4, 'q4nx', 2, 1), (hf, 'safetensors', 2, 1), (kv, 'q4nx', 4, 2),
                               (kvhf, 'safetensors', 4, 2), (sh, 'safetensors-sharded', 2, 1)):
        rep, text = inspect(pack_bin, d)
        cfg = json.loads(read(os.path.join(d, 'config.json')))
        n = 3 + 9 * cfg['num_hidden_layers']
        need(rep['ok'] and rep['errors'] == 0 and not rep['problems'], f'{d}: {rep["problems"]}')
        need(rep['weights']['format'] == fmt, f'{d}: format {rep["weights"]["format"]}')
        need(rep['totals']['tensors'] == n and rep['totals']['expected'] == n,
             f'{d}: totals {rep["totals"]}')
        need(len(rep['tensors']) == n, f'{d}: {len(rep["tensors"])} tensors listed')
        need(rep['architecture']['num_key_value_heads'] == kvh, f'{d}: architecture')
        need(rep['kv_heads'] == {'stored': kvh, 'distinct': 2, 'replication': rep_f},
             f'{d}: kv_heads {rep.get("kv_heads")}')
        need(rep['qk_norm'] == 'absent', f'{d}: qk_norm {rep["qk_norm"]}')
        need((rep_f > 1) == any('replicated KV heads' in s for s in rep['notes']),
             f'{d}: replication note {rep["notes"]}')
        # Sizes and logical shapes agree with the file.
        total = sum(t['bytes'] for t in rep['tensors'])
        need(total == rep['totals']['bytes'], f'{d}: bytes {total} != {rep["totals"]["bytes"]}')
        by_name = {t['name']: t for t in rep['tensors']}
        lm = by_name['lm_head.weight']
        if fmt == 'q4nx':
            need(lm['quant'] == 'Q4_1' and lm['logical'] == [1024, 256] and lm['shape'] == [32, 5120]
                 and lm['bytes'] == 32 * 5120, f'{d}: lm_head entry {lm}')
            need(rep['totals']['by_dtype']['Q4_1']['tensors'] == 1 + 7 * 4 and
                 rep['totals']['by_dtype']['BF16']['tensors'] == 2 + 2 * 4,
                 f'{d}: by_dtype {rep["totals"]["by_dtype"]}')
        else:
            need(lm['dtype'] == 'BF16' and lm['shape'] == [1024, 256] and 'logical' not in lm,
                 f'{d}: lm_head entry {lm}')
        need(f'{n} tensors ({n} expected)' in text and 'ok: 0 error(s)' in text,
             f'{d}: text output:\n{text}')
        if rep_f > 1:
            need('4 stored, 2 distinct (replicated)' in text, f'{d}: text lacks replication')
    rep, _ = inspect(pack_bin, deep)
    need(rep['totals']['tensors'] == 3 + 9 * 42 and rep['kv_heads']['distinct'] == 1,
         f'deep: {rep["totals"]} {rep.get("kv_heads")}')

    entries, meta = st_entries(os.path.join(q4, 'model.q4nx'))
    bad = os.path.join(work, 'bad')

    def bad_pack(tensors=None, config=None, src=q4, name='model.q4nx'):
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(src, bad)
        if tensors is not None:
            st_write(os.path.join(bad, name), tensors, meta)
        if config:
            with open(os.path.join(bad, 'config.json'), 'w') as f:
                json.dump(config, f)
        return bad

    # Truncated model.q4nx.
    bad_pack()
    p = os.path.join(bad, 'model.q4nx')
    os.truncate(p, os.path.getsize(p) - 5120)
    rep, text = inspect(pack_bin, bad, 1)
    need(any('model.q4nx' in m for m in problems(rep)), f'truncated: {rep["problems"]}')
    need('PROBLEMS' in text and 'error: ' in text, f'truncated: text:\n{text}')
    # Missing tensor.
    miss = 'model.layers.1.self_attn.v_proj.weight'
    rep, _ = inspect(pack_bin, bad_pack([e for e in entries if e[0] != miss]), 1)
    need(any(miss in m and 'missing' in m for m in problems(rep)), f'missing: {rep["problems"]}')
    need(rep['totals']['tensors'] == 38 and rep['totals']['expected'] == 39, 'missing: totals')
    # Shape mismatch against config.json (vocab) -> embed, lm_head both named.
    cfg = json.loads(read(os.path.join(q4, 'config.json')))
    rep, _ = inspect(pack_bin, bad_pack(config={**cfg, 'vocab_size': 2048}), 1)
    msgs = problems(rep)
    need(any('lm_head.weight' in m and '[64, 5120]' in m for m in msgs) and
         any('model.embed_tokens.weight' in m and '[2048, 256]' in m for m in msgs),
         f'vocab mismatch: {msgs}')
    # Missing tokenizer.json; broken config.json.
    bad_pack()
    os.remove(os.path.join(bad, 'tokenizer.json'))
    rep, _ = inspect(pack_bin, bad, 1)
    need(any('tokenizer.json' in m for m in problems(rep)), f'no tokenizer: {rep["problems"]}')
    bad_pack()
    with open(os.path.join(bad, 'config.json'), 'w') as f:
        f.write('{"hidden_size": 256,')
    rep, _ = inspect(pack_bin, bad, 1)
    need(any('config.json' in m for m in problems(rep)), f'bad config: {rep["problems"]}')
    need(len(rep['tensors']) == 39, 'bad config: the tensors should still be listed')
    # The all-ones QK-norm shim (FLM's inject_qk_norm.py): a warning, exit 0;
    # --strict makes it fail. Real (not all-ones) norms are only a note.
    ones = np.full(64, 0x3F80, '<u2').tobytes()
    shim = entries + [(f'model.layers.{i}.self_attn.{k}_norm.weight', 'BF16', [64], ones)
                      for i in range(4) for k in 'qk']
    rep, text = inspect(pack_bin, bad_pack(shim))
    need(rep['qk_norm'] == 'all-ones shim' and any('shim' in m for m in problems(rep, 'warning')),
         f'shim: {rep["problems"]}')
    need('warning: all-ones q_norm/k_norm in 4 layers' in text, f'shim text:\n{text}')
    inspect(pack_bin, bad, 1, strict=True)
    real = shim[:-1] + [(shim[-1][0], 'BF16', [64], np.full(64, 0x3F81, '<u2').tobytes())]
    rep, _ = inspect(pack_bin, bad_pack(real))
    need(rep['qk_norm'] == 'present' and not rep['problems'], f'real qk norm: {rep}')
    rep, _ = inspect(pack_bin, bad_pack(shim[:-2]), 1)
    need(any('every layer or none' in m for m in problems(rep)), f'partial qk: {rep["problems"]}')
    # Usage errors.
    run(pack_bin, 'inspect', ok=(2,))
    run(pack_bin, 'inspect', q4, '--bogus', ok=(2,))
    rep, _ = inspect(pack_bin, os.path.join(work, 'does-not-exist'), 1)
    print('ok: inspect: 6 good packs exit 0 with the right counts; truncated file, missing '
          'tensor, shape mismatch, missing tokenizer, bad config -> 1; shim warned')
    return 0


# ---- (d) convert --kv-heads --------------------------------------------------------------

def mode_convert_kv(pack_bin, work):
    q4kv = gen(pack_bin, os.path.join(work, 'q4nx-kv4'), extra=('--kv-heads', '4'))
    hf = gen(pack_bin, os.path.join(work, 'hf'), extra=('--format', 'hf'))
    out = os.path.join(work, 'out')
    shutil.rmtree(out, ignore_errors=True)
    run(pack_bin, 'convert', hf, out, '--kv-heads', '4')
    need(read(os.path.join(out, 'model.q4nx')) == read(os.path.join(q4kv, 'model.q4nx')),
         'convert --kv-heads 4 differs from gen --kv-heads 4')
    c_out = json.loads(read(os.path.join(out, 'config.json')))
    c_hf = json.loads(read(os.path.join(hf, 'config.json')))
    need(c_out == {**c_hf, 'num_key_value_heads': 4}, 'config.json: only num_key_value_heads '
         'should change')
    need(list(c_out) == list(c_hf), 'config.json: key order changed')
    need(read(os.path.join(out, 'config.json')) == read(os.path.join(q4kv, 'config.json')),
         'config.json differs from gen --kv-heads 4\'s')
    # The HF flavour of --kv-heads: heads repeated (repeat_interleave) in BF16.
    hfkv = gen(pack_bin, os.path.join(work, 'hf-kv4'), extra=('--format', 'hf', '--kv-heads', '4'))
    _, hb, db, wb = check_hf_pack(hf)
    _, hr, dr, wr = check_hf_pack(hfkv)
    hd, h = c_hf['head_dim'], c_hf['hidden_size']
    for name in wb:
        if name.endswith(('k_proj.weight', 'v_proj.weight')):
            want = np.repeat(wb[name].reshape(2, hd, h), 2, axis=0).reshape(4 * hd, h)
            need(np.array_equal(wr[name], want), f'{name}: HF heads are not repeated')
        else:
            need(st_tensor(hb, db, name) == st_tensor(hr, dr, name), f'{name}: changed by --kv-heads')
    # Converting the replicated HF pack as it is gives the same Q4NX again, and
    # replicating further (4 -> 4) is a no-op; 4 -> 2 is refused.
    out2 = os.path.join(work, 'out2')
    shutil.rmtree(out2, ignore_errors=True)
    run(pack_bin, 'convert', hfkv, out2)
    need(read(os.path.join(out2, 'model.q4nx')) == read(os.path.join(q4kv, 'model.q4nx')),
         'convert of gen --format hf --kv-heads 4 differs from gen --kv-heads 4')
    r = run(pack_bin, 'convert', hfkv, os.path.join(work, 'out3'), '--kv-heads', '2', ok=(2,))
    need('--kv-heads 2' in r.stderr, r.stderr)
    rep, _ = inspect(pack_bin, out)
    need(rep['kv_heads'] == {'stored': 4, 'distinct': 2, 'replication': 2}, f'{rep["kv_heads"]}')
    print('ok: convert --kv-heads 4 == gen --kv-heads 4 (model.q4nx and config.json bytes); '
          'HF --kv-heads repeats heads')
    return 0


def main(argv):
    mode, pack_bin, work = argv[1], argv[2], os.path.join(argv[3], argv[1])
    os.makedirs(work, exist_ok=True)
    modes = {'hf': mode_hf, 'convert': mode_convert, 'inspect': mode_inspect,
             'convert-kv': mode_convert_kv}
    if mode not in modes:
        print(f'FAIL: unknown mode {mode}')
        return 1
    try:
        return modes[mode](pack_bin, work)
    except Fail as e:
        print('FAIL:', e)
        return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
