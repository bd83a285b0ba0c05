/* fs — file-system questions more than one module asks. */
#ifndef MINICPMD_UTIL_FS_H
#define MINICPMD_UTIL_FS_H

#include <stdint.h>

/* Size of the regular file dir/name, or -errno (-EISDIR: not a regular file,
 * -ENAMETOOLONG: the path does not fit PATH_MAX). */
int64_t ut_file_size(const char *dir, const char *name);

#endif
