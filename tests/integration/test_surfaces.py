#!/usr/bin/python3
"""The API surfaces beside chat completions, through their official clients against
the real daemon on the tiny pack: POST /v1/completions with the OpenAI Node SDK
(tests/oracle/sdk-completions.mjs), POST /v1/responses with the same SDK
(tests/oracle/sdk-responses.mjs), and the Ollama API with the `ollama` npm client
(tests/oracle/ollama-client.mjs), one scenario per test function; and Open WebUI's
own Ollama request shapes, sent as it sends them.

Skips (exit 77) only when the npm oracles are not installed (tools/deps.sh test)."""
import os
import shutil
import subprocess
import sys
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from harness import Skip, check, pack_daemon, run_main, stop_ok, test  # noqa: E402

ORACLE = os.path.join(HERE, "..", "oracle")
PACK = "MiniCPM5-2B"
NODE_TIMEOUT = 50


def need(module):
    if not os.path.isdir(os.path.join(ORACLE, "node_modules", module)):
        raise Skip("tests/oracle/node_modules/%s is missing (tools/deps.sh test installs it)"
                   % module)
    if not shutil.which("node"):
        raise Skip("node is not installed")


def node(script, scenario, base, args=(), module="openai", key="unused"):
    """Run one scenario of tests/oracle/SCRIPT against a fresh daemon."""
    need(module)
    d = pack_daemon(list(args))
    t0 = time.monotonic()
    try:
        out = subprocess.run(["node", os.path.join(ORACLE, script), scenario, d.url(base), key,
                              PACK], capture_output=True, text=True, timeout=NODE_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        check(False, "%s %s: no answer in %d s; output so far:\n%s%s", script, scenario,
              NODE_TIMEOUT, e.stdout or "", e.stderr or "")
    print("%s %s (%.1f s):\n%s" % (script, scenario, time.monotonic() - t0, out.stdout.rstrip()))
    check(out.returncode == 0, "%s %s failed (exit %d):\n%s%s", script, scenario,
          out.returncode, out.stdout, out.stderr)
    stop_ok(d)


@test
def sdk_completions_nonstream():
    """completions.create: the Completion shape, token-id and array prompts, echo,
    stop, max_tokens -1."""
    node("sdk-completions.mjs", "nonstream", "/v1")


@test
def sdk_completions_logprobs():
    """Legacy logprobs (tokens, token_logprobs, top_logprobs, text_offset), streamed
    and not, equal."""
    node("sdk-completions.mjs", "logprobs", "/v1")


@test
def sdk_completions_stream():
    """stream with echo and stream_options.include_usage."""
    node("sdk-completions.mjs", "stream", "/v1")


@test
def sdk_completions_echo():
    """echo with logprobs: the prompt's tokens and logprobs first (the first null),
    streamed and not the same; max_tokens 0 scores the prompt alone; a list of 8
    prompts gives 8 choices in order."""
    node("sdk-completions.mjs", "echo", "/v1")


@test
def sdk_completions_errors():
    """suffix, 9 prompts, several prompts streamed, n 2, logprobs 6, max_tokens 0
    without echo: 400 naming the param (BadRequestError); an unknown model:
    NotFoundError."""
    node("sdk-completions.mjs", "errors", "/v1")


@test
def sdk_responses_nonstream():
    """responses.create: the Response object, its items and usage, instructions,
    reasoning.effort none / high, a list of messages with input_text parts."""
    node("sdk-responses.mjs", "nonstream", "/v1")


@test
def sdk_responses_stream():
    """The documented event order with sequence numbers, and the SDK's
    responses.stream() helper's finalResponse."""
    node("sdk-responses.mjs", "stream", "/v1")


@test
def sdk_responses_tools():
    """Function tools, a function_call / function_call_output round trip, streamed."""
    node("sdk-responses.mjs", "tools", "/v1")


@test
def sdk_responses_errors():
    """previous_response_id (stateless: 400 saying so), other tool types, images,
    unknown text formats: BadRequestError naming the param."""
    node("sdk-responses.mjs", "errors", "/v1")


@test
def ollama_list_show():
    """version, list (/api/tags), ps, show (also name:latest), 404 as {"error"}."""
    node("ollama-client.mjs", "list_show", "", module="ollama")


@test
def ollama_chat():
    """chat streamed (NDJSON) and not, options.num_predict, think, keep_alive."""
    node("ollama-client.mjs", "chat", "", module="ollama")


@test
def ollama_chat_tools():
    """tools, an assistant tool call with object arguments and a tool message."""
    node("ollama-client.mjs", "tools", "", module="ollama")


@test
def ollama_generate():
    """generate streamed and not, system, raw, the empty-prompt preload, format json,
    images refused with 400."""
    node("ollama-client.mjs", "generate", "", module="ollama")


@test
def open_webui_ollama_shapes():
    """The requests Open WebUI's Ollama connection sends (backend/open_webui/routers/
    ollama.py and utils/payload.py, convert_payload_openai_to_ollama): its model
    list calls, /api/show by "name" (older) and "model", and /api/chat with every
    option it forwards (runtime ones such as num_ctx, num_gpu, mirostat included),
    keep_alive as a duration or -1, format from a json_schema response_format, think,
    tools, messages with empty images and tool calls with object arguments. Each
    parses (200), streams NDJSON lines that each parse, and ends with done."""
    import json
    from harness import eq
    d = pack_daemon()
    for path in ("/api/version", "/api/tags", "/api/ps"):
        eq(d.get(path).status, 200, path)
    H = {"Content-Type": "application/json"}
    for key in ("name", "model"):
        r = d.post("/api/show", data=json.dumps({key: PACK}), headers=H)
        eq(r.status, 200, "/api/show by " + key)
    options = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42,
               "stop": ["<|im_end|>", "\n\nUser:"], "num_predict": 8, "repeat_penalty": 1.1,
               "repeat_last_n": 64, "num_ctx": 2048, "num_batch": 512, "num_keep": 24,
               "num_gpu": 99, "num_thread": 2, "use_mmap": True, "use_mlock": False,
               "mirostat": 0, "mirostat_eta": 0.1, "mirostat_tau": 5.0, "tfs_z": 1.0,
               "frequency_penalty": 0.2, "presence_penalty": 0.1}
    messages = [{"role": "system", "content": "You are helpful."},
                {"role": "user", "content": "Weather in Paris?", "images": []},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"function": {"name": "get_weather",
                                              "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "21 C"},
                {"role": "user", "content": "Thanks. And tomorrow?"}]
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]}}}]
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    bodies = [
        {"model": PACK, "messages": messages, "stream": True, "options": options,
         "keep_alive": "5m", "tools": tools, "think": False},
        {"model": PACK + ":latest", "messages": messages[:2], "stream": False,
         "options": options, "keep_alive": -1, "format": schema},
        {"model": PACK, "messages": messages[:2], "stream": True, "options": options,
         "format": "json", "think": True},
    ]
    for b in bodies:
        r = d.post("/api/chat", data=json.dumps(b), headers=H, timeout=60)
        eq(r.status, 200, "/api/chat status for %s" % json.dumps(b)[:120])
        lines = [json.loads(l) for l in r.body.decode().splitlines() if l.strip()]
        check(lines and lines[-1].get("done") is True and
              all("message" in l for l in lines), "NDJSON lines: %r", lines[-2:])
        if b["stream"]:
            check(r.headers.get("content-type", [""])[0].startswith("application/x-ndjson"),
                  "content type %r", r.headers)
    # The task model calls (title, tags) go through /api/chat non-streamed too, and
    # errors come back in Ollama's shape.
    r = d.post("/api/chat", data=json.dumps({"model": "other", "messages": messages}), headers=H)
    eq(r.status, 404, "unknown model")
    check(set(r.json()) == {"error"}, "Ollama's error shape: %r", r.json())
    stop_ok(d)


if __name__ == "__main__":
    run_main()
