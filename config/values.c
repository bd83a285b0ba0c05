/* values — parsing and checking one setting's value, whatever source it came
 * from. Everything here is strict: a value is accepted whole or not at all, and
 * each refusal says in a few words what would have been accepted.
 */
#include "config/internal.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *cfg__env_get(char *const envp[], const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; envp && envp[i]; i++)
        if (strncmp(envp[i], name, n) == 0 && envp[i][n] == '=')
            return envp[i] + n + 1;
    return NULL;
}

char *cfg__path_join(const char *a, const char *b)
{
    size_t la = strlen(a);
    while (la > 1 && a[la - 1] == '/')
        la--;
    size_t lb = strlen(b), n = la + 1 + lb + 1;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%.*s/%s", (int)la, a, b);
    return s;
}

/* A value quoted in a message: one line, bounded, control bytes shown as '?'. */
const char *cfg__show(const char *v, char *buf, size_t len)
{
    size_t i = 0, max = len - 4;
    for (; v[i] && i < max; i++)
        buf[i] = iscntrl((unsigned char)v[i]) ? '?' : v[i];
    if (v[i]) {
        memcpy(buf + i, "...", 3);
        i += 3;
    }
    buf[i] = '\0';
    return buf;
}

/* ---- value checks --------------------------------------------------------- */

static bool is_hostname(const char *s, size_t len)
{
    if (len == 0 || len > 253)
        return false;
    for (size_t i = 0, label = 0; i < len; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if (isalnum((unsigned char)c) || (c == '-' && label > 0)) {
            if (++label > 63)
                return false;
        } else {
            return false;
        }
    }
    return s[len - 1] != '-';
}

const char *cfg__check_host(const char *s)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, s, buf) == 1 || inet_pton(AF_INET6, s, buf) == 1)
        return NULL;
    if (strchr(s, ':'))
        return "is not a valid IPv6 address (write it without brackets, e.g. ::1)";
    if (strspn(s, "0123456789.") == strlen(s))
        return "is not a valid IPv4 address";
    if (!is_hostname(s, strlen(s)))
        return "is not an IP address or a host name";
    return NULL;
}

/* What a browser sends in Origin: scheme://host[:port], nothing after it. */
const char *cfg__check_origin(const char *s)
{
    static const char *why = "is not an origin (scheme://host[:port] or *)";
    if (strcmp(s, "*") == 0)
        return NULL;
    if (!isalpha((unsigned char)s[0]))
        return why;
    const char *p = s + 1 + strspn(s + 1, "abcdefghijklmnopqrstuvwxyz"
                                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-");
    if (strncmp(p, "://", 3) != 0)
        return why;
    p += 3;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        unsigned char a[sizeof(struct in6_addr)];
        char tmp[INET6_ADDRSTRLEN + 1];
        size_t n = close ? (size_t)(close - p - 1) : 0;
        if (!close || n == 0 || n >= sizeof tmp)
            return why;
        memcpy(tmp, p + 1, n);
        tmp[n] = '\0';
        if (inet_pton(AF_INET6, tmp, a) != 1)
            return why;
        p = close + 1;
    } else {
        size_t n = strcspn(p, ":/?#");
        if (!is_hostname(p, n))
            return why;
        p += n;
    }
    if (*p == ':') {
        size_t n = strspn(p + 1, "0123456789");
        if (n == 0 || n > 5 || p[1 + n] != '\0' || atoi(p + 1) < 1 || atoi(p + 1) > 65535)
            return why;
        return NULL;
    }
    return *p == '\0' ? NULL : why;
}

/* The key travels in an HTTP header, where control bytes cannot, and whose value
 * loses its leading and trailing blanks on the way in (RFC 9110 5.5, OWS): a key
 * that starts or ends with one could never match, a silent lock-out. Refused at
 * startup, not trimmed: the operator's key is not guessed at. */
const char *cfg__check_secret(const char *s)
{
    size_t n = strlen(s);
    if (n && (s[0] == ' ' || s[n - 1] == ' '))
        return "starts or ends with a space (HTTP strips it from the header, so the key "
               "could never match)";
    for (; *s; s++)
        if (iscntrl((unsigned char)*s))
            return "contains control characters";
    return NULL;
}

/* Strict: the whole string is one decimal number. 0 ok, -EINVAL not a number,
 * -ERANGE overflow. */
int cfg__parse_ll(const char *s, long long *out)
{
    const char *d = (s[0] == '-' || s[0] == '+') ? s + 1 : s;
    if (!isdigit((unsigned char)d[0]))
        return -EINVAL;              /* also rejects "", " 1" and "0x" spellings early */
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE)
        return -ERANGE;
    *out = v;
    return 0;
}

/* A byte count with an optional K, M or G (KiB, MiB, GiB) suffix. */
int cfg__parse_size(const char *s, unsigned long long *out)
{
    if (!isdigit((unsigned char)s[0]))
        return -EINVAL;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE)
        return -ERANGE;
    unsigned shift = 0;
    switch (toupper((unsigned char)*end)) {
    case '\0': break;
    case 'K': shift = 10; break;
    case 'M': shift = 20; break;
    case 'G': shift = 30; break;
    default: return -EINVAL;
    }
    if (shift && end[1] != '\0' && strcmp(end + 1, "iB") != 0)
        return -EINVAL;
    if (v > (ULLONG_MAX >> shift))
        return -ERANGE;
    *out = v << shift;
    return 0;
}

int cfg__parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "true", "1", "yes", "on", NULL };
    static const char *const no[] = { "false", "0", "no", "off", NULL };
    for (int i = 0; yes[i]; i++) {
        if (strcasecmp(s, yes[i]) == 0 || strcasecmp(s, no[i]) == 0) {
            *out = strcasecmp(s, yes[i]) == 0;
            return 0;
        }
    }
    return -EINVAL;
}

/* "auto|cpu|sim|xrt" */
const char *cfg__join_names(const char *const *names, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? "|" : "", names[i]);
    return buf;
}

/* The accepted values of an int or size entry, for messages and --help. */
const char *cfg__accepted(const struct cfg__entry *e, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (const struct cfg__keyword *k = e->keywords; k && k->name && n < len; k++)
        n += (size_t)snprintf(buf + n, len - n, "%s|", k->name);
    if (n < len)
        snprintf(buf + n, len - n, "%lld..%lld", e->min, e->max);
    return buf;
}
