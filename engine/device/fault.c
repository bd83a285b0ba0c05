#include "engine/device/fault.h"
#include "engine/err.h"
#include "util/buf.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- parsing ---------------------------------------------------------------- */

/* A piece of the spec string: [p, p + n). */
struct span {
    const char *p;
    size_t n;
};

static bool blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static struct span trim(struct span s)
{
    while (s.n && blank(s.p[0]))
        s.p++, s.n--;
    while (s.n && blank(s.p[s.n - 1]))
        s.n--;
    return s;
}

static bool is(struct span s, const char *word)
{
    return s.n == strlen(word) && strncasecmp(s.p, word, s.n) == 0;
}

/* The bad part, quoted for a one-line message: at most 48 bytes, anything
 * outside printable ASCII shown as '?'. */
static const char *quote(struct span s, char *buf, size_t len)
{
    size_t o = 0, max = len - 4;
    for (size_t i = 0; i < s.n && o < max; i++) {
        unsigned char c = (unsigned char)s.p[i];
        buf[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if (s.n > max)
        buf[o++] = '.', buf[o++] = '.', buf[o++] = '.';
    buf[o] = '\0';
    return buf;
}

#define QLEN 52

static int bad(char *err, size_t errlen, struct span part, const char *why)
{
    char q[QLEN];
    return eng__fail(err, errlen, -EINVAL, "bad fault spec \"%s\": %s; expected %s",
                     quote(part, q, sizeof q), why, ENG_FAULT_GRAMMAR);
}

/* Decimal 0 .. INT_MAX, digits only. */
static bool number(struct span s, int *out)
{
    if (s.n == 0)
        return false;
    long long v = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.p[i] < '0' || s.p[i] > '9')
            return false;
        v = v * 10 + (s.p[i] - '0');
        if (v > INT_MAX)
            return false;
    }
    *out = (int)v;
    return true;
}

static int parse_state(struct span v, enum eng_ert_state *out)
{
    char buf[40];
    if (v.n == 0 || v.n >= sizeof buf)
        return -EINVAL;
    memcpy(buf, v.p, v.n);
    buf[v.n] = '\0';
    return eng_ert_parse(buf, out);
}

/* Bits of the keys seen in one spec. */
enum {
    SEEN_STATE = 1, SEEN_PHASE = 2, SEEN_TOKEN = 4, SEEN_LAYER = 8, SEEN_CHUNK = 16,
    SEEN_TIMES = 32,  /* once, every or times= */
    SEEN_RESET = 64,
};

