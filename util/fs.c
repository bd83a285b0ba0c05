#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *ut_file_kind_why(unsigned mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return NULL;
    case S_IFDIR: return "a directory, not a regular file";
    case S_IFIFO: return "a FIFO, not a regular file";
    case S_IFCHR: return "a character device, not a regular file";
    case S_IFBLK: return "a block device, not a regular file";
    case S_IFSOCK: return "a socket, not a regular file";
    default: return "not a regular file";
    }
}

static int refuse_mode(unsigned mode, const char **why)
{
    *why = ut_file_kind_why(mode);
    return S_ISDIR(mode) ? -EISDIR : -EINVAL;
}

int ut_open_regular(const char *path, int64_t max_bytes, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        *why = strerror(e);
        return -e;
    }
    struct stat st;
    int rc;
    if (fstat(fd, &st) != 0) {
        rc = -errno;
        *why = strerror(-rc);
        goto fail;
    }
    if (!S_ISREG(st.st_mode)) {
        rc = refuse_mode(st.st_mode, why);
        goto fail;
    }
    if (max_bytes > 0 && st.st_size > max_bytes) {
        rc = -EFBIG;
        *why = "larger than this file may be";
        goto fail;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        rc = -errno;
        *why = strerror(-rc);
        goto fail;
    }
    return fd;
fail:
    close(fd);
    return rc;
}

FILE *ut_fopen_regular(const char *path, int64_t max_bytes, int *rc, const char **why)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    int fd = ut_open_regular(path, max_bytes, why);
    if (fd < 0) {
        *rc = fd;
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        *rc = -errno;
        *why = strerror(-*rc);
        close(fd);
        return NULL;
    }
    *rc = 0;
    return f;
}

int64_t ut_file_size(const char *dir, const char *name, const char **why)
{
    char path[PATH_MAX];
    const char *dummy;
    struct stat st;
    if (!why)
        why = &dummy;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        *why = strerror(ENAMETOOLONG);
        return -ENAMETOOLONG;
    }
    if (stat(path, &st) != 0) {
        int e = errno;
        *why = strerror(e);
        return -e;
    }
    if (!S_ISREG(st.st_mode))
        return refuse_mode(st.st_mode, why);
    return (int64_t)st.st_size;
}

/* The directory entry of a rename is durable only once its directory is synced. */
static void fsync_parent(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/'), *d = ".";
    if (slash) {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= sizeof dir)
            return;
        memcpy(dir, path, n);
        dir[n] = '\0';
        d = dir;
    }
    int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

int ut_write_atomic(const char *path, const void *data, size_t n, mode_t mode, char *err,
                    size_t errlen)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", path) >= (int)sizeof tmp) {
        snprintf(err, errlen, "%s: %s", path, strerror(ENAMETOOLONG));
        return -ENAMETOOLONG;
    }
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot create a temporary file: %s", path, strerror(e));
        return -e;
    }
    fchmod(fd, mode);
    int e = 0;
    for (const char *p = data; n > 0;) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            e = w < 0 ? errno : EIO;
            break;
        }
        p += w;
        n -= (size_t)w;
    }
    if (!e && fsync(fd) != 0)
        e = errno;
    if (close(fd) != 0 && !e)
        e = errno;
    if (e) {
        snprintf(err, errlen, "%s: write failed: %s", tmp, strerror(e));
        unlink(tmp);
        return -e;
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        snprintf(err, errlen, "%s: rename failed: %s", path, strerror(e));
        unlink(tmp);
        return -e;
    }
    fsync_parent(path);
    return 0;
}
