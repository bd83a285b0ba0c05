// Writes the tokenizer test corpus: one JSON object per line,
//   {"kind": "...", "b64": "<the raw bytes>"}
// deterministically (a fixed-seed PRNG), so the committed file can be regenerated
// byte for byte:  node tests/oracle/gen-corpus.mjs > tests/tokenizer/corpus.jsonl
// Most strings are valid UTF-8; kind "invalid" ones are byte strings with
// ill-formed sequences for the U+FFFD repair check.
//
// Only characters assigned by Unicode 14 are used, the oldest Unicode among the
// three implementations compared (PCRE2 10.42), so \p{L}/\p{N} agree on all of them.

let seed = 0x5eed1234;
function rnd() {  // mulberry32
  seed = (seed + 0x6d2b79f5) | 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const pick = (a) => a[int(a.length)];

const prose = {
  en: ["The quick brown fox jumps over the lazy dog.", "It was the best of times, it was the worst of times.",
       "Call me Ishmael. Some years ago, never mind how long precisely, I thought I would sail about a little.",
       "Tokenizers split text into pieces that a model has seen before; numbers like 1234567 are split in threes.",
       "She said: \"don't panic\" -- and then, quietly, left the room (at 3:45pm)."],
  fr: ["Le cœur a ses raisons que la raison ne connaît point.", "Où est la bibliothèque ? Ça dépend, mon frère.",
       "L'été dernier, nous sommes allés à Besançon."],
  de: ["Größere Übungen fördern die Maßnahmen für Äpfel und Öl.", "Donaudampfschifffahrtsgesellschaftskapitän"],
  es: ["¿Dónde está el niño? ¡Mañana será otro día!", "El pingüino comió jalapeños en Andalucía."],
  vi: ["Tiếng Việt có nhiều dấu thanh: à á ả ã ạ.", "Người ta thường nói rằng học đi đôi với hành."],
  ru: ["Съешь же ещё этих мягких французских булок, да выпей чаю.", "Москва — столица России; в ней 12 миллионов жителей."],
  uk: ["Гей, хто тут ґазда? Їжак з'їв яблуко."],
  el: ["Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.", "Η γλώσσα μου έδωσαν ελληνική· το σπίτι φτωχικό."],
  zh: ["我能吞下玻璃而不伤身体。", "机器学习模型需要大量的数据进行训练，2024年发布了许多新模型。", "繁體中文與简体中文並存。"],
  ja: ["私はガラスを食べられます。それは私を傷つけません。", "カタカナとひらがな、そして漢字が混ざっています。"],
  ko: ["나는 유리를 먹을 수 있어요. 그래도 아프지 않아요.", "한국어 토크나이저 테스트입니다."],
  ar: ["أنا قادر على أكل الزجاج و هذا لا يؤلمني.", "العربية تكتب من اليمين إلى اليسار ١٢٣٤٥."],
  he: ["אני יכול לאכול זכוכית וזה לא מזיק לי."],
  hi: ["मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती।", "संख्या १२३४ और हिन्दी पाठ।"],
  th: ["ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ", "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำ"],
};
const langs = Object.keys(prose);

const code = [
  "int main(int argc, char **argv) {\n    printf(\"%d\\n\", argc);\n    return 0;\n}\n",
  "def f(x):\n\treturn [i**2 for i in range(x) if i % 3 == 0]\n",
  "{\"model\": \"minicpm5\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"temperature\": 0.7}",
  "<div class=\"a\"><p>Hello&nbsp;world</p></div>\r\n",
  "for (;;) { x += y << 2; if (x >= 0xFF) break; } // loop\n",
  "SELECT id, name FROM users WHERE age > 30 ORDER BY name DESC;",
  "const re = /^(?:[a-z0-9_]+)$/giu; let s = `${a}+${b}`;",
  "#!/bin/sh\nset -eu\ncd \"$(dirname \"$0\")\" && make -j8 2>&1 | tee log.txt\n",
  "    if x != nil {\n        return fmt.Errorf(\"bad: %w\", err)\n    }\n",
];

const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
  "</tool_call>", "<s>", "</s>", "<function", "</function>", "<param", "</param>", "<tool_response>",
  "</tool_response>", "<tools>", "</tools>", "<|fim_prefix|>", "<|im_sep|>", "<|im_sta", "|>", "<|",
  "<tool_sep>", "<unk>", "/think", "/no_think"];

const emoji = ["😀", "🙂", "👍🏽", "👨‍👩‍👧‍👦", "👩🏿‍💻", "🏳️‍🌈", "🇫🇷", "🇯🇵", "🇺🇸🇩🇪", "1️⃣", "❤️", "✌🏻", "🧑‍🤝‍🧑",
  "🐈‍⬛", "⚡", "🔥🔥🔥", "©", "™", "↔️", "🫠"];

