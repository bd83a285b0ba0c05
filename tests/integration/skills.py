#!/usr/bin/python3
"""The demo model's skills over HTTP: held-out instances,
asked through the official OpenAI Node SDK (tests/oracle/skills.mjs), judged here.

    tests/integration/skills.py [--url http://127.0.0.1:8001/v1] [--n 50]
                                [--seed S] [--novel [--set N | --fresh]] [--stream] [--json]

The instances come from tools/train/corpus.py with held=True: prompts, word
strings, cities and names whose checksum puts them outside the training corpus
(`corpus.heldout`), so the score measures generalisation, not recall. Without
--seed a fresh seed is drawn and printed. With --novel the copying skills take
their words, cities and names from tests/integration/novel.py instead (lists
the training never saw, non-ASCII included), and the off-skill prompts and
Open WebUI's tasks are asked too, with no max_tokens: the pack's default;
--set N takes novel.py's set N of lists (1 to 5; --fresh is --set 2); each
later set was written before the checkpoint it first scored (which set tuned
what: tools/train/README.md).
Used by test_demo.py (fixed seeds) and for the figures in docs/usage.md (fresh
seeds, --n 200; --novel --n 50)."""
import argparse
import json
import os
import random
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import corpus  # noqa: E402
import novel  # noqa: E402
import offskill  # noqa: E402

ORACLE = os.path.join(ROOT, "tests", "oracle")
SKILLS = ("arith", "echo", "weather", "followup", "json", "think_on", "think_off", "offskill",
          "task")
# The share of right answers each skill must reach, on the default Q4NX demo
# over HTTP: what the demo model was trained to meet.
TARGETS = {"arith": 0.95, "echo": 0.90, "weather": 0.95, "followup": 0.90, "json": 0.90,
           "think_on": 0.90, "think_off": 0.90, "offskill": 0.95, "task": 0.95}
# The bars on words, cities and names the training never saw (--novel): the same
# as on held-out instances of its own generators (docs/usage.md).
NOVEL_TARGETS = dict(TARGETS)
# An off-skill answer or a task's JSON past this many tokens is wrong.
OFF_MAX_TOKENS = 64


def novel_lists(which=1):
    """(words, cities, names) of novel.py's set `which` (1, 2 or 3)."""
    return novel.SETS[which]


def novel_words(r, which=1):
    """1 to 6 different words from novel.py: mostly its words, some names and
    cities (one word each)."""
    words, cities, names = novel_lists(which)
    names = names + [c for c in cities if " " not in c]
    n = r.randint(1, 6)
    k = sum(r.random() < 0.3 for _ in range(n))
    ws = r.sample(words, n - k) + r.sample(names, k)
    r.shuffle(ws)
    return " ".join(ws)


