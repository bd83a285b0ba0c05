#!/usr/bin/python3
"""HTTP surface: /health, /v1/models, routing errors, body limits, auth, CORS,
/metrics. Each test starts its own daemon."""

import os
import random
import re
import socket
import string
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import (Daemon, Skip, assert_error_object, check, contains, eq,  # noqa: E402
                     make_pack, pack_daemon, read_http_response, run_main, stop_ok, test,
                     wait_for, wait_ready, write_json)

PACK = "MiniCPM5-2B"
ORIGIN = "http://localhost:3000"


def json_ct(r):
    ct = r.header("content-type") or ""
    check(ct.startswith("application/json"), "Content-Type is %r, want application/json", ct)


# ---- /health --------------------------------------------------------------------


@test
def health_no_model():
    d = Daemon().start()
    r = d.get("/health")
    eq(r.status, 503, "/health status without a model")
    json_ct(r)
    j = r.json()
    eq(j.get("status"), "no_model", "/health status field")
    check("model" not in j, "no model served, yet /health names one: %r", j)
    stop_ok(d)


@test
def health_ok_with_pack():
    d = pack_daemon()
    r = d.get("/health")
    eq(r.status, 200, "/health status")
    json_ct(r)
    j = r.json()
    eq(j.get("status"), "ok", "status")
    eq(j.get("model"), PACK, "model (the pack directory's basename)")
    check(r.header("retry-after") is None, "Retry-After on a 200: %r", r)
    stop_ok(d)


@test
def health_loading_sequence():
    """The load gate holds the loader back, so LOADING is observable."""
    d = pack_daemon(gate=True)
    try:
        wait_for(d.gate.reader_waiting, 5, "the loader to be held at the gate")
        r = d.get("/health")
        eq(r.status, 503, "/health while loading")
        json_ct(r)
        j = r.json()
        eq(j.get("status"), "loading", "/health status while loading")
        eq(j.get("model"), PACK, "/health model while loading")
        check(r.header("retry-after") is not None, "503 loading lacks Retry-After: %r", r)
        check(r.header("retry-after").isdigit(), "Retry-After is not seconds: %r",
              r.header("retry-after"))

        r = d.get("/v1/models")
        eq(r.status, 200, "/v1/models while loading")
        j = r.json()
        eq(len(j["data"]), 1, "models listed while loading")
        m = j["data"][0]
        eq(m["id"], PACK, "id")
        eq(m.get("status"), "loading", "model status while loading")
        check("meta" in m, "model lacks 'meta' while loading: %r", m)
        eq(m["meta"], None, "meta while loading")

        r = d.get("/v1/models/" + PACK)
        eq(r.status, 200, "/v1/models/{id} while loading")
        eq(r.json().get("status"), "loading", "model status while loading")
        check(re.search(r'^minicpmd_model_state\{state="loading"\} 1$', d.metrics(), re.M),
              "/metrics does not say loading")
    finally:
        d.gate.release()
    wait_ready(d, 5)
    j = d.get("/health").json()
    eq(j.get("status"), "ok", "/health after loading")
    m = d.get("/v1/models").json()["data"][0]
    eq(m.get("status"), "ready", "model status after loading")
    check(isinstance(m.get("meta"), dict), "meta after loading: %r", m)
    stop_ok(d)


