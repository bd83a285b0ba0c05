/* The matcher: a set of pushdown stacks advanced byte by byte, and the mask of
 * the vocabulary tokens whose bytes keep some stack alive.
 *
 * Stacks (llama.cpp's llama-grammar.cpp keeps vectors of element pointers; this is
 * the same automaton, stored differently). A stack is a chain of nodes {position,
 * parent}, hash-consed: the same chain is always the same node id, so pushing and
 * popping copy nothing, a stack compares by its id, and a set of stacks is a small
 * sorted array of ids — which is also the exact key of its mask in the cache.
 * Node 0 is the empty stack (the grammar is complete). After expansion every
 * non-empty stack has a SET on top: the bytes it can take next.
 *
 * The mask. The vocabulary is a byte trie stored in preorder (each node knows
 * where its subtree ends), walked with one stack set per depth: a node whose byte
 * no stack of its parent takes (a 256-bit union checked first) or that leaves no
 * stack skips its whole subtree. That is XGrammar's observation in its simplest
 * form: most of the vocabulary dies on its first byte or two. Masks are cached per
 * stack set (MASK_CACHE slots, by hash, the key compared in full), so the states
 * a JSON string or number keeps returning to are walked once per request. */
#include "engine/grammar/gram-impl.h"
#include "util/buf.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 2048        /* stack depth: deeper nesting is a dead end */
#define MAX_SET 4096          /* stacks in one set */
#define MAX_EXPAND (1 << 20)  /* expansion steps for one byte */
#define MASK_CACHE 64         /* cached masks per matcher (16 KB each for MiniCPM5) */

/* ---- the vocabulary ---------------------------------------------------------------- */

struct eng_gram_vocab {
    int32_t n_vocab;
    /* the trie, preorder; depth >= 1 */
    uint8_t *byte;
    uint16_t *depth;
    uint32_t *end;            /* one past the node's subtree */
    int32_t *tok;             /* the first token spelled by the path, or -1 */
    int32_t *next_same;       /* (n_vocab) the next token with the same bytes, or -1 */
    uint32_t n_nodes;
    int max_depth;
    /* per token */
    uint32_t *off, *len;      /* into bytes; len 0: never matches */
    char *bytes;
};

static const struct eng_gram_vocab *g_sort_vocab; /* qsort has no context argument */

static int by_bytes(const void *a, const void *b)
{
    const struct eng_gram_vocab *v = g_sort_vocab;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c)
        return c;
    if (lx != ly)
        return lx < ly ? -1 : 1;
    return (x > y) - (x < y);
}

static bool is_markup(const eng_tokenizer *t, int32_t id)
{
    static const char *const markup[] = {"<function", "</function>", "<param", "</param>"};
    for (size_t i = 0; i < sizeof markup / sizeof *markup; i++)
        if (eng_tokenizer_token_id(t, markup[i]) == id)
            return true;
    return false;
}