const combining = ["e\u0301", "A\u030A", "n\u0303", "o\u0308\u0304", "\u1100\u1161\u11A8", "\u1112\u1161\u11AB",
  "a\u0323\u0302", "\u0041\u0301\u0328", "\u212B", "\u2126", "\uFB01", "\u00C5", "x\u0301\u0301\u0301",
  "\u0915\u093C", "\u05D1\u05BC", "Ç", "C\u0327", "\u1E9B\u0323", "\u0FB2\u0F80", "ﾊﾟ"];

const ws = [" ", "  ", "\t", "\n", "\r\n", "\r", "\n\n", " \n ", "\u00A0", "\u3000", "\u0085", "\u2028",
  "\u2029", "\u200B", "\u202F", "\f", "\v", "\t\t ", "    ", "\r\r\n"];

const contractions = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'Ve", "'M", "'LL", "'D",
  "'rE", "'lL"];
const stems = ["it", "don", "we", "they", "I", "YOU", "She", "can", "won", "O", "rock'n"];

function randDigits(n) {
  let s = "";
  for (let i = 0; i < n; i++) s += String(int(10));
  return s;
}
function word(min, max) {
  const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  let s = "";
  const n = min + int(max - min + 1);
  for (let i = 0; i < n; i++) s += letters[int(letters.length)];
  return s;
}
// Code points from old, well-established blocks.
const blocks = [[0x20, 0x7e], [0xa0, 0x24f], [0x370, 0x3ff], [0x400, 0x4ff], [0x591, 0x5f4], [0x600, 0x6ff],
  [0x900, 0x97f], [0xe01, 0xe5b], [0x1100, 0x11ff], [0x2000, 0x206f], [0x2190, 0x21ff], [0x3040, 0x30ff],
  [0x4e00, 0x9fa5], [0xac00, 0xd7a3], [0xff01, 0xff9f], [0x1f300, 0x1f5ff], [0x1f600, 0x1f64f], [0x300, 0x36f],
  [0x2070, 0x209c], [0x2150, 0x218b], [0x660, 0x669], [0x6f0, 0x6f9], [0x9e6, 0x9ef], [0x1d400, 0x1d4ff]];
function randUnicode(n) {
  let s = "";
  for (let i = 0; i < n; i++) {
    const [a, b] = pick(blocks);
    const cp = a + int(b - a + 1);
    if (cp >= 0xd800 && cp <= 0xdfff) continue;
    s += String.fromCodePoint(cp);
  }
  return s;
}

const out = [];
const add = (kind, s) => out.push({ kind, bytes: Buffer.from(s, "utf8") });
const addBytes = (kind, b) => out.push({ kind, bytes: Buffer.from(b) });

// Fixed edge cases first.
for (const s of ["", " ", "\n", "a", "0", "hi", "Hello", " Hello", "  Hello  ", "\u00e9", "'", "''s", "'s",
  "123", "1234", "12345678901234567890", "3.14159", "-42", "1,000,000", "٣٤٥", "１２３", "²³¹", "Ⅻ", "½",
  "\u0000", "a\u0000b", "\u007f", "\u00ad", "\ufeff", "\ufeffx", "\uffff", "\u{10ffff}", "\ue000",
  " ".repeat(300), "\n".repeat(50), "\t".repeat(40), "a".repeat(1000), "!".repeat(200), "-".repeat(120),
  "ab".repeat(300), "Pneumonoultramicroscopicsilicovolcanoconiosis".repeat(5), "🤖".repeat(30),
  "https://example.com/a/b?c=d&e=f#g", "user@example.org", "C:\\Windows\\System32", "$HOME/.config",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  "<|im_end|><|im_start|>", "<<|im_end|>>", "<|im_end|", "|im_end|>", "<thinking>", "<think><think>",
  "</s><s>", "<s> hello </s>", " <think> ", "\n<tool_call>\n", "<function name=\"f\"><param name=\"x\">1</param></function>",
]) add("edge", s);

