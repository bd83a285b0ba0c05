/* Unit tests for config/: validation of each value and the message that names
 * it. Integers and their bounds, runlist layers, sizes, enums, bools, hosts,
 * strings, CORS origins, the API key and its file.
 *
 * Every test passes its own envp and writes its files into a fresh temporary
 * directory, so nothing depends on the environment of the machine running it.
 * The one thing that cannot be redirected is /etc/minicpmd/config.json; tests
 * that would read it are skipped where it exists. */
#include "config/config.h"
#include "minicpmd-build.h"
#include "tests/check.h"
#include "tests/config-fx.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(config, .init = setup, .fini = teardown);

/* ---- integers ------------------------------------------------------------- */

MCD_TEST(config, port_out_of_range)
{
    FAILS(ARGV("--port", "70000",), ENV(), "--port: '70000' is out of range (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--port=-1",), ENV(), "'-1' is out of range (0..65535)");
}

MCD_TEST(config, port_not_an_integer)
{
    FAILS(ARGV(), ENV("MINICPMD_PORT=abc",), "MINICPMD_PORT: 'abc' is not an integer (0..65535)");
}

MCD_TEST(config, integer_overflow)
{
    FAILS(ARGV("--port", "99999999999999999999",), ENV(),
          "--port: '99999999999999999999' is out of range (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV("--threads", "-99999999999999999999",), ENV(), "is out of range (1..256)");
}

MCD_TEST(config, integer_empty)
{
    FAILS(ARGV("--port=",), ENV(), "--port: '' is not an integer (0..65535)");
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_QUEUE_SIZE=",), "MINICPMD_QUEUE_SIZE: '' is not an integer");
}

MCD_TEST(config, integer_trailing_garbage)
{
    char *bad[] = { "80x", "8 0", " 80", "80 ", "0x50", "8.0", "+", "-" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--port", bad[i],), ENV(), "is not an integer (0..65535)");
        cfg_free(&cfg);
    }
}

MCD_TEST(config, integer_bounds_each)
{
    FAILS(ARGV("--threads", "0",), ENV(), "--threads: '0' is out of range (1..256)");
    cfg_free(&cfg);
    FAILS(ARGV("--queue-size", "4097",), ENV(), "(1..4096)");
    cfg_free(&cfg);
    FAILS(ARGV("--max-connections", "10001",), ENV(), "(1..10000)");
    cfg_free(&cfg);
    FAILS(ARGV("--timeout", "86401",), ENV(), "(0..86400)");
    cfg_free(&cfg);
    FAILS(ARGV("--shutdown-timeout", "3601",), ENV(), "(0..3600)");
    cfg_free(&cfg);
    FAILS(ARGV("--ctx-size", "1048577",), ENV(), "(0..1048576)");
    cfg_free(&cfg);
    OK(ARGV("--port", "0", "--timeout", "0", "--ctx-size", "1048576",), ENV());
    cr_assert_eq(cfg.port, 0);
}

MCD_TEST(config, runlist_layers)
{
    OK(ARGV("--runlist-layers", "all",), ENV());
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_ALL);
    cfg_free(&cfg);
    OK(ARGV(), ENV("MINICPMD_RUNLIST_LAYERS=6",));
    cr_assert_eq(cfg.runlist_layers, 6);
    cfg_free(&cfg);
    OK(ARGV("--runlist-layers=auto",), ENV("MINICPMD_RUNLIST_LAYERS=6",));
    cr_assert_eq(cfg.runlist_layers, CFG_RUNLIST_AUTO);
    cfg_free(&cfg);
    OK(ARGV("--config", tmp_file("{\"runlist_layers\": 1024}"),), ENV());
    cr_assert_eq(cfg.runlist_layers, 1024);
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "0",), ENV(), "'0' is out of range (auto|all|1..1024)");
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "1025",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--runlist-layers", "some",), ENV(),
          "--runlist-layers: 'some' is not one of auto|all|1..1024");
}

/* ---- sizes ---------------------------------------------------------------- */

MCD_TEST(config, size_suffixes)
{
    static const struct { char *in; size_t out; } ok[] = {
        { "1024", 1024 }, { "16K", 16 << 10 }, { "4k", 4 << 10 }, { "2M", 2 << 20 },
        { "1G", 1 << 30 }, { "1MiB", 1 << 20 }, { "3m", 3 << 20 },
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        OK(ARGV("--max-body-bytes", ok[i].in,), ENV());
        cr_assert_eq(cfg.max_body_bytes, ok[i].out, "%s", ok[i].in);
        cfg_free(&cfg);
    }
    OK(ARGV("--config", tmp_file("{\"max-body-bytes\": 4096}"),), ENV());
    cr_assert_eq(cfg.max_body_bytes, 4096);
}