eng_gram_vocab *eng_gram_vocab_new(const eng_tokenizer *t)
{
    static pthread_mutex_t sort_mu = PTHREAD_MUTEX_INITIALIZER;
    struct eng_gram_vocab *v = calloc(1, sizeof *v);
    int32_t *order = NULL;
    if (!v)
        return NULL;
    int32_t n = v->n_vocab = eng_tokenizer_n_vocab(t);
    v->off = calloc((size_t)n + 1, sizeof *v->off);
    v->len = calloc((size_t)n + 1, sizeof *v->len);
    v->next_same = malloc(((size_t)n + 1) * sizeof *v->next_same);
    order = malloc(((size_t)n + 1) * sizeof *order);
    if (!v->off || !v->len || !v->next_same || !order)
        goto fail;
    size_t total = 0;
    int32_t m = 0;
    for (int32_t id = 0; id < n; id++) {
        const char *b;
        size_t k = eng_tokenizer_token_bytes(t, id, true, &b);
        if (k == 0 && is_markup(t, id))
            k = eng_tokenizer_token_bytes(t, id, false, &b);
        v->next_same[id] = -1;
        if (k == 0 || k > UINT16_MAX)
            continue;
        v->len[id] = (uint32_t)k;
        total += k;
        order[m++] = id;
    }
    if (!(v->bytes = malloc(total + 1)))
        goto fail;
    total = 0;
    for (int32_t i = 0; i < m; i++) {
        const char *b;
        int32_t id = order[i];
        size_t k = eng_tokenizer_token_bytes(t, id, true, &b);
        if (k == 0)
            k = eng_tokenizer_token_bytes(t, id, false, &b);
        memcpy(v->bytes + total, b, k);
        v->off[id] = (uint32_t)total;
        total += k;
    }
    pthread_mutex_lock(&sort_mu);
    g_sort_vocab = v;
    qsort(order, (size_t)m, sizeof *order, by_bytes);
    pthread_mutex_unlock(&sort_mu);

    /* Nodes: at most the total of the bytes. */
    size_t cap = total + 1;
    v->byte = malloc(cap);
    v->depth = malloc(cap * sizeof *v->depth);
    v->end = malloc(cap * sizeof *v->end);
    v->tok = malloc(cap * sizeof *v->tok);
    uint32_t *path = malloc(((size_t)UINT16_MAX + 2) * sizeof *path);
    if (!v->byte || !v->depth || !v->end || !v->tok || !path) {
        free(path);
        goto fail;
    }
    int plen = 0;              /* nodes on the current path */
    const char *prev = NULL;
    uint32_t prev_len = 0;
    int32_t prev_id = -1;
    for (int32_t i = 0; i < m; i++) {
        int32_t id = order[i];
        const char *s = v->bytes + v->off[id];
        uint32_t len = v->len[id];
        uint32_t common = 0;
        while (prev && common < len && common < prev_len && s[common] == prev[common])
            common++;
        if (prev && common == len && len == prev_len) { /* the same bytes again */
            v->next_same[prev_id] = id;
            prev_id = id;
            continue;
        }
        while (plen > (int)common) /* close what is not shared */
            v->end[path[--plen]] = v->n_nodes;
        for (uint32_t d = common; d < len; d++) {
            uint32_t k = v->n_nodes++;
            v->byte[k] = (uint8_t)s[d];
            v->depth[k] = (uint16_t)(d + 1);
            v->tok[k] = -1;
            path[plen++] = k;
        }
        v->tok[path[plen - 1]] = id;
        if ((int)len > v->max_depth)
            v->max_depth = (int)len;
        prev = s;
        prev_len = len;
        prev_id = id;
    }
    while (plen > 0)
        v->end[path[--plen]] = v->n_nodes;
    free(path);
    free(order);
    return v;
fail:
    free(order);
    eng_gram_vocab_free(v);
    return NULL;
}

void eng_gram_vocab_free(eng_gram_vocab *v)
{
    if (!v)
        return;
    free(v->byte);
    free(v->depth);
    free(v->end);
    free(v->tok);
    free(v->next_same);
    free(v->off);
    free(v->len);
    free(v->bytes);
    free(v);
}

int32_t eng_gram_vocab_size(const eng_gram_vocab *v) { return v->n_vocab; }

/* ---- stacks -------------------------------------------------------------------------- */

struct node {
    uint32_t pos, parent, depth;
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
    uint32_t *next;           /* NULL, or (256) the set after each byte: UNKNOWN, DEAD
                                 or an id */
};

#define DEAD 0xFFFFFFFFu
#define UNKNOWN 0xFFFFFFFEu
#define MEMO_MAX 8192         /* successor tables (1 KB each) before they are cleared */

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

    struct sset cur;
    struct sset tmp, tmp2;
    long expand_budget;
    bool overflow;            /* a limit was hit while expanding */

    /* The memo of advance() for the trie walk: interned sets and (set, byte) -> set.
     * The walks of successive steps share most of it. */
    struct setrec *recs;
    size_t n_recs, cap_recs;
    uint32_t *pool;
    size_t n_pool, cap_pool;
    uint32_t *rec_table;      /* rec index + 1; 0 = free */
    size_t rec_table_cap;
    size_t memo_n;            /* successor tables allocated */
    uint32_t *level_id;       /* (max_depth + 1) */

    struct mask_slot cache[MASK_CACHE];
    uint64_t tick, n_computed, n_cached;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static int table_grow(eng_gram_matcher *m)
{
    size_t cap = m->table_cap ? m->table_cap * 2 : 1024;
    uint32_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 1; i < m->n_nodes; i++) {
        size_t h = mix(((uint64_t)m->nodes[i].pos << 32) | m->nodes[i].parent) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = (uint32_t)i;
    }
    free(m->table);
    m->table = t;
    m->table_cap = cap;
    return 0;
}

static void memo_clear(eng_gram_matcher *m);

/* The node {pos, parent}, made once. Returns its id, or 0 with m->overflow set. */
static uint32_t intern(eng_gram_matcher *m, uint32_t pos, uint32_t parent)
{
    if (2 * (m->n_nodes + 1) > m->table_cap && table_grow(m)) {
        m->overflow = true;
        return 0;
    }
    size_t mask = m->table_cap - 1;
    size_t h = mix(((uint64_t)pos << 32) | parent) & mask;
    for (; m->table[h]; h = (h + 1) & mask) {
        const struct node *n = &m->nodes[m->table[h]];
        if (n->pos == pos && n->parent == parent)
            return m->table[h];
    }
    uint32_t depth = m->nodes[parent].depth + 1;
    if (depth > MAX_DEPTH || m->n_nodes >= UINT32_MAX / 2 ||
        ut_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes, 1024)) {
        m->overflow = true;
        return 0;
    }
    uint32_t id = (uint32_t)m->n_nodes++;
    m->nodes[id] = (struct node){pos, parent, depth};
    m->table[h] = id;
    return id;
}

