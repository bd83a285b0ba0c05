/* Byte-pair encoding over raw bytes: the vocabulary and merge tables and the
 * merge loop, with a lock-striped cache of finished words.
 *
 * Byte-level BPE tokens are strings over the GPT-2 byte alphabet, one character
 * per byte, so working on the raw bytes is the same computation without the
 * UTF-8 detour: the loader turns every vocab string back into its bytes once.
 *
 * Merge order: repeatedly merge the adjacent pair with the lowest rank, the
 * leftmost one among equals; that is what the Rust crate and tokenizers.js do
 * (the latter breaks ties by the left symbol's first byte position). */
#include "engine/text/tok-impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SHARDS 64
#define CACHE_SLOTS 2048          /* per shard, a power of two */
#define CACHE_MAX_WORD 255        /* longer words are rare and not worth keeping */

struct merge_slot {
    uint64_t key;                 /* left << 32 | right; UINT64_MAX when empty */
    int32_t rank, merged;
};

struct cache_slot {
    uint64_t h;
    char *key;                    /* NULL when empty; key bytes then the ids */
    uint32_t klen, nids;
};

struct cache_shard {
    pthread_mutex_t mu;
    struct cache_slot *slot;      /* allocated on first insert */
    size_t used;
};

struct tok_bpe {
    int32_t n_ids;
    const char *const *tok;
    const uint32_t *tok_len;
    int32_t *vocab;               /* open addressing over ids, -1 empty */
    size_t vocab_mask;
    struct merge_slot *merges;
    size_t merge_mask, n_merges;
    int32_t byte_id[256];
    bool ignore_merges;
    int32_t unk_id;
    struct cache_shard cache[CACHE_SHARDS];
};

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    while (n--)
        h = (h ^ (unsigned char)*s++) * 0x100000001b3ull;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ull;
    return h ^ (h >> 32);
}

static uint64_t hash_pair(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

int32_t eng__bpe_lookup(const struct tok_bpe *b, const char *s, size_t n)
{
    size_t i = hash_bytes(s, n) & b->vocab_mask;
    for (;; i = (i + 1) & b->vocab_mask) {
        int32_t id = b->vocab[i];
        if (id < 0)
            return -1;
        if (b->tok_len[id] == n && memcmp(b->tok[id], s, n) == 0)
            return id;
    }
}

struct tok_bpe *eng__bpe_new(int32_t n_ids, const char *const *tok, const uint32_t *tok_len,
                             bool ignore_merges, int32_t unk_id)
{
    struct tok_bpe *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->n_ids = n_ids;
    b->tok = tok;
    b->tok_len = tok_len;
    b->ignore_merges = ignore_merges;
    b->unk_id = unk_id;
    for (int i = 0; i < CACHE_SHARDS; i++)
        pthread_mutex_init(&b->cache[i].mu, NULL);
    size_t cap = pow2_at_least((size_t)n_ids * 2 + 1);
    b->vocab = malloc(cap * sizeof *b->vocab);
    b->merge_mask = 1023;
    b->merges = malloc((b->merge_mask + 1) * sizeof *b->merges);
    if (!b->vocab || !b->merges) {
        eng__bpe_free(b);
        return NULL;
    }
    memset(b->merges, 0xFF, (b->merge_mask + 1) * sizeof *b->merges);
    memset(b->vocab, 0xFF, cap * sizeof *b->vocab);
    b->vocab_mask = cap - 1;
    for (int32_t id = 0; id < n_ids; id++) {
        if (!tok[id])
            continue;
        /* The first id wins for a duplicate string, as a JSON object would. */
        if (eng__bpe_lookup(b, tok[id], tok_len[id]) >= 0)
            continue;
        size_t i = hash_bytes(tok[id], tok_len[id]) & b->vocab_mask;
        while (b->vocab[i] >= 0)
            i = (i + 1) & b->vocab_mask;
        b->vocab[i] = id;
    }
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        b->byte_id[c] = eng__bpe_lookup(b, &ch, 1);
    }
    return b;
}

static int merge_find(const struct tok_bpe *b, int32_t l, int32_t r, int32_t *rank,
                      int32_t *merged)
{
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (size_t i = hash_pair(key) & b->merge_mask;; i = (i + 1) & b->merge_mask) {
        if (b->merges[i].key == key) {
            *rank = b->merges[i].rank;
            *merged = b->merges[i].merged;
            return 1;
        }
        if (b->merges[i].key == UINT64_MAX)
            return 0;
    }
}

