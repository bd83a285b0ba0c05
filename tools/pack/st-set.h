/* The weight files of a pack or a Hugging Face checkpoint as one set of
 * safetensors files: model.q4nx, model.safetensors, or the shards listed by
 * model.safetensors.index.json. Every file is opened with engine/model/safetensors.h,
 * so it is mapped (never read into memory) and validated before use. */
#ifndef MINICPMD_TOOLS_PACK_ST_SET_H
#define MINICPMD_TOOLS_PACK_ST_SET_H

#include <jansson.h>
#include <stddef.h>

#include "engine/model/safetensors.h"

enum st_set_kind { ST_SET_Q4NX, ST_SET_HF, ST_SET_HF_SHARDED };

struct st_set {
    enum st_set_kind kind;
    const char *weights_name;  /* model.q4nx, model.safetensors, model.safetensors.index.json */
    size_t n;                  /* files */
    char **names;              /* file names inside the directory */
    eng_st **files;
    json_t *weight_map;        /* sharded: {tensor: file name}; else NULL */
};

/* Which weights `dir` holds, with the engine's preference (engine/model/pack.c):
 * model.q4nx, then model.safetensors, then the sharded index. Returns 0, or
 * -ENOENT with a message naming the files looked for. */
int st_set_detect(const char *dir, enum st_set_kind *kind, char *err, size_t errlen);
const char *st_set_kind_name(enum st_set_kind kind);  /* "q4nx", "safetensors", ... */

/* Opens every file of the set. For a sharded checkpoint the index must be a
 * JSON object with a "weight_map" of plain file names in `dir`, and each mapped
 * tensor must exist in its shard. Returns 0, or a negative errno with one line
 * in err naming the file (and tensor); nothing stays open on failure. */
int st_set_open(struct st_set *s, const char *dir, enum st_set_kind kind, char *err,
                size_t errlen);
void st_set_close(struct st_set *s);

/* Tensor `name` (through the weight map when sharded), or NULL; *file gets the
 * index of the file holding it when non-NULL. */
const struct eng_st_tensor *st_set_find(const struct st_set *s, const char *name, size_t *file);

#endif
