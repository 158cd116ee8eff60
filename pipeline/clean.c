/*
 * clean.c — sharp-outlier cleaning of a frame before it enters the history
 * (cosmic-ray hits, hot pixels not learned yet).
 *
 * Why: a cosmic ray stored in a history frame reappears, scaled by its
 * weight, as a sharp spike in the prediction P and a negative spike in the
 * residual for as long as the frame stays in the history. The guided filter
 * (§4) then fits the collinear spikes in P and r with a large local slope A
 * and paints ghosts on the stars of that window: false alarms. Object
 * removal takes out what was detected, but frames stored during warm-up
 * (before any detection) and undetected hits stay. Cleaning every stored
 * frame of features sharper than any PSF removes the cause.
 */
#include "stages.h"

#include <math.h>

/* ring minimum of the 8 neighbours of (x, y) that are finite; NAN if none */
static float ring_min(const float *f, int w, int h, int x, int y)
{
    float m = NAN;
    for (int dy = -1; dy <= 1; dy++) {
        int yy = y + dy;
        if (yy < 0 || yy >= h)
            continue;
        for (int dx = -1; dx <= 1; dx++) {
            int xx = x + dx;
            if ((dx == 0 && dy == 0) || xx < 0 || xx >= w)
                continue;
            float v = f[(size_t)yy * w + xx];
            if (isfinite(v) && !(v >= m))
                m = v;
        }
    }
    return m;
}

int ss_clean_sharp(const float *frame, const float *med, int w, int h, double k, double ratio,
                   float *out, float *scratch)
{
    size_t n = (size_t)w * (size_t)h;
    for (size_t i = 0; i < n; i++)
        scratch[i] = frame[i] - med[i];          /* NaN where either is */
    float sigma = ss_noise_mad(scratch, w, h, SS_CLEAN_STRIDE, scratch + n);
    float thresh = (float)k * sigma;
    int cleaned = 0;
#pragma omp parallel for schedule(static) reduction(+ : cleaned)
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            size_t i = (size_t)y * w + x;
            float v = frame[i], m = med[i];
            out[i] = v;
            if (!isfinite(v) || !isfinite(m) || !(sigma > 0.0f))
                continue;
            float dv = v - m;
            if (!(dv > thresh))
                continue;
            float lo = ring_min(frame, w, h, x, y);
            if (!isfinite(lo))
                lo = m;
            if (dv >= (float)ratio * (v - lo)) {
                out[i] = m;
                cleaned++;
            }
        }
    }
    return cleaned;
}
