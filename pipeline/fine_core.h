/*
 * fine_core.h — the decisions of the fine registration (ALGORITHM.md §2b,
 * ss_register_fine in stages.h) as a state machine over the band sums of
 * each pass, header-only so that the CPU (register_fine.c, which gets the
 * sums through a callback) and the CUDA backend (cuda/k_register.cu, which
 * iterates on the device with no host round trip) take every decision with
 * the same arithmetic. The kernels are built with --fmad=false and the C
 * code is ISO C (no contraction); sqrt and division round correctly on
 * both, so the same sums give the same bits.
 *
 * Use: ss_fine_begin; while phase is SS_FINE_PASS, a pass of sums at
 * (sx, sy) and ss_fine_iterate; when phase is SS_FINE_PROBE, a pass at
 * (sx + SS_FINE_PROBE_PX, sy + SS_FINE_PROBE_PX) and ss_fine_conclude
 * with both passes' bands; then ss_fine_report (host) fills an ss_shift_t.
 */
#ifndef SS_FINE_CORE_H
#define SS_FINE_CORE_H

#include "pipeline/dense_core.h"
#include "pipeline/stages.h"

#if defined(__CUDACC__)
#define SS_FC_FN static __host__ __device__ __forceinline__
#else
#define SS_FC_FN static inline
#endif

/* Fewer valid pixels than this: the system is not worth solving. */
#define SS_FC_MIN_PIXELS 16
/* Unknowns of the linear model: δx, δy, g - 1, b, seeing. */
#define SS_FC_NPAR 5
/* A step beyond this (px, per axis) leaves the linear regime the model
 * holds in: it is cut back (the coarse step starts within a pixel). */
#define SS_FC_MAX_STEP 1.0
/* The response map M of a step stays within [M_MIN_GAIN, 1/M_MIN_GAIN]
 * (mean of its diagonal): beyond, J is noise and the plain step is used. */
#define SS_FC_M_MIN_GAIN 0.05

/* Where the iteration stands. */
enum { SS_FINE_PASS = 0, SS_FINE_PROBE, SS_FINE_DONE };

/* Why it failed (ss_fine_report words it with why_val). */
enum {
    SS_FW_NONE = 0, SS_FW_PIXELS, SS_FW_FEATURELESS, SS_FW_SINGULAR, SS_FW_GAIN,
    SS_FW_STEP, SS_FW_CONTRAST
};

typedef struct ss_fine_state {
    double sx, sy;                  /* the estimate: the next pass samples here */
    double tol, min_det;            /* c->reg_tol, c->reg_min_det */
    double th[SS_FC_NPAR];          /* θ of the last pass */
    double gain, offset, det_ratio; /* of the last pass */
    double err_x, err_y, cov_xy, err_formal, contrast;  /* ss_fine_conclude */
    double why_val;                 /* the number the failure names */
    int max_iter, iterations;
    int phase;                      /* SS_FINE_PASS, _PROBE, _DONE */
    int why;                        /* SS_FW_*; SS_FW_NONE and DONE: ok */
} ss_fine_state_t;

/* v / 5, rounded to nearest as IEEE division rounds it. The GPU forms it
 * without a division: q = v·RN(1/5) and one fused correction, which
 * rounds correctly for every finite nonzero float (checked on all 2^32
 * inputs by check_cuda_parity, test_div5); zeros, infinities and NaN take
 * v·0.2 (the same ±0, ±inf, NaN). The host divides. */
SS_FC_FN float ss_div5(float v)
{
#if defined(__CUDA_ARCH__)
    const float q = v * 0.2f;
    if (v == 0.0f || !isfinite(v))
        return q;
    return __fmaf_rn(__fmaf_rn(-q, 5.0f, v), 0.2f, q);
#else
    return v / 5.0f;
#endif
}

/* The reference's smoothing S and central gradients gx, gy at the
 * interior pixel i of rows of w pixels (ALGORITHM.md §2b;
 * ss_reference_prep's planes, and what k_fine_sums computes on the fly):
 * S the mean of the five-point cross, NaN exactly when one of the five
 * is; the gradients NaN where S is. ss_ref_cross: the same from the
 * cross's values (centre, left, right, up, down). */
