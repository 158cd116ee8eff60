/*
 * solve.c — plate solving through astrometry.net's solve-field (solve.h).
 *
 * The child runs in its own process group (posix_spawn, setpgroup 0), its
 * stdout and stderr into solve.log in the private directory; the parent
 * polls waitpid every 20 ms and at the limit (or on cancel) kills the
 * whole group (solve-field runs astrometry-engine as its own child), so
 * nothing outlives the limit. solve-field's own --cpulimit is set to the
 * same limit, as a second bound.
 */
#include "solve.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <fitsio.h>

#include "frame_fits.h"

#define TAG "solve"
#define MAX_ARGS 64

extern char **environ;

struct ss_solution {
    ss_frame_meta_t meta;           /* only n_wcs / wcs used: the keys */
    ss_wcs_t wcs;
    ss_solve_star_t *stars;
    int n_stars;
    double seconds;
    double rms_arcsec;              /* the refit's residual rms over the kept stars; NAN: none */
};


int ss_solve_available(const char *program)
{
    if (!program || !program[0])
        return 0;
    if (strchr(program, '/'))
        return access(program, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path)
        path = "/usr/bin:/bin";
    char dir[SS_PATH_MAX], full[SS_PATH_MAX * 2];
    while (*path) {
        size_t L = strcspn(path, ":");
        if (L > 0 && L < sizeof dir) {
            memcpy(dir, path, L);
            dir[L] = '\0';
            snprintf(full, sizeof full, "%s/%s", dir, program);
            struct stat st;
            if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0)
                return 1;
        }
        path += L;
        if (*path == ':')
            path++;
    }
    return 0;
}

/* ---- stars ---------------------------------------------------------------- */

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static int cmp_flux_desc(const void *a, const void *b)
{
    double x = ((const ss_solve_xy_t *)a)->flux, y = ((const ss_solve_xy_t *)b)->flux;
    return (x < y) - (x > y);
}

#define BLOCK 64


/* Median of the finite values among n (sorted in place); NAN if none. */
static float median_of(float *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(v[i]))
            v[k++] = v[i];
    if (k == 0)
        return NAN;
    qsort(v, (size_t)k, sizeof *v, cmp_float);
    return v[k / 2];
}

