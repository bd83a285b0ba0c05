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
#include "engine/grammar/match-impl.h"
#include "util/buf.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        m->cap_nodes != 1024 || gm_table_grow(m)) {
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
    gm_push_alternatives(m, (uint32_t)g->root, 0, &n);
    gm_expand(m, n, &m->cur);
    if (m->fail == -ENOMEM) {
        eng_gram_matcher_free(m);
        return -ENOMEM;
    }
    gm_sset_finish(m, &m->cur);
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
    gm_cache_clear(m);
    gm_memo_clear(m);
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
        gm_oom(m);
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
        gm_oom(m);
        return DEAD;
    }
    memcpy(m->pool + m->n_pool, s->id, (size_t)s->n * sizeof *s->id);
    m->recs[m->n_recs] = (struct setrec){h, (uint32_t)m->n_pool, s->n, s->first, NULL};
    m->n_pool += (size_t)s->n;
    m->rec_table[i] = (uint32_t)m->n_recs + 1;
    return (uint32_t)m->n_recs++;
}

/* gm_advance() by set id, memoised per byte class in the set's own table. Returns
 * the next set's id, or DEAD (none left, or m->fail). */
static uint32_t advance_id(eng_gram_matcher *m, uint32_t sid, unsigned b)
{
    unsigned c = m->g->byte_class[b];
    uint32_t *next = m->recs[sid].next;
    if (next && next[c] != UNKNOWN)
        return next[c];
    if (!next) {
        if (!(next = malloc((size_t)m->g->n_classes * sizeof *next))) {
            gm_oom(m);
            return DEAD;
        }
        for (int i = 0; i < m->g->n_classes; i++)
            next[i] = UNKNOWN;
        m->recs[sid].next = next;
    }
    const struct setrec *r = &m->recs[sid];
    struct sset in = {m->pool + r->off, r->n, r->n, r->first, false};
    uint32_t out = gm_advance(m, &in, b, &m->tmp2) ? set_intern(m, &m->tmp2) : DEAD;
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
        if ((i & 255) == 0 && !gm_spend(m, 256 * W_TRIE))
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
    if (gm_step_begin(m))
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
    if (gm_step_begin(m))
        return -ENOMEM;
    /* Work on two scratch sets; cur changes only when every byte was taken. */
    struct sset *a = &m->tmp, *b = &m->tmp2;
    if (sset_copy(a, &m->cur))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        if (!gm_advance(m, a, (unsigned char)s[i], b))
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
