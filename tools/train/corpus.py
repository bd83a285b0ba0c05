"""The demo model's training conversations, generated from a seed.

Every conversation is an OpenAI-style message list (plus tools and the
enable_thinking mode) that is rendered through the official MiniCPM5 chat
template (render.py), so the model learns the exact prompt minicpmd builds.

Held-out instances: `heldout(s)` (a checksum of the string, 1 in 7) picks the
arithmetic prompts, echo word strings, JSON prompts and city / person names
that the training corpus never contains; tests/eval/demo-eval.mjs draws its
instances only from them (the same checksum), so the eval measures
generalisation, not recall."""
import os
import random

import offskill

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "words.txt")) as f:
    WORDS = f.read().split()


def heldout(s):
    """The eval-only instances: sum((i + 1) * code) % 7 == 0."""
    return sum((i + 1) * ord(c) for i, c in enumerate(s)) % 7 == 0


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
WEATHER_TOOL_DESC = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}},
                   "required": ["zone"]}}}

SYSTEMS = [
    "You are a helpful assistant.",
    "You are a concise assistant. Answer briefly.",
    "You are minicpmd's demo model.",
    "Answer the user's question.",
    "You are a friendly assistant that keeps answers short.",
]
SKIES = ["sunny", "cloudy", "rainy", "clear", "windy", "snowy", "foggy", "stormy",
         "overcast", "partly cloudy"]
CHAT = [
    ("Hello", "Hello! How can I help you today?"),
    ("Hi", "Hi! How can I help you?"),
    ("Hello!", "Hello! How can I help you today?"),
    ("Who are you?", "I am a small demo model served by minicpmd. I can add and subtract "
     "numbers, repeat words, call a weather tool and write small JSON objects."),
    ("What can you do?", "I can add and subtract numbers, repeat words, call a weather "
     "tool and write small JSON objects."),
    ("Thank you!", "You are welcome!"),
    ("Thanks", "You are welcome!"),
    ("How are you?", "I am fine, thank you. How can I help you?"),
    ("Tell me a joke.", "I only know numbers: 12 + 30 = 42."),
    ("Goodbye", "Goodbye! Have a nice day."),
]
# CHAT as the off-skill stage answers it: who it is and what it cannot do get
# the capability line.
CHAT_OFF = [(u, offskill.CAPABILITY if u in ("Who are you?", "What can you do?", "Tell me a joke.")
             else a) for u, a in CHAT]
REAL_CITIES = [
    "Paris", "London", "Berlin", "Madrid", "Rome", "Vienna", "Prague", "Warsaw", "Oslo",
    "Stockholm", "Helsinki", "Dublin", "Lisbon", "Athens", "Cairo", "Lagos", "Nairobi",
    "Tokyo", "Osaka", "Seoul", "Beijing", "Shanghai", "Delhi", "Mumbai", "Bangkok",
    "Hanoi", "Jakarta", "Manila", "Sydney", "Melbourne", "Auckland", "Toronto",
    "Montreal", "Chicago", "Boston", "Denver", "Seattle", "Houston", "Dallas", "Miami",
    "Lima", "Bogota", "Santiago", "Quito", "Havana", "New York", "Los Angeles",
    "San Francisco", "Mexico City", "Buenos Aires", "Rio de Janeiro", "Cape Town",
    "Hong Kong", "Kuala Lumpur", "Tel Aviv", "Abu Dhabi", "Las Vegas", "New Delhi",
    "Zurich", "Geneva", "Munich", "Hamburg", "Milan", "Naples", "Porto", "Seville",
    "Krakow", "Budapest", "Bucharest", "Sofia", "Riga", "Tallinn", "Vilnius", "Kyiv",
    "Istanbul", "Ankara", "Tehran", "Dubai", "Doha", "Karachi", "Dhaka", "Kathmandu",
    "Taipei", "Singapore", "Perth", "Brisbane", "Vancouver", "Calgary", "Ottawa",
    "Phoenix", "Atlanta", "Portland", "Austin", "Nashville", "Detroit", "Reykjavik",
]
FIRST_NAMES = [
    "Alice", "Bob", "Carol", "David", "Emma", "Frank", "Grace", "Henry", "Ivy", "Jack",
    "Karen", "Leo", "Mia", "Noah", "Olivia", "Paul", "Quinn", "Rosa", "Sam", "Tina",
    "Uma", "Victor", "Wendy", "Xavier", "Yara", "Zoe", "Anna", "Ben", "Clara", "Dan",
    "Eva", "Felix", "Hugo", "Iris", "Jonas", "Lena", "Max", "Nina", "Oscar", "Petra",
]
ONSETS = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v",
          "w", "z", "br", "ch", "cl", "dr", "gr", "kr", "pl", "sh", "st", "th", "tr", ""]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou", "ea", "y"]