int ss_solve_find_stars(const float *img, int w, int h, ss_solve_xy_t *out, int max)
{
    if (!img || w < 8 || h < 8 || max <= 0)
        return 0;
    const int bx = (w + BLOCK - 1) / BLOCK, by = (h + BLOCK - 1) / BLOCK;
    float *bg = malloc(sizeof *bg * (size_t)bx * by);
    float *tmp = malloc(sizeof *tmp * (BLOCK / 2) * (BLOCK / 2));
    float *dev = malloc(sizeof *dev * (size_t)bx * by * 64);
    int cap = 4096, n = 0;
    ss_solve_xy_t *c = malloc(sizeof *c * (size_t)cap);
    if (!bg || !tmp || !dev || !c) {
        free(bg), free(tmp), free(dev), free(c);
        return 0;
    }
    /* background: the median of every other pixel of each block; sigma:
     * 1.4826 × the median absolute deviation of a sample of pixels from
     * their block's background */
    int nd = 0;
    for (int j = 0; j < by; j++)
        for (int i = 0; i < bx; i++) {
            int k = 0;
            for (int y = j * BLOCK; y < SS_MIN(h, (j + 1) * BLOCK); y += 2)
                for (int x = i * BLOCK; x < SS_MIN(w, (i + 1) * BLOCK); x += 2)
                    tmp[k++] = img[(size_t)y * w + x];
            bg[j * bx + i] = median_of(tmp, k);
            for (int y = j * BLOCK + 3; y < SS_MIN(h, (j + 1) * BLOCK); y += 8)
                for (int x = i * BLOCK + 3; x < SS_MIN(w, (i + 1) * BLOCK); x += 8) {
                    float v = img[(size_t)y * w + x] - bg[j * bx + i];
                    if (isfinite(v))
                        dev[nd++] = fabsf(v);
                }
        }
    const float sigma = 1.4826f * median_of(dev, nd);
    if (!(sigma > 0.0f)) {
        free(bg), free(tmp), free(dev), free(c);
        return 0;
    }
#define PIX(x, y) img[(size_t)(y) * w + (x)]
#define BG(x, y) bg[((y) / BLOCK) * bx + (x) / BLOCK]
    const int R = 3;                /* the window: 7×7 */
    for (int y = R; y < h - R; y++)
        for (int x = R; x < w - R; x++) {
            const float v = PIX(x, y), b = BG(x, y);
            if (!isfinite(v) || !isfinite(b) || v - b < 5.0f * sigma)
                continue;
            int peak = 1;
            for (int dy = -2; dy <= 2 && peak; dy++)
                for (int dx = -2; dx <= 2; dx++) {
                    if (!dx && !dy)
                        continue;
                    const float u = PIX(x + dx, y + dy);
                    /* ties: the first in raster order is the peak */
                    if (u > v || (u == v && (dy < 0 || (dy == 0 && dx < 0)))) {
                        peak = 0;
                        break;
                    }
                }
            if (!peak)
                continue;
            const float nb = 0.25f * (PIX(x - 1, y) + PIX(x + 1, y) + PIX(x, y - 1) + PIX(x, y + 1)) - b;
            if (!(nb >= 0.2f * (v - b)))
                continue;
            /* Gaussian-windowed centroid (SExtractor's XWIN): unbiased for
             * a symmetric PSF, unlike a plain moment over a cut window */
            double cx = x, cy = y, flux = 0.0;
            for (int it = 0; it < 6; it++) {
                double sw = 0.0, sx = 0.0, sy = 0.0;
                flux = 0.0;
                for (int dy = -R; dy <= R; dy++)
                    for (int dx = -R; dx <= R; dx++) {
                        const float u = PIX(x + dx, y + dy) - b;
                        if (!isfinite(u))
                            continue;
                        const double ex = x + dx - cx, ey = y + dy - cy;
                        const double g = exp(-(ex * ex + ey * ey) / (2.0 * 1.5 * 1.5));
                        sw += g * u;
                        sx += g * u * ex;
                        sy += g * u * ey;
                        flux += u;
                    }
                if (!(sw > 0.0))
                    break;
                double nx = cx + 2.0 * sx / sw, ny = cy + 2.0 * sy / sw;
                if (fabs(nx - x) > 1.5 || fabs(ny - y) > 1.5)
                    break;
                cx = nx, cy = ny;
            }
            if (!(flux > 0.0))
                continue;
            if (n == cap) {
                ss_solve_xy_t *g = realloc(c, sizeof *c * (size_t)cap * 2);
                if (!g)
                    break;
                c = g;
                cap *= 2;
            }
            c[n++] = (ss_solve_xy_t){ cx, cy, flux };
        }
#undef PIX
#undef BG
    qsort(c, (size_t)n, sizeof *c, cmp_flux_desc);
    const int k = SS_MIN(n, max);
    memcpy(out, c, sizeof *c * (size_t)k);
    free(bg), free(tmp), free(dev), free(c);
    return k;
}

/* ---- files ------------------------------------------------------------------- */

/* The x,y list: a binary table X, Y, FLUX, FITS 1-based pixels. */
static ss_err_t write_xyls(const char *path, const ss_solve_xy_t *s, int n, char *why, size_t wn)
{
    fitsfile *fp;
    int st = 0;
    char fn[SS_PATH_MAX + 32];
    snprintf(fn, sizeof fn, "!%s", path);
    char *ttype[] = { "X", "Y", "FLUX" }, *tform[] = { "1D", "1D", "1D" };
    fits_create_file(&fp, fn, &st);
    if (st) {
        ss_msgf(why, wn, "cannot create %s (CFITSIO %d)", path, st);
        return SS_ERR_IO;
    }
    fits_create_tbl(fp, BINARY_TBL, 0, 3, ttype, tform, NULL, "SOURCES", &st);
    double *col = malloc(sizeof *col * (size_t)(n > 0 ? n : 1));
    if (!col) {
        fits_close_file(fp, &st);
        return SS_ERR_NOMEM;
    }
    for (int c = 0; c < 3 && !st; c++) {
        for (int i = 0; i < n; i++)
            col[i] = c == 0 ? s[i].x + 1.0 : c == 1 ? s[i].y + 1.0 : s[i].flux;
        fits_write_col(fp, TDOUBLE, c + 1, 1, 1, n, col, &st);
    }
    free(col);
    int cst = 0;
    fits_close_file(fp, &cst);
    if (st || cst) {
        ss_msgf(why, wn, "cannot write %s (CFITSIO %d)", path, st ? st : cst);
        return SS_ERR_IO;
    }
    return SS_OK;
}

