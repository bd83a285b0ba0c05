#!/usr/bin/python3
"""Concurrent streams on one daemon: the aggregate decode rate of N
streams at once against one stream alone, in the same daemon run, and that each
stream's greedy text equals the text it gets alone.

    tools/bench/parallel.py --binary build/minicpmd --model PACK [--threads 2]
                            [--streams 4] [--tokens 48] [--runs 3] [--device cpu]

Starts the daemon on a free loopback port, then per run: each prompt alone (one
stream; its decode rate is (tokens - 1) / (last token - first token), client
side), then all N at once (aggregate: the tokens after each stream's first, summed,
over the time from the first stream's first token to the last stream's last).
Prints each run and the medians. Greedy (temperature 0) on /v1/completions with
the pack's end-of-text ids banned (logit_bias), so every stream runs its
max_tokens whatever random weights say. Standard library only."""

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time

PROMPTS = [
    "The history of the river begins in the mountains where",
    "A short list of things to pack for a week of hiking:",
    "In the kitchen, the recipe calls for three cups of",
    "Dear committee, I am writing to ask about the schedule of",
    "The train left the station at noon and by evening it had",
    "Chapter one. The lighthouse keeper woke before dawn and",
    "Notes from the meeting: first, the budget for next year",
    "Once the rain stopped, the children ran outside to see",
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, port):
    cmd = [args.binary, "--model", args.model, "--device", args.device, "--threads",
           str(args.threads), "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(args.parallel), "--log-level", "warn"]
    cmd += args.extra
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=sys.stderr)
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            r = c.getresponse()
            r.read()
            if r.status == 200:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit("the daemon exited with %d" % proc.returncode)
        time.sleep(0.2)
    proc.kill()
    sys.exit("the daemon did not become ready")


def stop_ids(pack):
    """The end-of-text ids to ban: generation_config.json's and config.json's."""
    ids = set()
    for name in ("generation_config.json", "config.json"):
        try:
            with open(os.path.join(pack, name)) as f:
                v = json.load(f).get("eos_token_id")
        except (OSError, ValueError):
            continue
        ids.update(v if isinstance(v, list) else [v] if isinstance(v, int) else [])
    return sorted(ids)


def model_id(port):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/v1/models")
    return json.loads(c.getresponse().read())["data"][0]["id"]


MODEL = None


def stream(port, prompt, tokens, ban, out, i):
    """One greedy stream; out[i] = (text, n_tokens, t_first, t_last)."""
    body = {"model": MODEL, "prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
            "logit_bias": {str(t): -100 for t in ban}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        out[i] = ("HTTP %d %s" % (r.status, r.read()[:200]), 0, 0, 0)
        return
    text, n, t_first, t_last = [], 0, None, None
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            if ch.get("text"):
                text.append(ch["text"])
        if ev.get("choices") and not ev["choices"][0].get("finish_reason"):
            now = time.monotonic()
            n += 1
            t_first = t_first or now
            t_last = now
        if ev.get("usage"):
            n = ev["usage"]["completion_tokens"]
    out[i] = ("".join(text), n, t_first or 0, t_last or 0)


def run_streams(port, prompts, tokens, ban):
    out = [None] * len(prompts)
    th = [threading.Thread(target=stream, args=(port, p, tokens, ban, out, i))
          for i, p in enumerate(prompts)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    return out


def daemon_args(doc, tokens):
    """The options of the daemon these tools start (start() reads them)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--binary", default="build/minicpmd")
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=tokens)
    return ap


def main():
    ap = daemon_args(__doc__, 48)
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("extra", nargs="*", help="more daemon flags (after --)")
    args = ap.parse_args()
    port = free_port()
    proc = start(args, port)
    try:
        global MODEL
        MODEL = model_id(port)
        ban = stop_ids(args.model)
        prompts = PROMPTS[:args.streams]
        singles, aggs, ok = [], [], True
        for run in range(args.runs):
            alone = []
            for p in prompts:
                alone.append(run_streams(port, [p], args.tokens, ban)[0])
            rate1 = statistics.median((n - 1) / (tl - tf) for _, n, tf, tl in alone)
            many = run_streams(port, prompts, args.tokens, ban)
            toks = sum(n - 1 for _, n, _, _ in many)
            span = max(tl for _, _, _, tl in many) - min(tf for _, _, tf, _ in many)
            agg = toks / span
            same = all(a[0] == m[0] for a, m in zip(alone, many))
            ok = ok and same
            singles.append(rate1)
            aggs.append(agg)
            print("run %d: 1 stream %.2f tok/s; %d streams %.2f tok/s aggregate (%.2fx); "
                  "texts %s" % (run + 1, rate1, len(prompts), agg, agg / rate1,
                                "equal alone and together" if same else "DIFFER"),
                  flush=True)
        m1, mn = statistics.median(singles), statistics.median(aggs)
        print("median: 1 stream %.2f tok/s, %d streams %.2f tok/s aggregate: %.2fx"
              % (m1, len(prompts), mn, mn / m1))
        return 0 if ok else 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