MCD_TEST(config, bad_sizes)
{
    char *bad[] = { "8X", "8MB", "K", "-1", "1.5M", "", "8 M" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--max-body-bytes", bad[i],), ENV(), "--max-body-bytes: '",
              "is not a size (1024..1073741824 bytes; suffixes K, M, G)");
        cfg_free(&cfg);
    }
    FAILS(ARGV("--max-body-bytes", "2G",), ENV(), "'2G' is out of range (1024..1073741824)");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "1023",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "99999999999999999999G",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--max-body-bytes", "17179869184G",), ENV(), "out of range");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"max-body-bytes\": 1.5}"),), ENV(),
          "key 'max-body-bytes': expected an integer or a size string", "got a real number");
}

/* ---- enums, bools, strings ------------------------------------------------ */

MCD_TEST(config, bad_enum)
{
    FAILS(ARGV("--device", "gpu",), ENV(), "--device: 'gpu' is not one of auto|cpu|sim|xrt");
    cfg_free(&cfg);
    char *f = tmp_file("{\"device\": \"gpu\"}");
    FAILS(ARGV("--config", f,), ENV(),
          S("config file %s: key 'device': 'gpu' is not one of auto|cpu|sim|xrt", f));
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_LOG_LEVEL=trace",),
          "MINICPMD_LOG_LEVEL: 'trace' is not one of error|warn|info|debug");
    cfg_free(&cfg);
    FAILS(ARGV("--log-format", "xml",), ENV(), "is not one of text|json");
}

MCD_TEST(config, bad_bool)
{
    FAILS(ARGV(), ENV("MINICPMD_CHECK=maybe",),
          "MINICPMD_CHECK: 'maybe' is not a boolean (true|false|1|0|yes|no)");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"check\": \"yes\"}"),), ENV(),
          "key 'check': expected true or false, got a string");
}

MCD_TEST(config, hosts)
{
    char *good[] = { "::", "::1", "0.0.0.0", "localhost", "192.168.1.20",
                           "fe80::1", "my-host.example.com" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        OK(ARGV("--host", good[i],), ENV());
        cr_assert_str_eq(cfg.host, good[i]);
        cfg_free(&cfg);
    }
    FAILS(ARGV("--host", "999.1.1.1",), ENV(), "--host: '999.1.1.1' is not a valid IPv4 address");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "[::1]",), ENV(), "is not a valid IPv6 address");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "bad host",), ENV(), "'bad host' is not an IP address or a host name");
    cfg_free(&cfg);
    FAILS(ARGV("--host", "-bad.example",), ENV(), "is not an IP address or a host name");
    cfg_free(&cfg);
    FAILS(ARGV("--host=",), ENV(), "--host: empty value");
}

MCD_TEST(config, empty_strings_rejected)
{
    FAILS(ARGV(), ENV("MINICPMD_MODEL=",), "MINICPMD_MODEL: empty value");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"log-file\": \"\"}"),), ENV(),
          "key 'log-file': empty value");
}

MCD_TEST(config, message_is_one_line_even_with_control_bytes)
{
    FAILS(ARGV("--device", "gp\nu",), ENV(), "'gp?u' is not one of");
}

/* ---- cors ----------------------------------------------------------------- */

MCD_TEST(config, cors_flags_accumulate)
{
    OK(ARGV("--cors-origin", "http://localhost:3000", "--cors-origin=https://a.example",),
       ENV("MINICPMD_CORS_ORIGIN=http://env.example",));
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[0], "http://localhost:3000");
    cr_assert_str_eq(cfg.cors_origins[1], "https://a.example");
    cr_assert_null(cfg.cors_origins[2]);
}

MCD_TEST(config, cors_later_source_replaces)
{
    char *f = tmp_file("{\"cors-origin\": [\"http://a.example\", \"http://b.example:8080\"]}");
    OK(ARGV("--config", f,), ENV());
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[1], "http://b.example:8080");
    cfg_free(&cfg);

    OK(ARGV("--config", f,), ENV("MINICPMD_CORS_ORIGIN=http://c.example, http://[::1]:9",));
    cr_assert_eq(cfg.n_cors_origins, 2);
    cr_assert_str_eq(cfg.cors_origins[0], "http://c.example");
    cr_assert_str_eq(cfg.cors_origins[1], "http://[::1]:9");
    cfg_free(&cfg);

    OK(ARGV("--config", f, "--cors-origin", "*",), ENV("MINICPMD_CORS_ORIGIN=http://c.example",));
    cr_assert_eq(cfg.n_cors_origins, 1);
    cr_assert_str_eq(cfg.cors_origins[0], "*");
    cfg_free(&cfg);

    /* An empty value turns CORS off again. */
    OK(ARGV("--config", f,), ENV("MINICPMD_CORS_ORIGIN=",));
    cr_assert_eq(cfg.n_cors_origins, 0);
    cr_assert_null(cfg.cors_origins[0]);
    cfg_free(&cfg);

    OK(ARGV("--config", tmp_file("{\"cors_origin\": \"https://x.example\"}"),), ENV());
    cr_assert_eq(cfg.n_cors_origins, 1);
    cr_assert_str_eq(cfg.cors_origins[0], "https://x.example");
}

