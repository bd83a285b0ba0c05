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
# A second set, written before the demo with the two-token match was first
# scored on it and never used to tune anything (skills.py --novel --fresh).
WORDS2 = """goblet hammock jigsaw kennel lobster mustard nutmeg oyster paddle quilt rocket
satchel teapot trellis urchin violin waffle yodel zenith bramble chimney dolphin ember
fiddle gravel hazel igloo jasmine kayak ledger muffin napkin otter parsnip quartz radish
sprocket tinsel walrus yarrow""".split()
CITIES2 = ["Wrocław", "Bydgoszcz", "Linköping", "Västerås", "Aalborg", "Jönköping",
           "Clermont-Ferrand", "Nîmes", "Logroño", "Cádiz", "Gijón", "Coimbra", "Setúbal",
           "Évora", "Iași", "Timișoara", "Pécs", "Győr", "Debrecen", "Olomouc",
           "České Budějovice", "Košice", "Žilina", "Tartu", "Pärnu", "Kaunas", "Daugavpils",
           "Oulu", "Rovaniemi", "Akureyri", "Stavanger", "Innsbruck", "Graz", "Lugano",
           "Lausanne", "Mostar", "Tiraspol", "Nakuru", "Arequipa", "Cuenca"]
NAMES2 = ["Agnieszka", "Bartłomiej", "Céline", "Dagný", "Eleftheria", "Fionnuala", "Grzegorz",
          "Håkon", "Ilse", "Jolanta", "Kristóf", "Leocadia", "Mireille", "Nikolaj", "Orsolya",
          "Paweł", "Quentin", "Rasmus", "Solveig", "Tadeusz", "Ulla", "Václav", "Wiebke",
          "Xóchitl", "Yannick", "Zdeněk", "Åsa", "Bernadette", "Cosmin", "Dorotea", "Eamon",
          "Florin", "Gráinne", "Hedda", "Ioana", "Jarosław", "Kasimir", "Lorcan", "Mette",
          "Noémie"]
# A third set, written before the demo trained on random pieces of its vocabulary
# was first scored on it, and never used to tune anything (skills.py --novel --set 3).
WORDS3 = """anvil bellows caravan dormouse eyelet ferret gazebo hatchet inkwell jackal
kestrel lilac mongoose nectar obelisk pelican quince rucksack scallop thistle tadpole
unicorn vinegar weasel wombat yeoman zither abacus bobbin clarinet doorknob easel flannel
gherkin hornet iguana juniper kiln locket marmot""".split()
CITIES3 = ["Szczecin", "Lublin", "Białystok", "Örebro", "Umeå", "Odense", "Esbjerg",
           "Tampere", "Vaasa", "Klaipėda", "Liepāja", "Narva", "Brno", "Ostrava", "Plzeň",
           "Banská Bystrica", "Szeged", "Miskolc", "Cluj-Napoca", "Constanța", "Niš",
           "Novi Sad", "Maribor", "Bitola", "Shkodër", "Burgas", "Varna", "Gaziantep",
           "Eskişehir", "Kutaisi", "Gyumri", "Shymkent", "Bukhara", "Samarkand", "Mandalay",
           "Cusco", "Trujillo", "Barranquilla", "Rosário", "Jaén"]
NAMES3 = ["Aurélie", "Bogdan", "Csilla", "Dariusz", "Eszter", "Frederikke", "Gunnhild",
          "Hallvard", "Ignacy", "Jadwiga", "Katarzyna", "Ludmila", "Maëlle", "Nadežda", "Odile",
          "Przemysław", "Ragnhild", "Sigrún", "Tuomas", "Urszula", "Valdís", "Witold",
          "Yevhen", "Zofia", "Anneliese", "Božena", "Cormac", "Dervla", "Evangelos",
          "Fearghal", "Gwenaëlle", "Ilona", "Jovana", "Kjersti", "Lisbeth", "Miroslav",
          "Nanna", "Oona", "Piotr", "Teodora"]