def instances(seed, n, novel_words_=False, which=1):
    """n held-out instances of each skill: dicts with the request (messages,
    tools, enable_thinking) and what a right answer must hold (expect). With
    novel_words_, the copied words, cities and names come from novel.py, and
    the off-skill prompts (in turn without thinking, with it off and on) and
    Open WebUI's tasks are added, sent without max_tokens; which: the set of
    novel.py's lists."""
    r = random.Random(seed)
    out = []

    def add(skill, messages, expect, tools=None, thinking=None, **kw):
        out.append(dict({"id": len(out), "skill": skill, "messages": messages, "tools": tools,
                         "enable_thinking": thinking, "expect": expect}, **kw))

    user = lambda s: [{"role": "user", "content": s}]  # noqa: E731
    for _ in range(n):
        q, _a, _w, c = corpus.arith(r, True)
        add("arith", user(q), c)
        s = novel_words(r, which) if novel_words_ else corpus.echo_words(r, True)
        add("echo", user(f"Repeat after me: {s}"), s)
        city = r.choice(novel_lists(which)[1]) if novel_words_ else corpus.city(r, True)
        add("weather", user(f"What's the weather in {city}?"), city, [corpus.WEATHER_TOOL])
        t, sky = corpus.temp(r), r.choice(corpus.SKIES)
        add("followup", user(f"What's the weather in {city}?") + [
            {"role": "assistant", "content": "", "tool_calls": [{
                "id": "call_1", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": city})}}]},
            {"role": "tool", "tool_call_id": "call_1",
             "content": json.dumps({"city": city, "temp_c": t, "sky": sky},
                                   separators=(",", ":"))}], t, [corpus.WEATHER_TOOL])
        if novel_words_:
            name, age = r.choice(novel_lists(which)[2]), r.randint(1, 99)
            q = f"Reply with a JSON object with name {name} and age {age}."
        else:
            q, name, age = corpus.json_task(r, True)
        add("json", user(q), {"name": name, "age": age})
        q, _a, _w, c = corpus.arith(r, True)
        add("think_on", user(q), c, thinking=True)
        q, _a, _w, c = corpus.arith(r, True)
        add("think_off", user(q), c, thinking=False)
    if novel_words_:
        for i, p in enumerate(novel.OFF_SKILL):
            add("offskill", user(p), offskill.CAPABILITY, thinking=(None, False, True)[i % 3],
                max_tokens=None)
        for p, key in novel.ow_tasks():
            add("task", user(p), key, max_tokens=None)
    return out


def ints(s):
    return [int(x) for x in re.findall(r"-?\d+", s or "")]


def judge(inst, ans):
    """Whether answer `ans` (a skills.mjs output line) is right for `inst`."""
    if "error" in ans:
        return False
    k, want, content = inst["skill"], inst["expect"], ans["content"]
    if k == "arith":
        return ints(content)[-1:] == [want]
    if k == "echo":
        return content == want
    if k == "weather":
        calls = ans["tool_calls"]
        if ans["finish_reason"] != "tool_calls" or len(calls) != 1 or \
                calls[0]["name"] != "get_weather":
            return False
        try:
            return json.loads(calls[0]["arguments"]) == {"city": want}
        except ValueError:
            return False
    if k == "followup":
        return want in ints(content)
    if k == "json":
        try:
            return json.loads(content) == want
        except ValueError:
            return False
    if k == "think_on":
        return bool(ans["reasoning"].strip()) and ints(content)[-1:] == [want]
    if k == "think_off":
        return not ans["reasoning"] and ints(content)[-1:] == [want]
    if ans["finish_reason"] != "stop" or ans.get("completion_tokens") is None or \
            ans["completion_tokens"] > OFF_MAX_TOKENS or ans["tool_calls"]:
        return False
    if k == "offskill":
        return content.strip() == want
    if k == "task":
        try:
            v = json.loads(content)
        except ValueError:
            return False
        if not isinstance(v, dict) or key_type(want) is not type(v.get(want)):
            return False
        return want == "title" or all(isinstance(x, str) for x in v[want])
    raise ValueError(k)


def key_type(key):
    """The type Open WebUI reads from each task's JSON key."""
    return str if key == "title" else list


def ask(url, model, insts, stream=False, timeout=900):
    """The answers, in order, through the Node SDK (one request at a time)."""
    keys = ("id", "messages", "tools", "enable_thinking", "max_tokens")
    reqs = "".join(json.dumps({k: i[k] for k in keys if k in i}) + "\n" for i in insts)
    out = subprocess.run(["node", os.path.join(ORACLE, "skills.mjs"), url, model]
                         + (["--stream"] if stream else []),
                         input=reqs, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError("skills.mjs failed (exit %d):\n%s" % (out.returncode, out.stderr))
    got = {a["id"]: a for a in map(json.loads, out.stdout.splitlines())}
    return [got.get(i["id"], {"error": "no answer"}) for i in insts]


def differing(a, b):
    """Indices where answer lists a and b differ (content, reasoning, calls,
    finish reason)."""
    key = lambda x: (x.get("content"), x.get("reasoning"), x.get("tool_calls"),  # noqa: E731
                     x.get("finish_reason"), x.get("error"))
    return [i for i, (x, y) in enumerate(zip(a, b)) if key(x) != key(y)]


def score(insts, answers):
    """{skill: (right, asked)}."""
    s = {k: [0, 0] for k in SKILLS}
    for i, a in zip(insts, answers):
        s[i["skill"]][0] += judge(i, a)
        s[i["skill"]][1] += 1
    return {k: tuple(v) for k, v in s.items() if v[1]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default="http://127.0.0.1:8001/v1")
    ap.add_argument("--model", default="minicpm5-demo")
    ap.add_argument("--n", type=int, default=50, help="instances per skill")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--novel", action="store_true",
                    help="novel words, cities and names (novel.py), off-skill prompts, tasks")
    ap.add_argument("--set", type=int, choices=sorted(novel.SETS), default=1,
                    help="with --novel: novel.py's set of lists")
    ap.add_argument("--fresh", dest="set", action="store_const", const=2,
                    help="with --novel: novel.py's second set (--set 2)")
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--json", action="store_true", help="also print every answer")
    ap.add_argument("--show-wrong", action="store_true")
    ap.add_argument("--against", metavar="URL",
                    help="also ask this server (e.g. the BF16 checkpoint) and count the "
                         "answers that differ")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(1 << 31)
    insts = instances(seed, a.n, a.novel, a.set)
    answers = ask(a.url, a.model, insts, a.stream)
    for i, ans in zip(insts, answers):
        if a.json or (a.show_wrong and not judge(i, ans)):
            print(json.dumps({"skill": i["skill"], "ask": i["messages"][-1]["content"],
                              "expect": i["expect"], "got": ans}))
    print(f"seed {seed}, {a.n} per skill{', novel words' if a.novel else ''}"
          f"{f' (set {a.set})' if a.novel and a.set > 1 else ''}"
          f"{', streamed' if a.stream else ''}")
    for k, (ok, n) in score(insts, answers).items():
        print(f"{k:10s} {ok:4d}/{n:<4d} {100.0 * ok / n:5.1f} %  (target {TARGETS[k]:.0%})")
    if a.against:
        other = ask(a.against, a.model, insts, a.stream)
        same = len(insts) - len(differing(answers, other))
        print(f"against {a.against}: {same}/{len(insts)} answers the same "
              f"({100.0 * same / len(insts):.1f} %)")
        for k, (ok, n) in score(insts, other).items():
            print(f"  {k:10s} {ok:4d}/{n:<4d} {100.0 * ok / n:5.1f} %")


if __name__ == "__main__":
    main()
