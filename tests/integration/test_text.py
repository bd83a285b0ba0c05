#!/usr/bin/python3
"""The prompt-inspection endpoints (llama.cpp's shapes): POST /tokenize,
/detokenize and /apply-template, served by the real daemon from a pack. The
template's expected output comes from Jinja2 rendering the official template
(tests/chat/oracle.py), not from our renderer."""

import http.client
import json
import os
import select
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "chat"))

from harness import (Daemon, Skip, assert_error_object, binary, check, eq,  # noqa: E402
                     pack_daemon, run_main, stop_ok, test, wait_for)

TEMPLATE = os.path.join(HERE, "..", "data", "minicpm5-2b", "chat_template.jinja")


def post_json(d, path, obj, **kw):
    return d.post(path, data=json.dumps(obj).encode(), headers={"Content-Type":
                                                                 "application/json"}, **kw)


@test
def tokenize_roundtrip():
    d = pack_daemon()
    r = post_json(d, "/tokenize", {"content": "hello world"})
    eq(r.status, 200, "/tokenize status")
    ids = r.json().get("tokens")
    check(isinstance(ids, list) and ids and all(isinstance(i, int) for i in ids),
          "tokens must be a non-empty list of ints: %r", r.json())
    r = post_json(d, "/detokenize", {"tokens": ids})
    eq(r.status, 200, "/detokenize status")
    eq(r.json().get("content"), "hello world", "detokenize(tokenize(s))")
    stop_ok(d)


@test
def tokenize_with_pieces():
    d = pack_daemon()
    r = post_json(d, "/tokenize", {"content": "hello", "with_pieces": True})
    eq(r.status, 200, "/tokenize status")
    toks = r.json()["tokens"]
    check(all(set(t) == {"id", "piece"} for t in toks), "each token is {id, piece}: %r", toks)
    eq("".join(t["piece"] for t in toks if isinstance(t["piece"], str)), "hello",
       "pieces concatenated")
    stop_ok(d)


@test
def tokenize_parse_special():
    """The fixture's "<|end|>" is a special added token (id 300): matched only with
    parse_special (the default), text otherwise."""
    d = pack_daemon()
    on = post_json(d, "/tokenize", {"content": "a<|end|>"}).json()["tokens"]
    off = post_json(d, "/tokenize", {"content": "a<|end|>", "parse_special": False}).json()["tokens"]
    check(300 in on, "special token not matched with parse_special: %r", on)
    check(300 not in off and len(off) > len(on), "special token matched without parse_special: %r",
          off)
    stop_ok(d)


@test
def tokenize_bad_requests():
    d = pack_daemon()
    r = d.post("/tokenize", data=b"{not json", headers={"Content-Type": "application/json"})
    assert_error_object(r, 400, "invalid_request_error", "invalid_json")
    r = post_json(d, "/tokenize", ["content"])
    assert_error_object(r, 400, "invalid_request_error")
    r = post_json(d, "/tokenize", {"content": 5})
    assert_error_object(r, 400, "invalid_request_error", param="content")
    r = post_json(d, "/tokenize", {"content": "x", "with_pieces": "yes"})
    assert_error_object(r, 400, "invalid_request_error", param="with_pieces")
    r = post_json(d, "/detokenize", {"tokens": [1, -1]})
    assert_error_object(r, 400, "invalid_request_error", param="tokens[1]")
    r = post_json(d, "/detokenize", {"tokens": [10 ** 9]})
    assert_error_object(r, 400, "invalid_request_error", param="tokens[0]")
    r = post_json(d, "/detokenize", {"tokens": "1 2"})
    assert_error_object(r, 400, "invalid_request_error", param="tokens")
    eq(d.get("/health").status, 200, "still healthy")
    stop_ok(d)


@test
def text_endpoints_need_a_model():
    d = Daemon().start()
    for path, body in (("/tokenize", {"content": "x"}), ("/detokenize", {"tokens": [1]}),
                       ("/apply-template", {"messages": [{"role": "user", "content": "x"}]})):
        r = post_json(d, path, body)
        assert_error_object(r, 503, "unavailable_error", "no_model")
    stop_ok(d)