MCD_TEST(config, bad_cors_origin)
{
    char *bad[] = { "example.com", "http://x.example/", "http://x.example:99999",
                          "http//x", "http://", "http://x.example:", "://x", "http://[zz]" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        FAILS(ARGV("--cors-origin", bad[i],), ENV(), "--cors-origin: '",
              "is not an origin (scheme://host[:port] or *)");
        cfg_free(&cfg);
    }
    FAILS(ARGV(), ENV("MINICPMD_CORS_ORIGIN=http://a,,http://b",),
          "MINICPMD_CORS_ORIGIN: 'http://a,,http://b' has an empty or overlong item");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"cors-origin\": [\"http://a\", 3]}"),), ENV(),
          "key 'cors-origin': item 1: expected a string, got an integer");
    cfg_free(&cfg);
    FAILS(ARGV("--config", tmp_file("{\"cors-origin\": {}}"),), ENV(),
          "expected a string or an array of strings, got an object");
}

/* ---- api key -------------------------------------------------------------- */

MCD_TEST(config, api_key_file_is_read_and_trimmed)
{
    char *k = tmp_file("s3cret\n");
    OK(ARGV("--api-key-file", k,), ENV());
    cr_assert_str_eq(cfg.api_key, "s3cret");
    cfg_free(&cfg);
    k = tmp_file("s3cret\r\n");
    OK(ARGV(), ENV(S("MINICPMD_API_KEY_FILE=%s", k),));
    cr_assert_str_eq(cfg.api_key, "s3cret");
}

/* HTTP strips blanks around a header value, so a key with one
 * could never match; refused at startup with a line that does not echo it. */
MCD_TEST(config, api_key_surrounding_space_refused)
{
    FAILS(ARGV("--api-key", " leading",), ENV(), "--api-key: the value starts or ends with a space");
    cr_assert_null(strstr(err, "leading"));
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_API_KEY=trailing ",), "starts or ends with a space");
    cfg_free(&cfg);
    char *k = tmp_file("s3cret \n");
    FAILS(ARGV("--api-key-file", k,), ENV(), "--api-key-file: the key in", "starts or ends with a space");
    cfg_free(&cfg);
    k = tmp_file(" s3cret\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), "starts or ends with a space");
    cfg_free(&cfg);
    k = tmp_file("s3cret\n\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), "contains control characters");
}

MCD_TEST(config, api_key_and_file_conflict)
{
    char *k = tmp_file("s3cret\n");
    FAILS(ARGV("--api-key", "x", "--api-key-file", k,), ENV(),
          "api-key and api-key-file cannot both be given");
    cfg_free(&cfg);
    char *f = tmp_file(S("{\"api-key\": \"a\", \"api-key-file\": \"%s\"}", k));
    FAILS(ARGV("--config", f,), ENV(), S("config file %s: api-key and api-key-file", f));
    cfg_free(&cfg);
    FAILS(ARGV(), ENV("MINICPMD_API_KEY=a", S("MINICPMD_API_KEY_FILE=%s", k),),
          "environment: api-key and api-key-file");
}

MCD_TEST(config, api_key_stronger_layer_wins)
{
    char *k = tmp_file("fromfile\n");
    OK(ARGV("--api-key-file", k,), ENV("MINICPMD_API_KEY=fromenv",));
    cr_assert_str_eq(cfg.api_key, "fromfile");
    cfg_free(&cfg);
    /* The losing file is never read, so it may be missing. */
    OK(ARGV("--api-key", "fromflag",), ENV("MINICPMD_API_KEY_FILE=/nonexistent/key",));
    cr_assert_str_eq(cfg.api_key, "fromflag");
}

MCD_TEST(config, api_key_file_unreadable)
{
    FAILS(ARGV("--api-key-file", "/nonexistent/key",), ENV(),
          "--api-key-file: cannot read '/nonexistent/key': No such file or directory");
    cfg_free(&cfg);
    FAILS(ARGV("--api-key-file", tmp,), ENV(), "--api-key-file: cannot read",
          "a directory, not a regular file");
    cfg_free(&cfg);
    /* A FIFO or a device is refused at once, never read (a FIFO
     * without a writer hung startup). */
    char *fifo = S("%s/key.fifo", tmp);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    FAILS(ARGV("--api-key-file", fifo,), ENV(), "--api-key-file: cannot read",
          "a FIFO, not a regular file");
    cfg_free(&cfg);
    FAILS(ARGV("--api-key-file", "/dev/zero",), ENV(), "a character device, not a regular file");
    cfg_free(&cfg);
    if (geteuid() != 0) {
        char *k = tmp_file("x\n");
        chmod(k, 0);
        FAILS(ARGV("--api-key-file", k,), ENV(), "cannot read", "Permission denied");
    }
}

MCD_TEST(config, api_key_file_empty)
{
    char *k = tmp_file("\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), S("--api-key-file: '%s' is empty", k));
    cfg_free(&cfg);
    k = tmp_file("a\nb\n");
    FAILS(ARGV("--api-key-file", k,), ENV(), "contains control characters");
}

MCD_TEST(config, api_key_never_echoed)
{
    FAILS(ARGV("--api-key", "sec\tret",), ENV(), "--api-key: the value contains control");
    cr_assert_null(strstr(err, "sec"));
}
