/* minicpmd-pack template PACK: an OpenAI chat request (JSON) on stdin, the prompt
 * the daemon would give the model on stdout, byte for byte.
 *
 * The renderer is MiniCPM5-2B's template compiled into C (engine/text/template.c), so PACK
 * is only checked: if it holds a chat_template.jinja (or is one) that is not the
 * official file, the prompt is still rendered, with a warning, because the pack's
 * own template would render differently. */
#include "engine/template.h"
#include "tools/pack/pack.h"
#include "tools/pack/fsutil.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define PROG "minicpmd-pack template"

/* Warn (only) when the pack's template is not the one we render. Returns 0, or 1
 * when PACK does not exist or cannot be read. */
static int check_pack(const char *pack)
{
    struct stat st;
    char path[4096];
    if (stat(pack, &st) != 0) {
        fprintf(stderr, PROG ": %s: %s\n", pack, strerror(errno));
        return 1;
    }
    if (S_ISDIR(st.st_mode)) {
        snprintf(path, sizeof path, "%s/chat_template.jinja", pack);
        if (stat(path, &st) != 0)
            return 0; /* a pack without its own template: ours is the one */
    } else {
        snprintf(path, sizeof path, "%s", pack);
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
        return 1;
    }
    size_t len = 0;
    char *text = pack_read_all(f, &len);
    int saved = errno;
    fclose(f);
    if (!text) {
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(saved));
        return 1;
    }
    if (!eng_chat_template_is_official(text, len))
        fprintf(stderr,
                PROG ": warning: %s is not the official MiniCPM5-2B chat template "
                     "(SHA-256 cc945752…fcf1c); rendering with the built-in one\n",
                path);
    free(text);
    return 0;
}

int pack_cmd_template(int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        fprintf(stderr, "Usage: minicpmd-pack template PACK < request.json\n"
                        "  PACK is a pack directory or a chat_template.jinja file.\n");
        return 2;
    }
    if (check_pack(argv[0]) != 0)
        return 1;

    int rc = 1;
    char *prompt = NULL;
    json_t *req = NULL;
    size_t len = 0;
    char *in = pack_read_all(stdin, &len);
    if (!in) {
        fprintf(stderr, PROG ": stdin: %s\n", strerror(errno));
        goto out;
    }
    json_error_t je;
    req = json_loadb(in, len, 0, &je);
    if (!req) {
        fprintf(stderr, PROG ": stdin: invalid JSON: %s (line %d, column %d)\n", je.text, je.line,
                je.column);
        goto out;
    }

    char err[256], param[128];
    struct eng_chat_params p;
    if (eng_chat_params_from_request(req, &p, err, sizeof err, param, sizeof param) == 0)
        prompt = eng_chat_render(&p, err, sizeof err, param, sizeof param);
    if (!prompt) {
        fprintf(stderr, PROG ": %s%s%s\n", param, param[0] ? ": " : "", err);
        goto out;
    }
    size_t n = strlen(prompt);
    if (fwrite(prompt, 1, n, stdout) != n || fflush(stdout) != 0) {
        fprintf(stderr, PROG ": stdout: %s\n", strerror(errno));
        goto out;
    }
    rc = 0;
out:
    free(prompt);
    json_decref(req);
    free(in);
    return rc;
}
