#include "util/fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
