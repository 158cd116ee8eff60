/*
 * outputs.c — stamp boxes and the host forms of the residual's optional
 * outputs (outputs.h); the CPU backend's, and the reference of the CUDA
 * kernels in cuda/k_outputs.cu.
 */
#include "outputs.h"

#include "half_core.h"
#include "ss_common.h"

#define STAMP_SIZE_DEFAULT 31
#define STREAK_MAX_DEFAULT 127
#define STAMP_MAX_DEFAULT 64

ss_outputs_t ss_outputs_default(void)
{
    return (ss_outputs_t){ .f32 = 1,
                           .stamp_size = STAMP_SIZE_DEFAULT,
                           .stamp_streak_max = STREAK_MAX_DEFAULT,
                           .stamp_max = STAMP_MAX_DEFAULT };
}

/* The interval of side `side` centred on c, clipped to [0, n): its first
 * pixel in *a0, its length returned (0 when it misses). */
static int clip_span(int c, int side, int n, int *a0)
{
    int lo = c - (side - 1) / 2, hi = lo + side;    /* [lo, hi) */
    lo = SS_MAX(lo, 0);
    hi = SS_MIN(hi, n);
    *a0 = lo;
    return hi > lo ? hi - lo : 0;
}

/* A streak's box along one axis: [b0, b1] grown by g, capped at cap
 * around its centre, clipped to [0, n). */
static int streak_span(int b0, int b1, int g, int cap, int n, int *a0)
{
    int lo = b0 - g, hi = b1 + g + 1;               /* [lo, hi) */
    if (hi - lo > cap) {
        lo = (b0 + b1) / 2 - (cap - 1) / 2;
        hi = lo + cap;
    }
    lo = SS_MAX(lo, 0);
    hi = SS_MIN(hi, n);
    *a0 = lo;
    return hi > lo ? hi - lo : 0;
}

void ss_stamp_boxes(const ss_detlist_t *dets, int w, int h, const ss_outputs_t *o,
                    ss_stamps_t *st)
{
    st->count = 0;
    st->truncated = 0;
    st->npix = 0;
    const int side = SS_CLAMP(o->stamp_size, 1, SS_STAMP_SIDE_MAX);
    const int cap = SS_CLAMP(o->stamp_streak_max, side, SS_STAMP_SIDE_MAX);
    const int max = SS_CLAMP(o->stamp_max, 0, SS_STAMPS_MAX);
    for (int i = 0; i < dets->count; i++) {
        const ss_detection_t *d = &dets->items[i];
        ss_stamp_t s = { .det = i };
        if (d->kind == SS_KIND_STREAK) {
            s.w = streak_span(d->bbox_x0, d->bbox_x1, (side - 1) / 2, cap, w, &s.x0);
            s.h = streak_span(d->bbox_y0, d->bbox_y1, (side - 1) / 2, cap, h, &s.y0);
        } else {
            s.w = clip_span(d->peak_x, side, w, &s.x0);
            s.h = clip_span(d->peak_y, side, h, &s.y0);
        }
        const size_t n = (size_t)s.w * (size_t)s.h;
        if (st->count >= max || st->npix + n > SS_STAMP_PIXELS_MAX) {
            st->truncated++;
            continue;
        }
        s.offset = st->npix;
        st->npix += n;
        st->items[st->count++] = s;
    }
}

void ss_stamps_cut(const float *plane, int w, ss_stamps_t *st)
{
    for (int k = 0; k < st->count; k++) {
        const ss_stamp_t *s = &st->items[k];
        for (int y = 0; y < s->h; y++)
            memcpy(st->pixels + s->offset + (size_t)y * (size_t)s->w,
                   plane + (size_t)(s->y0 + y) * (size_t)w + (size_t)s->x0,
                   (size_t)s->w * sizeof(float));
    }
}

void ss_plane_to_f16(const float *src, size_t n, uint16_t *dst)
{
    const long long nn = (long long)n;
#pragma omp parallel for schedule(static)
    for (long long i = 0; i < nn; i++)
        dst[i] = ss_f16_bits(src[i]);
}