/* Column number of name, 0 when absent. */
static int find_col(fitsfile *fp, const char *name)
{
    int st = 0, col = 0;
    char tmpl[72];
    ss_strlcpy(tmpl, name, sizeof tmpl);
    fits_get_colnum(fp, CASEINSEN, tmpl, &col, &st);
    return st ? 0 : col;
}

/* The matched stars of solve-field's .corr table (field_x/y FITS pixels;
 * index_ra/dec; a tag-along magnitude MAG_VT, else MAG, when present). */
static ss_err_t read_corr(const char *path, ss_solution_t *s, char *why, size_t wn)
{
    fitsfile *fp;
    int st = 0;
    fits_open_table(&fp, path, READONLY, &st);
    if (st) {
        ss_msgf(why, wn, "cannot open %s (CFITSIO %d)", path, st);
        return SS_ERR_FORMAT;
    }
    long nrows = 0;
    fits_get_num_rows(fp, &nrows, &st);
    int cx = find_col(fp, "field_x"), cy = find_col(fp, "field_y");
    int cr = find_col(fp, "index_ra"), cd = find_col(fp, "index_dec");
    int cm = find_col(fp, "MAG_VT");
    if (!cm)
        cm = find_col(fp, "MAG");
    if (st || !cx || !cy || !cr || !cd || nrows < 0 || nrows > 1000000) {
        fits_close_file(fp, &st);
        ss_msgf(why, wn, "%s: not a .corr table (field_x, field_y, index_ra, index_dec)", path);
        return SS_ERR_FORMAT;
    }
    s->stars = calloc((size_t)(nrows > 0 ? nrows : 1), sizeof *s->stars);
    double *v = malloc(sizeof *v * (size_t)(nrows > 0 ? nrows : 1));
    if (!s->stars || !v) {
        free(v);
        fits_close_file(fp, &st);
        return SS_ERR_NOMEM;
    }
    const int cols[5] = { cx, cy, cr, cd, cm };
    for (int c = 0; c < 5 && !st && nrows > 0; c++) {
        if (!cols[c])
            continue;
        double nul = NAN;
        int anynul = 0;
        fits_read_col(fp, TDOUBLE, cols[c], 1, 1, nrows, &nul, v, &anynul, &st);
        for (long i = 0; i < nrows && !st; i++) {
            ss_solve_star_t *t = &s->stars[i];
            switch (c) {
            case 0: t->x = v[i] - 1.0; break;
            case 1: t->y = v[i] - 1.0; break;
            case 2: t->ra = v[i]; break;
            case 3: t->dec = v[i]; break;
            default: t->mag = v[i]; t->has_mag = isfinite(v[i]); break;
            }
        }
    }
    if (!cm)
        for (long i = 0; i < nrows; i++)
            s->stars[i].mag = NAN;
    free(v);
    int cst = 0;
    fits_close_file(fp, &cst);
    if (st) {
        ss_msgf(why, wn, "%s: read failed (CFITSIO %d)", path, st);
        return SS_ERR_FORMAT;
    }
    s->n_stars = (int)nrows;
    return SS_OK;
}

/* Remove the private directory and what is in it (one level: solve-field
 * writes no subdirectories there). */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[SS_PATH_MAX + 300];
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            if (unlink(p) != 0)
                SS_LOG(SS_LOG_WARNING, TAG, "cannot remove %s: %s", p, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(dir) != 0)
        SS_LOG(SS_LOG_WARNING, TAG, "cannot remove %s: %s", dir, strerror(errno));
}

/* The last line of the child's log, for a reason. */
static void log_tail(const char *path, char *out, size_t n)
{
    out[0] = '\0';
    FILE *fp = fopen(path, "r");
    if (!fp)
        return;
    char line[256];
    while (fgets(line, sizeof line, fp)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (line[0])
            ss_strlcpy(out, line, n);
    }
    fclose(fp);
}