# A fourth, written before the checkpoint trained on space-led pieces was first
# scored on it, and never used to tune anything (skills.py --novel --set 4).
WORDS4 = """apricot barnacle chestnut driftwood eggplant firefly gondola hedgehog ivory
jellyfish knapsack lavender mackerel nightjar oatmeal porcupine quarry reindeer saffron
toboggan trumpet upholstery vulture wagon yogurt zeppelin almond buttress cinnamon
dumpling elbow fennel garlic horseshoe inlet jukebox ketchup lettuce moth nozzle""".split()
CITIES4 = ["Częstochowa", "Toruń", "Rzeszów", "Norrköping", "Helsingborg", "Aarhus",
           "Kristiansand", "Lahti", "Kuopio", "Panevėžys", "Jelgava", "Rēzekne",
           "Haapsalu", "Hradec Králové", "Liberec", "Trenčín", "Nitra", "Veszprém",
           "Eger", "Sibiu", "Oradea", "Craiova", "Kragujevac", "Subotica", "Osijek", "Zadar",
           "Ohrid", "Durrës", "Stara Zagora", "Ruse", "Trabzon", "Batumi", "Vanadzor",
           "Karaganda", "Khujand", "Bishkek", "Chiclayo", "Maracaibo", "Guayaquil",
           "Mérida"]
NAMES4 = ["Anouk", "Bożydar", "Cäcilie", "Dóra", "Egill", "Fenna", "Gudrún", "Hjalmar",
          "Ivana", "Jiří", "Klaudia", "Lennart", "Mārtiņš", "Nils", "Otília", "Pernille",
          "Radka", "Stanisław", "Tõnu", "Unnur", "Vilhelmína", "Wendelin", "Ysolde",
          "Zbigniew", "Ágota", "Brynjar", "Ciarán", "Dragoș", "Elżbieta", "Filippa", "Gintarė",
          "Hilde", "Ieva", "Jozef", "Kaja", "Liudmila", "Milena", "Nedeljko", "Oddný",
          "Pálma"]
# A fifth, written after the committed checkpoint was chosen and scored only on it.
WORDS5 = """acrobat bagpipe cauldron dewdrop earmuff flamingo gargoyle hyacinth icicle
jasper kumquat lamppost mulberry nautilus oriole pinecone quokka rhubarb sandbar
tortoise tuxedo ukulele vestibule windmill xylophone yardstick zucchini armadillo
blowtorch chameleon dandelion escalator foxglove gumdrop hammerhead icebox jetty
kingfisher limpet mosaic""".split()
CITIES5 = ["Koszalin", "Gniezno", "Växjö", "Luleå", "Visby", "Randers", "Ålesund",
           "Bodø", "Hämeenlinna", "Seinäjoki", "Ventspils", "Viljandi", "Šančiai",
           "Třebíč", "Zlín", "Prešov", "Sopron", "Kecskemét", "Târgu Mureș", "Bacău",
           "Čačak", "Šibenik", "Vukovar", "Tetovo", "Korçë", "Pleven", "Sliven", "Adapazarı",
           "Zugdidi", "Dilijan", "Aktobe", "Osh", "Fergana", "Huancayo", "Ibagué", "Cúcuta",
           "Ambato", "Salta", "Posadas", "Tandil"]
NAMES5 = ["Agata", "Bjørnar", "Cosima", "Dobromir", "Edite", "Folkert", "Greta", "Hrafn",
          "Iulia", "Jaroslava", "Kalle", "Ljiljana", "Magnús", "Nicoleta", "Oskar", "Pålina",
          "Róisín", "Sölvi", "Tamás", "Uršula", "Věra", "Wiesław", "Ysabeau", "Živa", "Ærling",
          "Berit", "Catrìona", "Dezső", "Emőke", "Fridtjof", "Gergő", "Halldóra", "Imre",
          "Jindřich", "Kornélia", "Lukáš", "Mairéad", "Nóra", "Ottó", "Perttu"]
SETS = {1: (WORDS, CITIES, NAMES), 2: (WORDS2, CITIES2, NAMES2), 3: (WORDS3, CITIES3, NAMES3),
        4: (WORDS4, CITIES4, NAMES4), 5: (WORDS5, CITIES5, NAMES5)}
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
    mine = [w for lists in SETS.values() for ws in lists for w in ws]
    clash = [w for w in mine if w in known or w.lower() in known]
    twice = sorted({w for w in mine if mine.count(w) > 1})
    if twice:
        raise SystemExit(f"novel.py: in two sets: {twice}")
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
