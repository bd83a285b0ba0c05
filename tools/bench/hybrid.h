/* minicpmd-bench --hybrid N: time to first token of an N-token prompt when the CPU
 * prefills it and the NPU decodes (the xrt device's --npu-prefill cpu), against the
 * NPU prefilling it token by token. */
#ifndef MINICPMD_TOOLS_BENCH_HYBRID_H
#define MINICPMD_TOOLS_BENCH_HYBRID_H

#include <stdbool.h>

#include "engine/model/model.h"

struct hybrid_opts {
    int tokens;             /* the prompt */
    int chunk;              /* positions per CPU batch (the daemon's --prefill-chunk) */
    int reps;
    int npu_kv_heads;       /* the kernel set's KV heads the rows are repeated to */
    double npu_tps;         /* the NPU's decode rate, given (no NPU here to measure) */
    bool json;
};

/* Measure on m and print the report (JSON with o->json). 0, or -1 with a line on
 * stderr. */
int bench_hybrid(eng_model *m, const struct hybrid_opts *o);

#endif
