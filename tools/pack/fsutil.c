/* File-system helpers of minicpmd-pack (fsutil.h). */
#include "tools/pack/fsutil.h"
#include "util/buf.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int pack_mkdir_p(const char *dir)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return -ENAMETOOLONG;
    for (char *s = path + 1; *s; s++) {
        if (*s != '/')
            continue;
        *s = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -errno;
        *s = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(path, &st) != 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

char *pack_read_all(FILE *f, size_t *len)
{
    ut_buf b = {0};
    char chunk[1 << 16];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (ut_buf_add(&b, chunk, n) != 0)
            break;
    if (!b.oom && !b.p)
        ut_buf_add(&b, "", 0);   /* an empty stream is an empty string */
    if (b.oom || ferror(f)) {
        errno = b.oom ? ENOMEM : EIO;
        ut_buf_free(&b);
        return NULL;
    }
    *len = b.n;
    return b.p;
}

int pack_copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    if (!in)
        return -errno;
    FILE *out = fopen(dst, "wb");
    if (!out) {
        int rc = -errno;
        fclose(in);
        return rc;
    }
    char buf[1 << 16];
    size_t n;
    int rc = 0;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) {
            rc = -EIO;
            break;
        }
    if (rc == 0 && ferror(in))
        rc = -EIO;
    fclose(in);
    if (fclose(out) != 0 && rc == 0)
        rc = -EIO;
    return rc;
}
