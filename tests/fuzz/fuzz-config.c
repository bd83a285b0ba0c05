/* libFuzzer target: the JSON config file through the whole loader (parse, key
 * lookup, type and range checks, list handling, cfg_free). Any crash, leak or
 * sanitizer report is a bug; an error result is fine. */
#include "config/config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ignore(void *ud, const char *msg) { (void)ud, (void)msg; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int fd = memfd_create("config.json", MFD_CLOEXEC);
    if (fd < 0)
        return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char *argv[] = {"minicpmd", "--config", path, NULL};
    char *envp[] = {"HOME=/nonexistent", NULL};
    struct cfg cfg = {0};
    char err[512];
    cfg_load(&cfg, 3, argv, envp, ignore, NULL, err, sizeof err);
    cfg_free(&cfg);
    close(fd);
    return 0;
}
