#!/usr/bin/python3
"""POST /v1/chat/completions against the real daemon on a small real pack (the
`tiny` preset's random weights: the text means nothing, the protocol is real).

Each function is one meson test (integration-chat). Streams are read with raw
sockets or curl; the OpenAI SDK's view is in test_sdk.py / tests/oracle."""
import json
import os
import re
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Daemon, Failure, assert_error_object, check, contains, eq,  # noqa: E402
                     generated_pack, pack_daemon, run_main, stop_ok, test, wait_for, wait_ready)

PACK = "MiniCPM5-2B"
JSON = {"Content-Type": "application/json"}


def body(**kw):
    b = {"model": PACK, "messages": [{"role": "user", "content": "Hello there"}]}
    b.update(kw)
    return json.dumps(b)


def chat(d, timeout=60, **kw):
    return d.post("/v1/chat/completions", data=body(**kw), headers=JSON, timeout=timeout)


def sse_events(raw):
    """The data payloads of an SSE body, in order ("[DONE]" kept as a string);
    comment lines (pings) are dropped."""
    events = []
    for block in raw.decode("utf-8").split("\n\n"):
        lines = [l for l in block.split("\n") if l and not l.startswith(":")]
        if not lines:
            continue
        for l in lines:
            check(l.startswith("data: "), "SSE line is not a data line: %r", l)
        data = "\n".join(l[6:] for l in lines)
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream_text(events):
    out = []
    for e in events:
        if isinstance(e, dict) and e.get("choices"):
            c = e["choices"][0].get("delta", {}).get("content")
            if c:
                out.append(c)
    return "".join(out)


# ---- non-streaming ---------------------------------------------------------------


@test
def completion_shape():
    d = pack_daemon()
    r = chat(d, max_tokens=8, temperature=0)
    eq(r.status, 200, "status")
    j = r.json()
    check(j["id"].startswith("chatcmpl-"), "id: %r", j["id"])
    eq(j["object"], "chat.completion", "object")
    eq(j["model"], PACK, "model")
    check(isinstance(j["created"], int), "created: %r", j)
    check(isinstance(j.get("system_fingerprint"), str), "system_fingerprint: %r", j)
    c = j["choices"][0]
    eq(c["index"], 0, "index")
    eq(c["message"]["role"], "assistant", "role")
    check(isinstance(c["message"]["content"], str), "content: %r", c)
    check(c["finish_reason"] in ("stop", "length"), "finish_reason: %r", c)
    u = j["usage"]
    check(u["prompt_tokens"] > 0, "prompt_tokens: %r", u)
    eq(u["total_tokens"], u["prompt_tokens"] + u["completion_tokens"], "total_tokens")
    check(1 <= u["completion_tokens"] <= 8, "completion_tokens: %r", u)
    t = j["timings"]
    for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms", "predicted_per_second"):
        check(k in t, "timings lacks %s: %r", k, t)
    stop_ok(d)


@test
def max_tokens_gives_length():
    d = pack_daemon()
    for field in ("max_tokens", "max_completion_tokens"):
        r = chat(d, temperature=0, **{field: 3, "logit_bias": {"1": -100, "1023": -100}})
        eq(r.status, 200, "status with " + field)
        j = r.json()
        eq(j["usage"]["completion_tokens"], 3, "completion tokens with " + field)
        eq(j["choices"][0]["finish_reason"], "length", "finish_reason with " + field)
    stop_ok(d)


@test
def greedy_is_deterministic_and_stream_equals_nonstream():
    d = pack_daemon()
    a = chat(d, max_tokens=10, temperature=0).json()["choices"][0]["message"]["content"]
    b = chat(d, max_tokens=10, temperature=0).json()["choices"][0]["message"]["content"]
    eq(a, b, "greedy output twice")
    r = chat(d, max_tokens=10, temperature=0, stream=True)
    eq(r.status, 200, "stream status")
    eq(stream_text(sse_events(r.body)), a, "streamed text equals the non-streamed one")
    stop_ok(d)


