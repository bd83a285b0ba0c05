/* The vocabulary as a byte trie for the matcher's walk (gram-impl.h describes
 * the layout): every token's bytes (special tokens have none, except MiniCPM5's
 * tool-call markup, which the detokenizer keeps as text), sorted, with a node per
 * distinct prefix, stored in preorder so a subtree is skipped by one jump. */
#include "engine/grammar/gram-impl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