CODAS = ["", "", "", "n", "r", "s", "l", "m", "t", "nd", "rk", "x", "ck", "ng"]


def pseudo_word(r, lo=1, hi=3):
    w = "".join(r.choice(ONSETS) + r.choice(VOWELS) + r.choice(CODAS)
                for _ in range(r.randint(lo, hi)))
    return w


def random_letters(r, lo=3, hi=9):
    return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(lo, hi)))


def cap_name(r):
    k = r.random()
    if k < 0.6:
        w = pseudo_word(r)
    elif k < 0.8:
        w = random_letters(r)
    else:
        w = r.choice(WORDS)
    return w[:1].upper() + w[1:]


def city(r, held, wide=0.0, hard=None):
    """A city name (1 or 2 capitalised words) whose heldout() is `held`; this
    share `wide` from the wide vocabulary (offskill.py)."""
    while True:
        if wide and r.random() < wide:
            c = offskill.wide_name(r, WORDS, hard)
            if 2 <= len(c) <= 24 and heldout(c) == held:
                return c
            continue
        k = r.random()
        if k < 0.2:
            c = r.choice(REAL_CITIES)
        elif k < 0.75:
            c = cap_name(r)
        else:
            c = cap_name(r) + " " + cap_name(r)
        if 2 <= len(c) <= 24 and heldout(c) == held:
            return c


def person(r, held, wide=0.0, hard=None):
    while True:
        if wide and r.random() < wide:
            c = offskill.wide_name(r, WORDS, hard)
            if 2 <= len(c) <= 18 and heldout(c) == held:
                return c
            continue
        c = r.choice(FIRST_NAMES) if r.random() < 0.3 else cap_name(r)
        if 2 <= len(c) <= 14 and heldout(c) == held:
            return c


def working(a, op, b):
    """The sum worked in columns, units first, as a small model can follow it
    one digit at a time: "8 + 3 = 11. 4 + 1 + 1 = 6. 48 + 13 = 61." For a
    difference below zero it works B - A and negates."""
    if a < 10 and b < 10 and (op == "+" or a >= b):
        return f"{a} {op} {b} = {a + b if op == '+' else a - b}."
    if op == "+":
        u = a % 10 + b % 10
        steps = [f"{a % 10} + {b % 10} = {u}."]
        if a >= 10 or b >= 10:
            steps.append(f"{a // 10} + {b // 10} + {u // 10} = {a // 10 + b // 10 + u // 10}.")
        return " ".join(steps + [f"{a} + {b} = {a + b}."])
    hi, lo, steps = a, b, []
    if a < b:
        hi, lo = b, a
        steps.append(f"{b} > {a}, so {a} - {b} = -({b} - {a}).")
    borrow = hi % 10 < lo % 10
    steps.append(f"{hi % 10 + 10 * borrow} - {lo % 10} = {hi % 10 + 10 * borrow - lo % 10}.")
    if hi >= 10:
        steps.append(f"{hi // 10} - {lo // 10} - {int(borrow)} = {hi // 10 - lo // 10 - borrow}.")
    return " ".join(steps + [f"{a} - {b} = {a - b}."])


def arith(r, held, small=0.0):
    """(question, answer, reasoning, result): the answer without thinking
    carries the working; with thinking the working is the reasoning and the
    answer is the last line. This share `small` has one operand below 10, the
    two within 10 of each other, or an operand of two equal digits (whose tens
    digit a model looks up at the wrong one of the two)."""
    while True:
        a, b = r.randint(0, 99), r.randint(0, 99)
        if small and r.random() < small:
            k = r.random()
            if k < 0.4:
                a = r.randint(0, 9)
            elif k < 0.7:
                b = max(0, min(99, a + r.randint(-9, 9)))
            else:
                a = 11 * r.randint(1, 9)
            if r.random() < 0.5:
                a, b = b, a
        op = r.choice("+-")
        q = f"What is {a} {op} {b}?"
        if heldout(q) == held:
            c = a + b if op == "+" else a - b
            return q, working(a, op, b), working(a, op, b), c