SS_FC_FN void ss_ref_cross(float c, float l, float r, float u, float d, float *S, float *gx,
                          float *gy)
{
    const float s = ss_div5(c + l + r + u + d);
    const int ok = !isnan(s);
    *S = s;
    *gx = ok ? (r - l) * 0.5f : NAN;
    *gy = ok ? (d - u) * 0.5f : NAN;
}

SS_FC_FN void ss_ref_stencil(const float *ref, size_t i, size_t w, float *S, float *gx, float *gy)
{
    ss_ref_cross(ref[i], ref[i - 1], ref[i + 1], ref[i - w], ref[i + w], S, gx, gy);
}

SS_FC_FN void ss_fine_begin(ss_fine_state_t *st, double sx0, double sy0, int max_iter,
                            double tol, double min_det)
{
    const ss_fine_state_t zero = { 0 };
    *st = zero;
    st->sx = sx0;
    st->sy = sy0;
    st->max_iter = max_iter > 1 ? max_iter : 1;
    st->tol = tol;
    st->min_det = min_det;
}

/* The whole-frame sums of a pass: the row bands added in order. */
SS_FC_FN void ss_fine_total(const double *bands, double *total)
{
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        total[k] = 0.0;
    for (int b = 0; b < SS_FINE_BANDS; b++)
        for (int k = 0; k < SS_FINE_NSUMS; k++)
            total[k] += bands[b * SS_FINE_NSUMS + k];
}

/* The normal matrix and right-hand side of a set of sums: the columns
 * (gx, gy, S, 1, L), the matrix from its upper triangle. */
SS_FC_FN void ss_fine_normal_eq(const double *s, double *M, double *rhs)
{
    const int upper[SS_FC_NPAR][SS_FC_NPAR] = {
        { SS_FS_XX, SS_FS_XY, SS_FS_XS, SS_FS_X, SS_FS_XL },
        { -1, SS_FS_YY, SS_FS_YS, SS_FS_Y, SS_FS_YL },
        { -1, -1, SS_FS_SS, SS_FS_S, SS_FS_SL },
        { -1, -1, -1, SS_FS_N, SS_FS_L },
        { -1, -1, -1, -1, SS_FS_LL },
    };
    const int right[SS_FC_NPAR] = { SS_FS_XE, SS_FS_YE, SS_FS_SE, SS_FS_E, SS_FS_LE };
    for (int i = 0; i < SS_FC_NPAR; i++) {
        for (int j = i; j < SS_FC_NPAR; j++)
            M[i * SS_FC_NPAR + j] = M[j * SS_FC_NPAR + i] = s[upper[i][j]];
        rhs[i] = s[right[i]];
    }
}

/* θ of a set of sums; 0, or -1 when the system is singular. */
SS_FC_FN int ss_fine_theta(const double *s, double *theta)
{
    double M[SS_FC_NPAR * SS_FC_NPAR];
    ss_fine_normal_eq(s, M, theta);
    return ss_dense_solve(M, theta, SS_FC_NPAR);
}

/* The residual sum of squares after the fit θ of the sums s. */
SS_FC_FN double ss_fine_rss(const double *s, const double *theta)
{
    double M[SS_FC_NPAR * SS_FC_NPAR], rhs[SS_FC_NPAR];
    ss_fine_normal_eq(s, M, rhs);
    double r = s[SS_FS_EE];
    for (int k = 0; k < SS_FC_NPAR; k++)
        r -= theta[k] * rhs[k];
    return r;
}

/* The map from a least-squares step to the step the sums ask for, M =
 * J⁻¹·A: A the gradient block of the normal matrix, J the true response
 * of the sums to the shift (Σ g·D, D the derivative of the bilinear sample
 * of the frame). The iteration stops where the sums vanish, so noise that
 * moves one step by ε moves the result by M·ε. For well-sampled, bright
 * stars M ≈ 1; the central differences of undersampled stars understate
 * the slope (M < 1), and the reference's own noise inflates A (M > 1: on a
 * faint σ = 3 px field the plain steps fell short and four iterations
 * left 0.2 px). Identity when J is singular or M is not a sane map. The
 * step θ0, θ1 is not divided by the gain: the gain absorbs the
 * reference's own noise (regression dilution), and a step scaled by 1/g
 * overshoots. */
