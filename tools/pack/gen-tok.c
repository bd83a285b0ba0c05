/* The synthetic tokenizer of `minicpmd-pack gen`: a byte-level BPE shaped like
 * MiniCPM5's (same pre-tokenizer, decoder, ignore_merges and special-token
 * strings) with a vocabulary small enough for test packs.
 *
 * Merges are learned by a tiny BPE trainer over the English sample below, so the
 * tokens are real sub-words and prompts tokenize into plausible pieces. A sample
 * this size runs out of pairs seen twice long before 130,000 ids; the rest (the
 * `2b` preset) are filled with deterministic pseudo-words: merges of an existing
 * word-start token with an existing letters-only token. Every merge is a valid
 * BPE merge of two existing tokens, so Hugging Face tokenizers and ours agree. */
#include "engine/err.h"
#include "tools/pack/gen.h"
#include "util/utf8.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char sample[] =
    "The quick brown fox jumps over the lazy dog. A small model can still say hello, "
    "answer a question, and tell you what it does not know. When you ask for help, "
    "it should be clear, short, and kind. This is a test of the tokenizer, which "
    "splits text into pieces that are common in English: the, and, of, to, in, is, "
    "that, it, for, you, with, on, as, are, this, be, at, have, from, or, one, had, "
    "by, word, but, not, what, all, were, we, when, your, can, said, there, use, an, "
    "each, which, she, do, how, their, if, will, up, other, about, out, many, then, "
    "them, these, so, some, her, would, make, like, him, into, time, has, look, two, "
    "more, write, go, see, number, no, way, could, people, my, than, first, water, "
    "been, call, who, oil, its, now, find, long, down, day, did, get, come, made, "
    "may, part.\n\n"
    "User: What is the capital of France?\nAssistant: The capital of France is Paris.\n"
    "User: Can you write a short poem about the sea?\n"
    "Assistant: The sea is wide, the sea is deep; it sings the sailors off to sleep.\n"
    "User: How many days are there in a week?\nAssistant: There are 7 days in a week.\n"
    "User: Please add 12 and 30.\nAssistant: 12 + 30 = 42.\n\n"
    "Machine learning models are trained on large amounts of data. A language model "
    "predicts the next token given the tokens before it. Training uses gradient "
    "descent to reduce the loss, and inference runs the network forward one step at "
    "a time. The attention layers let every position look at the positions before "
    "it, and the feed forward layers transform each position on its own. Weights "
    "are often quantized to four bits to save memory and bandwidth, which matters "
    "because decoding is limited by how fast the weights can be read.\n\n"
    "In the morning the city wakes slowly. Shops open their doors, buses fill with "
    "people going to work, and the smell of bread and coffee drifts along the "
    "streets. Children walk to school in small groups, talking and laughing. By noon "
    "the squares are crowded, and by evening the lights come on one after another "
    "until the whole city is shining against the dark sky.\n\n"
    "def add(a, b):\n    return a + b\n\nfor i in range(10):\n    print(i, add(i, i))\n\n"
    "int main(void) {\n    printf(\"hello, world\\n\");\n    return 0;\n}\n\n"
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Berlin\", \"unit\": \"celsius\"}}\n"
    "It was the best of times, it was the worst of times, it was the age of wisdom, "
    "it was the age of foolishness, it was the epoch of belief, it was the epoch of "
    "incredulity, it was the season of Light, it was the season of Darkness, it was "
    "the spring of hope, it was the winter of despair. We had everything before us, "
    "we had nothing before us, we were all going direct to Heaven, we were all going "
    "direct the other way.\n\n"
    "Good questions deserve good answers. Think step by step: first understand the "
    "problem, then make a plan, then carry out the plan, and finally check the "
    "result. If something is uncertain, say so. If a tool is needed, call the tool "
    "with the right arguments and wait for the response before answering. Thank you "
    "for reading, and have a wonderful day!\n"
    "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 2025 3.14 42 99 256 512 1024.\n"
    "Questions? Answers! Notes; lists: one, two, three. (Brackets) [square] {curly} "
    "<angle> \"quotes\" 'single' - dash -- double -- and ... dots.\n";

/* ---- byte-level spelling (GPT-2 bytes_to_unicode) -------------------------- */

