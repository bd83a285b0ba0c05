#!/usr/bin/python3
"""What clients send that peers accept, against the real
daemon on the `tiny` pack: max_tokens -1, up to 16 stop strings kept whole (any
length up to the bound, NUL bytes matched as bytes), /tokenize add_special, and
an assistant message last in `messages` continued (prefill)."""
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (assert_error_object, check, eq, pack_daemon, run_main,  # noqa: E402
                     stop_ok, test)

PACK = "MiniCPM5-2B"
JSON = {"Content-Type": "application/json"}
# The tiny pack's stop ids (1, 1023), its special tokens and the ids its tokenizer
# has no text for (307..1023 of the model's 1024): never end early, always text.
NO_EOS = {str(i): -100 for i in [1, 300, 301, 302, 304] + list(range(307, 1024))}


def chat(d, messages=None, **kw):
    b = {"model": PACK, "messages": messages or [{"role": "user", "content": "Hello there"}]}
    b.update(kw)
    return d.post("/v1/chat/completions", data=json.dumps(b), headers=JSON, timeout=60)


def greedy(d, n, **kw):
    """The greedy answer of n tokens with no stop id: the text the stops cut."""
    r = chat(d, temperature=0, max_tokens=n, logit_bias=NO_EOS, **kw)
    eq(r.status, 200, "greedy status")
    return r.json()["choices"][0]


@test
def long_stop_is_kept_whole():
    """A 268-byte stop whose first 255 bytes occur in the answer but which does not:
    the answer is whole (finish length). The old server cut stops at 255 bytes,
    matched the prefix and returned a cut answer with finish_reason stop."""
    d = pack_daemon()
    full = greedy(d, 400)["message"]["content"]
    raw = full.encode("utf-8")
    check(len(raw) > 300, "the greedy answer is only %d bytes", len(raw))
    # Whole characters of the answer from the 5th on, at least 256 bytes: the first
    # 255 bytes of the stop are bytes of the answer (where the old cut fell).
    prefix = ""
    for ch in full[4:]:
        if len(prefix.encode("utf-8")) >= 256:
            break
        prefix += ch
    stop = prefix + "\u0007" * max(1, 268 - len(prefix.encode("utf-8")))
    check(len(stop.encode()) >= 268 and stop not in full, "the stop must not occur whole")
    got = greedy(d, 400, stop=[stop])
    eq(got["finish_reason"], "length", "finish_reason with a stop that never occurs whole")
    eq(got["message"]["content"], full, "the answer")
    # And one that does occur whole, longer than 255 bytes, still stops there.
    hit = raw[4:4 + 280].decode("utf-8", "ignore")
    got = greedy(d, 400, stop=[hit])
    eq(got["finish_reason"], "stop", "finish_reason with a long stop that occurs")
    eq(got["message"]["content"], full[:full.index(hit)], "the answer before the stop")
    stop_ok(d)


@test
def stop_with_nul_is_refused():
    """"\\u0000" in a stop (or any string) is refused with 400 and a message that
    says so, never cut at the NUL (the old stop matched the part before it). The
    body is refused before any field is read, so no stop can be half-applied."""
    d = pack_daemon()
    r = chat(d, stop=["ab\u0000cd"])
    assert_error_object(r, 400, "invalid_request_error", code="invalid_json")
    # jansson refused it before too, with its own wording ("… without JSON_ALLOW_NUL");
    # the message now says what the client sent and that no field takes it.
    check("a NUL character" in r.json()["error"]["message"], "the message names the NUL: %r",
          r.json())
    stop_ok(d)


@test
def sixteen_stops_and_max_tokens_minus_one():
    """Open WebUI's shapes: max_tokens -1 (no limit) and more than 4 stops: 200, as
    llama.cpp answers. 17 stops, max_tokens 0 and stops over the byte bound: 400."""
    d = pack_daemon()
    full = greedy(d, 40)["message"]["content"]
    stops = ["\u0007%d" % i for i in range(15)] + [full[5:9]]
    got = greedy(d, 40, stop=stops)
    eq(got["finish_reason"], "stop", "finish_reason with the 16th stop occurring")
    eq(got["message"]["content"], full[:full.index(full[5:9])], "cut at the 16th stop")
    r = chat(d, temperature=0, max_tokens=-1, logit_bias=NO_EOS, stop=full[5:9])
    eq(r.status, 200, "max_tokens -1 status")
    eq(r.json()["choices"][0]["message"]["content"], full[:full.index(full[5:9])],
       "max_tokens -1 generates until the stop")
    r = chat(d, max_completion_tokens=-1, max_tokens=3)
    eq(r.status, 200, "max_completion_tokens -1 status")
    assert_error_object(chat(d, stop=["a"] * 17), 400, "invalid_request_error", param="stop")
    assert_error_object(chat(d, max_tokens=0), 400, "invalid_request_error", param="max_tokens")
    assert_error_object(chat(d, max_tokens=-2), 400, "invalid_request_error", param="max_tokens")
    assert_error_object(chat(d, stop=["x" * 5000, "y" * 4000]), 400, "invalid_request_error",
                        param="stop[1]")
    stop_ok(d)


