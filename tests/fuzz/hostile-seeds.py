#!/usr/bin/env python3
"""Writes the hostile reproducers of the grammar engine into the fuzz corpora
(tests/fuzz/corpus/grammar/hostile-*, tests/fuzz/corpus/schema/hostile-*), which
fuzz-grammar and fuzz-schema start from and tests/integration/test_hostile.py sends
through every surface. Each one once crashed, froze, bloated or misanswered the
daemon: a grammar nested deep and repeated, many rules, many branches repeated,
many large repetitions, nested optional repetitions, escapes in classes, long
enums with a shared prefix, large classes, degenerate schemas, a NUL literal.
Run again after changing it; the files are committed."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
CJK = "".join(chr(0x4E00 + i) for i in range(5000))
# every other one: a class pattern.c cannot merge into a few ranges
CJK_SPARSE = "".join(chr(0x4E00 + 2 * i) for i in range(5000))


def grammar_seeds():
    """name -> GBNF text (bytes after a NUL are what fuzz-grammar feeds the matcher)."""
    g = {}
    g["nest60-empty-repeat"] = "root ::= " + "(" * 60 + ")" * 60 + "{0,4096}\n"
    g["nest60-literal-repeat"] = "root ::= " + "(" * 60 + '"a"' + ")" * 60 + "{0,4096}\n"
    g["rules-3000"] = ("root ::= " + " | ".join(f"r{i}" for i in range(3000)) + "\n" +
                       "".join(f'r{i} ::= "{i}"\n' for i in range(3000)))
    g["branches-600-repeat"] = "root ::= (" + "|".join(["[ -~]"] * 600) + "){0,4096}\n"
    g["rules-240-repeat"] = ("root ::= " + " ".join(f"a{i}" for i in range(240)) + "\n" +
                             "".join(f'a{i} ::= "a"{{0,4096}}\n' for i in range(240)))
    g["optional-repeat"] = 'root ::= ("a"?){0,4096}\n'
    g["nested-optional-repeat"] = 'root ::= (("a"?){0,64}){0,64}\n'
    g["nul-literal"] = 'root ::= "\\x00"\n\0\0'
    g["enum-4100-shared-prefix"] = ("root ::= " +
                                    " | ".join(f'"a{i:05d}"' for i in range(4100)) + "\n")
    g["class-5000-cjk"] = "root ::= [" + CJK + "]{1,4}\n"
    return g


def schema_seeds():
    """name -> JSON Schema (a response_format schema, or a tool's parameters)."""
    s = {}
    s["nest60-empty-repeat"] = {"type": "string",
                                "pattern": "^" + "(" * 60 + ")" * 60 + "{0,4096}$"}
    s["anyof-3000-integers"] = {"anyOf": [{"type": "integer"}] * 3000}
    s["branches-600-repeat"] = {"type": "string",
                                "pattern": "^(" + "|".join(["[ -~]"] * 600) + "){0,4096}$"}
    s["properties-240-repeat"] = {
        "type": "object",
        "properties": {f"a{i}": {"type": "string", "pattern": "^a{0,4096}$"} for i in range(240)},
        "required": [f"a{i}" for i in range(240)]}
    s["nested-optional-repeat"] = {"type": "string", "pattern": "^((a?){0,64}){0,64}$"}
    s["cjk-class-escapes"] = {"type": "string", "pattern": "^[\\u4e00-\\u9fa5]{2,4}$"}
    s["enum-4100-shared-prefix"] = {"enum": [f"a{i:05d}" for i in range(4100)]}
    s["class-5000-cjk"] = {"type": "string", "pattern": "^[" + CJK_SPARSE + "]{1,4}$"}
    s["optional-repeat"] = {"type": "string", "pattern": "^(a?){0,4096}$"}
    s["type-empty"] = {"type": []}
    s["required-1000"] = {"type": "object",
                          "properties": {f"p{i}": {"type": "integer"} for i in range(1000)},
                          "required": [f"p{i}" for i in range(1000)]}
    return s


def main():
    for name, text in grammar_seeds().items():
        with open(os.path.join(HERE, "corpus", "grammar", "hostile-" + name), "wb") as f:
            f.write(text.encode())
    for name, schema in schema_seeds().items():
        with open(os.path.join(HERE, "corpus", "schema", "hostile-" + name), "w",
                  encoding="utf-8") as f:
            json.dump(schema, f, ensure_ascii=False, separators=(",", ":"))


if __name__ == "__main__":
    main()
