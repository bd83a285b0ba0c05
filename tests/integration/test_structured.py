#!/usr/bin/python3
"""Structured outputs on a random-weight pack (the `tiny` preset: the model itself
never writes JSON, so every valid answer is the grammar's doing): response_format
json_schema / json_object, tool_choice required / named, the `grammar` field, and
the 400s for what is refused. Contents are checked by Debian's python3-jsonschema,
a validator independent of the server's compiler.

Each function is one meson test (integration-structured)."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Daemon, check, eq, generated_pack, run_main, stop_ok, test,  # noqa: E402
                     wait_ready)

try:
    import jsonschema
except ImportError:  # tools/deps.sh test installs python3-jsonschema
    print("SKIP: python3-jsonschema is not installed")
    sys.exit(77)

PACK = "tiny"
JSON = {"Content-Type": "application/json"}
MAX_TOKENS = 600

SCHEMAS = {
    "nested": {
        "type": "object",
        "properties": {
            "user": {"type": "object",
                     "properties": {"name": {"type": "string", "maxLength": 12},
                                    "age": {"type": "integer", "minimum": 0, "maximum": 130}},
                     "required": ["name", "age"], "additionalProperties": False},
            "active": {"type": "boolean"},
        },
        "required": ["user", "active"], "additionalProperties": False,
    },
    "array_of_objects": {
        "type": "object",
        "properties": {"items": {"type": "array", "minItems": 1, "maxItems": 4,
                                 "items": {"type": "object",
                                           "properties": {"id": {"type": "integer",
                                                                 "minimum": -5, "maximum": 99},
                                                          "tag": {"enum": ["a", "b", "c"]}},
                                           "required": ["id", "tag"]}}},
        "required": ["items"],
    },
    "enum_and_bounds": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", "blue", None, 3]},
                       "n": {"type": "integer", "minimum": 10, "maximum": 1234},
                       "neg": {"type": "integer", "maximum": -7, "minimum": -300},
                       "score": {"type": "number", "minimum": 0, "maximum": 10},
                       "fixed": {"const": "x\"y"}},
        "required": ["color", "n", "neg", "score", "fixed"],
    },
    "any_of": {
        "type": "object",
        "properties": {"v": {"anyOf": [{"type": "string", "maxLength": 6},
                                       {"type": "integer", "minimum": 0, "maximum": 9},
                                       {"type": "null"}]},
                       "w": {"type": ["boolean", "null"]},
                       "day": {"type": "string", "format": "date"},
                       "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}},
        "required": ["v", "w", "day", "code"],
    },
    "ref_recursion": {
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 9},
                                          "kids": {"type": "array", "maxItems": 2,
                                                   "items": {"$ref": "#/$defs/node"}}},
                           "required": ["v"], "additionalProperties": False}},
        "type": "object",
        "properties": {"tree": {"$ref": "#/$defs/node"},
                       "note": {"type": "string", "maxLength": 8}},
        "required": ["tree"],
    },
}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "weather of a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 12},
                                      "unit": {"enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "add",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 999},
                                      "b": {"type": "integer", "minimum": -9, "maximum": 9}},
                       "required": ["a", "b"]}}},
    {"type": "function", "function": {
        "name": "tag",
        "parameters": {"type": "object",
                       "properties": {"labels": {"type": "array", "maxItems": 3,
                                                 "items": {"type": "string", "maxLength": 5}},
                                      "urgent": {"type": "boolean"}},
                       "required": ["labels", "urgent"]}}},
]


def pack_daemon():
    """The tiny preset with its generated tokenizer (MiniCPM5's special tokens:
    <think>, </think> and the tool-call markup <function, <param, …)."""
    d = Daemon()
    d.args += ["--model", generated_pack("tiny")]
    d.start()
    wait_ready(d, 30)
    return d


def body(**kw):
    b = {"model": PACK, "messages": [{"role": "user", "content": "Answer in JSON"}],
         "temperature": 1.0, "max_tokens": MAX_TOKENS}
    b.update(kw)
    return json.dumps(b)


def chat(d, **kw):
    return d.post("/v1/chat/completions", data=body(**kw), headers=JSON, timeout=120)


def streamed(raw):
    """content, finish_reason and tool calls (by index) of an SSE body."""
    text, finish, calls = [], None, {}
    for block in raw.decode("utf-8").split("\n\n"):
        line = block.strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        e = json.loads(line[6:])
        for c in e.get("choices", []):
            delta = c.get("delta", {})
            if delta.get("content"):
                text.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                k = calls.setdefault(tc["index"], {"name": "", "arguments": ""})
                f = tc.get("function", {})
                k["name"] += f.get("name") or ""
                k["arguments"] += f.get("arguments") or ""
            if c.get("finish_reason"):
                finish = c["finish_reason"]
    return "".join(text), finish, [calls[i] for i in sorted(calls)]


def answer(d, stream, **kw):
    """(content, finish_reason, completion_tokens or None, tool calls)."""
    r = chat(d, stream=stream, **kw)
    eq(r.status, 200, "status: %r" % r.body[:300])
    if stream:
        text, finish, calls = streamed(r.body)
        return text, finish, None, calls
    j = r.json()
    c = j["choices"][0]
    calls = [t["function"] for t in c["message"].get("tool_calls") or []]
    return c["message"].get("content") or "", c["finish_reason"], \
        j["usage"]["completion_tokens"], calls


def check_content(name, schema, content, finish, used):
    if finish == "length":
        # only max_tokens may cut an answer: then it is allowed to be unfinished
        check(used in (None, MAX_TOKENS), "%s: length after %r tokens", name, used)
        return False
    eq(finish, "stop", "%s: finish_reason of %r" % (name, content))
    try:
        value = json.loads(content)
    except ValueError as e:
        raise AssertionError("%s: not JSON (%s): %r" % (name, e, content))
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError as e:
        raise AssertionError("%s: %s in %r" % (name, e.message, content))
    return True


# A tree may nest without end: a random model inside one may run to max_tokens
# (1 of its 20 answers did at temperature 1), so it only has to stop mostly.
UNBOUNDED = {"ref_recursion"}


def run_schemas(stream):
    d = pack_daemon()
    ok = 0
    n = 0
    cut = 0
    for name, schema in SCHEMAS.items():
        for i in range(20):
            rf = {"type": "json_schema", "json_schema": {"name": name, "schema": schema,
                                                         "strict": True}}
            content, finish, used, _ = answer(d, stream, seed=1000 * i + len(name),
                                              response_format=rf)
            stopped = check_content(name, schema, content, finish, used)
            ok += stopped
            cut += not stopped and name in UNBOUNDED
            n += 1
    # the other schemas are bounded: a random model finishes them well within MAX_TOKENS
    eq(ok, n - cut, "answers that finished with stop")
    check(cut <= 5, "%d of 20 answers to a recursive schema ran to max_tokens", cut)
    stop_ok(d)


@test
def json_schema_validates():
    run_schemas(stream=False)


@test
def json_schema_validates_streamed():
    run_schemas(stream=True)


@test
def json_object_parses_as_objects():
    """Strings in a free-form object are unbounded (docs/api.md): a random model inside one
    may run to max_tokens, which ends in length; every answer that stops parses as
    an object, and most do stop."""
    d = pack_daemon()
    stopped = 0
    for i in range(20):
        stream = i % 2 == 1
        content, finish, used, _ = answer(d, stream, seed=i, max_tokens=800,
                                          response_format={"type": "json_object"})
        if finish == "length":
            check(used in (None, 800), "length after %r tokens", used)
            continue
        eq(finish, "stop", "finish_reason")
        check(isinstance(json.loads(content), dict), "not an object: %r", content)
        stopped += 1
    check(stopped >= 10, "only %d of 20 answers stopped", stopped)
    stop_ok(d)


@test
def llama_cpp_schema_fields_validate():
    """llama.cpp's top-level `json_schema` and a `schema` inside {"type":
    "json_object"}: enforced on chat and on completions (streamed and not), every
    answer that stops validates; with `grammar` or a JSON response_format beside
    them, a 400."""
    d = pack_daemon()
    schema = SCHEMAS["enum_and_bounds"]
    asks = [{"json_schema": schema},
            {"response_format": {"type": "json_object", "schema": schema}}]
    stopped = 0
    for k, ask in enumerate(asks):
        for i in range(4):
            stream = i % 2 == 1
            if i < 2:
                content, finish, used, _ = answer(d, stream, seed=i, **ask)
            else:
                b = {"model": PACK, "prompt": "JSON:", "temperature": 1.0, "seed": i,
                     "max_tokens": MAX_TOKENS, "stream": stream}
                b.update(ask)
                r = d.post("/v1/completions", data=json.dumps(b), headers=JSON, timeout=120)
                eq(r.status, 200, "completions: %r" % r.body[:300])
                if stream:
                    content, finish, used = "", None, None
                    for block in r.body.decode("utf-8").split("\n\n"):
                        line = block.strip()
                        if line.startswith("data: {"):
                            for c in json.loads(line[6:]).get("choices", []):
                                content += c.get("text") or ""
                                finish = c.get("finish_reason") or finish
                else:
                    j = r.json()
                    content, finish = j["choices"][0]["text"], j["choices"][0]["finish_reason"]
                    used = j["usage"]["completion_tokens"]
            stopped += check_content("%s #%d" % (list(ask)[0], i), schema, content, finish, used)
    eq(stopped, 8, "answers that stopped")
    refused(d, "json_schema", ["grammar"], json_schema=schema, grammar='root ::= "a"\n')
    refused(d, "json_schema", ["response_format"], json_schema=schema,
            response_format={"type": "json_object"})
    refused(d, "json_schema", ["expected an object"], json_schema="{}")
    refused(d, "response_format.schema", ["expected an object"],
            response_format={"type": "json_object", "schema": []})
    refused(d, "json_schema", ["'uniqueItems'"],
            json_schema={"type": "array", "uniqueItems": True})
    stop_ok(d)


def validate_call(call, tools):
    byname = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    check(call["name"] in byname, "a call to an unknown function: %r", call)
    args = json.loads(call["arguments"])
    try:
        jsonschema.validate(args, byname[call["name"]])
    except jsonschema.ValidationError as e:
        raise AssertionError("%s: %s in %r" % (call["name"], e.message, args))


@test
def tool_choice_required_calls_valid_tools():
    d = pack_daemon()
    seen = set()
    for i in range(30):
        stream = i % 2 == 1
        _, finish, used, calls = answer(d, stream, seed=i, tools=TOOLS, tool_choice="required",
                                        max_tokens=1500)
        eq(finish, "tool_calls", "finish_reason (calls %r)" % calls)
        check(len(calls) >= 1, "no tool call")
        for c in calls:
            validate_call(c, TOOLS)
            seen.add(c["name"])
    check(len(seen) >= 2, "30 random answers called only %r", seen)
    stop_ok(d)


@test
def tool_choice_named_and_single():
    d = pack_daemon()
    for i in range(15):
        _, finish, _, calls = answer(d, i % 2 == 1, seed=i, tools=TOOLS,
                                     tool_choice={"type": "function", "function": {"name": "add"}},
                                     parallel_tool_calls=False)
        eq(finish, "tool_calls", "finish_reason")
        eq(len(calls), 1, "calls with parallel_tool_calls false")
        eq(calls[0]["name"], "add", "the named function")
        validate_call(calls[0], TOOLS)
    stop_ok(d)


@test
def gbnf_grammar_field():
    d = pack_daemon()
    g = 'root ::= "yes" | "no" | "n=" [0-9]{1,3}\n'
    import re
    for i in range(10):
        content, finish, _, _ = answer(d, False, seed=i, grammar=g)
        eq(finish, "stop", "finish_reason")
        check(re.fullmatch(r"yes|no|n=[0-9]{1,3}", content), "not in the grammar: %r", content)
    stop_ok(d)


@test
def thinking_then_json():
    """With enable_thinking the grammar starts after </think>: force that token with
    a bias (the mask does not touch the reasoning), then the answer is the schema's."""
    d = pack_daemon()
    tok = json.loads(d.post("/tokenize", data=json.dumps({"content": "</think>"}),
                            headers=JSON).body).get("tokens")
    eq(len(tok), 1, "</think> is one token: %r" % tok)
    schema = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 1,
                                                     "maximum": 5}}, "required": ["a"]}
    r = chat(d, seed=3, chat_template_kwargs={"enable_thinking": True},
             logit_bias={str(tok[0]): 100},
             response_format={"type": "json_schema", "json_schema": {"name": "t",
                                                                     "schema": schema}})
    eq(r.status, 200, "status")
    c = r.json()["choices"][0]
    eq(c["finish_reason"], "stop", "finish_reason")
    jsonschema.validate(json.loads(c["message"]["content"]), schema)
    stop_ok(d)


