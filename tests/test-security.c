/* server/security: API keys and CORS origins. */
#include "server/security.h"

#include "tests/check.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

MCD_TEST(auth, bearer_and_x_api_key)
{
    cr_assert_str_eq(srv_auth_presented_key("Bearer abc", NULL), "abc");
    cr_assert_str_eq(srv_auth_presented_key("bearer   abc", NULL), "abc");
    cr_assert_str_eq(srv_auth_presented_key("  BEARER\tabc", "x"), "abc");
    cr_assert_str_eq(srv_auth_presented_key(NULL, "xyz"), "xyz");
    /* Another scheme is not a key; fall back to X-Api-Key. */
    cr_assert_str_eq(srv_auth_presented_key("Basic Zm9vOmJhcg==", "k"), "k");
    cr_assert_null(srv_auth_presented_key("Basic Zm9vOmJhcg==", NULL));
    cr_assert_null(srv_auth_presented_key("Bearerabc", NULL));
    cr_assert_null(srv_auth_presented_key(NULL, NULL));
}

MCD_TEST(auth, matches)
{
    cr_assert(srv_auth_key_matches("s3cret", "s3cret"));
    cr_assert_not(srv_auth_key_matches("s3cret", "s3creT"));
    cr_assert_not(srv_auth_key_matches("s3cret", "s3cre"));
    cr_assert_not(srv_auth_key_matches("s3cret", "s3crets"));
    cr_assert_not(srv_auth_key_matches("s3cret", "s3crets3cret"), "repeats of the key");
    cr_assert_not(srv_auth_key_matches("s3cret", ""));
    cr_assert_not(srv_auth_key_matches("s3cret", NULL));
    cr_assert_not(srv_auth_key_matches(NULL, "x"));
    cr_assert_not(srv_auth_key_matches("", ""));
}

/* The comparison must not stop at the first difference: an early-exit compare of
 * a 4 KiB key differs ~1000x between "first byte wrong" and "last byte wrong".
 * Timing is noisy, and a loaded machine preempts any sample, so the two guesses
 * are timed alternately (both see the same clock speed and load) and each keeps
 * its fastest round: preemption only ever makes a round slower, so the minimum is
 * the cost of the compare itself, and a 4x margin still catches an early exit. */
static double round_ns(const char *key, const char *guess)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < 200; i++)
        (void)srv_auth_key_matches(key, guess);
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
}

MCD_TEST(auth, compare_time_does_not_depend_on_the_first_difference)
{
    enum { LEN = 4096 };
    char *key = malloc(LEN + 1), *early = malloc(LEN + 1), *late = malloc(LEN + 1);
    memset(key, 'k', LEN);
    key[LEN] = '\0';
    memcpy(early, key, LEN + 1);
    memcpy(late, key, LEN + 1);
    early[0] = 'x';
    late[LEN - 1] = 'x';
    double te = 1e300, tl = 1e300;
    for (int r = 0; r < 101; r++) {
        double e = round_ns(key, early), l = round_ns(key, late);
        te = e < te ? e : te;
        tl = l < tl ? l : tl;
    }
    double ratio = te > tl ? te / tl : tl / te;
    cr_assert_lt(ratio, 4.0, "early %.0f ns vs late %.0f ns (fastest rounds)", te, tl);
    free(key);
    free(early);
    free(late);
}

MCD_TEST(cors, origins)
{
    char *list[] = {"http://localhost:3000", "https://webui.example/"};
    cr_assert(srv_cors_origin_allowed(list, 2, "http://localhost:3000"));
    cr_assert(srv_cors_origin_allowed(list, 2, "https://webui.example"), "trailing / ignored");
    cr_assert_not(srv_cors_origin_allowed(list, 2, "http://localhost:3001"));
    cr_assert_not(srv_cors_origin_allowed(list, 2, "http://localhost:300"));
    cr_assert_not(srv_cors_origin_allowed(list, 2, "http://evil.example"));
    cr_assert_not(srv_cors_origin_allowed(list, 2, "null"));
    cr_assert_not(srv_cors_origin_allowed(list, 2, ""));
    cr_assert_not(srv_cors_origin_allowed(list, 2, NULL));
    cr_assert_not(srv_cors_origin_allowed(NULL, 0, "http://localhost:3000"), "none configured");
    char *any[] = {"*"};
    cr_assert(srv_cors_origin_allowed(any, 1, "http://whatever:1"));
}

