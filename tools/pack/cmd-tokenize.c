/* minicpmd-pack tokenize PACK [--decode] [--no-special] [--bench]
 *
 * For people debugging prompts: text on stdin -> a JSON array of ids on stdout, or
 * with --decode a JSON array of ids on stdin -> the text. PACK is a pack directory
 * (its tokenizer.json is used) or a tokenizer.json itself. Special tokens in the
 * text are matched, as for a rendered chat prompt; --no-special treats them as text.
 * --bench encodes stdin repeatedly for about two seconds and prints MB/s on stderr. */
#include "engine/tokenizer.h"
#include "tools/pack/pack.h"
#include "tools/pack/fsutil.h"
#include "util/clock.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static int bench(const eng_tokenizer *t, const char *text, size_t len, bool special)
{
    double t0 = ut_now_s(), t1;
    size_t bytes = 0, tokens = 0;
    do {
        int32_t *ids;
        int n = eng_tokenizer_encode(t, text, len, special, &ids);
        if (n < 0)
            return 1;
        free(ids);
        bytes += len;
        tokens += (size_t)n;
        t1 = ut_now_s();
    } while (t1 - t0 < 2.0 || bytes < len * 2);
    fprintf(stderr, "encode: %.1f MB/s, %.0f tokens/s (%zu bytes x %zu rounds, one thread)\n",
            (double)bytes / (t1 - t0) / 1e6, (double)tokens / (t1 - t0), len, bytes / (len ? len : 1));
    return 0;
}

static int decode_stdin(const eng_tokenizer *t, const char *in)
{
    json_error_t je;
    json_t *arr = json_loads(in, 0, &je);
    if (!json_is_array(arr)) {
        fprintf(stderr, "minicpmd-pack tokenize --decode: stdin must be a JSON array of ids (%s)\n",
                arr ? "not an array" : je.text);
        json_decref(arr);
        return 1;
    }
    size_t n = json_array_size(arr);
    int32_t *ids = calloc(n + 1, sizeof *ids);
    int rc = ids ? 0 : 1;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= eng_tokenizer_n_vocab(t)) {
            fprintf(stderr, "minicpmd-pack tokenize --decode: element %zu is not an id in "
                            "[0, %d)\n", i, eng_tokenizer_n_vocab(t));
            rc = 1;
        } else {
            ids[i] = (int32_t)json_integer_value(v);
        }
    }
    size_t tl = 0;
    char *text = rc == 0 ? eng_tokenizer_decode_len(t, ids, n, false, &tl) : NULL;
    if (rc == 0 && text)
        fwrite(text, 1, tl, stdout);
    else
        rc = 1;
    free(text);
    free(ids);
    json_decref(arr);
    return rc;
}

int pack_cmd_tokenize(int argc, char **argv)
{
    const char *pack = NULL;
    bool decode = false, special = true, do_bench = false;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--decode") == 0)
            decode = true;
        else if (strcmp(argv[i], "--no-special") == 0)
            special = false;
        else if (strcmp(argv[i], "--bench") == 0)
            do_bench = true;
        else if (argv[i][0] != '-' && !pack)
            pack = argv[i];
        else
            pack = NULL, argc = -1;
    }
    if (!pack || argc < 0) {
        fprintf(stderr, "usage: minicpmd-pack tokenize PACK|tokenizer.json [--decode] "
                        "[--no-special] [--bench]\n");
        return 2;
    }
    char path[4096];
    struct stat st;
    if (stat(pack, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, sizeof path, "%s/tokenizer.json", pack);
    else
        snprintf(path, sizeof path, "%s", pack);

    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(path, &t, err, sizeof err);
    if (!t) {
        fprintf(stderr, "minicpmd-pack tokenize: %s\n", err);
        return 1;
    }
    size_t len = 0;
    char *in = pack_read_all(stdin, &len);
    int rc = 1;
    if (!in) {
        fprintf(stderr, "minicpmd-pack tokenize: cannot read stdin\n");
    } else if (decode) {
        rc = decode_stdin(t, in);   /* pack_read_all ends it with a NUL */
    } else if (do_bench) {
        rc = bench(t, in, len, special);
    } else {
        int32_t *ids;
        int n = eng_tokenizer_encode(t, in, len, special, &ids);
        if (n < 0) {
            fprintf(stderr, "minicpmd-pack tokenize: encode failed (%d)\n", n);
        } else {
            fputc('[', stdout);
            for (int i = 0; i < n; i++)
                printf(i ? ",%d" : "%d", ids[i]);
            fputs("]\n", stdout);
            free(ids);
            rc = 0;
        }
    }
    free(in);
    eng_tokenizer_free(t);
    return rc;
}
