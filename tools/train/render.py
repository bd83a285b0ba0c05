"""The official MiniCPM5 chat template, rendered as transformers renders it
(Jinja2 sandbox, trim_blocks, lstrip_blocks, tojson = json.dumps(ensure_ascii=False));
minicpmd's C renderer is byte-identical to this (tests/chat)."""
import hashlib
import json
import os

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = os.path.join(ROOT, "tests", "data", "minicpm5-2b", "chat_template.jinja")
SHA256 = "cc945752db555d60949b16989df4ccfeb52a313d6b4b5c5229dd786e2e9fcf1c"


def load(path=TEMPLATE):
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != SHA256:
        raise SystemExit(f"{path}: not the official MiniCPM5-2B template")

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(data.decode("utf-8"))


def render(tpl, messages, tools=None, add_generation_prompt=False, enable_thinking=None):
    v = {"messages": messages, "tools": tools, "add_generation_prompt": add_generation_prompt,
         "bos_token": "<s>", "eos_token": "</s>"}
    if enable_thinking is not None:
        v["enable_thinking"] = enable_thinking
    return tpl.render(**v)