int eng__bpe_add_merge(struct tok_bpe *b, int32_t left, int32_t right, int32_t merged)
{
    if ((b->n_merges + 1) * 2 > b->merge_mask + 1) {
        size_t cap = (b->merge_mask + 1) * 2;
        struct merge_slot *m = malloc(cap * sizeof *m);
        if (!m)
            return -ENOMEM;
        memset(m, 0xFF, cap * sizeof *m);
        for (size_t i = 0; i <= b->merge_mask; i++) {
            if (b->merges[i].key == UINT64_MAX)
                continue;
            size_t j = hash_pair(b->merges[i].key) & (cap - 1);
            while (m[j].key != UINT64_MAX)
                j = (j + 1) & (cap - 1);
            m[j] = b->merges[i];
        }
        free(b->merges);
        b->merges = m;
        b->merge_mask = cap - 1;
    }
    int32_t r0, m0;
    int32_t rank = (int32_t)b->n_merges++;
    if (left < 0 || right < 0 || merged < 0)
        return 0;  /* holds its rank only */
    if (merge_find(b, left, right, &r0, &m0))
        return 0;  /* a repeated pair keeps its first (lowest) rank */
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    size_t i = hash_pair(key) & b->merge_mask;
    while (b->merges[i].key != UINT64_MAX)
        i = (i + 1) & b->merge_mask;
    b->merges[i] = (struct merge_slot){key, rank, merged};
    return 0;
}

void eng__bpe_free(struct tok_bpe *b)
{
    if (!b)
        return;
    for (int i = 0; i < CACHE_SHARDS; i++) {
        struct cache_shard *sh = &b->cache[i];
        if (sh->slot)
            for (size_t k = 0; k < CACHE_SLOTS; k++)
                free(sh->slot[k].key);
        free(sh->slot);
        pthread_mutex_destroy(&sh->mu);
    }
    free(b->vocab);
    free(b->merges);
    free(b);
}

/* ---- the cache ------------------------------------------------------------ */

static bool cache_get(struct tok_bpe *b, uint64_t h, const char *s, size_t n, struct tok_ids *out,
                      int *rc)
{
    struct cache_shard *sh = &b->cache[h % CACHE_SHARDS];
    bool hit = false;
    pthread_mutex_lock(&sh->mu);
    if (sh->slot) {
        for (size_t i = (h >> 8) & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
            struct cache_slot *e = &sh->slot[i];
            if (!e->key)
                break;
            if (e->h == h && e->klen == n && memcmp(e->key, s, n) == 0) {
                const int32_t *ids = (const int32_t *)(void *)(e->key + ((n + 3) & ~(size_t)3));
                for (uint32_t k = 0; k < e->nids && *rc == 0; k++)
                    *rc = eng__ids_push(out, ids[k]);
                hit = true;
                break;
            }
        }
    }
    pthread_mutex_unlock(&sh->mu);
    return hit;
}

static void cache_put(struct tok_bpe *b, uint64_t h, const char *s, size_t n, const int32_t *ids,
                      size_t nids)
{
    size_t koff = (n + 3) & ~(size_t)3;
    char *mem = malloc(koff + nids * sizeof *ids);
    if (!mem)
        return;  /* the cache is only a cache */
    memcpy(mem, s, n);
    if (nids)
        memcpy(mem + koff, ids, nids * sizeof *ids);
    struct cache_shard *sh = &b->cache[h % CACHE_SHARDS];
    pthread_mutex_lock(&sh->mu);
    if (!sh->slot)
        sh->slot = calloc(CACHE_SLOTS, sizeof *sh->slot);
    if (sh->slot && sh->used >= CACHE_SLOTS / 4 * 3) {
        /* Full: start over rather than track recency; hot words come back at once. */
        for (size_t k = 0; k < CACHE_SLOTS; k++) {
            free(sh->slot[k].key);
            sh->slot[k].key = NULL;
        }
        sh->used = 0;
    }
    if (!sh->slot) {
        free(mem);
        mem = NULL;
    }
    for (size_t i = (h >> 8) & (CACHE_SLOTS - 1); mem; i = (i + 1) & (CACHE_SLOTS - 1)) {
        struct cache_slot *e = &sh->slot[i];
        if (!e->key) {
            *e = (struct cache_slot){h, mem, (uint32_t)n, (uint32_t)nids};
            sh->used++;
            break;
        }
        if (e->h == h && e->klen == n && memcmp(e->key, s, n) == 0) {
            free(mem);  /* another thread got there first */
            break;
        }
    }
    pthread_mutex_unlock(&sh->mu);
}

