/* libFuzzer target: a pack's config.json through eng_pack_open() (jansson parse,
 * field types, ranges, consistency checks). The other pack files exist, so every
 * input reaches the hparams checks. */
#include "engine/engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void put(const char *name, const void *buf, size_t len)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        abort();
    fwrite(buf, 1, len, f);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/mcd-fuzz-pack-XXXXXX");
        if (!mkdtemp(dir))
            abort();
        put("tokenizer.json", "{}", 2);
        put("model.safetensors", "x", 1);
    }
    put("config.json", data, size);
    eng_pack *p = NULL;
    char err[512];
    if (eng_pack_open(dir, &p, err, sizeof err) == 0)
        eng_pack_free(p);
    return 0;
}
