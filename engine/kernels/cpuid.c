/* The CPU's identity from cpuid: family and model as the vendors' manuals
 * compute them (base + extended), and the brand string. What a measured kernel
 * choice is remembered by, and what every benchmark figure says it ran on. */
#include <cpuid.h>
#include <string.h>

#include "engine/kernels/kernels.h"

void eng_cpu_ident(struct eng_cpu_ident *id)
{
    unsigned a, b, c, d;
    memset(id, 0, sizeof *id);
    if (__get_cpuid(1, &a, &b, &c, &d)) {
        unsigned fam = (a >> 8) & 0xF, mod = (a >> 4) & 0xF;
        if (fam == 0xF)
            fam += (a >> 20) & 0xFF;
        if (fam == 0x6 || fam >= 0xF)
            mod += ((a >> 16) & 0xF) << 4;
        id->family = (int)fam;
        id->model = (int)mod;
    }
    unsigned max = __get_cpuid_max(0x80000000u, NULL);
    if (max >= 0x80000004u) {
        unsigned r[12];
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002u + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        char raw[49];
        memcpy(raw, r, 48);
        raw[48] = '\0';
        /* trimmed, runs of spaces as one (some brand strings pad in the middle) */
        size_t n = 0;
        for (const char *p = raw; *p && n + 1 < sizeof id->name; p++) {
            if (*p == ' ' && (n == 0 || id->name[n - 1] == ' '))
                continue;
            id->name[n++] = (unsigned char)*p < 0x20 || (unsigned char)*p > 0x7E ? '?' : *p;
        }
        while (n > 0 && id->name[n - 1] == ' ')
            n--;
        id->name[n] = '\0';
    }
    if (!id->name[0])
        strcpy(id->name, "unknown");
}