MCD_TEST(host, loopback_names)
{
    char *extra[] = {"my.box"};
    const char *ok[] = {"localhost", "localhost:8001", "LOCALHOST:1", "127.0.0.1",
                        "127.0.0.1:8001", "127.1.2.3", "[::1]", "[::1]:8001", "my.box",
                        "My.Box:80", "10.0.0.5", "10.0.0.5:8001", "localhost:"};
    const char *bad[] = {"attacker.example", "attacker.example:8001", "", ":8001",
                         "localhost.attacker.example", "[::1", "::1", "[::2]:1",
                         "localhost:80x", "localhost:123456", "127.0.0.1 x", "[]",
                         "my.box.evil", "10.0.0.50"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        cr_assert(srv_host_allowed(ok[i], "10.0.0.5", extra, 1), "%s", ok[i]);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_not(srv_host_allowed(bad[i], "10.0.0.5", extra, 1), "%s", bad[i]);
    cr_assert_not(srv_host_allowed(NULL, "10.0.0.5", extra, 1));
    cr_assert(srv_host_allowed("[::1]", NULL, NULL, 0));
    cr_assert(srv_host_allowed("[fe80::1]:9", "fe80::1", NULL, 0), "an IPv6 --host");
}

MCD_TEST(host, loopback_addresses)
{
    cr_assert(srv_addr_is_loopback("127.0.0.1"));
    cr_assert(srv_addr_is_loopback("127.255.0.9"));
    cr_assert(srv_addr_is_loopback("::1"));
    cr_assert(srv_addr_is_loopback("::ffff:127.0.0.1"));
    cr_assert(srv_addr_is_loopback("localhost"));
    cr_assert_not(srv_addr_is_loopback("0.0.0.0"));
    cr_assert_not(srv_addr_is_loopback("::"));
    cr_assert_not(srv_addr_is_loopback("128.0.0.1"));
    cr_assert_not(srv_addr_is_loopback("::ffff:10.0.0.1"));
    cr_assert_not(srv_addr_is_loopback(NULL));
}

MCD_TEST(content_type, json)
{
    cr_assert(srv_content_type_is_json(NULL), "no header: accepted");
    cr_assert(srv_content_type_is_json("application/json"));
    cr_assert(srv_content_type_is_json("Application/JSON"));
    cr_assert(srv_content_type_is_json("application/json; charset=utf-8"));
    cr_assert(srv_content_type_is_json(" application/json ;charset=utf-8"));
    cr_assert_not(srv_content_type_is_json("application/jsonx"));
    cr_assert_not(srv_content_type_is_json("text/plain"));
    cr_assert_not(srv_content_type_is_json("application/x-www-form-urlencoded"));
    cr_assert_not(srv_content_type_is_json("multipart/form-data; boundary=x"));
    cr_assert_not(srv_content_type_is_json(""));
}

MCD_TEST(origin, same_host)
{
    cr_assert(srv_origin_is_host("http://127.0.0.1:8001", "127.0.0.1:8001"));
    cr_assert(srv_origin_is_host("http://LocalHost:8001", "localhost:8001"));
    cr_assert_not(srv_origin_is_host("http://127.0.0.1:8002", "127.0.0.1:8001"));
    cr_assert_not(srv_origin_is_host("http://evil.example", "127.0.0.1:8001"));
    cr_assert_not(srv_origin_is_host("null", "127.0.0.1:8001"));
    cr_assert_not(srv_origin_is_host("http://x", NULL));
    cr_assert_not(srv_origin_is_host("http://x", ""));
}
