/* The streaming detokenizer: ids in, UTF-8 pieces out.
 *
 * Two buffers sit between the ids and the caller:
 *   pending  raw bytes of the current run that end in an incomplete but so far
 *            valid UTF-8 sequence; the next token may complete it;
 *   held     finished text that could still be the start of a stop string.
 * Everything else goes out at once. The run/repair rules are the one-shot
 * decoder's (eng_tokenizer_decode): ordinary tokens' bytes join one run, an added
 * token ends it (an unfinished character before it becomes U+FFFD), a skipped
 * special token is invisible. So, without stop strings, the pieces of a stream
 * concatenate to exactly what eng_tokenizer_decode returns for the same ids. */
#include "engine/text/tok-impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct eng_detok {
    const eng_tokenizer *t;
    bool skip_special;
    int32_t markup[4];          /* ids whose text a skip_special stream keeps; -1 */
    char **stops;
    size_t *stop_len;
    int *stop_at;               /* each kept stop string's index in the caller's list */
    size_t n_stops;
    int matched;                /* the caller's index of the stop string that ended it, or -1 */
    ut_buf pending;
    ut_buf held;
    ut_buf scratch;
    bool stopped;
};

void eng_detok_free(eng_detok *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_stops; i++)
        free(d->stops[i]);
    free(d->stops);
    free(d->stop_len);
    free(d->stop_at);
    free(d->pending.p);
    free(d->held.p);
    free(d->scratch.p);
    free(d);
}

eng_detok *eng_detok_new(const eng_tokenizer *t, bool skip_special, const char *const *stops,
                         size_t n_stops)
{
    return eng_detok_new_len(t, skip_special, stops, NULL, n_stops);
}

eng_detok *eng_detok_new_len(const eng_tokenizer *t, bool skip_special, const char *const *stops,
                             const size_t *lens, size_t n_stops)
{
    eng_detok *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->t = t;
    d->skip_special = skip_special;
    for (size_t i = 0; i < sizeof d->markup / sizeof *d->markup; i++)
        d->markup[i] = -1;
    d->stops = calloc(n_stops + 1, sizeof *d->stops);
    d->stop_len = calloc(n_stops + 1, sizeof *d->stop_len);
    d->stop_at = calloc(n_stops + 1, sizeof *d->stop_at);
    d->matched = -1;
    if (!d->stops || !d->stop_len || !d->stop_at)
        goto err;
    for (size_t i = 0; i < n_stops; i++) {
        size_t len = !stops[i] ? 0 : lens ? lens[i] : strlen(stops[i]);
        if (len == 0)
            continue;  /* an empty stop string would stop before the first byte */
        /* Kept whole, by length: a stop string may hold NUL bytes (matched as bytes,
         * memmem below). */
        d->stops[d->n_stops] = malloc(len);
        if (!d->stops[d->n_stops])
            goto err;
        memcpy(d->stops[d->n_stops], stops[i], len);
        d->stop_len[d->n_stops] = len;
        d->stop_at[d->n_stops] = (int)i;
        d->n_stops++;
    }
    return d;
err:
    eng_detok_free(d);
    return NULL;
}

/* Move `n` bytes from the front of held into a new string at *out. */
static int take(eng_detok *d, size_t n, char **out)
{
    *out = NULL;
    if (n == 0)
        return 0;
    char *s = malloc(n + 1);
    if (!s)
        return -ENOMEM;
    memcpy(s, d->held.p, n);
    s[n] = '\0';
    memmove(d->held.p, d->held.p + n, d->held.n - n);
    d->held.n -= n;
    d->held.p[d->held.n] = '\0';
    *out = s;
    return (int)n;
}

/* Emit what is certain: text up to a completed stop string (then stop), or all
 * but the longest tail that a stop string could still start with. */
static int release(eng_detok *d, bool final, char **out, bool *stopped)
{
    const char *h = d->held.p;
    size_t n = d->held.n, first = n;
    bool hit = false;
    for (size_t i = 0; i < d->n_stops && n; i++) {
        const char *p = memmem(h, n, d->stops[i], d->stop_len[i]);
        if (p && (size_t)(p - h) < first) {
            first = (size_t)(p - h);
            hit = true;
            d->matched = d->stop_at[i];
        }
    }
    if (hit) {
        int rc = take(d, first, out);
        d->held.n = 0;
        d->stopped = true;
        *stopped = true;
        return rc;
    }
    size_t keep = 0;
    for (size_t i = 0; i < d->n_stops && !final; i++) {
        size_t sl = d->stop_len[i];
        for (size_t k = (sl - 1 < n ? sl - 1 : n); k > keep; k--)
            if (memcmp(h + n - k, d->stops[i], k) == 0) {
                keep = k;
                break;
            }
    }
    return take(d, n - keep, out);
}

int eng_detok_stop_index(const eng_detok *d) { return d ? d->matched : -1; }

/* The ids are looked up once here, not per token on the worker's hot path. */
void eng_detok_keep_markup(eng_detok *d)
{
    static const char *const tags[] = {"<function", "</function>", "<param", "</param>"};
    for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
        d->markup[i] = eng_tokenizer_token_id(d->t, tags[i]);
}

static bool is_markup(const eng_detok *d, int32_t id)
{
    for (size_t i = 0; i < sizeof d->markup / sizeof *d->markup; i++)
        if (d->markup[i] == id)
            return true;
    return false;
}

int eng_detok_push(eng_detok *d, int32_t id, char **out, bool *stopped)
{
    *out = NULL;
    *stopped = d->stopped;
    if (d->stopped)
        return 0;
    const char *b;
    bool skip = d->skip_special && !is_markup(d, id);
    size_t k = eng_tokenizer_token_bytes(d->t, id, skip, &b);
    if (k == 0)
        return 0;
    int rc;
    if (eng__tokenizer_is_added(d->t, id)) {
        rc = ut_utf8_repair(&d->held, d->pending.p, d->pending.n, false, NULL);
        d->pending.n = 0;
        if (rc == 0)
            rc = ut_buf_add(&d->held, b, k);
    } else {
        /* Re-run the repair over the unfinished tail plus the new bytes: the
         * decoder's verdict on those tail bytes depends on what follows them. */
        size_t held_back = 0;
        d->scratch.n = 0;
        rc = ut_buf_add(&d->scratch, d->pending.p, d->pending.n);
        if (rc == 0)
            rc = ut_buf_add(&d->scratch, b, k);
        if (rc == 0)
            rc = ut_utf8_repair(&d->held, d->scratch.p, d->scratch.n, true, &held_back);
        d->pending.n = 0;
        if (rc == 0)
            rc = ut_buf_add(&d->pending, d->scratch.p + d->scratch.n - held_back, held_back);
    }
    if (rc)
        return rc;
    return release(d, false, out, stopped);
}

int eng_detok_flush(eng_detok *d, char **out)
{
    bool stopped = false;
    *out = NULL;
    if (d->stopped)
        return 0;
    int rc = ut_utf8_repair(&d->held, d->pending.p, d->pending.n, false, NULL);
    d->pending.n = 0;
    if (rc)
        return rc;
    return release(d, true, out, &stopped);
}
