/* What every request's header block must pass before it is routed: message
 * framing (RFC 9112, as nginx enforces it) and who may talk to a loopback
 * listener (Host against DNS rebinding, Origin against cross-site requests).
 *
 * Framing errors leave the connection untrustworthy (where does the body end?),
 * so their answers close it. */
#include "server/http-impl.h"

#include "server/security.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

struct header_scan {
    int n_length, n_encoding, n_host;
    bool hidden;
    const char *encoding;
    const char *prev_end;        /* where the previous value's C string ends */
};

/* libmicrohttpd 0.9.75 parses the header block in place in its read buffer: each
 * line's CR LF (or LF) becomes NUL bytes and the header list points at keys and
 * values there, in order; the values' sizes are strlen()s. So a NUL inside a
 * value ("X-Api-Key: secret\0junk") silently cuts it, and the only trace is
 * the bytes between where that value's string ends and where the next line
 * (the next key) begins: exactly 1 or 2 NULs for an honest line. Anything else
 * is a NUL with bytes after it, or an obsolete folded line (which MHD moves
 * elsewhere); RFC 9112 §5.2 allows a 400 for either. */
static bool line_gap_ok(const char *end, const char *next)
{
    if (next <= end || next - end > 2)
        return false;
    for (const char *p = end; p < next; p++)
        if (*p)
            return false;
    return true;
}

static enum MHD_Result scan_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
    (void)kind;
    struct header_scan *s = cls;
    if (strlen(key) != key_size || (value && strlen(value) != value_size))
        s->hidden = true;
    if (s->prev_end && !line_gap_ok(s->prev_end, key))
        s->hidden = true;
    s->prev_end = value ? value + value_size : NULL;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
        s->n_length++;
    else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0) {
        s->n_encoding++;
        s->encoding = value;
    } else if (strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0)
        s->n_host++;
    return MHD_YES;
}

/* "chunked" alone, any case, surrounding blanks allowed: the only transfer
 * coding libmicrohttpd decodes. */
static bool is_chunked(const char *v)
{
    v += strspn(v, " \t");
    if (strncasecmp(v, "chunked", 7) != 0)
        return false;
    v += 7;
    return v[strspn(v, " \t")] == '\0';
}

static int fail(struct srv_response *resp, bool close, enum api_error e, const char *msg)
{
    srv_response_error(resp, e, NULL, "%s", msg);
    if (close)
        srv_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    return -EINVAL;
}

int srv__request_check(srv_request *req, const char *version, struct srv_response *resp)
{
    const struct srv_http *h = req->http;
    const struct srv_http_config *c = &h->cfg;
    struct header_scan s = {0};
    MHD_get_connection_values_n(req->conn, MHD_HEADER_KIND, scan_header, &s);
    /* The last line is followed by the empty one: at least two NULs. */
    if (s.prev_end && s.prev_end[1] != '\0')
        s.hidden = true;

    /* nginx's ngx_http_request.c: a NUL in a header, a repeated Content-Length,
     * Content-Length beside Transfer-Encoding (request smuggling): 400; a
     * transfer coding it does not know: 501 (RFC 9112 §6.1). */
    if (s.hidden)
        return fail(resp, true, API_ERR_BAD_REQUEST,
                    "a header value contains a NUL byte (or is folded over lines)");
    if (s.n_length > 1)
        return fail(resp, true, API_ERR_BAD_REQUEST, "more than one Content-Length header");
    if (s.n_encoding && s.n_length)
        return fail(resp, true, API_ERR_BAD_REQUEST,
                    "both Content-Length and Transfer-Encoding are present");
    if (s.n_encoding > 1 || (s.encoding && !is_chunked(s.encoding)))
        return fail(resp, true, API_ERR_TRANSFER_ENCODING,
                    "unsupported Transfer-Encoding (only 'chunked' is)");
    /* RFC 9112 §3.2: an HTTP/1.1 request without Host, or with two, is a 400. */
    if (s.n_host > 1 || (s.n_host == 0 && version && strcmp(version, "HTTP/1.0") != 0))
        return fail(resp, false, API_ERR_BAD_REQUEST,
                    s.n_host ? "more than one Host header" : "missing Host header");

    const char *host = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                   MHD_HTTP_HEADER_HOST);
    if (h->loopback && host &&
        !srv_host_allowed(host, c->listen_host, c->allowed_hosts, c->n_allowed_hosts))
        return fail(resp, false, API_ERR_HOST_NOT_ALLOWED,
                    "the Host header does not name this server (add it with --allowed-host)");

    /* A browser sends Origin with every cross-site POST, also the "simple" ones
     * it sends without a preflight (text/plain, forms): those must not run. */
    const char *origin = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, "Origin");
    bool safe = strcmp(req->method, "GET") == 0 || strcmp(req->method, "HEAD") == 0 ||
                strcmp(req->method, "OPTIONS") == 0;
    if (!safe && origin && !srv_origin_is_host(origin, host) &&
        !srv_cors_origin_allowed(c->cors_origins, c->n_cors_origins, origin))
        return fail(resp, false, API_ERR_FORBIDDEN,
                    "requests from this origin are not allowed (configure it with "
                    "--cors-origin)");
    return 0;
}

int srv__request_check_body_type(srv_request *req, struct srv_response *resp)
{
    /* Every POST route takes a JSON object. */
    if (strcmp(req->method, "POST") != 0)
        return 0;
    const char *ct = MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_TYPE);
    if (srv_content_type_is_json(ct))
        return 0;
    return fail(resp, false, API_ERR_MEDIA_TYPE,
                "the body must be JSON: send 'Content-Type: application/json' "
                "(curl: -H 'Content-Type: application/json')");
}
