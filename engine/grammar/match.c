/* The matcher: a set of pushdown stacks advanced byte by byte, and the mask of
 * the vocabulary tokens whose bytes keep some stack alive.
 *
 * Stacks (llama.cpp's llama-grammar.cpp keeps vectors of element pointers; this is
 * the same automaton, stored differently). A stack is a chain of nodes {position,
 * count, parent}, hash-consed: the same chain is always the same node id, so
 * pushing and popping copy nothing, a stack compares by its id, and a set of
 * stacks is a small sorted array of ids — which is also the exact key of its mask
 * in the cache. Node 0 is the empty stack (the grammar is complete). After
 * expansion every non-empty stack has a SET on top: the bytes it can take next. A
 * REP node's count is how many times its rule was done.
 *
 * Expansion is a work list, not a recursion, and expands each node once per byte
 * (a stamp per node), so ambiguity that reaches the same node by many ways costs
 * one visit, and no input can deepen the C stack.
 *
 * The mask. The vocabulary is a byte trie stored in preorder (each node knows
 * where its subtree ends), walked with one stack set per depth: a node whose byte
 * no stack of its parent takes (a 256-bit union checked first) or that leaves no
 * stack skips its whole subtree. That is XGrammar's observation in its simplest
 * form: most of the vocabulary dies on its first byte or two. Successor sets are
 * memoised per (set, byte class), and masks are cached per stack set
 * (MASK_CACHE slots, by hash, the key compared in full), so the states a JSON
 * string or number keeps returning to are walked once per request.
 *
 * Bounds. Every trie node visited, stack advanced and node expanded is a unit of
 * work; a step (a mask, or the acceptance of a token) over the grammar's
 * step_work units, a set over max_stacks stacks or a stack deeper than MAX_DEPTH
 * fails with -E2BIG and a reason, never a silently smaller language. Nodes and
 * memo tables are compacted between steps when they pass their caps, so a long
 * answer's memory stays bounded too. */
#include "engine/grammar/gram-impl.h"
#include "util/buf.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void step_fail(eng_gram_matcher *m, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void step_fail(eng_gram_matcher *m, int rc, const char *fmt, ...)
{
    if (m->fail)
        return;
    m->fail = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof m->why, fmt, ap);
    va_end(ap);
}

static bool spend(eng_gram_matcher *m, uint64_t units)
{
    m->work += units;
    if (m->work > m->g->lim.step_work)
        step_fail(m, -E2BIG,
                  "grammar: one step needs more than %u units of work (--grammar-step-work)",
                  m->g->lim.step_work);
    return !m->fail;
}

static void oom(eng_gram_matcher *m) { step_fail(m, -ENOMEM, "grammar: out of memory"); }

/* ---- nodes ----------------------------------------------------------------------------- */

static uint64_t node_hash(uint32_t pos, uint32_t parent, uint32_t count)
{
    return gr_mix(((uint64_t)pos << 32 | parent) ^ gr_mix(count));
}

static int table_grow(eng_gram_matcher *m)
{
    size_t cap = m->table_cap ? m->table_cap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 1; i < m->n_nodes; i++) {
        const struct node *n = &m->nodes[i];
        size_t h = node_hash(n->pos, n->parent, n->count) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i;
    }
    free(m->table);
    m->table = t;
    m->table_cap = cap;
    return 0;
}

