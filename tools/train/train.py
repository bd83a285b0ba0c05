#!/usr/bin/python3
"""Trains minicpmd's demo model from nothing: tokenizer, corpus, model, export.

    /usr/bin/python3 tools/train/train.py --out DIR [options]   (the recipe: train.sh)

One command, fixed seed, CPU only (Debian's python3-torch, python3-numpy,
python3-jinja2). See tools/train/README.md."""
import argparse
import json
import math
import os
import random
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import export  # noqa: E402
import offskill  # noqa: E402
import render  # noqa: E402
import tok as tokmod  # noqa: E402
import wiring  # noqa: E402
from model import Config, Linear, LlamaForCausalLM  # noqa: E402

PRESETS = {
    # hidden, layers, heads, kv heads, head_dim, ffn, vocab
    "demo": dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=64, intermediate_size=768, vocab_size=2048),
    "smoke": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=512),
}
ADDED_RE = re.compile(r"<\|im_start\|>|<\|im_end\|>|<s>|</s>|<think>|</think>|<tools>|"
                      r"</tools>|<tool_response>|</tool_response>|<function|</function>|"
                      r"<param|</param>")


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def build_tokenizer(seed, n, vocab_size, tpl, split_words=True, space_merges=0):
    g = corpus.Gen(seed)
    texts = []
    for _ in range(n):
        msgs, tools, _mode, _ = g.example()
        texts.extend(s for s in ADDED_RE.split(render.render(tpl, msgs, tools)) if s)
    return tokmod.train_bpe(texts, vocab_size, split_words=split_words,
                            space_merges=space_merges)


def space_init(model, tk):
    """Start each " piece" token's embedding (and head row) as the sum of the
    space's and the piece's, renormalised, so a word's first piece looks alike
    with and without its space from step one: the echoed first word, the city
    and the name are copied from " X" in the prompt to "X" in the answer."""
    sp = tk.vocab[tokmod.BYTE2U[32]]
    with torch.no_grad():
        for w in (model.model.embed_tokens.weight, model.lm_head.weight):
            for t, p in tk.space_pairs():
                v = w[p] + w[sp]
                w[t] = v * (w[p].norm() / v.norm())


def head_renorm(model):
    """Scale every lm_head row shorter than the median up to the median norm
    (its direction kept). A token that is rarely a target (" fer", " Ros",
    "ana") gets almost only the softmax's push down and the weight decay, and
    its row shrinks to ~0.6 of the others': copied from a prompt, it then loses
    to the same letters' bare piece ("fer" after "locket" in an echo)."""
    with torch.no_grad():
        w = model.lm_head.weight
        n = w.norm(dim=1, keepdim=True)
        w.mul_((n.median() / n.clamp_min(1e-6)).clamp_min(1.0))


def encode_example(tk, tpl, msgs, tools, mode, train_idx):
    """Token ids and the loss mask (1 on the trained assistant turns' tokens,
    their closing <|im_end|> included)."""
    full = render.render(tpl, msgs, tools)
    ids = tk.encode(full)
    mask = [0] * len(ids)
    last = len(msgs) - 1
    for k in train_idx:
        prompt = render.render(tpl, msgs[:k], tools, add_generation_prompt=True,
                               enable_thinking=mode if k == last else None)
        p = tk.encode(prompt)
        if not full.startswith(prompt) or ids[:len(p)] != p:
            raise RuntimeError(f"prompt is not a token prefix: {prompt!r}")
        j = len(p)
        while ids[j] != tk.im_end:
            mask[j] = 1
            j += 1
        mask[j] = 1
    return ids, mask