/* ---- the refit ---------------------------------------------------------- */

#define D2R (M_PI / 180.0)

/* Gnomonic standard coordinates (degrees) of (ra, dec) about (a0, d0);
 * -1 beyond the horizon. */
static int tan_project(double a0, double d0, double ra, double dec, double *xi, double *eta)
{
    const double da = (ra - a0) * D2R, sd = sin(dec * D2R), cdc = cos(dec * D2R);
    const double s0 = sin(d0 * D2R), c0 = cos(d0 * D2R);
    const double den = s0 * sd + c0 * cdc * cos(da);
    if (den <= 1e-6)
        return -1;
    *xi = cdc * sin(da) / den / D2R;
    *eta = (c0 * sd - s0 * cdc * cos(da)) / den / D2R;
    return 0;
}

/* The inverse: (ra, dec) of standard coordinates (degrees). */
static void tan_deproject(double a0, double d0, double xi, double eta, double *ra, double *dec)
{
    const double x = xi * D2R, y = eta * D2R, s0 = sin(d0 * D2R), c0 = cos(d0 * D2R);
    const double den = c0 - y * s0;
    double a = a0 + atan2(x, den) / D2R;
    a = fmod(a, 360.0);
    *ra = a < 0.0 ? a + 360.0 : a;
    *dec = atan2(s0 + y * c0, hypot(x, den)) / D2R;
}

#define FIT_MAX_TERMS 6         /* order 2: 1, u, v, u², uv, v² */

/* Monomials u^i v^j of total order <= order, in the order (i, j) of
 * terms[]; returns their count. */
static int monomials(int order, double u, double v, double *out, int (*ij)[2])
{
    int k = 0;
    for (int t = 0; t <= order; t++)
        for (int i = t; i >= 0; i--) {
            int j = t - i;
            out[k] = pow(u, i) * pow(v, j);
            if (ij)
                ij[k][0] = i, ij[k][1] = j;
            k++;
        }
    return k;
}

/* Solve the m×m system a·x = b in place (partial pivoting). -1 if singular. */
static int solve_lin(double a[FIT_MAX_TERMS][FIT_MAX_TERMS], double *b, int m)
{
    for (int c = 0; c < m; c++) {
        int p = c;
        for (int r = c + 1; r < m; r++)
            if (fabs(a[r][c]) > fabs(a[p][c]))
                p = r;
        if (fabs(a[p][c]) < 1e-300)
            return -1;
        for (int k = 0; k < m; k++) {
            double t = a[c][k];
            a[c][k] = a[p][k];
            a[p][k] = t;
        }
        double t = b[c];
        b[c] = b[p];
        b[p] = t;
        for (int r = c + 1; r < m; r++) {
            double f = a[r][c] / a[c][c];
            for (int k = c; k < m; k++)
                a[r][k] -= f * a[c][k];
            b[r] -= f * b[c];
        }
    }
    for (int c = m - 1; c >= 0; c--) {
        for (int k = c + 1; k < m; k++)
            b[c] -= a[c][k] * b[k];
        b[c] /= a[c][c];
    }
    return 0;
}

static void key_num(ss_frame_meta_t *m, const char *k, double v)
{
    if (m->n_wcs >= SS_WCS_MAX)
        return;
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->dval = v;
}

