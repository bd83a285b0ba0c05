/* What a pack says about sampling: generation_config.json's defaults
 * (eng_sampling_defaults) and the stop ids, good and bad, on a minimal pack written
 * into a temporary directory. */
#include "engine/engine.h"
#include "engine/worker/sample.h"
#include "tests/check.h"
#include "tests/sample-fx.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---- a pack's generation_config.json and stop ids ------------------------------------------- */

static char dir[64];

static void put(const char *name, const char *text) { mcd_put_file(dir, name, text); }
static void drop(const char *name) { mcd_drop_file(dir, name); }

#define CONFIG_HEAD                                                                           \
    "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_hidden_layers\":42,"                \
    "\"num_attention_heads\":16,\"num_key_value_heads\":2,\"head_dim\":128,"                  \
    "\"intermediate_size\":6144,\"vocab_size\":130560"
#define MINICPM5_GEN                                                                          \
    "{\"do_sample\": true, \"temperature\": 1.0, \"top_p\": 0.95, "                           \
    "\"eos_token_id\": [1, 130073], \"bos_token_id\": 0, \"pad_token_id\": 1}"

static void pack_setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mcd-sample-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    put("config.json", CONFIG_HEAD "}");
    put("tokenizer.json", "{}");
    put("model.safetensors", "x");
}

static void pack_teardown(void)
{
    drop("config.json");
    drop("generation_config.json");
    drop("tokenizer.json");
    drop("model.safetensors");
    rmdir(dir);
}

TestSuite(pack, .init = pack_setup, .fini = pack_teardown);

static eng_pack *open_pack(void)
{
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open(dir, &p, err, sizeof err), 0, "%s", err);
    return p;
}

/* Stop ids of the pack with these files (NULL: the file is absent). */
static int stop_ids(const char *gen, const char *cfg_tail, int32_t *ids, int max, char *err)
{
    char cfg[1024];
    snprintf(cfg, sizeof cfg, CONFIG_HEAD "%s}", cfg_tail ? cfg_tail : "");
    put("config.json", cfg);
    if (gen)
        put("generation_config.json", gen);
    else
        drop("generation_config.json");
    eng_pack *p = open_pack();
    int n = eng_pack_stop_ids(p, ids, max, err, 256);
    eng_pack_free(p);
    return n;
}

MCD_TEST(pack, stop_ids)
{
    int32_t ids[8];
    char err[256] = "";
    cr_assert_eq(stop_ids(MINICPM5_GEN, NULL, ids, 8, err), 2, "%s", err);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 130073);

    cr_assert_eq(stop_ids("{\"eos_token_id\": 7}", NULL, ids, 8, err), 1, "%s", err);
    cr_assert_eq(ids[0], 7);
    /* The union with config.json, deduplicated and ascending. */
    cr_assert_eq(stop_ids("{\"eos_token_id\": [9, 2, 9]}", ",\"eos_token_id\": [130073, 2]", ids,
                          8, err),
                 3, "%s", err);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[1], 9);
    cr_assert_eq(ids[2], 130073);
    /* No generation_config.json; config.json's number; integral reals; nulls. */
    cr_assert_eq(stop_ids(NULL, ",\"eos_token_id\": 5.0", ids, 8, err), 1, "%s", err);
    cr_assert_eq(ids[0], 5);
    cr_assert_eq(stop_ids("{\"eos_token_id\": null}", NULL, ids, 8, err), 0, "%s", err);
    cr_assert_eq(stop_ids("{\"eos_token_id\": []}", ",\"eos_token_id\": null", ids, 8, err), 0);
    /* Exactly max fit; more than max is an error, not a silent truncation. */
    cr_assert_eq(stop_ids("{\"eos_token_id\": [5, 4, 3, 2]}", ",\"eos_token_id\": 5", ids, 4,
                          err),
                 4, "%s", err);
    cr_assert_eq(ids[0], 2);
    cr_assert_eq(ids[3], 5);
    ids[2] = -7;
    cr_assert_eq(stop_ids("{\"eos_token_id\": [5, 4, 3, 2]}", NULL, ids, 2, err), -EINVAL);
    cr_assert_not_null(strstr(err, "more than the 2 supported"), "%s", err);
    cr_assert_eq(ids[2], -7, "nothing written past max");
    cr_assert_eq(stop_ids("{\"eos_token_id\": null}", NULL, NULL, 0, err), 0);
}

static void expect_stop_error(const char *gen, const char *cfg_tail, const char *file,
                              const char *want)
{
    int32_t ids[8];
    char err[256] = "";
    cr_assert_eq(stop_ids(gen, cfg_tail, ids, 8, err), -EINVAL, "accepted %s / %s", gen,
                 cfg_tail);
    cr_assert_not_null(strstr(err, file), "message '%s' lacks '%s'", err, file);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_null(strchr(err, '\n'));
}

MCD_TEST(pack, stop_ids_invalid)
{
    expect_stop_error("{\"eos_token_id\": \"1\"}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": [1, \"2\"]}", NULL, "generation_config.json",
                      "eos_token_id");
    expect_stop_error("{\"eos_token_id\": [1, [2]]}", NULL, "generation_config.json",
                      "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 1.5}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": true}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": -1}", NULL, "generation_config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 130560}", NULL, "generation_config.json", "0..130559");
    expect_stop_error(NULL, ",\"eos_token_id\": {\"a\": 1}", "config.json", "eos_token_id");
    expect_stop_error("{\"eos_token_id\": 1,}", NULL, "generation_config.json", ":1:");
    expect_stop_error("[1, 2]", NULL, "generation_config.json", "object");
    expect_stop_error("{\"eos_token_id\": 1, \"eos_token_id\": 2}", NULL,
                      "generation_config.json", "duplicate");
}