static void sset_add(eng_gram_matcher *m, struct sset *s, uint32_t id)
{
    for (int i = 0; i < s->n; i++)
        if (s->id[i] == id)
            return;
    if (s->n >= MAX_SET) {
        m->overflow = true;
        return;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        uint32_t *p = realloc(s->id, (size_t)cap * sizeof *p);
        if (!p) {
            m->overflow = true;
            return;
        }
        s->id = p;
        s->cap = cap;
    }
    s->id[s->n++] = id;
}

/* Expand the stack `s` until every stack has a SET on top (or is empty), adding
 * the results to `out`. */
static void expand(eng_gram_matcher *m, uint32_t s, struct sset *out)
{
    if (--m->expand_budget < 0) {
        m->overflow = true;
        return;
    }
    if (s == 0) {
        sset_add(m, out, 0);
        return;
    }
    const uint32_t *el = m->g->el;
    uint32_t pos = m->nodes[s].pos, e = el[pos];
    if (GR_TYPE(e) == GR_SET) {
        sset_add(m, out, s);
        return;
    }
    /* A REF: replace it by its continuation, then push each alternative. */
    uint32_t below = m->nodes[s].parent;
    uint32_t cont = GR_IS_END(el[pos + 1]) ? below : intern(m, pos + 1, below);
    if (m->overflow)
        return;
    uint32_t a = m->g->rule_start[GR_VAL(e)];
    for (;;) {
        if (GR_IS_END(el[a])) {
            expand(m, cont, out);
        } else {
            uint32_t t = intern(m, a, cont);
            if (m->overflow)
                return;
            expand(m, t, out);
        }
        while (!GR_IS_END(el[a]))
            a++;
        if (GR_TYPE(el[a]) == GR_END)
            break;
        a++;
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

/* out = the stacks of `in` after byte `b`. Returns false when none is left (or a
 * limit was hit). */
static bool advance(eng_gram_matcher *m, const struct sset *in, unsigned b, struct sset *out)
{
    out->n = 0;
    if (!gr_set_has(&in->first, b))
        return false;
    m->expand_budget = MAX_EXPAND;
    m->overflow = false;
    const uint32_t *el = m->g->el;
    for (int i = 0; i < in->n; i++) {
        uint32_t s = in->id[i];
        if (s == 0)
            continue;
        uint32_t pos = m->nodes[s].pos;
        if (!gr_set_has(&m->g->sets[GR_VAL(el[pos])], b))
            continue;
        uint32_t below = m->nodes[s].parent;
        uint32_t t = GR_IS_END(el[pos + 1]) ? below : intern(m, pos + 1, below);
        if (m->overflow)
            break;
        expand(m, t, out);
    }
    if (m->overflow)
        out->n = 0;
    sset_finish(m, out);
    return out->n > 0;
}

/* ---- the matcher -------------------------------------------------------------------- */

int eng_gram_matcher_new(eng_grammar *g, const eng_gram_vocab *v, const int32_t *stop_ids,
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
    if (!m->stop_ids || !m->level_id ||
        ut_grow((void **)&m->nodes, &m->cap_nodes, 1, sizeof *m->nodes, 1024) ||
        table_grow(m)) {
        eng_gram_matcher_free(m);
        return -ENOMEM;
    }
    if (n_stop_ids > 0)
        memcpy(m->stop_ids, stop_ids, (size_t)n_stop_ids * sizeof *stop_ids);
    m->nodes[0] = (struct node){0, 0, 0};
    m->n_nodes = 1;
    /* The start: the root rule as a REF to expand. A one-element rule would need a
     * position holding REF root; root's alternatives are pushed directly instead. */
    m->expand_budget = MAX_EXPAND;
    const uint32_t *el = g->el;
    uint32_t a = g->rule_start[g->root];
    for (;;) {
        if (GR_IS_END(el[a])) {
            expand(m, 0, &m->cur);
        } else {
            uint32_t t = intern(m, a, 0);
            if (m->overflow)
                break;
            expand(m, t, &m->cur);
        }
        while (!GR_IS_END(el[a]))
            a++;
        if (GR_TYPE(el[a]) == GR_END)
            break;
        a++;
    }
    if (m->overflow) {
        eng_gram_matcher_free(m);
        return -EINVAL;
    }
    sset_finish(m, &m->cur);
    *out = m;
    return 0;
}

void eng_gram_matcher_free(eng_gram_matcher *m)
{
    if (!m)
        return;
    free(m->cur.id);
    free(m->tmp.id);
    free(m->tmp2.id);
    for (int i = 0; i < MASK_CACHE; i++) {
        free(m->cache[i].key);
        free(m->cache[i].mask);
    }
    memo_clear(m);
    free(m->recs);
    free(m->pool);
    free(m->rec_table);
    free(m->level_id);
    free(m->nodes);
    free(m->table);
    free(m->stop_ids);
    eng_grammar_free(m->g);
    free(m);
}

static void set_bit(uint32_t *mask, int32_t id) { mask[id >> 5] |= 1u << (id & 31); }

static uint64_t set_hash(const struct sset *s)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)s->n;
    for (int i = 0; i < s->n; i++)
        h = mix(h ^ s->id[i]);
    return h;
}

