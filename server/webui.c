/* The page: its HTML, stylesheet, script and icon, built into the binary
 * (server/webui/, embedded by tools/pack/embed.py) and served at /, /ui/ and
 * /ui/<file>. The assets are public (they hold no secret; the page asks for the
 * API key when /v1/status answers 401); off with --no-webui.
 *
 * The Content-Security-Policy allows the daemon's own origin only: no inline script
 * or style, no other host, no framing. The page needs nothing else. */
#include "server/app.h"

#include "webui-app-js.h"
#include "webui-icon-svg.h"
#include "webui-index-html.h"
#include "webui-style-css.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char csp[] = "default-src 'self'; script-src 'self'; style-src 'self'; "
                          "img-src 'self'; connect-src 'self'; object-src 'none'; "
                          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

struct asset {
    const char *name;           /* the {id} under /ui/; NULL for the page itself */
    const unsigned char *data;
    const unsigned long *len;
    const char *type;
};

static const struct asset assets[] = {
    {NULL, webui_index_html, &webui_index_html_len, "text/html; charset=utf-8"},
    {"app.js", webui_app_js, &webui_app_js_len, "text/javascript; charset=utf-8"},
    {"style.css", webui_style_css, &webui_style_css_len, "text/css; charset=utf-8"},
    {"icon.svg", webui_icon_svg, &webui_icon_svg_len, "image/svg+xml"},
};

int srv_h_webui(srv_request *req, struct srv_response *resp)
{
    const struct srv_app *app = srv_request_app(req);
    const char *name = srv_request_param(req);
    const struct asset *a = NULL;
    for (size_t i = 0; i < sizeof assets / sizeof *assets && !a; i++)
        if (name ? assets[i].name && strcmp(assets[i].name, name) == 0 : !assets[i].name)
            a = &assets[i];
    if (app->cfg->no_webui || !a) {
        srv_response_error(resp, API_ERR_NOT_FOUND, NULL, "%s",
                           app->cfg->no_webui ? "the page is off (--no-webui)"
                                              : "no such file of the page");
        return 0;
    }
    resp->body = malloc(*a->len ? *a->len : 1);
    if (!resp->body)
        return -ENOMEM;
    memcpy(resp->body, a->data, *a->len);
    resp->body_len = *a->len;
    resp->status = 200;
    resp->content_type = a->type;
    srv_response_header(resp, "Content-Security-Policy", csp);
    srv_response_header(resp, "X-Content-Type-Options", "nosniff");
    srv_response_header(resp, "Referrer-Policy", "no-referrer");
    /* Revalidate each time: a rebuilt daemon serves a new page at the same URL. */
    srv_response_header(resp, "Cache-Control", "no-cache");
    return 0;
}
