/*
 * wcs.c — gnomonic (TAN) celestial WCS with SIP distortion, from a frame's
 * FITS keywords (wcs.h). The formulas are those of FITS WCS Paper I
 * (Greisen & Calabretta 2002: linear part), Paper II (Calabretta & Greisen
 * 2002, §2.5 eq. 2 and §5.1.3: the TAN projection and the spherical
 * rotation) and the SIP convention (Shupe et al. 2005); each step below
 * names the one it implements.
 */
#include "wcs.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D2R (M_PI / 180.0)
#define R2D (180.0 / M_PI)
#define SIP_NEWTON_MAX 50          /* Newton steps of the SIP inverse */
#define SIP_NEWTON_TOL 1e-10       /* px */
#define FK5_MIN_EQUINOX 1984.0     /* Paper I: EQUINOX < 1984 without RADESYS means FK4 */

static void set_why(char *why, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_why(char *why, size_t n, const char *fmt, ...)
{
    if (!why || n == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
}

/* A numeric key: 1 found (value in *v), 0 absent, -1 present but not a
 * number (a string that does not parse fully, or a non-finite value). */
static int get_num(const ss_frame_meta_t *m, const char *key, double *v)
{
    const ss_wcs_key_t *k = ss_frame_wcs_find(m, key);
    if (!k)
        return 0;
    if (!k->is_string) {
        *v = k->dval;
        return isfinite(*v) ? 1 : -1;
    }
    char *end = NULL;
    const double d = strtod(k->sval, &end);
    if (end == k->sval)
        return -1;
    while (*end && isspace((unsigned char)*end))
        end++;
    if (*end || !isfinite(d))
        return -1;
    *v = d;
    return 1;
}

/* A string key with trailing blanks removed (FITS pads them); NULL if
 * absent or not a string. */
static const char *get_str(const ss_frame_meta_t *m, const char *key, char *buf, size_t n)
{
    const ss_wcs_key_t *k = ss_frame_wcs_find(m, key);
    if (!k || !k->is_string)
        return NULL;
    ss_strlcpy(buf, k->sval, n);
    size_t len = strlen(buf);
    while (len > 0 && buf[len - 1] == ' ')
        buf[--len] = '\0';
    return buf;
}

/* Parse CTYPEi: "RA---TAN", "DEC--TAN", optionally "-SIP" after.
 * *is_lon = 1 for RA, 0 for Dec; *sip = 1 with the suffix. Returns 0, or
 * -1 for anything else (another projection, frame or malformed). */
static int parse_ctype(const char *s, int *is_lon, int *sip)
{
    if (strncmp(s, "RA--", 4) == 0)
        *is_lon = 1;
    else if (strncmp(s, "DEC-", 4) == 0)
        *is_lon = 0;
    else
        return -1;
    if (strncmp(s + 4, "-TAN", 4) != 0)
        return -1;
    if (s[8] == '\0')
        *sip = 0;
    else if (strcmp(s + 8, "-SIP") == 0)
        *sip = 1;
    else
        return -1;
    return 0;
}

/* Read the SIP polynomial `pre` ("A" or "B"): order from <pre>_ORDER,
 * coefficients from every <pre>_p_q key with p + q <= order. */
static ss_err_t read_sip(const ss_frame_meta_t *m, char pre, int *order,
                         double c[SS_SIP_MAX_ORDER + 1][SS_SIP_MAX_ORDER + 1], char *why,
                         size_t why_len)
{
    char key[16];
    double v;
    snprintf(key, sizeof key, "%c_ORDER", pre);
    int r = get_num(m, key, &v);
    if (r != 1 || v != floor(v) || v < 0 || v > SS_SIP_MAX_ORDER) {
        set_why(why, why_len, "%s %s (need an integer 0..%d with -SIP)", key,
                r == 0 ? "missing" : "invalid", SS_SIP_MAX_ORDER);
        return SS_ERR_FORMAT;
    }
    *order = (int)v;
    memset(c, 0, sizeof(double) * (SS_SIP_MAX_ORDER + 1) * (SS_SIP_MAX_ORDER + 1));
    for (int i = 0; i < m->n_wcs; i++) {
        const ss_wcs_key_t *k = &m->wcs[i];
        int p, q, n = 0;
        if (k->key[0] != pre || k->key[1] != '_')
            continue;
        if (sscanf(k->key + 2, "%d_%d%n", &p, &q, &n) != 2 || k->key[2 + n] != '\0')
            continue;                   /* A_ORDER, A_DMAX and the like */
        if (p < 0 || q < 0 || p + q > *order)
            continue;                   /* beyond the declared order: not part of it */
        if (get_num(m, k->key, &v) != 1) {
            set_why(why, why_len, "%s is not a number", k->key);
            return SS_ERR_FORMAT;
        }
        c[p][q] = v;
    }
    return SS_OK;
}

ss_err_t ss_wcs_from_meta(ss_wcs_t *w, const ss_frame_meta_t *m, char *why, size_t why_len)
{
    char b1[80], b2[80];
    memset(w, 0, sizeof *w);
    const char *ct1 = get_str(m, "CTYPE1", b1, sizeof b1);
    const char *ct2 = get_str(m, "CTYPE2", b2, sizeof b2);
    if (!ct1 || !ct2) {
        set_why(why, why_len, "no celestial WCS (CTYPE1/CTYPE2 missing)");
        return SS_ERR_UNSUPPORTED;
    }
    int lon1, lon2, sip1, sip2;
    if (parse_ctype(ct1, &lon1, &sip1) != 0 || parse_ctype(ct2, &lon2, &sip2) != 0 ||
        lon1 == lon2) {
        set_why(why, why_len, "unsupported CTYPE pair '%s' '%s' (need RA---TAN / DEC--TAN[-SIP])",
                ct1, ct2);
        return SS_ERR_UNSUPPORTED;
    }
    w->lon_axis = lon1 ? 0 : 1;
    w->sip = sip1 || sip2;

    /* Celestial frame: ICRS, or FK5 (J2000; within 0.03" of ICRS). */
    char b3[80];
    const char *rs = get_str(m, "RADESYS", b3, sizeof b3);
    if (!rs)
        rs = get_str(m, "RADECSYS", b3, sizeof b3);
    double eq;
    if (rs) {
        if (strcmp(rs, "ICRS") != 0 && strcmp(rs, "FK5") != 0) {
            set_why(why, why_len, "unsupported RADESYS '%s' (ICRS or FK5)", rs);
            return SS_ERR_UNSUPPORTED;
        }
    } else if (get_num(m, "EQUINOX", &eq) == 1 && eq < FK5_MIN_EQUINOX) {
        set_why(why, why_len, "EQUINOX %g without RADESYS means FK4: unsupported", eq);
        return SS_ERR_UNSUPPORTED;
    }

    static const char *const crpix_k[2] = { "CRPIX1", "CRPIX2" };
    static const char *const crval_k[2] = { "CRVAL1", "CRVAL2" };
    for (int i = 0; i < 2; i++) {
        double pv, vv;
        if (get_num(m, crpix_k[i], &pv) != 1 || get_num(m, crval_k[i], &vv) != 1) {
            set_why(why, why_len, "%s or %s missing or not a number", crpix_k[i], crval_k[i]);
            return SS_ERR_FORMAT;
        }
        w->crpix[i] = pv;
        w->crval[i] = vv;
    }
    /* crval in (RA, Dec) order whatever the axis order */
    const double dec0 = w->crval[1 - w->lon_axis];
    if (fabs(dec0) > 90.0) {
        set_why(why, why_len, "reference Dec %g out of range", dec0);
        return SS_ERR_FORMAT;
    }

    /* Linear part (Paper I §2.1.2): PCi_j·CDELTi if any PC is given, else
     * CDi_j if any CD is given, else CDELTi with CROTA2 (Paper II eq.
     * 189 turned into CD: CD1_1 = CDELT1·cos ρ, CD1_2 = -CDELT2·sin ρ,
     * CD2_1 = CDELT1·sin ρ, CD2_2 = CDELT2·cos ρ). */
    static const char *const pc_k[2][2] = { { "PC1_1", "PC1_2" }, { "PC2_1", "PC2_2" } };
    static const char *const cd_k[2][2] = { { "CD1_1", "CD1_2" }, { "CD2_1", "CD2_2" } };
    int any_pc = 0, any_cd = 0;
    double pc[2][2] = { { 1, 0 }, { 0, 1 } }, cd[2][2] = { { 0, 0 }, { 0, 0 } };
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            double v;
            int r = get_num(m, pc_k[i][j], &v);
            if (r < 0) {
                set_why(why, why_len, "%s is not a number", pc_k[i][j]);
                return SS_ERR_FORMAT;
            }
            if (r == 1) {
                pc[i][j] = v;
                any_pc = 1;
            }
            r = get_num(m, cd_k[i][j], &v);
            if (r < 0) {
                set_why(why, why_len, "%s is not a number", cd_k[i][j]);
                return SS_ERR_FORMAT;
            }
            if (r == 1) {
                cd[i][j] = v;
                any_cd = 1;
            }
        }
    double cdelt[2] = { 1.0, 1.0 };
    int have_cdelt[2];
    have_cdelt[0] = get_num(m, "CDELT1", &cdelt[0]);
    have_cdelt[1] = get_num(m, "CDELT2", &cdelt[1]);
    if (have_cdelt[0] < 0 || have_cdelt[1] < 0) {
        set_why(why, why_len, "CDELT1/CDELT2 not a number");
        return SS_ERR_FORMAT;
    }
    if (any_pc) {
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                w->cd[i][j] = cdelt[i] * pc[i][j];
    } else if (any_cd) {
        memcpy(w->cd, cd, sizeof cd);
    } else if (have_cdelt[0] == 1 && have_cdelt[1] == 1) {
        double rho = 0.0;
        if (get_num(m, "CROTA2", &rho) < 0) {
            set_why(why, why_len, "CROTA2 not a number");
            return SS_ERR_FORMAT;
        }
        const double cr = cos(rho * D2R), sr = sin(rho * D2R);
        w->cd[0][0] = cdelt[0] * cr;
        w->cd[0][1] = -cdelt[1] * sr;
        w->cd[1][0] = cdelt[0] * sr;
        w->cd[1][1] = cdelt[1] * cr;
    } else {
        set_why(why, why_len, "no linear transform (PCi_j, CDi_j or CDELTi)");
        return SS_ERR_FORMAT;
    }
    const double det = w->cd[0][0] * w->cd[1][1] - w->cd[0][1] * w->cd[1][0];
    if (!(fabs(det) > 0.0) || !isfinite(det)) {
        set_why(why, why_len, "singular linear transform (det %g)", det);
        return SS_ERR_FORMAT;
    }
    w->cd_inv[0][0] = w->cd[1][1] / det;
    w->cd_inv[0][1] = -w->cd[0][1] / det;
    w->cd_inv[1][0] = -w->cd[1][0] / det;
    w->cd_inv[1][1] = w->cd[0][0] / det;

    /* LONPOLE (Paper II §2.4): default 0 when δ0 >= θ0 (= 90° for TAN),
     * else 180°. LATPOLE is irrelevant for zenithal projections. */
    w->lonpole = dec0 >= 90.0 ? 0.0 : 180.0;
    double lp;
    const int r = get_num(m, "LONPOLE", &lp);
    if (r < 0) {
        set_why(why, why_len, "LONPOLE not a number");
        return SS_ERR_FORMAT;
    }
    if (r == 1)
        w->lonpole = lp;

    if (w->sip) {
        ss_err_t e = read_sip(m, 'A', &w->a_order, w->a, why, why_len);
        if (e == SS_OK)
            e = read_sip(m, 'B', &w->b_order, w->b, why, why_len);
        if (e != SS_OK)
            return e;
    }
    w->sin_dp = sin(dec0 * D2R);
    w->cos_dp = cos(dec0 * D2R);
    return SS_OK;
}

/* Σ c[p][q]·u^p·v^q over p + q <= order (Horner in v inside, u outside). */
static double sip_poly(const double c[SS_SIP_MAX_ORDER + 1][SS_SIP_MAX_ORDER + 1], int order,
                       double u, double v)
{
    double sum = 0.0;
    for (int p = order; p >= 0; p--) {
        double s = 0.0;
        for (int q = order - p; q >= 0; q--)
            s = s * v + c[p][q];
        sum = sum * u + s;
    }
    return sum;
}

/* The SIP derivatives d/du and d/dv of the same polynomial. */
static void sip_grad(const double c[SS_SIP_MAX_ORDER + 1][SS_SIP_MAX_ORDER + 1], int order,
                     double u, double v, double *du, double *dv)
{
    double gu = 0.0, gv = 0.0;
    for (int p = 0; p <= order; p++)
        for (int q = 0; q + p <= order; q++) {
            const double cc = c[p][q];
            if (cc == 0.0)
                continue;
            if (p > 0)
                gu += cc * p * pow(u, p - 1) * pow(v, q);
            if (q > 0)
                gv += cc * q * pow(u, p) * pow(v, q - 1);
        }
    *du = gu;
    *dv = gv;
}

int ss_wcs_pix2sky(const ss_wcs_t *w, double x, double y, double *ra, double *dec)
{
    if (!isfinite(x) || !isfinite(y))
        return -1;
    /* Pixel offsets from CRPIX in FITS (1-based) pixel coordinates. */
    double u = (x + 1.0) - w->crpix[0];
    double v = (y + 1.0) - w->crpix[1];
    /* SIP (Shupe et al. eq. 1): the distortion is added before CD. */
    if (w->sip) {
        const double f = sip_poly(w->a, w->a_order, u, v);
        const double g = sip_poly(w->b, w->b_order, u, v);
        u += f;
        v += g;
    }
    /* Intermediate world coordinates (deg), Paper I eq. 3 with CD. */
    const double i1 = w->cd[0][0] * u + w->cd[0][1] * v;
    const double i2 = w->cd[1][0] * u + w->cd[1][1] * v;
    const double xi = w->lon_axis == 0 ? i1 : i2;      /* along the longitude axis */
    const double eta = w->lon_axis == 0 ? i2 : i1;     /* along the latitude axis */

    /* TAN, Paper II eqs. 14, 15, 54: R_θ = sqrt(x² + y²),
     * φ = arg(-y, x), θ = atan(180°/(π R_θ)). */
    const double rth = hypot(xi, eta);
    const double phi = atan2(xi, -eta);
    const double theta = atan2(R2D, rth);               /* radians; π/2 at R = 0 */

    /* Spherical rotation, Paper II eq. 2, with the native pole at
     * (α_p, δ_p) = CRVAL (zenithal projections) and φ_p = LONPOLE. */
    const double dphi = phi - w->lonpole * D2R;
    const double st = sin(theta), ctt = cos(theta);
    const double sd = st * w->sin_dp + ctt * w->cos_dp * cos(dphi);
    const double yy = -ctt * sin(dphi);
    const double xx = st * w->cos_dp - ctt * w->sin_dp * cos(dphi);
    const double ra0 = w->crval[w->lon_axis];
    double a = ra0 + atan2(yy, xx) * R2D;
    a = fmod(a, 360.0);
    if (a < 0.0)
        a += 360.0;
    if (a >= 360.0)
        a -= 360.0;
    *ra = a;
    *dec = asin(SS_CLAMP(sd, -1.0, 1.0)) * R2D;
    return 0;
}

int ss_wcs_sky2pix(const ss_wcs_t *w, double ra, double dec, double *x, double *y)
{
    if (!isfinite(ra) || !isfinite(dec))
        return -1;
    const double ra0 = w->crval[w->lon_axis];
    const double da = (ra - ra0) * D2R, d = dec * D2R;
    /* Inverse rotation, Paper II eq. 5. */
    const double sd = sin(d), cdl = cos(d);
    const double st = sd * w->sin_dp + cdl * w->cos_dp * cos(da);
    if (!(st > 0.0))
        return -1;                                       /* on or beyond the native horizon */
    const double phi = w->lonpole * D2R +
                       atan2(-cdl * sin(da), sd * w->cos_dp - cdl * w->sin_dp * cos(da));
    const double theta = asin(SS_CLAMP(st, -1.0, 1.0));
    /* TAN, Paper II eqs. 12, 13, 54: R_θ = (180°/π)·cot θ,
     * x = R_θ sin φ, y = -R_θ cos φ. */
    const double rth = R2D * cos(theta) / sin(theta);
    const double xi = rth * sin(phi), eta = -rth * cos(phi);
    const double i1 = w->lon_axis == 0 ? xi : eta;
    const double i2 = w->lon_axis == 0 ? eta : xi;
    const double U = w->cd_inv[0][0] * i1 + w->cd_inv[0][1] * i2;
    const double V = w->cd_inv[1][0] * i1 + w->cd_inv[1][1] * i2;
    double u = U, v = V;
    if (w->sip) {
        /* Solve u + f(u, v) = U, v + g(u, v) = V by Newton's method. */
        int k;
        for (k = 0; k < SIP_NEWTON_MAX; k++) {
            const double ru = u + sip_poly(w->a, w->a_order, u, v) - U;
            const double rv = v + sip_poly(w->b, w->b_order, u, v) - V;
            double fu, fv, gu, gv;
            sip_grad(w->a, w->a_order, u, v, &fu, &fv);
            sip_grad(w->b, w->b_order, u, v, &gu, &gv);
            const double j11 = 1.0 + fu, j12 = fv, j21 = gu, j22 = 1.0 + gv;
            const double det = j11 * j22 - j12 * j21;
            if (!(fabs(det) > 1e-12))
                return -1;
            const double du = (j22 * ru - j12 * rv) / det;
            const double dv = (j11 * rv - j21 * ru) / det;
            u -= du;
            v -= dv;
            if (!isfinite(u) || !isfinite(v))
                return -1;
            if (fabs(du) < SIP_NEWTON_TOL && fabs(dv) < SIP_NEWTON_TOL)
                break;
        }
        if (k == SIP_NEWTON_MAX)
            return -1;
    }
    *x = u + w->crpix[0] - 1.0;
    *y = v + w->crpix[1] - 1.0;
    return 0;
}

void ss_wcs_apply(const ss_wcs_t *w, ss_detlist_t *l)
{
    for (int i = 0; i < l->count; i++) {
        ss_detection_t *d = &l->items[i];
        d->has_radec = 0;
        d->ra = d->dec = 0.0;
        if (w && ss_wcs_pix2sky(w, d->x, d->y, &d->ra, &d->dec) == 0)
            d->has_radec = 1;
    }
}
