#include "server/router.h"

#include <stdio.h>
#include <string.h>

/* Does `path` match the route pattern? A pattern may end in "{id}", which matches
 * one or more characters of the rest of the path (but not an empty id). */
static bool path_matches(const char *pattern, const char *path, const char **param)
{
    const char *brace = strchr(pattern, '{');
    if (!brace) {
        *param = NULL;
        return strcmp(pattern, path) == 0;
    }
    size_t prefix = (size_t)(brace - pattern);
    if (strncmp(pattern, path, prefix) != 0 || path[prefix] == '\0')
        return false;
    *param = path + prefix;
    return true;
}

static void append_method(char *allow, size_t allow_len, const char *m)
{
    if (!allow || !allow_len)
        return;
    /* Skip duplicates: several routes may share a method on one path. */
    size_t mlen = strlen(m);
    for (const char *p = allow; (p = strstr(p, m)) != NULL; p += mlen)
        if ((p == allow || p[-1] == ' ') && (p[mlen] == ',' || p[mlen] == '\0'))
            return;
    size_t used = strlen(allow);
    snprintf(allow + used, allow_len - used, "%s%s", used ? ", " : "", m);
}

bool srv_router_path_known(const struct srv_route *routes, size_t n, const char *path,
                           char *allow, size_t allow_len)
{
    bool known = false;
    const char *param;
    if (allow && allow_len)
        allow[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (!path_matches(routes[i].path, path, &param))
            continue;
        known = true;
        append_method(allow, allow_len, routes[i].method);
        if (strcmp(routes[i].method, "GET") == 0)
            append_method(allow, allow_len, "HEAD");
    }
    if (known)
        append_method(allow, allow_len, "OPTIONS");
    return known;
}

enum srv_match srv_router_match(const struct srv_route *routes, size_t n, const char *method,
                                const char *path, const struct srv_route **route,
                                const char **param, char *allow, size_t allow_len)
{
    const char *want = strcmp(method, "HEAD") == 0 ? "GET" : method;
    const struct srv_route *first = NULL;
    *route = NULL;
    *param = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        if (!path_matches(routes[i].path, path, &p))
            continue;
        if (!first)
            first = &routes[i];
        if (strcmp(routes[i].method, want) == 0) {
            *route = &routes[i];
            *param = p;
            return SRV_MATCH_OK;
        }
    }
    if (!first)
        return SRV_MATCH_NOT_FOUND;
    *route = first;
    srv_router_path_known(routes, n, path, allow, allow_len);
    return SRV_MATCH_METHOD_NOT_ALLOWED;
}