@test
def prompt_cache_reuses_the_conversation():
    """The next turn of a conversation reuses the KV cache of the shared prefix
    (usage.prompt_tokens_details.cached_tokens, timings.cache_n, /metrics) and
    answers exactly as a daemon with --prompt-cache=false does."""
    turn1 = [{"role": "system", "content": "You are terse."},
             {"role": "user", "content": "Name three colours."}]
    outs = {}
    for cache in ("true", "false"):
        d = pack_daemon(["--prompt-cache=" + cache])
        a = chat(d, max_tokens=6, temperature=0, messages=turn1).json()
        eq(a["usage"]["prompt_tokens_details"]["cached_tokens"], 0, "first request, cache " + cache)
        turn2 = turn1 + [{"role": "assistant", "content": a["choices"][0]["message"]["content"]},
                         {"role": "user", "content": "And three animals?"}]
        b = chat(d, max_tokens=6, temperature=0, messages=turn2).json()
        c = chat(d, max_tokens=6, temperature=0, messages=turn2).json()
        cached_b = b["usage"]["prompt_tokens_details"]["cached_tokens"]
        cached_c = c["usage"]["prompt_tokens_details"]["cached_tokens"]
        if cache == "true":
            check(cached_b >= a["usage"]["prompt_tokens"] // 2,
                  "the second turn reused %d of its %d prompt tokens (the first turn had %d)",
                  cached_b, b["usage"]["prompt_tokens"], a["usage"]["prompt_tokens"])
            eq(cached_c, c["usage"]["prompt_tokens"] - 1, "the same prompt again")
            eq(c["timings"]["cache_n"], cached_c, "timings.cache_n")
            eq(c["timings"]["prompt_n"], 1, "timings.prompt_n: the one position computed")
            m = d.metrics()
            contains(m, "minicpmd_tokens_prompt_cached_total %d" % (cached_b + cached_c),
                     "/metrics")
        else:
            eq((cached_b, cached_c), (0, 0), "nothing reused with --prompt-cache=false")
        outs[cache] = [x["choices"][0]["message"]["content"] for x in (a, b, c)]
        stop_ok(d)
    eq(outs["true"], outs["false"], "answers with and without the cache")


@test
def seed_is_deterministic():
    d = pack_daemon()
    outs = [chat(d, max_tokens=12, temperature=1.0, seed=s).json()["choices"][0]["message"]
            ["content"] for s in (7, 7, 8)]
    eq(outs[0], outs[1], "same seed, same text")
    check(outs[0] != outs[2], "different seeds gave the same 12 tokens: %r", outs)
    stop_ok(d)


@test
def logprobs_shape():
    d = pack_daemon()
    r = chat(d, max_tokens=4, temperature=0, logprobs=True, top_logprobs=3)
    eq(r.status, 200, "status")
    lp = r.json()["choices"][0]["logprobs"]
    check(isinstance(lp, dict) and isinstance(lp.get("content"), list), "logprobs: %r", lp)
    check(len(lp["content"]) >= 1, "logprobs content empty")
    for t in lp["content"]:
        check(t["logprob"] <= 0.0, "logprob > 0: %r", t)
        eq(len(t["top_logprobs"]), 3, "top_logprobs count")
        # Greedy: the chosen token is the most likely one.
        check(abs(t["top_logprobs"][0]["logprob"] - t["logprob"]) < 1e-4,
              "greedy token is not the top one: %r", t)
    stop_ok(d)


# ---- validation ----------------------------------------------------------------------


@test
def bad_requests_name_param():
    d = pack_daemon()
    cases = [
        (dict(temperature=3), "temperature"),
        (dict(top_p=0), "top_p"),
        (dict(max_tokens=0), "max_tokens"),
        (dict(n=9), "n"),   # 8 at most
        (dict(stop=["s%d" % i for i in range(17)]), "stop"),  # 16 at most
        (dict(messages=[]), "messages"),
        (dict(messages=[{"role": "wizard", "content": "x"}]), "messages[0].role"),
        (dict(logit_bias={"99999": 1}), "logit_bias.99999"),
        (dict(stream_options={"include_usage": True}), "stream_options"),
    ]
    for kw, param in cases:
        r = chat(d, **kw)
        eq(r.status, 400, "status for %r" % kw)
        assert_error_object(r, type_="invalid_request_error", param=param)
    r = d.post("/v1/chat/completions", data=b'{"model": ', headers=JSON)
    eq(r.status, 400, "status for broken JSON")
    assert_error_object(r)
    stop_ok(d)


@test
def context_length_exceeded_both_modes():
    d = pack_daemon(["--ctx-size", "64"])
    long = "word " * 200
    for stream in (False, True):
        r = chat(d, messages=[{"role": "user", "content": long}], stream=stream)
        eq(r.status, 400, "status (stream=%s)" % stream)
        err = assert_error_object(r, code="context_length_exceeded")
        contains(err["message"], "64", "message names the context")
    # A short prompt still works, its budget clamped to the context.
    r = chat(d, max_tokens=1000, temperature=0)
    eq(r.status, 200, "short prompt")
    eq(r.json()["choices"][0]["finish_reason"] in ("stop", "length"), True, "finish")
    stop_ok(d)


