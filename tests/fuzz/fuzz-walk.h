/* Shared by fuzz-grammar and fuzz-schema (each defines CHECK, which traps, before
 * including it): a few steps of a matcher, each taking the first allowed token
 * but the stop id (the shortest way into a long repetition). Every token in a
 * mask must be accepted; a mask over a limit is a refusal (-E2BIG), never a
 * smaller language, and ends the walk. */
#ifndef MINICPMD_TESTS_FUZZ_WALK_H
#define MINICPMD_TESTS_FUZZ_WALK_H

#include "engine/grammar.h"

#include <errno.h>
#include <stdint.h>

static void fuzz_walk(eng_gram_matcher *m, const eng_gram_vocab *voc, int32_t stop)
{
    uint32_t mask[64];
    CHECK(eng_gram_vocab_size(voc) <= 64 * 32);
    for (int step = 0; step < 4; step++) {
        int cnt = eng_gram_matcher_mask(m, mask);
        if (cnt == -E2BIG)
            return;
        CHECK(cnt >= 0);
        int32_t pick = -1;
        for (int32_t id = 0; id < eng_gram_vocab_size(voc) && pick < 0; id++)
            if (((mask[id >> 5] >> (id & 31)) & 1) && id != stop)
                pick = id;
        if (pick < 0)
            return;
        CHECK(eng_gram_matcher_accept(m, pick) == 0);
    }
}

#endif
