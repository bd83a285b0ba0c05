"""A MiniCPM5-style byte-level BPE: trainer, encoder, decoder, tokenizer.json.

Same layout as MiniCPM5's tokenizer.json (and tools/pack/gen-tok.c): ids 0..21
are MiniCPM5's low added tokens (<s>, </s>, ..., <think>/</think> not special,
<function, <param, ...), then the byte-level BPE vocabulary, then <|im_start|>,
<|im_end|> and the high added tokens. Pre-tokenizer: split \\p{N}{1,3}, then
MiniCPM5's regex, then ByteLevel; ignore_merges on. Merges never touch digits,
so every number is spelled one digit per token (arithmetic stays learnable).

Pure Python (no `regex`, no `tokenizers`): the pre-tokenizer regex is
implemented by hand below; tools/train/smoke.py checks that minicpmd's
tokenizer (itself checked against Hugging Face's) gives the same ids."""
import collections
import json
import re
import unicodedata

LOW_ADDED = [
    ("<s>", True), ("</s>", True), ("<tool_call>", True), ("</tool_call>", True),
    ("<|im_sep|>", True), ("<|fim_prefix|>", True), ("<|fim_middle|>", True),
    ("<|fim_suffix|>", True), ("<think>", False), ("</think>", False),
    ("<tool_response>", True), ("</tool_response>", True), ("<tools>", True),
    ("</tools>", True), ("<arguments>", True), ("</arguments>", True),
    ("<parameters>", True), ("</parameters>", True), ("<function", True),
    ("</function>", True), ("<param", True), ("</param>", True),
]
HIGH_ADDED = ["<unk>", "<|thought_begin|>", "<|thought_end|>", "<|tool_call|>",
              "<|execute_start|>", "<|execute_end|>"]
N_LOW = len(LOW_ADDED)

MINICPM5_REGEX = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+|"
                  " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def _bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE2U = _bytes_to_unicode()
U2BYTE = {v: k for k, v in BYTE2U.items()}


def _is_l(c):
    return unicodedata.category(c)[0] == "L"


def _is_n(c):
    return unicodedata.category(c)[0] == "N"


def _is_s(c):
    return c.isspace()


def _split_main(t):
    """MiniCPM5's regex (the second Split), by hand; yields the matched pieces."""
    i, n = 0, len(t)
    while i < n:
        c = t[i]
        # (?i:'s|'t|'re|'ve|'m|'ll|'d)
        if c == "'" and i + 1 < n:
            two = t[i + 1:i + 3].lower()
            if two in ("re", "ve", "ll"):
                yield t[i:i + 3]; i += 3; continue
            if t[i + 1].lower() in "stmd":
                yield t[i:i + 2]; i += 2; continue
        # [^\r\n\p{L}\p{N}]?\p{L}+
        j = i
        if not _is_l(c) and c not in "\r\n" and not _is_n(c) and i + 1 < n and _is_l(t[i + 1]):
            j = i + 1
        if _is_l(t[j]):
            k = j
            while k < n and _is_l(t[k]):
                k += 1
            yield t[i:k]; i = k; continue
        # \p{N}+
        if _is_n(c):
            k = i
            while k < n and _is_n(t[k]):
                k += 1
            yield t[i:k]; i = k; continue
        # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
        j = i + 1 if c == " " else i
        def punct(x):
            return not _is_s(x) and not _is_l(x) and not _is_n(x)
        if j < n and punct(t[j]):
            k = j
            while k < n and punct(t[k]):
                k += 1
            while k < n and t[k] in "\r\n":
                k += 1
            yield t[i:k]; i = k; continue
        # whitespace alternatives
        k = i
        while k < n and _is_s(t[k]):
            k += 1
        assert k > i, repr(t[i])
        last_nl = max(t.rfind("\r", i, k), t.rfind("\n", i, k))
        if last_nl >= 0:                       # \s*[\r\n]+
            yield t[i:last_nl + 1]; i = last_nl + 1; continue
        if k == n or k - 1 == i:               # \s+(?!\S) at the end, else \s+
            yield t[i:k]; i = k; continue
        yield t[i:k - 1]; i = k - 1            # \s+(?!\S): leave one space


