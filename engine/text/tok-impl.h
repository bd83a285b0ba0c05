/* Internals of the tokenizer, shared by tokenizer.c (loading, added tokens, the
 * encode pipeline, decode), pretok.c (UTF-8 repair, normalizers, pre-tokenizers),
 * bpe.c (vocab and merge tables, the BPE itself and its cache) and detok.c.
 * Nothing outside engine/ includes this. */
#ifndef MINICPMD_ENGINE_TOK_IMPL_H
#define MINICPMD_ENGINE_TOK_IMPL_H

#include "engine/tokenizer.h"
#include "util/utf8.h"
#include "util/buf.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* ---- growable buffers ---------------------------------------------------- */

/* Bytes plus a list of pieces (offset, length) into them: what one pre-tokenizer
 * stage hands the next. */
struct tok_span {
    size_t off, len;
};

struct tok_pieces {
    char *buf;
    size_t len, cap;
    struct tok_span *v;
    size_t n, vcap;
};

int eng__pieces_add(struct tok_pieces *p, const char *s, size_t n);      /* new piece */
int eng__pieces_append(struct tok_pieces *p, const char *s, size_t n);   /* onto the last */
void eng__pieces_reset(struct tok_pieces *p);
void eng__pieces_free(struct tok_pieces *p);

struct tok_ids {
    int32_t *v;
    size_t n, cap;
};
int eng__ids_push(struct tok_ids *ids, int32_t id);


/* ---- UTF-8 (util/utf8.h does the decoding and the repair) ----------------- */

/* One code point of s[0 .. n), n >= 1, which the tokenizer has already made valid
 * UTF-8 (ut_utf8_repair); returns its length. Bytes that are not UTF-8 anyway give
 * *cp = -1 and the length of their maximal subpart, as the repair would. */
int eng__utf8_next(const char *s, size_t n, int32_t *cp);

/* JavaScript's String.prototype.trim whitespace (WhiteSpace + LineTerminator). */
bool eng__js_space(int32_t cp);

/* ---- normalizers and pre-tokenizers (pretok.c) -------------------------- */

enum tok_norm_type {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_LOWERCASE,
    TOK_NORM_PREPEND,
    TOK_NORM_REPLACE,
    TOK_NORM_SEQUENCE,
};

struct tok_norm {
    enum tok_norm_type type;
    char *a;                 /* PREPEND: the prefix; REPLACE: the literal pattern */
    char *b;                 /* REPLACE: the replacement */
    struct tok_norm *items;  /* SEQUENCE */
    size_t n_items;
};

enum tok_pre_type {
    TOK_PRE_SPLIT,
    TOK_PRE_BYTELEVEL,
    TOK_PRE_SEQUENCE,
};

enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREV,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS,
};

struct tok_pre {
    enum tok_pre_type type;
    pcre2_code *re;                  /* SPLIT; BYTELEVEL with use_regex */
    enum tok_split_behavior behavior;
    bool invert;
    bool add_prefix_space;           /* BYTELEVEL */
    struct tok_pre *items;           /* SEQUENCE */
    size_t n_items;
};

/* Parse a "normalizer" / "pre_tokenizer" object. 0, or -EINVAL with a one-line
 * reason in err. On failure what was built is released. */
int eng__norm_parse(const json_t *j, struct tok_norm *out, char *err, size_t errlen);
void eng__norm_free(struct tok_norm *n);
int eng__pre_parse(const json_t *j, struct tok_pre *out, char *err, size_t errlen);
void eng__pre_free(struct tok_pre *p);
/* True when p ends in a ByteLevel step (the only form this tokenizer handles). */
bool eng__pre_ends_bytelevel(const struct tok_pre *p);

/* Normalize s (valid UTF-8) into out (cleared first). */
int eng__norm_apply(const struct tok_norm *n, const char *s, size_t len, ut_buf *out);

/* Pre-tokenize s (valid UTF-8) into pieces of raw bytes in `out`; `tmp` is scratch.
 * The ByteLevel step is the identity on bytes here: the vocabulary is stored as raw
 * bytes, so the GPT-2 byte->unicode map is applied only when loading. */
int eng__pre_apply(const struct tok_pre *p, const char *s, size_t len, struct tok_pieces *out,
                   struct tok_pieces *tmp);

/* The GPT-2 byte->unicode map and its inverse (-1: not a byte-level char). */
uint32_t eng__byte_to_unicode(uint8_t b);
int eng__unicode_to_byte(uint32_t cp);

/* ---- BPE (bpe.c) --------------------------------------------------------- */

struct tok_bpe;

/* Build from raw-byte vocab strings (index = id; NULL for ids that are not in the
 * model's vocab) and merges given as (left id, right id, merged id) in rank order. */
struct tok_bpe *eng__bpe_new(int32_t n_ids, const char *const *tok, const uint32_t *tok_len,
                             bool ignore_merges, int32_t unk_id);
int eng__bpe_add_merge(struct tok_bpe *b, int32_t left, int32_t right, int32_t merged);
void eng__bpe_free(struct tok_bpe *b);
int32_t eng__bpe_lookup(const struct tok_bpe *b, const char *s, size_t n);
/* Encode one pre-token (raw bytes) and append its ids. Thread-safe. */
int eng__bpe_encode(const struct tok_bpe *b, const char *s, size_t n, struct tok_ids *out);

/* ---- the tokenizer ------------------------------------------------------- */

/* Added tokens, sorted by content bytes for the prefix search. */
struct tok_added {
    char *content;       /* as written in tokenizer.json */
    size_t len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
};

struct tok_match_entry {
    const char *str;      /* the string matched: the content, or its normalized form */
    size_t len;
    struct tok_added *tok;
    char *owned;          /* the normalized copy, if any */
    size_t order;         /* position in tokenizer.json: the first of equals wins */
};

struct tok_matcher {
    struct tok_match_entry *v;  /* sorted by str bytes */
    size_t n;
    uint8_t first[32];          /* bitmap of first bytes, to skip plain text fast */
};

#define TOK_MAX_POST 8

struct eng_tokenizer {
    int32_t n_ids;
    char **tok;              /* raw bytes of each id (vocab: byte-level decoded; added:
                              * the content); NULL for unused ids */
    uint32_t *tok_len;
    bool *is_special;        /* id is an added token with special = true */
    bool *is_added;
    struct tok_added *added;
    size_t n_added;
    struct tok_matcher raw_match;   /* added tokens matched before normalization */
    struct tok_matcher norm_match;  /* added tokens with normalized = true */
    bool has_norm;
    struct tok_norm norm;
    struct tok_pre pre;
    bool has_pre;
    struct tok_bpe *bpe;
    const char **bpe_tok;    /* what the BPE may look up (tok, or NULL) */
    /* post_processor TemplateProcessing "single": the special ids around $A (what
     * add_special_tokens adds; MiniCPM5: "<s>" before) */
    int32_t special_pre[TOK_MAX_POST], special_post[TOK_MAX_POST];
    int n_special_pre, n_special_post;
};

/* tokenizer.c, for the loader and the detokenizer. */
int eng__matcher_build(struct tok_matcher *m, struct tok_added *tokens, size_t n, bool normalized,
                       const struct tok_norm *norm);
void eng__matcher_free(struct tok_matcher *m);
bool eng__tokenizer_is_added(const eng_tokenizer *t, int32_t id);

#endif