SS_FC_FN void ss_fine_response(const double *s, double M[4])
{
    const double a00 = s[SS_FS_XX], a01 = s[SS_FS_XY], a11 = s[SS_FS_YY];
    const double j00 = s[SS_FS_XDX], j01 = s[SS_FS_XDY], j10 = s[SS_FS_YDX], j11 = s[SS_FS_YDY];
    const double det = j00 * j11 - j01 * j10;
    M[0] = M[3] = 1.0;
    M[1] = M[2] = 0.0;
    if (!(fabs(det) > 0.0) || !isfinite(det))
        return;
    /* J⁻¹ = [[j11, -j01], [-j10, j00]] / det */
    const double m0 = (j11 * a00 - j01 * a01) / det, m1 = (j11 * a01 - j01 * a11) / det;
    const double m2 = (-j10 * a00 + j00 * a01) / det, m3 = (-j10 * a01 + j00 * a11) / det;
    const double tr = m0 + m3;
    if (tr > 2.0 * SS_FC_M_MIN_GAIN && tr < 2.0 / SS_FC_M_MIN_GAIN) {
        M[0] = m0;
        M[1] = m1;
        M[2] = m2;
        M[3] = m3;
    }
}

/* A step cut to ±SS_FC_MAX_STEP; NaN stays NaN. */
SS_FC_FN double ss_fine_cut(double d)
{
    return d < -SS_FC_MAX_STEP ? -SS_FC_MAX_STEP : d > SS_FC_MAX_STEP ? SS_FC_MAX_STEP : d;
}

SS_FC_FN void ss_fine_fail(ss_fine_state_t *st, int why, double val)
{
    st->why = why;
    st->why_val = val;
    st->phase = SS_FINE_DONE;
}

/* One pass's decision: the sums of a pass at (sx, sy) (ss_fine_iterate:
 * its bands, as ss_fine_bands_t; _total: their ss_fine_total) give θ and a
 * Newton step; phase stays SS_FINE_PASS
 * while another pass is wanted, becomes SS_FINE_PROBE when the step fell
 * below tol or the passes ran out, SS_FINE_DONE with why on a failure. */
SS_FC_FN void ss_fine_iterate_total(ss_fine_state_t *st, const double *s)
{
    if (!(s[SS_FS_N] >= SS_FC_MIN_PIXELS))
        return ss_fine_fail(st, SS_FW_PIXELS, s[SS_FS_N]);
    const double uw = s[SS_FS_XX] * s[SS_FS_YY];
    const double det = uw - s[SS_FS_XY] * s[SS_FS_XY];
    st->det_ratio = uw > 0.0 ? det / uw : 0.0;
    if (!(uw > 0.0) || !(det >= st->min_det * uw))
        return ss_fine_fail(st, SS_FW_FEATURELESS, st->det_ratio);
    if (ss_fine_theta(s, st->th) != 0)
        return ss_fine_fail(st, SS_FW_SINGULAR, 0.0);
    st->gain = 1.0 + st->th[2];
    st->offset = st->th[3];
    if (!(st->gain >= SS_FINE_MIN_GAIN))
        return ss_fine_fail(st, SS_FW_GAIN, st->gain);
    double M[4];
    ss_fine_response(s, M);
    const double ex = st->th[0], ey = st->th[1];
    const double dx = ss_fine_cut(M[0] * ex + M[1] * ey), dy = ss_fine_cut(M[2] * ex + M[3] * ey);
    if (!isfinite(dx) || !isfinite(dy))
        return ss_fine_fail(st, SS_FW_STEP, 0.0);
    st->sx += dx;
    st->sy += dy;
    st->iterations++;
    if (dx * dx + dy * dy < st->tol * st->tol || st->iterations >= st->max_iter)
        st->phase = SS_FINE_PROBE;
}

SS_FC_FN void ss_fine_iterate(ss_fine_state_t *st, const double *bands)
{
    double s[SS_FINE_NSUMS];
    ss_fine_total(bands, s);
    ss_fine_iterate_total(st, s);
}

/* One deletion of the delete-a-band jackknife: the step from the sums
 * without band b of one direction's bands (SS_FINE_BANDS ×
 * SS_FINE_NSUMS), mapped to the result by M, into *dx, *dy. Returns 1,
 * or 0 when the band has no pixels or the rest is singular (it takes no
 * part). */