/* ---- the merge loop ------------------------------------------------------- */

struct heap_item {
    int32_t rank;
    int32_t pos;                  /* left symbol (its first byte's index) */
    int32_t left, right;          /* ids when pushed: stale entries no longer match */
};

static bool heap_less(const struct heap_item *a, const struct heap_item *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(struct heap_item *h, size_t *n, struct heap_item it)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&it, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = it;
}

static struct heap_item heap_pop(struct heap_item *h, size_t *n)
{
    struct heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c]))
            c++;
        if (!heap_less(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void try_pair(const struct tok_bpe *b, const int32_t *id, int32_t i, int32_t j,
                     struct heap_item *h, size_t *nh)
{
    int32_t rank, merged;
    if (j < 0 || id[i] < 0 || id[j] < 0 || !merge_find(b, id[i], id[j], &rank, &merged))
        return;
    heap_push(h, nh, (struct heap_item){rank, i, id[i], id[j]});
}

/* Merge the n bytes of s; the surviving symbols' ids go to `res` (-1 for a byte
 * that has no token of its own). */
static int bpe_word(const struct tok_bpe *b, const char *s, size_t n, struct tok_ids *res)
{
    enum { SMALL = 64 };
    int32_t id_s[SMALL], next_s[SMALL], prev_s[SMALL];
    struct heap_item heap_s[SMALL * 2];
    int32_t *id = id_s, *next = next_s, *prev = prev_s;
    struct heap_item *heap = heap_s;
    int rc = 0;
    /* Each merge pushes at most two pairs, so 2n bounds the heap. */
    if (n > SMALL) {
        id = malloc(n * sizeof *id);
        next = malloc(n * sizeof *next);
        prev = malloc(n * sizeof *prev);
        heap = malloc(2 * n * sizeof *heap);
        if (!id || !next || !prev || !heap) {
            rc = -ENOMEM;
            goto out;
        }
    }
    size_t nh = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = b->byte_id[(unsigned char)s[i]];
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
        prev[i] = (int32_t)i - 1;
    }
    for (size_t i = 0; i + 1 < n; i++)
        try_pair(b, id, (int32_t)i, (int32_t)i + 1, heap, &nh);
    while (nh) {
        struct heap_item it = heap_pop(heap, &nh);
        int32_t i = it.pos, j = next[i];
        if (id[i] != it.left || j < 0 || id[j] != it.right)
            continue;  /* one side has merged since */
        int32_t rank, merged;
        merge_find(b, id[i], id[j], &rank, &merged);
        id[i] = merged;
        next[i] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = i;
        id[j] = -2;  /* dead: never equals a pushed id */
        if (prev[i] >= 0)
            try_pair(b, id, prev[i], i, heap, &nh);
        try_pair(b, id, i, next[i], heap, &nh);
    }
    for (int32_t i = 0; i >= 0 && rc == 0; i = next[i])
        rc = eng__ids_push(res, id[i]);
out:
    if (id != id_s) {
        free(id);
        free(next);
        free(prev);
        free(heap);
    }
    return rc;
}

int eng__bpe_encode(const struct tok_bpe *cb, const char *s, size_t n, struct tok_ids *out)
{
    struct tok_bpe *b = (struct tok_bpe *)cb;  /* only the cache is written */
    if (n == 0)
        return 0;
    if (b->ignore_merges) {
        /* ignore_merges: a pre-token that is a token as a whole is emitted as is. */
        int32_t id = eng__bpe_lookup(b, s, n);
        if (id >= 0)
            return eng__ids_push(out, id);
    }
    uint64_t h = 0;
    int rc = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(s, n);
        if (cache_get(b, h, s, n, out, &rc))
            return rc;
    }
    size_t start = out->n;
    struct tok_ids word = {0};
    rc = bpe_word(b, s, n, &word);
    for (size_t i = 0; rc == 0 && i < word.n; i++) {
        /* A symbol with no token: the unk token when the model has one, otherwise
         * dropped, as both references do without byte_fallback. */
        int32_t id = word.v[i] >= 0 ? word.v[i] : b->unk_id;
        if (id >= 0)
            rc = eng__ids_push(out, id);
    }
    free(word.v);
    if (rc == 0 && n <= CACHE_MAX_WORD)
        cache_put(b, h, s, n, out->v + start, out->n - start);
    return rc;
}