static unsigned byte_cp[256];

static void init_byte_map(void)
{
    unsigned n = 0;
    for (unsigned b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        byte_cp[b] = keep ? b : 256 + n++;
    }
}

/* Appends the byte-level spelling of raw bytes to out (needs 2*len+1 bytes). */
static size_t bytelevel(const unsigned char *raw, size_t len, char *out)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        o += (size_t)ut_utf8_encode(byte_cp[raw[i]], out + o);   /* 1 or 2 bytes */
    }
    out[o] = '\0';
    return o;
}

/* ---- the vocabulary: raw byte strings, index k <-> id GEN_N_LOW_ADDED + k -- */

struct vocab {
    unsigned char **raw;
    uint32_t *len;
    int n, cap;
    int32_t *slot;  /* open-addressing set of token indices keyed by bytes */
    size_t mask;
    int32_t (*merge)[2];
    int n_merges;
};

static uint64_t hash_bytes(const unsigned char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int vocab_find(const struct vocab *v, const unsigned char *p, size_t n)
{
    for (size_t i = hash_bytes(p, n) & v->mask;; i = (i + 1) & v->mask) {
        int32_t k = v->slot[i];
        if (k < 0)
            return -1;
        if (v->len[k] == n && memcmp(v->raw[k], p, n) == 0)
            return k;
    }
}

/* Adds a new token (the caller checked it is new); returns its index or -ENOMEM. */
static int vocab_add(struct vocab *v, const unsigned char *p, size_t n)
{
    if (v->n == v->cap)
        return -ENOMEM;  /* sized up front to the preset's vocabulary */
    unsigned char *s = malloc(n ? n : 1);
    if (!s)
        return -ENOMEM;
    memcpy(s, p, n);
    v->raw[v->n] = s;
    v->len[v->n] = (uint32_t)n;
    size_t i = hash_bytes(p, n) & v->mask;
    while (v->slot[i] >= 0)
        i = (i + 1) & v->mask;
    v->slot[i] = v->n;
    return v->n++;
}

static int vocab_init(struct vocab *v, int cap)
{
    memset(v, 0, sizeof *v);
    v->cap = cap;
    size_t slots = 1;
    while (slots < (size_t)cap * 2)
        slots <<= 1;
    v->mask = slots - 1;
    v->raw = calloc((size_t)cap, sizeof *v->raw);
    v->len = calloc((size_t)cap, sizeof *v->len);
    v->slot = malloc(slots * sizeof *v->slot);
    v->merge = calloc((size_t)cap, sizeof *v->merge);
    if (!v->raw || !v->len || !v->slot || !v->merge)
        return -ENOMEM;
    memset(v->slot, 0xFF, slots * sizeof *v->slot);
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if (vocab_add(v, &c, 1) < 0)
            return -ENOMEM;
    }
    return 0;
}

static void vocab_free(struct vocab *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->raw[i]);
    free(v->raw);
    free(v->len);
    free(v->slot);
    free(v->merge);
}

/* Adds merge (a, b); its result becomes a new token unless some other split
 * already produced the same bytes. Returns the result's index or -ENOMEM. */
static int vocab_merge(struct vocab *v, int a, int b)
{
    size_t n = v->len[a] + v->len[b];
    unsigned char buf[256];
    if (n > sizeof buf)
        return -E2BIG;
    memcpy(buf, v->raw[a], v->len[a]);
    memcpy(buf + v->len[a], v->raw[b], v->len[b]);
    int k = vocab_find(v, buf, n);
    if (k < 0 && (k = vocab_add(v, buf, n)) < 0)
        return k;
    v->merge[v->n_merges][0] = a;
    v->merge[v->n_merges][1] = b;
    v->n_merges++;
    return k;
}

/* ---- training ------------------------------------------------------------- */

enum cls { C_SPACE, C_LETTER, C_DIGIT, C_OTHER };

static enum cls classify(unsigned char c)
{
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r')
        return C_SPACE;
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z')
        return C_LETTER;
    if (c >= '0' && c <= '9')
        return C_DIGIT;
    return C_OTHER;
}

struct word {
    int32_t sym[64];
    int n, count;
};