/* The node {pos, count, parent}, made once. Returns its id, or 0 with m->fail. */
static uint32_t intern(eng_gram_matcher *m, uint32_t pos, uint32_t parent, uint32_t count)
{
    if (2 * (m->n_nodes + 1) > m->table_cap && table_grow(m)) {
        oom(m);
        return 0;
    }
    size_t mask = m->table_cap - 1;
    size_t h = node_hash(pos, parent, count) & mask;
    for (; m->table[h]; h = (h + 1) & mask) {
        const struct node *n = &m->nodes[m->table[h]];
        if (n->pos == pos && n->parent == parent && n->count == count)
            return m->table[h];
    }
    uint32_t depth = m->nodes[parent].depth + 1;
    if (depth > MAX_DEPTH) {
        step_fail(m, -E2BIG, "grammar: nesting deeper than %d", MAX_DEPTH);
        return 0;
    }
    if (m->n_nodes >= 2 * NODE_CAP) { /* one step alone: bounded by its work too */
        step_fail(m, -E2BIG,
                  "grammar: one step needs more than %u stack nodes (--grammar-step-work)",
                  2 * NODE_CAP);
        return 0;
    }
    size_t cap = m->cap_nodes;
    if (ut_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes, 1024)) {
        oom(m);
        return 0;
    }
    if (m->cap_nodes != cap) {
        uint32_t *s = realloc(m->stamp, m->cap_nodes * sizeof *s);
        if (!s) {
            oom(m);
            return 0;
        }
        memset(s + cap, 0, (m->cap_nodes - cap) * sizeof *s);
        m->stamp = s;
    }
    uint32_t id = (uint32_t)m->n_nodes++;
    m->nodes[id] = (struct node){pos, parent, count, depth};
    m->stamp[id] = 0;
    m->table[h] = id;
    return id;
}

/* The node {pos, count, parent} if it exists (0 if not). */
static uint32_t find(const eng_gram_matcher *m, uint32_t pos, uint32_t parent, uint32_t count)
{
    size_t mask = m->table_cap - 1;
    for (size_t h = node_hash(pos, parent, count) & mask; m->table[h]; h = (h + 1) & mask) {
        const struct node *n = &m->nodes[m->table[h]];
        if (n->pos == pos && n->parent == parent && n->count == count)
            return m->table[h];
    }
    return 0;
}

/* The stack that continues at position `pos` with `parent` below: the parent
 * itself where the rule's alternative ends there. */
static uint32_t at(eng_gram_matcher *m, uint32_t pos, uint32_t parent)
{
    return GR_IS_END(m->g->el[pos]) ? parent : intern(m, pos, parent, 0);
}

/* ---- expansion ------------------------------------------------------------------------- */

static void push(eng_gram_matcher *m, uint32_t id, size_t *n)
{
    if (m->fail || m->stamp[id] == m->epoch)
        return;
    if (ut_grow((void **)&m->work_list, &m->cap_work, *n + 1, sizeof *m->work_list, 256)) {
        oom(m);
        return;
    }
    m->work_list[(*n)++] = id;
}

static void sset_add(eng_gram_matcher *m, struct sset *s, uint32_t id)
{
    if (s->n >= (int)m->g->lim.max_stacks) {
        step_fail(m, -E2BIG, "grammar: more than %u stacks at one point (--grammar-max-stacks)",
                  m->g->lim.max_stacks);
        return;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        uint32_t *p = realloc(s->id, (size_t)cap * sizeof *p);
        if (!p) {
            oom(m);
            return;
        }
        s->id = p;
        s->cap = cap;
    }
    s->id[s->n++] = id;
}

/* Push the alternatives of `rule`, each continuing into `cont`. */
static void push_alternatives(eng_gram_matcher *m, uint32_t rule, uint32_t cont, size_t *n)
{
    const uint32_t *el = m->g->el;
    for (uint32_t a = m->g->rule_start[rule];;) {
        push(m, at(m, a, cont), n);
        if (m->fail)
            return;
        while (!GR_IS_END(el[a]))
            a++;
        if (GR_TYPE(el[a]) == GR_END)
            return;
        a++;
    }
}

/* Expand the pending nodes (m->work_list[0..n)) until every stack has a SET on
 * top or is empty, adding those to `out`. Each node is expanded once per epoch. */