def pretokenize(text):
    """The pre-tokens of a piece of text with no added tokens in it."""
    out = []
    for m in re.finditer(r"\d{1,3}|\D+", text):  # \p{N}{1,3} isolated (ASCII corpus)
        s = m.group(0)
        if s[0].isdigit():
            out.append(s)
        else:
            out.extend(_split_main(s))
    return out


def to_bytelevel(s):
    return "".join(BYTE2U[b] for b in s.encode("utf-8"))


class Tokenizer:
    def __init__(self, vocab, merges, im_start, vocab_size):
        self.vocab = vocab                       # bytelevel string -> id (BPE part)
        self.merges = merges                     # list of (a, b) bytelevel strings
        self.rank = {m: i for i, m in enumerate(merges)}
        self.im_start, self.im_end = im_start, im_start + 1
        self.vocab_size = vocab_size
        self.added = {c: i for i, (c, _) in enumerate(LOW_ADDED)}
        self.added["<|im_start|>"] = im_start
        self.added["<|im_end|>"] = im_start + 1
        for k, c in enumerate(HIGH_ADDED):
            if im_start + 2 + k < vocab_size:
                self.added[c] = im_start + 2 + k
        self.id2tok = {v: k for k, v in self.vocab.items()}
        self.id2added = {v: k for k, v in self.added.items()}
        alts = sorted(self.added, key=len, reverse=True)
        self.added_re = re.compile("|".join(re.escape(a) for a in alts))
        self.cache = {}

    def _bpe(self, word):
        if word in self.vocab:                   # ignore_merges
            return [self.vocab[word]]
        parts = list(word)
        while len(parts) > 1:
            best, bi = None, -1
            for i in range(len(parts) - 1):
                r = self.rank.get((parts[i], parts[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = self.merges[best]
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b); i += 2
                else:
                    out.append(parts[i]); i += 1
            parts = out
        return [self.vocab[p] for p in parts]

    def encode_plain(self, text):
        ids = []
        for p in pretokenize(text):
            r = self.cache.get(p)
            if r is None:
                r = self.cache[p] = self._bpe(to_bytelevel(p))
            ids.extend(r)
        return ids

    def encode(self, text):
        """Special tokens on, no BOS added (as minicpmd tokenizes prompts)."""
        ids, pos = [], 0
        for m in self.added_re.finditer(text):
            if m.start() > pos:
                ids.extend(self.encode_plain(text[pos:m.start()]))
            ids.append(self.added[m.group(0)])
            pos = m.end()
        if pos < len(text):
            ids.extend(self.encode_plain(text[pos:]))
        return ids

    def decode(self, ids):
        bs = bytearray()
        for i in ids:
            if i in self.id2added:
                bs += self.id2added[i].encode()
            else:
                bs += bytes(U2BYTE[c] for c in self.id2tok[i])
        return bs.decode("utf-8", errors="replace")

    def space_pairs(self):
        """[(id of " " + piece, id of piece)]: the space merges' tokens and the
        pieces they start with."""
        sp = BYTE2U[32]
        return [(self.vocab[a + b], self.vocab[b]) for a, b in self.merges
                if a == sp and b.isascii() and b.isalpha() and a + b in self.vocab]

    # ---- tokenizer.json -------------------------------------------------------
    def to_json(self):
        added = []
        for tid, c in sorted(self.id2added.items()):
            special = dict(LOW_ADDED).get(c, True)
            added.append({"id": tid, "content": c, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": special})
        for tid in range(self.im_start + 2 + len(HIGH_ADDED), self.vocab_size):
            added.append({"id": tid, "content": f"<|reserved_{tid - self.im_start - 2}|>",
                          "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True})

        def split(rx):
            return {"type": "Split", "pattern": {"Regex": rx}, "behavior": "Isolated",
                    "invert": False}
        bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
        return {
            "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                split("\\p{N}{1,3}"), split(MINICPM5_REGEX),
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": False}]},
            "post_processor": {
                "type": "TemplateProcessing",
                "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": "<s>", "type_id": 1}},
                         {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                      "vocab": self.vocab, "merges": [f"{a} {b}" for a, b in self.merges]},
        }

    def save(self, path):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, ensure_ascii=False, indent=1)
            f.write("\n")

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as f:
            j = json.load(f)
        vocab = j["model"]["vocab"]
        merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                  for m in j["model"]["merges"]]
        ids = {t["content"]: t["id"] for t in j["added_tokens"]}
        size = max(max(vocab.values()), max(ids.values())) + 1
        return cls(vocab, merges, ids["<|im_start|>"], size)


def train_bpe(texts, vocab_size, n_high=len(HIGH_ADDED), split_words=True, space_merges=0):
    """Classic BPE over the pre-tokens of `texts` (plain text, no added tokens).
    Merges of pieces containing a digit are never made. Ties: the pair seen first.
    split_words: a merge never joins letters with non-letters, so a word is spelled
    with the same tokens wherever it stands (" Paris", "\"Paris", ">Paris" all end
    in the tokens of "Paris"): copying a name or a word is copying tokens.
    space_merges (with split_words): then up to this many merges of a space with
    a word's first piece, ranked after every other merge, so " Paris" is
    " Par" + "is" where "Paris" is "Par" + "is": a word keeps its pieces but
    the first, and the space no longer stands alone between words (a space
    token between words makes copying the next word depend on the two tokens
    before it, which the small model did not learn; see README)."""
    n_bpe = vocab_size - N_LOW - 2 - n_high - (space_merges if split_words else 0)
    counts = collections.Counter()
    for t in texts:
        counts.update(pretokenize(t))
    words = [[BYTE2U[b] for b in w.encode("utf-8")] for w in counts]
    freq = list(counts.values())
    vocab = {}
    for b in range(256):
        vocab[BYTE2U[b]] = N_LOW + b
    pair_count = collections.Counter()
    where = collections.defaultdict(set)

    def kind(s):
        letters = sum(ch.isascii() and ch.isalpha() for ch in s)
        return "L" if letters == len(s) else ("O" if letters == 0 else "M")

    def ok(a, b):
        if any(ch.isdigit() for ch in a + b):
            return False
        return not split_words or kind(a) == kind(b)

    for wi, w in enumerate(words):
        for a, b in zip(w, w[1:]):
            if ok(a, b):
                pair_count[(a, b)] += freq[wi]
                where[(a, b)].add(wi)
    merges = []
    while len(vocab) < n_bpe and pair_count:
        (a, b), c = max(pair_count.items(), key=lambda kv: (kv[1], -len(kv[0][0] + kv[0][1])))
        if c < 2:
            break
        merges.append((a, b))
        ab = a + b
        if ab not in vocab:
            vocab[ab] = N_LOW + len(vocab)
        for wi in list(where[(a, b)]):
            w = words[wi]
            for x, y in zip(w, w[1:]):
                if ok(x, y):
                    pair_count[(x, y)] -= freq[wi]
                    if pair_count[(x, y)] <= 0:
                        del pair_count[(x, y)]
                    where[(x, y)].discard(wi)
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(ab); i += 2
                else:
                    out.append(w[i]); i += 1
            words[wi] = out
            for x, y in zip(out, out[1:]):
                if ok(x, y):
                    pair_count[(x, y)] += freq[wi]
                    where[(x, y)].add(wi)
        pair_count.pop((a, b), None)
    if split_words and space_merges:
        firsts = collections.Counter()
        for w, f in zip(words, freq):
            if len(w) > 1 and w[0] == BYTE2U[32] and kind(w[1]) == "L":
                firsts[w[1]] += f
        for p, _ in firsts.most_common(space_merges):
            merges.append((BYTE2U[32], p))
            vocab[BYTE2U[32] + p] = N_LOW + len(vocab)
    im_start = N_LOW + len(vocab)
    # Unused BPE slots (small corpus): im_start moves down, reserved tokens fill up.
    return Tokenizer(vocab, merges, im_start, vocab_size)