@test
def grammar_survives_a_replay():
    """A device fault in decode (sim, a TIMEOUT at token 4) makes the worker reset,
    halve K and replay the KV cache; the grammar state is the request's and is not
    replayed: the answer is the same as without the fault, and valid."""
    d = Daemon(["--device", "sim", "--fault", "phase=decode,token=4,state=TIMEOUT"])
    d.args += ["--model", generated_pack("deep")]
    d.start()
    wait_ready(d, 30)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 100,
                                                     "maximum": 99999},
                                               "b": {"type": "boolean"}},
              "required": ["n", "b"], "additionalProperties": False}
    rf = {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}
    outs = []
    for _ in range(2):
        r = d.post("/v1/chat/completions", headers=JSON, timeout=120,
                   data=json.dumps({"model": "deep", "messages": [{"role": "user",
                                                                  "content": "hi"}],
                                    "temperature": 1.0, "seed": 42, "max_tokens": 400,
                                    "response_format": rf}))
        eq(r.status, 200, "status: %r" % r.body[:300])
        c = r.json()["choices"][0]
        eq(c["finish_reason"], "stop", "finish_reason")
        jsonschema.validate(json.loads(c["message"]["content"]), schema)
        outs.append(c["message"]["content"])
    check("replaying" in d.log(), "no replay in the log")
    eq(outs[0], outs[1], "the answer after a replay")
    stop_ok(d)