static int parse_item(struct span item, struct eng_fault *f, unsigned *seen, char *err,
                      size_t errlen)
{
    const char *eq = memchr(item.p, '=', item.n);
    if (!eq) {
        int times;
        if (is(item, "once"))
            times = 1;
        else if (is(item, "every"))
            times = ENG_FAULT_EVERY;
        else
            return bad(err, errlen, item, "unknown item");
        if (*seen & SEEN_TIMES)
            return bad(err, errlen, item, "once/every/times given twice");
        *seen |= SEEN_TIMES;
        f->times = times;
        return 0;
    }
    struct span key = trim((struct span){item.p, (size_t)(eq - item.p)});
    struct span val = trim((struct span){eq + 1, item.n - (size_t)(eq - item.p) - 1});
    unsigned bit;
    if (is(key, "state"))
        bit = SEEN_STATE;
    else if (is(key, "phase"))
        bit = SEEN_PHASE;
    else if (is(key, "token"))
        bit = SEEN_TOKEN;
    else if (is(key, "layer"))
        bit = SEEN_LAYER;
    else if (is(key, "chunk"))
        bit = SEEN_CHUNK;
    else if (is(key, "times"))
        bit = SEEN_TIMES;
    else if (is(key, "reset"))
        bit = SEEN_RESET;
    else
        return bad(err, errlen, item, "unknown key");
    if (*seen & bit)
        return bad(err, errlen, item,
                   bit == SEEN_TIMES ? "once/every/times given twice" : "key given twice");
    *seen |= bit;

    switch (bit) {
    case SEEN_STATE:
        if (parse_state(val, &f->state) != 0)
            return bad(err, errlen, item,
                       "unknown state (NEW, QUEUED, RUNNING, ERROR, ABORT, SUBMITTED, TIMEOUT, "
                       "NORESPONSE, SKERROR, SKCRASHED or 1..11)");
        if (f->state == ENG_ERT_COMPLETED)
            return bad(err, errlen, item, "COMPLETED is not a fault");
        return 0;
    case SEEN_PHASE:
        if (is(val, "prefill"))
            f->phase = ENG_PHASE_PREFILL;
        else if (is(val, "decode"))
            f->phase = ENG_PHASE_DECODE;
        else if (is(val, "any"))
            f->phase = ENG_FAULT_ANY;
        else
            return bad(err, errlen, item, "phase is prefill, decode or any");
        return 0;
    case SEEN_TOKEN:
        if (!number(val, &f->token))
            return bad(err, errlen, item, "token is a number 0..2147483647");
        return 0;
    case SEEN_LAYER:
        if (is(val, "head"))
            f->layer = ENG_FAULT_LAYER_HEAD;
        else if (!number(val, &f->layer))
            return bad(err, errlen, item, "layer is a number 0..2147483647 or head");
        return 0;
    case SEEN_CHUNK:
        if (!number(val, &f->chunk))
            return bad(err, errlen, item, "chunk is a number 0..2147483647");
        return 0;
    case SEEN_RESET:
        if (is(val, "ok"))
            f->reset_fails = 0;
        else if (is(val, "fail"))
            f->reset_fails = 1;
        else if (!number(val, &f->reset_fails))
            return bad(err, errlen, item, "reset is ok, fail or a number 0..2147483647");
        return 0;
    default: /* SEEN_TIMES */
        if (!number(val, &f->times) || f->times < 1)
            return bad(err, errlen, item, "times is a number 1..2147483647");
        return 0;
    }
}

static int parse_spec(struct span spec, struct eng_fault *f, char *err, size_t errlen)
{
    *f = (struct eng_fault){
        .phase = ENG_FAULT_ANY, .token = ENG_FAULT_ANY, .layer = ENG_FAULT_ANY,
        .chunk = ENG_FAULT_ANY, .times = 1,
    };
    unsigned seen = 0;
    const char *p = spec.p, *end = spec.p + spec.n;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        struct span item = trim((struct span){p, (size_t)(stop - p)});
        if (item.n == 0)
            return bad(err, errlen, spec, "empty item");
        int rc = parse_item(item, f, &seen, err, errlen);
        if (rc)
            return rc;
        if (!comma)
            break;
        p = comma + 1;
    }
    if (!(seen & SEEN_STATE))
        return bad(err, errlen, spec, "no state=");
    f->remaining = f->times;
    f->fired = 0;
    return 0;
}

int eng_fault_list_parse(struct eng_fault_list *l, const char *spec, char *err, size_t errlen)
{
    if (!spec)
        spec = "";
    struct eng_fault *got = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    const char *p = spec, *end = spec + strlen(spec);
    for (;;) {
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *stop = semi ? semi : end;
        struct span s = trim((struct span){p, (size_t)(stop - p)});
        if (s.n) {
            if (ut_grow((void **)&got, &cap, n + 1, sizeof *got, 4)) {
                rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
                goto out;
            }
            if ((rc = parse_spec(s, &got[n], err, errlen)) != 0)
                goto out;
            n++;
        }
        if (!semi)
            break;
        p = semi + 1;
    }
    if (n == 0) {
        rc = bad(err, errlen, (struct span){spec, strlen(spec)}, "no fault in it");
        goto out;
    }
    if (ut_grow((void **)&l->items, &l->cap, l->n + n, sizeof *l->items, 4)) {
        rc = eng__fail(err, errlen, -ENOMEM, "out of memory");
        goto out;
    }
    memcpy(l->items + l->n, got, n * sizeof *got);
    l->n += n;
out:
    free(got);
    return rc;
}