@test
def tokenize_add_special():
    """add_special adds what the tokenizer.json's post_processor puts around the
    text (a TemplateProcessing with "<L>", id 301, here; MiniCPM5's is "<s>"). The old
    server parsed the flag and never used it."""
    d = pack_daemon(start=False)
    path = os.path.join(d.pack, "tokenizer.json")
    with open(path) as f:
        tj = json.load(f)
    bos = {"SpecialToken": {"id": "<L>", "type_id": 0}}
    tj["post_processor"] = {"type": "TemplateProcessing",
                            "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                                     {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<L>": {"id": "<L>", "ids": [301],
                                                       "tokens": ["<L>"]}}}
    with open(path, "w") as f:
        json.dump(tj, f)
    d.start()
    from harness import wait_ready
    wait_ready(d)

    def tok(**kw):
        r = d.post("/tokenize", data=json.dumps(dict(content="hello", **kw)), headers=JSON)
        eq(r.status, 200, "/tokenize status")
        return r.json()["tokens"]
    plain = tok()
    eq(tok(add_special=False), plain, "add_special false")
    eq(tok(add_special=True), [301] + plain, "add_special true")
    # Chat prompts never get it twice: the template writes the BOS itself.
    r = d.post("/apply-template", data=json.dumps({"messages": [{"role": "user",
                                                                  "content": "hi"}]}),
               headers=JSON)
    eq(r.status, 200, "/apply-template status")
    stop_ok(d)


@test
def assistant_prefill_continues():
    """An assistant message last is continued (transformers' continue_final_message,
    llama.cpp's prefill): /apply-template equals Jinja2 on the official template
    rendered with add_generation_prompt false and cut after the stripped content
    (tests/chat/oracle.py); the old server closed the turn and opened a new one. A
    prefill inside <think> goes on as reasoning."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat"))
    import oracle
    template = oracle.load_template(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "..", "data", "minicpm5-2b",
                                                 "chat_template.jinja"))
    u = {"role": "user", "content": "What is 2+2?"}
    d = pack_daemon()
    for msgs, extra in (([u, {"role": "assistant", "content": "The answer is "}], {}),
                        ([u, {"role": "assistant", "content": "<think>\nLet me"}], {}),
                        ([u, {"role": "assistant", "content": "4"}],
                         {"continue_final_message": False})):
        req = dict(messages=msgs, **extra)
        want = oracle.render(template, req)
        r = d.post("/apply-template", data=json.dumps(req), headers=JSON)
        eq(r.status, 200, "/apply-template status")
        eq(r.json()["prompt"], want, "prompt for %s" % json.dumps(req))
    check(oracle.render(template, {"messages": [u, {"role": "assistant", "content": "x "}]})
          .endswith("</think>\n\nx"), "the oracle continues the prefill")
    got = greedy(d, 20, messages=[u, {"role": "assistant", "content": "<think>\nLet me"}])
    msg = got["message"]
    check(msg.get("reasoning_content") and not msg.get("content"),
          "a prefill inside <think> continues as reasoning: %r", msg)
    r = chat(d, messages=[u], continue_final_message=True)
    assert_error_object(r, 400, "invalid_request_error")
    stop_ok(d)


def _oracle():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "chat"))
    import oracle
    return oracle, oracle.load_template(os.path.join(here, "..", "data", "minicpm5-2b",
                                                     "chat_template.jinja"))


@test
def reasoning_effort_and_thinking_default():
    """reasoning_effort "none" renders byte for byte what Jinja2 renders with
    enable_thinking=false (the old server ignored it: the template's default); "high"
    as enable_thinking=true; with --thinking off a request that says nothing gets
    the thinking-off prompt, and enable_thinking wins over reasoning_effort."""
    oracle, template = _oracle()
    msgs = [{"role": "user", "content": "What is 2+2?"}]

    def want(thinking):
        req = {"messages": msgs}
        if thinking is not None:
            req["chat_template_kwargs"] = {"enable_thinking": thinking}
        return oracle.render(template, req)

    def prompt(d, **kw):
        r = d.post("/apply-template", data=json.dumps(dict(messages=msgs, **kw)), headers=JSON)
        eq(r.status, 200, "/apply-template status")
        return r.json()["prompt"]
    d = pack_daemon()
    eq(prompt(d, reasoning_effort="none"), want(False), "reasoning_effort none")
    eq(prompt(d, reasoning_effort="minimal"), want(False), "reasoning_effort minimal")
    eq(prompt(d, reasoning_effort="high"), want(True), "reasoning_effort high")
    eq(prompt(d), want(None), "nothing said, --thinking auto")
    eq(prompt(d, reasoning_effort="none", chat_template_kwargs={"enable_thinking": True}),
       want(True), "enable_thinking wins over reasoning_effort")
    assert_error_object(chat(d, reasoning_effort="max"), 400, "invalid_request_error",
                        param="reasoning_effort")
    stop_ok(d)
    d = pack_daemon(["--thinking", "off"])
    eq(prompt(d), want(False), "nothing said, --thinking off")
    eq(prompt(d, reasoning_effort="low"), want(True), "reasoning_effort low over --thinking off")
    stop_ok(d)


if __name__ == "__main__":
    run_main()
