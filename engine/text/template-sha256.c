/* Is a pack's chat_template.jinja the one engine/text/template.c implements?
 *
 * The renderer is MiniCPM5-2B's template compiled into C, so a pack that ships a
 * different template would be rendered wrongly without a word. The check is the
 * file's SHA-256 against the official one's, computed by nettle (Debian's, and
 * already in the process through libmicrohttpd's GnuTLS). */
#include "engine/template.h"
#include "engine/text/template-impl.h"

#include <nettle/sha2.h>
#include <stdint.h>
#include <string.h>

static const uint8_t OFFICIAL_SHA256[32] = {
    0xcc, 0x94, 0x57, 0x52, 0xdb, 0x55, 0x5d, 0x60, 0x94, 0x9b, 0x16, 0x98, 0x9d, 0xf4, 0xcc, 0xfe,
    0xb5, 0x2a, 0x31, 0x3d, 0x6b, 0x4b, 0x5c, 0x52, 0x29, 0xdd, 0x78, 0x6e, 0x2e, 0x9f, 0xcf, 0x1c,
};

void eng__chat_sha256(const void *data, size_t len, uint8_t out[32])
{
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, data);
    sha256_digest(&ctx, SHA256_DIGEST_SIZE, out);
}

bool eng_chat_template_is_official(const void *text, size_t len)
{
    uint8_t d[32];
    if (len != 9060)
        return false;
    eng__chat_sha256(text, len, d);
    return memcmp(d, OFFICIAL_SHA256, sizeof d) == 0;
}