static void key_str(ss_frame_meta_t *m, const char *k, const char *v)
{
    if (m->n_wcs >= SS_WCS_MAX)
        return;
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->is_string = 1;
    ss_strlcpy(w->sval, v, sizeof w->sval);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Refit the solution to its matched stars (README "Plate solving"):
 * solve-field's own tweak weights stars by its match odds and keeps a
 * blend as well as a clean star (0.65-0.9" at the corners of a 10"/px
 * test field whose stars are centroided to 0.1"). Here: the stars'
 * index positions projected onto the tangent plane at CRVAL, ξ and η
 * fitted by least squares as polynomials of the pixel offsets from CRPIX
 * (order 2 with at least 20 stars, else 1), stars beyond 3 robust σ (and
 * 0.05 px) rejected, CRVAL moved to the fit's constant term, three
 * rounds. The linear terms are the CD matrix; the quadratic ones, taken
 * through CD⁻¹, the SIP A and B polynomials. Returns 0 and replaces the
 * keys and WCS, or -1 (too few stars, singular): the solution is kept as
 * solve-field made it. */
static int refit(ss_solution_t *s, double crpix_x, double crpix_y)
{
    const int n = s->n_stars;
    if (n < 6)
        return -1;
    const int order = n >= 20 ? 2 : 1;
    double a0, d0;
    if (ss_wcs_pix2sky(&s->wcs, crpix_x, crpix_y, &a0, &d0) != 0)
        return -1;
    char *use = malloc((size_t)n);
    double *res = malloc(sizeof *res * (size_t)n);
    if (!use || !res) {
        free(use), free(res);
        return -1;
    }
    memset(use, 1, (size_t)n);
    const double SC = 1e-3;         /* pixel offsets in kpx: a conditioned system */
    double px[FIT_MAX_TERMS], py[FIT_MAX_TERMS];
    int ij[FIT_MAX_TERMS][2], m = 0, ok = 0;
    double rms = 0.0;
    for (int round = 0; round < 4; round++) {
        double A[FIT_MAX_TERMS][FIT_MAX_TERMS] = { { 0 } }, B[FIT_MAX_TERMS][FIT_MAX_TERMS];
        double bx[FIT_MAX_TERMS] = { 0 }, by[FIT_MAX_TERMS] = { 0 }, f[FIT_MAX_TERMS];
        int used = 0;
        for (int k = 0; k < n; k++) {
            double xi, eta;
            if (!use[k] || tan_project(a0, d0, s->stars[k].ra, s->stars[k].dec, &xi, &eta))
                continue;
            m = monomials(order, (s->stars[k].x - crpix_x) * SC, (s->stars[k].y - crpix_y) * SC,
                          f, ij);
            for (int r = 0; r < m; r++) {
                for (int c = 0; c < m; c++)
                    A[r][c] += f[r] * f[c];
                bx[r] += f[r] * xi;
                by[r] += f[r] * eta;
            }
            used++;
        }
        if (used < m + 3)
            break;
        memcpy(B, A, sizeof A);
        if (solve_lin(A, bx, m) || solve_lin(B, by, m))
            break;
        memcpy(px, bx, sizeof px);
        memcpy(py, by, sizeof py);
        ok = 1;
        /* the residuals, arcsec; the constant term moves CRVAL */
        int nr = 0;
        double sum2 = 0.0;
        for (int k = 0; k < n; k++) {
            double xi, eta;
            res[k] = INFINITY;
            if (tan_project(a0, d0, s->stars[k].ra, s->stars[k].dec, &xi, &eta))
                continue;
            monomials(order, (s->stars[k].x - crpix_x) * SC, (s->stars[k].y - crpix_y) * SC, f,
                      NULL);
            double fx = 0.0, fy = 0.0;
            for (int r = 0; r < m; r++)
                fx += px[r] * f[r], fy += py[r] * f[r];
            res[k] = hypot(fx - xi, fy - eta) * 3600.0;
            if (use[k])
                sum2 += res[k] * res[k], nr++;
        }
        rms = sqrt(sum2 / (nr > 0 ? nr : 1));
        double *sorted = malloc(sizeof *sorted * (size_t)n);
        if (!sorted)
            break;
        memcpy(sorted, res, sizeof *sorted * (size_t)n);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_double);
        /* a robust σ of the 2-d residual: its median is 1.177σ (Rayleigh) */
        const double sig = sorted[n / 2] / 1.1774;
        free(sorted);
        const double pxs = 3600.0 * sqrt(fabs(px[1] * py[2] - px[2] * py[1])) * SC;
        const double lim = fmax(3.0 * sig, 0.05 * pxs);
        for (int k = 0; k < n; k++)
            use[k] = res[k] <= lim;
        tan_deproject(a0, d0, px[0], py[0], &a0, &d0);
    }
    free(use), free(res);
    if (!ok)
        return -1;
    /* the last fit's constant term went into (a0, d0): its linear and
     * quadratic terms stand (the move is well below a pixel) */
    const double cd11 = px[1] * SC, cd12 = px[2] * SC, cd21 = py[1] * SC, cd22 = py[2] * SC;
    const double det = cd11 * cd22 - cd12 * cd21;
    if (!(fabs(det) > 0.0))
        return -1;
    ss_frame_meta_t *mt = malloc(sizeof *mt);
    if (!mt)
        return -1;
    mt->n_wcs = 0;
    key_str(mt, "CTYPE1", order > 1 ? "RA---TAN-SIP" : "RA---TAN");
    key_str(mt, "CTYPE2", order > 1 ? "DEC--TAN-SIP" : "DEC--TAN");
    key_str(mt, "RADESYS", "ICRS");
    key_num(mt, "CRVAL1", a0);
    key_num(mt, "CRVAL2", d0);
    key_num(mt, "CRPIX1", crpix_x + 1.0);
    key_num(mt, "CRPIX2", crpix_y + 1.0);
    key_num(mt, "CD1_1", cd11);
    key_num(mt, "CD1_2", cd12);
    key_num(mt, "CD2_1", cd21);
    key_num(mt, "CD2_2", cd22);
    if (order > 1) {
        key_num(mt, "A_ORDER", order);
        key_num(mt, "B_ORDER", order);
        for (int r = 0; r < m; r++) {
            const int i = ij[r][0], j = ij[r][1];
            if (i + j < 2)
                continue;
            /* (ξ, η)_ij = CD · (A_ij, B_ij) → (A, B)_ij = CD⁻¹ (ξ, η)_ij, per px^(i+j) */
            const double k = pow(SC, i + j);
            const double cx = px[r] * k, cy = py[r] * k;
            char key[32];
            snprintf(key, sizeof key, "A_%d_%d", i, j);
            key_num(mt, key, (cd22 * cx - cd12 * cy) / det);
            snprintf(key, sizeof key, "B_%d_%d", i, j);
            key_num(mt, key, (-cd21 * cx + cd11 * cy) / det);
        }
    }
    ss_wcs_t w;
    char why[160];
    if (ss_wcs_from_meta(&w, mt, why, sizeof why) != SS_OK) {
        SS_LOG(SS_LOG_WARNING, TAG, "the refitted WCS is refused (%s): solve-field's kept", why);
        free(mt);
        return -1;
    }
    ss_wcs_free(&s->wcs);
    s->wcs = w;
    s->meta.n_wcs = mt->n_wcs;
    memcpy(s->meta.wcs, mt->wcs, sizeof mt->wcs[0] * (size_t)mt->n_wcs);
    s->rms_arcsec = rms;
    free(mt);
    return 0;
}

/* ---- the child ------------------------------------------------------------- */

typedef struct argv_b {
    char *v[MAX_ARGS + 1];
    char buf[MAX_ARGS][SS_PATH_MAX + 32];
    int n;
} argv_b_t;

static void arg(argv_b_t *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void arg(argv_b_t *a, const char *fmt, ...)
{
    if (a->n >= MAX_ARGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->buf[a->n], sizeof a->buf[a->n], fmt, ap);
    va_end(ap);
    a->v[a->n] = a->buf[a->n];
    a->v[++a->n] = NULL;
}

/* Run argv with its output into log, in a new process group; wait at most
 * timeout_s. Returns SS_OK (exited 0), SS_ERR_TIMEOUT / SS_ERR_STOPPED
 * (killed), SS_ERR_IO (could not start, or a non-zero exit: *status). */
static ss_err_t run_child(char *const argv[], const char *log, double timeout_s,
                          const atomic_int *cancel, int *status)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t at;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&at);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_setpgroup(&at, 0);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&at, &none);
    posix_spawnattr_setsigdefault(&at, &all);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    int r = posix_spawnp(&pid, argv[0], &fa, &at, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    *status = -1;
    if (r != 0)
        return SS_ERR_IO;
    const double t0 = ss_now_mono();
    ss_err_t e = SS_OK;
    for (;;) {
        /* WNOWAIT: the child stays unreaped, so that its pid (the group's
         * id) cannot be reused before the group is killed */
        siginfo_t si;
        memset(&si, 0, sizeof si);
        int w = waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT);
        if (w == 0 && si.si_pid == pid) {
            *status = si.si_code == CLD_EXITED ? si.si_status : 128 + si.si_status;
            /* anything the child left running in its group goes too */
            kill(-pid, SIGKILL);
            while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
            return *status == 0 ? SS_OK : SS_ERR_IO;
        }
        if (w < 0 && errno != EINTR)
            return SS_ERR_IO;
        if (cancel && atomic_load(cancel))
            e = SS_ERR_STOPPED;
        else if (ss_now_mono() - t0 > timeout_s)
            e = SS_ERR_TIMEOUT;
        if (e != SS_OK)
            break;
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return e;
}

