/*
 * history.c — what a frame looks like once it enters the history
 * (ALGORITHM.md §3): its storage type, and object removal (the pixels of
 * every positive detection, dilated, replaced by the prediction, so that a
 * mover leaves no negative ghost in later residuals).
 *
 * The dilation is separable (a square structuring element is a row
 * dilation followed by a column dilation), each pass O(1) per pixel
 * whatever the radius: a pixel is in the dilated set when the nearest set
 * pixel in its row (column) lies within the radius, found with one sweep
 * in each direction.
 */
#include "stages.h"

#include <math.h>
#include <string.h>

/* Columns processed together in the column pass (their state fits on the
 * stack; the rows are walked in order, so memory access stays sequential). */
#define SS_DILATE_COLS 256

ss_dtype_t ss_history_dtype(ss_dtype_t raw, int calibrated)
{
    if (!calibrated && (raw == SS_DT_U8 || raw == SS_DT_U16 || raw == SS_DT_I16))
        return raw;
    return SS_DT_F32;
}

/* bit 0 of m: the source set; bit 1 set where a bit-0 pixel lies within
 * r columns in the same row. */
static void dilate_rows(const int32_t *labels, int w, int h, int r, uint8_t *m)
{
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const int32_t *lr = labels + (size_t)y * (size_t)w;
        uint8_t *mr = m + (size_t)y * (size_t)w;
        long last = -(long)r - 1;                  /* last set column seen */
        for (int x = 0; x < w; x++) {
            if (lr[x] > 0)
                last = x;
            mr[x] = (uint8_t)((lr[x] > 0) | ((x - last <= r) << 1));
        }
        long next = (long)w + r + 1;               /* next set column */
        for (int x = w - 1; x >= 0; x--) {
            if (lr[x] > 0)
                next = x;
            if (next - x <= r)
                mr[x] |= 2;
        }
    }
}

/* bit 2 of m: a bit-1 pixel lies within r rows in the same column. */
static void dilate_cols(int w, int h, int r, uint8_t *m)
{
    const int nblk = (w + SS_DILATE_COLS - 1) / SS_DILATE_COLS;
#pragma omp parallel for schedule(static)
    for (int b = 0; b < nblk; b++) {
        const int x0 = b * SS_DILATE_COLS, nx = SS_MIN(SS_DILATE_COLS, w - x0);
        long last[SS_DILATE_COLS];
        for (int j = 0; j < nx; j++)
            last[j] = -(long)r - 1;
        for (int y = 0; y < h; y++) {
            uint8_t *mr = m + (size_t)y * (size_t)w + x0;
            for (int j = 0; j < nx; j++) {
                if (mr[j] & 2)
                    last[j] = y;
                if (y - last[j] <= r)
                    mr[j] |= 4;
            }
        }
        for (int j = 0; j < nx; j++)
            last[j] = (long)h + r + 1;             /* now: next set row */
        for (int y = h - 1; y >= 0; y--) {
            uint8_t *mr = m + (size_t)y * (size_t)w + x0;
            for (int j = 0; j < nx; j++) {
                if (mr[j] & 2)
                    last[j] = y;
                if (last[j] - y <= r)
                    mr[j] |= 4;
            }
        }
    }
}

/* Clamp to [lo, hi] (hi = type max - 1, since the maximum is the invalid
 * sentinel) and round half away from zero; v is finite. The bounds are
 * integers, so clamping first gives the same as rounding first. Rounded
 * in double, where d + 0.5 is exact for every float below 2^52, and by
 * truncation — roundf() would be a library call per pixel on baseline
 * x86-64. */
static inline long round_clamp(float v, float lo, float hi)
{
    const double d = v < lo ? lo : v > hi ? hi : v;
    return d >= 0.0 ? (long)(d + 0.5) : -(long)(0.5 - d);
}

