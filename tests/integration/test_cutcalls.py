#!/usr/bin/python3
"""No markup in text, ever: answers that max_tokens cuts in the middle of a tool call
(or of a thinking block) end with finish_reason "length" (Responses: status
"incomplete"; Ollama: done_reason "length") and their text holds no tool-call or
thinking markup, streamed and not, on every surface that parses the output:

  - chat completions and Responses on the random-weight `tiny` pack, temperature 1,
    tool_choice "required" or a named function (the grammar makes the model write
    calls), max_tokens small enough to cut most of them;
  - Anthropic's /v1/messages the same way (tool_choice any or a named tool);
  - Ollama's /api/chat, which has no tool_choice, on the trained demo model, which
    calls get_weather when asked the weather, num_predict cutting its calls.

A cut call is kept with its arguments cut (OpenAI's behaviour, docs/api.md): on
chat its arguments are a JSON text left open, on Responses the function_call item
is "incomplete", on Anthropic's a tool_use block holds what of its input was whole;
Ollama's calls carry an arguments object, so a cut one is left out.

Each surface and mode collects CUT answers (default 3, to keep the suite short; MINICPMD_CUT_ANSWERS=100 is
the full check) that were cut, counting those with markup in their text."""
import json
import os
import random
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "train"))

from harness import Daemon, Skip, check, eq, generated_pack, run_main, stop_ok, test, wait_ready  # noqa: E402

CUT = int(os.environ.get("MINICPMD_CUT_ANSWERS", "3"))
MARKUP = ("<function", "</function", "<param", "</param", "<think", "</think", "<![CDATA[")
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"]}}},
]


def tiny():
    d = Daemon(["--model", generated_pack("tiny")])
    d.start()
    wait_ready(d, 30)
    return d


def markup(text):
    return [m for m in MARKUP if m in (text or "")]


def sse(raw):
    for block in raw.decode("utf-8").split("\n\n"):
        for line in block.split("\n"):
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[6:])


def chat_answer(d, rng, stream):
    """(text, cut, open_args): the content, whether max_tokens cut it, and how many
    tool calls have arguments that do not parse (cut ones)."""
    choice = rng.choice(["required", {"type": "function", "function": {"name": "write_file"}}])
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Use a tool"}],
            "tools": TOOLS, "tool_choice": choice, "temperature": 1.0,
            "seed": rng.randrange(1 << 30), "max_tokens": rng.randrange(6, 40), "stream": stream}
    r = d.post("/v1/chat/completions", json.dumps(body).encode(), timeout=120)
    eq(r.status, 200, "chat: %r" % r.body[:300])
    if stream:
        text, finish, calls = "", None, {}
        for e in sse(r.body):
            for c in e.get("choices", []):
                delta = c.get("delta", {})
                text += delta.get("content") or ""
                for tc in delta.get("tool_calls") or []:
                    calls[tc["index"]] = calls.get(tc["index"], "") + \
                        (tc.get("function", {}).get("arguments") or "")
                finish = c.get("finish_reason") or finish
        args = list(calls.values())
    else:
        c = r.json()["choices"][0]
        text, finish = c["message"].get("content") or "", c["finish_reason"]
        args = [t["function"]["arguments"] for t in c["message"].get("tool_calls") or []]
    return text, finish == "length", sum(not parses(a) for a in args)


def parses(s):
    try:
        return isinstance(json.loads(s), dict)
    except ValueError:
        return False


def responses_answer(d, rng, stream):
    choice = rng.choice(["required", {"type": "function", "name": "write_file"}])
    tools = [dict(type="function", name=t["function"]["name"],
                  parameters=t["function"]["parameters"]) for t in TOOLS]
    body = {"model": "tiny", "input": "Use a tool", "tools": tools, "tool_choice": choice,
            "temperature": 1.0, "max_output_tokens": rng.randrange(6, 40), "stream": stream}
    r = d.post("/v1/responses", json.dumps(body).encode(), timeout=120)
    eq(r.status, 200, "responses: %r" % r.body[:300])
    if stream:
        final = None
        for e in sse(r.body):
            if e.get("type") in ("response.completed", "response.incomplete"):
                final = e["response"]
        check(final is not None, "no final response event")
    else:
        final = r.json()
    text = "".join(part.get("text", "") for item in final["output"] if item["type"] == "message"
                   for part in item["content"])
    cut_calls = sum(item["type"] == "function_call" and item["status"] == "incomplete"
                    for item in final["output"])
    return text, final["status"] == "incomplete", cut_calls


