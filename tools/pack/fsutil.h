/* Small file-system helpers shared by the minicpmd-pack subcommands. All return
 * 0 or a negative errno. */
#ifndef MINICPMD_TOOLS_PACK_FSUTIL_H
#define MINICPMD_TOOLS_PACK_FSUTIL_H

#include <stdint.h>

/* mkdir -p: an output directory may be several levels new (build/packs/tiny). */
int pack_mkdir_p(const char *dir);

/* Size of the regular file dir/name: >= 0, -ENOENT when absent, -EISDIR when not
 * a regular file, other -errno. */
int64_t pack_file_size(const char *dir, const char *name);

/* Copies src to dst (created or truncated), byte for byte. */
int pack_copy_file(const char *src, const char *dst);

#endif
