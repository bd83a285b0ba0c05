#!/usr/bin/python3
"""The chat-template oracle: render an OpenAI chat request with the official
MiniCPM5-2B chat_template.jinja exactly as Hugging Face transformers does.

Run it with Debian's /usr/bin/python3 and python3-jinja2:

    /usr/bin/python3 tests/chat/oracle.py TEMPLATE < request.json > prompt.txt

Exit 0 with the prompt on stdout, or exit 1 with one line on stderr when the
request is refused (by minicpmd's request mapping below, or because Jinja2 raises).

Two layers, kept apart on purpose:

1. to_template_vars(): what minicpmd does to an OpenAI request *before* the
   template sees it. These are minicpmd's own decisions (the template cannot know
   OpenAI's wire format) and engine/text/template.c implements the same ones:
   - role "developer" becomes "system" (OpenAI's newer name for it);
   - content given as an array of parts becomes the concatenation of the text of
     its {"type": "text"} parts, with nothing between them; any other part is
     refused;
   - a tool call's "arguments" JSON string is parsed (json.loads), as transformers
     users do; an empty or all-whitespace string means no arguments; a string
     that is not JSON is refused;
   - roles other than system/developer/user/assistant/tool, messages that are not
     objects, "tool_calls" that is not an array, "tools" that is not an array,
     and a non-boolean "add_generation_prompt" are refused;
   - of chat_template_kwargs only "enable_thinking" is passed on;
   - continue_final_message (transformers' and vLLM's name): a boolean when given;
     by default true when the last message is an assistant's with non-blank
     content (string or text parts), no tool_calls, no "</think>" in its content,
     and add_generation_prompt is true (continues(); llama.cpp continues an
     assistant message last too). Then render() does what transformers'
     apply_chat_template(continue_final_message=True) does: render with
     add_generation_prompt false and cut right after the last occurrence of the
     final content's .strip() (refused when it is not there).
2. render(): the template itself, rendered the way transformers'
   _compile_jinja_template() sets Jinja2 up (ImmutableSandboxedEnvironment,
   trim_blocks, lstrip_blocks, loopcontrols, its own tojson and
   raise_exception). Whatever Jinja2 raises is a refusal. This part decides
   every byte of the prompt and is never modified: the template is read from the
   file and its SHA-256 checked first.
"""
import copy
import hashlib
import json
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEMPLATE_SHA256 = "cc945752db555d60949b16989df4ccfeb52a313d6b4b5c5229dd786e2e9fcf1c"
ROLES = ("system", "developer", "user", "assistant", "tool")


class Refused(Exception):
    """The request is refused; `param` names the field, as OpenAI errors do."""

    def __init__(self, param, message):
        super().__init__(f"{param}: {message}" if param else message)
        self.param = param


def load_template(path):
    with open(path, "rb") as f:
        data = f.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != TEMPLATE_SHA256:
        raise SystemExit(f"{path}: SHA-256 {digest} is not the official MiniCPM5-2B template")

    # As transformers.utils.chat_template_utils._compile_jinja_template (4.4x).
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(data.decode("utf-8"))


def _joined_text(parts, param):
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text" \
                or not isinstance(part.get("text"), str):
            raise Refused(f"{param}[{j}]", "only text content parts are supported")
        texts.append(part["text"])
    return "".join(texts)


def _parse_arguments(call, param):
    """Parse `arguments` of the object the template will read: the call's
    "function" when that is truthy (the OpenAI form), else the call itself."""
    if not isinstance(call, dict):
        return
    target, where = call, param
    if call.get("function"):
        target, where = call["function"], f"{param}.function"
    if not isinstance(target, dict) or not isinstance(target.get("arguments"), str):
        return
    text = target["arguments"]
    if text.strip(" \t\n\r") == "":
        target["arguments"] = {}
        return
    try:
        target["arguments"] = json.loads(text)
    except ValueError as e:
        raise Refused(f"{where}.arguments", f"not valid JSON ({e})")


def continues(messages, agp):
    """minicpmd's default continue_final_message (engine/template.h)."""
    last = messages[-1] if messages else None
    if not agp or not isinstance(last, dict) or last.get("role") != "assistant" \
            or (isinstance(last.get("tool_calls"), list) and last["tool_calls"]):
        return False
    content = last.get("content")
    texts = [content] if isinstance(content, str) else \
        [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)] \
        if isinstance(content, list) else []
    if any("</think>" in t for t in texts):
        return False
    return any(t.strip() for t in texts)


def to_template_vars(request):
    """minicpmd's mapping of an OpenAI request onto the template's variables."""
    if not isinstance(request, dict):
        raise Refused(None, "the request must be a JSON object")
    messages = request.get("messages")
    if not isinstance(messages, list):
        raise Refused("messages", "must be an array")
    messages = copy.deepcopy(messages)
    for i, m in enumerate(messages):
        p = f"messages[{i}]"
        if not isinstance(m, dict):
            raise Refused(p, "must be an object")
        if not isinstance(m.get("role"), str):
            raise Refused(f"{p}.role", "must be a string")
        if m["role"] not in ROLES:
            raise Refused(f"{p}.role", f"unsupported role '{m['role']}'")
        if m["role"] == "developer":
            m["role"] = "system"
        if isinstance(m.get("content"), list):
            m["content"] = _joined_text(m["content"], f"{p}.content")
        calls = m.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise Refused(f"{p}.tool_calls", "must be an array")
        for j, call in enumerate(calls or []):
            _parse_arguments(call, f"{p}.tool_calls[{j}]")
    tools = request.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise Refused("tools", "must be an array")
    agp = request.get("add_generation_prompt", True)
    if not isinstance(agp, bool):
        raise Refused("add_generation_prompt", "must be a boolean")
    cont = request.get("continue_final_message")
    if cont is not None and not isinstance(cont, bool):
        raise Refused("continue_final_message", "must be a boolean")
    if cont is None:
        cont = continues(request["messages"], agp)
    tvars = {"messages": messages, "tools": tools, "add_generation_prompt": agp and not cont,
             "bos_token": "<s>", "eos_token": "</s>", "_continue": cont}
    kwargs = request.get("chat_template_kwargs")
    if isinstance(kwargs, dict) and "enable_thinking" in kwargs:
        tvars["enable_thinking"] = kwargs["enable_thinking"]
    return tvars


def render(template, request):
    """The prompt for `request` (a parsed JSON value), or raise Refused."""
    tvars = to_template_vars(request)
    cont = tvars.pop("_continue")
    try:
        rendered = template.render(**tvars)
    except Exception as e:  # whatever Jinja2 or Python raises inside the template
        raise Refused(None, f"the template raises {type(e).__name__}: {e}")
    if cont:
        # transformers' apply_chat_template, continue_final_message=True (4.4x):
        # a non-assistant last message is refused by minicpmd (transformers does
        # not check the role), then the cut after the stripped final content.
        last = tvars["messages"][-1]
        if last.get("role") != "assistant":
            raise Refused("messages", "continue_final_message: the last message is not an "
                                      "assistant message")
        final = last.get("content")
        if not isinstance(final, str):
            raise Refused("messages", "continue_final_message: no text content")
        if final.strip() not in rendered:
            raise Refused("messages", "continue_final_message: the final message does not "
                                      "appear in the chat after applying the template")
        rendered = rendered[: rendered.rindex(final.strip()) + len(final.strip())]
    return rendered


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: oracle.py TEMPLATE < request.json")
    template = load_template(sys.argv[1])
    request = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    try:
        prompt = render(template, request)
    except Refused as e:
        print(f"oracle: {e}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write(prompt.encode("utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
