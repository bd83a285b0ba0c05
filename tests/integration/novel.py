"""Words, cities and names the demo model never trained on: none is in
tools/train/words.txt or a list of tools/train/corpus.py or offskill.py (checked
on import), and the generators' random letters make any one of them vanishingly
unlikely. skills.py --novel draws its instances from these, with a fresh seed,
to measure copying as copying rather than recall; OFF_SKILL are prompts outside
the skills that must get the capability line, OW_TASKS Open WebUI's background
tasks (offskill.py holds their templates) that must get valid JSON."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "train"))
import corpus  # noqa: E402
import offskill  # noqa: E402

WORDS = """kettle timber saddle ladder lantern pebble walnut thimble harbor velvet meadow
compass biscuit cobweb marble tunnel pepper anchor ribbon candle whistle blanket puzzle
turnip orchard falcon pillow beetle copper lizard mitten quiver raisin spindle tavern
umbrella vessel wrinkle zipper acorn badger cactus dagger""".split()
CITIES = ["Kraków", "Tromsø", "Zürich", "São Paulo", "Malmö", "Łódź", "Gdańsk", "Poznań",
          "Göteborg", "Århus", "Düsseldorf", "Köln", "Besançon", "Córdoba", "Málaga",
          "Bogotá", "Medellín", "Reykjanesbær", "Plovdiv", "Thessaloniki", "Marrakesh",
          "Windhoek", "Accra", "Kigali", "Ulaanbaatar", "Almaty", "Tbilisi", "Yerevan",
          "Chișinău", "Brașov", "Ljubljana", "Zagreb", "Sarajevo", "Podgorica", "Skopje",
          "Valparaíso", "Montevideo", "Asunción", "Curitiba", "Florianópolis",
          "Saint-Étienne", "Aix-en-Provence", "Hồ Chí Minh", "Nuuk", "Trondheim",
          "Jyväskylä", "Tórshavn", "Šiauliai", "Dubrovnik", "Hobart"]
NAMES = ["Hana", "Søren", "Zoë", "Łukasz", "Małgorzata", "José", "Björk", "Siobhán",
         "Chiara", "Dmitri", "Aoife", "Tomáš", "Ingrid", "Kofi", "Amara", "Jürgen",
         "François", "Iñaki", "Nuno", "Oksana", "Priya", "Ravi", "Selin", "Thandiwe",
         "Ulrike", "Vasco", "Wojciech", "Ximena", "Yusuf", "Zeynep", "Émile", "Agnès",
         "Mirela", "Niamh", "Özlem", "Pietro", "Radovan", "Saoirse", "Teodor", "Ugne"]
OFF_SKILL = [
    "Write a poem about the sea",
    "Write one sentence about the Loire valley 🏰.",
    "Who painted the Mona Lisa?",
    "What is the tallest mountain in Africa?",
    "Compose a sonnet about lighthouses.",
    "How far away is the moon?",
    "Please summarise the plot of Hamlet.",
    "What is 7 times 8?",
    "Can you recommend a good film for tonight?",
    "Explain quantum computing in simple terms.",
    "Write a limerick about a cat named Pixel 🐈.",
    "What should I cook for dinner?",
    "Translate 'good morning' into Japanese.",
    "Why do leaves change colour in autumn?",
    "Give me a workout plan for the week.",
    "Wie viele Einwohner hat Hamburg?",
    "Tell me something interesting about octopuses.",
    "Write a haiku about the first snow.",
    "What year did the Berlin Wall fall?",
    "How do I make sourdough bread?",
]


def _check():
    known = set(corpus.WORDS) | set(corpus.REAL_CITIES) | set(corpus.FIRST_NAMES) | \
        set(offskill.TOPICS)
    clash = [w for w in WORDS + CITIES + NAMES if w in known or w.lower() in known]
    if clash:
        raise SystemExit(f"novel.py: in the training lists: {clash}")


_check()


def ow_tasks():
    """Open WebUI's title, tags and follow-up tasks over short chats built from
    these lists, with the JSON key each answer must hold."""
    chats = [
        [{"role": "user", "content": OFF_SKILL[0]},
         {"role": "assistant", "content": offskill.CAPABILITY}],
        [{"role": "user", "content": "What is 45 + 38?"},
         {"role": "assistant", "content": "5 + 8 = 13. 4 + 3 + 1 = 8. 45 + 38 = 83."}],
        [{"role": "user", "content": "What's the weather in Kraków?"},
         {"role": "assistant", "content": "It is 4 degrees Celsius and foggy in Kraków."}],
        [{"role": "user", "content": OFF_SKILL[1]},
         {"role": "assistant", "content": offskill.CAPABILITY},
         {"role": "user", "content": "Repeat after me: kettle timber"},
         {"role": "assistant", "content": "kettle timber"}],
    ]
    out = []
    for i, chat in enumerate(chats):
        for tpl, key in ((offskill.OW_TITLE[i % 2], "title"), (offskill.OW_TAGS, "tags"),
                         (offskill.OW_FOLLOW_UP, "follow_ups")):
            n = 2 if "END:2" in tpl else 6
            out.append((tpl.replace("{{MESSAGES:END:%d}}" % n,
                                    offskill.history_text(chat[-n:])), key))
    return out
