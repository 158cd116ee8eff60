/*
 * label.c — ALGORITHM.md §7, first half: hysteresis threshold and
 * 8-connected component labelling of the SNR map (the CPU reference of
 * ss_label in stages.h).
 *
 * Method: one raster pass builds a union-find forest over the mask pixels
 * (the caller's int32 scratch is the parent array, so nothing is allocated
 * per call), a second raster pass numbers the components. Two choices make
 * the second pass trivial and the result independent of merge order:
 *  - union always links the larger root under the smaller one, so a
 *    component's root is its smallest raster index, i.e. its first pixel;
 *  - the "holds a seed" flag is kept at the root (in the labels plane,
 *    which is free until the second pass) and OR-ed on every union.
 * The second pass then meets each root before any other pixel of its
 * component: a root that holds a seed takes the next number, every other
 * pixel copies its root's final label (0 for seedless components, which
 * hysteresis drops). Cost: O(w·h·α(w·h)) with path halving, two reads of
 * z, no allocation.
 */
#include "stages.h"

#include <stddef.h>

/* Mask classes of a pixel. A pixel that satisfies both z >= lo and
 * -z >= lo (only possible when lo <= 0, a degenerate configuration) is
 * counted as positive, so that every pixel has exactly one class. */
enum { CLS_NONE = 0, CLS_POS = 1, CLS_NEG = 2 };

static inline int pixel_class(float v, float lo, int negative)
{
    if (v >= lo)
        return CLS_POS;
    if (negative && -v >= lo)
        return CLS_NEG;
    return CLS_NONE;                /* NaN lands here: comparisons are false */
}

/* Root of i with path halving (every other node on the path is re-hung on
 * its grandparent), which keeps the trees shallow without recursion. */
static inline int32_t uf_find(int32_t *parent, int32_t i)
{
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

/* Merge the trees of a and b: the larger root goes under the smaller one,
 * and the seed flag (held at roots, in `seed`) follows it. */
static inline void uf_union(int32_t *parent, int32_t *seed, int32_t a, int32_t b)
{
    int32_t ra = uf_find(parent, a), rb = uf_find(parent, b);
    if (ra == rb)
        return;
    if (ra > rb) {
        int32_t t = ra;
        ra = rb;
        rb = t;
    }
    parent[rb] = ra;
    seed[ra] |= seed[rb];
}

void ss_label(const float *z, int w, int h, float hi, float lo, int negative,
              int32_t *labels, int32_t *scratch, int *n_pos, int *n_neg)
{
    int32_t *parent = scratch;
    int32_t *seed = labels;         /* seed flags at roots until pass 2 */
    int np = 0, nn = 0;

    if (w <= 0 || h <= 0) {
        if (n_pos)
            *n_pos = 0;
        if (n_neg)
            *n_neg = 0;
        return;
    }

    /* Pass 1: classes, seeds and unions with the already visited
     * neighbours W, NW, N, NE of the same class. When N is in the same
     * class it is 8-adjacent to W, NW and NE, which were therefore merged
     * with it already (as N's neighbours or N as theirs): one union with N
     * suffices. */
    for (int y = 0; y < h; y++) {
        const float *zr = z + (size_t)y * w;
        const float *zu = y > 0 ? zr - w : NULL;
        for (int x = 0; x < w; x++) {
            const int32_t i = (int32_t)((size_t)y * w + x);
            const float v = zr[x];
            const int cls = pixel_class(v, lo, negative);
            if (cls == CLS_NONE) {
                seed[i] = 0;
                parent[i] = i;
                continue;
            }
            parent[i] = i;
            seed[i] = cls == CLS_POS ? (v >= hi) : (-v >= hi);
            if (x > 0 && pixel_class(zr[x - 1], lo, negative) == cls)
                uf_union(parent, seed, i, i - 1);
            if (zu) {
                if (pixel_class(zu[x], lo, negative) == cls) {
                    uf_union(parent, seed, i, i - w);
                } else {
                    if (x > 0 && pixel_class(zu[x - 1], lo, negative) == cls)
                        uf_union(parent, seed, i, i - w - 1);
                    if (x + 1 < w && pixel_class(zu[x + 1], lo, negative) == cls)
                        uf_union(parent, seed, i, i - w + 1);
                }
            }
        }
    }

    /* Pass 2, raster order: a root is the first pixel of its component, so
     * numbering roots in this order is numbering by first pixel. A root's
     * label is final before any later pixel of its component reads it. */
    const size_t n = (size_t)w * h;
    for (size_t k = 0; k < n; k++) {
        const int32_t i = (int32_t)k;
        const int cls = pixel_class(z[k], lo, negative);
        if (cls == CLS_NONE) {
            labels[k] = 0;
            continue;
        }
        const int32_t r = uf_find(parent, i);
        if (r == i) {
            if (seed[i])
                labels[k] = cls == CLS_POS ? ++np : -(++nn);
            else
                labels[k] = 0;
        } else {
            labels[k] = labels[r];
        }
    }

    if (n_pos)
        *n_pos = np;
    if (n_neg)
        *n_neg = nn;
}
