/* The draft rules of the parser -> the flat grammar of gram-impl.h.
 *
 * In order: every rule used is defined and `root` is one of them; no left
 * recursion (a cycle among rules reachable through nullable prefixes would make
 * the matcher's expansion endless); rules that derive only the empty string are
 * dropped where they are used (a group nested 60 deep around nothing costs
 * nothing); the alternatives of every rule that share a first element are
 * factored into one (`"ab" | "ac"` is `"a" ("b" | "c")`) and duplicates merged, and
 * rules with the same elements made one, so an enum of thousands of words, a class
 * of thousands of listed characters or 600 copies of one group starts as a handful
 * of stacks, not thousands; then the rules are laid out flat
 * and the byte classes computed. Every pass is iterative and near-linear. */
#include "engine/grammar/gram-impl.h"
#include "util/buf.h"
#include "util/defaults.h"

#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void eng_gram_limits_default(struct eng_gram_limits *lim)
{
    *lim = (struct eng_gram_limits){UT_GRAM_MAX_RULES, UT_GRAM_MAX_BYTES, UT_GRAM_MAX_STACKS,
                                    UT_GRAM_STEP_WORK};
}

int gr_fail(struct gr_draft *d, int rc, const char *fmt, ...)
{
    if (d->rc)
        return d->rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->err, d->errlen, fmt, ap);
    va_end(ap);
    return d->rc = rc;
}

static int oom(struct gr_draft *d) { return gr_fail(d, -ENOMEM, "out of memory compiling the grammar"); }

/* The compiled form's size so far (what the flat grammar will take). */
static size_t draft_bytes(const struct gr_draft *d)
{
    return (d->n_el + 1) * sizeof(uint32_t) + d->n_rules * sizeof(uint32_t) +
           d->n_sets * sizeof(struct gr_set) + d->n_reps * sizeof(struct gr_rep);
}

static int over_bytes(struct gr_draft *d)
{
    return gr_fail(d, -E2BIG, "grammar: over the limit of %u bytes compiled (--grammar-max-bytes)",
                   d->lim->max_bytes);
}

int gr_new_rule(struct gr_draft *d, const char *name, size_t len)
{
    if (d->rc)
        return d->rc;
    if (d->n_rules >= d->lim->max_rules)
        return gr_fail(d, -E2BIG, "grammar: over the limit of %u rules (--grammar-max-rules)",
                       d->lim->max_rules);
    if (draft_bytes(d) + sizeof(uint32_t) > d->lim->max_bytes)
        return over_bytes(d);
    if (ut_grow((void **)&d->rules, &d->cap_rules, d->n_rules + 1, sizeof *d->rules, 64))
        return oom(d);
    struct gr_prule *r = &d->rules[d->n_rules];
    *r = (struct gr_prule){0};
    if (name && !(r->name = strndup(name, len)))
        return oom(d);
    return (int)d->n_rules++;
}

int gr_emit(struct gr_draft *d, size_t rule, uint32_t e)
{
    if (d->rc)
        return d->rc;
    if (draft_bytes(d) + sizeof(uint32_t) > d->lim->max_bytes)
        return over_bytes(d);
    struct gr_prule *r = &d->rules[rule];
    size_t cap = r->cap;
    if (ut_grow((void **)&r->el, &cap, (size_t)r->n + 1, sizeof *r->el, 4))
        return oom(d);
    r->cap = (uint32_t)cap;
    r->el[r->n++] = e;
    d->n_el++;
    return 0;
}

void gr_draft_free(struct gr_draft *d)
{
    for (size_t i = 0; i < d->n_rules; i++) {
        free(d->rules[i].name);
        free(d->rules[i].el);
    }
    free(d->rules);
    free(d->sets);
    free(d->reps);
    *d = (struct gr_draft){0};
}

/* The rule an element expands (REF or REP), or -1. */
static long target(const struct gr_draft *d, uint32_t e)
{
    if (GR_TYPE(e) == GR_REF)
        return GR_VAL(e);
    if (GR_TYPE(e) == GR_REP)
        return d->reps[GR_VAL(e)].rule;
    return -1;
}

