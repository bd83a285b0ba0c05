#include "server/security.h"

#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

const char *srv_auth_presented_key(const char *authorization, const char *x_api_key)
{
    if (authorization) {
        const char *p = authorization;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncasecmp(p, "Bearer", 6) == 0 && (p[6] == ' ' || p[6] == '\t')) {
            p += 6;
            while (*p == ' ' || *p == '\t')
                p++;
            return p;
        }
    }
    return x_api_key;
}

bool srv_auth_key_matches(const char *expected, const char *presented)
{
    if (!expected || !presented)
        return false;
    size_t elen = strlen(expected), plen = strlen(presented);
    if (elen == 0)
        return false;
    /* Walk the presented key once; index the secret modulo its length so the loop
     * count and memory pattern do not depend on the secret. */
    volatile uint8_t diff = (uint8_t)(elen != plen);
    for (size_t i = 0; i < plen; i++)
        diff |= (uint8_t)((uint8_t)presented[i] ^ (uint8_t)expected[i % elen]);
    return diff == 0 && plen > 0;
}

bool srv_cors_origin_allowed(char *const *origins, size_t n, const char *origin)
{
    if (!origin || !*origin)
        return false;
    size_t olen = strlen(origin);
    for (size_t i = 0; i < n; i++) {
        const char *o = origins[i];
        if (strcmp(o, "*") == 0)
            return true;
        size_t len = strlen(o);
        if (len > 0 && o[len - 1] == '/')
            len--;
        if (len == olen && memcmp(o, origin, len) == 0)
            return true;
    }
    return false;
}

/* ---- Host, Content-Type, Origin ------------------------------------------------- */

bool srv_addr_is_loopback(const char *addr)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!addr)
        return false;
    if (strcasecmp(addr, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, addr, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, addr, &a6) == 1) {
        if (IN6_IS_ADDR_LOOPBACK(&a6))
            return true;
        return IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127;
    }
    return false;
}

/* The host part of a Host header value into `out` (brackets of an IPv6 literal
 * removed, the port checked and dropped). -EINVAL if malformed. */
static int host_name(const char *host, char *out, size_t outlen)
{
    const char *end;
    const char *p = host;
    if (*p == '[') {
        end = strchr(p, ']');
        if (!end)
            return -EINVAL;
        p++;
    } else {
        end = strchr(p, ':');
        if (!end)
            end = p + strlen(p);
    }
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= outlen)
        return -EINVAL;
    memcpy(out, p, n);
    out[n] = '\0';
    if (*end == ']')
        end++;
    if (*end == ':') {          /* a port: digits only, possibly empty (RFC 3986) */
        end++;
        if (strspn(end, "0123456789") != strlen(end) || strlen(end) > 5)
            return -EINVAL;
    } else if (*end) {
        return -EINVAL;
    }
    return 0;
}

bool srv_host_allowed(const char *host, const char *listen_host, char *const *allowed,
                      size_t n_allowed)
{
    char name[256];
    if (!host || host_name(host, name, sizeof name) != 0)
        return false;
    if (srv_addr_is_loopback(name))
        return true;
    if (listen_host && strcasecmp(name, listen_host) == 0)
        return true;
    for (size_t i = 0; i < n_allowed; i++)
        if (strcasecmp(name, allowed[i]) == 0)
            return true;
    return false;
}

bool srv_content_type_is_json(const char *ct)
{
    static const char json[] = "application/json";
    if (!ct)
        return true;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    if (strncasecmp(ct, json, sizeof json - 1) != 0)
        return false;
    ct += sizeof json - 1;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    return *ct == '\0' || *ct == ';';
}

bool srv_origin_is_host(const char *origin, const char *host)
{
    if (!origin || !host || !*host)
        return false;
    const char *p = strstr(origin, "://");
    if (!p)
        return false;
    p += 3;
    return strcasecmp(p, host) == 0;
}
