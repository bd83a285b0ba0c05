/* minicpmd-grambench — the grammar mask's cost on a real vocabulary.
 *
 *   minicpmd-grambench TOKENIZER.json SCHEMA.json|json_object|@GRAMMAR.gbnf [RUNS [SEED]]
 *
 * Compiles the schema (or reads GBNF), then RUNS times walks a random path through
 * the grammar as a random-weight model would: each step computes the mask and
 * draws uniformly among the allowed tokens (stop ids only when nothing else is
 * left or by a coin once complete). Prints each output as a JSON string on stdout
 * (for an independent validator) and, on stderr, the per-step mask time: median,
 * p99 and worst, computed vs cached. The README's figures come from this. */
#include "engine/grammar.h"
#include "engine/tokenizer.h"
#include "util/clock.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json SCHEMA.json|json_object|@GRAMMAR [RUNS [SEED]]\n",
                argv[0]);
        return 2;
    }
    int runs = argc > 3 ? atoi(argv[3]) : 10;
    uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 1;
    char err[256];
    eng_tokenizer *tok;
    if (eng_tokenizer_load(argv[1], &tok, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    char *gbnf = NULL;
    struct eng_gram_refusal why = {0};
    int rc;
    if (argv[2][0] == '@') {
        FILE *f = fopen(argv[2] + 1, "rb");
        if (!f)
            return perror(argv[2] + 1), 1;
        gbnf = calloc(1, 1 << 24);
        fread(gbnf, 1, (1 << 24) - 1, f);
        fclose(f);
        rc = 0;
    } else if (strcmp(argv[2], "json_object") == 0) {
        rc = eng_gram_from_schema(NULL, &gbnf, &why);
    } else {
        json_error_t je;
        json_t *schema = json_load_file(argv[2], 0, &je);
        if (!schema) {
            fprintf(stderr, "%s: %s\n", argv[2], je.text);
            return 1;
        }
        const json_t *tools = json_object_get(schema, "tools");
        int64_t ts = ut_now_us();
        rc = tools ? eng_gram_from_tools(tools, NULL, 0, &gbnf, &why)
                   : eng_gram_from_schema(schema, &gbnf, &why);
        fprintf(stderr, "schema to GBNF: %.1f ms\n", (double)(ut_now_us() - ts) / 1e3);
        json_decref(schema);
    }
    if (rc) {
        fprintf(stderr, "refused: %s (%s at %s)\n", why.message, why.keyword, why.path);
        return 1;
    }
    if (getenv("GRAMBENCH_PRINT"))
        fprintf(stderr, "%s", gbnf);
    eng_grammar *g;
    int64_t t0 = ut_now_us();
    int crc = eng_grammar_parse(gbnf, strlen(gbnf), &g, err, sizeof err);
    fprintf(stderr, "GBNF compiled (%zu bytes of text): %.1f ms\n", strlen(gbnf),
            (double)(ut_now_us() - t0) / 1e3);
    if (crc) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    t0 = ut_now_us();
    eng_gram_vocab *v = eng_gram_vocab_new(tok);
    fprintf(stderr, "vocabulary of %d tokens in a trie: %.1f ms\n", eng_gram_vocab_size(v),
            (double)(ut_now_us() - t0) / 1e3);
    int32_t n = eng_gram_vocab_size(v);
    int32_t stop = eng_tokenizer_token_id(tok, "<|im_end|>");
    uint32_t *mask = malloc(((size_t)n + 31) / 32 * 4);
    int32_t *allowed = malloc((size_t)n * sizeof *allowed);
    size_t cap = 1 << 20, k = 0;
    double *ms = malloc(cap * sizeof *ms);
    uint64_t computed = 0, cached = 0, work_most = 0;
    int over = 0;
    for (int run = 0; run < runs; run++) {
        eng_gram_matcher *m;
        int mrc = eng_gram_matcher_new(g, v, &stop, 1, &m);
        if (mrc) {
            char reason[200] = "";
            if (mrc == -E2BIG)
                eng_gram_check_start(g, v, reason, sizeof reason);
            fprintf(stderr, "the matcher cannot start: %s\n",
                    mrc == -E2BIG ? reason : strerror(-mrc));
            return 1;
        }
        char *out = calloc(1, 1 << 20);
        size_t len = 0;
        for (int step = 0; step < 4000; step++) {
            struct timespec ta, tb;
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ta);
            int cnt = eng_gram_matcher_mask(m, mask);
            clock_gettime(CLOCK_THREAD_CPUTIME_ID, &tb);
            double t = (double)(tb.tv_sec - ta.tv_sec) * 1e3 + (double)(tb.tv_nsec - ta.tv_nsec) / 1e6;
            if (k < cap)
                ms[k++] = t;
            uint64_t wl, wm;
            eng_gram_matcher_work(m, &wl, &wm);
            if (wl > work_most)
                work_most = wl;
            if (cnt < 0) { /* over a limit: this walk ends here, as its request would */
                fprintf(stderr, "after %zu bytes: %s\n", len, eng_gram_matcher_why(m));
                over++;
                break;
            }
            if (cnt == 0) {
                fprintf(stderr, "dead end after %zu bytes: %.*s\n", len, (int)len, out);
                return 1;
            }
            int na = 0;
            bool stop_ok = false;
            for (int32_t id = 0; id < n; id++)
                if ((mask[id >> 5] >> (id & 31)) & 1) {
                    if (id == stop)
                        stop_ok = true;
                    else
                        allowed[na++] = id;
                }
            if (stop_ok && (na == 0 || rng(&seed) % 4 == 0))
                break;
            int32_t id = allowed[rng(&seed) % (uint64_t)na];
            const char *b;
            size_t bl = eng_tokenizer_token_bytes(tok, id, false, &b);
            if (eng_gram_matcher_accept(m, id)) {
                fprintf(stderr, "accept failed for an allowed token %d\n", id);
                return 1;
            }
            if (len + bl < (1 << 20) - 1) {
                memcpy(out + len, b, bl);
                len += bl;
            }
        }
        uint64_t c1, c2;
        eng_gram_matcher_stats(m, &c1, &c2);
        computed += c1;
        cached += c2;
        json_t *s = json_stringn(out, len);
        char *line = json_dumps(s, JSON_ENCODE_ANY);
        printf("%s\n", line ? line : "null");
        free(line);
        json_decref(s);
        free(out);
        eng_gram_matcher_free(m);
    }
    qsort(ms, k, sizeof *ms, cmp_d);
    if (k)
        fprintf(stderr, "%zu steps: mask median %.3f ms, p99 %.3f ms, worst %.3f ms; "
                        "%llu computed, %llu from the cache; most work in a step %llu units; "
                        "%d walks ended over a limit\n",
                k, ms[k / 2], ms[k * 99 / 100], ms[k - 1], (unsigned long long)computed,
                (unsigned long long)cached, (unsigned long long)work_most, over);
    free(ms);
    free(mask);
    free(allowed);
    free(gbnf);
    eng_grammar_free(g);
    eng_gram_vocab_free(v);
    eng_tokenizer_free(tok);
    return 0;
}
