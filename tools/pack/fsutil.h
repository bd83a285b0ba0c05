/* Small file-system helpers shared by the minicpmd-pack subcommands. All return
 * 0 or a negative errno unless they say otherwise. */
#ifndef MINICPMD_TOOLS_PACK_FSUTIL_H
#define MINICPMD_TOOLS_PACK_FSUTIL_H

#include <stdint.h>
#include <stdio.h>

/* mkdir -p: an output directory may be several levels new (build/packs/tiny). */
int pack_mkdir_p(const char *dir);

/* A whole stream, NUL-terminated (the NUL not counted in *len); NULL with errno
 * ENOMEM or EIO on failure. */
char *pack_read_all(FILE *f, size_t *len);

/* Copies src to dst (created or truncated), byte for byte. */
int pack_copy_file(const char *src, const char *dst);

#endif
