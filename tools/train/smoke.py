#!/usr/bin/python3
"""Smoke test of the demo model's recipe (meson test train-smoke):

  1. a few training steps of a tiny config through train.py, exported as a
     Hugging Face checkpoint, which `minicpmd-pack inspect --strict` accepts and
     `minicpmd-pack convert` turns into a Q4NX pack that inspect accepts too;
  2. the recipe's pure-Python tokenizer and minicpmd's (`minicpmd-pack tokenize`,
     itself checked against Hugging Face's) give the same ids on rendered training
     conversations and odd strings, for that tokenizer and for the committed
     models/minicpm5-demo/tokenizer.json;
  3. the shared-prefix forward pass of training equals the plain one;
  4. the wired induction circuit copies at step 0 (the demo's shape, random
     token strings): ~all of a wide alphabet, and with the two-token match far
     more of strings whose tokens repeat than with the one-token match alone.

    smoke.py MINICPMD_PACK WORKDIR
Exit 77 (skip) when python3-torch or python3-jinja2 is missing."""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

try:
    import torch
    import jinja2  # noqa: F401
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-torch python3-jinja2)")
    sys.exit(77)

import corpus  # noqa: E402
import render  # noqa: E402
import tok  # noqa: E402
import train  # noqa: E402
import wiring  # noqa: E402
from model import Config, LlamaForCausalLM  # noqa: E402

ODD = ["Hello, world!  It's 12345 o'clock\n\n  x", "a\r\n b  \n\t c", "don't   stop'LL",
       " ?!?\n\n", "x  ", "\u00e9\u6f22\u5b57 3.14 -7", '{"name": "Ana", "age": 7}',
       "<think>\n\n</think>\n\n<function name=\"f\"><param name=\"k\">v</param></function>",
       "What's the weather in San Kiro?", "   leading", "trailing   \n", "1234567890"]


def run(*cmd, **kw):
    r = subprocess.run(list(cmd), capture_output=True, **kw)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))} exited {r.returncode}:\n"
                 f"{r.stdout.decode(errors='replace')}{r.stderr.decode(errors='replace')}")
    return r.stdout


def check_wiring():
    """Step-0 copying of the wired circuit in the demo's shape."""
    import random
    rng = random.Random(0)
    wide, few = list(range(30, 1900)), rng.sample(range(30, 1900), 16)
    acc = {}
    for two in (False, True):
        torch.manual_seed(1)
        m = LlamaForCausalLM(Config(**train.PRESETS["demo"]))
        wiring.wire_induction(m, two_back=two)
        with torch.no_grad():
            m.lm_head.weight.copy_(m.model.embed_tokens.weight)
        acc[two] = (wiring.copy_accuracy(m, wide, n=60), wiring.copy_accuracy(m, few, n=60))
    print(f"step 0 copy, one-token match: {acc[False][0]:.3f} of a wide alphabet, "
          f"{acc[False][1]:.3f} of 16 tokens; with the two-token match: "
          f"{acc[True][0]:.3f}, {acc[True][1]:.3f}")
    if min(acc[False][0], acc[True][0]) < 0.95 or acc[True][1] < 0.85 or \
            acc[True][1] < acc[False][1] + 0.15:
        sys.exit("FAIL: the wired circuit does not copy as wiring.py says")


def check_tokenizer(pack_bin, tok_path, n=150):
    tk = tok.Tokenizer.load(tok_path)
    tpl = render.load()
    g = corpus.Gen(99)
    texts = list(ODD)
    for i in range(n):
        msgs, tools, mode, _ = g.example()
        texts.append(render.render(tpl, msgs, tools, i % 2 == 1, mode))
    # One tokenize run per text (the CLI reads one text from stdin).
    for s in texts:
        ids = json.loads(run(pack_bin, "tokenize", tok_path, input=s.encode()))
        mine = tk.encode(s)
        if ids != mine:
            sys.exit(f"FAIL: {tok_path}: minicpmd and the recipe tokenize {s!r} differently:\n"
                     f"  minicpmd {ids}\n  recipe   {mine}")
        if tk.decode(mine) != s:
            sys.exit(f"FAIL: decode(encode({s!r})) = {tk.decode(mine)!r}")
    print(f"tokenizer {tok_path}: {len(texts)} texts, same ids as minicpmd")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    pack_bin, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf, q4 = os.path.join(work, "hf"), os.path.join(work, "q4nx")
    out = run("/usr/bin/python3", os.path.join(HERE, "train.py"), "--out", hf, "--preset",
              "smoke", "--steps", "6", "--batch-tokens", "1024", "--examples", "300",
              "--tok-examples", "300", "--eval-every", "0", "--qat-frac", "0.5",
              "--space-merges", "60", "--space-init", "--induction-init",
              "--two-back")
    print(out.decode().rstrip())
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
              "generation_config.json", "chat_template.jinja"):
        if not os.path.isfile(os.path.join(hf, f)):
            sys.exit(f"FAIL: the checkpoint has no {f}")
    print(run(pack_bin, "inspect", hf, "--strict").decode().splitlines()[-1])
    run(pack_bin, "convert", hf, q4)
    print(run(pack_bin, "inspect", q4, "--strict").decode().splitlines()[-1])

    check_tokenizer(pack_bin, os.path.join(hf, "tokenizer.json"))
    demo = os.path.join(ROOT, "models", "minicpm5-demo", "tokenizer.json")
    if os.path.exists(demo):    # the trained demo, once one is committed
        check_tokenizer(pack_bin, demo)

    torch.manual_seed(0)
    m = LlamaForCausalLM(Config(vocab_size=64, hidden_size=64, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                intermediate_size=96))
    x, pre = torch.randint(0, 64, (3, 9)), torch.randint(0, 64, (1, 5))
    with torch.no_grad():
        full = m(torch.cat([pre.expand(3, -1), x], 1))[:, 5:]
        part = m(x, pre)
    err = float((full - part).abs().max())
    if err > 1e-4:
        sys.exit(f"FAIL: the shared-prefix forward differs by {err}")
    print(f"shared-prefix forward == plain forward (max diff {err:.1e})")
    check_wiring()
    print("ok")


if __name__ == "__main__":
    main()