def build_dataset(tk, tpl, seed, n, copy=False, arith=0.0, wide=0.0, off=0.0, task_weather=0.0,
                  hard=0.0, think=0.0, small=0.0):
    """[(prefix index or -1, ids, mask)], prefixes: the system turn of the
    conversations with tools (the long tool preamble), shared in a batch so it
    is computed once per batch rather than once per conversation."""
    hard_words = (hard, *offskill.letter_pieces(tk)) if hard else None
    g = corpus.Gen(seed, copy=copy, arith=arith, wide=wide, off=off, task_weather=task_weather,
                   hard=hard_words, think=think, small=small)
    data, prefixes, pindex = [], [], {}
    for _ in range(n):
        msgs, tools, mode, idx = g.example()
        ids, mask = encode_example(tk, tpl, msgs, tools, mode, idx)
        pid = -1
        if tools:
            j = ids.index(tk.im_end) + 2          # <|im_end|> "\n" of the system turn
            assert not any(mask[:j])
            key = tuple(ids[:j])
            if key not in pindex:
                pindex[key] = len(prefixes)
                prefixes.append(list(key))
            pid = pindex[key]
            ids, mask = ids[j:], mask[j:]
        data.append((pid, ids, mask))
    return data, prefixes


def batches(data, batch_tokens, rng):
    """Batches of one prefix group and similar lengths, about batch_tokens
    (padded) tokens each, forever."""
    groups = {}
    for i, (pid, _, _) in enumerate(data):
        groups.setdefault(pid, []).append(i)
    while True:
        out = []
        for pid, idx in groups.items():
            rng.shuffle(idx)
            for c in range(0, len(idx), 2048):
                chunk = sorted(idx[c:c + 2048], key=lambda i: len(data[i][1]))
                b = []
                for i in chunk:
                    L = len(data[i][1])
                    if b and (len(b) + 1) * L > batch_tokens:
                        out.append(b)
                        b = []
                    b.append(i)
                if b:
                    out.append(b)
        rng.shuffle(out)
        yield from out


def synth_copy_batch(rng, vocab_lo, vocab_hi, rows=64, width=26):
    """Random token strings, a marker, the same string again (loss on the
    copy): the task on which induction heads form fastest. A few hundred steps
    of it before the corpus make the copying skills (echo, the tool call's
    city, the JSON name) learnable by a model this small; on the corpus alone
    they did not form in 1,500 steps."""
    ids = torch.zeros(rows, width, dtype=torch.long)
    mask = torch.zeros(rows, width, dtype=torch.bool)
    for r in range(rows):
        n = rng.randint(3, 8)
        w = [rng.randint(vocab_lo, vocab_hi) for _ in range(n)]
        pre = [rng.randint(vocab_lo, vocab_hi) for _ in range(rng.randint(0, width - 2 * n - 3))]
        s = pre + [2] + w + [3] + w + [4]
        ids[r, :len(s)] = torch.tensor(s)
        mask[r, len(pre) + n + 2:len(s)] = True
    return ids, mask, None


def start_model(cfg, tk, tied=False, space=False, induction=False, two_back=False):
    """A fresh model: the head started as a copy of the embedding (tied; the
    head stays untied), " piece" embeddings as the space's plus the piece's
    (space), the induction circuit wired in (induction, which implies tied),
    with its two-token match too (two_back)."""
    model = LlamaForCausalLM(cfg)
    if space:
        space_init(model, tk)
    if induction:
        wiring.wire_induction(model, two_back=two_back)
    if tied or induction:
        with torch.no_grad():
            model.lm_head.weight.copy_(model.model.embed_tokens.weight)
    return model


def train_step(model, opt, ids, mask, prefix):
    """One optimiser step on the masked next-token loss; returns the loss."""
    h = model.hidden(ids[:, :-1], prefix)
    sel = mask[:, 1:]
    loss = F.cross_entropy(model.lm_head(h[sel]), ids[:, 1:][sel])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return float(loss)


def collate(data, prefixes, b):
    T = max(len(data[i][1]) for i in b)
    ids = torch.zeros(len(b), T, dtype=torch.long)
    mask = torch.zeros(len(b), T, dtype=torch.bool)
    for r, i in enumerate(b):
        _, x, m = data[i]
        ids[r, :len(x)] = torch.tensor(x)
        mask[r, :len(m)] = torch.tensor(m, dtype=torch.bool)
    pid = data[b[0]][0]
    prefix = torch.tensor([prefixes[pid]]) if pid >= 0 else None
    return ids, mask, prefix


# ---- a quick greedy check on held-out instances (PyTorch, no daemon) ----------