static void expand(eng_gram_matcher *m, size_t n, struct sset *out)
{
    const eng_grammar *g = m->g;
    while (n && !m->fail) {
        uint32_t s = m->work_list[--n];
        if (m->stamp[s] == m->epoch)
            continue;
        m->stamp[s] = m->epoch;
        if (!spend(m, W_EXPAND))
            return;
        if (s == 0) {
            sset_add(m, out, 0);
            continue;
        }
        struct node nd = m->nodes[s];
        uint32_t e = g->el[nd.pos];
        switch (GR_TYPE(e)) {
        case GR_SET:
            sset_add(m, out, s);
            break;
        case GR_REF:
            push_alternatives(m, GR_VAL(e), at(m, nd.pos + 1, nd.parent), &n);
            break;
        case GR_REP: {
            const struct gr_rep *r = &g->reps[GR_VAL(e)];
            /* A rule that can be empty returns here at count c + 1 in the same
             * expansion that expanded count c, having read nothing: count c
             * already offered all that c + 1 offers (min is 0), so the empty
             * iteration adds no stacks. Without this, ("a"?){0,4096} would start
             * with 4096 stacks. */
            if (r->nullable && nd.count > 0) {
                uint32_t prev = find(m, nd.pos, nd.parent, nd.count - 1);
                if (prev && m->stamp[prev] == m->epoch)
                    break;
            }
            if (nd.count >= r->min)
                push(m, at(m, nd.pos + 1, nd.parent), &n);
            if (r->max == GR_INF || nd.count < r->max) {
                /* unbounded: the count only matters until min is reached */
                uint32_t c = r->max == GR_INF && nd.count >= r->min ? nd.count : nd.count + 1;
                uint32_t back = intern(m, nd.pos, nd.parent, c);
                if (!m->fail)
                    push_alternatives(m, r->rule, back, &n);
            }
            break;
        }
        default:
            break;
        }
    }
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sort, and fill `first` and `complete`. */
static void sset_finish(eng_gram_matcher *m, struct sset *s)
{
    if (s->n > 1)
        qsort(s->id, (size_t)s->n, sizeof *s->id, cmp_u32);
    memset(&s->first, 0, sizeof s->first);
    s->complete = false;
    for (int i = 0; i < s->n; i++) {
        if (s->id[i] == 0) {
            s->complete = true;
            continue;
        }
        const struct gr_set *b = &m->g->sets[GR_VAL(m->g->el[m->nodes[s->id[i]].pos])];
        for (int w = 0; w < 8; w++)
            s->first.bits[w] |= b->bits[w];
    }
}

static void next_epoch(eng_gram_matcher *m)
{
    if (++m->epoch == 0) { /* wrapped: forget every stamp */
        memset(m->stamp, 0, m->cap_nodes * sizeof *m->stamp);
        m->epoch = 1;
    }
}

/* out = the stacks of `in` after byte `b`. Returns false when none is left or
 * the step failed (m->fail). */
static bool advance(eng_gram_matcher *m, const struct sset *in, unsigned b, struct sset *out)
{
    out->n = 0;
    if (!gr_set_has(&in->first, b))
        return false;
    if (!spend(m, W_ADVANCE * (uint64_t)in->n))
        return false;
    next_epoch(m);
    const uint32_t *el = m->g->el;
    size_t n = 0;
    for (int i = 0; i < in->n && !m->fail; i++) {
        uint32_t s = in->id[i];
        if (s == 0)
            continue;
        const struct node *nd = &m->nodes[s];
        if (gr_set_has(&m->g->sets[GR_VAL(el[nd->pos])], b))
            push(m, at(m, nd->pos + 1, nd->parent), &n);
    }
    expand(m, n, out);
    if (m->fail) {
        out->n = 0;
        return false;
    }
    sset_finish(m, out);
    return spend(m, W_ADVANCE * (uint64_t)out->n) && out->n > 0;
}

/* ---- compaction: keep the nodes the current set reaches ------------------------------- */

static void memo_clear(eng_gram_matcher *m)
{
    for (size_t i = 0; i < m->n_recs; i++)
        free(m->recs[i].next);
    m->n_recs = m->n_pool = 0;
    if (m->rec_table)
        memset(m->rec_table, 0, m->rec_table_cap * sizeof *m->rec_table);
}

static void cache_clear(eng_gram_matcher *m)
{
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
        m->cache[i] = (struct mask_slot){0};
    }
}

