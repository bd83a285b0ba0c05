/* engine/model/pack: which directories are packs, and the one-line reasons why not. */
#include "engine/engine.h"

#include "tests/check.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static const char *minicpm5_2b =
    "{\"architectures\":[\"LlamaForCausalLM\"],\"model_type\":\"llama\",\"hidden_size\":2048,"
    "\"num_hidden_layers\":42,\"num_attention_heads\":16,\"num_key_value_heads\":2,"
    "\"head_dim\":128,\"intermediate_size\":6144,\"vocab_size\":130560,"
    "\"max_position_embeddings\":131072,\"rms_norm_eps\":1e-06,\"rope_theta\":5000000,"
    "\"tie_word_embeddings\":false}";

static void put(const char *name, const char *text) { mcd_put_file(dir, name, text); }
static void drop(const char *name) { mcd_drop_file(dir, name); }

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mcd-pack-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    put("config.json", minicpm5_2b);
    put("tokenizer.json", "{}");
    put("model.safetensors", "x");
}

static void teardown(void)
{
    drop("config.json");
    drop("tokenizer.json");
    drop("model.safetensors");
    drop("model.q4nx");
    rmdir(dir);
}

TestSuite(pack, .init = setup, .fini = teardown);

/* Open and expect failure whose message contains `want`. */
static void expect_error(const char *want)
{
    eng_pack *p = (eng_pack *)0x1;
    char err[512] = "";
    int rc = eng_pack_open(dir, &p, err, sizeof err);
    cr_assert_lt(rc, 0);
    cr_assert_null(p, "no partial pack");
    cr_assert_not_null(strstr(err, want), "message '%s' lacks '%s'", err, want);
    cr_assert_null(strchr(err, '\n'), "one line");
}

MCD_TEST(pack, minicpm5_2b)
{
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open(dir, &p, err, sizeof err), 0, "%s", err);
    const struct eng_pack_info *i = eng_pack_get_info(p);
    cr_assert_str_eq(i->model_type, "llama");
    cr_assert_eq(i->hp.n_layers, 42);
    cr_assert_eq(i->hp.n_embd, 2048);
    cr_assert_eq(i->hp.n_heads, 16);
    cr_assert_eq(i->hp.n_kv_heads, 2);
    cr_assert_eq(i->hp.head_dim, 128);
    cr_assert_eq(i->hp.n_ff, 6144);
    cr_assert_eq(i->hp.n_vocab, 130560);
    cr_assert_eq(i->hp.n_ctx_train, 131072);
    cr_assert_float_eq(i->hp.rms_norm_eps, 1e-6, 1e-12);
    cr_assert_float_eq(i->hp.rope_theta, 5e6, 1e-3);
    cr_assert_eq(i->hp.tie_embeddings, 0);
    cr_assert_eq(i->format, ENG_WEIGHTS_SAFETENSORS);
    cr_assert_eq(i->weights_bytes, 1);
    eng_pack_free(p);
}

MCD_TEST(pack, q4nx_is_preferred)
{
    put("model.q4nx", "abc");
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open(dir, &p, err, sizeof err), 0, "%s", err);
    cr_assert_eq(eng_pack_get_info(p)->format, ENG_WEIGHTS_Q4NX);
    cr_assert_str_eq(eng_weights_format_name(ENG_WEIGHTS_Q4NX), "q4nx");
    eng_pack_free(p);
}

MCD_TEST(pack, defaults_for_optional_fields)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":300}");
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open(dir, &p, err, sizeof err), 0, "%s", err);
    const struct eng_pack_info *i = eng_pack_get_info(p);
    cr_assert_eq(i->hp.n_kv_heads, 4);
    cr_assert_eq(i->hp.head_dim, 16);
    eng_pack_free(p);
}