/* ---- nullable, empty-only, left recursion ----------------------------------------- */

/* nullable[r]: r derives the empty string; only[r]: r derives nothing else. */
static void nullable_rules(const struct gr_draft *d, bool *nullable, bool *only)
{
    size_t n = d->n_rules;
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (nullable[r])
                continue;
            bool ok = true;
            for (uint32_t i = 0; i < d->rules[r].n; i++) {
                uint32_t e = d->rules[r].el[i];
                if (GR_IS_END(e)) {
                    if (ok) {
                        nullable[r] = changed = true;
                        break;
                    }
                    ok = true;
                } else if (GR_TYPE(e) == GR_SET) {
                    ok = false;
                } else if (GR_TYPE(e) == GR_REP) {
                    const struct gr_rep *p = &d->reps[GR_VAL(e)];
                    if (p->min > 0 && !nullable[p->rule])
                        ok = false;
                } else if (!nullable[GR_VAL(e)]) {
                    ok = false;
                }
            }
        }
    }
    /* only[r]: every element of every alternative expands an empty-only rule.
     * Start from "all" and remove (the greatest fixpoint): a rule that only
     * refers to itself derives no string at all and is not empty-only, but it is
     * not nullable either, which the first test keeps out. */
    for (size_t r = 0; r < n; r++)
        only[r] = nullable[r];
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; r++) {
            if (!only[r])
                continue;
            for (uint32_t i = 0; i < d->rules[r].n; i++) {
                uint32_t e = d->rules[r].el[i];
                if (GR_IS_END(e))
                    continue;
                long t = target(d, e);
                if (t < 0 || !only[t]) {
                    only[r] = false;
                    changed = true;
                    break;
                }
            }
        }
    }
}

static int check_left_recursion(struct gr_draft *d, const bool *nullable)
{
    size_t n = d->n_rules;
    unsigned char *color = calloc(n, 1);
    struct frame {
        size_t rule;
        uint32_t i;     /* next element to look at */
        bool alive;     /* the prefix up to i is nullable */
    } *st = malloc(n * sizeof *st);
    int rc = 0;
    if (!color || !st) {
        rc = oom(d);
        goto out;
    }
    for (size_t r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0])
            continue;
        size_t sp = 0;
        st[sp++] = (struct frame){r0, 0, true};
        color[r0] = 1;
        while (sp && !rc) {
            struct frame *f = &st[sp - 1];
            const struct gr_prule *r = &d->rules[f->rule];
            if (f->i >= r->n) {
                color[f->rule] = 2;
                sp--;
                continue;
            }
            uint32_t e = r->el[f->i++];
            if (GR_IS_END(e)) {
                f->alive = true;
                continue;
            }
            if (!f->alive)
                continue;
            long t = target(d, e);
            if (t < 0) {
                f->alive = false;
                continue;
            }
            bool skip = GR_TYPE(e) == GR_REP ? d->reps[GR_VAL(e)].min == 0 || nullable[t]
                                             : nullable[t];
            if (!skip)
                f->alive = false;
            if (color[t] == 1) {
                const char *name = d->rules[t].name;
                rc = gr_fail(d, -EINVAL, "grammar: left recursion through rule '%.64s'",
                             name ? name : "(a group)");
            } else if (color[t] == 0) {
                color[t] = 1;
                st[sp++] = (struct frame){(size_t)t, 0, true};
            }
        }
    }
out:
    free(color);
    free(st);
    return rc;
}

/* Drop every element that expands an empty-only rule. */
static void drop_empty(struct gr_draft *d, const bool *only)
{
    for (size_t r = 0; r < d->n_rules; r++) {
        struct gr_prule *p = &d->rules[r];
        uint32_t k = 0;
        for (uint32_t i = 0; i < p->n; i++) {
            long t = target(d, p->el[i]);
            if (t >= 0 && only[t]) {
                d->n_el--;
                continue;
            }
            p->el[k++] = p->el[i];
        }
        p->n = k;
    }
}

/* ---- factoring ------------------------------------------------------------------------ */

struct alt {
    uint32_t off, len;    /* into the rule's elements, without the ALT/END */
};

