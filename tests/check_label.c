/*
 * check_label.c — tests of ss_label (pipeline/label.c, ALGORITHM.md §7):
 * hysteresis threshold and 8-connected labelling against a plain
 * flood-fill reference written here, on random masks of densities 1-60 %
 * (independent pixels and blobby fields), sizes that are not multiples of
 * any tile size (97×61, 333×257, 1000×999, 1×1, 1×N, N×1, ...), with seeds
 * (hysteresis), negative components and NaN pixels; plus a hand-labelled
 * frame and the degenerate frames (all NaN, all in the mask).
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/stages.h"
#include "ss_test.h"

#define HI 5.0f
#define LO 2.5f
#define GARBAGE 0x5a5a5a5a

/* ---- the reference: flood fill ------------------------------------------ */

/* Class of a pixel as stages.h defines the masks: +1 if z >= lo, -1 if
 * negative and -z >= lo, 0 otherwise (NaN: 0). */
static int ref_class(float v, float lo, int negative)
{
    if (v >= lo)
        return 1;
    if (negative && -v >= lo)
        return -1;
    return 0;
}

/* Scan in raster order; the first unvisited mask pixel met starts a new
 * component (so components are met in the order of their first pixel),
 * which a depth-first flood fill over the 8 neighbours of the same class
 * collects. Kept if any of its pixels is a seed. */
static void ref_label(const float *z, int w, int h, float hi, float lo, int negative,
                      int32_t *out, int *np, int *nn)
{
    const size_t n = (size_t)w * h;
    int32_t *stack = malloc(n * sizeof *stack);
    int32_t *member = malloc(n * sizeof *member);
    uint8_t *seen = calloc(n, 1);
    ck_assert(stack && member && seen);
    memset(out, 0, n * sizeof *out);
    *np = *nn = 0;
    for (size_t s = 0; s < n; s++) {
        const int cls = ref_class(z[s], lo, negative);
        if (!cls || seen[s])
            continue;
        int top = 0, nm = 0, has_seed = 0;
        stack[top++] = (int32_t)s;
        seen[s] = 1;
        while (top > 0) {
            const int32_t i = stack[--top];
            member[nm++] = i;
            if (cls * z[i] >= hi)
                has_seed = 1;
            const int x = i % w, y = i / w;
            for (int dy = -1; dy <= 1; dy++)
                for (int dx = -1; dx <= 1; dx++) {
                    const int xx = x + dx, yy = y + dy;
                    if (xx < 0 || yy < 0 || xx >= w || yy >= h)
                        continue;
                    const int32_t j = yy * w + xx;
                    if (!seen[j] && ref_class(z[j], lo, negative) == cls) {
                        seen[j] = 1;
                        stack[top++] = j;
                    }
                }
        }
        if (!has_seed)
            continue;
        const int32_t lab = cls > 0 ? ++*np : -(++*nn);
        for (int k = 0; k < nm; k++)
            out[member[k]] = lab;
    }
    free(stack);
    free(member);
    free(seen);
}

/* Run ss_label (on buffers full of garbage, to show it depends on no
 * initialisation) and the reference, and compare every pixel. */
static void compare(const float *z, int w, int h, int negative, const char *what)
{
    const size_t n = (size_t)w * h;
    int32_t *lab = malloc(n * sizeof *lab), *scr = malloc(n * sizeof *scr);
    int32_t *ref = malloc(n * sizeof *ref);
    ck_assert(lab && scr && ref);
    memset(lab, 0x5a, n * sizeof *lab);
    memset(scr, 0x5a, n * sizeof *scr);
    int np = -1, nn = -1, rp, rn;
    ss_label(z, w, h, HI, LO, negative, lab, scr, &np, &nn);
    ref_label(z, w, h, HI, LO, negative, ref, &rp, &rn);
    ck_assert_msg(np == rp && nn == rn, "%s %dx%d neg=%d: components %d/%d, reference %d/%d", what,
                  w, h, negative, np, nn, rp, rn);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(lab[i] == ref[i], "%s %dx%d neg=%d: pixel (%zu,%zu) label %d, reference %d",
                      what, w, h, negative, i % (size_t)w, i / (size_t)w, (int)lab[i], (int)ref[i]);
    free(lab);
    free(scr);
    free(ref);
}

/* Independent pixels: a fraction `density` of the pixels is in a mask
 * (half positive, half negative), `seed_p` of those reach the seed level;
 * 1 % of all pixels NaN. */
static void fill_iid(float *z, int w, int h, double density, double seed_p)
{
    for (size_t i = 0; i < (size_t)w * h; i++) {
        const double u = rng_unif();
        float v;
        if (u < density) {
            const float mag = rng_unif() < seed_p ? HI + (float)(3.0 * rng_unif())
                                                  : LO + (float)((HI - LO) * 0.999 * rng_unif());
            v = u < 0.5 * density ? mag : -mag;
        } else {
            v = (float)((2.0 * rng_unif() - 1.0) * LO * 0.999);
        }
        if (rng_unif() < 0.01)
            v = NAN;
        z[i] = v;
    }
}

