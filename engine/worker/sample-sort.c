/* The sampler's order and its cuts: the total order on candidates (larger value
 * first, equal values by lower id), the sorts and selections built on it, and the
 * two cuts the chain makes with them, top-k over the logits and top-p over the
 * weights. Pure functions on candidate arrays, no sampler state: sample.c decides
 * what to cut, this file how.
 *
 * Nothing here sorts the vocabulary: top-k keeps a k-element heap while scanning
 * the logits (k <= HEAP_K_MAX) or quickselects from a copy, then sorts only the k
 * survivors; top-p finds its cut by a weighted quickselect. Quicksort and
 * quickselect fall back to heap sort past 2 log2(n) + 2 levels, so adversarial
 * inputs cost O(n log n), not O(n^2). Because the order is total, which
 * candidates survive a cut and the order they are left in depend on the input
 * alone (see sample.c, "Reproducibility").
 */
#include "engine/worker/sample-impl.h"

#include <float.h>
#include <stdbool.h>

/* As in sample.c. Nothing here multiplies today; the pragma keeps a future edit
 * from bringing contracted (machine-dependent) arithmetic into the sampler. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Up to this k, top-k keeps a heap while scanning the logits. */
#define HEAP_K_MAX 512

/* ---- ordering, selection, sorting -------------------------------------------- */

/* The total order: larger value first, equal values by lower id. Values are never
 * NaN here. */
static inline bool before(const struct sample_cand *a, const struct sample_cand *b)
{
    return (a->v > b->v) | ((a->v == b->v) & (a->id < b->id)); /* no branches */
}

static inline void swap(struct sample_cand *a, struct sample_cand *b)
{
    struct sample_cand t = *a;
    *a = *b;
    *b = t;
}

static void insertion_sort(struct sample_cand *c, int n)
{
    for (int i = 1; i < n; i++) {
        struct sample_cand x = c[i];
        int j = i;
        for (; j > 0 && before(&x, &c[j - 1]); j--)
            c[j] = c[j - 1];
        c[j] = x;
    }
}

/* Heap whose root is the *last* element in the order (the worst kept so far). */
static void sift_down_worst(struct sample_cand *h, int n, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && before(&h[w], &h[l]))
            w = l;
        if (r < n && before(&h[w], &h[r]))
            w = r;
        if (w == i)
            return;
        swap(&h[i], &h[w]);
        i = w;
    }
}

/* The O(n log n) fallback when quicksort or quickselect recurse too deep. */
static void heap_sort(struct sample_cand *c, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--)
        sift_down_worst(c, n, i);
    for (int end = n - 1; end > 0; end--) {
        swap(&c[0], &c[end]); /* the worst goes last */
        sift_down_worst(c, end, 0);
    }
}

static int median3(const struct sample_cand *c, int x, int y, int z)
{
    if (before(&c[y], &c[x])) {
        int t = x;
        x = y;
        y = t;
    }
    /* now c[x] before c[y] */
    if (before(&c[z], &c[y]))
        return before(&c[z], &c[x]) ? x : z;
    return y;
}

/* Median of three evenly spaced elements, or Tukey's ninther past 64 elements;
 * never the ends, so sorted, reversed and rotated inputs split evenly. */
static int choose_pivot(const struct sample_cand *c, int n)
{
    if (n < 64)
        return median3(c, n / 4, n / 2, n - 1 - n / 4);
    int s = n / 9, h = s / 2;
    return median3(c, median3(c, h, h + s, h + 2 * s), median3(c, h + 3 * s, h + 4 * s, h + 5 * s),
                   median3(c, h + 6 * s, h + 7 * s, h + 8 * s));
}

/* Lomuto around choose_pivot(); returns the pivot's final index: everything before
 * it comes first in the order, everything after it later. n >= 3. Branch-free:
 * c[i..j) hold "after" elements, so swapping c[j] in unconditionally and
 * advancing i only for a "before" one keeps that true, and random data costs no
 * mispredictions. */
static int partition(struct sample_cand *c, int n)
{
    swap(&c[choose_pivot(c, n)], &c[n - 1]);
    const struct sample_cand pivot = c[n - 1];
    int i = 0;
    for (int j = 0; j < n - 1; j++) {
        struct sample_cand x = c[j];
        c[j] = c[i];
        c[i] = x;
        i += before(&x, &pivot);
    }
    swap(&c[i], &c[n - 1]);
    return i;
}

