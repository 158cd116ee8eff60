/*
 * wcs.c — celestial WCS of a frame's FITS keywords through WCSLIB (wcs.h):
 * the keys are checked for what skysieve needs (an equatorial ICRS/FK5
 * pair, the reference point, a linear part, complete SIP orders), written
 * back as header cards and handed to wcspih/wcsset, which know every
 * projection and the SIP and TPV distortions.
 */
#include "wcs.h"

#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wcslib/wcs.h>
#include <wcslib/wcserr.h>
#include <wcslib/wcshdr.h>


#define TAG "wcs"
#define FK5_MIN_EQUINOX 1984.0     /* Paper I: EQUINOX < 1984 without RADESYS means FK4 */
#define CARD 80

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

/* Keys whose value is a string (all others are numbers). */
static int string_key(const char *k)
{
    static const char *const pre[] = { "CTYPE", "CUNIT", "CNAME", "RADESYS", "RADECSYS",
                                       "WCSNAME", "SPECSYS", NULL };
    for (int i = 0; pre[i]; i++)
        if (strncmp(k, pre[i], strlen(pre[i])) == 0)
            return 1;
    return 0;
}

/* The equatorial axis pair: CTYPE1/2 both strings, one "RA--…", the
 * other "DEC-…". Returns 0, or -1 with why set. */
static ss_err_t check_axes(const ss_frame_meta_t *m, int *sip, char *why, size_t why_len)
{
    char b1[80], b2[80];
    const char *ct1 = get_str(m, "CTYPE1", b1, sizeof b1);
    const char *ct2 = get_str(m, "CTYPE2", b2, sizeof b2);
    if (!ct1 || !ct2) {
        ss_msgf(why, why_len, "no celestial WCS (CTYPE1/CTYPE2 missing)");
        return SS_ERR_UNSUPPORTED;
    }
    int ra1 = strncmp(ct1, "RA--", 4) == 0, de1 = strncmp(ct1, "DEC-", 4) == 0;
    int ra2 = strncmp(ct2, "RA--", 4) == 0, de2 = strncmp(ct2, "DEC-", 4) == 0;
    if (!((ra1 && de2) || (de1 && ra2))) {
        ss_msgf(why, why_len, "unsupported CTYPE pair '%s' '%s' (need RA / DEC axes)", ct1, ct2);
        return SS_ERR_UNSUPPORTED;
    }
    /* a distortion code after the projection: only those WCSLIB applies
     * (it would ignore an unknown one, and the positions be wrong) */
    const char *ct[2] = { ct1, ct2 };
    for (int i = 0; i < 2; i++)
        if (strlen(ct[i]) > 8 && strcmp(ct[i] + 8, "-SIP") != 0 && strcmp(ct[i] + 8, "-TPV") != 0) {
            ss_msgf(why, why_len, "unsupported distortion in CTYPE '%s' (-SIP or -TPV)", ct[i]);
            return SS_ERR_UNSUPPORTED;
        }
    *sip = strstr(ct1, "-SIP") != NULL || strstr(ct2, "-SIP") != NULL;
    return SS_OK;
}

/* ICRS, or FK5 (J2000; within 0.03" of ICRS): the frames whose RA/Dec
 * skysieve may publish as ICRS. */
static ss_err_t check_frame(const ss_frame_meta_t *m, char *why, size_t why_len)
{
    char b[80];
    const char *rs = get_str(m, "RADESYS", b, sizeof b);
    if (!rs)
        rs = get_str(m, "RADECSYS", b, sizeof b);
    double eq;
    if (rs && strcmp(rs, "ICRS") != 0 && strcmp(rs, "FK5") != 0) {
        ss_msgf(why, why_len, "unsupported RADESYS '%s' (ICRS or FK5)", rs);
        return SS_ERR_UNSUPPORTED;
    }
    if (!rs && get_num(m, "EQUINOX", &eq) == 1 && eq < FK5_MIN_EQUINOX) {
        ss_msgf(why, why_len, "EQUINOX %g without RADESYS means FK4: unsupported", eq);
        return SS_ERR_UNSUPPORTED;
    }
    return SS_OK;
}

/* What WCSLIB would silently default: the reference point, a linear
 * part, the SIP orders. Returns SS_OK, or SS_ERR_FORMAT with why. */
