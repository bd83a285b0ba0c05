#!/usr/bin/python3
"""Meson tests of `minicpmd-pack gen` (suite unit, names packgen-*):

  packgen.py determinism PACK_BIN WORKDIR   same seed -> identical bytes; new seed -> new weights
  packgen.py check PACK_BIN WORKDIR TEMPLATE  check.py on fresh tiny and deep packs
  packgen.py kvrep PACK_BIN WORKDIR         --kv-heads 4: K/V heads repeated, rest unchanged
  packgen.py tokenize PACK_BIN WORKDIR      the daemon's tokenizer loads and round-trips it
  packgen.py daemon PACK_BIN WORKDIR MINICPMD  `minicpmd --check --model PACK` exits 0
  packgen.py hf PACK_BIN WORKDIR ORACLE_RUN CORPUS ORACLE_DIR
                                            tiny, demo and 2b tokenizers: our ids == tokenizers.js
                                            on every valid UTF-8 corpus string (77 = skip without node)

Each mode generates its packs under WORKDIR/<mode>, so the tests can run in parallel."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check  # noqa: E402

FILES = ['config.json', 'model.q4nx', 'tokenizer.json', 'tokenizer_config.json',
         'generation_config.json', 'chat_template.jinja']


def gen(pack_bin, out, preset='tiny', seed=1, extra=()):
    shutil.rmtree(out, ignore_errors=True)
    subprocess.run([pack_bin, 'gen', '--preset', preset, '--seed', str(seed), '--out', out,
                    *extra], check=True)
    return out


def read(d, f):
    with open(os.path.join(d, f), 'rb') as fh:
        return fh.read()


def fail(msg):
    print('FAIL:', msg)
    return 1


def determinism(pack_bin, work):
    a = gen(pack_bin, os.path.join(work, 'a'), seed=1)
    b = gen(pack_bin, os.path.join(work, 'b'), seed=1)
    c = gen(pack_bin, os.path.join(work, 'c'), seed=2)
    for f in FILES:
        if read(a, f) != read(b, f):
            return fail(f'{f}: seed 1 twice gave different bytes')
    if read(a, 'model.q4nx') == read(c, 'model.q4nx'):
        return fail('model.q4nx: seeds 1 and 2 gave the same weights')
    ha, _ = check.read_q4nx(os.path.join(a, 'model.q4nx'))
    hc, _ = check.read_q4nx(os.path.join(c, 'model.q4nx'))
    if ha != hc:
        return fail('the header (names, shapes, offsets) depends on the seed')
    for f in ('tokenizer.json', 'chat_template.jinja', 'generation_config.json'):
        if read(a, f) != read(c, f):
            return fail(f'{f} depends on the seed')
    print('ok: identical for one seed, different weights for another')
    return 0


def run_check(pack_bin, work, template):
    rc = 0
    for preset in ('tiny', 'deep'):
        check.failures.clear()
        rc |= check.main(['check.py', gen(pack_bin, os.path.join(work, preset), preset, 7),
                          '--template', template])
    return rc


def kvrep(pack_bin, work):
    base = gen(pack_bin, os.path.join(work, 'base'), seed=3)
    rep = gen(pack_bin, os.path.join(work, 'rep'), seed=3, extra=('--kv-heads', '4'))
    cb = json.loads(read(base, 'config.json'))
    cr = json.loads(read(rep, 'config.json'))
    if cr['num_key_value_heads'] != 4 or {**cr, 'num_key_value_heads': 2} != cb:
        return fail('config.json: only num_key_value_heads should change (to 4)')
    check.failures.clear()
    if check.main(['check.py', rep]):
        return 1
    hb, db = check.read_q4nx(os.path.join(base, 'model.q4nx'))
    hr, dr = check.read_q4nx(os.path.join(rep, 'model.q4nx'))
    hd, h = cb['head_dim'], cb['hidden_size']
    for name, eb in hb.items():
        if name == '__metadata__':
            continue
        er = hr[name]
        xb = bytes(db[eb['data_offsets'][0]:eb['data_offsets'][1]])
        xr = bytes(dr[er['data_offsets'][0]:er['data_offsets'][1]])
        if name.endswith(('k_proj.weight', 'v_proj.weight')):
            import numpy as np
            wb = check.dequant(np.frombuffer(xb, np.uint8), 2 * hd, h)
            wr = check.dequant(np.frombuffer(xr, np.uint8), 4 * hd, h)
            # New head j is the model's head j // 2 (repeat_interleave,
            # docs/model-minicpm5.md §3.4).
            want = np.repeat(wb.reshape(2, hd, h), 2, axis=0).reshape(4 * hd, h)
            if not np.array_equal(wr, want):
                return fail(f'{name}: replicated heads are not copies of the original heads')
        elif xb != xr:
            return fail(f'{name}: changed by --kv-heads')
    print('ok: --kv-heads 4 repeats each K/V head, everything else identical')
    return 0


def tokenize(pack_bin, work):
    d = gen(pack_bin, os.path.join(work, 'tiny'))

    def enc(text, *flags):
        r = subprocess.run([pack_bin, 'tokenize', d, *flags], input=text.encode(),
                           capture_output=True, check=True)
        return json.loads(r.stdout)

    def dec(ids):
        r = subprocess.run([pack_bin, 'tokenize', d, '--decode'], input=json.dumps(ids).encode(),
                           capture_output=True, check=True)
        return r.stdout.decode()

    texts = ['Hello, world! The quick brown fox jumps over the lazy dog.',
             'Numbers 1234567 and 3.14; code: def add(a, b):\n    return a + b\n',
             'Ünïcödé café, 日本語, emoji 🙂 and\ttabs  \n\n  spaces ',
             "It's what we'll do, they're sure I'd've known."]
    for t in texts:
        ids = enc(t)
        if dec(ids) != t:
            return fail(f'round trip of {t!r}: {ids} -> {dec(ids)!r}')
        if any(i < 22 or i >= 1022 for i in ids):
            return fail(f'{t!r}: plain text produced an added-token id: {ids}')
    common = enc(' the')
    if len(common) != 1:
        return fail(f'" the" should be one learned token, got {common}')
    cfg = json.loads(read(d, 'config.json'))
    im_start, im_end = cfg['eos_token_id'][1] - 1, cfg['eos_token_id'][1]
    chat = ('<s><|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n'
            '<|im_start|>assistant\n<think>\n</think>\n<tool_call><function=f><param=x>1</param>'
            '</function></tool_call><|im_end|>')
    ids = enc(chat)
    for s, i in (('<s>', 0), ('<|im_start|>', im_start), ('<|im_end|>', im_end), ('<think>', 8),
                 ('</think>', 9), ('<tool_call>', 2), ('</tool_call>', 3), ('<function', 18),
                 ('</function>', 19), ('<param', 20), ('</param>', 21)):
        if ids.count(i) != chat.count(s):
            return fail(f'{s} should encode as id {i} each time it appears: {ids}')
    if dec(ids) != chat:
        return fail(f'chat round trip: {dec(ids)!r}')
    plain = enc(chat, '--no-special')
    if 0 in plain or im_end in plain:
        return fail('--no-special still produced special ids')
    print(f'ok: {len(texts)} texts and a chat prompt round-trip ({len(ids)} ids)')
    return 0


def daemon(pack_bin, work, minicpmd):
    d = gen(pack_bin, os.path.join(work, 'tiny'))
    r = subprocess.run([minicpmd, '--check', '--model', d], capture_output=True, text=True)
    sys.stdout.write(r.stdout + r.stderr)
    return 0 if r.returncode == 0 else fail(f'minicpmd --check exited {r.returncode}')


def hf(pack_bin, work, oracle_run, corpus, oracle_dir):
    import base64
    node = shutil.which('node')
    if not node or not os.path.isdir(os.path.join(oracle_dir, 'node_modules')):
        print('SKIP: node or tests/oracle/node_modules missing (tools/deps.sh test)')
        return 77
    lines, strings = [], []
    with open(corpus) as f:
        for line in f:
            raw = base64.b64decode(json.loads(line)['b64'])
            try:
                strings.append(raw.decode('utf-8'))
            except UnicodeDecodeError:
                continue
            lines.append(line)
    chat = ('<s><|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n'
            '</think>\n\n<tool_call>\n<function=add>\n<param=a>2</param>\n</function>\n'
            '</tool_call><|im_end|>\n')
    strings.append(chat)
    lines.append(json.dumps({'b64': base64.b64encode(chat.encode()).decode()}) + '\n')
    sub = os.path.join(work, 'corpus.jsonl')
    with open(sub, 'w') as f:
        f.writelines(lines)
    with open(os.path.join(work, 'strings.json'), 'w') as f:
        json.dump(strings, f)
    for preset, extra in (('tiny', ()), ('demo', ()), ('2b', ('--no-weights',))):
        d = gen(pack_bin, os.path.join(work, preset), preset, 1, extra)
        tj = os.path.join(d, 'tokenizer.json')
        ours = subprocess.run([oracle_run, tj, sub, 'special'], capture_output=True, text=True,
                              check=True).stdout.splitlines()
        theirs = json.loads(subprocess.run(
            [node, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'hf-encode.mjs'),
             oracle_dir, tj, os.path.join(work, 'strings.json')],
            capture_output=True, text=True, check=True).stdout)
        for s, o, t in zip(strings, ours, theirs):
            if json.loads(o)['ids'] != t:
                return fail(f'{preset}: {s[:80]!r}: ours {json.loads(o)["ids"][:20]} '
                            f'tokenizers.js {t[:20]}')
        if len(ours) != len(strings):
            return fail(f'{preset}: oracle-run printed {len(ours)} lines for {len(strings)}')
        print(f'ok: {preset}: {len(strings)} strings encode identically')
    return 0


def main(argv):
    mode, pack_bin, work = argv[1], argv[2], os.path.join(argv[3], argv[1])
    os.makedirs(work, exist_ok=True)
    if mode == 'determinism':
        return determinism(pack_bin, work)
    if mode == 'check':
        return run_check(pack_bin, work, argv[4])
    if mode == 'kvrep':
        return kvrep(pack_bin, work)
    if mode == 'tokenize':
        return tokenize(pack_bin, work)
    if mode == 'daemon':
        return daemon(pack_bin, work, argv[4])
    if mode == 'hf':
        return hf(pack_bin, work, argv[4], argv[5], argv[6])
    return fail(f'unknown mode {mode}')


if __name__ == '__main__':
    sys.exit(main(sys.argv))
