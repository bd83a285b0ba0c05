#!/usr/bin/python3
"""Which step of copying does the model learn, and which not?

    /usr/bin/python3 tools/train/copydiag.py [--whole-word-merges] [--layers 2]
                                             [--steps 1500] [--tied-init]
                                             [--space-merges N] [--space-init]
                                             [--induction-init]

Trains train.py's model on the copying skills only (echo, the tool call's city,
the JSON name: corpus.Gen(copy=True)) and, every 250 steps, reports the
teacher-forced accuracy on held-out conversations, on the tokens of the copied
text only (the echoed words, the city in the call, the JSON name), split by
where the token stands in it:
  span_first  the copied text's first token (found by what precedes it in the
              prompt: "me: ", "in ", "name ");
  word_start  the first token of a later word (after a space token when spaces
              are tokens of their own: finding it takes the two tokens before,
              not one);
  space       a space token between words;
  in_word     a word's second or later piece (one-token induction);
and the accuracy on every other trained token (template, digits) as "other".
The all-or-nothing eval of train.py says only that a skill fails; this says at
which token. Nothing here is used by the build."""
import argparse
import os
import random
import re
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import render  # noqa: E402
import train as T  # noqa: E402
from model import Config  # noqa: E402


COPIED = [re.compile(r"^Repeat after me: (.+)$"), re.compile(r"^What's the weather in (.+)\?$"),
          re.compile(r"with name (.+) and age \d+\.$")]


def copied_text(msgs):
    """The text the answer must copy from the last user message."""
    u = [m["content"] for m in msgs if m["role"] == "user"][-1]
    for rx in COPIED:
        m = rx.search(u)
        if m:
            return m.group(1)
    return None


def held_example(tk, tpl, msgs, tools, mode, idx):
    """(ids, kinds): kinds[j] for each trained target j, by where it stands in
    the copied text of the answer (its last occurrence), else "other"."""
    ids, mask = T.encode_example(tk, tpl, msgs, tools, mode, idx)
    text = copied_text(msgs)
    kinds, pos, spans = {}, 0, []
    for j in range(len(ids)):
        piece = tk.decode([ids[j]])
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
    full = tk.decode(ids)
    at = full.rfind(text) if text else -1
    for j in range(1, len(ids)):
        if not mask[j]:
            continue
        b, e = spans[j]
        if at < 0 or b < at or e > at + len(text):
            kinds[j] = "other"
        elif b == at:
            kinds[j] = "span_first"
        elif full[b:e].strip() == "":
            kinds[j] = "space"
        elif full[b - 1] == " " or full[b] == " ":
            kinds[j] = "word_start"
        else:
            kinds[j] = "in_word"
    return ids, kinds


def accuracy(model, held):
    model.eval()
    acc = {}
    with torch.no_grad():
        for ids, kinds in held:
            pred = model.lm_head(model.hidden(torch.tensor([ids[:-1]])))[0].argmax(-1).tolist()
            for j, k in kinds.items():
                s = acc.setdefault(k, [0, 0])
                s[0] += pred[j - 1] == ids[j]
                s[1] += 1
    model.train()
    return " ".join(f"{k} {s[0] / s[1]:.2f}/{s[1]}" for k, s in sorted(acc.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--whole-word-merges", action="store_true")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--batch-tokens", type=int, default=3072)
    ap.add_argument("--examples", type=int, default=5000)
    ap.add_argument("--tied-init", action="store_true")
    ap.add_argument("--space-merges", type=int, default=0)
    ap.add_argument("--space-init", action="store_true")
    ap.add_argument("--induction-init", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    tpl = render.load()
    tk = T.build_tokenizer(1001, 6000, 2048, tpl, not a.whole_word_merges, a.space_merges)
    data, prefixes = T.build_dataset(tk, tpl, 1002, a.examples, copy=True)
    g = corpus.Gen(77, held=True, copy=True)
    held = [held_example(tk, tpl, *g.example()) for _ in range(150)]
    model = T.start_model(Config(**dict(T.PRESETS["demo"], num_hidden_layers=a.layers)), tk,
                          a.tied_init, a.space_init, a.induction_init)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    it = T.batches(data, a.batch_tokens, random.Random(1))
    t0, seen = time.time(), 0
    for step in range(1, a.steps + 1):
        for gr in opt.param_groups:
            gr["lr"] = a.lr * min(step / 50, 1.0)
        ids, mask, prefix = T.collate(data, prefixes, next(it))
        loss = T.train_step(model, opt, ids, mask, prefix)
        seen += ids.numel()
        if step % 250 == 0:
            T.log(f"step {step} loss {loss:.3f} {seen / (time.time() - t0):.0f} tok/s",
                  accuracy(model, held))


if __name__ == "__main__":
    main()