/* Nodes, memo and cache name nodes by id: renumbering the live nodes drops the
 * memo and the cache (both refill as the walk goes). */
static int compact(eng_gram_matcher *m)
{
    uint32_t *map = calloc(m->n_nodes, sizeof *map);
    struct node *keep = malloc(m->n_nodes * sizeof *keep);
    uint32_t *st = malloc(m->n_nodes * sizeof *st);
    if (!map || !keep || !st) {
        free(map);
        free(keep);
        free(st);
        return -ENOMEM;
    }
    /* parents before children: a node's parent always has a smaller id */
    uint32_t n = 1;
    keep[0] = m->nodes[0];
    for (int i = 0; i < m->cur.n; i++) {
        int sp = 0;
        for (uint32_t x = m->cur.id[i]; x && !map[x]; x = m->nodes[x].parent)
            st[sp++] = x;
        while (sp) {
            uint32_t x = st[--sp];
            keep[n] = m->nodes[x];
            keep[n].parent = map[m->nodes[x].parent];
            map[x] = n++;
        }
    }
    for (int i = 0; i < m->cur.n; i++)
        m->cur.id[i] = map[m->cur.id[i]];
    qsort(m->cur.id, (size_t)m->cur.n, sizeof *m->cur.id, cmp_u32);
    memcpy(m->nodes, keep, n * sizeof *keep);
    m->n_nodes = n;
    memset(m->stamp, 0, m->cap_nodes * sizeof *m->stamp);
    m->epoch = 1;
    free(map);
    free(keep);
    free(st);
    free(m->table);
    m->table = NULL;
    m->table_cap = 0;
    memo_clear(m);
    cache_clear(m);
    while (2 * m->n_nodes > m->table_cap)
        if (table_grow(m))
            return -ENOMEM;
    return 0;
}

/* Between steps: a new step starts with no work done, within the node cap. */
static int step_begin(eng_gram_matcher *m)
{
    m->work = 0;
    m->fail = 0;
    m->why[0] = '\0';
    if (m->n_nodes > NODE_CAP && compact(m))
        return -ENOMEM;
    if (m->n_recs > MEMO_SETS || m->n_pool > MEMO_IDS)
        memo_clear(m);
    return 0;
}

/* ---- the matcher -------------------------------------------------------------------- */

/* A matcher at the start; on -E2BIG it is still made (*out), its `why` filled. */
static int matcher_make(eng_grammar *g, const eng_gram_vocab *v, const int32_t *stop_ids,
                        int n_stop_ids, eng_gram_matcher **out)
{
    *out = NULL;
    eng_gram_matcher *m = calloc(1, sizeof *m);
    if (!m)
        return -ENOMEM;
    m->g = eng_grammar_ref(g);
    m->v = v;
    m->n_ids = v->n_vocab;
    for (int i = 0; i < n_stop_ids; i++)
        if (stop_ids[i] >= m->n_ids && stop_ids[i] < INT32_MAX / 2)
            m->n_ids = stop_ids[i] + 1;
    m->words = (m->n_ids + 31) / 32;
    m->n_stop_ids = n_stop_ids;
    m->stop_ids = malloc(((size_t)n_stop_ids + 1) * sizeof *m->stop_ids);
    m->level_id = calloc((size_t)v->max_depth + 1, sizeof *m->level_id);
    m->stamp = calloc(1024, sizeof *m->stamp);
    if (!m->stop_ids || !m->level_id || !m->stamp ||
        ut_grow((void **)&m->nodes, &m->cap_nodes, 1024, sizeof *m->nodes, 1024) ||
        m->cap_nodes != 1024 || table_grow(m)) {
        eng_gram_matcher_free(m);
        return -ENOMEM;
    }
    if (n_stop_ids > 0)
        memcpy(m->stop_ids, stop_ids, (size_t)n_stop_ids * sizeof *stop_ids);
    m->nodes[0] = (struct node){0, 0, 0, 0};
    m->n_nodes = 1;
    m->epoch = 1;
    /* The start: root's alternatives over the empty stack. */
    size_t n = 0;
    push_alternatives(m, (uint32_t)g->root, 0, &n);
    expand(m, n, &m->cur);
    if (m->fail == -ENOMEM) {
        eng_gram_matcher_free(m);
        return -ENOMEM;
    }
    sset_finish(m, &m->cur);
    *out = m;
    return m->fail;
}

