/* libFuzzer target: raw bytes from a TCP client into the real HTTP layer
 * (libmicrohttpd under the libuv loop, routing, auth, CORS, body limits and the
 * route handlers), as the daemon runs it. Each input is one connection: write,
 * half-close, read until the server closes. */
#include "server/app.h"
#include "server/daemon.h"
#include "server/listen.h"
#include "server/log.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uv_loop_t loop;
static struct srv_app app;
static struct cfg cfg;
static struct cfg_model_location loc;
static int port;

/* A pack with the tests' tiny tokenizer, so /v1/models, /tokenize, /detokenize
 * and /apply-template run their real paths (the last three on the thread pool). */
static void make_pack(char *dir)
{
    static const char config[] =
        "{\"model_type\":\"llama\",\"hidden_size\":64,\"num_hidden_layers\":2,"
        "\"num_attention_heads\":4,\"intermediate_size\":128,\"vocab_size\":320}";
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    fputs(config, f);
    fclose(f);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    f = fopen(path, "w");
    fputs("x", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *out = fopen(path, "w");
    FILE *in = fopen(MCD_TEST_DATA "/tiny-tokenizer.json", "r");
    if (!in || !out)
        abort();
    int c;
    while ((c = fgetc(in)) != EOF)
        fputc(c, out);
    fclose(in);
    fclose(out);
    /* A text-only engine (no device and worker): generation would make every
     * input slow (the chat request parser has its own target), and without a
     * worker /v1/chat/completions answers its 503 path. */
    struct eng_engine_opts o = {.device = NULL};
    if (eng_engine_open(dir, &o, NULL, NULL, &app.eng, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz-http: %s\n", err);
        abort();
    }
}

static void setup(void)
{
    static char *origins[] = {"http://localhost:3000", NULL};
    struct srv_listener lis;
    char err[256];
    srv_log_init(CFG_LOG_ERROR, CFG_LOG_FORMAT_TEXT, NULL); /* no access log per input */
    if (uv_loop_init(&loop) != 0 || srv_listen_open("127.0.0.1", 0, &lis, err, sizeof err) != 0)
        abort();
    port = lis.port;
    static char dir[] = "/tmp/mcd-fuzz-http-XXXXXX";
    if (!mkdtemp(dir))
        abort();
    make_pack(dir);
    loc = (struct cfg_model_location){.source = CFG_MODEL_PATH, .path = dir, .id = "fuzz"};
    cfg.shutdown_grace_s = 1;
    app.cfg = &cfg;
    app.model = &loc;
    app.loop = &loop;
    app.device = "cpu";
    app.state = API_HEALTH_OK;
    app.metrics = srv_metrics_new();
    struct srv_http_config hc = {
        .listen_fd = lis.fd,
        .max_connections = 64,
        .timeout_s = 5,
        .max_body_bytes = 4096,
        .api_key = NULL,
        .cors_origins = origins,
        .n_cors_origins = 1,
        .routes = srv_routes,
        .n_routes = srv_n_routes,
        .app = &app,
        .metrics = app.metrics,
    };
    if (srv_http_start(&loop, &hc, &app.http, err, sizeof err) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!app.http)
        setup();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0)
        abort();
    /* Write while serving, so an input larger than the socket buffers still goes in. */
    size_t off = 0;
    bool closed_w = false, eof = false;
    for (int rounds = 0; rounds < 2000 && !eof; rounds++) {
        uv_run(&loop, UV_RUN_NOWAIT);
        struct pollfd p = {fd, POLLIN | (off < size ? POLLOUT : 0), 0};
        if (poll(&p, 1, 1) < 0)
            break;
        if ((p.revents & POLLOUT) && off < size) {
            ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0)
                off = size; /* the server closed on us; stop writing */
        }
        if (off == size && !closed_w) {
            shutdown(fd, SHUT_WR);
            closed_w = true;
        }
        if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
            char buf[4096];
            ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n <= 0)
                eof = true;
        }
    }
    close(fd);
    for (int i = 0; i < 5; i++)
        uv_run(&loop, UV_RUN_NOWAIT);
    return 0;
}