static int defaults(const char *gen, struct eng_sampling *s, char *err)
{
    if (gen)
        put("generation_config.json", gen);
    else
        drop("generation_config.json");
    eng_pack *p = open_pack();
    int rc = eng_sampling_defaults(p, s, err, 256);
    eng_pack_free(p);
    return rc;
}

MCD_TEST(pack, sampling_defaults)
{
    struct eng_sampling s;
    char err[256] = "";
    /* No file: neutral. */
    cr_assert_eq(defaults(NULL, &s, err), 0, "%s", err);
    cr_assert_eq(s.temperature, 1.0f);
    cr_assert_eq(s.top_p, 1.0f);
    cr_assert_eq(s.top_k, 0);
    cr_assert_eq(s.min_p, 0.0f);
    cr_assert_eq(s.repetition_penalty, 1.0f);
    cr_assert_eq(s.penalty_last_n, 0);
    cr_assert_eq(s.presence_penalty, 0.0f);
    cr_assert_eq(s.frequency_penalty, 0.0f);
    cr_assert_null(s.bias);
    cr_assert_eq(s.n_bias, 0);

    cr_assert_eq(defaults(MINICPM5_GEN, &s, err), 0, "%s", err);
    cr_assert_eq(s.temperature, 1.0f);
    cr_assert_eq(s.top_p, 0.95f);
    cr_assert_eq(s.top_k, 0);
    cr_assert_eq(s.repetition_penalty, 1.0f);
    eng_sampler *smp = mk(&s, 130560);
    eng_sampler_free(smp);

    cr_assert_eq(defaults("{\"temperature\": 0.7, \"top_k\": 20, \"min_p\": 0.05, "
                          "\"repetition_penalty\": 1.05, \"top_p\": null, \"foo\": [1]}",
                          &s, err),
                 0, "%s", err);
    cr_assert_eq(s.temperature, 0.7f);
    cr_assert_eq(s.top_p, 1.0f);
    cr_assert_eq(s.top_k, 20);
    cr_assert_eq(s.min_p, 0.05f);
    cr_assert_eq(s.repetition_penalty, 1.05f);

    cr_assert_eq(defaults("{\"do_sample\": false, \"temperature\": 0.7, \"top_k\": 50.0}", &s,
                          err),
                 0, "%s", err);
    cr_assert_eq(s.temperature, 0.0f, "do_sample false is greedy");
    cr_assert_eq(s.top_k, 50);
}

static void expect_defaults_error(const char *gen, const char *want)
{
    struct eng_sampling s;
    char err[256] = "";
    cr_assert_eq(defaults(gen, &s, err), -EINVAL, "accepted %s", gen);
    cr_assert_not_null(strstr(err, "generation_config.json"), "message '%s' names no file", err);
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_null(strchr(err, '\n'));
}

MCD_TEST(pack, sampling_defaults_invalid)
{
    expect_defaults_error("{\"temperature\": \"1\"}", "temperature");
    expect_defaults_error("{\"temperature\": -0.5}", "temperature");
    expect_defaults_error("{\"top_p\": 0}", "top_p");
    expect_defaults_error("{\"top_p\": 1.5}", "top_p");
    expect_defaults_error("{\"top_k\": -1}", "top_k");
    expect_defaults_error("{\"top_k\": 2.5}", "top_k");
    expect_defaults_error("{\"top_k\": \"40\"}", "top_k");
    expect_defaults_error("{\"min_p\": 1}", "min_p");
    expect_defaults_error("{\"min_p\": -0.1}", "min_p");
    expect_defaults_error("{\"repetition_penalty\": 0}", "repetition_penalty");
    expect_defaults_error("{\"do_sample\": 1}", "do_sample");
    expect_defaults_error("{\"top_p\": 0.9", "generation_config.json:");
    expect_defaults_error("[1]", "object");
    expect_defaults_error("\"text\"", "generation_config.json:1:");
    expect_defaults_error("", "generation_config.json:");
}

/* generation_config.json's max_new_tokens: the default answer length. */
static int max_new(const char *gen, int32_t *n, char *err)
{
    if (gen)
        put("generation_config.json", gen);
    else
        drop("generation_config.json");
    eng_pack *p = open_pack();
    *n = -7;
    int rc = eng_max_new_tokens(p, n, err, 256);
    eng_pack_free(p);
    return rc;
}

MCD_TEST(pack, max_new_tokens)
{
    int32_t n;
    char err[256] = "";
    cr_assert_eq(max_new(NULL, &n, err), 0, "%s", err);
    cr_assert_eq(n, 0, "no file: no default");
    cr_assert_eq(max_new(MINICPM5_GEN, &n, err), 0, "%s", err);
    cr_assert_eq(n, 0, "no key: no default");
    cr_assert_eq(max_new("{\"max_new_tokens\": null}", &n, err), 0, "%s", err);
    cr_assert_eq(n, 0);
    cr_assert_eq(max_new("{\"max_new_tokens\": 128, \"temperature\": 0.5}", &n, err), 0, "%s",
                 err);
    cr_assert_eq(n, 128);
    cr_assert_eq(max_new("{\"max_new_tokens\": 64.0}", &n, err), 0, "%s", err);
    cr_assert_eq(n, 64);
    static const char *const bad[] = {"{\"max_new_tokens\": 0}", "{\"max_new_tokens\": -1}",
                                      "{\"max_new_tokens\": 2.5}", "{\"max_new_tokens\": \"9\"}",
                                      "{\"max_new_tokens\": 4294967296}"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_assert_eq(max_new(bad[i], &n, err), -EINVAL, "accepted %s", bad[i]);
        cr_assert_not_null(strstr(err, "max_new_tokens"), "message '%s'", err);
        cr_assert_null(strchr(err, '\n'));
    }
}