SS_FC_FN int ss_fine_jk_one(const double *bands, int b, const double *total, const double M[4],
                            double *dx, double *dy)
{
    const double *bb = bands + b * SS_FINE_NSUMS;
    if (!(bb[SS_FS_N] > 0.0))
        return 0;
    double s[SS_FINE_NSUMS], th[SS_FC_NPAR];
    for (int k = 0; k < SS_FINE_NSUMS; k++)
        s[k] = total[k] - bb[k];
    if (ss_fine_theta(s, th) != 0)
        return 0;
    *dx = M[0] * th[0] + M[1] * th[1];
    *dy = M[2] * th[0] + M[3] * th[1];
    return 1;
}

/* The jackknife's variance of each axis and the covariance from the
 * deletions that took part (ok[b] set) among bands 0..n-1, in band order.
 * Returns 0, or -1 with fewer than 2. */
SS_FC_FN int ss_fine_jk_var(const double *dx, const double *dy, const int *ok, int n,
                            double var[3])
{
    int nb = 0;
    double mx = 0.0, my = 0.0;
    for (int b = 0; b < n; b++)
        if (ok[b]) {
            mx += dx[b];
            my += dy[b];
            nb++;
        }
    if (nb < 2)
        return -1;
    mx /= nb;
    my /= nb;
    var[0] = var[1] = var[2] = 0.0;
    for (int b = 0; b < n; b++)
        if (ok[b]) {
            var[0] += (dx[b] - mx) * (dx[b] - mx);
            var[1] += (dy[b] - my) * (dy[b] - my);
            var[2] += (dx[b] - mx) * (dy[b] - my);
        }
    for (int k = 0; k < 3; k++)
        var[k] *= (double)(nb - 1) / nb;
    return 0;
}

/* The whole jackknife of one direction's bands, band by band. */
SS_FC_FN int ss_fine_jackknife(const double *bands, const double *total, const double M[4],
                               double var[3])
{
    double dx[SS_FINE_BANDS] = { 0 }, dy[SS_FINE_BANDS] = { 0 };
    int ok[SS_FINE_BANDS];
    for (int b = 0; b < SS_FINE_BANDS; b++)
        ok[b] = ss_fine_jk_one(bands, b, total, M, &dx[b], &dy[b]);
    return ss_fine_jk_var(dx, dy, ok, SS_FINE_BANDS, var);
}

/* One shift parameter's share of the formal error (k = 0: x, else y):
 * σe²·(N⁻¹)kk, NaN when the normal equations are singular. */
SS_FC_FN double ss_fine_formal_part(const double *s, const double *theta, int k)
{
    const double n = s[SS_FS_N];
    const double rss = ss_fine_rss(s, theta);
    const double var_e = n > SS_FC_NPAR ? fmax(rss, 0.0) / (n - SS_FC_NPAR) : 0.0;
    double M[SS_FC_NPAR * SS_FC_NPAR], col[SS_FC_NPAR] = { 0 }, unused[SS_FC_NPAR];
    ss_fine_normal_eq(s, M, unused);
    col[0] = k == 0 ? 1.0 : 0.0;                    /* selects, not col[k]: a GPU lane */
    col[1] = k == 0 ? 0.0 : 1.0;                    /* keeps col in registers */
    if (ss_dense_solve(M, col, SS_FC_NPAR) != 0)
        return NAN;
    return var_e * (k == 0 ? col[0] : col[1]);
}

/* The formal error: σe²·(N⁻¹) of the shift parameters, over 2, from the
 * two parts (each independent of the other: the GPU takes them on two
 * lanes). */
SS_FC_FN double ss_fine_formal_of(double part_x, double part_y)
{
    return sqrt((part_x + part_y) / 2.0);
}

SS_FC_FN double ss_fine_formal(const double *s, const double *theta)
{
    return ss_fine_formal_of(ss_fine_formal_part(s, theta, 0), ss_fine_formal_part(s, theta, 1));
}

/* The residual variance of a pass after fitting only a gain, an offset
 * and a seeing change (columns S, 1, L); -1 when it has too few pixels. */
