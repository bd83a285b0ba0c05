/* grammar — constrained decoding: a context-free grammar over bytes, the mask of
 * the vocabulary tokens that keep the output in its language, and the compilers
 * that write such grammars for JSON Schema and for MiniCPM5's tool-call XML.
 *
 * The grammar text is llama.cpp's GBNF (docs: llama.cpp grammars/README.md), the
 * subset: `name ::= alternatives`, "literals" with \n \t \r \\ \" \xHH \uHHHH
 * escapes, [classes] (ranges, ^ negation, the same escapes), `.` (any character),
 * ( groups ), and the postfix operators * + ? {m} {m,} {m,n}; # comments. The start
 * rule is `root`. Classes are over code points and compiled to UTF-8 byte ranges,
 * so the grammar accepts valid UTF-8 only; NUL is never part of the language (a
 * literal that asks for it is refused, classes leave it out). Left recursion is
 * refused at compile time. Repetition counts are at most ENG_GRAM_MAX_REPEAT.
 *
 * Runtime (the matcher): the set of pushdown stacks llama.cpp's sampler keeps,
 * advanced byte by byte; per step, the vocabulary is walked as a byte trie with
 * the stack set, pruning every subtree whose prefix no stack accepts. The mask of
 * a stack set is cached (keyed by the whole set, so exact): a JSON string or
 * number repeats the same set for every character and costs one walk.
 *
 * Bounds (struct eng_gram_limits): compiling is linear in the text and refuses a
 * grammar over max_rules or max_bytes; the matcher refuses a set of more than
 * max_stacks stacks and a step whose mask would take more than step_work units
 * (about 7 ns each on a Zen 4 core; the default bounds a step near 4 ms). Such a
 * grammar is refused when it starts, or its request ends with a client error at
 * that step. Nothing recurses on the C stack in proportion to the input.
 *
 * Threading: a compiled grammar and a vocabulary are immutable (any thread; the
 * grammar is reference counted); a matcher belongs to one thread at a time. */
#ifndef MINICPMD_ENGINE_GRAMMAR_H
#define MINICPMD_ENGINE_GRAMMAR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/tokenizer.h"

#define ENG_GRAM_MAX_REPEAT 4096   /* the largest m or n in x{m,n} */
#define ENG_GRAM_MAX_CALLS 8       /* tool calls in one answer (a bound that lets any
                                      model finish) */

typedef struct eng_grammar eng_grammar;

/* What one grammar may cost (docs/api.md "Structured outputs" documents the
 * defaults; the daemon's settings set them). A refusal's message names the limit
 * by its flag. */
struct eng_gram_limits {
    uint32_t max_rules;   /* rules after compilation (--grammar-max-rules) */
    uint32_t max_bytes;   /* the compiled form's size (--grammar-max-bytes) */
    uint32_t max_stacks;  /* pushdown stacks alive at one point (--grammar-max-stacks) */
    uint32_t step_work;   /* one step's mask, in work units (--grammar-step-work) */
};

/* The defaults (UT_GRAM_* in util/defaults.h). */
void eng_gram_limits_default(struct eng_gram_limits *lim);

/* Compile GBNF text under `lim` (NULL: the defaults). Returns 0 and *out (one
 * reference), -EINVAL with a one-line reason (and the line) in err, -E2BIG when a
 * limit is exceeded (err names it), or -ENOMEM. */
int eng_grammar_compile(const char *text, size_t len, const struct eng_gram_limits *lim,
                        eng_grammar **out, char *err, size_t errlen);
/* eng_grammar_compile with the default limits. */
int eng_grammar_parse(const char *text, size_t len, eng_grammar **out, char *err, size_t errlen);
eng_grammar *eng_grammar_ref(eng_grammar *g);
void eng_grammar_free(eng_grammar *g);   /* drops one reference; NULL is fine */

/* ---- compilers to GBNF -------------------------------------------------------- */

/* Why a schema was refused: the keyword and the JSON path of the schema object
 * that holds it ("#/properties/a/items"). */
struct eng_gram_refusal {
    char keyword[64];
    char path[256];
    char message[256];
};

/* JSON Schema (the subset README "Structured outputs" lists) -> GBNF whose `root`
 * is the JSON text. NULL schema: any JSON object (response_format json_object).
 * Returns 0 and a malloc'd NUL-terminated *gbnf, -EINVAL with `why` filled (an
 * unsupported keyword or a malformed schema), or -ENOMEM. */
