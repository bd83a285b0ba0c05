/* Our side of the tokenizer oracle comparison (tests/oracle/compare.mjs runs it).
 *
 *   oracle-run TOKENIZER.json CORPUS.jsonl special|nospecial
 *
 * For every corpus line {"b64": ...} prints one JSON line
 *   {"ids": [...], "dec": b64, "dec_skip": b64, "stream": b64}
 * dec / dec_skip: eng_tokenizer_decode without / with skip_special; stream: the same
 * ids through the streaming detokenizer one at a time, pieces concatenated (must
 * equal dec). Exit status 1 on any internal failure. */
#include "engine/tokenizer.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static size_t b64_decode(const char *in, unsigned char *out)
{
    size_t n = 0;
    unsigned v = 0;
    int bits = 0;
    for (; *in && *in != '='; in++) {
        const char *p = strchr(b64, *in);
        if (!p)
            continue;
        v = (v << 6) | (unsigned)(p - b64);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    return n;
}

static void b64_print(const char *s, size_t n)
{
    putchar('"');
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)s[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)s[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)s[i + 2];
        putchar(b64[v >> 18 & 63]);
        putchar(b64[v >> 12 & 63]);
        putchar(i + 1 < n ? b64[v >> 6 & 63] : '=');
        putchar(i + 2 < n ? b64[v & 63] : '=');
    }
    putchar('"');
}

static char *stream(const eng_tokenizer *t, const int32_t *ids, int n, size_t *len)
{
    eng_detok *d = eng_detok_new(t, false, NULL, 0);
    size_t cap = 64, k = 0;
    char *all = malloc(cap);
    bool stopped;
    for (int i = 0; d && all && i <= n; i++) {
        char *piece = NULL;
        int r = i < n ? eng_detok_push(d, ids[i], &piece, &stopped) : eng_detok_flush(d, &piece);
        if (r < 0) {
            free(all);
            all = NULL;
            break;
        }
        if (r > 0) {
            while (k + (size_t)r + 1 > cap)
                cap *= 2;
            char *a = realloc(all, cap);
            if (!a) {
                free(piece);
                free(all);
                all = NULL;
                break;
            }
            all = a;
            memcpy(all + k, piece, (size_t)r);
            k += (size_t)r;
        }
        free(piece);
    }
    eng_detok_free(d);
    *len = k;
    return all;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: oracle-run TOKENIZER.json CORPUS.jsonl special|nospecial\n");
        return 2;
    }
    char err[512];
    eng_tokenizer *t;
    eng_tokenizer_load(argv[1], &t, err, sizeof err);
    if (!t) {
        fprintf(stderr, "oracle-run: %s\n", err);
        return 1;
    }
    bool special = strcmp(argv[3], "special") == 0;
    FILE *f = fopen(argv[2], "r");
    if (!f) {
        perror(argv[2]);
        eng_tokenizer_free(t);
        return 1;
    }
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        json_t *o = json_loads(line, 0, NULL);
        const char *enc = json_string_value(json_object_get(o, "b64"));
        unsigned char *raw = enc ? malloc(strlen(enc) + 1) : NULL;
        if (!raw) {
            json_decref(o);
            rc = 1;
            break;
        }
        size_t n = b64_decode(enc, raw);
        int32_t *ids;
        int k = eng_tokenizer_encode(t, (const char *)raw, n, special, &ids);
        if (k < 0) {
            fprintf(stderr, "oracle-run: encode failed: %d\n", k);
            rc = 1;
        } else {
            size_t dl = 0, kl = 0;
            char *dec = eng_tokenizer_decode_len(t, ids, (size_t)k, false, &dl);
            char *skip = eng_tokenizer_decode_len(t, ids, (size_t)k, true, &kl);
            size_t sl = 0;
            char *st = stream(t, ids, k, &sl);
            if (!dec || !skip || !st) {
                rc = 1;
            } else {
                fputs("{\"ids\":[", stdout);
                for (int i = 0; i < k; i++)
                    printf(i ? ",%d" : "%d", ids[i]);
                fputs("],\"dec\":", stdout);
                b64_print(dec, dl);
                fputs(",\"dec_skip\":", stdout);
                b64_print(skip, kl);
                fputs(",\"stream\":", stdout);
                b64_print(st, sl);
                fputs("}\n", stdout);
            }
            free(dec);
            free(skip);
            free(st);
            free(ids);
        }
        free(raw);
        json_decref(o);
    }
    free(line);
    fclose(f);
    eng_tokenizer_free(t);
    return rc;
}