static ss_err_t check_keys(const ss_frame_meta_t *m, int sip, char *why, size_t why_len)
{
    static const char *const need[] = { "CRPIX1", "CRPIX2", "CRVAL1", "CRVAL2" };
    double v;
    for (int i = 0; i < 4; i++)
        if (get_num(m, need[i], &v) != 1) {
            ss_msgf(why, why_len, "%s missing or not a number", need[i]);
            return SS_ERR_FORMAT;
        }
    char b[80];
    const char *ct2 = get_str(m, "CTYPE2", b, sizeof b);
    double dec0;
    get_num(m, strncmp(ct2, "DEC-", 4) == 0 ? "CRVAL2" : "CRVAL1", &dec0);
    if (fabs(dec0) > 90.0) {
        ss_msgf(why, why_len, "reference Dec %g out of range", dec0);
        return SS_ERR_FORMAT;
    }
    static const char *const lin[] = { "PC1_1", "PC1_2", "PC2_1", "PC2_2", "CD1_1", "CD1_2",
                                       "CD2_1", "CD2_2", "CDELT1", "CDELT2" };
    int any = 0;
    for (int i = 0; i < 10; i++)
        any |= get_num(m, lin[i], &v) == 1;
    if (!any) {
        ss_msgf(why, why_len, "no linear transform (PCi_j, CDi_j or CDELTi)");
        return SS_ERR_FORMAT;
    }
    for (int i = 0; sip && i < 2; i++) {
        const char *key = i ? "B_ORDER" : "A_ORDER";
        int r = get_num(m, key, &v);
        if (r != 1 || v != floor(v) || v < 0 || v > SS_SIP_MAX_ORDER) {
            ss_msgf(why, why_len, "%s %s (need an integer 0..%d with -SIP)", key,
                    r == 0 ? "missing" : "invalid", SS_SIP_MAX_ORDER);
            return SS_ERR_FORMAT;
        }
    }
    return SS_OK;
}

/* One 80-character card for key k into card (no NUL). Numeric keys given
 * as strings that parse as numbers are written as numbers (*quoted
 * counts them); one that does not parse is an error. */
static ss_err_t write_card(const ss_frame_meta_t *m, const ss_wcs_key_t *k, char *card,
                           int *quoted, char *why, size_t why_len)
{
    char text[2 * sizeof k->sval + 16];
    if (string_key(k->key)) {
        char esc[2 * sizeof k->sval], *o = esc;
        for (const char *c = k->is_string ? k->sval : ""; *c; c++) {
            if (*c == '\'')
                *o++ = '\'';
            *o++ = *c;
        }
        *o = '\0';
        snprintf(text, sizeof text, "%-8.8s= '%s'", k->key, esc);
    } else {
        double v;
        if (get_num(m, k->key, &v) != 1) {
            ss_msgf(why, why_len, "%s is not a number", k->key);
            return SS_ERR_FORMAT;
        }
        *quoted += k->is_string;
        snprintf(text, sizeof text, "%-8.8s= %.17G", k->key, v);
    }
    size_t n = strlen(text);
    n = n < CARD ? n : CARD;
    memcpy(card, text, n);
    memset(card + n, ' ', CARD - n);
    return SS_OK;
}

/* WCSLIB's reason, or a fallback. */
static const char *wcslib_why(const struct wcsprm *p, int status)
{
    if (p && p->err && p->err->msg && p->err->msg[0])
        return p->err->msg;
    return status > 0 && status <= WCSERR_BAD_WORLD_COORD ? wcs_errmsg[status] : "unknown error";
}

/* Whether key k is left out of the header WCSLIB reads: a SIP term beyond
 * its declared order (the convention sums p + q <= ORDER; WCSLIB would
 * take it), and the inverse polynomials AP_, BP_ (approximations some
 * writers get wrong; WCSLIB inverts the forward ones itself); any SIP
 * term when CTYPE does not say -SIP. */
static int left_out(const ss_frame_meta_t *m, int sip, const char *k)
{
    if (strncmp(k, "AP_", 3) == 0 || strncmp(k, "BP_", 3) == 0)
        return 1;
    if (!sip && (strncmp(k, "A_", 2) == 0 || strncmp(k, "B_", 2) == 0))
        return 1;               /* SIP terms without "-SIP": not a SIP header */
    int p, q, n = 0;
    if ((k[0] != 'A' && k[0] != 'B') || k[1] != '_' ||
        sscanf(k + 2, "%d_%d%n", &p, &q, &n) != 2 || k[2 + n] != '\0')
        return 0;
    double order;
    return get_num(m, k[0] == 'A' ? "A_ORDER" : "B_ORDER", &order) != 1 || p + q > order;
}