static void memo_clear(eng_gram_matcher *m)
{
    for (size_t i = 0; i < m->n_recs; i++)
        free(m->recs[i].next);
    m->n_recs = m->n_pool = m->memo_n = 0;
    if (m->rec_table)
        memset(m->rec_table, 0, m->rec_table_cap * sizeof *m->rec_table);
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
    if (2 * (m->n_recs + 1) > m->rec_table_cap && rec_table_grow(m))
        return DEAD;
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
                4096))
        return DEAD;
    memcpy(m->pool + m->n_pool, s->id, (size_t)s->n * sizeof *s->id);
    m->recs[m->n_recs] = (struct setrec){h, (uint32_t)m->n_pool, s->n, s->first, NULL};
    m->n_pool += (size_t)s->n;
    m->rec_table[i] = (uint32_t)m->n_recs + 1;
    return (uint32_t)m->n_recs++;
}

/* advance() by set id, memoised in the set's own table of 256 successors.
 * Returns the next set's id, or DEAD. */
static uint32_t advance_id(eng_gram_matcher *m, uint32_t sid, unsigned b)
{
    uint32_t *next = m->recs[sid].next;
    if (next && next[b] != UNKNOWN)
        return next[b];
    if (!next) {
        if (!(next = malloc(256 * sizeof *next)))
            return DEAD;
        for (int i = 0; i < 256; i++)
            next[i] = UNKNOWN;
        m->recs[sid].next = next;
        m->memo_n++;
    }
    const struct setrec *r = &m->recs[sid];
    struct sset in = {m->pool + r->off, r->n, r->n, r->first, false};
    uint32_t out = advance(m, &in, b, &m->tmp2) ? set_intern(m, &m->tmp2) : DEAD;
    m->recs[sid].next[b] = out; /* set_intern may have moved recs, not the table */
    return out;
}

/* Walk the trie with the current set. */
static int compute_mask(eng_gram_matcher *m, uint32_t *mask)
{
    const eng_gram_vocab *v = m->v;
    memset(mask, 0, (size_t)m->words * sizeof *mask);
    int count = 0;
    if (m->memo_n > MEMO_MAX || m->n_pool > 512 * MEMO_MAX)
        memo_clear(m);
    uint32_t *lv = m->level_id;
    lv[0] = set_intern(m, &m->cur);
    if (lv[0] == DEAD)
        return -ENOMEM;
    for (uint32_t i = 0; i < v->n_nodes;) {
        int d = v->depth[i];
        unsigned b = v->byte[i];
        if (!gr_set_has(&m->recs[lv[d - 1]].first, b) ||
            (lv[d] = advance_id(m, lv[d - 1], b)) == DEAD) {
            i = v->end[i];
            continue;
        }
        for (int32_t t = v->tok[i]; t >= 0; t = v->next_same[t]) {
            set_bit(mask, t);
            count++;
        }
        i++;
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
    uint64_t h = set_hash(&m->cur);
    struct mask_slot *victim = &m->cache[0];
    m->tick++;
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
    memcpy(dst->id, src->id, (size_t)src->n * sizeof *dst->id);
    dst->n = src->n;
    dst->first = src->first;
    dst->complete = src->complete;
    return 0;
}

int eng_gram_matcher_accept_bytes(eng_gram_matcher *m, const char *s, size_t n)
{
    /* Work on two scratch sets; cur changes only when every byte was taken. */
    struct sset *a = &m->tmp, *b = &m->tmp2;
    if (sset_copy(a, &m->cur))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!advance(m, a, (unsigned char)s[i], b))
            return -EINVAL;
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