static int cmp_alt(const void *a, const void *b, void *ctx)
{
    const uint32_t *el = ctx;
    const struct alt *x = a, *y = b;
    uint32_t n = x->len < y->len ? x->len : y->len;
    for (uint32_t i = 0; i < n; i++)
        if (el[x->off + i] != el[y->off + i])
            return el[x->off + i] < el[y->off + i] ? -1 : 1;
    return (x->len > y->len) - (x->len < y->len);
}

/* Rewrite rule r with its alternatives sorted, distinct and factored by their
 * first element; each factored group's tails become a new rule, which the caller
 * factors in its turn (it is appended after r). */
static int factor_rule(struct gr_draft *d, size_t r, struct alt **alts, size_t *cap_alts)
{
    struct gr_prule *p = &d->rules[r];
    size_t n = 0;
    for (uint32_t i = 0, s = 0; i < p->n; i++) {
        if (!GR_IS_END(p->el[i]))
            continue;
        if (ut_grow((void **)alts, cap_alts, n + 1, sizeof **alts, 16))
            return oom(d);
        (*alts)[n++] = (struct alt){s, i - s};
        s = i + 1;
    }
    if (n < 2)
        return 0;
    struct alt *a = *alts;
    qsort_r(a, n, sizeof *a, cmp_alt, p->el);
    /* Is there anything to do: a duplicate or a shared first element? */
    bool work = false;
    for (size_t i = 1; i < n && !work; i++)
        work = a[i].len && a[i - 1].len && p->el[a[i].off] == p->el[a[i - 1].off];
    for (size_t i = 1; i < n && !work; i++)
        work = a[i].len == 0 && a[i - 1].len == 0;
    if (!work)
        return 0;
    uint32_t *old = p->el;
    uint32_t old_n = p->n;
    p->el = NULL;
    p->n = p->cap = 0;
    d->n_el -= old_n;
    int rc = 0, n_out = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i + 1;
        if (a[i].len == 0) { /* the empty alternative, once */
            while (j < n && a[j].len == 0)
                j++;
        } else {
            while (j < n && a[j].len && old[a[j].off] == old[a[i].off])
                j++;
        }
        if (n_out++)
            rc = gr_emit(d, r, GR_EL(GR_ALT, 0));
        if (rc || a[i].len == 0) {
            i = j;
            continue;
        }
        if (j == i + 1) {
            for (uint32_t k = 0; k < a[i].len && !rc; k++)
                rc = gr_emit(d, r, old[a[i].off + k]);
            i = j;
            continue;
        }
        /* first element, then a new rule of the distinct tails */
        int h = gr_new_rule(d, NULL, 0);
        if (h < 0) {
            rc = h;
            break;
        }
        p = &d->rules[r];
        d->rules[h].defined = true;
        rc = gr_emit(d, r, old[a[i].off]) || gr_emit(d, r, GR_EL(GR_REF, h)) ? d->rc : 0;
        for (size_t k = i; k < j && !rc; k++) {
            if (k > i && cmp_alt(&a[k], &a[k - 1], old) == 0)
                continue;
            if (k > i)
                rc = gr_emit(d, (size_t)h, GR_EL(GR_ALT, 0));
            for (uint32_t e = 1; e < a[k].len && !rc; e++)
                rc = gr_emit(d, (size_t)h, old[a[k].off + e]);
        }
        if (!rc)
            rc = gr_emit(d, (size_t)h, GR_EL(GR_END, 0));
        i = j;
    }
    if (!rc)
        rc = gr_emit(d, r, GR_EL(GR_END, 0));
    free(old);
    return rc;
}

static int factor_all(struct gr_draft *d)
{
    struct alt *alts = NULL;
    size_t cap = 0;
    int rc = 0;
    for (size_t r = 0; r < d->n_rules && !rc; r++) /* new rules land at the end */
        rc = factor_rule(d, r, &alts, &cap);
    free(alts);
    return rc;
}

/* ---- merging rules that are the same ----------------------------------------------- */