# ---- streaming -----------------------------------------------------------------------


@test
def stream_shape():
    d = pack_daemon()
    r = chat(d, max_tokens=6, temperature=0, stream=True, stream_options={"include_usage": True})
    eq(r.status, 200, "status")
    check(r.header("content-type").startswith("text/event-stream"), "content-type: %r", r)
    ev = sse_events(r.body)
    eq(ev[-1], "[DONE]", "last event")
    chunks = ev[:-1]
    ids = {c["id"] for c in chunks}
    eq(len(ids), 1, "one id on every chunk")
    eq(chunks[0]["choices"][0]["delta"], {"role": "assistant", "content": ""}, "first delta")
    for c in chunks:
        eq(c["object"], "chat.completion.chunk", "object")
    usage = chunks[-1]
    eq(usage["choices"], [], "usage chunk has no choices")
    check(usage["usage"]["completion_tokens"] >= 1, "usage: %r", usage)
    final = chunks[-2]
    check(final["choices"][0]["finish_reason"] in ("stop", "length"), "final: %r", final)
    stop_ok(d)


def raw_stream(d, payload):
    """Send a streaming request on a raw socket; return the socket once the
    response headers are in."""
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    data = json.dumps(payload).encode()
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: "
              b"application/json\r\nContent-Length: %d\r\n\r\n" % len(data) + data)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            raise Failure("connection closed before the headers: %r" % buf)
        buf += chunk
    return s, buf


def tokens_out(d):
    for line in d.metrics().splitlines():
        if line.startswith("minicpmd_tokens_generated_total"):
            return float(line.split()[-1])
    raise Failure("no minicpmd_tokens_generated_total in /metrics")


@test
def disconnect_mid_stream_frees_worker():
    """A client that leaves mid-stream: the request is cancelled, the worker is
    free for the next one (measured, not asserted tightly)."""
    d = pack_daemon(["--device", "sim", "--sim-latency-us", "2000"])
    s, _ = raw_stream(d, {"model": PACK, "stream": True, "max_tokens": 4000,
                          "messages": [{"role": "user", "content": "go"}],
                          "logit_bias": {"1": -100, "1023": -100}})
    time.sleep(0.5)
    s.close()
    t0 = time.monotonic()
    wait_for(lambda: "minicpmd_worker_busy 0" in d.metrics(), 10, "the worker to be idle")
    print("worker idle %.0f ms after the client left" % ((time.monotonic() - t0) * 1e3))
    r = chat(d, max_tokens=2, temperature=0)
    eq(r.status, 200, "next request after a disconnect")
    stop_ok(d)


@test
def slots_in_health_and_sequences_in_metrics():
    """Two streams at once on the sim: /health's slots and /metrics' active
    sequences follow them (states waited for, never slept), the batch-size histogram
    and the queue wait count the steps and the requests, and both go back to 0."""
    d = pack_daemon(["--device", "sim", "--sim-latency-us", "2000"])
    eq(d.get("/health").json().get("slots"), {"in_use": 0, "total": 4}, "idle slots")
    eq(metric(d, "minicpmd_parallel"), 4, "--parallel's default on the sim")
    long = {"model": PACK, "stream": True, "max_tokens": 4000,
            "messages": [{"role": "user", "content": "go"}],
            "logit_bias": {"1": -100, "1023": -100}}
    a, _ = raw_stream(d, long)
    wait_for(lambda: metric(d, "minicpmd_active_sequences") == 1, 20, "one sequence")
    b, _ = raw_stream(d, long)
    wait_for(lambda: metric(d, "minicpmd_active_sequences") == 2, 20, "two sequences")
    eq(d.get("/health").json().get("slots"), {"in_use": 2, "total": 4}, "two slots in use")
    a.close()
    b.close()
    wait_for(lambda: metric(d, "minicpmd_active_sequences") == 0, 20, "no sequence")
    eq(d.get("/health").json().get("slots"), {"in_use": 0, "total": 4}, "slots freed")
    check(metric(d, "minicpmd_batch_size_count") > 0, "steps counted")
    # the sim interleaves: every step carries one sequence
    eq(metric(d, 'minicpmd_batch_size_bucket{le="1"}'), metric(d, "minicpmd_batch_size_count"),
       "interleaved steps")
    eq(metric(d, "minicpmd_queue_wait_seconds_count"), 2, "requests that left the queue")
    stop_ok(d)