static int depth_limit(int n)
{
    int d = 0;
    while (n > 1) {
        n >>= 1;
        d++;
    }
    return 2 * d + 2;
}

static void intro_sort_rec(struct sample_cand *c, int n, int depth)
{
    while (n > 16) {
        if (depth-- == 0) {
            heap_sort(c, n);
            return;
        }
        int p = partition(c, n);
        /* Recurse into the smaller side, loop on the larger. */
        if (p < n - p - 1) {
            intro_sort_rec(c, p, depth);
            c += p + 1;
            n -= p + 1;
        } else {
            intro_sort_rec(c + p + 1, n - p - 1, depth);
            n = p;
        }
    }
    insertion_sort(c, n);
}

static void sort_cands(struct sample_cand *c, int n) { intro_sort_rec(c, n, depth_limit(n)); }

/* Rearranges c[0..n) so that c[0..k) are the first k in the order (unsorted). */
static void select_first(struct sample_cand *c, int n, int k)
{
    int depth = depth_limit(n);
    while (n > 16) {
        if (depth-- == 0) {
            heap_sort(c, n);
            return;
        }
        int p = partition(c, n);
        if (p == k || p + 1 == k)
            return;
        if (k < p) {
            n = p;
        } else {
            c += p + 1;
            n -= p + 1;
            k -= p + 1;
        }
    }
    insertion_sort(c, n);
}

/* ---- the cuts ---------------------------------------------------------------- */

/* The best k samplable logits into c[0..), sorted; returns how many (< k only when
 * fewer are samplable). */
int eng__sample_top_k(const float *logits, int n, int k, struct sample_cand *c)
{
    int m = 0;
    if (k > HEAP_K_MAX) {
        for (int i = 0; i < n; i++)
            if (logits[i] >= -FLT_MAX) {
                c[m].v = sample_clamp_logit(logits[i]);
                c[m].id = i;
                m++;
            }
        if (m > k) {
            select_first(c, m, k);
            m = k;
        }
        sort_cands(c, m);
        return m;
    }
    /* Scanning in id order, a newcomer beats the worst kept only by a strictly
     * larger value; a tie goes to the kept one, whose id is lower. */
    for (int i = 0; i < n; i++) {
        float v = logits[i];
        if (!(v >= -FLT_MAX)) /* -inf or NaN */
            continue;
        v = sample_clamp_logit(v);
        if (m < k) {
            c[m].v = v;
            c[m].id = i;
            if (++m == k)
                for (int j = k / 2 - 1; j >= 0; j--)
                    sift_down_worst(c, k, j);
        } else if (v > c[0].v) {
            c[0].v = v;
            c[0].id = i;
            sift_down_worst(c, k, 0);
        }
    }
    sort_cands(c, m);
    return m;
}

/* Top-p on m candidates carrying weights: the shortest prefix of the order whose
 * mass reaches `target`, moved to c[0..cut) and returned; its mass, summed in
 * c's order, goes to *kept. Sorted input is walked as is. Otherwise a weighted
 * quickselect finds the cut in O(m) expected without sorting: partition, and the
 * mass before the pivot says on which side the cut lies. The prefix is left in
 * partition order, which depends only on the input. */
int eng__sample_top_p_cut(struct sample_cand *c, int m, bool sorted, double target,
                          double *kept)
{
    int lo = 0, hi = m, cut = -1;
    double acc = 0.0; /* the mass of c[0..lo), all inside the prefix */
    if (!sorted) {
        int depth = depth_limit(m);
        while (hi - lo > 16 && depth-- > 0) {
            int p = lo + partition(c + lo, hi - lo);
            double left = 0.0;
            for (int i = lo; i < p; i++)
                left += c[i].v;
            if (acc + left >= target) {
                hi = p;
            } else if (acc + left + c[p].v >= target) {
                cut = p + 1;
                break;
            } else {
                acc += left + c[p].v;
                lo = p + 1;
            }
        }
        if (cut < 0)
            sort_cands(c + lo, hi - lo);
    }
    if (cut < 0) {
        cut = hi;
        for (int i = lo; i < hi; i++) {
            acc += c[i].v;
            if (acc >= target) {
                cut = i + 1;
                break;
            }
        }
    }
    double sum = 0.0;
    for (int i = 0; i < cut; i++)
        sum += c[i].v;
    *kept = sum;
    return cut;
}