ss_err_t ss_solve_field(const ss_solve_opts_t *o, const float *img, int w, int h,
                        ss_solution_t **out, char *why, size_t wn)
{
    *out = NULL;
    const double t0 = ss_now_mono();
    const int max = o->max_stars > 0 ? o->max_stars : 200;
    ss_solve_xy_t *xy = malloc(sizeof *xy * (size_t)max);
    if (!xy)
        return SS_ERR_NOMEM;
    const int n = ss_solve_find_stars(img, w, h, xy, max);
    if (n < 8) {
        free(xy);
        ss_msgf(why, wn, "%d stars found in the image: too few to solve", n);
        return SS_ERR_REGISTRATION;
    }
    const char *tmp = getenv("TMPDIR");
    char dir[SS_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/skysieve-solve-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        free(xy);
        ss_msgf(why, wn, "mkdtemp %s: %s", dir, strerror(errno));
        return SS_ERR_IO;
    }
    char xyls[SS_PATH_MAX + 16], cfg[SS_PATH_MAX + 16], log[SS_PATH_MAX + 16];
    char wcsf[SS_PATH_MAX + 16], corr[SS_PATH_MAX + 16];
    snprintf(xyls, sizeof xyls, "%s/field.xyls", dir);
    snprintf(cfg, sizeof cfg, "%s/backend.cfg", dir);
    snprintf(log, sizeof log, "%s/solve.log", dir);
    snprintf(wcsf, sizeof wcsf, "%s/field.wcs", dir);
    snprintf(corr, sizeof corr, "%s/field.corr", dir);
    ss_err_t e = write_xyls(xyls, xy, n, why, wn);
    free(xy);
    if (e != SS_OK)
        goto out;
    const int limit = (int)ceil(o->timeout_s);
    argv_b_t *ap = calloc(1, sizeof *ap);   /* large: not on a thread's stack */
    if (!ap) {
        e = SS_ERR_NOMEM;
        goto out;
    }
#define a (*ap)
    arg(&a, "%s", o->program[0] ? o->program : "solve-field");
    arg(&a, "--no-plots");
    arg(&a, "--overwrite");
    arg(&a, "--no-remove-lines");
    arg(&a, "--uniformize");
    arg(&a, "0");
    arg(&a, "--dir");
    arg(&a, "%s", dir);
    arg(&a, "--out");
    arg(&a, "field");
    arg(&a, "--x-column");
    arg(&a, "X");
    arg(&a, "--y-column");
    arg(&a, "Y");
    arg(&a, "--sort-column");
    arg(&a, "FLUX");
    arg(&a, "--width");
    arg(&a, "%d", w);
    arg(&a, "--height");
    arg(&a, "%d", h);
    arg(&a, "--cpulimit");
    arg(&a, "%d", limit > 0 ? limit : 1);
    arg(&a, "--tag-all");
    arg(&a, "--crpix-center");
    arg(&a, "--new-fits");
    arg(&a, "none");
    arg(&a, "--rdls");
    arg(&a, "none");
    arg(&a, "--index-xyls");
    arg(&a, "none");
    if (o->scale_low > 0.0 && o->scale_high >= o->scale_low) {
        arg(&a, "--scale-units");
        arg(&a, "arcsecperpix");
        arg(&a, "--scale-low");
        arg(&a, "%.6g", o->scale_low);
        arg(&a, "--scale-high");
        arg(&a, "%.6g", o->scale_high);
    }
    if (o->has_pos) {
        arg(&a, "--ra");
        arg(&a, "%.8f", o->ra);
        arg(&a, "--dec");
        arg(&a, "%.8f", o->dec);
        arg(&a, "--radius");
        arg(&a, "%.6f", o->radius);
    }
    if (o->index_dir[0]) {
        FILE *fp = fopen(cfg, "w");
        if (!fp || fprintf(fp, "add_path %s\nautoindex\ninparallel\n", o->index_dir) < 0) {
            if (fp)
                fclose(fp);
            free(ap);
            ss_msgf(why, wn, "cannot write %s", cfg);
            e = SS_ERR_IO;
            goto out;
        }
        fclose(fp);
        arg(&a, "--config");
        arg(&a, "%s", cfg);
    }
    arg(&a, "%s", xyls);
#undef a
    int status;
    e = run_child(ap->v, log, o->timeout_s, o->cancel, &status);
    free(ap);
    if (e == SS_ERR_TIMEOUT) {
        ss_msgf(why, wn, "solve-field ran past %.0f s: killed", o->timeout_s);
        goto out;
    }
    if (e == SS_ERR_STOPPED) {
        ss_msgf(why, wn, "cancelled");
        goto out;
    }
    if (e != SS_OK) {
        char tail[200];
        log_tail(log, tail, sizeof tail);
        ss_msgf(why, wn, "solve-field %s (status %d): %s",
                status < 0 ? "could not be run" : "failed", status, tail);
        goto out;
    }
    if (access(wcsf, R_OK) != 0) {
        ss_msgf(why, wn, "no solution (%d stars handed over)", n);
        e = SS_ERR_REGISTRATION;
        goto out;
    }
    ss_solution_t *s = calloc(1, sizeof *s);
    if (!s) {
        e = SS_ERR_NOMEM;
        goto out;
    }
    s->rms_arcsec = NAN;
    char err[300];
    e = ss_fits_read_header_wcs(wcsf, &s->meta, err, sizeof err);
    if (e == SS_OK)
        e = ss_wcs_from_meta(&s->wcs, &s->meta, err, sizeof err);
    if (e != SS_OK) {
        free(s);
        ss_msgf(why, wn, "the solution's WCS: %s", err);
        goto out;
    }
    if ((e = read_corr(corr, s, err, sizeof err)) != SS_OK) {
        ss_msgf(why, wn, "%s", err);
        ss_solution_destroy(&s);
        goto out;
    }
    if (refit(s, (w - 1) / 2.0, (h - 1) / 2.0) != 0)
        SS_LOG(SS_LOG_INFO, TAG, "%d matched stars: solve-field's WCS kept as it is", s->n_stars);
    s->seconds = ss_now_mono() - t0;
    *out = s;
out:
    remove_dir(dir);
    return e;
}