@test
def queue_full_gives_503():
    """No timing: the running request hangs in the sim's first runlist (more than
    one layer, over --sim-runlist-limit 1, and a 10-minute timeout) until its client
    leaves, so the queue stays full for as long as the test needs."""
    d = pack_daemon(["--device", "sim", "--sim-runlist-limit", "1", "--sim-timeout-ms",
                     "600000", "--runlist-layers", "all", "--queue-size", "1"])
    long = {"model": PACK, "stream": True, "max_tokens": 4,
            "messages": [{"role": "user", "content": "go"}]}
    # One running (the worker has taken it off the queue: a state, not a delay),
    # then one queued.
    socks = [raw_stream(d, long)[0]]
    wait_for(lambda: "minicpmd_worker_busy 1" in d.metrics(), 20, "the first stream to run")
    socks.append(raw_stream(d, long)[0])
    wait_for(lambda: "minicpmd_queue_depth 1" in d.metrics(), 20, "the second to be queued")
    r = chat(d, timeout=20, max_tokens=2)
    eq(r.status, 503, "status with a full queue")
    assert_error_object(r, code="server_busy")
    check(r.header("retry-after") is not None, "503 busy lacks Retry-After")
    for s in socks:
        s.close()
    stop_ok(d)


# ---- the sim device: the NPU's failure, handled ------------------------------------------


def deep_daemon(args):
    d = Daemon(["--device", "sim", "--sim-runlist-limit", "36", "--sim-timeout-ms", "300"]
               + args)
    d.args += ["--model", generated_pack("deep")]
    d.start()
    wait_ready(d, 30)
    return d


def deep_chat(d, **kw):
    b = {"model": "deep", "messages": [{"role": "user", "content": "Hello there"}],
         "max_tokens": 5, "temperature": 0}
    b.update(kw)
    return d.post("/v1/chat/completions", data=json.dumps(b), headers=JSON, timeout=60)


@test
def sim_head_runlist_fault_names_the_head():
    """A fault in the head runlist (final norm + lm_head, no
    layers) was reported as layer_first 42, layer_last 41; it is "runlist":"head"."""
    d = deep_daemon(["--runlist-layers", "21", "--fault", "phase=prefill,layer=head,state=ERROR"])
    r = deep_chat(d)
    err = assert_error_object(r, type_="device_error", code="ert_cmd_state_error")
    eq(err.get("runlist"), "head", "runlist")
    check("layer_first" not in err and "layer_last" not in err, "layer range on the head: %r", err)
    contains(err["message"], "the head runlist", "message")
    stop_ok(d)


def gauge(d, name):
    m = re.search(r"^%s (\d+)$" % re.escape(name), d.metrics(), re.M)
    check(m, "no %s in /metrics" % name)
    return int(m.group(1))


@test
def sim_auto_k_recovers_after_a_transient_hang():
    """One transient hang halved K for good (and wrote it to
    runlist-k.json). Now, after a run of good tokens at K 21, a request probes
    K 42 again, and with the hang gone K stays there and is remembered."""
    d = Daemon(["--device", "sim", "--sim-timeout-ms", "300",
                "--fault", "phase=decode,token=1,state=TIMEOUT"])
    d.args += ["--model", generated_pack("deep")]
    d.start()
    wait_ready(d, 30)
    r = deep_chat(d, max_tokens=4)
    eq(r.status, 200, "the hang is replayed")
    eq(gauge(d, "minicpmd_runlist_layers"), 21, "K after the hang")
    n = 0
    while gauge(d, "minicpmd_runlist_k_probes_total") == 0 and n < 40:
        eq(deep_chat(d, max_tokens=100).status, 200, "request %d at K 21" % n)
        n += 1
    eq(gauge(d, "minicpmd_runlist_k_probes_total"), 1, "probes after %d requests" % n)
    eq(deep_chat(d, max_tokens=4).status, 200, "the probe")
    eq(gauge(d, "minicpmd_runlist_layers"), 42, "K after the probe")
    eq(gauge(d, "minicpmd_runlist_k_halvings_total"), 1, "halvings")
    stop_ok(d)
    paths = [os.path.join(dp, f) for dp, _, fs in os.walk(d.tmp) for f in fs
             if f == "runlist-k.json"]
    eq(len(paths), 1, "runlist-k.json files")
    with open(paths[0]) as f:
        ks = [dev["k"] for m in json.load(f)["entries"].values() for dev in m.values()]
    eq(ks, [42], "the remembered K")