ss_err_t ss_wcs_from_meta(ss_wcs_t *w, const ss_frame_meta_t *m, char *why, size_t why_len)
{
    memset(w, 0, sizeof *w);
    int sip = 0;
    ss_err_t e = check_axes(m, &sip, why, why_len);
    if (e == SS_OK)
        e = check_frame(m, why, why_len);
    if (e == SS_OK)
        e = check_keys(m, sip, why, why_len);
    if (e != SS_OK)
        return e;
    char hdr[SS_WCS_MAX * CARD + 1];
    int quoted = 0, ncards = 0;
    for (int i = 0; i < m->n_wcs; i++) {
        if (left_out(m, sip, m->wcs[i].key))
            continue;
        if ((e = write_card(m, &m->wcs[i], hdr + ncards++ * CARD, &quoted, why, why_len)) != SS_OK)
            return e;
    }
    hdr[ncards * CARD] = '\0';
    int nreject = 0, nwcs = 0;
    struct wcsprm *prm = NULL;
    int st = wcspih(hdr, ncards, WCSHDR_all, 0, &nreject, &nwcs, &prm);
    if (st != 0 || nwcs < 1) {
        ss_msgf(why, why_len, "WCSLIB could not read the WCS keys (wcspih status %d)", st);
        wcsvfree(&nwcs, &prm);
        return SS_ERR_FORMAT;
    }
    wcserr_enable(1);
    st = wcsset(prm);
    if (st == 0 && (prm->lng < 0 || prm->lat < 0))
        st = -1;
    if (st != 0) {
        int bad_proj = st == WCSERR_BAD_CTYPE || st < 0;
        ss_msgf(why, why_len, "%s (CTYPE '%s' '%s')",
                st == WCSERR_SINGULAR_MTX ? "singular linear transform"
                : st < 0                  ? "not a celestial WCS"
                                          : wcslib_why(prm, st),
                prm->ctype[0], prm->naxis > 1 ? prm->ctype[1] : "");
        wcsvfree(&nwcs, &prm);
        return bad_proj ? SS_ERR_UNSUPPORTED : SS_ERR_FORMAT;
    }
    static atomic_int warned;       /* once per process: the same writer every frame */
    if (quoted && !atomic_exchange(&warned, 1))
        SS_LOG(SS_LOG_WARNING, TAG, "%d numeric WCS keys written as quoted strings (read as "
               "numbers; the writer should not quote them)", quoted);
    w->prm = prm;
    w->nwcs = nwcs;
    w->quoted = quoted;
    w->sip = sip;
    return SS_OK;
}

void ss_wcs_free(ss_wcs_t *w)
{
    if (w && w->prm)
        wcsvfree(&w->nwcs, &w->prm);
    if (w)
        w->prm = NULL;
}

int ss_wcs_pix2sky(const ss_wcs_t *w, double x, double y, double *ra, double *dec)
{
    if (!w->prm || !isfinite(x) || !isfinite(y))
        return -1;
    double pix[2] = { x + 1.0, y + 1.0 }, img[2], world[2], phi, theta;
    int stat = 0;
    if (wcsp2s(w->prm, 1, 2, pix, img, &phi, &theta, world, &stat) != 0 || stat)
        return -1;
    double a = fmod(world[w->prm->lng], 360.0);
    *ra = a < 0.0 ? a + 360.0 : a;
    *dec = world[w->prm->lat];
    return isfinite(*ra) && isfinite(*dec) ? 0 : -1;
}

int ss_wcs_sky2pix(const ss_wcs_t *w, double ra, double dec, double *x, double *y)
{
    if (!w->prm || !isfinite(ra) || !isfinite(dec))
        return -1;
    double world[2], img[2], pix[2], phi, theta;
    world[w->prm->lng] = ra;
    world[w->prm->lat] = dec;
    int stat = 0;
    if (wcss2p(w->prm, 1, 2, world, &phi, &theta, img, pix, &stat) != 0 || stat)
        return -1;
    *x = pix[0] - 1.0;
    *y = pix[1] - 1.0;
    return 0;
}

double ss_wcs_pixel_scale(const ss_wcs_t *w, double x, double y)
{
    double r0, d0, r1, d1;
    if (ss_wcs_pix2sky(w, x, y, &r0, &d0) || ss_wcs_pix2sky(w, x + 1.0, y, &r1, &d1))
        return NAN;
    const double k = M_PI / 180.0;
    double c = sin(d0 * k) * sin(d1 * k) + cos(d0 * k) * cos(d1 * k) * cos((r1 - r0) * k);
    return acos(fmin(1.0, c)) / k;
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