int eng_gram_matcher_new(eng_grammar *g, const eng_gram_vocab *v, const int32_t *stop_ids,
                         int n_stop_ids, eng_gram_matcher **out)
{
    int rc = matcher_make(g, v, stop_ids, n_stop_ids, out);
    if (rc) {
        eng_gram_matcher_free(*out);
        *out = NULL;
    }
    return rc;
}

void eng_gram_matcher_free(eng_gram_matcher *m)
{
    if (!m)
        return;
    bool large = m->cap_nodes * sizeof *m->nodes > TRIM_BYTES;
    free(m->cur.id);
    free(m->tmp.id);
    free(m->tmp2.id);
    cache_clear(m);
    memo_clear(m);
    free(m->recs);
    free(m->pool);
    free(m->rec_table);
    free(m->level_id);
    free(m->nodes);
    free(m->stamp);
    free(m->work_list);
    free(m->table);
    free(m->stop_ids);
    eng_grammar_free(m->g);
    free(m);
    if (large) /* a hostile request's peak is not kept by the allocator */
        malloc_trim(0);
}

static void set_bit(uint32_t *mask, int32_t id) { mask[id >> 5] |= 1u << (id & 31); }

static uint64_t set_hash(const struct sset *s)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++)
        h = gr_mix(h ^ s->id[i]);
    return h;
}

static int rec_table_grow(eng_gram_matcher *m)
{
    size_t cap = m->rec_table_cap ? 2 * m->rec_table_cap : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < m->n_recs; i++) {
        size_t h = m->recs[i].hash & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i + 1;
    }
    free(m->rec_table);
    m->rec_table = t;
    m->rec_table_cap = cap;
    return 0;
}

/* The id of set s (finished), or DEAD when out of memory. */
static uint32_t set_intern(eng_gram_matcher *m, const struct sset *s)
{
    if (2 * (m->n_recs + 1) > m->rec_table_cap && rec_table_grow(m)) {
        oom(m);
        return DEAD;
    }
    uint64_t h = set_hash(s);
    size_t mask = m->rec_table_cap - 1, i = h & mask;
    for (; m->rec_table[i]; i = (i + 1) & mask) {
        const struct setrec *r = &m->recs[m->rec_table[i] - 1];
        if (r->hash == h && r->n == s->n &&
            memcmp(m->pool + r->off, s->id, (size_t)s->n * sizeof *s->id) == 0)
            return m->rec_table[i] - 1;
    }
    if (ut_grow((void **)&m->recs, &m->cap_recs, m->n_recs + 1, sizeof *m->recs, 256) ||
        ut_grow((void **)&m->pool, &m->cap_pool, m->n_pool + (size_t)s->n + 1, sizeof *m->pool,
                4096)) {
        oom(m);
        return DEAD;
    }
    memcpy(m->pool + m->n_pool, s->id, (size_t)s->n * sizeof *s->id);
    m->recs[m->n_recs] = (struct setrec){h, (uint32_t)m->n_pool, s->n, s->first, NULL};
    m->n_pool += (size_t)s->n;
    m->rec_table[i] = (uint32_t)m->n_recs + 1;
    return (uint32_t)m->n_recs++;
}

/* advance() by set id, memoised per byte class in the set's own table. Returns
 * the next set's id, or DEAD (none left, or m->fail). */