int eng_gram_from_schema(const json_t *schema, char **gbnf, struct eng_gram_refusal *why);

/* OpenAI tools -> GBNF for one or more calls in MiniCPM5's XML
 * (<function name="N"><param name="K">V</param>…</function>), each call's
 * parameters following its tool's `parameters` schema (string values as plain text
 * without '<', '&' or newlines, or in CDATA; other types as JSON, which the output
 * parser types back). `only`: just the function of that name (NULL: any).
 * `max_calls`: 1 for parallel_tool_calls false, 0 for ENG_GRAM_MAX_CALLS. Same returns as
 * eng_gram_from_schema (paths start at "tools[i].function.parameters"). */
int eng_gram_from_tools(const json_t *tools, const char *only, int max_calls, char **gbnf,
                        struct eng_gram_refusal *why);

/* ---- the vocabulary and the matcher ---------------------------------------------- */

typedef struct eng_gram_vocab eng_gram_vocab;

/* The token byte strings of `t` in a trie. Special tokens match nothing, except
 * MiniCPM5's tool-call markup tokens, which the detokenizer keeps as text
 * (eng_detok_keep_markup). Returns NULL when out of memory. */
eng_gram_vocab *eng_gram_vocab_new(const eng_tokenizer *t);
void eng_gram_vocab_free(eng_gram_vocab *v);
int32_t eng_gram_vocab_size(const eng_gram_vocab *v);

typedef struct eng_gram_matcher eng_gram_matcher;

/* A matcher at the start of `g` (it takes a reference), under g's limits.
 * `stop_ids` (copied) are allowed exactly where the grammar is complete. Returns 0,
 * -ENOMEM, or -E2BIG when the start is over a limit (eng_gram_check_start says
 * which). */
int eng_gram_matcher_new(eng_grammar *g, const eng_gram_vocab *v, const int32_t *stop_ids,
                         int n_stop_ids, eng_gram_matcher **out);
/* Whether a matcher's first step fits the limits: a matcher is made and its first
 * mask computed. Returns 0, -E2BIG with the limit named in err, or -ENOMEM. For a
 * refusal before the request is queued. */
int eng_gram_check_start(eng_grammar *g, const eng_gram_vocab *v, char *err, size_t errlen);
void eng_gram_matcher_free(eng_gram_matcher *m);

/* The allowed tokens now: bit id of `mask` ((n + 31) / 32 words, n = the
 * vocabulary size or the largest stop id + 1 if larger) is set for each. Returns
 * how many, 0 when none (a dead end: the vocabulary cannot spell any way on),
 * -E2BIG when the step is over a limit (the mask is then empty), or -ENOMEM. */
int eng_gram_matcher_mask(eng_gram_matcher *m, uint32_t *mask);

/* Set logits[id] = -inf for every token not allowed now (ids the tokenizer does not
 * spell included: a model's vocabulary may be larger). Returns the count allowed,
 * or eng_gram_matcher_mask's errors. */
int eng_gram_matcher_apply(eng_gram_matcher *m, float *logits, int32_t n_logits);

/* Advance by one token (a stop id: only where complete). Returns 0, -EINVAL
 * when the token is not allowed, -E2BIG over a limit (the state is then
 * unchanged). */
int eng_gram_matcher_accept(eng_gram_matcher *m, int32_t id);

/* Advance by raw bytes (tests, and text forced outside the vocabulary). */
int eng_gram_matcher_accept_bytes(eng_gram_matcher *m, const char *s, size_t n);

/* Whether the output so far is a complete sentence of the grammar. */
bool eng_gram_matcher_complete(const eng_gram_matcher *m);

/* Masks computed / served from the cache, for the README's figures and tests. */
void eng_gram_matcher_stats(const eng_gram_matcher *m, uint64_t *computed, uint64_t *cached);
/* The work units of the last mask computed (0 when served from the cache), and
 * the most any mask took so far. */
void eng_gram_matcher_work(const eng_gram_matcher *m, uint64_t *last, uint64_t *most);
/* Why the last call failed with -E2BIG: one line naming the limit. */
const char *eng_gram_matcher_why(const eng_gram_matcher *m);

#endif