int eng_fault_list_check(const struct eng_fault_list *l, int n_layers, char *err, size_t errlen)
{
    for (size_t i = 0; i < l->n; i++) {
        if (l->items[i].layer >= n_layers) {
            char f[160];
            eng_fault_format(&l->items[i], f, sizeof f);
            return eng__fail(err, errlen, -EINVAL,
                             "fault spec \"%s\": layer %d is beyond the model's %d layers (0..%d)",
                             f, l->items[i].layer, n_layers, n_layers - 1);
        }
    }
    return 0;
}

void eng_fault_list_clear(struct eng_fault_list *l)
{
    if (!l)
        return;
    free(l->items);
    *l = (struct eng_fault_list){0};
}

/* ---- matching ------------------------------------------------------------------ */

static bool matches(const struct eng_fault *f, const struct eng_fault_site *s)
{
    if (f->remaining == 0)
        return false;
    if (f->phase != ENG_FAULT_ANY && f->phase != (int)s->phase)
        return false;
    if (f->token != ENG_FAULT_ANY && (f->token < s->token_begin || f->token >= s->token_end))
        return false;
    if (f->chunk != ENG_FAULT_ANY && f->chunk != s->chunk_index)
        return false;
    if (f->layer == ENG_FAULT_LAYER_HEAD)
        return s->has_head;
    if (f->layer != ENG_FAULT_ANY && (f->layer < s->layer_begin || f->layer >= s->layer_end))
        return false;
    return true;
}

enum eng_ert_state eng_fault_match(struct eng_fault_list *l, const struct eng_fault_site *site,
                                   int *which)
{
    if (which)
        *which = -1;
    for (size_t i = 0; l && i < l->n; i++) {
        struct eng_fault *f = &l->items[i];
        if (!matches(f, site))
            continue;
        if (f->remaining > 0)
            f->remaining--;
        if (f->fired < INT_MAX)
            f->fired++;
        if (which)
            *which = (int)i;
        return f->state;
    }
    return ENG_ERT_COMPLETED;
}

int eng_fault_format(const struct eng_fault *f, char *buf, size_t len)
{
    char phase[24] = "", token[24] = "", layer[24] = "", chunk[24] = "", times[24],
         reset[24] = "";
    if (f->phase != ENG_FAULT_ANY)
        snprintf(phase, sizeof phase, "phase=%s,", eng_phase_name(f->phase));
    if (f->token != ENG_FAULT_ANY)
        snprintf(token, sizeof token, "token=%d,", f->token);
    if (f->layer == ENG_FAULT_LAYER_HEAD)
        snprintf(layer, sizeof layer, "layer=head,");
    else if (f->layer != ENG_FAULT_ANY)
        snprintf(layer, sizeof layer, "layer=%d,", f->layer);
    if (f->chunk != ENG_FAULT_ANY)
        snprintf(chunk, sizeof chunk, "chunk=%d,", f->chunk);
    if (f->times == ENG_FAULT_EVERY)
        snprintf(times, sizeof times, "every");
    else if (f->times == 1)
        snprintf(times, sizeof times, "once");
    else
        snprintf(times, sizeof times, "times=%d", f->times);
    if (f->reset_fails == 1)
        snprintf(reset, sizeof reset, ",reset=fail");
    else if (f->reset_fails > 1)
        snprintf(reset, sizeof reset, ",reset=%d", f->reset_fails);
    /* The short state name: the enum name without "ERT_CMD_STATE_". */
    return snprintf(buf, len, "%s%s%s%sstate=%s,%s%s", phase, token, layer, chunk,
                    eng_ert_name(f->state) + strlen("ERT_CMD_STATE_"), times, reset);
}