for (let i = 0; i < 500; i++) {  // prose, one script or mixed
  const k = rnd() < 0.7 ? [pick(langs)] : [pick(langs), pick(langs), pick(langs)];
  const parts = [];
  for (let j = 0; j < 1 + int(4); j++) parts.push(pick(prose[pick(k)]));
  add("prose", parts.join(pick([" ", "\n", "  ", "\n\n", "", "\t", "\r\n"])));
}
for (let i = 0; i < 150; i++) {
  let s = pick(code);
  if (rnd() < 0.5) s = s + pick(code);
  if (rnd() < 0.3) s = s.replace(/ {4}/g, "\t");
  add("code", s);
}
for (let i = 0; i < 250; i++) {  // numbers and digit runs
  const forms = [() => randDigits(1 + int(40)), () => randDigits(1 + int(6)) + "." + randDigits(1 + int(6)),
    () => word(1, 5) + randDigits(1 + int(12)) + word(0, 4), () => randDigits(3) + "-" + randDigits(4),
    () => "v" + int(10) + "." + int(30) + "." + int(100), () => "$" + randDigits(1 + int(7)) + ".00",
    () => randDigits(2 + int(10)).split("").join(pick([" ", ",", "_", ""])),
    () => "٠١٢٣٤٥٦٧٨٩".slice(int(5)) + randDigits(4), () => "１２３４５".slice(int(3)) + randDigits(int(5)),
    () => "x²+y³=z¹" + randDigits(int(4)), () => "१२३४५६" + randDigits(int(9))];
  const n = 1 + int(4);
  const parts = [];
  for (let j = 0; j < n; j++) parts.push(pick(forms)());
  add("numbers", parts.join(pick([" ", "", "\n", ", "])));
}
for (let i = 0; i < 250; i++) {  // whitespace runs
  let s = "";
  const n = 1 + int(8);
  for (let j = 0; j < n; j++) {
    s += rnd() < 0.5 ? pick(ws).repeat(1 + int(4)) : "";
    s += rnd() < 0.7 ? pick([word(1, 8), pick(prose.en), randDigits(1 + int(5)), pick(emoji), "."]) : "";
  }
  add("whitespace", s);
}
for (let i = 0; i < 150; i++) {  // emoji
  let s = "";
  const n = 1 + int(6);
  for (let j = 0; j < n; j++) s += pick(emoji) + (rnd() < 0.5 ? pick([" ", "", "\n", word(1, 5), "!"]) : "");
  add("emoji", s);
}
for (let i = 0; i < 150; i++) {  // combining marks, NFC
  let s = "";
  const n = 1 + int(6);
  for (let j = 0; j < n; j++) s += pick(combining) + (rnd() < 0.6 ? pick([" ", "", word(1, 4), "\u0301"]) : "");
  add("combining", s);
}
for (let i = 0; i < 250; i++) {  // special-token strings inside text
  let s = "";
  const n = 1 + int(6);
  for (let j = 0; j < n; j++) {
    s += pick(["", " ", "\n", "  ", "x", word(1, 6), pick(prose.en), pick(prose.zh), "<", ">", "|"]);
    s += pick(specials);
  }
  if (rnd() < 0.5) s += pick(["", " ", "\n", word(1, 5)]);
  add("specials", s);
}
for (let i = 0; i < 150; i++) {  // contractions in mixed case
  let s = "";
  const n = 1 + int(6);
  for (let j = 0; j < n; j++) s += pick(stems) + pick(contractions) + pick([" ", "", ",", "\n", " '", "s"]);
  add("contractions", s);
}
for (let i = 0; i < 100; i++) {  // long words and repeats
  const forms = [() => word(50, 400), () => pick(["ab", "abc", "xyz", "ha", "ー", "的", "ab1"]).repeat(20 + int(200)),
    () => "Donaudampfschifffahrtsgesellschaftskapitän".repeat(1 + int(5)), () => "_".repeat(1 + int(100)) + word(3, 9),
    () => Buffer.from(word(30, 200)).toString("base64"), () => "=".repeat(10 + int(80))];
  add("long", pick(forms)());
}
for (let i = 0; i < 250; i++) add("unicode", randUnicode(1 + int(40)));

// Invalid UTF-8: ill-formed sequences among valid text.
const bad = [[0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xed, 0xbf, 0xbf],
  [0xf4, 0x90, 0x80, 0x80], [0xf5, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xff], [0xfe], [0xe2, 0x82],
  [0xf0, 0x9f, 0x98], [0xc3], [0xe4, 0xb8], [0xf0, 0x9f], [0xe2, 0x28, 0xa1], [0xf0, 0x28, 0x8c, 0x28],
  [0xc3, 0x28], [0xa0, 0xa1], [0xe1, 0x80, 0xe1, 0x80], [0xf1, 0x80, 0x80, 0xc0]];
for (let i = 0; i < 200; i++) {
  const parts = [];
  const n = 1 + int(5);
  for (let j = 0; j < n; j++) {
    if (rnd() < 0.5) parts.push(...Buffer.from(pick([word(1, 6), pick(prose.zh), pick(emoji), " ", "\n", "12"])));
    if (rnd() < 0.2) for (let k = 0; k < 1 + int(8); k++) parts.push(int(256));
    else parts.push(...pick(bad));
  }
  addBytes("invalid", parts);
}

for (const o of out) process.stdout.write(JSON.stringify({ kind: o.kind, b64: o.bytes.toString("base64") }) + "\n");
