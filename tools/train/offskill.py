"""What the demo model answers outside its skills, and the wide vocabulary its
copying skills train on.

Off-skill prompts (poems, questions, requests, chatter, any language, emoji)
get one line saying what the model can do (CAPABILITY); Open WebUI's
background tasks (title, tags, follow-ups: their default prompt templates,
filled with a chat history as Open WebUI fills them) get small valid JSON.

The wide vocabulary: words built from random letters of many scripts
(accented Latin, Greek, Cyrillic, a few CJK characters and emoji), real words
with letters swapped for accented ones, names with particles and hyphens.
Copying trained on it is copying of any byte string, not recall of a list.
Held-out checks use lists that appear nowhere here (tests/integration/novel.py)."""

CAPABILITY = ("I am minicpmd's tiny demo model: I can add and subtract numbers up to 99, "
              "repeat words, call get_weather, and write small JSON objects.")
CAPABILITY_WHY = "This is not one of my skills."
TITLE = '{"title": "Demo chat"}'
TAGS = '{"tags": ["General"]}'
FOLLOW_UPS = ('{"follow_ups": ["What is 12 + 30?", "Repeat after me: hello world", '
              '"What\'s the weather in Paris?"]}')

LOWER = "abcdefghijklmnopqrstuvwxyz"
ACCENTED = ("àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿāăąćčďđēėęěğīįıķłľńňőœřśşšţťūůűųźżžßþð"
            "ǎǐǒǔșțẽỳ")
GREEK = "αβγδεζηθικλμνξοπρστυφχψωάέήίόύώ"
CYRILLIC = "абвгдежзийклмнопрстуфхцчшщъыьэюяёіїєґ"
CJK = "山川田中大小人水火木金土日月東京北南西上下"
EMOJI = "🏰🌊🌸🍎🚀⭐🎵🐱🌍☀️🔥❄️"
PUNCT_IN_NAME = ["-", "'", " "]
PARTICLES = ["de", "da", "do", "la", "le", "el", "van", "von", "del", "di", "du", "al", "upon",
             "am", "an", "sur", "on"]