@test
def health_head():
    d = pack_daemon()
    r = d.head("/health")
    eq(r.status, 200, "HEAD /health status")
    json_ct(r)
    # No body on the wire: the connection closes right after the head.
    raw = d.raw(b"HEAD /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    check(raw.startswith(b"HTTP/1.1 200"), "raw HEAD /health: %r", raw)
    head, sep, body = raw.partition(b"\r\n\r\n")
    check(sep and body == b"", "HEAD sent a body: %r", raw)
    check(re.search(rb"(?i)\r\ncontent-length: [1-9]", head),
          "HEAD lacks the GET's Content-Length: %r", head)
    stop_ok(d)
    d = Daemon().start()
    eq(d.head("/health").status, 503, "HEAD /health without a model")
    stop_ok(d)


@test
def health_reports_load_failure():
    """A pack whose config.json is broken: the daemon exits 1 after logging why."""
    d = Daemon()
    pack = make_pack(d.tmp, PACK, config=False)
    with open(os.path.join(pack, "config.json"), "w") as f:
        f.write('{"model_type": "llama", "hidden_size": 2048,\n "num_hidden_layers": }')
    d.args += ["--model", pack]
    d.spawn()
    rc = d.wait(10)
    eq(rc, 1, "exit code when the model fails to load")
    contains(d.log(), "config.json:2:", "load error names file:line")


# ---- /v1/models -------------------------------------------------------------------


def check_model_object(m, want_id):
    eq(m.get("id"), want_id, "model id")
    eq(m.get("object"), "model", "model object")
    check(isinstance(m.get("created"), int) and not isinstance(m.get("created"), bool),
          "created must be an int: %r", m)
    check(m["created"] > 1_600_000_000, "created is not a unix time: %r", m["created"])
    check(isinstance(m.get("owned_by"), str) and m["owned_by"], "owned_by: %r", m)


@test
def models_list_shape():
    d = pack_daemon()
    r = d.get("/v1/models")
    eq(r.status, 200, "/v1/models status")
    json_ct(r)
    j = r.json()
    eq(j.get("object"), "list", "object")
    check(isinstance(j.get("data"), list), "data must be a list: %r", j)
    eq(len(j["data"]), 1, "number of models")
    m = j["data"][0]
    check_model_object(m, PACK)
    eq(m.get("status"), "ready", "model status")
    meta = m.get("meta")
    check(isinstance(meta, dict), "meta: %r", m)
    eq(meta.get("n_layers"), 4, "meta.n_layers (the tiny preset)")
    eq(meta.get("n_vocab"), 1024, "meta.n_vocab (the tiny preset)")
    eq(meta.get("n_ctx_train"), 4096, "meta.n_ctx_train (the tiny preset)")
    stop_ok(d)


@test
def models_list_empty_without_model():
    d = Daemon().start()
    r = d.get("/v1/models")
    eq(r.status, 200, "/v1/models status")
    eq(r.json(), {"object": "list", "data": []}, "model list without a model")
    assert_error_object(d.get("/v1/models/" + PACK), 404, code="model_not_found", param="model")
    stop_ok(d)


@test
def model_get_by_id():
    d = pack_daemon()
    r = d.get("/v1/models/" + PACK)
    eq(r.status, 200, "/v1/models/{id} status")
    json_ct(r)
    m = r.json()
    check_model_object(m, PACK)
    listed = d.get("/v1/models").json()["data"][0]
    eq(m, listed, "/v1/models/{id} vs the list entry")
    stop_ok(d)


@test
def model_get_flm_tag_with_colon():
    d = Daemon()
    flm = os.path.join(d.home, ".config", "flm")
    os.makedirs(os.path.join(flm, "models"))
    write_json(os.path.join(flm, "model_list.json"),
               {"model_path": "models", "models": {"minicpm5": {"2b": {"name": "MiniCPM5-2B-NPU2"}}}})
    make_pack(os.path.join(flm, "models"), "MiniCPM5-2B-NPU2")
    d.args += ["--model", "minicpm5:2b"]
    d.start()
    wait_ready(d)
    eq(d.get("/health").json().get("model"), "minicpm5:2b", "/health model for an FLM tag")
    r = d.get("/v1/models/minicpm5:2b")
    eq(r.status, 200, "GET /v1/models/minicpm5:2b")
    check_model_object(r.json(), "minicpm5:2b")
    # Percent-encoded ':' is the same id to a client library.
    r = d.get("/v1/models/minicpm5%3A2b")
    eq(r.status, 200, "GET /v1/models/minicpm5%3A2b")
    assert_error_object(d.get("/v1/models/minicpm5:7b"), 404, code="model_not_found",
                        param="model")
    stop_ok(d)


@test
def model_unknown_404():
    d = pack_daemon()
    r = d.get("/v1/models/gpt-4o")
    err = assert_error_object(r, 404, type_="invalid_request_error", code="model_not_found",
                              param="model")
    contains(err["message"], "gpt-4o", "error message")
    stop_ok(d)


# ---- routing errors ---------------------------------------------------------------


@test
def route_unknown_404():
    d = Daemon().start()
    for path in ("/nope", "/v1", "/v1/models/", "/v1/chat", "/healthz"):
        r = d.get(path)
        assert_error_object(r, 404, code="not_found")
    stop_ok(d)


@test
def method_not_allowed_405():
    d = Daemon().start()
    cases = [("DELETE", "/health", "GET, HEAD, OPTIONS"),
             ("POST", "/v1/models", "GET, HEAD, OPTIONS"),
             ("PUT", "/v1/models/x", "GET, HEAD, OPTIONS"),
             ("GET", "/v1/chat/completions", "POST, OPTIONS")]
    for method, path, allow in cases:
        r = d.request(method, path)
        assert_error_object(r, 405, code="method_not_allowed")
        eq(r.header("allow"), allow, "Allow header of %s %s" % (method, path))
    stop_ok(d)


@test
def body_too_large_content_length():
    d = Daemon(["--max-body-bytes", "1K"]).start()
    r = d.post("/v1/chat/completions", data=b"x" * 2000,
               headers={"Content-Type": "application/json"})
    err = assert_error_object(r, 413, code="request_too_large")
    contains(err["message"], "1024", "413 message names the limit")
    # At the limit is not too large.
    r = d.post("/v1/chat/completions", data=b"{}" + b" " * 1022,
               headers={"Content-Type": "application/json"})
    check(r.status != 413, "a body of exactly --max-body-bytes got 413")
    stop_ok(d)


@test
def body_too_large_chunked():
    d = Daemon(["--max-body-bytes", "1K"]).start()
    r = d.post("/v1/chat/completions", data=b"y" * 5000,
               headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    assert_error_object(r, 413, code="request_too_large")
    r = d.post("/v1/chat/completions", data=b"{}",
               headers={"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    check(r.status != 413, "a small chunked body got 413")
    # The daemon is fine afterwards.
    eq(d.get("/health").status, 503, "/health after 413s")
    stop_ok(d)


@test
def chat_completions_unknown_model_404():
    """Another model's name is refused, never silently served by this one."""
    d = pack_daemon()
    r = d.post("/v1/chat/completions",
               data=b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}',
               headers={"Content-Type": "application/json"})
    eq(r.status, 404, "status for an unknown model")
    assert_error_object(r, code="model_not_found", param="model")
    stop_ok(d)


# ---- auth -----------------------------------------------------------------------------

KEY = "sk-test-0123456789"


@test
def auth_missing_key_401():
    d = Daemon(["--api-key", KEY]).start()
    r = d.get("/v1/models")
    assert_error_object(r, 401, type_="authentication_error")
    check(r.header("www-authenticate") is not None, "401 lacks WWW-Authenticate: %r", r)
    check(r.header("www-authenticate").lower().startswith("bearer"),
          "WWW-Authenticate: %r", r.header("www-authenticate"))
    # An unknown path says nothing about itself before authentication.
    assert_error_object(d.get("/secret-path"), 401, type_="authentication_error")
    stop_ok(d)


@test
def auth_wrong_key_401():
    d = Daemon(["--api-key", KEY]).start()
    for h in ({"Authorization": "Bearer wrong"}, {"Authorization": "Bearer " + KEY + "x"},
              {"Authorization": "Bearer " + KEY[:-1]}, {"X-Api-Key": "wrong"},
              {"Authorization": "Basic " + KEY}):
        r = d.get("/v1/models", headers=h)
        assert_error_object(r, 401, type_="authentication_error")
    stop_ok(d)


@test
def auth_bearer_ok():
    d = Daemon(["--api-key", KEY]).start()
    r = d.get("/v1/models", headers={"Authorization": "Bearer " + KEY})
    eq(r.status, 200, "/v1/models with the right bearer key")
    eq(r.json().get("object"), "list", "object")
    eq(d.get("/metrics", headers={"Authorization": "Bearer " + KEY}).status, 200, "/metrics")
    stop_ok(d)


@test
def auth_x_api_key_ok():
    d = Daemon(["--api-key", KEY]).start()
    r = d.get("/v1/models", headers={"X-Api-Key": KEY})
    eq(r.status, 200, "/v1/models with X-Api-Key")
    stop_ok(d)


@test
def auth_health_is_public():
    d = pack_daemon(["--api-key", KEY])
    r = d.get("/health")
    eq(r.status, 200, "/health without a key")
    eq(r.json().get("status"), "ok", "/health status")
    stop_ok(d)


@test
def auth_api_key_file():
    d = Daemon()
    kf = os.path.join(d.tmp, "api-key")
    with open(kf, "w") as f:
        f.write("file-key-42\n")
    d.args += ["--api-key-file", kf]
    d.start()
    assert_error_object(d.get("/v1/models"), 401, type_="authentication_error")
    eq(d.get("/v1/models", headers={"Authorization": "Bearer file-key-42"}).status, 200,
       "key from --api-key-file (trailing newline stripped)")
    eq(d.get("/v1/models", headers={"X-Api-Key": "file-key-42"}).status, 200, "X-Api-Key")
    check(KEY not in d.log() and "file-key-42" not in d.log(), "the api key appears in the log")
    stop_ok(d)


# ---- CORS -------------------------------------------------------------------------------


@test
def cors_off_by_default():
    d = Daemon().start()
    r = d.get("/v1/models", headers={"Origin": ORIGIN})
    eq(r.status, 200, "status")
    check(not r.has_header("access-control-allow-origin"),
          "ACAO without --cors-origin: %r", r)
    r = d.request("OPTIONS", "/v1/chat/completions",
                  headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
    check(not r.has_header("access-control-allow-origin"),
          "preflight got ACAO without --cors-origin: %r", r)
    check(r.status in (403, 204), "preflight without CORS: %r", r)
    stop_ok(d)


@test
def cors_preflight_allowed_origin():
    d = Daemon(["--cors-origin", ORIGIN]).start()
    r = d.request("OPTIONS", "/v1/chat/completions",
                  headers={"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                           "Access-Control-Request-Headers": "authorization, content-type"})
    eq(r.status, 204, "preflight status")
    eq(r.header("access-control-allow-origin"), ORIGIN, "ACAO")
    methods = r.header("access-control-allow-methods") or ""
    contains(methods, "POST", "Access-Control-Allow-Methods")
    allow_h = (r.header("access-control-allow-headers") or "").lower()
    contains(allow_h, "authorization", "Access-Control-Allow-Headers")
    contains(allow_h, "content-type", "Access-Control-Allow-Headers")
    ma = r.header("access-control-max-age")
    check(ma is not None and ma.isdigit() and int(ma) > 0, "Access-Control-Max-Age: %r", ma)
    contains(r.header("vary") or "", "Origin", "Vary")
    eq(r.body, b"", "204 body")
    stop_ok(d)


@test
def cors_preflight_with_api_key_needs_no_key():
    """Browsers send preflights without credentials."""
    d = Daemon(["--cors-origin", ORIGIN, "--api-key", KEY]).start()
    r = d.request("OPTIONS", "/v1/models",
                  headers={"Origin": ORIGIN, "Access-Control-Request-Method": "GET"})
    eq(r.status, 204, "preflight status with --api-key")
    eq(r.header("access-control-allow-origin"), ORIGIN, "ACAO")
    stop_ok(d)


@test
def cors_preflight_other_origin_403():
    d = Daemon(["--cors-origin", ORIGIN]).start()
    r = d.request("OPTIONS", "/v1/chat/completions",
                  headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert_error_object(r, 403, type_="permission_error")
    check(not r.has_header("access-control-allow-origin"), "ACAO for a foreign origin: %r", r)
    stop_ok(d)


@test
def cors_actual_request_headers():
    d = Daemon(["--cors-origin", ORIGIN]).start()
    r = d.get("/v1/models", headers={"Origin": ORIGIN})
    eq(r.status, 200, "status")
    eq(r.header("access-control-allow-origin"), ORIGIN, "ACAO on an allowed GET")
    contains(r.header("vary") or "", "Origin", "Vary")
    # Errors carry it too, or the browser hides the error body from the page.
    r = d.get("/nope", headers={"Origin": ORIGIN})
    eq(r.status, 404, "status")
    eq(r.header("access-control-allow-origin"), ORIGIN, "ACAO on a 404")
    # Another origin: no ACAO, still Vary.
    r = d.get("/v1/models", headers={"Origin": "http://evil.example"})
    check(not r.has_header("access-control-allow-origin"), "ACAO for a foreign origin: %r", r)
    contains(r.header("vary") or "", "Origin", "Vary for a foreign origin")
    stop_ok(d)


# ---- listening and concurrency ---------------------------------------------------------


@test
def listen_ipv6_loopback():
    try:
        probe = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        probe.bind(("::1", 0))
        probe.close()
    except OSError as e:
        raise Skip("no IPv6 loopback here: %s" % e)
    d = Daemon(["--host", "::1"]).start()
    eq(d.host, "::1", "address in the listening line")
    eq(d.get("/health").status, 503, "/health over IPv6")
    stop_ok(d)


@test
def many_concurrent_connections():
    d = pack_daemon()
    socks = [d.connect() for _ in range(100)]
    try:
        for s in socks:
            s.sendall(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
        got = [read_http_response(s, 5)[0] for s in socks]
        eq(got, [200] * 100, "statuses of 100 concurrent requests")
    finally:
        for s in socks:
            s.close()
    eq(counter(d.metrics(), "/v1/models", 200), 100, "requests_total{/v1/models,200}")
    stop_ok(d)


# ---- /metrics ---------------------------------------------------------------------------


def counter(text, route, status):
    m = re.search(r'^minicpmd_http_requests_total\{route="%s",status="%d"\} (\d+)$'
                  % (re.escape(route), status), text, re.M)
    return int(m.group(1)) if m else 0


@test
def metrics_content_type():
    d = Daemon().start()
    r = d.get("/metrics")
    eq(r.status, 200, "/metrics status")
    ct = r.header("content-type") or ""
    check(ct.startswith("text/plain; version=0.0.4"), "/metrics Content-Type: %r", ct)
    text = r.text()
    contains(text, "# TYPE minicpmd_http_requests_total counter", "/metrics")
    check(text.endswith("\n"), "exposition must end with a newline")
    for line in text.splitlines():
        check(line.startswith("#") or re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$", line),
              "malformed exposition line: %r", line)
    stop_ok(d)


@test
def metrics_counts_requests():
    d = pack_daemon()
    for _ in range(3):
        eq(d.get("/v1/models").status, 200, "/v1/models")
    eq(d.get("/v1/models/nope").status, 404, "unknown model")
    text = d.metrics()
    eq(counter(text, "/v1/models", 200), 3, "requests_total{/v1/models,200}")
    eq(counter(text, "/v1/models/{id}", 404), 1, "requests_total{/v1/models/{id},404}")
    eq(d.get("/v1/models").status, 200, "/v1/models")
    text = d.metrics()
    eq(counter(text, "/v1/models", 200), 4, "requests_total{/v1/models,200} after one more")
    eq(counter(text, "/metrics", 200), 1, "requests_total{/metrics,200} counts the first scrape")
    stop_ok(d)


@test
def metrics_unknown_paths_are_other():
    d = Daemon().start()
    rnd = random.Random(1234)
    paths = ["/zz" + "".join(rnd.choice(string.ascii_lowercase) for _ in range(10))
             for _ in range(20)]
    for p in paths:
        eq(d.get(p).status, 404, "GET " + p)
    text = d.metrics()
    eq(counter(text, "other", 404), 20, "requests_total{route=other,status=404}")
    for p in paths:
        check(p[1:] not in text, "path %s became a metrics label" % p)
    routes = set(re.findall(r'route="([^"]*)"', text))
    check(routes <= {"other", "/health", "/v1/models", "/v1/models/{id}", "/metrics",
                     "/v1/chat/completions", "options"}, "unexpected route labels: %r", routes)
    stop_ok(d)


if __name__ == "__main__":
    run_main()
