#!/usr/bin/python3
"""Load test of the batching worker: many streaming clients at once,
some hanging up at random points, against one daemon.

    tools/bench/load.py --binary build/minicpmd --model PACK [--clients 32]
                        [--rounds 3] [--tokens 64] [--seed 1] [--device cpu]

Starts the daemon (--queue-size = clients, so nobody is refused), computes each
prompt's greedy text alone, then runs `rounds` rounds of `clients` concurrent
streams on /v1/completions: each client takes a prompt at random and, with
probability 1/3, hangs up after a random number of chunks. Checks that every
stream that finished has the text its prompt gets alone, that the worker is idle
afterwards (/metrics: no active sequence, not busy, empty queue), and prints the
daemon's RSS and open fds before the first round and after the last. Exit status 1
on a wrong text or a busy worker. Not part of the test suite (it takes minutes);
the machine may be shared, so the times it prints are indicative only. Standard
library only."""

import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel import (PROMPTS, daemon_args, free_port, model_id, start,  # noqa: E402
                      stop_ids)


def proc_stats(pid):
    with open("/proc/%d/status" % pid) as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir("/proc/%d/fd" % pid))


def metrics(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
    s.close()
    out = {}
    for line in data.split(b"\r\n\r\n", 1)[1].decode().splitlines():
        if line and not line.startswith("#"):
            name, _, v = line.rpartition(" ")
            try:
                out[name] = float(v)
            except ValueError:
                pass
    return out


def client(port, model, prompt, tokens, ban, hangup_after, out, i):
    """out[i] = (finished, text)."""
    body = json.dumps({"model": model, "prompt": prompt, "max_tokens": tokens,
                       "temperature": 0, "stream": True,
                       "logit_bias": {str(t): -100 for t in ban}}).encode()
    s = socket.create_connection(("127.0.0.1", port), timeout=600)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n"
              b"Connection: close\r\n\r\n" % len(body) + body)
    buf, chunks, text, done = b"", 0, [], False
    while not done:
        b = s.recv(65536)
        if not b:
            break
        buf += b
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            # the chunked transfer coding's size lines sit between events
            for line in ev.split(b"\r\n"):
                if line.startswith(b"data: [DONE]"):
                    done = True
                elif line.startswith(b"data: "):
                    j = json.loads(line[6:])
                    for ch in j.get("choices", []):
                        text.append(ch.get("text", ""))
                    chunks += 1
            if hangup_after is not None and chunks >= hangup_after:
                s.close()
                out[i] = (False, None)
                return
    s.close()
    out[i] = (done, "".join(text))


def main():
    ap = daemon_args(__doc__, 64)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.extra = ["--queue-size", str(args.clients)]
    rnd = random.Random(args.seed)
    port = free_port()
    proc = start(args, port)
    bad = 0
    try:
        model = model_id(port)
        ban = stop_ids(args.model)
        ref = {}
        for p in PROMPTS[:4]:
            out = [None]
            client(port, model, p, args.tokens, ban, None, out, 0)
            ref[p] = out[0][1]
        rss0, fd0 = proc_stats(proc.pid)
        t0 = time.monotonic()
        n_done = n_gone = 0
        for _ in range(args.rounds):
            out = [None] * args.clients
            prompts = [rnd.choice(PROMPTS[:4]) for _ in range(args.clients)]
            hang = [rnd.randint(1, args.tokens) if rnd.random() < 1 / 3 else None
                    for _ in range(args.clients)]
            th = [threading.Thread(target=client, args=(port, model, prompts[i], args.tokens,
                                                        ban, hang[i], out, i))
                  for i in range(args.clients)]
            for t in th:
                t.start()
            for t in th:
                t.join()
            for i, (finished, text) in enumerate(out):
                if not finished:
                    n_gone += 1
                    continue
                n_done += 1
                if text != ref[prompts[i]]:
                    bad += 1
                    print("client %d: text differs from its prompt's alone" % i)
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 120
        while True:
            m = metrics(port)
            idle = (m.get("minicpmd_active_sequences") == 0 and
                    m.get("minicpmd_worker_busy") == 0 and m.get("minicpmd_queue_depth") == 0)
            if idle or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        rss1, fd1 = proc_stats(proc.pid)
        hist = {k: int(v) for k, v in m.items() if k.startswith("minicpmd_batch_size_bucket")}
        print("%d rounds of %d clients in %.1f s: %d streams finished (texts %s), %d hung up; "
              "worker %s; RSS %.1f -> %.1f MB, fds %d -> %d; cancelled %d; batch sizes %s"
              % (args.rounds, args.clients, elapsed, n_done,
                 "all equal alone" if not bad else "%d DIFFER" % bad, n_gone,
                 "idle" if idle else "BUSY", rss0 / 1024, rss1 / 1024, fd0, fd1,
                 int(m.get('minicpmd_generation_requests_total{outcome="cancelled"}', -1)),
                 hist))
        return 0 if not bad and idle else 1
    finally:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    sys.exit(main())