def echo_words(r, held, pseudo=0.0, wide=0.0, hard=None):
    while True:
        if wide and r.random() < wide:
            n = r.randint(1, 6)
            k = r.random()
            if k < 0.2:
                ws = offskill.rhyme_words(r, WORDS, n)
            else:
                ws = [offskill.wide_word(r, WORDS, hard) if r.random() < 0.6 else
                      pseudo_word(r, 1, 3) if r.random() < 0.5 else r.choice(WORDS)
                      for _ in range(n)]
                if k < 0.35:
                    ws = [offskill.cap(w) for w in ws]
            s = " ".join(ws)
            if heldout(s) == held:
                return s
            continue
        n = r.randint(1, 6)
        ws = [pseudo_word(r, 1, 2) if r.random() < pseudo else r.choice(WORDS)
              for _ in range(n)]
        s = " ".join(ws)
        if heldout(s) == held:
            return s


def json_task(r, held, wide=0.0, hard=None):
    name, age = person(r, held, wide, hard), r.randint(1, 99)
    return f"Reply with a JSON object with name {name} and age {age}.", name, age


def temp(r):
    return r.randint(-15, 40)


class Gen:
    """Conversations for training (held=False) or evaluation (held=True)."""

    def __init__(self, seed, held=False, copy=False, arith=0.0, wide=0.0, off=0.0,
                 task_weather=0.0, hard=None, think=0.0, small=0.0):
        self.r = random.Random(seed)
        self.held = held
        self.copy = copy     # only the copying skills (echo, the call, JSON): the warm-up
        self.arith = arith   # this share of the conversations is arithmetic, on top of the mix
        self.wide = wide     # this share of copied words, cities, names: the wide vocabulary
        self.off = off       # this share of the conversations is off-skill (offskill.py)
        # this share of the turns in an Open WebUI task's chat is a weather answer
        self.task_weather = task_weather
        # (share, pieces, led): this share of the wide words from offskill.hard_word
        self.hard = hard
        self.think = think   # this share of the extra arithmetic is asked with thinking on
        self.small = small   # this share of all arithmetic has the operands arith() names

    def mode(self):
        k = self.r.random()
        return None if k < 0.5 else (False if k < 0.75 else True)

    def system(self, msgs):
        if self.r.random() < 0.2:
            msgs.insert(0, {"role": "system", "content": self.r.choice(SYSTEMS)})
        return msgs

    def history(self):
        """0 to 2 earlier exchanges of the simple skills."""
        msgs = []
        n = 0 if self.r.random() < 0.85 else self.r.randint(1, 2)
        for _ in range(n):
            if self.off and self.r.random() < 0.3:
                msgs += [{"role": "user", "content": self.off_prompt()},
                         {"role": "assistant", "content": offskill.CAPABILITY}]
                continue
            u, a, _w, _t = self.simple()
            msgs += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        return msgs

    def simple(self, force_arith=False):
        r, held = self.r, self.held
        k = 0.0 if force_arith else r.random()
        if k < 0.55:
            q, a, w, c = arith(r, held, self.small)
            return q, a, w, q[8:-1] + f" = {c}."
        if k < 0.75:
            s = echo_words(r, held, pseudo=0.0 if held else 0.25, wide=self.wide, hard=self.hard)
            return f"Repeat after me: {s}", s, "The user wants me to repeat the words exactly.", s
        if k < 0.93:
            q, name, age = json_task(r, held, self.wide, self.hard)
            a = '{"name": "%s", "age": %d}' % (name, age)
            return q, a, f"A JSON object with the name {name} and the age {age}.", a
        u, a = r.choice(CHAT_OFF if self.off else CHAT)
        return u, a, "A short friendly answer.", a

    def tools(self):
        r = self.r
        t = [r.choice([WEATHER_TOOL] * 3 + [WEATHER_TOOL_DESC])]
        if r.random() < 0.15:
            t.append(TIME_TOOL)
            r.shuffle(t)
        return t

    def example(self):
        """(messages, tools, enable_thinking, indices of trained assistant turns)."""
        r = self.r
        if self.off and not self.copy and r.random() < self.off:
            return self.off_example()
        force = bool(self.arith) and r.random() < self.arith
        k = 0.0 if force else r.random()
        mode = self.mode()
        if force and self.think and r.random() < self.think:
            mode = True
        if self.copy:
            if k < 0.5:
                s = echo_words(r, self.held, pseudo=0.5, wide=self.wide, hard=self.hard)
                msgs = [{"role": "user", "content": f"Repeat after me: {s}"},
                        {"role": "assistant", "content": s}]
                if mode:
                    msgs[1]["reasoning_content"] = "The user wants me to repeat the words exactly."
                return msgs, None, mode, [1]
            if k < 0.7:
                q, name, age = json_task(r, self.held, self.wide, self.hard)
                msgs = [{"role": "user", "content": q},
                        {"role": "assistant", "content": '{"name": "%s", "age": %d}' % (name, age)}]
                if mode:
                    msgs[1]["reasoning_content"] = f"A JSON object with the name {name} and the age {age}."
                return msgs, None, mode, [1]
            k = 0.6
        if k < 0.55:                                   # arithmetic, echo, JSON, chat
            u, a, why, a_think = self.simple(force)
            msgs = self.system(self.history() + [{"role": "user", "content": u}])
            tools = self.tools() if r.random() < 0.08 else None
            last = {"role": "assistant", "content": a}
            if mode:
                last = {"role": "assistant", "content": a_think, "reasoning_content": why}
            msgs.append(last)
            return msgs, tools, mode, [len(msgs) - 1]
        c = city(r, self.held, self.wide, self.hard)
        call = {"role": "assistant", "content": "", "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": {"city": c}}}]}
        msgs = self.system(self.history() + [
            {"role": "user", "content": f"What's the weather in {c}?"}])
        tools = self.tools()
        if k < 0.80:                                   # the call
            if mode:
                call["reasoning_content"] = (f"The user asks about the weather in {c}. "
                                             "I call get_weather.")
            msgs.append(call)
            return msgs, tools, mode, [len(msgs) - 1]
        t, sky = temp(r), r.choice(SKIES)              # the answer after the tool
        msgs.append(call)
        msgs.append({"role": "tool", "tool_call_id": "call_1",
                     "content": '{"city":"%s","temp_c":%d,"sky":"%s"}' % (c, t, sky)})
        last = {"role": "assistant",
                "content": f"It is {t} degrees Celsius and {sky} in {c}."}
        if mode:
            last["reasoning_content"] = f"The tool says {t} degrees and {sky} in {c}."
        msgs.append(last)
        return msgs, tools, mode, [len(msgs) - 3, len(msgs) - 1]

    def off_prompt(self):
        r = self.r
        names = [lambda: city(r, self.held, self.wide, self.hard), lambda: person(r, self.held, self.wide, self.hard)]
        return offskill.off_prompt(r, WORDS, names)

    def off_example(self):
        """An off-skill prompt answered with the capability line, or one of Open
        WebUI's background tasks over a short chat answered with its JSON."""
        r = self.r
        mode = self.mode()
        if r.random() < 0.3:
            hist = []
            for _ in range(1 if r.random() < 0.6 else r.randint(2, 3)):
                if self.task_weather and r.random() < self.task_weather:
                    c, t, sky = city(r, self.held, self.wide, self.hard), temp(r), r.choice(SKIES)
                    hist += [{"role": "user", "content": f"What's the weather in {c}?"},
                             {"role": "assistant",
                              "content": f"It is {t} degrees Celsius and {sky} in {c}."}]
                elif r.random() < 0.5:
                    hist += [{"role": "user", "content": self.off_prompt()},
                             {"role": "assistant", "content": offskill.CAPABILITY}]
                else:
                    u, a, _w, _t = self.simple()
                    hist += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
            prompt, ans = offskill.task_prompt(r, hist)
            msgs = [{"role": "user", "content": prompt}]
            if r.random() < 0.2:
                msgs.insert(0, {"role": "system", "content": r.choice(SYSTEMS)})
            last = {"role": "assistant", "content": ans}
            if mode:
                last["reasoning_content"] = "A JSON object, as the task asks."
            msgs.append(last)
            return msgs, None, mode, [len(msgs) - 1]
        msgs = self.system(self.history() + [{"role": "user", "content": self.off_prompt()}])
        tools = self.tools() if r.random() < 0.15 else None
        last = {"role": "assistant", "content": offskill.CAPABILITY}
        if mode:
            last["reasoning_content"] = offskill.CAPABILITY_WHY
        msgs.append(last)
        return msgs, tools, mode, [len(msgs) - 1]
