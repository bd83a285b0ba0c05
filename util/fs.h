/* fs — file-system questions more than one module asks.
 *
 * Every file the daemon reads at startup or on a request (config files, the api key
 * file, a pack's files, runlist-k.json) is opened with ut_open_regular(): a FIFO or
 * a device where a regular file is expected must give one clear line, never a read
 * that blocks startup or shutdown forever. */
#ifndef MINICPMD_UTIL_FS_H
#define MINICPMD_UTIL_FS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* Open `path` read-only (O_CLOEXEC) if it is a regular file of at most `max_bytes`
 * (0: any size). The open itself is O_NONBLOCK, so a FIFO without a writer or a
 * device cannot hold it; the descriptor is made blocking again once fstat() has
 * said S_ISREG. Returns the descriptor, or -errno with *why set to a static phrase
 * for the log line ("a FIFO, not a regular file", "No such file or directory"):
 * -EISDIR a directory, -EINVAL another non-regular file, -EFBIG over max_bytes. */
int ut_open_regular(const char *path, int64_t max_bytes, const char **why);

/* The same, as a stdio stream (for json_loadf and friends); NULL with *rc = -errno
 * and *why set on failure. */
FILE *ut_fopen_regular(const char *path, int64_t max_bytes, int *rc, const char **why);

/* What `path` is when it is not a regular file ("a FIFO, not a regular file"), from
 * its st_mode; NULL for a regular file. */
const char *ut_file_kind_why(unsigned mode);

/* Size of the regular file dir/name, or -errno (-EISDIR a directory, -EINVAL
 * another non-regular file, -ENAMETOOLONG: the path does not fit PATH_MAX). stat()
 * only: it never opens, so it never blocks. *why (may be NULL) says which. */
int64_t ut_file_size(const char *dir, const char *name, const char **why);

/* Replace `path` with data[0 .. n) so that a reader (or a crash) sees the old file
 * or the new one, never a part: a temporary file beside it (path.XXXXXX, made with
 * `mode`), written and fsynced, renamed over path, then the directory fsynced.
 * Returns 0, or -errno with one line in `err` naming the file and what failed; no
 * temporary file is left behind. */
int ut_write_atomic(const char *path, const void *data, size_t n, mode_t mode, char *err,
                    size_t errlen);

#endif
