#!/usr/bin/python3
"""What an evaluation harness asks of /v1/completions, sent as lm-evaluation-harness's
`local-completions` model sends it (lm_eval/models/openai_completions.py): the
log-likelihood of a continuation (echo true, logprobs 1, max_tokens 1 or 0,
temperature 0, seed, the prompt context + continuation, as token ids or text, one or
a list of several), the rolling log-likelihood of a text (the prefix token, then the
text), and generate_until (a prompt, max_tokens, temperature 0, stop sequences).

The numbers are checked against generation itself: the logprob `echo` gives each
continuation token equals, to 1e-4, the logprob the same token got when it was
generated greedily after the same prefix (the prompt is scored in prefill's batches,
decode scores one position at a time: the kernels are batch-invariant). Raw HTTP, as
the harness's aiohttp client sends it."""

import json
import os
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import check, eq, pack_daemon, run_main, stop_ok, test  # noqa: E402

MODEL = "MiniCPM5-2B"
# The tiny pack's stop ids, special tokens and the ids its tokenizer has no text
# for, banned in generation so it runs to its budget (the logprobs reported are the
# model's, before the bias: the same numbers echo reports). greedy() keeps to the
# printable ASCII bytes, whose ids are their byte values in the tiny pack's
# byte-level vocabulary, so each generated token's id is known from its text.
NO_STOP = {str(i): -100 for i in [1, 300, 301, 302, 304] + list(range(307, 1024))}
ASCII = {str(i): -100 for i in list(range(0, 32)) + list(range(127, 1024))}
TOL = 1e-4


def post(d, body):
    r = d.post("/v1/completions", json.dumps(body).encode(), timeout=120)
    check(r.status == 200, "%s: %d %s", json.dumps(body)[:300], r.status, r.text()[:500])
    return json.loads(r.body)


def tokenize(d, text):
    r = d.post("/tokenize", json.dumps({"content": text, "add_special": True}).encode())
    eq(r.status, 200, "/tokenize")
    return json.loads(r.body)["tokens"]


def greedy(d, prompt_ids, n):
    """n tokens generated greedily after prompt_ids, and the logprob of each."""
    out = post(d, {"model": MODEL, "prompt": prompt_ids, "max_tokens": n, "temperature": 0,
                   "logprobs": 1, "logit_bias": ASCII})
    lp = out["choices"][0]["logprobs"]
    ids = tokenize_each(d, lp["tokens"])
    return ids, lp["token_logprobs"]


def tokenize_each(d, tokens):
    for t in tokens:
        check(len(t) == 1 and 32 <= ord(t) < 127, "a generated token %r is not one byte", t)
    ids = [ord(t) for t in tokens]
    got = d.post("/tokenize", json.dumps({"content": "".join(tokens),
                                          "add_special": False}).encode())
    eq(json.loads(got.body)["tokens"][:1], ids[:1], "a byte's id is its value")
    return ids


def loglikelihood_payload(prompt, max_tokens=1):
    """lm-eval's _create_payload(generate=False)."""
    return {"model": MODEL, "prompt": prompt, "temperature": 0, "max_tokens": max_tokens,
            "logprobs": 1, "seed": 1234, "echo": True}


def parse_logprobs(out, ctxlens, drop_last=True):
    """lm-eval's parse_logprobs: per choice (by index) the sum of the continuation's
    logprobs and whether each continuation token was the most likely."""
    res = []
    for choice, ctxlen in zip(sorted(out["choices"], key=lambda c: c["index"]), ctxlens):
        lps = choice["logprobs"]["token_logprobs"][ctxlen:-1 if drop_last else None]
        tops = choice["logprobs"]["top_logprobs"][ctxlen:-1 if drop_last else None]
        res.append((sum(lps), all(tok == max(top.values()) for tok, top in zip(lps, tops)),
                    lps))
    return res


@test
def loglikelihood_matches_generation():
    """echo + logprobs 1 + max_tokens 1 (and 0) over context + continuation: each
    continuation token's logprob equals its logprob when generated greedily after
    the same prefix (to 1e-4); the first prompt token has a null logprob; the
    generated token after the prompt is echo's top-1 there."""
    d = pack_daemon([])
    ctx = tokenize(d, "Once upon a time there was")
    cont, want = greedy(d, ctx, 24)
    for mt in (1, 0):
        out = post(d, loglikelihood_payload(ctx + cont, mt))
        lp = out["choices"][0]["logprobs"]
        eq(len(lp["token_logprobs"]), len(ctx) + len(cont) + mt, "entries")
        check(lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None,
              "the first token has no logprob: %r", lp["token_logprobs"][:2])
        (total, is_greedy, got), = parse_logprobs(out, [len(ctx)], drop_last=mt == 1)
        eq(len(got), len(cont), "continuation logprobs (max_tokens %d)" % mt)
        worst = max(abs(a - b) for a, b in zip(got, want))
        print("max_tokens %d: %d continuation tokens, sum %.6f, max |echo - generated| %.2e"
              % (mt, len(cont), total, worst))
        check(worst <= TOL, "echo vs generation differ by %g: %r vs %r", worst, got, want)
    # Without the bias: echo's top-1 alternative at the context's last token is the
    # token generation picks after the tokens before it, with the same logprob (what
    # lm-eval's is_greedy reads).
    out = post(d, {"model": MODEL, "prompt": ctx[:-1], "max_tokens": 1, "temperature": 0,
                   "logprobs": 1})
    first = out["choices"][0]["logprobs"]
    echo = post(d, loglikelihood_payload(ctx, 0))["choices"][0]["logprobs"]
    top = echo["top_logprobs"][len(ctx) - 1]
    eq(list(top), first["tokens"], "the greedy token in echo's top_logprobs")
    check(abs(top[first["tokens"][0]] - first["token_logprobs"][0]) <= TOL, "greedy logprob")
    stop_ok(d)


