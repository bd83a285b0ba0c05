/* server/router: exact and {id} routes, 404, 405 with Allow, HEAD as GET. */
#include "server/router.h"

#include "tests/check.h"
#include <string.h>

static int h(struct srv_request *req, struct srv_response *resp) { return 0; }

static const struct srv_route routes[] = {
    {"GET", "/health", "/health", true, h, NULL},
    {"GET", "/v1/models", "/v1/models", false, h, NULL},
    {"GET", "/v1/models/{id}", "/v1/models/{id}", false, h, NULL},
    {"POST", "/v1/chat/completions", "/v1/chat/completions", false, h, NULL},
    {"GET", "/v1/chat/completions", "/v1/chat/completions", false, h, NULL},
};
#define N (sizeof routes / sizeof *routes)

MCD_TEST(router, exact_match)
{
    const struct srv_route *r;
    const char *param;
    char allow[64];
    cr_assert_eq(srv_router_match(routes, N, "GET", "/health", &r, &param, allow, sizeof allow),
                 SRV_MATCH_OK);
    cr_assert_eq(r, &routes[0]);
    cr_assert_null(param);
}

MCD_TEST(router, head_is_get)
{
    const struct srv_route *r;
    const char *param;
    cr_assert_eq(srv_router_match(routes, N, "HEAD", "/v1/models", &r, &param, NULL, 0),
                 SRV_MATCH_OK);
    cr_assert_eq(r, &routes[1]);
}

MCD_TEST(router, param_takes_rest_of_path)
{
    const struct srv_route *r;
    const char *param;
    cr_assert_eq(srv_router_match(routes, N, "GET", "/v1/models/minicpm5:2b", &r, &param, NULL, 0),
                 SRV_MATCH_OK);
    cr_assert_eq(r, &routes[2]);
    cr_assert_str_eq(param, "minicpm5:2b");
    cr_assert_eq(srv_router_match(routes, N, "GET", "/v1/models/openbmb/MiniCPM5-2B", &r, &param,
                                  NULL, 0),
                 SRV_MATCH_OK);
    cr_assert_str_eq(param, "openbmb/MiniCPM5-2B");
}

MCD_TEST(router, empty_param_is_not_found)
{
    const struct srv_route *r;
    const char *param;
    cr_assert_eq(srv_router_match(routes, N, "GET", "/v1/models/", &r, &param, NULL, 0),
                 SRV_MATCH_NOT_FOUND);
}

MCD_TEST(router, not_found)
{
    const struct srv_route *r;
    const char *param;
    cr_assert_eq(srv_router_match(routes, N, "GET", "/nope", &r, &param, NULL, 0),
                 SRV_MATCH_NOT_FOUND);
    cr_assert_null(r);
    cr_assert_eq(srv_router_match(routes, N, "GET", "/healthz", &r, &param, NULL, 0),
                 SRV_MATCH_NOT_FOUND);
    cr_assert_eq(srv_router_match(routes, N, "GET", "", &r, &param, NULL, 0),
                 SRV_MATCH_NOT_FOUND);
}

MCD_TEST(router, method_not_allowed_lists_allow)
{
    const struct srv_route *r;
    const char *param;
    char allow[64];
    cr_assert_eq(srv_router_match(routes, N, "POST", "/health", &r, &param, allow, sizeof allow),
                 SRV_MATCH_METHOD_NOT_ALLOWED);
    cr_assert_str_eq(allow, "GET, HEAD, OPTIONS");
    cr_assert(r->is_public, "the path's route tells the caller it is public");
    cr_assert_eq(srv_router_match(routes, N, "DELETE", "/v1/chat/completions", &r, &param, allow,
                                  sizeof allow),
                 SRV_MATCH_METHOD_NOT_ALLOWED);
    cr_assert_str_eq(allow, "POST, GET, HEAD, OPTIONS");
}

MCD_TEST(router, allow_is_truncated_safely)
{
    char allow[8];
    cr_assert(srv_router_path_known(routes, N, "/v1/chat/completions", allow, sizeof allow));
    cr_assert_lt(strlen(allow), sizeof allow);
}

MCD_TEST(router, method_case_matters)
{
    const struct srv_route *r;
    const char *param;
    char allow[64];
    /* HTTP methods are case-sensitive (RFC 9110 §9.1). */
    cr_assert_eq(srv_router_match(routes, N, "get", "/health", &r, &param, allow, sizeof allow),
                 SRV_MATCH_METHOD_NOT_ALLOWED);
}