SS_FC_FN double ss_fine_gain_offset_var(const double *s)
{
    const double n = s[SS_FS_N];
    if (!(n >= SS_FC_MIN_PIXELS))
        return -1.0;
    double M[9] = { s[SS_FS_SS], s[SS_FS_S], s[SS_FS_SL], s[SS_FS_S], n, s[SS_FS_L],
                    s[SS_FS_SL], s[SS_FS_L], s[SS_FS_LL] };
    double t[3] = { s[SS_FS_SE], s[SS_FS_E], s[SS_FS_LE] };
    double rss = s[SS_FS_EE];
    if (ss_dense_solve(M, t, 3) == 0)
        rss -= t[0] * s[SS_FS_SE] + t[1] * s[SS_FS_E] + t[2] * s[SS_FS_LE];
    else                                            /* degenerate: the offset alone */
        rss -= s[SS_FS_E] * s[SS_FS_E] / n;
    return fmax(rss, 0.0) / n;
}

/* The last pass's residual variance after its fit, max(rss, 0)/n: what
 * the match test compares the probe's against. With ss_fine_formal and
 * ss_fine_gain_offset_var of the probe it is one of the three numbers the
 * conclusion needs beside the jackknife, each independent of the others
 * (the GPU takes them on three lanes). */
SS_FC_FN double ss_fine_var_fit(const double *s, const double *th)
{
    return fmax(ss_fine_rss(s, th), 0.0) / s[SS_FS_N];
}

/* After the passes (phase SS_FINE_PROBE): the errors from the last pass —
 * the jackknife (vr over its row bands, vc over its column bands; okr,
 * okc: whether each had two deletions) is what is reported, x from the
 * rows and y from the columns, the formal error (err_formal) kept for
 * comparison — and the match test: does misaligning the frame by
 * (P, P) raise the residual variance from var_fit to var_probe?
 * det/(u·w) cannot tell a blank frame, clouds or another field: it only
 * sees the reference's gradients. phase becomes SS_FINE_DONE; why stays
 * SS_FW_NONE when the shift holds. */
SS_FC_FN void ss_fine_conclude_with(ss_fine_state_t *st, double err_formal, double var_fit,
                                    double var_probe, int okr, const double vr[3], int okc,
                                    const double vc[3])
{
    if (st->phase != SS_FINE_PROBE)
        return;
    st->err_x = okr ? sqrt(vr[0]) : NAN;
    st->err_y = okc ? sqrt(vc[1]) : NAN;
    st->cov_xy = okr && okc ? 0.5 * (vr[2] + vc[2]) : NAN;
    st->err_formal = err_formal;
    if (var_probe < 0.0)
        st->contrast = -1.0;                        /* no probe: cannot tell, fail */
    else if (var_fit > 0.0)
        st->contrast = var_probe / var_fit - 1.0;
    else                                            /* a noiseless perfect fit */
        st->contrast = var_probe > 0.0 ? INFINITY : 0.0;
    st->phase = SS_FINE_DONE;
    if (!(st->contrast >= SS_FINE_MIN_CONTRAST))
        ss_fine_fail(st, SS_FW_CONTRAST, st->contrast);
}

/* The same from the bands of the last pass and of the probe (each
 * ss_fine_bands_t), one step after the other. */
SS_FC_FN void ss_fine_conclude(ss_fine_state_t *st, const double *last, const double *probe)
{
    if (st->phase != SS_FINE_PROBE)
        return;
    double s[SS_FINE_NSUMS], pr[SS_FINE_NSUMS], M[4], vr[3], vc[3];
    ss_fine_total(last, s);
    ss_fine_total(probe, pr);
    ss_fine_response(s, M);
    const int okr = ss_fine_jackknife(last, s, M, vr) == 0;
    const int okc = ss_fine_jackknife(last + SS_FINE_BANDS * SS_FINE_NSUMS, s, M, vc) == 0;
    ss_fine_conclude_with(st, ss_fine_formal(s, st->th), ss_fine_var_fit(s, st->th),
                          ss_fine_gain_offset_var(pr), okr, vr, okc, vc);
}

#ifdef __cplusplus
extern "C" {
#endif
/* The result of a finished state (phase SS_FINE_DONE) as ss_register_fine
 * reports it, why worded (register_fine.c). */
void ss_fine_report(const ss_fine_state_t *st, ss_shift_t *out);
#ifdef __cplusplus
}
#endif

#endif
