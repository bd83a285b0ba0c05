#!/usr/bin/python3
"""Meson test model-gguf: `minicpmd-pack convert MODEL.gguf` against GGUFs written
by tests/packgen/gguf_write.py (an independent numpy writer made from the GGUF
spec), and the numpy reference forward pass (ref.py).

  gguf.py PACK_BIN MODEL_RUN WORKDIR

From the BF16 weights of `gen --preset tiny --format hf`:
  exact  a GGUF with every matmul Q4_0 (even layers) or Q4_1 (odd layers and
         output), scales chosen BF16-representable (as in a GGUF exported from
         a pack), BF16 embedding, F32 norms, Q/K rows permuted as llama.cpp's
         converter does, the tokenizer in tokenizer.ggml.*. The converted pack's
         weights must equal the GGUF's dequantized weights (Q/K unpermuted here)
         exactly: the codes are carried, not re-quantized. Then the C engine on
         the pack vs ref.py run on the GGUF's own weights: logits within
         compare.py's f32 bound (2e-3 * (1 + max |logit|)).
  mixed  Q8_0, F16, BF16 matmuls (re-quantized to Q4_1 by convert: each weight
         within d/2 + BF16 rounding of d and m of the GGUF's value), a Q4_1 layer
         with ordinary F16 scales (codes kept, d and m rounded to BF16: within
         (15|d| + |m|) 2^-8, BF16's half ulp), F16 embedding and no output.weight (tied); C vs
         ref.py on the GGUF's weights within the q8-free f32 bound plus the
         re-quantization (checked against ref on the pack, tight, and against
         the GGUF weights, loose).
  tokenizer: --tokenizer copies the file byte for byte; from the metadata the
         pack tokenizes the tokenizer corpus as the HF pack does.
  export: `export-gguf` of a gen pack read back by gguf_write.py: --type q4_1
         holds the pack's weights exactly and converts back to the same
         model.q4nx byte for byte; --type q4_0 within one step.
  refusals: truncated file, bad magic, an unsupported tensor type, an extra
         tensor, another architecture, RoPE scaling: exit 1, one line naming
         the problem, no output directory.
Debian's /usr/bin/python3 + numpy."""
import base64
import json
import os
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, '..', 'packgen'))
import compare  # noqa: E402
import gguf_write as G  # noqa: E402
import ref  # noqa: E402

ROLES = [('attn_q', 'self_attn.q_proj', 'q'), ('attn_k', 'self_attn.k_proj', 'k'),
         ('attn_v', 'self_attn.v_proj', 'v'), ('attn_output', 'self_attn.o_proj', 'o'),
         ('ffn_gate', 'mlp.gate_proj', 'gate'), ('ffn_up', 'mlp.up_proj', 'up'),
         ('ffn_down', 'mlp.down_proj', 'down')]
fail = compare.fail


def hf_weights(hf):
    st = ref.read_safetensors(os.path.join(hf, 'model.safetensors'))
    out = {}
    for name, (dtype, shape, raw) in st.items():
        assert dtype == 'BF16', name
        out[name] = ref.bf16_to_f32(np.asarray(raw).view('<u2')).reshape(shape)
    return out


def tokenizer_kv(hf):
    with open(os.path.join(hf, 'tokenizer.json')) as f:
        tj = json.load(f)
    with open(os.path.join(hf, 'config.json')) as f:
        V = json.load(f)['vocab_size']
    toks, types = [None] * V, [1] * V
    for s, i in tj['model']['vocab'].items():
        toks[i] = s
    for a in tj['added_tokens']:
        toks[a['id']] = a['content']
        types[a['id']] = 3 if a['special'] else 4
    assert None not in toks
    merges = [m if isinstance(m, str) else ' '.join(m) for m in tj['model']['merges']]
    with open(os.path.join(hf, 'chat_template.jinja')) as f:
        tmpl = f.read()
    return [('tokenizer.ggml.model', G.STRING, 'gpt2'),
            ('tokenizer.ggml.pre', G.STRING, 'llama-bpe'),
            ('tokenizer.ggml.tokens', G.ARRAY, (G.STRING, toks)),
            ('tokenizer.ggml.token_type', G.ARRAY, (G.I32, types)),
            ('tokenizer.ggml.merges', G.ARRAY, (G.STRING, merges)),
            ('tokenizer.ggml.bos_token_id', G.U32, 0),
            ('tokenizer.ggml.eos_token_id', G.U32, 1),
            ('tokenizer.chat_template', G.STRING, tmpl)]