/* An approximation of MiniCPM5's pre-tokenizer, good enough to decide what the
 * trainer sees: " word", digits in threes, " punctuation", whitespace runs. */
static int split_sample(struct word **out, int *nout)
{
    size_t len = sizeof sample - 1, i = 0;
    int n = 0, cap = 4096;
    struct word *w = calloc((size_t)cap, sizeof *w);
    if (!w)
        return -ENOMEM;
    while (i < len) {
        size_t s = i;
        enum cls c = classify((unsigned char)sample[i]);
        if (c == C_SPACE && sample[i] == ' ' && i + 1 < len &&
            classify((unsigned char)sample[i + 1]) != C_SPACE &&
            classify((unsigned char)sample[i + 1]) != C_DIGIT)
            c = classify((unsigned char)sample[++i]);
        size_t lim = c == C_DIGIT ? 3 : 60;
        while (i < len && i - s < lim && classify((unsigned char)sample[i]) == c)
            i++;
        struct word cand = {.n = (int)(i - s), .count = 1};
        for (int k = 0; k < cand.n; k++)
            cand.sym[k] = (unsigned char)sample[s + (size_t)k];
        int j;
        for (j = 0; j < n; j++)
            if (w[j].n == cand.n && memcmp(w[j].sym, cand.sym, (size_t)cand.n * 4) == 0)
                break;
        if (j < n) {
            w[j].count++;
        } else if (n < cap) {
            w[n++] = cand;
        }
    }
    *out = w;
    *nout = n;
    return 0;
}

struct pair_slot {
    uint64_t key;
    int count;
};

/* Classic BPE: merge the most frequent adjacent pair (ties: smallest pair of
 * indices) until the vocabulary is full or no pair occurs twice. */
static int train(struct vocab *v, int target)
{
    struct word *w = NULL;
    int nw = 0, rc;
    size_t mask = (1u << 16) - 1;
    struct pair_slot *tab = malloc((mask + 1) * sizeof *tab);
    if (!tab || (rc = split_sample(&w, &nw)) != 0) {
        free(tab);
        return -ENOMEM;
    }
    while (v->n < target) {
        memset(tab, 0xFF, (mask + 1) * sizeof *tab);
        uint64_t best = UINT64_MAX;
        int best_count = 0;
        for (int i = 0; i < nw; i++) {
            for (int k = 0; k + 1 < w[i].n; k++) {
                uint64_t key = (uint64_t)w[i].sym[k] << 32 | (uint32_t)w[i].sym[k + 1];
                size_t s = (key * 0x9E3779B97F4A7C15ull >> 20) & mask;
                while (tab[s].key != UINT64_MAX && tab[s].key != key)
                    s = (s + 1) & mask;
                if (tab[s].key == UINT64_MAX) {
                    tab[s].key = key;
                    tab[s].count = 0;
                }
                tab[s].count += w[i].count;
                if (tab[s].count > best_count || (tab[s].count == best_count && key < best)) {
                    best_count = tab[s].count;
                    best = key;
                }
            }
        }
        if (best_count < 2)
            break;
        int a = (int)(best >> 32), b = (int)(uint32_t)best;
        int m = vocab_merge(v, a, b);
        if (m < 0) {
            rc = m;
            goto out;
        }
        for (int i = 0; i < nw; i++) {
            int o = 0;
            for (int k = 0; k < w[i].n; k++) {
                if (k + 1 < w[i].n && w[i].sym[k] == a && w[i].sym[k + 1] == b) {
                    w[i].sym[o++] = m;
                    k++;
                } else {
                    w[i].sym[o++] = w[i].sym[k];
                }
            }
            w[i].n = o;
        }
    }
    rc = 0;
out:
    free(w);
    free(tab);
    return rc;
}

static bool all_lower(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] < 'a' || p[i] > 'z')
            return false;
    return n > 0;
}

/* Pseudo-words for the ids the sample cannot teach: " " or a letter-run start
 * (a) merged with a lowercase run (b). Fixed seed: the tokenizer is part of the
 * preset, not of the pack's seed. */