def parse(text):
    """(reasoning, content, tool call name and arguments) as minicpmd's parser splits them."""
    reasoning = ""
    if "</think>" in text:
        reasoning, text = text.split("</think>", 1)
        reasoning = reasoning.replace("<think>", "").strip()
    text = text.split("<|im_end|>")[0].strip()
    m = re.fullmatch(r'<function name="([^"]*)">(?:<param name="([^"]*)">(.*?)</param>)*</function>',
                     text, re.S)
    call = (m.group(1), {m.group(2): m.group(3)}) if m and m.group(2) else None
    return reasoning, text, call


def quick_eval(model, tk, tpl, seed, n):
    g = corpus.Gen(seed, held=True)
    r = random.Random(seed)
    stop = {1, tk.im_end}
    score = {}

    def run(msgs, tools=None, mode=None):
        p = tk.encode(render.render(tpl, msgs, tools, True, mode))
        prefix = "<think>\n" if mode else ""
        return parse(prefix + tk.decode(model.generate(p, 100, stop)))

    def add(k, ok):
        a, b = score.get(k, (0, 0))
        score[k] = (a + bool(ok), b + 1)

    model.eval()
    for _ in range(n):
        q, _a, _w, c = corpus.arith(r, True)
        _, content, _ = run([{"role": "user", "content": q}])
        nums = re.findall(r"-?\d+", content)
        add("arith", nums and int(nums[-1]) == c)
        s = corpus.echo_words(r, True)
        add("echo", run([{"role": "user", "content": f"Repeat after me: {s}"}])[1] == s)
        city = corpus.city(r, True)
        u = {"role": "user", "content": f"What's the weather in {city}?"}
        _, _, call = run([u], [corpus.WEATHER_TOOL])
        add("weather", call == ("get_weather", {"city": city}))
        t = corpus.temp(r)
        msgs = [u, {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                "function": {"name": "get_weather", "arguments": {"city": city}}}]},
                {"role": "tool", "content": '{"city":"%s","temp_c":%d,"sky":"sunny"}' % (city, t)}]
        add("followup", str(t) in run(msgs, [corpus.WEATHER_TOOL])[1])
        q, name, age = corpus.json_task(r, True)
        try:
            ok = json.loads(run([{"role": "user", "content": q}])[1]) == {"name": name, "age": age}
        except ValueError:
            ok = False
        add("json", ok)
        q, _a, _w, c = corpus.arith(r, True)
        reasoning, content, _ = run([{"role": "user", "content": q}], mode=True)
        nums = re.findall(r"-?\d+", content)
        add("think_on", reasoning and nums and int(nums[-1]) == c)
        reasoning, content, _ = run([{"role": "user", "content": q}], mode=False)
        nums = re.findall(r"-?\d+", content)
        add("think_off", not reasoning and nums and int(nums[-1]) == c)
    model.train()
    return " ".join(f"{k} {a}/{b}" for k, (a, b) in score.items())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", default="demo", choices=PRESETS)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6000)
    ap.add_argument("--batch-tokens", type=int, default=6144)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--examples", type=int, default=150000)
    ap.add_argument("--tok-examples", type=int, default=20000)
    ap.add_argument("--qat-frac", type=float, default=0.25,
                    help="last fraction of the steps trained through fake Q4_1 weights")
    ap.add_argument("--eval-every", type=int, default=1000)
    ap.add_argument("--eval-n", type=int, default=20)
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after this many steps (of a --steps schedule)")
    ap.add_argument("--init", help="start from this checkpoint (its weights and tokenizer)")
    ap.add_argument("--stage", type=int, default=0,
                    help="stage number: a different slice of the corpus (with --init)")
    ap.add_argument("--whole-word-merges", action="store_true",
                    help="let BPE merge letters with spaces and punctuation (\" the\")")
    ap.add_argument("--space-merges", type=int, default=0,
                    help="this many BPE slots for a space joined to a word's first piece")
    ap.add_argument("--space-init", action="store_true",
                    help="start \" piece\" embeddings as the space's plus the piece's")
    ap.add_argument("--induction-init", action="store_true",
                    help="start with a previous-token head and an induction head wired in "
                         "(wiring.py; implies --tied-init)")
    ap.add_argument("--two-back", action="store_true",
                    help="with --induction-init, also wire the head that matches the two "
                         "tokens before (a piece that stands twice in a word)")
    ap.add_argument("--arith-extra", type=float, default=0.0,
                    help="this share of the conversations is arithmetic on top of the mix")
    ap.add_argument("--snapshots", action="store_true",
                    help="also write the checkpoint at every eval (OUT.stepN)")
    ap.add_argument("--tied-init", action="store_true",
                    help="start lm_head as a copy of the embedding (the head stays untied)")
    ap.add_argument("--copy-warmup", type=int, default=0,
                    help="the first steps train on the copying skills only")
    ap.add_argument("--synth-warmup", type=int, default=0,
                    help="the first steps train on a synthetic copy task (random token strings)")
    ap.add_argument("--copy-mix", type=float, default=0.0,
                    help="after the warm-up, this fraction of the batches stays on the copying skills")
    ap.add_argument("--wide", type=float, default=0.0,
                    help="this share of copied words, cities and names from the wide vocabulary")
    ap.add_argument("--offskill", type=float, default=0.0,
                    help="this share of the conversations off-skill (the capability line, "
                         "Open WebUI's tasks)")
    ap.add_argument("--task-weather", type=float, default=0.0,
                    help="this share of the turns in the chats of Open WebUI's tasks is a "
                         "weather question and its answer (a chat with no tools)")
    ap.add_argument("--hard", type=float, default=0.0,
                    help="this share of the wide words from random pieces of the tokenizer's "
                         "vocabulary or with a piece twice (offskill.hard_word)")
    ap.add_argument("--think-arith", type=float, default=0.0,
                    help="this share of the --arith-extra conversations asked with thinking on")
    ap.add_argument("--small-operands", type=float, default=0.0,
                    help="this share of the sums has one operand below 10, the two close, "
                         "or an operand of two equal digits")
    ap.add_argument("--embed-decay", type=float, default=0.1,
                    help="weight decay of the embedding and lm_head (the other matrices: 0.1)")
    ap.add_argument("--head-renorm", action="store_true",
                    help="start with the lm_head rows below the median norm scaled up to it")
    ap.add_argument("--layers", type=int, help="override the preset's layer count")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: faster than 2 on a busy 2-core machine)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    t0 = time.time()
    tpl = render.load()
    pc = PRESETS[a.preset]
    if a.init:
        tk = tokmod.Tokenizer.load(os.path.join(a.init, "tokenizer.json"))
    else:
        tk = build_tokenizer(a.seed * 1000 + 1, a.tok_examples, pc["vocab_size"], tpl,
                             not a.whole_word_merges, a.space_merges)
    log(f"tokenizer: {len(tk.vocab)} BPE tokens, {len(tk.merges)} merges, "
        f"<|im_start|> = {tk.im_start} ({time.time() - t0:.0f} s)")
    data, prefixes = build_dataset(tk, tpl, a.seed * 1000 + 2 + 7 * a.stage, a.examples,
                                   arith=a.arith_extra, wide=a.wide, off=a.offskill,
                                   task_weather=a.task_weather, hard=a.hard,
                                   think=a.think_arith, small=a.small_operands)
    ntok = sum(len(x) for _, x, _ in data)
    nlab = sum(sum(m) for _, _, m in data)
    log(f"corpus: {len(data)} conversations, {ntok} tokens past {len(prefixes)} shared "
        f"tool prefixes, {nlab} trained, max {max(len(x) for _, x, _ in data)} "
        f"({time.time() - t0:.0f} s)")

    if a.layers:
        pc = dict(pc, num_hidden_layers=a.layers)
    cfg = Config(**pc)
    model = start_model(cfg, tk, a.tied_init, a.space_init, a.induction_init, a.two_back)
    if a.init:
        model.load_state_dict(export.load_safetensors(os.path.join(a.init, "model.safetensors")))
    if a.head_renorm:
        head_renorm(model)
    nparam = sum(p.numel() for p in model.parameters())
    log(f"model: {nparam} parameters")
    embed = ("model.embed_tokens.weight", "lm_head.weight")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and n not in embed]
    emb = [p for n, p in model.named_parameters() if n in embed]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": emb, "weight_decay": a.embed_decay},
                             {"params": other, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), eps=1e-8)
    warm = max(1, a.steps // 50)
    qat_from = int(a.steps * (1 - a.qat_frac))
    rng = random.Random(a.seed)
    it = batches(data, a.batch_tokens, rng)
    if a.copy_warmup:
        cdata, cpref = build_dataset(tk, tpl, a.seed * 1000 + 5 + 7 * a.stage, a.copy_warmup * 20 + int(a.steps * a.copy_mix * 20), True,
                                     wide=a.wide, hard=a.hard)
        cit = batches(cdata, a.batch_tokens, random.Random(a.seed + 1))
        log(f"copy warm-up: {len(cdata)} conversations for the first {a.copy_warmup} steps")
    t1, seen, lsum, lcount = time.time(), 0, 0.0, 0
    last = a.stop_after or a.steps
    for step in range(1, last + 1):
        Linear.qat = step > qat_from
        lr = a.lr * min(step / warm, 0.5 * (1 + math.cos(math.pi * step / a.steps)) * 0.95 + 0.05)
        for gr in opt.param_groups:
            gr["lr"] = lr
        if step <= a.synth_warmup:
            ids, mask, prefix = synth_copy_batch(rng, 22, tk.im_start - 1)
        elif step <= a.synth_warmup + a.copy_warmup or (a.copy_warmup and rng.random() < a.copy_mix):
            ids, mask, prefix = collate(cdata, cpref, next(cit))
        else:
            ids, mask, prefix = collate(data, prefixes, next(it))
        loss = train_step(model, opt, ids, mask, prefix)
        seen += ids.numel() + (prefix.numel() if prefix is not None else 0)
        lsum += loss
        lcount += 1
        if step % 50 == 0 or step == last:
            dt = time.time() - t1
            log(f"step {step}/{a.steps} loss {lsum / lcount:.4f} lr {lr:.2e} "
                f"{seen / dt:.0f} tok/s{' qat' if Linear.qat else ''}")
            lsum, lcount = 0.0, 0
        if a.eval_every and (step % a.eval_every == 0 or step == last):
            with torch.no_grad():
                log("eval", quick_eval(model, tk, tpl, 7, a.eval_n))
            if a.snapshots and step < last:
                export.write_checkpoint(model, tk, f"{a.out}.step{step}", {"step": step})
    Linear.qat = False
    train_s = time.time() - t0
    note = {"recipe": "tools/train/train.sh", "preset": a.preset, "seed": a.seed,
            "steps": a.steps, "batch_tokens": a.batch_tokens, "lr": a.lr,
            "examples": a.examples, "qat_frac": a.qat_frac, "space_merges": a.space_merges,
            "induction_init": a.induction_init, "two_back": a.two_back, "arith_extra": a.arith_extra,
            "copy_warmup": a.copy_warmup, "copy_mix": a.copy_mix, "wide": a.wide,
            "offskill": a.offskill, "task_weather": a.task_weather, "hard": a.hard,
            "think_arith": a.think_arith, "small_operands": a.small_operands,
            "embed_decay": a.embed_decay, "head_renorm": a.head_renorm, "threads": a.threads, "layers": pc["num_hidden_layers"], "init": a.init, "stage": a.stage, "parameters": nparam,
            "train_seconds": round(train_s)}
    if a.init:
        # The stages before, as their checkpoint recorded them, and the time of all.
        with open(os.path.join(a.init, "config.json")) as f:
            prev = json.load(f).get("minicpmd_trained") or {}
        note["init"] = f"stage {a.stage} of tools/train/train.sh"
        note["before"] = prev
        note["train_seconds_total"] = prev.get("train_seconds_total",
                                               prev.get("train_seconds", 0)) + round(train_s)
    export.write_checkpoint(model, tk, a.out, note)
    log(f"wrote {a.out} ({train_s / 60:.1f} min in all)")


if __name__ == "__main__":
    main()
