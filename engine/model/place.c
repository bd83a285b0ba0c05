/* Where the weights live while the forward pass streams them (--weights).
 *
 * A decode step reads every matmul weight once. Through the pack's file mapping
 * that is 4 KB pages (ext4 gives a file mapping no huge pages, madvise or not),
 * and on a VM each TLB miss walks two page tables: a 2-thread read of the 2b
 * pack measured 16-43 GB/s through the mapping against 55-70 GB/s from the same
 * bytes in 2 MB-page anonymous memory. So at load everything but the
 * embedding (read one row per token; it stays mapped) is copied once, in parallel
 * on the model's compute pool, into 2 MB-aligned anonymous memory: hugetlbfs pages
 * when the admin reserved enough (MAP_HUGETLB), else transparent huge pages
 * (MADV_HUGEPAGE). The bytes are read with pread() from the pack file (the mapping
 * would take a 4 KB page fault each); what binding touched of the mapping (the KV
 * head comparison, the norms) is dropped from the process after each round
 * (MADV_DONTNEED: a private read-only mapping refaults from the file if ever
 * touched), so RSS holds the weights once.
 *
 * The copy keeps every byte's offset modulo 4096, so each tensor keeps the
 * alignment it had in the mapping, and the model's pointers are moved over.
 * Memory short (MemAvailable below the copy plus UT_WEIGHTS_COPY_MARGIN_MB) or an
 * allocation refused: the mapping is used, with a warning. */
#include "engine/model/model-impl.h"

#include "util/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define HUGE_2M ((size_t)2 << 20)
#define PAGE 4096u
#define COPY_ROUND ((size_t)64 << 20) /* a multiple of HUGE_2M */

struct seg {
    const uint8_t *src;    /* in the file mapping */
    size_t len;
    size_t dst;            /* offset in the anonymous region */
    int fd;                /* the file, read at off (-1: copy from the mapping) */
    off_t off;
};

struct copy_job {
    const struct seg *segs;
    int n_segs;
    uint8_t *dst;
    size_t from, to;       /* the part of the region this round copies */
};

/* "Key:   123 kB" of /proc/meminfo, in bytes; -1 when absent. */
static int64_t meminfo_bytes(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return -1;
    char line[256];
    size_t kl = strlen(key);
    int64_t v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
            v = strtoll(line + kl + 1, NULL, 10);
            if (!strstr(line, "kB"))
                return fclose(f), v; /* a count (HugePages_Free) */
            v *= 1024;
            break;
        }
    fclose(f);
    return v;
}

/* MemAvailable; MINICPMD_TEST_MEMAVAILABLE_MB stands in for it in tests of the
 * fallback (a machine is not made short of memory for a unit test). */
static int64_t mem_available(void)
{
    const char *t = getenv("MINICPMD_TEST_MEMAVAILABLE_MB");
    if (t && *t)
        return (int64_t)strtoll(t, NULL, 10) << 20;
    return meminfo_bytes("MemAvailable");
}

/* Whether transparent huge pages can back an madvised region. */
static bool thp_usable(void)
{
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
    if (!f)
        return false;
    char buf[128] = "";
    bool ok = fgets(buf, sizeof buf, f) && !strstr(buf, "[never]");
    fclose(f);
    return ok;
}