@test
def apply_template_matches_jinja2():
    try:
        import oracle
    except ImportError as e:  # python3-jinja2 is a test dependency (tools/deps.sh)
        raise AssertionError("cannot import the Jinja2 oracle: %s" % e)
    template = oracle.load_template(TEMPLATE)
    requests = [
        {"messages": [{"role": "user", "content": "Hi there"}]},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "2+2?"},
                      {"role": "assistant", "content": "4"},
                      {"role": "user", "content": "and 3+3? ünïcødé 你好 🙂"}],
         "chat_template_kwargs": {"enable_thinking": False}},
        {"messages": [{"role": "user", "content": "weather in Paris?"}],
         "tools": [{"type": "function", "function": {
             "name": "get_weather", "description": "Weather for a city",
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}}],
         "chat_template_kwargs": {"enable_thinking": True}},
    ]
    d = pack_daemon()
    for req in requests:
        want = oracle.render(template, req)
        r = post_json(d, "/apply-template", req)
        eq(r.status, 200, "/apply-template status")
        eq(r.json().get("prompt"), want, "prompt for %s" % json.dumps(req)[:80])
    stop_ok(d)


@test
def apply_template_is_the_prompt_the_model_gets():
    """/apply-template goes through the chat request's own parse: tool_choice
    decides which tools the template shows (none: no tools; a named function:
    only that one), and the prompt it returns is, token for token, what a chat
    completion with the same body counts as its prompt."""
    tool = lambda name: {"type": "function", "function": {  # noqa: E731
        "name": name, "description": "Look up " + name,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}
    base = {"model": "MiniCPM5-2B", "messages": [{"role": "user", "content": "weather?"}],
            "tools": [tool("get_weather"), tool("get_time")],
            "chat_template_kwargs": {"enable_thinking": False}}
    cases = [({}, ["get_weather", "get_time"]),
             ({"tool_choice": "none"}, []),
             ({"tool_choice": "required"}, ["get_weather", "get_time"]),
             ({"tool_choice": {"type": "function", "function": {"name": "get_time"}}},
              ["get_time"])]
    d = pack_daemon()
    lengths = set()
    for extra, shown in cases:
        body = dict(base, **extra)
        r = post_json(d, "/apply-template", body)
        eq(r.status, 200, "/apply-template status for %r" % extra)
        prompt = r.json()["prompt"]
        for name in ("get_weather", "get_time"):
            eq(name in prompt, name in shown, "%s shown with %r" % (name, extra))
        check(prompt.endswith("<think>\n\n</think>\n\n"), "thinking off: %r", prompt[-40:])
        ids = post_json(d, "/tokenize", {"content": prompt}).json()["tokens"]
        r = post_json(d, "/v1/chat/completions", dict(body, max_tokens=1, temperature=0),
                      timeout=60)
        eq(r.status, 200, "chat status for %r" % extra)
        eq(r.json()["usage"]["prompt_tokens"], len(ids),
           "prompt tokens of the chat vs the tokenized /apply-template prompt, %r" % extra)
        lengths.add(len(ids))
    check(len(lengths) >= 3, "the cases must give different prompts: %r", lengths)
    stop_ok(d)


@test
def apply_template_refusal_names_param():
    d = pack_daemon()
    r = post_json(d, "/apply-template", {"messages": []})
    assert_error_object(r, 400, "invalid_request_error")
    r = post_json(d, "/apply-template", {"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "f", "arguments": "{not json"}}]}]})
    assert_error_object(r, 400, "invalid_request_error",
                        param="messages[1].tool_calls[0].function.arguments")
    stop_ok(d)


@test
def text_endpoints_need_the_api_key():
    d = pack_daemon(args=["--api-key", "k3y"])
    r = post_json(d, "/tokenize", {"content": "x"})
    assert_error_object(r, 401, "authentication_error")
    r = d.post("/tokenize", data=b'{"content":"x"}', headers={"Authorization": "Bearer k3y"})
    eq(r.status, 200, "with the key")
    stop_ok(d)



# ---- bounded memory and a lane of their own -------------------


def proc_mb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no %s in /proc/%d/status" % (key, pid))


def sanitized():
    """An ASan build has its own allocator (quarantine, shadow): RSS says nothing
    about the daemon's own bounds there."""
    with open(binary(), "rb") as f:
        return b"__asan_init" in f.read()


def big_post(d, path, body, timeout=300):
    c = http.client.HTTPConnection(d.host, d.port, timeout=timeout)
    try:
        c.request("POST", path, body, {"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


@test
def tokenize_8mb_with_pieces_memory_bounded():
    """An 8 MB /tokenize body with pieces took RSS from 7 MB to 3.2 GB, and it
    stayed there at idle. Now: peak under 300 MB, and back within 50 MB of the
    start after the answer (a memory bound, so it waits for the state, not a
    clock)."""
    if sanitized():
        raise Skip("RSS bounds are about glibc's allocator, not ASan's")
    d = pack_daemon()
    pid = d.proc.pid
    start = proc_mb(pid, "VmRSS")
    body = json.dumps({"content": "ab " * (8_000_000 // 3 - 20), "with_pieces": True}).encode()
    check(len(body) <= 8 << 20, "body %d bytes is over the default --max-body-bytes", len(body))
    status, data = big_post(d, "/tokenize", body)
    eq(status, 200, "/tokenize status")
    toks = json.loads(data)["tokens"]
    check(len(toks) > 2_000_000, "only %d tokens", len(toks))
    eq(toks[0], {"id": toks[0]["id"], "piece": toks[0]["piece"]}, "first token's shape")
    del data, toks
    peak = proc_mb(pid, "VmHWM")
    check(peak < 300, "peak RSS %.0f MB (start %.0f MB) for an 8 MB /tokenize", peak, start)
    wait_for(lambda: proc_mb(pid, "VmRSS") <= start + 50, 60,
             "RSS back within 50 MB of its start (%.0f MB)" % start, interval=0.1)
    stop_ok(d)


@test
def tokenize_answer_over_the_cap_is_413():
    """The answer is bounded too (256 MiB): a bigger one is a 413 naming content,
    not gigabytes of heap."""
    d = pack_daemon(["--max-body-bytes", "16M"])
    body = json.dumps({"content": "ab " * 4_500_000, "with_pieces": True}).encode()
    status, data = big_post(d, "/tokenize", body)
    eq(status, 413, "status for a with_pieces answer over the cap")
    err = json.loads(data)["error"]
    eq(err["param"], "content", "param")
    check("with_pieces" in err["message"], "message: %r", err["message"])
    stop_ok(d)


def unread_bytes(port):
    """Bytes waiting in the receive queues of the daemon's end of its TCP
    connections on `port` (/proc/net/tcp: rx_queue of local port `port`)."""
    total = 0
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, st, queues = fields[1], fields[3], fields[4]
            if st == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                total += int(queues.split(":")[1], 16)
    return total


@test
def chat_not_starved_by_a_tokenize_burst():
    """Eight 1 MB /tokenize calls used to take every libuv pool thread, and a chat
    request's prompt waited for them (0.01 s -> 8.2 s). Text jobs now take one
    thread at a time (UT_TEXT_JOBS_IN_FLIGHT) and wait in a queue, so the chat
    answer comes before every queued job's answer. The one job already running
    when the chat request arrives may finish first (it started up to a job's time
    before; seen in CI: 1 answer ahead of a 65 ms chat), so one is allowed. Each job
    is ~3 MB (~0.3 s of tokenizing, against the chat's ~0.07 s): a second answer
    ahead of the chat would need a queued job to start and finish meanwhile."""
    d = pack_daemon()
    body = json.dumps({"content": "ab " * 1_000_000, "with_pieces": True}).encode()
    head = ("POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\n\r\n" % len(body)).encode()
    socks = []
    try:
        for _ in range(8):
            s = d.connect(timeout=60)
            s.sendall(head + body)
            socks.append(s)
        # sendall() returns once the kernel has the bytes; wait until the daemon has
        # read them all (its sockets' receive queues are empty), so the eight jobs
        # are queued before the chat request arrives.
        wait_for(lambda: unread_bytes(d.port) == 0, 60, "the daemon to read the eight bodies")
        r = post_json(d, "/v1/chat/completions",
                      {"model": "MiniCPM5-2B", "messages": [{"role": "user", "content": "hi"}],
                       "max_tokens": 1},
                      timeout=60)
        eq(r.status, 200, "chat status during the burst")
        readable, _, _ = select.select(socks, [], [], 0)
        check(len(readable) <= 1, "/tokenize answers that came before the chat answer: %d "
              "(at most the one running when the chat arrived)", len(readable))
    finally:
        for s in socks:
            s.close()
    stop_ok(d)



@test
def integer_past_int64_names_the_field():
    """An integer beyond int64 was "not valid JSON"; it is a 400
    naming the field."""
    d = pack_daemon()
    body = b'{"content": "x", "with_pieces": 99999999999999999999}'
    r = d.post("/tokenize", data=body, headers={"Content-Type": "application/json"})
    err = assert_error_object(r, status=400, param="with_pieces")
    check("not valid JSON" not in err["message"], "message: %r", err["message"])
    check("out of range" in err["message"], "message: %r", err["message"])
    stop_ok(d)


if __name__ == "__main__":
    run_main()
