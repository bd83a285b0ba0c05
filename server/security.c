#include "server/security.h"

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