@test
def sim_monolithic_runlist_times_out():
    """--runlist-layers all on 42 layers with a 36-command firmware limit: the
    structured ert_cmd_state_timeout error, and the daemon keeps serving."""
    d = deep_daemon(["--runlist-layers", "all"])
    r = deep_chat(d)
    # The device was reset and serves again: 503 + Retry-After (500 is for a device
    # that could not be brought back).
    eq(r.status, 503, "status after a fault the device recovered from")
    check(r.header("retry-after") is not None, "device error lacks Retry-After: %r", r)
    err = assert_error_object(r, type_="device_error", code="ert_cmd_state_timeout")
    eq(err["ert_state"], 8, "ert_state")
    eq(err["phase"], "prefill", "phase")
    eq(err["layer_first"], 0, "layer_first")
    eq(err["layer_last"], 41, "layer_last")
    eq(d.get("/health").status, 200, "/health after the fault")
    r = deep_chat(d, stream=True)
    eq(r.status, 200, "stream status (headers went out first)")
    ev = sse_events(r.body)
    check(isinstance(ev[-1], dict) and "error" in ev[-1], "last event is an error: %r", ev[-1:])
    eq(ev[-1]["error"]["code"], "ert_cmd_state_timeout", "stream error code")
    stop_ok(d)


@test
def sim_auto_recovers_and_matches_cpu():
    cpu = Daemon(["--device", "cpu"])
    cpu.args += ["--model", generated_pack("deep")]
    cpu.start()
    wait_ready(cpu, 30)
    want = deep_chat(cpu).json()["choices"][0]["message"]["content"]
    stop_ok(cpu)
    d = deep_daemon(["--runlist-layers", "auto"])
    r = deep_chat(d)
    eq(r.status, 200, "auto recovers")
    eq(r.json()["choices"][0]["message"]["content"], want, "greedy text equals the cpu device's")
    m = d.metrics()
    check("minicpmd_device_resets_total 1" in m, "one device reset in /metrics:\n%s" % m)
    r = deep_chat(d)
    eq(r.status, 200, "next request")
    stop_ok(d)


@test
def sim_k21_never_faults():
    d = deep_daemon(["--runlist-layers", "21"])
    for _ in range(2):
        eq(deep_chat(d).status, 200, "K=21")
    check("minicpmd_device_resets_total 0" in d.metrics(), "no reset with K=21")
    stop_ok(d)


def metric(d, name):
    """The value of one sample line of /metrics, e.g. 'minicpmd_device_resets_total'
    or 'minicpmd_generation_requests_total{outcome="failed"}'."""
    for line in d.metrics().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise Failure("no %s in /metrics" % name)


FAILED = 'minicpmd_generation_requests_total{outcome="failed"}'
RESETS = "minicpmd_device_resets_total"


def assert_health_ok(d, when, device_down=False):
    """200 ok; while the last reset failed, also "device_state": "down" (and the
    minicpmd_device_down gauge)."""
    h = d.get("/health")
    eq(h.status, 200, "/health status " + when)
    j = h.json()
    eq(j["status"], "ok", "/health status field " + when)
    eq(j.get("device_state"), "down" if device_down else None, "/health device_state " + when)
    eq(metric(d, "minicpmd_device_down"), 1 if device_down else 0, "device_down gauge " + when)


def assert_device_down_500(r, code, when):
    """The "could not be reset" answer of docs/usage.md: 500, an OpenAI error object of type
    device_error with the ERT state's code, and no Retry-After (unlike the 503)."""
    eq(r.status, 500, "status " + when)
    check(r.header("retry-after") is None, "a 500 device error has no Retry-After (%s): %r",
          when, r)
    err = assert_error_object(r, type_="device_error", code=code, param=None)
    eq(err["device"], "sim", "device " + when)
    check(err["message"].endswith("the device could not be reset."),
          "the message says the device is down (%s): %r", when, err["message"])
    return err


