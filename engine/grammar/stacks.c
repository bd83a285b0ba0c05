/* The matcher's pushdown stacks: hash-consed nodes, expansion as a work list,
 * advancing a set of stacks by one byte, the work budget of a step, and the
 * compaction that keeps a long answer's nodes bounded (match.c's header says
 * what they are for). */
#include "engine/grammar/match-impl.h"
#include "util/buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void gm_step_fail(eng_gram_matcher *m, int rc, const char *fmt, ...)
{
    if (m->fail)
        return;
    m->fail = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->why, sizeof m->why, fmt, ap);
    va_end(ap);
}

bool gm_spend(eng_gram_matcher *m, uint64_t units)
{
    m->work += units;
    if (m->work > m->g->lim.step_work)
        gm_step_fail(m, -E2BIG,
                  "grammar: one step needs more than %u units of work (--grammar-step-work)",
                  m->g->lim.step_work);
    return !m->fail;
}

void gm_oom(eng_gram_matcher *m) { gm_step_fail(m, -ENOMEM, "grammar: out of memory"); }

/* ---- nodes ----------------------------------------------------------------------------- */

static uint64_t node_hash(uint32_t pos, uint32_t parent, uint32_t count)
{
    return gr_mix(((uint64_t)pos << 32 | parent) ^ gr_mix(count));
}

int gm_table_grow(eng_gram_matcher *m)
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
    if (2 * (m->n_nodes + 1) > m->table_cap && gm_table_grow(m)) {
        gm_oom(m);
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
        gm_step_fail(m, -E2BIG, "grammar: nesting deeper than %d", MAX_DEPTH);
        return 0;
    }
    if (m->n_nodes >= 2 * NODE_CAP) { /* one step alone: bounded by its work too */
        gm_step_fail(m, -E2BIG,
                  "grammar: one step needs more than %u stack nodes (--grammar-step-work)",
                  2 * NODE_CAP);
        return 0;
    }
    size_t cap = m->cap_nodes;
    if (ut_grow((void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof *m->nodes, 1024)) {
        gm_oom(m);
        return 0;
    }
    if (m->cap_nodes != cap) {
        uint32_t *s = realloc(m->stamp, m->cap_nodes * sizeof *s);
        if (!s) {
            gm_oom(m);
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
        gm_oom(m);
        return;
    }
    m->work_list[(*n)++] = id;
}

static void sset_add(eng_gram_matcher *m, struct sset *s, uint32_t id)
{
    if (s->n >= (int)m->g->lim.max_stacks) {
        gm_step_fail(m, -E2BIG, "grammar: more than %u stacks at one point (--grammar-max-stacks)",
                  m->g->lim.max_stacks);
        return;
    }
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 16;
        uint32_t *p = realloc(s->id, (size_t)cap * sizeof *p);
        if (!p) {
            gm_oom(m);
            return;
        }
        s->id = p;
        s->cap = cap;
    }
    s->id[s->n++] = id;
}

/* Push the alternatives of `rule`, each continuing into `cont`. */
void gm_push_alternatives(eng_gram_matcher *m, uint32_t rule, uint32_t cont, size_t *n)
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
void gm_expand(eng_gram_matcher *m, size_t n, struct sset *out)
{
    const eng_grammar *g = m->g;
    while (n && !m->fail) {
        uint32_t s = m->work_list[--n];
        if (m->stamp[s] == m->epoch)
            continue;
        m->stamp[s] = m->epoch;
        if (!gm_spend(m, W_EXPAND))
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
            gm_push_alternatives(m, GR_VAL(e), at(m, nd.pos + 1, nd.parent), &n);
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
                    gm_push_alternatives(m, r->rule, back, &n);
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
void gm_sset_finish(eng_gram_matcher *m, struct sset *s)
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
bool gm_advance(eng_gram_matcher *m, const struct sset *in, unsigned b, struct sset *out)
{
    out->n = 0;
    if (!gr_set_has(&in->first, b))
        return false;
    if (!gm_spend(m, W_ADVANCE * (uint64_t)in->n))
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
    gm_expand(m, n, out);
    if (m->fail) {
        out->n = 0;
        return false;
    }
    gm_sset_finish(m, out);
    return gm_spend(m, W_ADVANCE * (uint64_t)out->n) && out->n > 0;
}

/* ---- compaction: keep the nodes the current set reaches ------------------------------- */

void gm_memo_clear(eng_gram_matcher *m)
{
    for (size_t i = 0; i < m->n_recs; i++)
        free(m->recs[i].next);
    m->n_recs = m->n_pool = 0;
    if (m->rec_table)
        memset(m->rec_table, 0, m->rec_table_cap * sizeof *m->rec_table);
}

void gm_cache_clear(eng_gram_matcher *m)
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
    gm_memo_clear(m);
    gm_cache_clear(m);
    while (2 * m->n_nodes > m->table_cap)
        if (gm_table_grow(m))
            return -ENOMEM;
    return 0;
}

/* Between steps: a new step starts with no work done, within the node cap. */
int gm_step_begin(eng_gram_matcher *m)
{
    m->work = 0;
    m->fail = 0;
    m->why[0] = '\0';
    if (m->n_nodes > NODE_CAP && compact(m))
        return -ENOMEM;
    if (m->n_recs > MEMO_SETS || m->n_pool > MEMO_IDS)
        gm_memo_clear(m);
    return 0;
}

