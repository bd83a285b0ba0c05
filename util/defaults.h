/* defaults — the defaults and limits that config/, api/ and engine/ must agree on,
 * each defined once here (the others name these). */
#ifndef MINICPMD_UTIL_DEFAULTS_H
#define MINICPMD_UTIL_DEFAULTS_H

/* Positions one forward pass takes at most: the bound of a prefill chunk. */
#define UT_MAX_BATCH 512

/* Sequences the worker runs at once (--parallel): the cpu and sim devices keep
 * 4 KV slots. */
#define UT_PARALLEL_DEFAULT 4
/* Prompt tokens one scheduler step may carry beside running decodes
 * (--step-prefill): a long prompt joins in chunks of this many, so the streams
 * beside it wait one such chunk per token, not the whole prefill. */
#define UT_STEP_PREFILL_DEFAULT 128

/* What one request's grammar may cost (engine/grammar.h, --grammar-*): rules and
 * bytes of its compiled form (memory), pushdown stacks alive at one point, and
 * work units of one step's mask (~7 ns each on a Zen 4 core, so ~4 ms). */
#define UT_GRAM_MAX_RULES 65536
#define UT_GRAM_MAX_BYTES (4 << 20)
#define UT_GRAM_MAX_STACKS 4096
#define UT_GRAM_STEP_WORK 600000

/* Choices one chat completion may ask for (`n`; OpenAI allows 128): each is a
 * sequence of the worker, sharing the prompt's KV. */
#define UT_MAX_CHOICES 8

/* Prompt tokens per prefill step (--prefill-chunk), 1 .. UT_MAX_BATCH. */
#define UT_PREFILL_CHUNK_DEFAULT 512

/* --runlist-layers auto: how often one request may halve K and replay
 * (--runlist-retries). */
#define UT_RUNLIST_RETRIES_DEFAULT 4

/* --request-timeout: seconds a client has to send a whole request, headers and
 * body (nginx's client_header_timeout + client_body_timeout, 60 s each, as one
 * total; a trickle of one byte at a time cannot reset it). */
#define UT_REQUEST_TIMEOUT_DEFAULT 30

/* --max-connections-per-ip: a quarter of the default --max-connections, so one
 * remote client cannot take every slot. */
#define UT_MAX_CONNECTIONS_PER_IP_DEFAULT 64

/* Stop strings per request. OpenAI's chat API allows 4; llama.cpp and Open WebUI
 * send more, so 16, as many as llama.cpp's clients commonly send. */
#define UT_MAX_STOP 16

/* All of a request's stop strings together, in bytes: each is kept whole (the
 * detokenizer holds back up to the longest one's length), so the sum is bounded. */
#define UT_MAX_STOP_BYTES 8192

/* /tokenize, /detokenize, /apply-template: how many of their jobs may hold a libuv
 * pool thread at once (the others queue). The pool has 4 threads and also builds
 * chat prompts: text endpoints must never take them all. */
#define UT_TEXT_JOBS_IN_FLIGHT 1

/* The largest answer a text endpoint builds (413 beyond): 8 MB of "ab ab ..." with
 * pieces is 125 MB (demo pack) to 180 MB (a byte per token), and the worst 8 MB body
 * (invalid UTF-8, a byte per token, given as byte arrays) ~235 MB: the default
 * --max-body-bytes is always answered; a raised one is bounded here. */
#define UT_TEXT_MAX_ANSWER_BYTES (256 << 20)

/* --runlist-layers auto recovers: after this many tokens (prompt and generated)
 * run without a fault at a reduced K, the next request tries 2K (at most the
 * device's default). A probe that hangs halves K back and doubles this interval,
 * up to UT_RUNLIST_PROBE_TOKENS_MAX: a K that keeps failing is tried rarely, never
 * given up for good. */
#define UT_RUNLIST_PROBE_TOKENS 256
#define UT_RUNLIST_PROBE_TOKENS_MAX (256 * 1024)

/* A K remembered in runlist-k.json is used for this long after it was written;
 * older, the daemon starts again from the device's default (a driver or firmware
 * update may have fixed what made it small). */
#define UT_RUNLIST_K_MAX_AGE_S (7 * 24 * 3600)

/* top_logprobs per token: OpenAI's limit, and what the sampler keeps. */
#define UT_MAX_TOP_LOGPROBS 20

/* --weights copy/auto: MemAvailable must hold the copy plus this much (MiB), or the
 * weights are served from the file mapping (engine/model/place.c). */
#define UT_WEIGHTS_COPY_MARGIN_MB 512

#endif