/* Blobby field: white noise smoothed by two 5×5 box passes, scaled so
 * that about `density` of the pixels pass |z| >= lo; seeds are its peaks.
 * Gives large, irregular components (percolating at high density). */
static double fill_blobby(float *z, int w, int h, double density)
{
    const size_t n = (size_t)w * h;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    ck_assert(a && b);
    for (size_t i = 0; i < n; i++)
        a[i] = (float)(rng_unif() - 0.5);
    for (int pass = 0; pass < 2; pass++) {
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double s = 0;
                for (int d = -2; d <= 2; d++) {
                    const int xx = SS_CLAMP(x + d, 0, w - 1);
                    s += a[(size_t)y * w + xx];
                }
                b[(size_t)y * w + x] = (float)s;
            }
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                double s = 0;
                for (int d = -2; d <= 2; d++) {
                    const int yy = SS_CLAMP(y + d, 0, h - 1);
                    s += b[(size_t)yy * w + x];
                }
                a[(size_t)y * w + x] = (float)s;
            }
    }
    /* scale: the |a| quantile at 1 - density maps to LO */
    for (size_t i = 0; i < n; i++)
        b[i] = fabsf(a[i]);
    size_t k = (size_t)((1.0 - density) * (double)(n - 1));
    /* quickselect-free: a partial sort is fine at these sizes */
    float lo_v = 0.0f, hi_v = 0.0f;
    for (size_t i = 0; i < n; i++)
        hi_v = fmaxf(hi_v, b[i]);
    for (int it = 0; it < 24; it++) {          /* bisection on the count */
        const float mid = 0.5f * (lo_v + hi_v);
        size_t below = 0;
        for (size_t i = 0; i < n; i++)
            below += b[i] < mid;
        if (below > k)
            hi_v = mid;
        else
            lo_v = mid;
    }
    const float scale = hi_v > 0.0f ? LO / hi_v : 1.0f;
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        z[i] = a[i] * scale;
        in += fabsf(z[i]) >= LO;
        if (rng_unif() < 0.005)
            z[i] = NAN;
    }
    free(a);
    free(b);
    return (double)in / (double)n;
}

/* ======================================================================
 * tests
 * ==================================================================== */

/* A frame labelled by hand (hi 5, lo 2.5):
 *   - the seeded component (0,0),(1,1),(2,0) reaches (2,0) diagonally;
 *   - (3,2) and the bottom-left pair never reach the seed level: dropped;
 *   - (4,0),(4,1) is a seeded negative component;
 *   - the right-hand column pair (6,2),(6,3) is seeded and numbered 2
 *     (its first pixel comes after component 1's in raster order, though
 *     its seed (6,3) comes after the seedless pixels of row 3). */
START_TEST(test_label_hand)
{
    enum { W = 7, H = 4 };
    const float z[W * H] = {
        6, 0, 3, 0, -6, 0, 0,
        0, 3, 0, 0, -3, 0, 0,
        0, 0, 0, 3, 0, 0, 4,
        3, 3, 0, 0, 0, 0, 5,
    };
    const int32_t want_neg[W * H] = {
        1, 0, 1, 0, -1, 0, 0,
        0, 1, 0, 0, -1, 0, 0,
        0, 0, 0, 0, 0, 0, 2,
        0, 0, 0, 0, 0, 0, 2,
    };
    int32_t lab[W * H], scr[W * H];
    int np, nn;
    ss_label(z, W, H, HI, LO, 1, lab, scr, &np, &nn);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 1);
    for (int i = 0; i < W * H; i++)
        ck_assert_msg(lab[i] == want_neg[i], "pixel %d: %d want %d", i, (int)lab[i], (int)want_neg[i]);
    /* negatives off: the negative pixels are background */
    ss_label(z, W, H, HI, LO, 0, lab, scr, &np, &nn);
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 0);
    for (int i = 0; i < W * H; i++)
        ck_assert_int_eq(lab[i], want_neg[i] < 0 ? 0 : want_neg[i]);
}
END_TEST

/* Positive and negative pixels that touch are separate components; a
 * NaN pixel breaks a component; a U shape whose arms meet late is one
 * component numbered by its top-left pixel. */
START_TEST(test_label_touching_signs_nan_u)
{
    enum { W = 5, H = 4 };
    const float z[W * H] = {
        3, 0, 3, -6, -3,
        3, 0, 3, NAN, 6,
        3, 0, 3, 0, 3,
        3, 3, 6, 0, 0,
    };
    int32_t lab[W * H], scr[W * H];
    int np, nn;
    ss_label(z, W, H, HI, LO, 1, lab, scr, &np, &nn);
    /* U: (0,0)..(0,3),(1,3),(2,3),(2,0)..(2,2): one component, label 1.
     * (3,0),(4,0) negative: -1. (4,1),(4,2): positive; (4,1) touches the
     * negative (4,0) and (3,0) only, and the U only through the NaN
     * (3,1) or (3,2)=0, (3,3)=0: separate, label 2. */
    const int32_t want[W * H] = {
        1, 0, 1, -1, -1,
        1, 0, 1, 0, 2,
        1, 0, 1, 0, 2,
        1, 1, 1, 0, 0,
    };
    ck_assert_int_eq(np, 2);
    ck_assert_int_eq(nn, 1);
    for (int i = 0; i < W * H; i++)
        ck_assert_msg(lab[i] == want[i], "pixel %d: %d want %d", i, (int)lab[i], (int)want[i]);
}
END_TEST

