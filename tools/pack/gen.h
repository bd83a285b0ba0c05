/* Internals of `minicpmd-pack gen` shared by cmd-gen.c (presets, config files,
 * weights) and gen-tok.c (the synthetic byte-level BPE tokenizer). */
#ifndef MINICPMD_TOOLS_GEN_H
#define MINICPMD_TOOLS_GEN_H

#include <stddef.h>
#include <stdint.h>

/* Ids 0..21 are MiniCPM5's leading added tokens (docs/model-minicpm5.md §2.2); the
 * 256 byte tokens follow. */
#define GEN_N_LOW_ADDED 22

struct gen_preset {
    const char *name;
    int hidden, layers, heads, kv_heads, head_dim, ffn;
    int vocab;     /* config vocab_size = tokenizer ids 0..vocab-1, no gaps */
    int im_start;  /* <|im_start|>; <|im_end|> is im_start + 1; BPE ids end below */
    int max_pos;   /* max_position_embeddings */
    const char *about;
};

/* splitmix64: the one PRNG of the generator (state advanced in place). */
static inline uint64_t gen_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Writes tokenizer.json for the preset's vocabulary to `path`. The tokenizer does
 * not depend on the seed: packs of one preset share it. Returns 0, or a negative
 * errno with a message in err. */
int gen_tokenizer_write(const char *path, const struct gen_preset *p, char *err, size_t errlen);

#endif