TOPICS = [
    "the sea", "the moon", "autumn", "cats", "a river", "the mountains", "love", "coffee",
    "the city at night", "a lost key", "winter", "the stars", "my garden", "trains", "rain",
    "friendship", "the desert", "a lighthouse", "bread", "the forest", "time", "music",
    "the Loire valley", "volcanoes", "bees", "a small boat", "the wind", "clouds", "tea",
    "dragons", "robots", "the ocean floor", "snow", "a library", "the sun", "old maps",
]
QUESTION_FORMS = [
    "What is the capital of {X}?", "Who invented {t}?", "Why is {t} important?",
    "How does {t} work?", "What is {t}?", "Where is {X}?", "When was {X} founded?",
    "How old is {X}?", "Is {t} good for me?", "What do you think about {t}?",
    "Can you explain {t}?", "How many people live in {X}?", "What is the meaning of life?",
    "What time is it?", "What day is it today?", "Who won the game yesterday?",
    "Why is the sky blue?", "How do I cook rice?", "How do I learn Python?",
    "What is {a} times {b}?", "What is {a} divided by {b}?", "What is {a} * {b}?",
    "What is the square root of {a}?", "Is {a} a prime number?", "What is {c} + {d}?",
    "Compute {a} + {b} + {a}.", "What's {a}% of {b}?", "Do you like {t}?",
    "What's the population of {X}?", "Which is bigger, {X} or {Y}?",
]
REQUEST_FORMS = [
    "Write a poem about {t}.", "Write a poem about {t}", "Write a haiku about {t}.",
    "Write one sentence about {t}.", "Write one sentence about {t} {e}.",
    "Write a short story about {t}.", "Tell me about {t}.", "Tell me a story.",
    "Tell me a joke.", "Tell me a joke about {t}.", "Describe {t}.", "Summarize this: {s}",
    "Translate \"{s}\" into French.", "Translate to German: {s}", "Explain {t} to a child.",
    "Give me three ideas for {t}.", "Write a song about {t}.", "Write an email to {n}.",
    "Write a Python function that sorts a list.", "Fix this code: {s}", "Plan a trip to {X}.",
    "List five facts about {t}.", "Write a limerick about {t}.", "Draw {t}.",
    "Make a shopping list.", "Recommend a book about {t}.", "Sing me a song.",
    "Describe the weather in {X} last year.", "Write an essay on {t}.", "Continue: {s}",
    "Say something nice.", "Rewrite this more politely: {s}", "Count to ten.",
    "Spell {w} backwards.", "What rhymes with {w}?", "Define {w}.", "Use {w} in a sentence.",
]
CHATTER = [
    "I am sad today.", "I like {t}.", "My name is {n}.", "I live in {X}.", "ok", "yes", "no",
    "lol", "?", "...", "hmm", "Are you there?", "Are you a robot?", "Can you help me?",
    "I need help with my homework.", "That is wrong.", "You are funny.", "Good morning",
    "Good night", "What?", "Why?", "Really?", "Interesting.", "Please continue.",
    "asdfgh", "test", "Testing 1 2 3", "{s}", "{w}", "{e}", "{e}{e}",
]
FOREIGN = [
    "Bonjour, comment ça va ?", "Écris un poème sur la mer.", "¿Qué hora es?",
    "Wie spät ist es?", "Schreib ein Gedicht über den Wald.", "Ciao, come stai?",
    "Привет, как дела?", "Напиши стихотворение.", "你好，你是谁？", "今天天气怎么样？",
    "こんにちは", "Olá, tudo bem?", "Hej, hur mår du?", "Cześć, co słychać?",
    "Merhaba, nasılsın?", "Γεια σου, τι κάνεις;", "Dzień dobry!", "Dobrý den, jak se máte?",
]
# Open WebUI's default task prompts (backend/open_webui/config.py): the title
# template in its two recent wordings, the tags and follow-up templates;
# {{MESSAGES:END:N}} is the chat's last N messages as "USER: ..."/"ASSISTANT: ..."
# lines.
OW_TITLE = [
    """### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over excessive creativity; keep it clear and simple.
- Your entire response must consist solely of the JSON object, without any introductory or concluding text.
- The output must be a single, raw JSON object, without any markdown code fences or other encapsulating text.
- Ensure no conversational text, affirmations, or explanations precede or follow the raw JSON output, as this will cause direct parsing failure.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "📉 Stock Market Trends" },
- { "title": "🍪 Perfect Chocolate Chip Recipe" },
- { "title": "Evolution of Music Streaming" },
- { "title": "Remote Work Productivity Tips" },
- { "title": "Artificial Intelligence in Healthcare" },
- { "title": "🎮 Video Game Development Insights" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>""",
    """### Task:
Generate a concise, 3-5 word title with an emoji summarizing the chat history.
### Guidelines:
- The title should clearly represent the main theme or subject of the conversation.
- Use emojis that enhance understanding of the topic, but avoid quotation marks or special formatting.
- Write the title in the chat's primary language; default to English if multilingual.
- Prioritize accuracy over excessive creativity; keep it clear and simple.
### Output:
JSON format: { "title": "your concise title here" }
### Examples:
- { "title": "📉 Stock Market Trends" },
- { "title": "🍪 Perfect Chocolate Chip Recipe" },
- { "title": "Evolution of Music Streaming" },
- { "title": "Remote Work Productivity Tips" },
- { "title": "Artificial Intelligence in Healthcare" },
- { "title": "🎮 Video Game Development Insights" }
### Chat History:
<chat_history>
{{MESSAGES:END:2}}
</chat_history>""",
]
OW_TAGS = """### Task:
Generate 1-3 broad tags categorizing the main themes of the chat history, along with 1-3 more specific subtopic tags.

### Guidelines:
- Start with high-level domains (e.g. Science, Technology, Philosophy, Arts, Politics, Business, Health, Sports, Entertainment, Education)
- Consider including relevant subfields/subdomains if they are strongly represented throughout the conversation
- If content is too short (less than 3 messages) or too diverse, use only ["General"]
- Use the chat's primary language; default to English if multilingual
- Prioritize accuracy over specificity

### Output:
JSON format: { "tags": ["tag1", "tag2", "tag3"] }

### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""
OW_FOLLOW_UP = """### Task:
Suggest 3-5 relevant follow-up questions or prompts that the user might naturally ask next in this conversation as a **user**, based on the chat history, to help continue or deepen the discussion.
### Guidelines:
- Write all follow-up questions from the user's point of view, directed to the assistant.
- Make questions concise, clear, and directly related to the discussed topic(s).
- Only suggest follow-ups that make sense given the chat history and the assistant's last response.
- Match the conversational tone and style of the existing chat.
- Use the chat's primary language; default to English if multilingual.
- Avoid repeating questions already asked or answered in the chat history.
- If the conversation is concluded or no relevant follow-ups exist, return an empty list.
### Output:
JSON format: { "follow_ups": ["Question 1?", "Question 2?", "Question 3?"] }
### Chat History:
<chat_history>
{{MESSAGES:END:6}}
</chat_history>"""
OW_FOLLOW_UP_OLD = OW_FOLLOW_UP.replace(
    "- Only suggest follow-ups that make sense given the chat history and the assistant's "
    "last response.\n- Match the conversational tone and style of the existing chat.\n"
    "- Use the chat's primary language; default to English if multilingual.\n"
    "- Avoid repeating questions already asked or answered in the chat history.\n"
    "- If the conversation is concluded or no relevant follow-ups exist, return an empty "
    "list.\n",
    "- Only suggest follow-ups that make sense given the chat content and do not repeat "
    "what was already covered.\n- If the conversation is very short or not specific, "
    "suggest more general (but relevant) follow-ups the user might ask.\n"
    "- Use the conversation's primary language; default to English if multilingual.\n"
    "- Response must be a JSON array of strings, no extra text or formatting.\n").replace(
    "user's point of view", "user\u2019s point of view")
TASKS = [(t, TITLE) for t in OW_TITLE] + [(OW_TAGS, TAGS), (OW_FOLLOW_UP, FOLLOW_UPS),
                                          (OW_FOLLOW_UP_OLD, FOLLOW_UPS)]


def wide_word(r, words, hard=None):
    """One word from the wide vocabulary; with hard = (share, pieces), that
    share of them from hard_word."""
    if hard and r.random() < hard[0]:
        return hard_word(r, *hard[1:])
    k = r.random()
    n = r.randint(2, 9)
    if k < 0.22:                                    # Latin letters, some accented
        acc = r.choice([0.1, 0.3, 0.6])
        return "".join(r.choice(ACCENTED) if r.random() < acc else r.choice(LOWER)
                       for _ in range(n))
    if k < 0.40:                                    # a real word with accents put in
        w = list(r.choice(words))
        for i in range(len(w)):
            if r.random() < 0.25:
                w[i] = r.choice(ACCENTED)
        return "".join(w)
    if k < 0.50:
        return "".join(r.choice(GREEK) for _ in range(n))
    if k < 0.62:
        return "".join(r.choice(CYRILLIC) for _ in range(n))
    if k < 0.67:
        return "".join(r.choice(CJK) for _ in range(r.randint(1, 4)))
    if k < 0.71:
        return r.choice(EMOJI) + ("" if r.random() < 0.5 else r.choice(EMOJI))
    if k < 0.78:                                    # any code point below U+2000 that prints
        out = []
        while len(out) < n:
            c = chr(r.randint(0x21, 0x1fff))
            if c.isprintable() and not c.isspace() and c not in '"\\<>':
                out.append(c)
        return "".join(out)
    if k < 0.93:
        return infix_word(r)
    return "".join(r.choice(LOWER) for _ in range(n))


# Words the demo says or reads all the time (its capability line, the prompts):
# BPE joins each with the space before it (" add", " and"), and the model comes
# to expect that token wherever the letters stand.
COMMON = ("add and subtract numbers up to repeat words call get weather write small "
          "objects tiny demo model can what is the in after me reply with name age "
          "city sky it degrees").split()


def infix_word(r):
    """A word with a common word inside it (s-add-le, l-and-ing): inside a word
    its letters are a piece without the space, which the copy must not trade
    for the common " add"."""
    w = r.choice(COMMON)
    a = "".join(r.choice(LOWER) for _ in range(r.randint(0, 2)))
    b = "".join(r.choice(LOWER) for _ in range(r.randint(0 if a else 1, 3)))
    return a + w + b


def hard_word(r, pieces, led=()):
    """A word the copy gets wrong when it leans on frequency: 2 to 4 random
    pieces of the tokenizer's own vocabulary (a rare piece's head row is then
    trained like a common one's, and a piece that is a word after a space
    stands inside a word), half of them starting with a piece that BPE joins
    with the space before it (" fer"-ret: the copy must keep the space-led
    token, not the bare "fer" it sees more often), or a word in which one
    piece stands twice with different letters after it (Jönköping: after the
    second "ö" comes "ping", not "nk" again) so the match of the two tokens
    before decides."""
    if r.random() < 0.6:
        first = r.choice(led) if led and r.random() < 0.5 else r.choice(pieces)
        return first + "".join(r.choice(pieces) for _ in range(r.randint(1, 3)))
    rep = r.choice(pieces) if r.random() < 0.5 else r.choice(LOWER + ACCENTED)
    a = "".join(r.choice(pieces) for _ in range(r.randint(0, 1)))
    b, c = r.choice(pieces), r.choice(pieces)
    return a + rep + b + rep + c


def letter_pieces(tk):
    """(pieces, led): the tokenizer's pieces that are letters only once a
    leading space is taken off (at least two), and those of them BPE also
    joins with a space before them, as text."""
    out = {tk.decode([i]).lstrip(" ") for i in tk.vocab.values()}
    pieces = sorted(w for w in out if len(w) >= 2 and w.isalpha())
    led = sorted({tk.decode([p]) for _, p in tk.space_pairs()} & set(pieces))
    return pieces, led


def rhyme_words(r, words, n):
    """n words sharing an ending (saddle ladder paddle): the copy must use more
    than the one token before."""
    end = "".join(r.choice(LOWER) for _ in range(r.randint(2, 4)))
    return [r.choice(["", r.choice(LOWER)]) + "".join(r.choice(LOWER) for _ in range(r.randint(1, 3)))
            + end for _ in range(n)]


def cap(w):
    return w[:1].upper() + w[1:]


def wide_name(r, words, hard=None):
    """A capitalised name: one wide word, or two joined by a space, hyphen or
    apostrophe, sometimes with a particle (São Paulo, Saint-Étienne, Rio de X)."""
    k = r.random()
    a = cap(wide_word(r, words, hard))
    if k < 0.55:
        return a
    b = cap(wide_word(r, words, hard))
    if k < 0.8:
        return a + r.choice(PUNCT_IN_NAME) + b
    return a + " " + r.choice(PARTICLES) + " " + b


def _fill(r, form, words, names):
    return form.format(
        t=r.choice(TOPICS), X=r.choice(names)(), Y=r.choice(names)(), n=r.choice(names)(),
        a=r.randint(0, 999), b=r.randint(1, 99), c=r.randint(100, 9999), d=r.randint(0, 999),
        e=r.choice(EMOJI), w=r.choice(words),
        s=" ".join(r.choice(words) for _ in range(r.randint(2, 9))) + r.choice([".", "!", "?", ""]))


def off_prompt(r, words, names):
    """A user message outside the skills."""
    k = r.random()
    if k < 0.35:
        return _fill(r, r.choice(REQUEST_FORMS), words, names)
    if k < 0.65:
        return _fill(r, r.choice(QUESTION_FORMS), words, names)
    if k < 0.85:
        return _fill(r, r.choice(CHATTER), words, names)
    if k < 0.93:
        return r.choice(FOREIGN)
    return " ".join(wide_word(r, words) for _ in range(r.randint(1, 8)))


def history_text(msgs):
    """Open WebUI's {{MESSAGES:END:N}}: role in capitals, colon, content, one per line."""
    return "\n".join(f"{m['role'].upper()}: {m['content']}" for m in msgs)


def task_prompt(r, history):
    """(prompt, answer) of an Open WebUI background task over `history`
    (user/assistant messages)."""
    tpl, ans = r.choice(TASKS)
    n = 2 if "END:2" in tpl else 6
    return tpl.replace("{{MESSAGES:END:%d}}" % n, history_text(history[-n:])), ans
