/* router — a plain static table of routes and the matching rules: exact paths, or
 * a final "{id}" segment that takes the rest of the path (model ids contain ':'
 * and may contain '/'). Unknown path -> 404; known path, other method -> 405 with
 * the Allow list. HEAD is answered as GET. */
#ifndef MINICPMD_SERVER_ROUTER_H
#define MINICPMD_SERVER_ROUTER_H

#include <stdbool.h>
#include <stddef.h>

struct srv_request;
struct srv_response;
struct api_err;

/* A handler fills `resp` on the loop thread and returns 0, or returns a negative
 * value if it could not build a response at all (-> 500). */
typedef int (*srv_handler_fn)(struct srv_request *req, struct srv_response *resp);

struct srv_route {
    const char *method;     /* "GET", "POST" */
    const char *path;       /* "/health", or "/v1/models/{id}" */
    const char *name;       /* label for /metrics and logs */
    bool is_public;         /* answered without an API key */
    srv_handler_fn handler;
    /* (optional) The body of the route's errors, whoever refused (the HTTP layer
     * or the handler): malloc'd, NULL when out of memory. NULL: OpenAI's
     * (api_err_body). Anthropic's routes have their own. */
    char *(*error_body)(const struct api_err *e);
};

enum srv_match {
    SRV_MATCH_OK = 0,
    SRV_MATCH_NOT_FOUND,
    SRV_MATCH_METHOD_NOT_ALLOWED,
};

/* Find the route for `method` `path` (path without query string).
 * On SRV_MATCH_OK, *route is set and *param points into `path` at the "{id}" value
 * (NULL for exact routes). On SRV_MATCH_METHOD_NOT_ALLOWED, `allow` receives the
 * methods the path does accept ("GET, HEAD, OPTIONS"). *route is then the first
 * route of that path, so the caller can tell public paths apart. */
enum srv_match srv_router_match(const struct srv_route *routes, size_t n, const char *method,
                                const char *path, const struct srv_route **route,
                                const char **param, char *allow, size_t allow_len);

/* Whether `path` names any route (for CORS preflight and Allow on OPTIONS). */
bool srv_router_path_known(const struct srv_route *routes, size_t n, const char *path,
                           char *allow, size_t allow_len);

#endif