static uint64_t hash_rule(const struct gr_prule *r)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ r->n;
    for (uint32_t i = 0; i < r->n; i++)
        h = gr_mix(h ^ r->el[i]);
    return h;
}

/* Rules with the same elements (and repetitions of the same rule with the same
 * counts) become one, the references moving to the first: a pattern's 600
 * identical groups are then one rule, which factoring merges. Returns how many
 * were merged (the others stay, unreferenced), or a negative errno. */
static long merge_same(struct gr_draft *d, int *root)
{
    size_t n = d->n_rules, cap = 64;
    while (cap < 2 * (n + d->n_reps))
        cap *= 2;
    uint32_t *tab = calloc(cap, sizeof *tab), *alias = malloc((n + d->n_reps + 1) * sizeof *alias);
    long merged = 0;
    if (!tab || !alias) {
        free(tab);
        free(alias);
        return oom(d);
    }
    uint32_t *rep_alias = alias + n;
    for (size_t r = 0; r < n; r++) {
        const struct gr_prule *p = &d->rules[r];
        size_t h = hash_rule(p) & (cap - 1);
        alias[r] = (uint32_t)r;
        for (; tab[h]; h = (h + 1) & (cap - 1)) {
            const struct gr_prule *q = &d->rules[tab[h] - 1];
            if (q->n == p->n && (p->n == 0 || memcmp(q->el, p->el, p->n * sizeof *p->el) == 0)) {
                alias[r] = tab[h] - 1;
                merged++;
                break;
            }
        }
        if (alias[r] == r)
            tab[h] = (uint32_t)r + 1;
    }
    memset(tab, 0, cap * sizeof *tab);
    for (size_t i = 0; i < d->n_reps; i++) {
        struct gr_rep *p = &d->reps[i];
        p->rule = alias[p->rule];
        size_t h = gr_mix((uint64_t)p->rule << 32 ^ p->min ^ (uint64_t)p->max << 16) & (cap - 1);
        rep_alias[i] = (uint32_t)i;
        for (; tab[h]; h = (h + 1) & (cap - 1)) {
            const struct gr_rep *q = &d->reps[tab[h] - 1];
            if (q->rule == p->rule && q->min == p->min && q->max == p->max) {
                rep_alias[i] = tab[h] - 1;
                break;
            }
        }
        if (rep_alias[i] == i)
            tab[h] = (uint32_t)i + 1;
    }
    for (size_t r = 0; r < n; r++)
        for (uint32_t i = 0; i < d->rules[r].n; i++) {
            uint32_t *e = &d->rules[r].el[i];
            if (GR_TYPE(*e) == GR_REF)
                *e = GR_EL(GR_REF, alias[GR_VAL(*e)]);
            else if (GR_TYPE(*e) == GR_REP)
                *e = GR_EL(GR_REP, rep_alias[GR_VAL(*e)]);
        }
    *root = (int)alias[*root];
    free(tab);
    free(alias);
    return merged;
}

/* ---- the flat grammar ------------------------------------------------------------------- */

/* The coarsest partition of the bytes in which every set is a union of classes:
 * each set splits the classes it cuts. The work is the sets' sizes, not
 * 256 per set (a schema's grammar has hundreds of one-byte sets). */
static void byte_classes(eng_grammar *g)
{
    uint8_t cls[256] = {0}, newid[256], touched[256];
    uint16_t count[256] = {256}, inside[256];
    int seen[256], n = 1;
    for (int c = 0; c < 256; c++)
        seen[c] = -1;
    for (int s = 0; s < g->n_sets && n < 256; s++) {
        const struct gr_set *set = &g->sets[s];
        int nt = 0;
        for (int w = 0; w < 8; w++)
            for (uint32_t bits = set->bits[w]; bits; bits &= bits - 1) {
                int c = cls[w * 32 + __builtin_ctz(bits)];
                if (seen[c] != s) {
                    seen[c] = s;
                    inside[c] = 0;
                    touched[nt++] = (uint8_t)c;
                }
                inside[c]++;
            }
        for (int i = 0; i < nt; i++) { /* a class the set cuts splits in two */
            int c = touched[i];
            newid[c] = (uint8_t)c;
            if (inside[c] < count[c]) {
                count[c] = (uint16_t)(count[c] - inside[c]);
                count[n] = inside[c];
                newid[c] = (uint8_t)n++;
            }
        }
        for (int w = 0; w < 8; w++)
            for (uint32_t bits = set->bits[w]; bits; bits &= bits - 1) {
                int b = w * 32 + __builtin_ctz(bits);
                cls[b] = newid[cls[b]];
            }
    }
    memcpy(g->byte_class, cls, sizeof cls);
    g->n_classes = n;
}

