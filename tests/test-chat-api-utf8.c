/* Invalid bytes read the same in the streamed text and in the logprobs: tokens
 * whose bytes are not UTF-8 go through the engine's detokenizer and the chat run
 * (api/chat-run.c), streamed and not, and each logprob's `token` is the text its
 * bytes got in the content: one U+FFFD per maximal invalid subpart (util/utf8.h)
 * in both places, never one per byte in one and per sequence in the other. */
#include "api/chat-run.h"
#include "engine/tokenizer.h"
#include "tests/chat-api-fx.h"
#include "tests/check.h"
#include "util/buf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define R "\xEF\xBF\xBD"

/* Extra tokens of the fixture, in the byte-level alphabet of tokenizer.json (GPT-2's
 * byte <-> character map): a cut 3-byte character, a cut 4-byte one, an overlong
 * pair, a surrogate. */
static const struct {
    int id;
    const char *vocab;      /* as tokenizer.json spells it */
    const char *bytes;
    const char *text;       /* what the content shows for it, alone */
} extra[] = {
    {400, "\xC3\xA2\xC4\xA4", "\xE2\x82", R},                       /* "âĤ" = E2 82 */
    {401, "\xC3\xB0\xC5\x81\xC4\xBA", "\xF0\x9F\x98", R},           /* "ðŁĺ" = F0 9F 98 */
    {402, "\xC3\x80\xC2\xAF", "\xC0\xAF", R R},                     /* "À¯" = C0 AF */
    {403, "\xC3\xAD\xC5\x82\xC4\xA4", "\xED\xA0\x82", R R R},       /* "íłĤ" = ED A0 82 */
};
#define N_EXTRA (sizeof extra / sizeof extra[0])

static eng_tokenizer *load_fixture(void)
{
    const char *file = __FILE__, *slash = strrchr(file, '/');
    char path[4096], err[512] = "";
    snprintf(path, sizeof path, "%.*s/data/tiny-tokenizer.json", (int)(slash - file), file);
    json_t *root = json_load_file(path, 0, NULL);
    cr_assert_not_null(root, "%s", path);
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    for (size_t i = 0; i < N_EXTRA; i++)
        json_object_set_new(vocab, extra[i].vocab, json_integer(extra[i].id));
    char tmp[] = "/tmp/mcd-utf8tok-XXXXXX";
    int fd = mkstemp(tmp);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(json_dump_file(root, tmp, 0), 0);
    json_decref(root);
    eng_tokenizer *t = NULL;
    int rc = eng_tokenizer_load(tmp, &t, err, sizeof err);
    unlink(tmp);
    cr_assert_eq(rc, 0, "%s", err);
    for (size_t i = 0; i < N_EXTRA; i++) {
        const char *b;
        size_t n = eng_tokenizer_token_bytes(t, extra[i].id, false, &b);
        cr_assert(n == strlen(extra[i].bytes) && memcmp(b, extra[i].bytes, n) == 0,
                  "fixture token %d", extra[i].id);
    }
    return t;
}

struct sink_state {
    ut_buf frames;       /* a stream's frames, concatenated */
    char *body;          /* a non-streamed answer */
};

static void on_frame(void *ctx, char *frame)
{
    struct sink_state *s = ctx;
    ut_buf_adds(&s->frames, frame);
    free(frame);
}

static void on_answer(void *ctx, int status, char *body, const char *retry_after)
{
    (void)retry_after;
    struct sink_state *s = ctx;
    cr_assert_eq(status, 200, "%s", body ? body : "(null)");
    s->body = body;
}

/* Run ids through the detokenizer into a chat run, as the worker and server/chat.c
 * do; the sink gets the stream's frames or the answer. */