def ollama_answer(d, rng, stream):
    import corpus
    city = rng.choice(["Paris", "Lima", "Oslo", "Cairo", "Quito", "Hanoi"])
    body = {"model": d.model_id, "messages": [
        {"role": "user", "content": "What's the weather in %s?" % city}],
        "tools": [corpus.WEATHER_TOOL], "stream": stream,
        "options": {"temperature": 1.0, "seed": rng.randrange(1 << 30),
                    "num_predict": rng.randrange(4, 20)}}
    r = d.post("/api/chat", json.dumps(body).encode(), timeout=120)
    eq(r.status, 200, "ollama: %r" % r.body[:300])
    lines = [json.loads(x) for x in r.body.decode("utf-8").split("\n") if x.strip()]
    text = "".join(x.get("message", {}).get("content", "") for x in lines)
    calls = sum(len(x.get("message", {}).get("tool_calls") or []) for x in lines)
    last = lines[-1]
    return text, last.get("done_reason") == "length", calls


def anthropic_answer(d, rng, stream):
    """Anthropic's /v1/messages: tool_choice any or a named tool; a cut call is a
    tool_use block (its input what was whole), never text."""
    choice = rng.choice([{"type": "any"}, {"type": "tool", "name": "write_file"}])
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
             for t in TOOLS]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Use a tool"}],
            "tools": tools, "tool_choice": choice, "temperature": 1.0,
            "max_tokens": rng.randrange(6, 40), "stream": stream}
    r = d.post("/v1/messages", json.dumps(body).encode(), timeout=120)
    eq(r.status, 200, "messages: %r" % r.body[:300])
    if stream:
        text, stop, calls = "", None, 0
        for e in sse(r.body):
            if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta":
                text += e["delta"]["text"]
            elif e["type"] == "content_block_start":
                calls += e["content_block"]["type"] == "tool_use"
            elif e["type"] == "message_delta":
                stop = e["delta"]["stop_reason"]
    else:
        m = r.json()
        text = "".join(b["text"] for b in m["content"] if b["type"] == "text")
        stop, calls = m["stop_reason"], sum(b["type"] == "tool_use" for b in m["content"])
    return text, stop == "max_tokens", calls if stop == "max_tokens" else 0


def collect(d, ask, stream, seed, what):
    rng = random.Random(seed)
    cut = dirty = kept = tries = 0
    while cut < CUT:
        tries += 1
        check(tries <= 6 * CUT, "%s: only %d of %d answers were cut", what, cut, tries)
        text, was_cut, n = ask(d, rng, stream)
        bad = markup(text)
        check(not bad, "%s: markup %r in the text %r", what, bad, text)
        if was_cut:
            cut += 1
            kept += n
            dirty += bool(bad)
    print("%s: %d cut answers (of %d), %d with markup in the text; %s %d" % (
        what, cut, tries, dirty, "calls kept cut" if ask is not ollama_answer
        else "whole calls", kept))
    eq(dirty, 0, "%s: cut answers with markup" % what)


@test
def chat_cut_calls_have_no_markup():
    d = tiny()
    collect(d, chat_answer, False, 1, "chat")
    collect(d, chat_answer, True, 2, "chat stream")
    stop_ok(d)


@test
def responses_cut_calls_have_no_markup():
    d = tiny()
    collect(d, responses_answer, False, 3, "responses")
    collect(d, responses_answer, True, 4, "responses stream")
    stop_ok(d)


@test
def anthropic_cut_calls_have_no_markup():
    d = tiny()
    collect(d, anthropic_answer, False, 8, "anthropic")
    collect(d, anthropic_answer, True, 9, "anthropic stream")
    stop_ok(d)


@test
def ollama_cut_calls_have_no_markup():
    pack = os.environ.get("MINICPMD_DEMO_PACK")
    if not pack:
        raise Skip("MINICPMD_DEMO_PACK is not set (meson test sets it to build/demo-pack)")
    d = Daemon(["--model", pack, "--device", "cpu"])
    d.start()
    wait_ready(d, 60)
    d.model_id = json.loads(d.get("/v1/models").body)["data"][0]["id"]
    collect(d, ollama_answer, False, 5, "ollama")
    collect(d, ollama_answer, True, 6, "ollama stream")
    stop_ok(d)


@test
def cut_thinking_stays_reasoning():
    """A thinking block max_tokens cuts: its text is reasoning, never content."""
    d = tiny()
    rng = random.Random(7)
    for i in range(6):
        stream = i % 2 == 1
        body = {"model": "tiny", "messages": [{"role": "user", "content": "Think"}],
                "chat_template_kwargs": {"enable_thinking": True}, "temperature": 1.0,
                "seed": rng.randrange(1 << 30), "max_tokens": rng.randrange(3, 30),
                "stream": stream}
        r = d.post("/v1/chat/completions", json.dumps(body).encode(), timeout=120)
        eq(r.status, 200, "chat")
        if stream:
            text = "".join(c.get("delta", {}).get("content") or "" for e in sse(r.body)
                           for c in e.get("choices", []))
        else:
            text = r.json()["choices"][0]["message"].get("content") or ""
        check(not markup(text), "markup in %r", text)
    stop_ok(d)


if __name__ == "__main__":
    run_main()