def llama_kv(cfg, extra=()):
    return [('general.architecture', G.STRING, 'llama'),
            ('general.alignment', G.U32, 32),
            ('llama.block_count', G.U32, cfg['num_hidden_layers']),
            ('llama.context_length', G.U32, cfg['max_position_embeddings']),
            ('llama.embedding_length', G.U32, cfg['hidden_size']),
            ('llama.feed_forward_length', G.U32, cfg['intermediate_size']),
            ('llama.attention.head_count', G.U32, cfg['num_attention_heads']),
            ('llama.attention.head_count_kv', G.U32, cfg['num_key_value_heads']),
            ('llama.attention.key_length', G.U32, cfg['head_dim']),
            ('llama.rope.freq_base', G.F32, float(cfg['rope_theta'])),
            ('llama.attention.layer_norm_rms_epsilon', G.F32, float(cfg['rms_norm_eps'])),
            *extra]


def build(hf, path, matmul_type, embed_type, lm_type, bf16_scales, extra_kv=(), extra_t=(),
          drop=()):
    """Writes a GGUF of the HF pack's weights; matmul_type(layer) -> ggml type;
    lm_type None: no output.weight. Returns {gguf name: (type, shape)} written."""
    with open(os.path.join(hf, 'config.json')) as f:
        cfg = json.load(f)
    W = hf_weights(hf)
    nh, nkv = cfg['num_attention_heads'], cfg['num_key_value_heads']
    ts = [('token_embd.weight', embed_type, W['model.embed_tokens.weight'])]
    for l in range(cfg['num_hidden_layers']):
        p = f'model.layers.{l}.'
        ts.append((f'blk.{l}.attn_norm.weight', G.T_F32, W[p + 'input_layernorm.weight']))
        ts.append((f'blk.{l}.ffn_norm.weight', G.T_F32, W[p + 'post_attention_layernorm.weight']))
        for g, h, _ in ROLES:
            w = W[p + h + '.weight']
            if g == 'attn_q':
                w = G.permute(w, nh)
            elif g == 'attn_k':
                w = G.permute(w, nkv)
            ts.append((f'blk.{l}.{g}.weight', matmul_type(l), w))
    ts.append(('output_norm.weight', G.T_F32, W['model.norm.weight']))
    if lm_type is not None:
        ts.append(('output.weight', lm_type, W['lm_head.weight']))
    tensors = [(n, t, w.shape, G.encode(w, t, bf16_scales)) for n, t, w in ts if n not in drop]
    tensors += list(extra_t)
    G.write(path, llama_kv(cfg, extra_kv) + tokenizer_kv(hf), tensors)
    return path


def gguf_model(pack, gguf_path):
    """ref.Model of the converted pack with every weight replaced by the GGUF's own
    (decoded and unpermuted here): the reference forward pass of the GGUF."""
    M = ref.Model(pack)
    _, T = G.read(gguf_path)

    def dec(name):
        t, shape, raw = T[name]
        return G.decode(raw, t, shape).astype(np.float64)

    class Dense:
        def __init__(self, w):
            self.w, self.rows, self.cols = w, w.shape[0], w.shape[1]

    M.embed = dec('token_embd.weight')
    M.norm = dec('output_norm.weight')
    M.lm = Dense(dec('output.weight') if 'output.weight' in T else M.embed)
    for l, L in enumerate(M.layers):
        L['in_norm'] = dec(f'blk.{l}.attn_norm.weight')
        L['post_norm'] = dec(f'blk.{l}.ffn_norm.weight')
        for g, _, k in ROLES:
            w = dec(f'blk.{l}.{g}.weight')
            if k == 'q':
                w = G.unpermute(w, M.nh)
            elif k == 'k':
                w = G.unpermute(w, M.nkv)
            L[k] = Dense(w)
    return M, T


def convert(pack_bin, src, out, *extra, ok=0):
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([pack_bin, 'convert', src, out, *extra], capture_output=True, text=True)
    if r.returncode != ok:
        print(r.stderr)
        raise SystemExit(f'FAIL: convert {src}: exit {r.returncode}, want {ok}')
    return r