MCD_TEST(pack, missing_config) { drop("config.json"); expect_error("config.json: No such file"); }
MCD_TEST(pack, malformed_config) { put("config.json", "{\"model_type\":"); expect_error("config.json:1:"); }
MCD_TEST(pack, config_not_object) { put("config.json", "[1]"); expect_error("top level must be a JSON object"); }
MCD_TEST(pack, duplicate_key) { put("config.json", "{\"a\":1,\"a\":2}"); expect_error("duplicate"); }
MCD_TEST(pack, no_model_type) { put("config.json", "{\"hidden_size\":2048}"); expect_error("'model_type'"); }
MCD_TEST(pack, missing_field)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":2048}");
    expect_error("missing integer field 'num_hidden_layers'");
}
MCD_TEST(pack, wrong_type)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":\"2048\",\"num_hidden_layers\":2}");
    expect_error("'hidden_size' must be an integer");
}
MCD_TEST(pack, out_of_range)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_hidden_layers\":0}");
    expect_error("'num_hidden_layers' = 0 is out of range (1..1024)");
}
MCD_TEST(pack, gqa_mismatch)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":16,\"num_key_value_heads\":3,"
                       "\"intermediate_size\":8,\"vocab_size\":8}");
    expect_error("not a multiple of num_key_value_heads 3");
}
MCD_TEST(pack, bad_eps)
{
    put("config.json", "{\"model_type\":\"llama\",\"hidden_size\":2048,\"num_hidden_layers\":2,"
                       "\"num_attention_heads\":16,\"intermediate_size\":8,\"vocab_size\":8,"
                       "\"rms_norm_eps\":-1}");
    expect_error("'rms_norm_eps'");
}
MCD_TEST(pack, no_weights) { drop("model.safetensors"); expect_error("no weights"); }
MCD_TEST(pack, empty_weights) { put("model.safetensors", ""); expect_error("model.safetensors: file is empty"); }
MCD_TEST(pack, no_tokenizer) { drop("tokenizer.json"); expect_error("tokenizer.json"); }

MCD_TEST(pack, not_a_directory)
{
    eng_pack *p;
    char err[256];
    cr_assert_eq(eng_pack_open("/etc/hostname", &p, err, sizeof err), -ENOTDIR);
    cr_assert_not_null(strstr(err, "not a directory"));
    cr_assert_lt(eng_pack_open("/nonexistent/pack", &p, err, sizeof err), 0);
    cr_assert_not_null(strstr(err, "/nonexistent/pack"));
}

/* A FIFO, a device or a directory where a pack file is
 * expected is refused at once with what it is. A FIFO config.json without a
 * writer used to block the loader forever (and SIGTERM with it). */
static void make_fifo(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    cr_assert_eq(mkfifo(path, 0600), 0);
}

static void make_link(const char *name, const char *target)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
    cr_assert_eq(symlink(target, path), 0);
}

MCD_TEST(pack, config_fifo_refused)
{
    make_fifo("config.json");
    expect_error("config.json: a FIFO, not a regular file");
}

MCD_TEST(pack, config_device_refused)
{
    make_link("config.json", "/dev/zero");
    expect_error("config.json: a character device, not a regular file");
}

MCD_TEST(pack, weights_fifo_refused)
{
    make_fifo("model.safetensors");
    expect_error("model.safetensors: a FIFO, not a regular file");
}

MCD_TEST(pack, tokenizer_device_refused)
{
    make_link("tokenizer.json", "/dev/zero");
    expect_error("tokenizer.json: a character device, not a regular file");
}

MCD_TEST(pack, tokenizer_directory_refused)
{
    drop("tokenizer.json");
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    cr_assert_eq(mkdir(path, 0700), 0);
    expect_error("tokenizer.json: a directory, not a regular file");
    rmdir(path);
}

/* A 1 TiB sparse weights file is refused at open, not mapped and
 * reported as "weights 1048576.0 MiB". */
MCD_TEST(pack, sparse_terabyte_weights_refused)
{
    char path[128];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    cr_assert_eq(truncate(path, 1ll << 40), 0);
    expect_error("model.safetensors: 1048576.0 MiB is more than a model of this shape can hold");
}