static int fill(struct vocab *v, int target)
{
    int *heads = malloc((size_t)target * sizeof *heads), *tails = malloc((size_t)target * sizeof *tails);
    int nh = 0, nt = 0, rc = 0;
    uint64_t rng = 0x4D696E6943504D35ull;  /* "MiniCPM5" */
    if (!heads || !tails) {
        rc = -ENOMEM;
        goto out;
    }
    for (int k = 0; k < v->n; k++) {
        const unsigned char *p = v->raw[k];
        if (v->len[k] >= 2 && p[0] == ' ' && all_lower(p + 1, v->len[k] - 1))
            heads[nh++] = k;
        if (all_lower(p, v->len[k]))
            tails[nt++] = k;
    }
    for (long tries = 0; v->n < target; tries++) {
        if (tries > 100L * target || nh == 0 || nt == 0) {
            rc = -ENOSPC;
            goto out;
        }
        int a = heads[gen_rand(&rng) % (uint64_t)nh], b = tails[gen_rand(&rng) % (uint64_t)nt];
        size_t n = v->len[a] + v->len[b];
        if (n > 16)
            continue;
        unsigned char buf[32];
        memcpy(buf, v->raw[a], v->len[a]);
        memcpy(buf + v->len[a], v->raw[b], v->len[b]);
        if (vocab_find(v, buf, n) >= 0)
            continue;
        int m = vocab_merge(v, a, b);
        if (m < 0) {
            rc = m;
            goto out;
        }
        heads[nh++] = m;
    }
out:
    free(heads);
    free(tails);
    return rc;
}

/* ---- tokenizer.json -------------------------------------------------------- */

struct added {
    const char *content;
    bool special;
};

/* MiniCPM5's ids 0..21 (docs/model-minicpm5.md §2.2; 4..7 and 14..17 per the astrowar list). */
static const struct added low_added[GEN_N_LOW_ADDED] = {
    {"<s>", true},           {"</s>", true},          {"<tool_call>", true},
    {"</tool_call>", true},  {"<|im_sep|>", true},    {"<|fim_prefix|>", true},
    {"<|fim_middle|>", true}, {"<|fim_suffix|>", true}, {"<think>", false},
    {"</think>", false},     {"<tool_response>", true}, {"</tool_response>", true},
    {"<tools>", true},       {"</tools>", true},      {"<arguments>", true},
    {"</arguments>", true},  {"<parameters>", true},  {"</parameters>", true},
    {"<function", true},     {"</function>", true},   {"<param", true},
    {"</param>", true},
};

/* Past <|im_end|>: the strings the real vocabulary has up there, then reserved. */
static const char *const high_added[] = {
    "<unk>", "<|thought_begin|>", "<|thought_end|>", "<|tool_call|>", "<|execute_start|>",
    "<|execute_end|>",
};

static const char minicpm5_regex[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}+| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static json_t *added_token(int id, const char *content, bool special)
{
    return json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content,
                     "single_word", 0, "lstrip", 0, "rstrip", 0, "normalized", 0, "special",
                     special);
}

static json_t *split(const char *regex)
{
    return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", regex,
                     "behavior", "Isolated", "invert", 0);
}