def refused(d, param, words, **kw):
    r = chat(d, **kw)
    eq(r.status, 400, "status for %r" % kw)
    e = r.json()["error"]
    eq(e["type"], "invalid_request_error", "type")
    eq(e["param"], param, "param")
    for w in words:
        check(w in e["message"], "%r not in %r", w, e["message"])


@test
def refusals_name_the_keyword_and_param():
    d = pack_daemon()
    js = lambda s: {"type": "json_schema", "json_schema": {"name": "n", "schema": s}}  # noqa
    refused(d, "response_format.json_schema.schema", ["'uniqueItems'", "#/properties/a"],
            response_format=js({"type": "object", "properties": {
                "a": {"type": "array", "uniqueItems": True}}}))
    refused(d, "response_format.json_schema.schema", ["'pattern'", "lookaround"],
            response_format=js({"type": "string", "pattern": "^(?=a)b$"}))
    refused(d, "response_format.json_schema.schema", ["$ref"],
            response_format=js({"$ref": "#/$defs/missing"}))
    refused(d, "response_format.type", ["'xml'"], response_format={"type": "xml"})
    refused(d, "response_format", ["expected an object"], response_format="json")
    refused(d, "response_format.json_schema", ["Missing"], response_format={"type": "json_schema"})
    refused(d, "response_format.json_schema.name", ["Missing"],
            response_format={"type": "json_schema", "json_schema": {"schema": {}}})
    refused(d, "grammar", ["left recursion"], grammar="root ::= root \"a\" | \"b\"\n")
    refused(d, "grammar", ["not defined"], grammar="root ::= x\n")
    stop_ok(d)


if __name__ == "__main__":
    run_main()