int gr_build(struct gr_draft *d, eng_grammar **out)
{
    *out = NULL;
    eng_grammar *g = NULL;
    bool *nullable = NULL, *only = NULL;
    int root = -1;
    for (size_t i = 0; i < d->n_rules; i++) {
        if (!d->rules[i].defined)
            return gr_fail(d, -EINVAL, "grammar: rule '%.64s' is used but not defined",
                           d->rules[i].name);
        if (d->rules[i].name && strcmp(d->rules[i].name, "root") == 0)
            root = (int)i;
    }
    if (root < 0)
        return gr_fail(d, -EINVAL, "grammar: no rule named 'root'");
    nullable = calloc(d->n_rules + 1, sizeof *nullable);
    only = calloc(d->n_rules + 1, sizeof *only);
    if (!nullable || !only) {
        oom(d);
        goto out;
    }
    nullable_rules(d, nullable, only);
    if (check_left_recursion(d, nullable))
        goto out;
    /* A repeated rule that can be empty can be so min times: min is 0, and the
     * matcher need not count empty iterations (match.c). */
    for (size_t i = 0; i < d->n_reps; i++)
        if ((d->reps[i].nullable = nullable[d->reps[i].rule]))
            d->reps[i].min = 0;
    drop_empty(d, only);
    /* Factoring makes alternatives alike, merging makes rules alike: a few rounds
     * until neither finds more (each is linear). */
    for (int round = 0; round < 4; round++) {
        if (factor_all(d))
            goto out;
        long merged = merge_same(d, &root);
        if (merged < 0)
            goto out;
        if (merged == 0)
            break;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->el = malloc((d->n_el + 1) * sizeof *g->el)) ||
        !(g->rule_start = malloc(d->n_rules * sizeof *g->rule_start)) ||
        !(g->sets = malloc((d->n_sets + 1) * sizeof *g->sets)) ||
        !(g->reps = malloc((d->n_reps + 1) * sizeof *g->reps))) {
        oom(d);
        goto out;
    }
    size_t k = 0;
    for (size_t i = 0; i < d->n_rules; i++) {
        g->rule_start[i] = (uint32_t)k;
        if (d->rules[i].n)
            memcpy(g->el + k, d->rules[i].el, d->rules[i].n * sizeof *g->el);
        k += d->rules[i].n;
    }
    g->el[k] = GR_EL(GR_END, 0);
    g->n_el = (int)k;
    g->n_rules = (int)d->n_rules;
    if (d->n_sets) /* none in a grammar of empty rules */
        memcpy(g->sets, d->sets, d->n_sets * sizeof *g->sets);
    g->n_sets = (int)d->n_sets;
    if (d->n_reps)
        memcpy(g->reps, d->reps, d->n_reps * sizeof *g->reps);
    g->n_reps = (int)d->n_reps;
    g->root = root;
    g->bytes = draft_bytes(d);
    g->lim = *d->lim;
    byte_classes(g);
    atomic_init(&g->refs, 1);
    *out = g;
    g = NULL;
out:
    free(nullable);
    free(only);
    eng_grammar_free(g);
    return d->rc;
}

eng_grammar *eng_grammar_ref(eng_grammar *g)
{
    if (g)
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
    return g;
}

void eng_grammar_free(eng_grammar *g)
{
    if (!g || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) > 1)
        return;
    bool large = g->bytes > (1u << 20);
    free(g->el);
    free(g->rule_start);
    free(g->sets);
    free(g->reps);
    free(g);
    if (large) /* the heap a large grammar took goes back to the system */
        malloc_trim(0);
}