/* AnonHugePages of the mapping that starts at `base` (/proc/self/smaps), bytes. */
static int64_t anon_huge_bytes(const void *base)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return -1;
    char line[512], want[32];
    snprintf(want, sizeof want, "%" PRIxPTR "-", (uintptr_t)base);
    bool in = false;
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, want, strlen(want)) == 0) {
            in = true;
        } else if (in && strncmp(line, "AnonHugePages:", 14) == 0) {
            v = strtoll(line + 14, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

static void copy_part(void *ctx, int ith, int nth)
{
    const struct copy_job *j = ctx;
    /* 2 MB blocks dealt round-robin: each thread faults in whole huge pages. */
    size_t first = j->from / HUGE_2M, last = (j->to + HUGE_2M - 1) / HUGE_2M;
    for (size_t b = first + (size_t)ith; b < last; b += (size_t)nth) {
        size_t lo = b * HUGE_2M, hi = lo + HUGE_2M;
        if (lo < j->from)
            lo = j->from;
        if (hi > j->to)
            hi = j->to;
        for (int s = 0; s < j->n_segs; s++) {
            const struct seg *g = &j->segs[s];
            size_t a = g->dst > lo ? g->dst : lo, e = g->dst + g->len < hi ? g->dst + g->len : hi;
            /* pread, not the mapping: no 4 KB page faults on the source, and its
             * pages never join the process. The mapping if the read fails. */
            while (a < e && g->fd >= 0) {
                ssize_t r = pread(g->fd, j->dst + a, e - a, g->off + (off_t)(a - g->dst));
                if (r <= 0)
                    break;
                a += (size_t)r;
            }
            if (a < e)
                memcpy(j->dst + a, g->src + (a - g->dst), e - a);
        }
    }
}

/* p moved into the region, or p itself (the embedding). */
static const void *moved(const struct seg *segs, int n, const uint8_t *base, const void *p)
{
    const uint8_t *q = p;
    for (int i = 0; q && i < n; i++)
        if (q >= segs[i].src && q < segs[i].src + segs[i].len)
            return base + segs[i].dst + (size_t)(q - segs[i].src);
    return p;
}

#define MOVE(ptr) ((ptr) = (const void *)moved(segs, n, base, (ptr)))

static void move_pointers(eng_model *m, const struct seg *segs, int n, const uint8_t *base)
{
    MOVE(m->out_norm);
    MOVE(m->lm_head.data);
    for (int l = 0; l < m->info.hp.n_layers; l++) {
        struct eng_layer *L = &m->layers[l];
        MOVE(L->attn_norm);
        MOVE(L->ffn_norm);
        MOVE(L->q_norm);
        MOVE(L->k_norm);
        MOVE(L->wq.data);
        MOVE(L->wo.data);
        MOVE(L->wgate.data);
        MOVE(L->wup.data);
        MOVE(L->wdown.data);
        for (int u = 0; u < m->info.n_kv_real; u++) {
            MOVE(L->wk[u].data);
            MOVE(L->wv[u].data);
        }
    }
}

/* 2 MB-aligned anonymous memory of `len` (a multiple of 2 MB): hugetlbfs pages
 * when enough are reserved, else madvised for THP. */
static void *alloc_region(size_t len, bool *hugetlb)
{
    int64_t free_huge = meminfo_bytes("HugePages_Free");
    int64_t huge_size = meminfo_bytes("Hugepagesize");
    *hugetlb = false;
    if (free_huge > 0 && huge_size == (int64_t)HUGE_2M && (size_t)free_huge * HUGE_2M >= len) {
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | (21 << MAP_HUGE_SHIFT), -1, 0);
        if (p != MAP_FAILED) {
            *hugetlb = true;
            return p;
        }
    }
    uint8_t *raw = mmap(NULL, len + HUGE_2M, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED)
        return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
    if (p > raw)
        munmap(raw, (size_t)(p - raw));
    if (p + len < raw + len + HUGE_2M)
        munmap(p + len, (size_t)(raw + len + HUGE_2M - (p + len)));
    madvise(p, len, MADV_HUGEPAGE);
    return p;
}

/* The segments of every shard but the embedding, laid out in the region. */
static int plan(const eng_model *m, struct seg *segs, size_t *total)
{
    const uint8_t *e0 = (const uint8_t *)m->embed, *e1 = e0;
    for (int i = 0; i < m->n_st; i++) {
        const struct eng_st_tensor *t = eng_st_find(m->st[i], "model.embed_tokens.weight");
        if (t)
            e1 = (const uint8_t *)t->data + t->nbytes;
    }
    int n = 0;
    size_t at = 0;
    for (int i = 0; i < m->n_st; i++) {
        const uint8_t *b = eng_st_map(m->st[i]), *end = b + eng_st_file_size(m->st[i]);
        const uint8_t *parts[2][2] = {{b, end}, {NULL, NULL}};
        if (e0 >= b && e0 < end) {
            parts[0][1] = e0;
            parts[1][0] = e1;
            parts[1][1] = end;
        }
        for (int k = 0; k < 2; k++) {
            if (!parts[k][0] || parts[k][1] <= parts[k][0])
                continue;
            size_t mis = (uintptr_t)parts[k][0] % PAGE;
            at = (at + PAGE - 1) / PAGE * PAGE + mis;
            segs[n++] = (struct seg){parts[k][0], (size_t)(parts[k][1] - parts[k][0]), at, -1,
                                     (off_t)(parts[k][0] - b)};
            at += segs[n - 1].len;
        }
    }
    *total = at;
    return n;
}

/* Drop the file mapping's pages of what was copied to [from, to) of the region
 * from the process (whole pages only), so the weights are not held twice. */
static void release_source(const struct seg *segs, int n, size_t from, size_t to)
{
    for (int i = 0; i < n; i++) {
        size_t lo = segs[i].dst > from ? segs[i].dst : from;
        size_t hi = segs[i].dst + segs[i].len < to ? segs[i].dst + segs[i].len : to;
        if (lo >= hi)
            continue;
        uintptr_t s = (uintptr_t)segs[i].src + (lo - segs[i].dst);
        uintptr_t a = (s + PAGE - 1) & ~(uintptr_t)(PAGE - 1);
        uintptr_t e = (s + (hi - lo)) & ~(uintptr_t)(PAGE - 1);
        if (e > a)
            madvise((void *)a, e - a, MADV_DONTNEED);
    }
}

/* The pack file again, for pread(): only if it is still the file mapped (its
 * size and first page); else -1 and the copy reads the mapping. */
static int open_same(const eng_st *st)
{
    int fd = open(eng_st_path(st), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    struct stat sb;
    uint8_t head[PAGE];
    size_t n = eng_st_file_size(st) < PAGE ? (size_t)eng_st_file_size(st) : PAGE;
    if (fd >= 0 && (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
                    (uint64_t)sb.st_size != eng_st_file_size(st) ||
                    pread(fd, head, n, 0) != (ssize_t)n || memcmp(head, eng_st_map(st), n) != 0)) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int eng__model_place_weights(eng_model *m)
{
    enum eng_weights_place want = m->opts.weights;
    m->info.weights = "mmap";
    if (want == ENG_WEIGHTS_PLACE_MMAP)
        return 0;
    struct seg segs[2 * ENG_MAX_SHARDS];
    size_t total;
    int n = plan(m, segs, &total);
    size_t len = (total + HUGE_2M - 1) / HUGE_2M * HUGE_2M;
    const char *flag = want == ENG_WEIGHTS_PLACE_COPY ? "copy" : "auto";
    int64_t avail = mem_available();
    int64_t margin = (int64_t)UT_WEIGHTS_COPY_MARGIN_MB << 20;
    if (n == 0 || len == 0)
        return 0;
    if (avail >= 0 && (int64_t)len + margin > avail) {
        eng__model_say(m, ENG_LOG_WARN,
            "--weights %s: copying %.0f MiB of weights needs MemAvailable of %.0f MiB (the copy "
            "and a %d MiB margin), there is %.0f MiB: serving them from the file mapping",
            flag, len / 1048576.0, (double)(len + (size_t)margin) / 1048576.0,
            UT_WEIGHTS_COPY_MARGIN_MB, avail / 1048576.0);
        return 0;
    }
    bool thp = thp_usable();
    bool hugetlb;
    if (want == ENG_WEIGHTS_PLACE_AUTO && !thp &&
        meminfo_bytes("HugePages_Free") * (int64_t)HUGE_2M < (int64_t)len) {
        eng__model_say(m, ENG_LOG_INFO, "--weights auto: no huge pages (transparent huge pages are "
                             "off, none reserved): the weights stay in the file mapping");
        return 0;
    }
    uint8_t *base = alloc_region(len, &hugetlb);
    if (!base) {
        eng__model_say(m, ENG_LOG_WARN, "--weights %s: cannot allocate %.0f MiB for the weights (%s): "
                             "serving them from the file mapping",
            flag, len / 1048576.0, strerror(errno));
        return 0;
    }
    if (!hugetlb && !thp)
        eng__model_say(m, ENG_LOG_WARN, "--weights copy: transparent huge pages are off and no huge pages "
                             "are reserved: the copy gets 4 KB pages");
    int nth = eng_pool_size(m->pool);
    eng__model_say(m, ENG_LOG_INFO, "weights: copying %.0f MiB into %s (%d threads); the embedding "
                         "stays mapped",
        total / 1048576.0, hugetlb ? "reserved 2 MB huge pages" : "2 MB-aligned memory (THP)",
        nth);
    uint64_t t0 = ut_now_ns();
    for (int i = 0, k = 0; i < m->n_st; i++) {
        const uint8_t *b = eng_st_map(m->st[i]), *end = b + eng_st_file_size(m->st[i]);
        int fd = open_same(m->st[i]);
        for (; k < n && segs[k].src >= b && segs[k].src < end; k++)
            segs[k].fd = fd;
    }
    /* Rounds of COPY_ROUND, each one's source pages dropped after it (the peak RSS
     * is the copy plus one round, not twice the weights); a progress line at each
     * quarter of a big copy. */
    int quarter = 1;
    for (size_t from = 0; from < total; from += COPY_ROUND) {
        size_t to = from + COPY_ROUND < total ? from + COPY_ROUND : total;
        struct copy_job j = {segs, n, base, from, to};
        eng_pool_run(m->pool, copy_part, &j);
        release_source(segs, n, j.from, j.to);
        if (quarter < 4 && j.to >= total / 4 * (size_t)quarter && total >= ((size_t)256 << 20)) {
            eng__model_say(m, ENG_LOG_INFO, "weights: %.0f of %.0f MiB copied", j.to / 1048576.0,
                total / 1048576.0);
            while (quarter < 4 && j.to >= total / 4 * (size_t)quarter)
                quarter++;
        }
    }
    for (int k = 0; k < n; k++)
        if (segs[k].fd >= 0 && (k + 1 == n || segs[k + 1].fd != segs[k].fd))
            close(segs[k].fd);
    mprotect(base, len, PROT_READ);
    move_pointers(m, segs, n, base);
    release_source(segs, n, 0, total);
    m->anon = base;
    m->anon_len = len;
    m->info.weights = "copy";
    m->info.weights_bytes = (int64_t)total;
    m->info.weights_huge_bytes = hugetlb ? (int64_t)len : anon_huge_bytes(base);
    double secs = (double)(ut_now_ns() - t0) / 1e9;
    eng__model_say(m, ENG_LOG_INFO, "weights: %.0f MiB copied in %.2f s (%.1f GB/s)", total / 1048576.0,
        secs, secs > 0 ? total / secs / 1e9 : 0.0);
    eng__model_say(m, ENG_LOG_DEBUG, "weights: %s %.0f of %.0f MiB in huge pages",
        hugetlb ? "hugetlb" : "AnonHugePages", m->info.weights_huge_bytes / 1048576.0,
        len / 1048576.0);
    return 0;
}

void eng__model_unplace_weights(eng_model *m)
{
    if (m->anon)
        munmap(m->anon, m->anon_len);
    m->anon = NULL;
}
