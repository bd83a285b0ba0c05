/* Internals of the sampler, shared by sample.c (the chain: knobs, history, weights,
 * the draw) and sample-sort.c (the total order on candidates and the cuts made in
 * it: top-k, top-p). Not for use outside engine/. */
#ifndef MINICPMD_ENGINE_SAMPLE_IMPL_H
#define MINICPMD_ENGINE_SAMPLE_IMPL_H

#include <float.h>
#include <stdbool.h>
#include <stdint.h>

#include "engine/worker/sample.h"

struct sample_cand {
    float v;    /* logit, then unnormalised probability */
    int32_t id;
};

/* A logit as the chain sees it: +inf becomes FLT_MAX so that subtracting the
 * maximum stays finite (several +inf logits then share evenly); -inf and NaN stay
 * and get weight 0. */
static inline float sample_clamp_logit(float v) { return v > FLT_MAX ? FLT_MAX : v; }

/* The best k samplable logits into c[0..), sorted; returns how many (< k only when
 * fewer are samplable). */
int eng__sample_top_k(const float *logits, int n, int k, struct sample_cand *c);

/* Top-p on m candidates carrying weights: the shortest prefix of the order whose
 * mass reaches `target`, moved to c[0..cut) and returned; its mass, summed in
 * c's order, goes to *kept. `sorted`: c is already in the order. */
int eng__sample_top_p_cut(struct sample_cand *c, int m, bool sorted, double target,
                          double *kept);

#endif