@test
def rolling_loglikelihood_across_batches():
    """A text longer than a prefill batch of the scored prompt (32 positions) and
    than a prefill chunk (--prefill-chunk 48): every token's logprob equals the one
    it got in generation; the text as a string gives the same numbers as its ids."""
    d = pack_daemon(["--prefill-chunk", "48"])
    start = tokenize(d, "The")
    text, want = greedy(d, start, 110)
    out = post(d, loglikelihood_payload(start + text, 0))
    got = out["choices"][0]["logprobs"]["token_logprobs"][len(start):]
    worst = max(abs(a - b) for a, b in zip(got, want))
    print("%d tokens scored in one prompt, max |echo - generated| %.2e" % (len(got), worst))
    eq(len(got), len(text), "tokens scored")
    check(worst <= TOL, "echo vs generation differ by %g at %d", worst,
          max(range(len(got)), key=lambda i: abs(got[i] - want[i])))
    # lm-eval's rolling windows: [prefix token] + the text, ctxlen 1, as text too
    as_text = post(d, loglikelihood_payload("The" + out["choices"][0]["text"][3:], 0))
    eq(as_text["choices"][0]["logprobs"]["token_logprobs"],
       out["choices"][0]["logprobs"]["token_logprobs"], "the text's logprobs as its ids'")
    stop_ok(d)


@test
def eight_prompts_in_order():
    """A list of 8 prompts (token-id lists, as lm-eval batches them, and strings) gives
    8 choices with index 0..7, each what its prompt gets alone: the sequences run
    together in one batch (--parallel 4) and their numbers do not change."""
    d = pack_daemon(["--parallel", "4"])
    texts = ["Once", "upon a", "time there", "was a", "little", "fox who", "ran", "far away"]
    ids = [tokenize(d, t) for t in texts]
    for prompts in (ids, texts):
        out = post(d, loglikelihood_payload(prompts))
        eq([c["index"] for c in out["choices"]], list(range(8)), "choice indexes")
        for i, c in enumerate(out["choices"]):
            alone = post(d, loglikelihood_payload(prompts[i]))["choices"][0]
            eq(c["text"], alone["text"], "choice %d's text" % i)
            a, b = c["logprobs"]["token_logprobs"], alone["logprobs"]["token_logprobs"]
            eq(len(a), len(b), "choice %d's tokens" % i)
            check(all((x is None and y is None) or abs(x - y) <= TOL for x, y in zip(a, b)),
                  "choice %d: %r alone %r", i, a, b)
        eq(out["usage"]["prompt_tokens"], sum(len(p) for p in ids), "prompt tokens summed")
    stop_ok(d)


@test
def generate_until_stops():
    """generate_until: the harness's payload (max_tokens, temperature 0, stop, seed)
    ends at the first stop sequence, without it, and agrees with the same
    generation without stops."""
    d = pack_daemon([])
    free = post(d, {"model": MODEL, "prompt": "Question: what is it?\nAnswer:", "max_tokens": 40,
                    "temperature": 0, "seed": 1234, "logit_bias": NO_STOP})["choices"][0]["text"]
    check(len(free) > 6, "generated %r", free)
    stop = free[4:6]
    out = post(d, {"model": MODEL, "prompt": "Question: what is it?\nAnswer:", "max_tokens": 40,
                   "temperature": 0, "stop": [stop, "Question:"], "seed": 1234,
                   "logit_bias": NO_STOP})
    c = out["choices"][0]
    eq(c["finish_reason"], "stop", "finish_reason")
    eq(c["text"], free[:free.index(stop)], "text up to the stop")
    stop_ok(d)


@test
def scoring_agrees_across_devices_and_batches():
    """The same echo on the sim device (the NPU's model) and with one position per
    prefill batch (--prefill-chunk 1, as the NPU runs a prompt) gives the same
    numbers as the cpu's batched prefill, bit for bit."""
    body = loglikelihood_payload("hello world, the quick brown fox jumps over it", 2)
    body["logprobs"] = 2
    got = {}
    for args in ([], ["--device", "sim"], ["--prefill-chunk", "1"]):
        d = pack_daemon(args)
        got[" ".join(args) or "cpu"] = post(d, body)["choices"][0]["logprobs"]
        stop_ok(d)
    ref = got.pop("cpu")
    check(len(ref["token_logprobs"]) > 10, "tokens: %r", ref["tokens"])
    for k, lp in got.items():
        eq(lp["token_logprobs"], ref["token_logprobs"], "%s: token_logprobs" % k)
        eq(lp["top_logprobs"], ref["top_logprobs"], "%s: top_logprobs" % k)


if __name__ == "__main__":
    run_main()
