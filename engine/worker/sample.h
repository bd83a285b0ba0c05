/* eng_sampler — turns one position's logits into the next token.
 *
 * The chain, in this order (llama.cpp's order for the knobs both have), after the
 * grammar's mask when the request has one (gen.c: disallowed tokens are -inf
 * before step 1):
 *   1. logit bias      logit[id] += bias (OpenAI: -100 bans, +100 forces)
 *   2. penalties       over the tokens given to eng_sampler_accept():
 *                      repetition (CTRL: divide positive logits, multiply
 *                      negative ones, once per distinct id in the last
 *                      `penalty_last_n`), then presence (-= p once per seen id)
 *                      and frequency (-= f * count), OpenAI's definitions
 *   3. temperature <= 0 -> greedy: argmax, ties to the lowest id; stop here
 *   4. top-k (0 = off), 5. temperature, softmax, 6. top-p (1 = off),
 *   7. min-p (0 = off; drops p < min_p * p_max), renormalise
 *   8. draw from the seeded RNG (splitmix64/xoshiro; same seed and same logits
 *      give the same token on every machine)
 * Knobs at their neutral values cost nothing.
 *
 * Log-probabilities (for the API's `logprobs`) are of the model's distribution:
 * log-softmax of the raw logits, before bias, penalties and temperature. */
#ifndef MINICPMD_ENGINE_SAMPLE_H
#define MINICPMD_ENGINE_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/gen.h"
#include "engine/types.h"

/* Neutral knobs (temperature 1, penalty_last_n 0, seed 0, no bias), then the pack's
 * generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty when
 * present; do_sample false sets temperature 0; MiniCPM5: temperature 1.0, top_p
 * 0.95). A missing file (or p NULL) leaves the neutral values; a malformed one
 * returns -EINVAL with a one-line reason. */
int eng_sampling_defaults(const eng_pack *p, struct eng_sampling *s, char *err, size_t errlen);

/* generation_config.json's max_new_tokens (Hugging Face's name; vLLM reads it the
 * same way): how long an answer may be when a request sets no limit, >= 1 into
 * *out, or 0 (until a stop or the context's end) when the file or the key is
 * absent. A malformed value returns -EINVAL with a one-line reason. */
int eng_max_new_tokens(const eng_pack *p, int32_t *out, char *err, size_t errlen);

typedef struct eng_sampler eng_sampler;

/* Validates the knobs (ranges above; bias ids < n_vocab) and returns 0 or -EINVAL
 * with the offending knob named in err. */
int eng_sampler_new(const struct eng_sampling *s, int n_vocab, eng_sampler **out, char *err,
                    size_t errlen);
void eng_sampler_free(eng_sampler *s);

/* Adds a token to the penalty history (the caller decides whether the prompt's
 * tokens count; minicpmd feeds only generated ones to presence/frequency and the
 * whole sequence to repetition — see eng_sampler_accept_prompt). */
void eng_sampler_accept(eng_sampler *s, int32_t id);
/* Adds prompt tokens to the repetition-penalty window only. */
void eng_sampler_accept_prompt(eng_sampler *s, const int32_t *ids, int n);

/* Samples from logits[n_vocab]. On return `logits` holds the logits after bias and
 * penalties (steps 1-2). */
int32_t eng_sampler_sample(eng_sampler *s, float *logits);

/* log-softmax of raw logits[n]: the log-probability of `id` (NaN if id is not in
 * [0, n)), and the k most likely ids (descending, ties to the lower id) into
 * top[0..k-1], padded with {-1, -inf} past the listable ids (k > n, or NaN logits,
 * which count as -inf and are not listed); k <= 20. Does not change logits. */
float eng_logprobs(const float *logits, int n, int32_t id, struct eng_top_logprob *top, int k);

#endif
