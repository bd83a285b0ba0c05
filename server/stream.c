/* Streamed answers (Server-Sent Events) on libmicrohttpd 0.9.75.
 *
 * The MHD response is a callback response of unknown size (chunked encoding). When
 * MHD asks for more and nothing is buffered, the reader suspends the connection
 * and returns 0; srv_stream_write() resumes it. This is the library's way to wait
 * for data without a thread per stream and without MHD polling the callback in a
 * busy loop.
 *
 * Ownership: the stream has two owners, the producer (until srv_stream_end) and
 * MHD's response (until its free callback); the last one frees it. The stream
 * holds a reference to its request, which outlives MHD's own. */
#include "api/chat-resp.h"
#include "server/http-impl.h"
#include "util/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct srv_stream {
    srv_request *req;
    char *buf;
    size_t off, len, cap;   /* unread bytes are buf[off .. len) */
    size_t limit;
    int refs;
    bool ended;             /* no more data will come: the reader ends the body */
    bool closed;            /* srv_stream_end ran */
    bool suspended;         /* the reader is waiting for data */
    bool gone;              /* MHD released the response */
};

static void stream_unref(srv_stream *s)
{
    if (--s->refs > 0)
        return;
    srv__request_unref(s->req);
    free(s->buf);
    free(s);
}

static void resume(srv_stream *s)
{
    srv_request *r = s->req;
    if (!s->suspended || s->gone || r->finished || !r->conn)
        return;
    s->suspended = false;
    MHD_resume_connection(r->conn);
    srv__http_kick(r->http);
}

static ssize_t on_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    srv_stream *s = cls;
    size_t avail = s->len - s->off;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, s->buf + s->off, n);
        s->off += n;
        if (s->off == s->len)
            s->off = s->len = 0;
        return (ssize_t)n;
    }
    if (s->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (s->req->finished || !s->req->conn)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    MHD_suspend_connection(s->req->conn);
    s->suspended = true;
    return 0;
}

static void on_free(void *cls)
{
    srv_stream *s = cls;
    s->gone = true;
    stream_unref(s);
}

srv_stream *srv_request_stream(srv_request *r, int status, const char *content_type,
                               size_t limit)
{
    if (r->finished || !r->deferred || r->stream)
        return NULL;
    srv_stream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->req = r;
    s->limit = limit;
    s->refs = 2;
    struct MHD_Response *mr = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024,
                                                                on_read, s, on_free);
    if (!mr) {
        free(s);
        return NULL;
    }
    r->refs++; /* the stream's */
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    /* Reverse proxies (nginx) must pass events on as they come. */
    MHD_add_response_header(mr, "X-Accel-Buffering", "no");
    srv__response_common_headers(r, mr);
    r->stream = s;
    r->pending_stream = mr;
    r->pending.status = status;
    /* Resume: on_access queues the response (srv__stream_queue). The request
     * stays in the deferred list, so a hang-up still cancels the work. */
    MHD_resume_connection(r->conn);
    srv__http_kick(r->http);
    return s;
}

enum MHD_Result srv__stream_queue(srv_request *req)
{
    struct MHD_Response *mr = req->pending_stream;
    int status = req->pending.status;
    req->pending_stream = NULL;
    req->pending.status = 0;
    enum MHD_Result ret = MHD_queue_response(req->conn, (unsigned)status, mr);
    MHD_destroy_response(mr); /* MHD keeps its own reference when queued */
    if (ret == MHD_YES)
        req->status = status;
    return ret;
}

/* Append past the limit: the last words of a stream are never refused. */
static int append(srv_stream *s, const char *data, size_t len)
{
    if (s->len + len > s->cap) {
        if (s->off) { /* reuse the read part first */
            memmove(s->buf, s->buf + s->off, s->len - s->off);
            s->len -= s->off;
            s->off = 0;
        }
        if (ut_grow((void **)&s->buf, &s->cap, s->len + len, 1, 4096))
            return -ENOMEM;
    }
    memcpy(s->buf + s->len, data, len);
    s->len += len;
    return 0;
}

void srv__stream_abort(srv_request *req)
{
    srv_stream *s = req->stream;
    if (!s->ended) {
        /* An error event like every other (api_sse_frame of an error object),
         * then [DONE]: the client sees why the answer stops, never a cut chunk. */
        char *body = api_error_body(API_ERR_SHUTTING_DOWN,
                                    "the server is shutting down: the answer ends here", NULL);
        char *frame = body ? api_sse_frame(body) : NULL;
        if (frame)
            append(s, frame, strlen(frame));
        append(s, API_SSE_DONE, strlen(API_SSE_DONE));
        free(frame);
        free(body);
    }
    s->ended = true;
    s->suspended = false; /* the caller resumes the connection */
}

int srv__stream_probe(srv_request *req)
{
    static const char comment[] = ":\n\n";
    return srv_stream_write(req->stream, comment, sizeof comment - 1);
}

int srv_stream_write(srv_stream *s, const char *data, size_t len)
{
    if (s->ended)
        return s->closed ? -EINVAL : -EPIPE;
    if (s->gone || s->req->finished)
        return -EPIPE;
    if (s->len - s->off + len > s->limit)
        return -ENOBUFS;
    if (append(s, data, len) != 0)
        return -ENOMEM;
    resume(s);
    return 0;
}

void srv_stream_end(srv_stream *s)
{
    if (!s || s->closed)
        return;
    s->closed = s->ended = true;
    srv_request *r = s->req;
    if (!r->finished && r->http)
        srv__deferred_remove(r->http, r);
    resume(s);
    /* The producer's reference from srv_request_defer, then the stream's own. */
    srv__request_unref(r);
    stream_unref(s);
}