const ss_wcs_key_t *ss_solution_keys(const ss_solution_t *s, int *n)
{
    *n = s->meta.n_wcs;
    return s->meta.wcs;
}

const ss_wcs_t *ss_solution_wcs(const ss_solution_t *s)
{
    return &s->wcs;
}

const ss_solve_star_t *ss_solution_stars(const ss_solution_t *s, int *n)
{
    *n = s->n_stars;
    return s->stars;
}

double ss_solution_rms(const ss_solution_t *s)
{
    return s->rms_arcsec;
}

double ss_solution_seconds(const ss_solution_t *s)
{
    return s->seconds;
}

void ss_solution_destroy(ss_solution_t **p)
{
    if (!p || !*p)
        return;
    ss_solution_t *s = *p;
    if (s->wcs.prm)
        ss_wcs_free(&s->wcs);
    free(s->stars);
    free(s);
    *p = NULL;
}

int ss_solution_zeropoint(const ss_solution_t *s, const float *img, int w, int h,
                          double psf_sigma, double gain, double exposure, int per_second,
                          ss_phot_zp_t *out)
{
    memset(out, 0, sizeof *out);
    int n = 0;
    const ss_solve_star_t *st = ss_solution_stars(s, &n);
    ss_phot_star_t *ps = n > 0 ? malloc((size_t)n * sizeof *ps) : NULL;
    int k = 0;
    for (int i = 0; ps && i < n; i++) {
        ss_phot_ap_t ap;
        if (st[i].has_mag && isfinite(st[i].mag) &&
            ss_phot_aperture(img, w, h, st[i].x, st[i].y, psf_sigma, gain, &ap) == 0)
            ps[k++] = (ss_phot_star_t){ .flux = ap.flux, .flux_err = ap.flux_err,
                                        .cat_mag = st[i].mag };
    }
    const int rc = ps ? ss_phot_fit_zeropoint(ps, k, exposure, per_second, out) : -1;
    free(ps);
    return rc;
}