def check_weights(pack, gguf_path, exact_roles, what):
    """Pack weights vs the GGUF's: exactly for Q4_0/Q4_1 codes with BF16 scales;
    else within the bound of what convert did to them."""
    P = ref.Model(pack)
    M, T = gguf_model(pack, gguf_path)
    worst = {}
    for l in range(P.L):
        for g, _, k in ROLES:
            W, ref_w = P.layers[l][k], M.layers[l][k].w
            t = T[f'blk.{l}.{g}.weight'][0]
            name = G.TYPE_NAMES[t]
            if t in (G.T_Q4_0, G.T_Q4_1):
                d = np.abs(W.w - ref_w)
                if exact_roles:
                    if d.max() != 0:
                        fail(f'{what}: layer {l} {k} ({name}): dequantized weights differ by '
                             f'{d.max():.3e}: not carried over exactly')
                    worst[name] = 0.0
                else:
                    q, dd, mm = ref.unpack_q4_1(W.raw, W.rows, W.cols)
                    D = np.repeat(np.abs(dd), 32, axis=1)[:, :W.cols]
                    Mm = np.repeat(np.abs(mm), 32, axis=1)[:, :W.cols]
                    r = float((d / ((15 * D + Mm) * 2.0 ** -8 * 1.001 + 1e-30)).max())
                    worst[name] = max(worst.get(name, 0), r)
            else:
                _, wd, wm = W.parts()
                D = np.repeat(wd, 32, axis=1)[:, :W.cols]
                Mm = np.abs(np.repeat(wm, 32, axis=1)[:, :W.cols])
                bound = D / 2 + (15 * D + Mm) * 2.0 ** -8 + 1e-7
                worst[name] = max(worst.get(name, 0),
                                  float((np.abs(W.w - ref_w) / bound).max()))
    for name, r in sorted(worst.items()):
        print(f'  {what}: {name} matmuls: worst |w_pack - w_gguf| / bound {r:.3f}'
              + (' (exact)' if exact_roles and r == 0 else ''))
        if r > 1:
            fail(f'{what}: {name} weights outside their bound ({r:.3f})')
    if not np.array_equal(P.embed, ref.round_bf16(M.embed)):
        fail(f'{what}: embedding is not the GGUF\'s (rounded to BF16)')
    for l in range(P.L):
        for k in ('in_norm', 'post_norm'):
            if not np.array_equal(P.layers[l][k], ref.round_bf16(M.layers[l][k])):
                fail(f'{what}: layer {l} {k} differs')
    return P, M


def logits_vs_gguf(model_run, pack, M, what, seed, tol):
    prompt = compare.prompt_for(M.V, 21, seed)
    steps = 8
    r = ref.run(M, 'f32', prompt, steps)
    force = r['greedy'][:steps]
    c = compare.run_c(model_run, pack, 'f32', prompt, steps, force)
    compare.compare(r, c, tol, f'{what}: C on the converted pack vs ref on the GGUF weights')
    return r, force


def tokenize(pack_bin, pack, text):
    r = subprocess.run([pack_bin, 'tokenize', pack], input=text, capture_output=True)
    if r.returncode != 0:
        raise SystemExit(f'FAIL: tokenize {pack}: {r.stderr.decode(errors="replace")}')
    return json.loads(r.stdout)


