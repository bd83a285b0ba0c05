/* libFuzzer target: the output parser on arbitrary bytes. Input layout: byte 0
 * holds flags (bit 0 in_think, bit 1 with tools), bytes 1-2 choose a cut position;
 * the rest is the model's output. The output is parsed in one piece, in two pieces
 * cut at that position, and one byte at a time; the three results must agree (the
 * concatenated content and reasoning, and the tool calls), and every delta must be
 * non-empty valid UTF-8 and every arguments string a JSON object (a cut call's, the
 * last delta, one left open: not JSON, starting with '{'). Any difference
 * aborts, so libFuzzer saves the input. */
#include "tests/utf8.h"
#include "engine/outparse.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"s\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},\"n\":{\"type\":\"number\"},"
    "\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"a\":{\"type\":\"array\"},"
    "\"z\":{\"type\":[\"null\",\"integer\"]},\"u\":{\"anyOf\":[{\"type\":\"boolean\"}]},\"x\":{}}}}},"
    "{\"name\":\"g\",\"parameters\":{\"properties\":{\"k\":{\"type\":\"integer\"}}}}]";

struct acc {
    char *buf[3];  /* content, reasoning, calls */
    size_t len[3];
};

static void acc_put(struct acc *a, int which, const char *s, size_t n)
{
    char *b = realloc(a->buf[which], a->len[which] + n + 1);
    if (!b)
        abort();
    memcpy(b + a->len[which], s, n);
    a->len[which] += n;
    b[a->len[which]] = '\0';
    a->buf[which] = b;
}

static void check(const char *what, bool ok)
{
    if (!ok) {
        fprintf(stderr, "fuzz-outparse: %s\n", what);
        abort();
    }
}

static void drain(struct acc *a, struct eng_delta_list *l, int *ncalls)
{
    for (size_t i = 0; i < l->n; i++) {
        const struct eng_delta *d = &l->items[i];
        if (d->kind == ENG_DELTA_TOOL_CALL) {
            check("tool call index", d->index == *ncalls);
            check("invalid UTF-8 in a tool call", mcd_utf8_valid(d->name) && mcd_utf8_valid(d->arguments));
            json_t *j = json_loads(d->arguments, 0, NULL);
            check("arguments are not a JSON object", d->cut ? !j && d->arguments[0] == '{'
                                                            : json_is_object(j));
            json_decref(j);
            *ncalls += !d->cut;
            acc_put(a, 2, d->name, strlen(d->name));
            acc_put(a, 2, "\x01", 1);
            acc_put(a, 2, d->arguments, strlen(d->arguments));
            acc_put(a, 2, "\x02", 1);
        } else {
            check("empty or missing text", d->text && d->text[0]);
            check("invalid UTF-8 in a delta", mcd_utf8_valid(d->text));
            acc_put(a, d->kind == ENG_DELTA_CONTENT ? 0 : 1, d->text, strlen(d->text));
        }
    }
    eng_delta_list_clear(l);
}

/* step 0: one piece; step SIZE_MAX: cut at `cut`; else pieces of `step` bytes. */
static struct acc parse(const json_t *tools, bool in_think, const char *s, size_t n, size_t cut,
                        size_t step)
{
    struct acc a = {0};
    struct eng_delta_list l = {0};
    int ncalls = 0;
    eng_outparse *p = eng_outparse_new(tools, in_think);
    check("new", p != NULL);
    if (step == 0) {
        check("feed", eng_outparse_feed(p, s, n, &l) == 0);
        drain(&a, &l, &ncalls);
    } else if (step == SIZE_MAX) {
        check("feed", eng_outparse_feed(p, s, cut, &l) == 0);
        drain(&a, &l, &ncalls);
        check("feed", eng_outparse_feed(p, s + cut, n - cut, &l) == 0);
        drain(&a, &l, &ncalls);
    } else {
        for (size_t i = 0; i < n; i += step) {
            check("feed", eng_outparse_feed(p, s + i, n - i < step ? n - i : step, &l) == 0);
            drain(&a, &l, &ncalls);
        }
    }
    check("finish", eng_outparse_finish(p, &l) == 0);
    drain(&a, &l, &ncalls);
    check("saw_tool_call", eng_outparse_saw_tool_call(p) == (ncalls > 0));
    eng_outparse_free(p);
    return a;
}

static void same(const struct acc *x, const struct acc *y, const char *how)
{
    static const char *names[] = {"content", "reasoning", "tool calls"};
    for (int k = 0; k < 3; k++) {
        if (x->len[k] != y->len[k] || (x->len[k] && memcmp(x->buf[k], y->buf[k], x->len[k]) != 0)) {
            fprintf(stderr, "fuzz-outparse: %s differ (%s)\n", names[k], how);
            abort();
        }
    }
}

static void acc_free(struct acc *a)
{
    for (int k = 0; k < 3; k++)
        free(a->buf[k]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *tools;
    if (!tools && !(tools = json_loads(TOOLS, 0, NULL)))
        abort();
    if (size < 3)
        return 0;
    bool in_think = data[0] & 1;
    const json_t *t = data[0] & 2 ? tools : NULL;
    const char *s = (const char *)data + 3;
    size_t n = size - 3;
    size_t cut = ((size_t)data[1] << 8 | data[2]) % (n + 1);

    struct acc one = parse(t, in_think, s, n, 0, 0);
    struct acc two = parse(t, in_think, s, n, cut, SIZE_MAX);
    struct acc bytes = parse(t, in_think, s, n, 0, 1);
    same(&one, &two, "two pieces");
    same(&one, &bytes, "one byte at a time");
    acc_free(&one);
    acc_free(&two);
    acc_free(&bytes);
    return 0;
}