static uint32_t advance_id(eng_gram_matcher *m, uint32_t sid, unsigned b)
{
    unsigned c = m->g->byte_class[b];
    uint32_t *next = m->recs[sid].next;
    if (next && next[c] != UNKNOWN)
        return next[c];
    if (!next) {
        if (!(next = malloc((size_t)m->g->n_classes * sizeof *next))) {
            oom(m);
            return DEAD;
        }
        for (int i = 0; i < m->g->n_classes; i++)
            next[i] = UNKNOWN;
        m->recs[sid].next = next;
    }
    const struct setrec *r = &m->recs[sid];
    struct sset in = {m->pool + r->off, r->n, r->n, r->first, false};
    uint32_t out = advance(m, &in, b, &m->tmp2) ? set_intern(m, &m->tmp2) : DEAD;
    if (!m->fail) /* a failed step leaves nothing memoised */
        m->recs[sid].next[c] = out; /* set_intern may have moved recs, not the table */
    return out;
}

/* Walk the trie with the current set. */
static int compute_mask(eng_gram_matcher *m, uint32_t *mask)
{
    const eng_gram_vocab *v = m->v;
    memset(mask, 0, (size_t)m->words * sizeof *mask);
    int count = 0;
    uint32_t *lv = m->level_id;
    lv[0] = set_intern(m, &m->cur);
    if (lv[0] == DEAD)
        return m->fail;
    for (uint32_t i = 0; i < v->n_nodes;) {
        int d = v->depth[i];
        unsigned b = v->byte[i];
        if (!gr_set_has(&m->recs[lv[d - 1]].first, b) ||
            (lv[d] = advance_id(m, lv[d - 1], b)) == DEAD) {
            if (m->fail)
                break;
            i = v->end[i];
            continue;
        }
        for (int32_t t = v->tok[i]; t >= 0; t = v->next_same[t]) {
            set_bit(mask, t);
            count++;
        }
        i++;
        if ((i & 255) == 0 && !spend(m, 256 * W_TRIE))
            break;
    }
    if (m->fail) {
        memset(mask, 0, (size_t)m->words * sizeof *mask);
        return m->fail;
    }
    if (m->cur.complete)
        for (int i = 0; i < m->n_stop_ids; i++)
            if (m->stop_ids[i] >= 0 && m->stop_ids[i] < m->n_ids &&
                !((mask[m->stop_ids[i] >> 5] >> (m->stop_ids[i] & 31)) & 1)) {
                set_bit(mask, m->stop_ids[i]);
                count++;
            }
    return count;
}

int eng_gram_matcher_mask(eng_gram_matcher *m, uint32_t *mask)
{
    if (step_begin(m))
        return -ENOMEM;
    uint64_t h = set_hash(&m->cur);
    struct mask_slot *victim = &m->cache[0];
    m->tick++;
    m->work_last = 0;
    for (int i = 0; i < MASK_CACHE; i++) {
        struct mask_slot *c = &m->cache[i];
        if (c->mask && c->hash == h && c->n_key == m->cur.n &&
            memcmp(c->key, m->cur.id, (size_t)c->n_key * sizeof *c->key) == 0) {
            memcpy(mask, c->mask, (size_t)m->words * sizeof *mask);
            c->used = m->tick;
            m->n_cached++;
            return c->count;
        }
        if (c->used < victim->used)
            victim = c;
    }
    int count = compute_mask(m, mask);
    m->n_computed++;
    m->work_last = m->work;
    if (m->work > m->work_most)
        m->work_most = m->work;
    if (count < 0)
        return count;
    /* Remember it (the least recently used slot goes). */
    uint32_t *key = malloc(((size_t)m->cur.n + 1) * sizeof *key);
    uint32_t *copy = victim->mask ? victim->mask : malloc((size_t)m->words * sizeof *copy);
    if (key && copy) {
        memcpy(key, m->cur.id, (size_t)m->cur.n * sizeof *key);
        memcpy(copy, mask, (size_t)m->words * sizeof *copy);
        free(victim->key);
        *victim = (struct mask_slot){h, key, m->cur.n, copy, count, m->tick};
    } else {
        free(key);
        if (copy != victim->mask)
            free(copy);
    }
    return count;
}

