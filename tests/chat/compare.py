#!/usr/bin/python3
"""Compare `minicpmd-pack template` with the Jinja2 oracle on every conversation.

    /usr/bin/python3 tests/chat/compare.py MINICPMD_PACK TEMPLATE CORPUS_DIR [NAME...]

Each CORPUS_DIR/*.json is an OpenAI chat request. The oracle (oracle.py: Jinja2
on the official template, SHA-256 checked) and minicpmd's C renderer must agree
byte for byte, or both refuse the request. A request may carry "_about" (what it
covers) and "_expect": "refused" (the oracle must refuse it); both sides ignore
these keys. On a mismatch the unified diff is printed with escapes made visible.
"""
import difflib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402

MIN_CORPUS = 40


def visible(text):
    """Lines of `text` with \\n, \\t, \\r shown, for a readable diff."""
    return [json.dumps(line, ensure_ascii=False)[1:-1] + "\n"
            for line in text.splitlines(keepends=True)]


def run_c(binary, template, data):
    p = subprocess.run([binary, "template", template], input=data, capture_output=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr.decode("utf-8", "replace")


def check(binary, template, tmpl, path):
    """Return None if the renders agree, else a report."""
    with open(path, "rb") as f:
        data = f.read()
    request = json.loads(data.decode("utf-8"))
    try:
        want, why = oracle.render(tmpl, request), None
    except oracle.Refused as e:
        want, why = None, str(e)
    rc, out, err = run_c(binary, template, data)

    expect = request.get("_expect") if isinstance(request, dict) else None
    if expect == "refused" and want is not None:
        return "marked \"_expect\": \"refused\" but Jinja2 renders it"
    if want is None:
        if rc == 1 and out == b"" and err.count("\n") == 1:
            return None
        return (f"Jinja2 refuses ({why}) but minicpmd-pack exited {rc} with "
                f"{len(out)} bytes, stderr {err!r}")
    if rc != 0:
        return f"Jinja2 renders {len(want)} chars but minicpmd-pack exited {rc}: {err.strip()}"
    if err:
        return f"minicpmd-pack wrote to stderr: {err.strip()}"
    got = out.decode("utf-8", "replace")
    if got == want and out == want.encode("utf-8"):
        return None
    diff = difflib.unified_diff(visible(want), visible(got), "jinja2", "minicpmd", n=2)
    return "output differs:\n" + "".join(diff)


def main():
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    binary, template, corpus = sys.argv[1:4]
    tmpl = oracle.load_template(template)  # exits unless the SHA-256 is the official one
    names = sorted(n for n in os.listdir(corpus) if n.endswith(".json"))
    if len(sys.argv) > 4:
        names = [n for n in names if any(a in n for a in sys.argv[4:])]
    elif len(names) < MIN_CORPUS:
        raise SystemExit(f"{corpus}: {len(names)} conversations, want >= {MIN_CORPUS}")

    failed = refused = 0
    for name in names:
        report = check(binary, template, tmpl, os.path.join(corpus, name))
        if report:
            failed += 1
            print(f"FAIL {name}: {report}")
        else:
            with open(os.path.join(corpus, name), "rb") as f:
                try:
                    oracle.render(tmpl, json.loads(f.read()))
                    print(f"ok   {name}")
                except oracle.Refused as e:
                    refused += 1
                    print(f"ok   {name} (both refuse: {e})")
    # The pack check: a template that is not the official one is reported.
    with tempfile.TemporaryDirectory() as d:
        with open(template, "rb") as f, open(os.path.join(d, "chat_template.jinja"), "wb") as g:
            g.write(f.read().replace(b"<|im_end|>", b"<|im_end|> ", 1))
        rc, _, err = run_c(binary, d, b'{"messages": [{"role": "user", "content": "x"}]}')
        if rc != 0 or "warning" not in err:
            failed += 1
            print(f"FAIL a modified chat_template.jinja: exit {rc}, no warning ({err.strip()!r})")
    print(f"{len(names) - failed}/{len(names)} identical "
          f"({refused} refused by both), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