def refusals(pack_bin, hf, good, work):
    with open(good, 'rb') as f:
        data = f.read()
    cases = []
    p = os.path.join(work, 'truncated.gguf')
    with open(p, 'wb') as f:
        f.write(data[:len(data) // 3])
    cases.append((p, 'past the end'))
    p = os.path.join(work, 'magic.gguf')
    with open(p, 'wb') as f:
        f.write(b'GGUF' + b'\x01\x00\x00\x00' + data[8:64])
    cases.append((p, 'version 1'))
    q4k = ('blk.0.attn_q.bias', 12, (256,), np.zeros(144, np.uint8))   # Q4_K: 144 B / 256
    cases.append((build(hf, os.path.join(work, 'q4k.gguf'), lambda l: G.T_Q4_1, G.T_BF16,
                        G.T_Q4_1, True, extra_t=[q4k]), 'ggml type 12'))
    bias = ('blk.0.attn_q.bias', G.T_F32, (256,), np.zeros(256, np.float32).view(np.uint8))
    cases.append((build(hf, os.path.join(work, 'bias.gguf'), lambda l: G.T_Q4_1, G.T_BF16,
                        G.T_Q4_1, True, extra_t=[bias]), "unexpected tensor 'blk.0.attn_q.bias'"))
    cases.append((build(hf, os.path.join(work, 'rope.gguf'), lambda l: G.T_Q4_1, G.T_BF16,
                        G.T_Q4_1, True,
                        extra_kv=[('llama.rope.scaling.type', G.STRING, 'linear')]),
                  'RoPE scaling'))
    cases.append((build(hf, os.path.join(work, 'noq.gguf'), lambda l: G.T_Q4_1, G.T_BF16,
                        G.T_Q4_1, True, drop=('blk.2.attn_q.weight',)),
                  "'blk.2.attn_q.weight' is missing"))
    for path, want in cases:
        out = os.path.join(work, 'refused')
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run([pack_bin, 'convert', path, out], capture_output=True, text=True)
        lines = r.stderr.strip().split('\n')
        ok = r.returncode == 1 and len(lines) == 1 and want in lines[0] and not os.path.exists(out)
        print(f'  {os.path.basename(path)}: exit {r.returncode}: {r.stderr.strip()}')
        if not ok:
            fail(f'{os.path.basename(path)}: expected exit 1 with one line containing '
                 f'{want!r} and no output directory')


def export(pack_bin, work):
    """export-gguf of a gen pack, read back by gguf_write.py's own reader: q4_1
    carries every weight exactly (Q/K permuted as llama.cpp expects) and converts
    back to the same model.q4nx byte for byte; q4_0 is within one step |d| (half a
    step but where Q4_0's -8d .. 7d range clips)."""
    pack = compare.gen(pack_bin, os.path.join(work, 'exp-pack'), 'tiny', 8)
    P = ref.Model(pack)
    for typ in ('q4_1', 'q4_0'):
        path = os.path.join(work, f'exp-{typ}.gguf')
        r = subprocess.run([pack_bin, 'export-gguf', pack, path, '--type', typ],
                           capture_output=True, text=True)
        print('  ' + r.stderr.strip())
        if r.returncode != 0:
            fail(f'export-gguf --type {typ}: exit {r.returncode}')
            continue
        kv, T = G.read(path)
        if kv['general.architecture'] != 'llama' or kv['llama.block_count'] != P.L or \
                kv['llama.attention.head_count_kv'] != P.nkv or \
                abs(kv['llama.rope.freq_base'] - P.theta) > 1e-3 * P.theta or \
                len(kv['tokenizer.ggml.tokens']) != P.V:
            fail(f'{typ}: metadata does not describe the pack')
        worst = 0.0
        for l in range(P.L):
            for g, _, k in ROLES:
                t, shape, raw = T[f'blk.{l}.{g}.weight']
                w = G.decode(raw, t, shape)
                if k == 'q':
                    w = G.unpermute(w, P.nh)
                elif k == 'k':
                    w = G.unpermute(w, P.nkv)
                W = P.layers[l][k]
                if typ == 'q4_1':
                    if t != G.T_Q4_1 or not np.array_equal(w.astype(np.float64), W.w):
                        fail(f'q4_1: layer {l} {k}: not the pack\'s weights exactly')
                else:
                    _, d, _ = G.q4_parts(raw, t, shape[0], shape[1])
                    if k in ('q', 'k'):
                        d = G.unpermute(d, P.nh if k == 'q' else P.nkv)
                    step = np.repeat(np.abs(d), 32, axis=1).astype(np.float64) + 1e-30
                    worst = max(worst, float((np.abs(w - W.w) / step).max()))
        if typ == 'q4_0':
            # Half a step, except where Q4_0's range (-8d .. 7d) clips the group's far
            # end: up to one step there.
            print(f'  q4_0: worst |w_gguf - w_pack| / |d| {worst:.3f}')
            if worst > 1.001:
                fail('q4_0: re-quantized weights off by more than one step')
        if typ == 'q4_1':
            back = os.path.join(work, 'exp-back')
            convert(pack_bin, path, back)
            with open(os.path.join(back, 'model.q4nx'), 'rb') as a, \
                    open(os.path.join(pack, 'model.q4nx'), 'rb') as b:
                same = a.read() == b.read()
            print('  q4_1 GGUF converted back: model.q4nx '
                  + ('byte-identical' if same else 'DIFFERS'))
            if not same:
                fail('export-gguf q4_1 + convert is not the identity on model.q4nx')


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    pack_bin, model_run, work = argv[1:]
    work = os.path.join(work, 'gguf')
    os.makedirs(work, exist_ok=True)
    hf = compare.gen(pack_bin, os.path.join(work, 'hf'), 'tiny', 6, ('--format', 'hf'))

    print('exact: Q4_0/Q4_1 matmuls with BF16-representable scales')
    ga = build(hf, os.path.join(work, 'exact.gguf'),
               lambda l: G.T_Q4_0 if l % 2 == 0 else G.T_Q4_1, G.T_BF16, G.T_Q4_1, True)
    pa = os.path.join(work, 'exact')
    r = convert(pack_bin, ga, pa)
    print('  ' + r.stderr.strip().split('\n')[-1])
    if ' 0 rounded' not in r.stderr:
        fail('exact: convert reports rounded scales')
    _, M = check_weights(pa, ga, True, 'exact')
    logits_vs_gguf(model_run, pa, M, 'exact', 6, compare.F32_TOL)
    with open(os.path.join(pa, 'config.json')) as f:
        cfg = json.load(f)
    with open(os.path.join(hf, 'config.json')) as f:
        hcfg = json.load(f)
    for k in ('hidden_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads',
              'head_dim', 'intermediate_size', 'vocab_size', 'rms_norm_eps', 'rope_theta',
              'max_position_embeddings'):
        if cfg.get(k) != hcfg.get(k):
            fail(f'config.json {k}: {cfg.get(k)!r}, the HF pack has {hcfg.get(k)!r}')

    print('mixed: Q8_0, F16, BF16, F16-scaled Q4_1 matmuls, F16 embedding, tied output')
    types = {0: G.T_Q8_0, 1: G.T_F16, 2: G.T_BF16, 3: G.T_Q4_1}
    gb = build(hf, os.path.join(work, 'mixed.gguf'), lambda l: types[l], G.T_F16, None, False)
    pb = os.path.join(work, 'mixed')
    r = convert(pack_bin, gb, pb)
    print('  ' + r.stderr.strip().split('\n')[-1])
    P, M = check_weights(pb, gb, False, 'mixed')
    # The pack computes with re-quantized weights: C vs ref on the pack (tight), and
    # ref on the pack vs ref on the GGUF (reported: the re-quantization's effect).
    prompt = compare.prompt_for(M.V, 21, 7)
    rg = ref.run(M, 'f32', prompt, 8)
    force = rg['greedy'][:8]
    rp = ref.run(P, 'f32', prompt, 8, force=force)
    c = compare.run_c(model_run, pb, 'f32', prompt, 8, force)
    compare.compare(rp, c, compare.F32_TOL, 'mixed: C vs ref on the converted pack')
    print(f'  mixed: ref on the pack vs ref on the GGUF weights: '
          f'{compare.rel_dist(rg, rp):.3e} of (1 + M) (Q4_1 re-quantization of Q8_0/F16/BF16)')

    print('tokenizer')
    pt = os.path.join(work, 'exact-tok')
    convert(pack_bin, ga, pt, '--tokenizer', os.path.join(hf, 'tokenizer.json'))
    with open(os.path.join(pt, 'tokenizer.json'), 'rb') as f, \
            open(os.path.join(hf, 'tokenizer.json'), 'rb') as g:
        if f.read() != g.read():
            fail('--tokenizer: tokenizer.json is not the given file')
    texts = []
    with open(os.path.join(HERE, '..', 'tokenizer', 'corpus.jsonl')) as f:
        for line in f:
            texts.append(base64.b64decode(json.loads(line)['b64']))
    blob = b'\n'.join(texts[:400])
    a, b = tokenize(pack_bin, hf, blob), tokenize(pack_bin, pa, blob)
    print(f'  {len(blob)} bytes of the tokenizer corpus: {len(a)} tokens (HF pack), '
          f'{len(b)} (from tokenizer.ggml.*)')
    if a != b:
        k = next(i for i, (x, y) in enumerate(zip(a + [None], b + [None])) if x != y)
        fail(f'tokenizer from the GGUF metadata differs from the HF pack\'s at token {k}')
    if not os.path.exists(os.path.join(pa, 'chat_template.jinja')):
        fail('chat_template.jinja not written from tokenizer.chat_template')

    print('export-gguf')
    export(pack_bin, work)

    print('refusals')
    refusals(pack_bin, hf, ga, work)
    if compare.failures:
        print(f'{len(compare.failures)} failure(s)')
        return 1
    print('ok')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
