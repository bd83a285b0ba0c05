#!/usr/bin/python3
"""Differential test: random conversations built from the template's tricky pieces
(think tags, <tool_sep>, <tool_def_sep>, CDATA triggers, quotes, non-ASCII, odd
tool calls and arguments, null/missing/array content), rendered by the Jinja2
oracle and by `minicpmd-pack template`; they must agree exactly or both refuse.

    /usr/bin/python3 tests/chat/random_diff.py MINICPMD_PACK TEMPLATE [COUNT [SEED]]

The seed is fixed by default, so a failure reproduces; a failing request is kept
in $TMPDIR/minicpmd-chat-diff-SEED-N.json.
"""
import json
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import oracle  # noqa: E402

ATOMS = ["", "a", "\n", "\n\n", "<think>", "</think>", "<tool_sep>", "<tool_def_sep>",
         "<tool_response>", "</tool_response>", " ", "x y", "中文", "🙂", "'", "\"", "\\", "<",
         "&", "]]>", "\t", "\r", "é", "\u200d", "\u00a0", "1"]
MISSING = object()


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)

    def s(self):
        return "".join(self.r.choice(ATOMS) for _ in range(self.r.randint(0, 5)))

    def val(self, depth=0):
        k = self.r.random()
        if depth > 2 or k < 0.4:
            return self.r.choice([self.s(), self.s(), 0, 1, -3, 1.5, 1e-5, 1e20, 0.0, -0.0,
                                  True, False, None, 12345678901])
        if k < 0.7:
            return [self.val(depth + 1) for _ in range(self.r.randint(0, 3))]
        return {self.s() or "k": self.val(depth + 1) for _ in range(self.r.randint(0, 3))}

    def content(self):
        k = self.r.random()
        if k < 0.6:
            return self.s()
        if k < 0.7:
            return None
        if k < 0.8:
            return [{"type": "text", "text": self.s()} for _ in range(self.r.randint(0, 3))]
        if k < 0.85:
            return self.val()
        return MISSING

    def arguments(self):
        k = self.r.random()
        if k < 0.5:
            return json.dumps({self.s() or "p": self.val() for _ in range(self.r.randint(0, 3))},
                              ensure_ascii=self.r.random() < 0.5)
        if k < 0.6:
            return {self.s() or "p": self.val() for _ in range(self.r.randint(0, 2))}
        if k < 0.7:
            return self.r.choice(["", " ", "null", "{}", "0", "[]", "[1]", "\"x\"", "{bad",
                                  "true", "1.5"])
        if k < 0.8:
            return MISSING
        return json.dumps(self.val())

    def call(self):
        fn = {}
        if self.r.random() < 0.9:
            fn["name"] = self.r.choice(["f", "get_weather", self.s(), 3, None])
        a = self.arguments()
        if a is not MISSING:
            fn["arguments"] = a
        k = self.r.random()
        if k < 0.8:
            return {"id": "c", "type": "function", "function": fn}
        if k < 0.9:
            return fn
        return self.r.choice([{"function": {}}, 5, "x", {"function": "str"}])

    def message(self):
        role = self.r.choice(["system", "developer", "user", "user", "assistant", "assistant",
                              "tool", "tool"])
        m = {"role": role}
        c = self.content()
        if c is not MISSING:
            m["content"] = c
        if role == "assistant":
            if self.r.random() < 0.3:
                m["reasoning_content"] = self.r.choice([self.s(), None, ""])
            if self.r.random() < 0.5:
                m["tool_calls"] = [self.call() for _ in range(self.r.randint(0, 3))]
        return m

    def request(self):
        req = {"messages": [self.message() for _ in range(self.r.randint(0, 6))]}
        if self.r.random() < 0.5:
            req["tools"] = self.r.choice([[], [self.val()], [
                {"type": "function", "function": {"name": "f", "parameters": self.val()}},
                self.val()]])
        if self.r.random() < 0.3:
            req["chat_template_kwargs"] = {"enable_thinking": self.r.choice([True, False, None, 1])}
        if self.r.random() < 0.3:
            req["add_generation_prompt"] = self.r.choice([True, False])
        return req


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary, template = sys.argv[1:3]
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 400
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 20260601
    tmpl = oracle.load_template(template)
    gen = Gen(seed)
    failed = 0
    for i in range(count):
        req = gen.request()
        path = os.path.join(tempfile.gettempdir(), f"minicpmd-chat-diff-{seed}-{i}.json")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(req, ensure_ascii=False))
        report = compare.check(binary, template, tmpl, path)
        if report:
            failed += 1
            print(f"FAIL {path}: {report}")
        else:
            os.remove(path)
    print(f"{count - failed}/{count} random conversations agree (seed {seed})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
