/* Internals of the matcher, shared by stacks.c (the pushdown stacks: nodes,
 * expansion, advancing by a byte, compaction, the work budget) and match.c (the
 * matcher's API: the mask over the vocabulary trie, its memo and cache). Not for
 * use outside engine/grammar/. */
#ifndef MINICPMD_ENGINE_MATCH_IMPL_H
#define MINICPMD_ENGINE_MATCH_IMPL_H

#include "engine/grammar/gram-impl.h"

#define MAX_DEPTH 2048          /* stack depth */
#define MASK_CACHE 64           /* cached masks per matcher (16 KB each for MiniCPM5) */
/* Memory: a matcher stays under ~20 MB whatever its grammar (the nodes of one
 * step at most 2 * NODE_CAP, 28 B each with stamp and hash slots; the memo's
 * tables MEMO_SETS * 256 classes * 4 B at most; its ids MEMO_IDS * 4 B). */
#define NODE_CAP (1u << 17)     /* nodes kept across steps */
#define MEMO_SETS 4096          /* interned sets with successor tables, before a clear */
#define MEMO_IDS (1u << 19)     /* their ids, in all */
#define TRIM_BYTES (1u << 20)   /* freeing this much gives the heap back to the system */

/* Work units, weighted to take about the same time each (measured with
 * minicpmd-grambench on a Zen 4 core: a trie node visited ~7 ns, a node expanded
 * ~25 ns with its interning): */
#define W_TRIE 1                /* a trie node visited */
#define W_ADVANCE 2             /* a stack advanced by a byte, or sorted into a set */
#define W_EXPAND 4              /* a node expanded */

#define DEAD 0xFFFFFFFFu
#define UNKNOWN 0xFFFFFFFEu

struct node {
    uint32_t pos, parent, count, depth;
};

/* A set of stacks: node ids, sorted, distinct. */
struct sset {
    uint32_t *id;
    int n, cap;
    struct gr_set first;      /* bytes any stack takes next */
    bool complete;            /* holds the empty stack */
};

/* An interned set (compute_mask's memo): its ids in the matcher's pool. */
struct setrec {
    uint64_t hash;
    uint32_t off;
    int n;
    struct gr_set first;
    uint32_t *next;           /* NULL, or (n_classes) the set after each byte class:
                                 UNKNOWN, DEAD or an id */
};

struct mask_slot {
    uint64_t hash;
    uint32_t *key;            /* the set's ids */
    int n_key;
    uint32_t *mask;
    int count;
    uint64_t used;
};

struct eng_gram_matcher {
    eng_grammar *g;
    const eng_gram_vocab *v;
    int32_t *stop_ids;
    int n_stop_ids;
    int32_t n_ids;            /* the vocabulary and the stop ids: the mask's bits */
    int words;                /* mask words */

    struct node *nodes;       /* nodes[0] is the empty stack */
    size_t n_nodes, cap_nodes;
    uint32_t *table;          /* hash-consing: node ids, 0 = free */
    size_t table_cap;
    uint32_t *stamp;          /* (cap_nodes) the expansion that last visited a node */
    uint32_t epoch;
    uint32_t *work_list;      /* expansion's pending nodes */
    size_t cap_work;

    struct sset cur;
    struct sset tmp, tmp2;

    /* this step's work, and why it failed */
    uint64_t work, work_last, work_most;
    int fail;                 /* 0, -E2BIG or -ENOMEM: the step is abandoned */
    char why[160];

    /* The memo of advance() for the trie walk: interned sets and (set, class) ->
     * set. The walks of successive steps share it. */
    struct setrec *recs;
    size_t n_recs, cap_recs;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *rec_table;      /* rec index + 1; 0 = free */
    size_t rec_table_cap;
    uint32_t *level_id;       /* (max_depth + 1) */

    struct mask_slot cache[MASK_CACHE];
    uint64_t tick, n_computed, n_cached;
};

/* ---- stacks.c ---------------------------------------------------------------------- */

/* Fail this step with rc and a reason (the first failure of a step is kept). */
void gm_step_fail(eng_gram_matcher *m, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void gm_oom(eng_gram_matcher *m);
/* Count units of work; false (and the step failed) past the grammar's step_work. */
bool gm_spend(eng_gram_matcher *m, uint64_t units);
int gm_table_grow(eng_gram_matcher *m);
/* Push the alternatives of `rule` continuing into `cont` on the work list. */
void gm_push_alternatives(eng_gram_matcher *m, uint32_t rule, uint32_t cont, size_t *n);
/* Expand the work list's n nodes into `out`. */
void gm_expand(eng_gram_matcher *m, size_t n, struct sset *out);
/* Sort a set and fill its `first` and `complete`. */
void gm_sset_finish(eng_gram_matcher *m, struct sset *s);
/* out = the stacks of `in` after byte b; false when none is left or the step failed. */
bool gm_advance(eng_gram_matcher *m, const struct sset *in, unsigned b, struct sset *out);
void gm_memo_clear(eng_gram_matcher *m);
void gm_cache_clear(eng_gram_matcher *m);
/* A new step: no work done yet, the nodes compacted when past their cap. */
int gm_step_begin(eng_gram_matcher *m);

#endif