void ss_history_store(const float *frame, const float *P, const int32_t *labels, int radius,
                      int w, int h, void *dst, ss_dtype_t dt, uint8_t *scratch)
{
    const int remove = P != NULL && labels != NULL;
    if (remove) {
        if (radius < 0)
            radius = 0;
        dilate_rows(labels, w, h, radius, scratch);
        dilate_cols(w, h, radius, scratch);
    }
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const size_t row = (size_t)y * (size_t)w;
        const float *fr = frame + row;
        const float *pr = remove ? P + row : NULL;
        const uint8_t *mr = remove ? scratch + row : NULL;
        /* the value to store at x: P in the footprint, the frame elsewhere */
#define SS_HIST_VALUE(x) (mr && (mr[x] & 4) ? pr[x] : fr[x])
        switch (dt) {           /* one loop per type: no switch per pixel */
        case SS_DT_U8: {
            uint8_t *d = (uint8_t *)dst + row;
            for (int x = 0; x < w; x++) {
                const float v = SS_HIST_VALUE(x);
                d[x] = isnan(v) ? UINT8_MAX : (uint8_t)round_clamp(v, 0.0f, UINT8_MAX - 1);
            }
            break;
        }
        case SS_DT_U16: {
            uint16_t *d = (uint16_t *)dst + row;
            for (int x = 0; x < w; x++) {
                const float v = SS_HIST_VALUE(x);
                d[x] = isnan(v) ? UINT16_MAX : (uint16_t)round_clamp(v, 0.0f, UINT16_MAX - 1);
            }
            break;
        }
        case SS_DT_I16: {
            int16_t *d = (int16_t *)dst + row;
            for (int x = 0; x < w; x++) {
                const float v = SS_HIST_VALUE(x);
                d[x] = isnan(v) ? INT16_MAX : (int16_t)round_clamp(v, INT16_MIN, INT16_MAX - 1);
            }
            break;
        }
        default: {
            float *d = (float *)dst + row;
            for (int x = 0; x < w; x++)
                d[x] = SS_HIST_VALUE(x);
            break;
        }
        }
#undef SS_HIST_VALUE
    }
}

/* ---- slow movers taken out of stored frames -------------------------------- */

/* The pixel-integrated 1-D Gaussian of a source at c, at pixel X. */
static double pix_gauss(int X, double c, double k)
{
    return 0.5 * (erf((X + 0.5 - c) * k) - erf((X - 0.5 - c) * k));
}

/* v - d stored in type dt at index i of hist (the sentinel left alone). */
static void subtract_at(void *hist, ss_dtype_t dt, size_t i, double d)
{
    switch (dt) {
    case SS_DT_U8: {
        uint8_t *p = (uint8_t *)hist + i;
        if (*p != UINT8_MAX)
            *p = (uint8_t)round_clamp((float)((double)*p - d), 0.0f, UINT8_MAX - 1);
        break;
    }
    case SS_DT_U16: {
        uint16_t *p = (uint16_t *)hist + i;
        if (*p != UINT16_MAX)
            *p = (uint16_t)round_clamp((float)((double)*p - d), 0.0f, UINT16_MAX - 1);
        break;
    }
    case SS_DT_I16: {
        int16_t *p = (int16_t *)hist + i;
        if (*p != INT16_MAX)
            *p = (int16_t)round_clamp((float)((double)*p - d), INT16_MIN, INT16_MAX - 1);
        break;
    }
    default: {
        float *p = (float *)hist + i;
        if (!isnan(*p))
            *p = (float)((double)*p - d);
        break;
    }
    }
}

void ss_history_subtract(void *hist, ss_dtype_t dt, int w, int h, const ss_point_source_t *src,
                         int n)
{
    for (int s = 0; s < n; s++) {
        const ss_point_source_t *q = &src[s];
        if (!isfinite(q->x) || !isfinite(q->y) || !isfinite(q->flux) || !(q->sigma > 0.0) ||
            !isfinite(q->sigma))
            continue;
        const long R = (long)ceil(SS_SUB_RADIUS * q->sigma);
        const double k = 1.0 / (sqrt(2.0) * q->sigma);
        const long cx = lround(q->x), cy = lround(q->y);
        for (long Y = SS_MAX(cy - R, 0); Y <= SS_MIN(cy + R, (long)h - 1); Y++) {
            const double gy = pix_gauss((int)Y, q->y, k);
            for (long X = SS_MAX(cx - R, 0); X <= SS_MIN(cx + R, (long)w - 1); X++)
                subtract_at(hist, dt, (size_t)Y * (size_t)w + (size_t)X,
                            q->flux * pix_gauss((int)X, q->x, k) * gy);
        }
    }
}