@test
def sim_failed_reset_gives_500_and_daemon_keeps_serving():
    """A fault whose device reset fails (reset=fail, twice): a non-streaming request
    gets 500 device_error, a streaming one a single error event; /health stays ok and
    the next request (the worker resets first, which now works) succeeds."""
    d = pack_daemon(["--device", "sim", "--runlist-layers", "auto",
                     "--fault", "phase=prefill,state=TIMEOUT,reset=fail,times=2"])
    r = chat(d, max_tokens=4, temperature=0)
    err = assert_device_down_500(r, "ert_cmd_state_timeout", "after a failed reset")
    eq(err["ert_state"], 8, "ert_state")
    eq(err["phase"], "prefill", "phase")
    eq(err["attempts"], 1, "auto does not replay on a device that is down")
    assert_health_ok(d, "after a failed reset", device_down=True)
    eq(metric(d, RESETS), 0, "resets after the failed one")
    eq(metric(d, FAILED), 1, "failed requests")

    # The reset before this request works; the fault fires again and so does the
    # reset failure: after the first chunk, one error event and no [DONE].
    r = chat(d, max_tokens=4, temperature=0, stream=True)
    eq(r.status, 200, "stream status (headers went out first)")
    check(r.header("content-type").startswith("text/event-stream"), "content-type: %r", r)
    ev = sse_events(r.body)
    check("[DONE]" not in ev, "a stream that failed ends without [DONE]: %r", ev)
    errors = [e for e in ev if isinstance(e, dict) and "error" in e]
    eq(len(errors), 1, "error events in the stream")
    check(ev[-1] is errors[0], "the error event is the last one: %r", ev[-2:])
    e = errors[0]
    eq(set(e), {"error"}, "error event keys")
    for k in ("message", "type", "param", "code"):
        check(k in e["error"], "error event lacks %r: %r", k, e)
    eq(e["error"]["type"], "device_error", "stream error type")
    eq(e["error"]["code"], "ert_cmd_state_timeout", "stream error code")
    eq(e["error"]["param"], None, "stream error param")
    eq(ev[0]["choices"][0]["delta"], {"role": "assistant", "content": ""}, "first delta")
    assert_health_ok(d, "after a failed reset in a stream", device_down=True)
    eq(metric(d, RESETS), 1, "resets")
    eq(metric(d, FAILED), 2, "failed requests")

    # The fault is spent: the worker resets first and serves again.
    r = chat(d, max_tokens=4, temperature=0)
    eq(r.status, 200, "the request after the failed resets")
    j = r.json()
    check(isinstance(j["choices"][0]["message"]["content"], str), "content: %r", j)
    check(j["choices"][0]["finish_reason"] in ("stop", "length"), "finish_reason: %r", j)
    eq(metric(d, RESETS), 2, "resets")
    eq(metric(d, FAILED), 2, "failed requests")
    stop_ok(d)


@test
def sim_device_still_down_refuses_with_500():
    """reset=3: the reset after the fault and the ones before the next two requests
    fail, so those requests are refused with the same 500 device_error (not an
    internal_error), streamed as one error event; the fourth reset works and the
    daemon serves again."""
    d = pack_daemon(["--device", "sim", "--runlist-layers", "all",
                     "--fault", "phase=prefill,state=ERROR,reset=3"])
    r = chat(d, max_tokens=4, temperature=0)
    assert_device_down_500(r, "ert_cmd_state_error", "after a failed reset")
    assert_health_ok(d, "after a failed reset", device_down=True)
    r = chat(d, max_tokens=4, temperature=0)
    err = assert_device_down_500(r, "ert_cmd_state_error", "while the device is still down")
    eq(err["ert_state"], 5, "ert_state: ERROR, the failure that left the device down")
    r = chat(d, max_tokens=4, temperature=0, stream=True)
    eq(r.status, 200, "stream status (headers went out first)")
    ev = sse_events(r.body)
    check("[DONE]" not in ev, "no [DONE] after an error: %r", ev)
    errors = [e for e in ev if isinstance(e, dict) and "error" in e]
    eq(len(errors), 1, "error events in the stream")
    check(ev[-1] is errors[0], "the error event is the last one: %r", ev[-2:])
    eq(errors[0]["error"]["type"], "device_error", "stream error type")
    eq(errors[0]["error"]["code"], "ert_cmd_state_error", "stream error code")
    eq(metric(d, RESETS), 0, "no reset worked yet")
    eq(metric(d, FAILED), 3, "failed requests")
    assert_health_ok(d, "while the device is down", device_down=True)
    r = chat(d, max_tokens=4, temperature=0)
    eq(r.status, 200, "the device came back")
    assert_health_ok(d, "after the device came back")
    eq(metric(d, RESETS), 1, "resets")
    eq(metric(d, FAILED), 3, "failed requests")
    stop_ok(d)

if __name__ == "__main__":
    run_main()