static json_t *build_json(const struct vocab *v, const struct gen_preset *p)
{
    json_t *root = json_object(), *added = json_array(), *vocab = json_object(),
           *merges = json_array();
    char a[600], b[600], ab[1300];
    bool ok = root && added && vocab && merges;

    for (int i = 0; ok && i < GEN_N_LOW_ADDED; i++)
        ok = json_array_append_new(added, added_token(i, low_added[i].content,
                                                      low_added[i].special)) == 0;
    ok = ok && json_array_append_new(added, added_token(p->im_start, "<|im_start|>", true)) == 0;
    ok = ok && json_array_append_new(added, added_token(p->im_start + 1, "<|im_end|>", true)) == 0;
    for (int id = p->im_start + 2, k = 0; ok && id < p->vocab; id++, k++) {
        char name[40];
        const char *c = name;
        if ((size_t)k < sizeof high_added / sizeof *high_added)
            c = high_added[k];
        else
            snprintf(name, sizeof name, "<|reserved_%d|>", k);
        ok = json_array_append_new(added, added_token(id, c, true)) == 0;
    }
    for (int k = 0; ok && k < v->n; k++) {
        bytelevel(v->raw[k], v->len[k], a);
        ok = json_object_set_new(vocab, a, json_integer(GEN_N_LOW_ADDED + k)) == 0;
    }
    for (int k = 0; ok && k < v->n_merges; k++) {
        bytelevel(v->raw[v->merge[k][0]], v->len[v->merge[k][0]], a);
        bytelevel(v->raw[v->merge[k][1]], v->len[v->merge[k][1]], b);
        snprintf(ab, sizeof ab, "%s %s", a, b);
        ok = json_array_append_new(merges, json_string(ab)) == 0;
    }
    json_t *pre = json_pack("{s:s, s:[o, o, {s:s, s:b, s:b, s:b}]}", "type", "Sequence",
                            "pretokenizers", split("\\p{N}{1,3}"), split(minicpm5_regex), "type",
                            "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1, "use_regex", 0);
    /* As MiniCPM5's: <s> is prepended only when the caller asks for special
     * tokens; the chat template writes its own. */
    json_t *post = json_pack(
        "{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}, "
        "{s:{s:s, s:i}}, {s:{s:s, s:i}}], s:{s:{s:s, s:[i], s:[s]}}}",
        "type", "TemplateProcessing", "single", "SpecialToken", "id", "<s>", "type_id", 0,
        "Sequence", "id", "A", "type_id", 0, "pair", "SpecialToken", "id", "<s>", "type_id", 0,
        "Sequence", "id", "A", "type_id", 0, "SpecialToken", "id", "<s>", "type_id", 1,
        "Sequence", "id", "B", "type_id", 1, "special_tokens", "<s>", "id", "<s>", "ids", 0,
        "tokens", "<s>");
    json_t *dec = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                            "trim_offsets", 1, "use_regex", 1);
    json_t *model = json_pack("{s:s, s:n, s:n, s:n, s:n, s:b, s:b, s:b, s:o, s:o}", "type", "BPE",
                              "dropout", "unk_token", "continuing_subword_prefix",
                              "end_of_word_suffix", "fuse_unk", 0, "byte_fallback", 0,
                              "ignore_merges", 1, "vocab", vocab, "merges", merges);
    vocab = merges = NULL;  /* json_pack "o" stole them, even on failure */
    ok = ok && pre && post && dec && model &&
         json_object_set_new(root, "version", json_string("1.0")) == 0 &&
         json_object_set_new(root, "truncation", json_null()) == 0 &&
         json_object_set_new(root, "padding", json_null()) == 0 &&
         json_object_set(root, "added_tokens", added) == 0 &&
         json_object_set_new(root, "normalizer", json_null()) == 0 &&
         json_object_set(root, "pre_tokenizer", pre) == 0 &&
         json_object_set(root, "post_processor", post) == 0 &&
         json_object_set(root, "decoder", dec) == 0 &&
         json_object_set(root, "model", model) == 0;
    json_decref(added);
    json_decref(pre);
    json_decref(post);
    json_decref(dec);
    json_decref(model);
    if (!ok) {
        json_decref(root);
        return NULL;
    }
    return root;
}

int gen_tokenizer_write(const char *path, const struct gen_preset *p, char *err, size_t errlen)
{
    struct vocab v;
    json_t *root = NULL;
    int n_bpe = p->im_start - GEN_N_LOW_ADDED, rc;

    init_byte_map();
    if (n_bpe < 256 || p->im_start + 2 > p->vocab)
        return eng__fail(err, errlen, -EINVAL,
                         "preset %s: vocab %d too small for 256 bytes + 24 added", p->name,
                         p->vocab);
    if ((rc = vocab_init(&v, n_bpe)) || (rc = train(&v, n_bpe)) || (rc = fill(&v, n_bpe))) {
        eng__fail(err, errlen, rc, "building the BPE vocabulary: %s", strerror(-rc));
        goto out;
    }
    root = build_json(&v, p);
    if (!root) {
        rc = eng__fail(err, errlen, -ENOMEM, "building tokenizer.json: out of memory");
        goto out;
    }
    if (json_dump_file(root, path, JSON_INDENT(1)) != 0) {
        rc = eng__fail(err, errlen, -EIO, "%s: cannot write", path);
        goto out;
    }
    rc = 0;
out:
    json_decref(root);
    vocab_free(&v);
    return rc;
}