int eng_gram_matcher_apply(eng_gram_matcher *m, float *logits, int32_t n_logits)
{
    uint32_t *mask = malloc((size_t)m->words * sizeof *mask);
    if (!mask)
        return -ENOMEM;
    int count = eng_gram_matcher_mask(m, mask);
    int32_t n = m->n_ids < n_logits ? m->n_ids : n_logits;
    for (int32_t id = n; id < n_logits; id++) /* ids the tokenizer does not spell */
        logits[id] = -INFINITY;
    for (int w = 0; w < m->words; w++) {
        uint32_t bits = mask[w];
        if (bits == 0xFFFFFFFFu)
            continue;
        int32_t base = w * 32;
        for (int k = 0; k < 32 && base + k < n; k++)
            if (!((bits >> k) & 1))
                logits[base + k] = -INFINITY;
    }
    free(mask);
    return count;
}

static int sset_copy(struct sset *dst, const struct sset *src)
{
    if (dst->cap < src->n) {
        uint32_t *p = realloc(dst->id, (size_t)src->n * sizeof *p);
        if (!p)
            return -ENOMEM;
        dst->id = p;
        dst->cap = src->n;
    }
    if (src->n)
        memcpy(dst->id, src->id, (size_t)src->n * sizeof *dst->id);
    dst->n = src->n;
    dst->first = src->first;
    dst->complete = src->complete;
    return 0;
}

int eng_gram_matcher_accept_bytes(eng_gram_matcher *m, const char *s, size_t n)
{
    if (step_begin(m))
        return -ENOMEM;
    /* Work on two scratch sets; cur changes only when every byte was taken. */
    struct sset *a = &m->tmp, *b = &m->tmp2;
    if (sset_copy(a, &m->cur))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!advance(m, a, (unsigned char)s[i], b))
            return m->fail ? m->fail : -EINVAL;
        struct sset *t = a;
        a = b;
        b = t;
    }
    struct sset t = m->cur;
    m->cur = *a;
    *a = t;
    return 0;
}

int eng_gram_matcher_accept(eng_gram_matcher *m, int32_t id)
{
    for (int i = 0; i < m->n_stop_ids; i++)
        if (m->stop_ids[i] == id)
            return m->cur.complete ? 0 : -EINVAL;
    if (id < 0 || id >= m->v->n_vocab)
        return -EINVAL;
    if (m->v->len[id] == 0)
        return -EINVAL;
    return eng_gram_matcher_accept_bytes(m, m->v->bytes + m->v->off[id], m->v->len[id]);
}

bool eng_gram_matcher_complete(const eng_gram_matcher *m) { return m->cur.complete; }

void eng_gram_matcher_stats(const eng_gram_matcher *m, uint64_t *computed, uint64_t *cached)
{
    *computed = m->n_computed;
    *cached = m->n_cached;
}

void eng_gram_matcher_work(const eng_gram_matcher *m, uint64_t *last, uint64_t *most)
{
    *last = m->work_last;
    *most = m->work_most;
}

const char *eng_gram_matcher_why(const eng_gram_matcher *m) { return m->why; }

int eng_gram_check_start(eng_grammar *g, const eng_gram_vocab *v, char *err, size_t errlen)
{
    eng_gram_matcher *m = NULL;
    uint32_t *mask = NULL;
    int rc = matcher_make(g, v, NULL, 0, &m);
    if (rc == -E2BIG)
        snprintf(err, errlen, "%s", m->why);
    if (rc)
        goto out;
    if (!(mask = malloc((size_t)m->words * sizeof *mask))) {
        rc = -ENOMEM;
        goto out;
    }
    rc = eng_gram_matcher_mask(m, mask);
    if (rc == -E2BIG)
        snprintf(err, errlen, "%s", m->why);
    rc = rc < 0 ? rc : 0;
out:
    free(mask);
    eng_gram_matcher_free(m);
    return rc;
}