/* Degenerate frames: all NaN; everything in the mask (one component);
 * a mask with no seed (no component); 1×1. */
START_TEST(test_label_degenerate)
{
    enum { W = 13, H = 11, N = W * H };
    float z[N];
    int32_t lab[N], scr[N];
    int np, nn;
    for (int i = 0; i < N; i++)
        z[i] = NAN;
    ss_label(z, W, H, HI, LO, 1, lab, scr, &np, &nn);
    ck_assert_int_eq(np + nn, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(lab[i], 0);
    for (int i = 0; i < N; i++)
        z[i] = 3.0f;
    z[N - 1] = 5.0f;            /* the only seed, in the last pixel */
    ss_label(z, W, H, HI, LO, 1, lab, scr, &np, &nn);
    ck_assert_int_eq(np, 1);
    ck_assert_int_eq(nn, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(lab[i], 1);
    z[N - 1] = 4.0f;
    ss_label(z, W, H, HI, LO, 1, lab, scr, &np, &nn);
    ck_assert_int_eq(np, 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(lab[i], 0);
    const float one = -7.0f;
    int32_t l1 = GARBAGE, s1 = GARBAGE;
    ss_label(&one, 1, 1, HI, LO, 1, &l1, &s1, &np, &nn);
    ck_assert_int_eq(l1, -1);
    ck_assert_int_eq(nn, 1);
    ss_label(&one, 1, 1, HI, LO, 0, &l1, &s1, &np, &nn);
    ck_assert_int_eq(l1, 0);
    ck_assert_int_eq(np + nn, 0);
}
END_TEST

static const int sizes[][2] = {
    { 97, 61 }, { 333, 257 }, { 1, 1 }, { 1, 777 }, { 777, 1 }, { 2, 2 },
    { 3, 130 }, { 130, 3 }, { 33, 31 }, { 65, 129 },
};
static const double densities[] = { 0.01, 0.05, 0.15, 0.3, 0.45, 0.6 };
#define N_SIZES ((int)(sizeof sizes / sizeof sizes[0]))
#define N_DENS ((int)(sizeof densities / sizeof densities[0]))

/* Independent random pixels over all sizes, densities, two seed rates,
 * negatives on and off. */
START_TEST(test_label_random_iid)
{
    rng_state = 0x1abe1 + (uint64_t)_i;
    const int w = sizes[_i][0], h = sizes[_i][1];
    float *z = malloc((size_t)w * h * sizeof *z);
    ck_assert(z);
    for (int d = 0; d < N_DENS; d++)
        for (int sp = 0; sp < 2; sp++) {
            fill_iid(z, w, h, densities[d], sp ? 0.3 : 0.03);
            compare(z, w, h, 1, "iid");
            compare(z, w, h, 0, "iid");
        }
    free(z);
}
END_TEST

/* Blobby fields: large irregular components, nested shapes, percolation. */
START_TEST(test_label_random_blobby)
{
    rng_state = 0xb10b + (uint64_t)_i;
    const int w = sizes[_i][0], h = sizes[_i][1];
    float *z = malloc((size_t)w * h * sizeof *z);
    ck_assert(z);
    for (int d = 0; d < N_DENS; d++) {
        fill_blobby(z, w, h, densities[d]);
        compare(z, w, h, 1, "blobby");
        compare(z, w, h, 0, "blobby");
    }
    free(z);
}
END_TEST

/* The large frame of the brief, 1000×999, at the low, middle and high
 * densities, both generators. */
START_TEST(test_label_large)
{
    rng_state = 0x1000999;
    const int w = 1000, h = 999;
    float *z = malloc((size_t)w * h * sizeof *z);
    ck_assert(z);
    const double dens[] = { 0.01, 0.3, 0.6 };
    for (int d = 0; d < 3; d++) {
        fill_iid(z, w, h, dens[d], 0.1);
        compare(z, w, h, 1, "iid-large");
        const double got = fill_blobby(z, w, h, dens[d]);
        ck_assert_msg(fabs(got - dens[d]) < 0.05, "blobby density %g, asked %g", got, dens[d]);
        compare(z, w, h, 1, "blobby-large");
    }
    free(z);
}
END_TEST

static Suite *label_suite(void)
{
    Suite *s = suite_create("label");
    TCase *tc = tcase_create("hand");
    tcase_add_test(tc, test_label_hand);
    tcase_add_test(tc, test_label_touching_signs_nan_u);
    tcase_add_test(tc, test_label_degenerate);
    suite_add_tcase(s, tc);
    tc = tcase_create("random");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_label_random_iid, 0, N_SIZES);
    tcase_add_loop_test(tc, test_label_random_blobby, 0, N_SIZES);
    tcase_add_test(tc, test_label_large);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(label_suite());
}
