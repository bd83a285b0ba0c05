/* libFuzzer target: arbitrary bytes as a safetensors / Q4NX file through
 * eng_st_open() (header length, JSON, dtype/shape/offset checks, overlap sort),
 * then every tensor looked up and touched at both ends of its data, and each
 * I8 [n, 5120] tensor read as Q4_1 chunks. A validation gap shows up as a read
 * outside the mapping (SEGV) or an ASan report. The input lives in a memfd,
 * opened by path through /proc/self/fd, so the real open/fstat/mmap path runs. */
#include "engine/model/q4nx.h"
#include "engine/model/safetensors.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int memfd = -1;
static char path[64];

static void touch_q4(const struct eng_st_tensor *t, int64_t rows, int64_t cols)
{
    struct eng_q4nx q;
    static float tile[ENG_Q4NX_ROWS * ENG_Q4NX_COLS];
    if (eng_q4nx_init(&q, t->data, t->shape[0], rows, cols) != 0)
        abort(); /* the shape was chosen to fit: init must accept it */
    volatile float sink = eng_q4nx_get(&q, 0, 0) + eng_q4nx_get(&q, rows - 1, cols - 1);
    eng_q4nx_dequant_tile(&q, q.row_blocks - 1, q.col_blocks - 1, tile);
    sink += tile[ENG_Q4NX_ROWS * ENG_Q4NX_COLS - 1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz-safetensors", MFD_CLOEXEC);
        if (memfd < 0)
            abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", memfd);
    }
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        abort();

    eng_st *st = NULL;
    char err[512];
    if (eng_st_open(path, &st, err, sizeof err) != 0) {
        if (st || !memchr(err, '\0', sizeof err) || strchr(err, '\n'))
            abort(); /* failure leaves nothing and says one line */
        return 0;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < eng_st_count(st); i++) {
        const struct eng_st_tensor *t = eng_st_at(st, i);
        if (eng_st_find(st, t->name) != t)
            abort();
        if (t->nbytes) {
            const uint8_t *p = t->data;
            sink ^= p[0] ^ p[t->nbytes - 1];
        }
        const struct eng_st_tensor *got;
        (void)eng_st_get(st, t->name, ENG_ST_I8, 2, (const int64_t[]){ -1, ENG_Q4NX_CHUNK_BYTES },
                         &got, err, sizeof err);
        if (t->dtype == ENG_ST_I8 && t->n_dims == 2 && t->shape[1] == ENG_Q4NX_CHUNK_BYTES &&
            t->shape[0] > 0 && t->shape[0] < INT64_MAX / 256) {
            touch_q4(t, 32 * t->shape[0], 200);          /* one column block per row block */
            touch_q4(t, 32, 256 * t->shape[0] - 17);     /* one row block, padded columns */
        }
    }
    (void)eng_st_metadata(st, "format");
    (void)eng_st_find(st, "model.embed_tokens.weight");
    eng_st_free(st);
    (void)sink;
    return 0;
}