static void run(const eng_tokenizer *t, const int32_t *ids, int n, bool stream,
                struct sink_state *out)
{
    struct api_chat_req *req = ok(stream ? BODY(",\"logprobs\":true,\"stream\":true")
                                         : BODY(",\"logprobs\":true"));
    struct api_chat_ident ci;
    api_chat_ident_init(&ci, "m", "0.1.0", "cpu", false);
    struct api_chat_sink sink = {.frame = on_frame, .answer = on_answer, .ctx = out};
    api_chat_run *c = api_chat_run_new(req, &ci, t, false, &sink);
    cr_assert_not_null(c);
    api_chat_run_start(c);
    eng_detok *d = eng_detok_new(t, true, NULL, 0);
    cr_assert_not_null(d);
    for (int i = 0; i < n; i++) {
        char *text = NULL;
        bool stopped = false;
        int len = eng_detok_push(d, ids[i], &text, &stopped);
        cr_assert_geq(len, 0);
        struct eng_token_event ev = {.id = ids[i], .text = text ? text : "",
                                     .text_len = (size_t)len, .index = i,
                                     .has_logprob = true, .logprob = -0.5f};
        api_chat_run_token(c, &ev, ev.text);
        free(text);
    }
    char *tail = NULL;
    int len = eng_detok_flush(d, &tail);
    cr_assert_geq(len, 0);
    struct eng_done_event done = {.finish = ENG_FINISH_LENGTH, .text = tail ? tail : "",
                                  .text_len = (size_t)len, .completion_tokens = n};
    api_chat_run_done(c, &done, done.text);
    free(tail);
    eng_detok_free(d);
    api_chat_run_free(c);
    api_chat_req_free(req);
}

/* The content and the logprob tokens, concatenated, of an answer or a stream. */
static void collect(json_t *choice, bool delta, ut_buf *content, ut_buf *tokens)
{
    const char *c = sget(json_object_get(choice, delta ? "delta" : "message"), "content");
    if (c)
        ut_buf_adds(content, c);
    json_t *lp = json_object_get(json_object_get(choice, "logprobs"), "content");
    size_t i;
    json_t *e;
    json_array_foreach(lp, i, e) ut_buf_adds(tokens, sget(e, "token"));
}

MCD_TEST(chat_utf8, logprob_tokens_read_as_the_content)
{
    eng_tokenizer *t = load_fixture();
    int32_t x = eng_tokenizer_token_id(t, "x");
    cr_assert_geq(x, 0);
    /* Each invalid token is followed by one that cannot continue it, so no
     * character spans two tokens: the content is the tokens' texts in a row. */
    const int32_t ids[] = {400, x, 401, x, 402, 403, x, 400};
    const int n = (int)(sizeof ids / sizeof ids[0]);
    ut_buf want = {0};
    for (int i = 0; i < n; i++) {
        if (ids[i] == x) {
            ut_buf_adds(&want, "x");
            continue;
        }
        for (size_t k = 0; k < N_EXTRA; k++)
            if (extra[k].id == ids[i])
                ut_buf_adds(&want, extra[k].text);
    }

    for (int stream = 0; stream <= 1; stream++) {
        struct sink_state s = {0};
        run(t, ids, n, stream, &s);
        ut_buf content = {0}, tokens = {0};
        if (!stream) {
            json_t *o = parse_str(s.body);
            collect(json_array_get(json_object_get(o, "choices"), 0), false, &content, &tokens);
            json_decref(o);
        } else {
            cr_assert_not_null(s.frames.p);
            char *p = s.frames.p, *end;
            while ((p = strstr(p, "data: ")) != NULL && (end = strstr(p, "\n\n")) != NULL) {
                if (strncmp(p, "data: [DONE]", 12) != 0) {
                    *end = '\0';
                    json_t *ev = load(p + 6);
                    json_t *ch = json_array_get(json_object_get(ev, "choices"), 0);
                    if (ch)
                        collect(ch, true, &content, &tokens);
                    json_decref(ev);
                }
                p = end + 2;
            }
            ut_buf_free(&s.frames);
        }
        cr_assert_str_eq(content.p ? content.p : "", want.p, "content (stream %d)", stream);
        cr_assert_str_eq(tokens.p ? tokens.p : "", want.p, "logprob tokens (stream %d)", stream);
        ut_buf_free(&content);
        ut_buf_free(&tokens);
    }
    ut_buf_free(&want);
    eng_tokenizer_free(t);
}
