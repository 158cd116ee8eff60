/*
 * synth.c — synthetic star fields (contract in synth.h).
 *
 * Model of one frame t, in ADU, before noise:
 *   sky(x, y) = K_t · (sky + sky_grad_x·(x - xc) + sky_grad_y·(y - yc))   (detector
 *               coordinates, xc, yc = frame centre; not dimmed by transparency;
 *               K_t = (1 + sky_trend)^t · max(0, 1 + sky_var·N(0,1)), 1 when both are off)
 *   + G_t(x, y), the stray-light glow of synth.h (detector coordinates, not dimmed)
 *   + T_t · Σ stars, rendered at p - s_t with this frame's PSF (σ_t)
 *   + T_t · movers (point sources, or Gaussians of mover_sigma) and an optional streak
 * then Poisson noise (gain e-/ADU) and Gaussian read noise — or, with the
 * uniform noise model, integer noise U{0..uniform_max} alone — then the
 * detector terms that do not go through the optics: bias, hot pixels (fixed
 * detector positions) and cosmic-ray hits (1–3 sharp pixels), then clipping
 * to the saturation level / type range and rounding for integer types.
 * Overscan columns (right of the image) hold bias + the read noise (or the
 * uniform noise) only. A frame with height_jitter keeps its first
 * height - U{0..k} rows: the image is rendered as always and the last rows
 * are not written, so every remaining pixel is the one the full frame had.
 *
 * Choices worth knowing (all documented again where they happen):
 * - The sky is periodic with a period of the frame size plus a margin of
 *   SKY_MARGIN px on each side. Stars live in that tile, so any drift or jump
 *   keeps the field populated, and no star can be cut at the seam because its
 *   rendering radius is smaller than the margin. Star density: n_stars is the
 *   mean number of stars over the frame area (the tile holds proportionally
 *   more).
 * - s_t = P_t - P_0, where P_t = jitter_t + drift·t + Σ jumps: frame 0 has
 *   zero shift by definition ("against frame 0's pointing"). A jump moves the
 *   pointing by jump_px in a random direction for good (a re-point).
 * - Gaussian PSF: integrated exactly over each pixel (product of erf
 *   differences, separable). Moffat PSF: FWHM equal to the Gaussian's
 *   (alpha = FWHM / (2·sqrt(2^(1/β) - 1))), sampled 3×3 per pixel in the core,
 *   truncated at a radius that encloses ≥ 99.7 % of the flux and renormalised
 *   by the analytic enclosed fraction, so the rendered flux is F to ~1e-3.
 * - Noise reference σ_pix = sqrt(sky/gain + read_noise²) at the centre sky
 *   (read_noise alone when gain = 0). Object fluxes are set from SNRs with
 *   σ_ref = σ_pix, or 1 ADU for a noiseless configuration (so transients stay
 *   visible in noiseless test frames).
 * - Mover: F = mover_snr · σ_ref · sqrt(π) · (2k² + 1/12) / k, k =
 *   psf_sigma (the configured σ, which is what the pipeline's matched
 *   filter uses; 1/12 a pixel's own variance), times T_t. Its truth
 *   SNR is the peak it has in this frame (point_snr): times T_t, and lower
 *   in a frame whose seeing is worse than psf_sigma. Movers move
 *   at constant velocity in sky coordinates; their frame position wraps
 *   inside the frame (an edge band of a few σ is kept free) so every mover is
 *   visible in every frame. The truth numbers the branches of each mover's
 *   path between wraps (segment: on one branch it moves on one line). Optional: a speed per mover from a list, pairs of extra
 *   movers whose paths cross at a given frame (their draws come from a
 *   stream of their own, so the other movers stay as they were), and a
 *   random place after each wrap (wrap_scatter; see mover_position).
 * - Trailed mover (trail on): a mover moves L = speed·exposure/frame_interval
 *   px during its exposure, and its image is that path convolved with its
 *   Gaussian (the frame's σ_t, or mover_sigma), drawn as a streak is (below;
 *   the Moffat PSF's trail too has a Gaussian cross profile). Its position
 *   is the trail's centre (the mid-exposure place), the trail running from
 *   p − v·e/(2Δ) to p + v·e/(2Δ). The SNR keeps its meaning, the peak of
 *   the §6 SNR map (kernel σ_k = psf_sigma), here at the trail's centre: for
 *   a segment of λ ADU per px of length and image sigma σ, with s² = σ² +
 *   σ_k², z = λ·sqrt(2)·σ_k·erf(L / (2·sqrt(2)·s)) / (σ_pix·s), which tends
 *   to the point's F·σ_k / (sqrt(π)·σ_pix·s²) as L → 0 and to λ / σ_pix
 *   (a streak's) for long trails. Why a mover stays a point below L =
 *   sqrt(12)·σ: the trail adds L²/12 to the image's second moment along the
 *   path; below that length it adds less than the PSF's own σ² (axis ratio
 *   under sqrt(2), while the detector calls a component a streak at a/b ≥
 *   3, which a trail reaches at L = sqrt(96)·σ), and a point of the same
 *   peak SNR differs from the trail only in that elongation and in 20 %
 *   less flux at the limit (2·sqrt(π)·σ·erf(L/(4σ))/L = 0.80 there, σ =
 *   σ_k). The movers of quality scenarios 1–5 (2 px/frame at σ 1.4 and
 *   0.68, comets of σ 2 at 0.5 px/frame) lie below it and are drawn as
 *   they always were.
 * - Streak: a segment of linear flux density λ (ADU per px of length) convolved
 *   with a Gaussian of this frame's σ (also for the Moffat PSF: the cross
 *   profile of a streak stays Gaussian). streak_snr is the value of the SNR
 *   map of ALGORITHM.md §6 (point-source matched filter of the same σ) on the
 *   streak's axis away from its ends: z = λ / σ_pix, so λ = streak_snr·σ_ref
 *   and F = λ·L. Streaks live in frame coordinates (one frame only).
 * - Cosmic-ray hits: Poisson(cosmic_rate · W·H / 1e6) per frame, each 1–3
 *   pixels in a straight 8-connected line, each pixel receiving
 *   σ_ref · U(COSMIC_MIN_SIGMA, COSMIC_MAX_SIGMA) ADU, after noise and not
 *   PSF-convolved.
 * - Hot pixels: n_hot distinct detector pixels, each hot_level·U(0.5, 1.5)
 *   ADU (fixed per pixel) added after the noise.
 *
 * Determinism: one seeded xoshiro256** per purpose — setup (stars, hot
 * pixels, movers), per frame (pointing, seeing, transparency), per frame
 * streak and cosmic streams, and one per frame row for the noise — each seeded
 * through splitmix64 from (seed, stream, frame, row). The knobs added later
 * (sky_var, stray, height_jitter, overscan, uniform noise) draw from streams
 * of their own and only when on, so a configuration without them renders
 * exactly the pixels it always did. Rows are rendered by
 * bands in parallel (OpenMP when built with it) and every pixel sums its
 * sources in the same order, so the output is bit-identical for any thread
 * count, and switching one feature on does not change the draws of another.
 */
#include "tools/synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TAG "synth"

#define SKY_MARGIN 64               /* px of periodic sky tile beyond each frame edge */
#define MAX_RADIUS (SKY_MARGIN - 1) /* largest rendering radius (px): never crosses the seam */
#define MAX_PSF_SIGMA 10.0          /* px; 5σ (+ wobble) must fit MAX_RADIUS */
#define GAUSS_MIN_RADIUS_SIGMA 5.0  /* render Gaussians to ≥ 5σ (loses < 1e-6 of the flux) */
#define RENDER_FLOOR_FRAC 1e-3      /* extend windows until a pixel is < 1e-3·σ_ref */
#define MOFFAT_ENCLOSED 0.997       /* Moffat truncation: enclosed flux fraction */
#define MOFFAT_CORE_ALPHA 2.0       /* 3×3 supersampling within 2α+1 px of the centre */
#define SUPERSAMPLE 3               /* sub-samples per axis where the PSF is sampled */
#define STREAK_HALF_WIDTH_SIGMA 5.0 /* streak cross profile rendered to ±5σ */
#define MIN_SEEING_FACTOR 0.3       /* σ_t ≥ 0.3·psf_sigma whatever the wobble draw */
#define MAX_SEEING_FACTOR 3.0
#define MIN_TRANSPARENCY 0.05       /* T_t ≥ 0.05 */
#define POISSON_INVERSION_MAX 30.0  /* inversion below this mean, normal approx. above */
#define POISSON_INVERSION_KMAX 1000
#define COSMIC_MIN_SIGMA 20.0       /* cosmic pixel deposit, in units of σ_ref */
#define COSMIC_MAX_SIGMA 200.0
#define COSMIC_MAX_HITS 4096        /* per frame; more are dropped (logged) */
#define COSMIC_MAX_LEN 3
#define HOT_LEVEL_LO 0.5            /* hot pixel level = hot_level · U(lo, hi) */
#define HOT_LEVEL_HI 1.5
#define BAND_ROWS 16                /* rows per parallel work item */
#define MAX_OVERSCAN 4096           /* overscan columns */
#define MAX_UNIFORM 65535           /* uniform noise: largest k of U{0..k} */
#define MAX_SKY_TREND 1.0           /* sky_trend in [-0.5, 1] per frame */
#define MIN_SKY_TREND (-0.5)
#define MAX_DIM 65536
#define RECENT_BRANCHES 16          /* a mover back on one of its last 16 branches keeps its
                                     * segment number */
#define MAX_PIXELS (1ull << 30)

/* independent random streams (see the header comment) */
enum {
    STREAM_SETUP = 1, STREAM_FRAME, STREAM_STREAK, STREAM_COSMIC, STREAM_NOISE,
    /* later knobs: each its own stream, drawn from only when the knob is on */
    STREAM_SKY, STREAM_STRAY, STREAM_STRAY_SETUP, STREAM_GEOM, STREAM_OVERSCAN, STREAM_UNIFORM,
    STREAM_CROSSING, STREAM_SCATTER
};

/* ---- PRNG: splitmix64-seeded xoshiro256**, Box-Muller normals ---------- */

typedef struct rng {
    uint64_t s[4];
    int has_spare;
    double spare;
} rng_t;

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A generator for (seed, stream, a, b): the four inputs are mixed one after
 * the other so that nearby tuples give unrelated states. */
static void rng_seed(rng_t *r, uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    uint64_t x = seed;
    uint64_t h = splitmix64(&x);
    x = h ^ stream;
    h = splitmix64(&x);
    x = h ^ a;
    h = splitmix64(&x);
    x = h ^ b;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    r->has_spare = 0;
    r->spare = 0.0;
}

static inline uint64_t rotl64(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_u64(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl64(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl64(s[3], 45);
    return result;
}

/* uniform in [0, 1) with 53 random bits */
static inline double rng_uniform(rng_t *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

static double rng_normal(rng_t *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1;
    do
        u1 = rng_uniform(r);
    while (u1 <= 0.0);
    double u2 = rng_uniform(r);
    double rad = sqrt(-2.0 * log(u1));
    double th = 2.0 * M_PI * u2;
    r->spare = rad * sin(th);
    r->has_spare = 1;
    return rad * cos(th);
}

/* Poisson deviate: CDF inversion for small means (exact), rounded normal
 * approximation for large ones (error of the shape < 1 % beyond mean 30). */
static double rng_poisson(rng_t *r, double lam)
{
    if (!(lam > 0.0))
        return 0.0;
    if (lam < POISSON_INVERSION_MAX) {
        double u = rng_uniform(r);
        double p = exp(-lam), c = p;
        int k = 0;
        while (u > c && k < POISSON_INVERSION_KMAX) {
            k++;
            p *= lam / k;
            c += p;
        }
        return (double)k;
    }
    double v = floor(lam + sqrt(lam) * rng_normal(r) + 0.5);
    return v < 0.0 ? 0.0 : v;
}

/* Integer uniform on {0..k} (the modulo bias is below 2^-48 for k < 2^16). */
static double uniform_int(rng_t *r, int k)
{
    return k > 0 ? (double)(rng_u64(r) % (uint64_t)(k + 1)) : 0.0;
}

/* ---- the generator ------------------------------------------------------ */

typedef struct src {        /* one point source of this frame, frame coordinates */
    double x, y, flux;
    int r;                  /* rendering radius, px */
    double sg;              /* > 0: a Gaussian of this sigma (comet), not the frame's PSF */
} src_t;

typedef struct cosmic_px {
    int x, y;
    float adu;
} cosmic_px_t;

typedef struct streak {
    int on;
    double x0, y0, x1, y1, len, ux, uy, lambda;
    int bx0, by0, bx1, by1; /* bounding box of the rendered pixels, inclusive */
} streak_t;

/* A mover's recent branches (the wrap cells of its frame position: on one
 * branch it moves on one straight line of the sky), most recent first,
 * with their segment numbers. */
typedef struct mover_branches {
    long cell[RECENT_BRANCHES][4];
    int seg[RECENT_BRANCHES];
    int n, next;
} mover_branches_t;

struct ss_synth {
    ss_synth_cfg_t c;
    double start_mjd;
    double tile_w, tile_h;      /* periodic sky tile */
    double sigma_pix, sigma_ref;
    double moffat_alpha;        /* for psf_sigma; scaled with the seeing */

    int n_stars;
    double *star_x, *star_y, *star_f;   /* sky (frame-0) coordinates, ADU */

    int n_hot;
    int *hot_idx;               /* sorted pixel indices */
    float *hot_adu;
    int *hot_x, *hot_y;         /* the same pixels as coordinates (the truth lists them) */

    int n_movers;               /* n_movers + 2·n_crossing */
    double *mov_x, *mov_y, *mov_vx, *mov_vy;
    double *mov_f;              /* flux of each mover at transparency 1, ADU */
    double *mov_len;            /* its trail's length, px (0: drawn as a point) */
    mover_branches_t *mov_br;   /* the branches each mover was on lately (wrap_segment) */
    double mover_edge;          /* px kept free at the frame edges */
    double stray_phi0;          /* stray-light direction at frame 0, rad */

    /* per-frame scratch, allocated once */
    float *model;               /* W·H floats: the frame before clipping/rounding */
    src_t *srcs;
    int n_srcs;
    cosmic_px_t *cosmic;
    int n_cosmic;
    streak_t streak;
    streak_t *trails;           /* this frame's trailed movers (n_movers at most) */
    double *trail_sg;           /* the Gaussian sigma each is drawn with */
    int n_trails;
    double sigma_t, alpha_t, moffat_norm_t;
    double sky_f;               /* K_t: this frame's sky factor */
    int sky_scaled;             /* sky_var or sky_trend on: the sky goes through K_t */
    double stray_a, stray_qx, stray_qy, stray_l;   /* this frame's glow (stray > 0) */
    double *stray_col;          /* W: exp(-(x - qx)² / (2 L²)) of this frame */
    int out_w, out_h;           /* this frame as written: width + overscan, rows kept */

    uint64_t seq;
    double p0x, p0y;            /* frame 0's pointing */
    double jump_x, jump_y;      /* accumulated pointing jumps */
};

void ss_synth_defaults(ss_synth_cfg_t *c)
{
    memset(c, 0, sizeof *c);
    c->width = 1024;
    c->height = 1024;
    c->dtype = SS_DT_U16;
    c->seed = 1;
    c->frame_interval = 1.0;
    c->start_mjd = 0.0;
    c->exposure = 1.0;
    c->trail = 1;

    c->n_stars = 2000;
    c->flux_min = 300.0;
    c->flux_max = 2.0e5;
    c->star_alpha = 2.0;
    c->psf = SS_SYNTH_GAUSS;
    c->psf_sigma = 1.4;
    c->moffat_beta = 2.5;
    c->seeing_wobble = 0.0;

    c->sky = 1000.0;
    c->sky_grad_x = 0.0;
    c->sky_grad_y = 0.0;
    c->gain = 1.0;
    c->read_noise = 5.0;
    c->bias = 0.0;
    c->saturation = 0.0;

    c->jitter = 1.0;
    c->drift_x = c->drift_y = 0.0;
    c->jump_prob = 0.0;
    c->jump_px = 20.0;
    c->transparency = 0.0;

    c->n_hot = 0;
    c->hot_level = 2000.0;
    c->cosmic_rate = 0.0;

    c->n_movers = 0;
    c->mover_snr = 10.0;
    c->mover_speed = 2.0;
    c->streak_prob = 0.0;
    c->streak_snr = 10.0;
    c->streak_len_min = 50.0;
    c->streak_len_max = 300.0;

    c->wcs = 0;
    c->wcs_ra = 180.0;
    c->wcs_dec = 30.0;
    c->wcs_scale = 1.0;
}

#define CHECK(cond, ...)                          \
    do {                                          \
        if (!(cond)) {                            \
            SS_LOG(SS_LOG_ERR, TAG, __VA_ARGS__); \
            return -1;                            \
        }                                         \
    } while (0)

static int finite_nonneg(double v) { return isfinite(v) && v >= 0.0; }

/* Reject configurations that cannot be rendered; the message names the field. */
static int cfg_check(const ss_synth_cfg_t *c)
{
    CHECK(c->width > 0 && c->height > 0 && c->width <= MAX_DIM && c->height <= MAX_DIM &&
              (uint64_t)c->width * (uint64_t)c->height <= MAX_PIXELS,
          "width/height %dx%d out of range", c->width, c->height);
    CHECK((unsigned)c->dtype < SS_DT__COUNT, "dtype %d unknown", (int)c->dtype);
    CHECK(finite_nonneg(c->frame_interval), "frame_interval must be >= 0");
    CHECK(finite_nonneg(c->start_mjd), "start_mjd must be >= 0");
    CHECK(finite_nonneg(c->exposure), "exposure must be >= 0");
    CHECK(c->n_stars >= 0 && c->n_stars <= 10000000, "n_stars %d out of range", c->n_stars);
    CHECK(isfinite(c->flux_min) && c->flux_min > 0.0 && isfinite(c->flux_max) &&
              c->flux_max >= c->flux_min,
          "flux range [%g, %g] invalid (need 0 < flux_min <= flux_max)", c->flux_min,
          c->flux_max);
    CHECK(isfinite(c->star_alpha), "star_alpha must be finite");
    CHECK(c->psf == SS_SYNTH_GAUSS || c->psf == SS_SYNTH_MOFFAT, "psf %d unknown", (int)c->psf);
    CHECK(isfinite(c->psf_sigma) && c->psf_sigma >= 0.3 && c->psf_sigma <= MAX_PSF_SIGMA,
          "psf_sigma %g out of range [0.3, %g]", c->psf_sigma, MAX_PSF_SIGMA);
    CHECK(c->psf != SS_SYNTH_MOFFAT || (isfinite(c->moffat_beta) && c->moffat_beta > 1.0),
          "moffat_beta %g must be > 1", c->moffat_beta);
    CHECK(finite_nonneg(c->seeing_wobble) && c->seeing_wobble <= 1.0,
          "seeing_wobble %g out of range [0, 1]", c->seeing_wobble);
    CHECK(isfinite(c->sky) && isfinite(c->sky_grad_x) && isfinite(c->sky_grad_y),
          "sky and its gradient must be finite");
    CHECK(finite_nonneg(c->gain), "gain must be >= 0");
    CHECK(finite_nonneg(c->read_noise), "read_noise must be >= 0");
    CHECK(isfinite(c->bias), "bias must be finite");
    CHECK(finite_nonneg(c->saturation), "saturation must be >= 0");
    CHECK(finite_nonneg(c->jitter), "jitter must be >= 0");
    CHECK(isfinite(c->drift_x) && isfinite(c->drift_y), "drift must be finite");
    CHECK(finite_nonneg(c->jump_prob) && c->jump_prob <= 1.0, "jump_prob must be in [0, 1]");
    CHECK(finite_nonneg(c->jump_px), "jump_px must be >= 0");
    CHECK(finite_nonneg(c->transparency), "transparency must be >= 0");
    CHECK(c->n_hot >= 0 && (uint64_t)c->n_hot <= (uint64_t)c->width * (uint64_t)c->height / 4,
          "n_hot %d out of range (at most a quarter of the pixels)", c->n_hot);
    CHECK(isfinite(c->hot_level), "hot_level must be finite");
    CHECK(finite_nonneg(c->cosmic_rate), "cosmic_rate must be >= 0");
    CHECK(c->n_movers >= 0 && c->n_movers <= SS_SYNTH_MAX_OBJ, "n_movers %d out of range [0, %d]",
          c->n_movers, SS_SYNTH_MAX_OBJ);
    CHECK(finite_nonneg(c->mover_snr), "mover_snr must be >= 0");
    CHECK(finite_nonneg(c->mover_speed), "mover_speed must be >= 0");
    CHECK(finite_nonneg(c->streak_prob) && c->streak_prob <= 1.0,
          "streak_prob must be in [0, 1]");
    CHECK(finite_nonneg(c->streak_snr), "streak_snr must be >= 0");
    CHECK(isfinite(c->streak_len_min) && isfinite(c->streak_len_max) &&
              c->streak_len_min >= 1.0 && c->streak_len_max >= c->streak_len_min,
          "streak length range [%g, %g] invalid", c->streak_len_min, c->streak_len_max);
    CHECK(!c->wcs || (isfinite(c->wcs_ra) && isfinite(c->wcs_dec) && fabs(c->wcs_dec) <= 90.0 &&
                      isfinite(c->wcs_scale) && c->wcs_scale > 0.0),
          "wcs_ra/wcs_dec/wcs_scale invalid");
    CHECK(finite_nonneg(c->sky_var) && c->sky_var <= 1.0, "sky_var %g out of range [0, 1]",
          c->sky_var);
    CHECK(isfinite(c->sky_trend) && c->sky_trend >= MIN_SKY_TREND && c->sky_trend <= MAX_SKY_TREND,
          "sky_trend %g out of range [%g, %g]", c->sky_trend, MIN_SKY_TREND, MAX_SKY_TREND);
    CHECK(finite_nonneg(c->stray) && c->stray <= 1e9, "stray %g out of range [0, 1e9]", c->stray);
    CHECK(c->star_snap == 0 || c->star_snap == 1, "star_snap must be 0 or 1");
    CHECK(c->noise_model == SS_SYNTH_NOISE_GAUSS || c->noise_model == SS_SYNTH_NOISE_UNIFORM,
          "noise_model %d unknown", (int)c->noise_model);
    CHECK(c->uniform_max >= 0 && c->uniform_max <= MAX_UNIFORM,
          "uniform_max %d out of range [0, %d]", c->uniform_max, MAX_UNIFORM);
    CHECK(c->overscan >= 0 && c->overscan <= MAX_OVERSCAN && c->width + c->overscan <= MAX_DIM &&
              (uint64_t)(c->width + c->overscan) * (uint64_t)c->height <= MAX_PIXELS,
          "overscan %d out of range [0, %d] (or the frame grows too large)", c->overscan,
          MAX_OVERSCAN);
    CHECK(c->height_jitter >= 0 && c->height_jitter <= c->height / 2,
          "height_jitter %d out of range [0, height/2 = %d]", c->height_jitter, c->height / 2);
    CHECK(c->jump_at >= 0, "jump_at must be >= 0");
    CHECK(c->n_mover_snr >= 0 && c->n_mover_snr <= SS_SYNTH_MAX_SNR_LIST,
          "mover_snr_list: %d entries, at most %d", c->n_mover_snr, SS_SYNTH_MAX_SNR_LIST);
    for (int i = 0; i < c->n_mover_snr; i++)
        CHECK(finite_nonneg(c->mover_snr_list[i]), "mover_snr_list[%d] = %g must be >= 0", i,
              c->mover_snr_list[i]);
    CHECK(c->mover_sigma == 0.0 || (isfinite(c->mover_sigma) && c->mover_sigma >= 0.3 &&
                                    c->mover_sigma <= MAX_PSF_SIGMA),
          "mover_sigma %g must be 0 or in [0.3, %g]", c->mover_sigma, MAX_PSF_SIGMA);
    CHECK(c->n_mover_speed >= 0 && c->n_mover_speed <= SS_SYNTH_MAX_SNR_LIST,
          "mover_speed_list: %d entries, at most %d", c->n_mover_speed, SS_SYNTH_MAX_SNR_LIST);
    for (int i = 0; i < c->n_mover_speed; i++)
        CHECK(finite_nonneg(c->mover_speed_list[i]) && c->mover_speed_list[i] <= SS_SYNTH_MAX_SPEED,
              "mover_speed_list[%d] = %g out of range [0, %g]", i, c->mover_speed_list[i],
              SS_SYNTH_MAX_SPEED);
    CHECK(c->n_crossing >= 0 && c->n_crossing <= (SS_SYNTH_MAX_OBJ - c->n_movers) / 2,
          "n_crossing %d out of range (n_movers + 2 n_crossing <= %d)", c->n_crossing,
          SS_SYNTH_MAX_OBJ);
    CHECK(c->crossing_at >= 0, "crossing_at must be >= 0");
    CHECK(c->truth_motion == 0 || c->truth_motion == 1, "truth_motion must be 0 or 1");
    CHECK(c->wrap_scatter == 0 || c->wrap_scatter == 1, "wrap_scatter must be 0 or 1");
    CHECK(c->trail == 0 || c->trail == 1, "trail must be 0 or 1");
    return 0;
}

/* Inverse CDF of dN/dF ∝ F^-alpha on [fmin, fmax]. */
static double powerlaw_draw(double u, double fmin, double fmax, double alpha)
{
    if (fmax <= fmin)
        return fmin;
    if (fabs(alpha - 1.0) < 1e-9)
        return fmin * pow(fmax / fmin, u);
    double e = 1.0 - alpha;
    double a = pow(fmin, e), b = pow(fmax, e);
    return pow(a + u * (b - a), 1.0 / e);
}

static double fmod_pos(double a, double p) { return a - p * floor(a / p); }

/* Mover i's cells this frame (see mover_position); returns its segment:
 * that of the branch if the mover was on it within its last
 * RECENT_BRANCHES branches (the jitter can take a mover at an edge across
 * it and back), else the next number. The branch moves to the front. */
static int wrap_segment(ss_synth_t *s, int i, const long cell[4])
{
    mover_branches_t *b = &s->mov_br[i];
    if (s->seq == 0)
        b->n = b->next = 0;
    int k = 0;
    while (k < b->n && memcmp(b->cell[k], cell, sizeof b->cell[k]) != 0)
        k++;
    int seg = k < b->n ? b->seg[k] : b->next++;
    if (k == b->n && b->n < RECENT_BRANCHES)
        b->n++;
    for (int j = SS_MIN(k, RECENT_BRANCHES - 1); j > 0; j--) {  /* to the front */
        memcpy(b->cell[j], b->cell[j - 1], sizeof b->cell[j]);
        b->seg[j] = b->seg[j - 1];
    }
    memcpy(b->cell[0], cell, sizeof b->cell[0]);
    b->seg[0] = seg;
    return seg;
}

void ss_synth_destroy(ss_synth_t **ps)
{
    if (!ps || !*ps)
        return;
    ss_synth_t *s = *ps;
    free(s->star_x);
    free(s->star_y);
    free(s->star_f);
    free(s->hot_idx);
    free(s->hot_adu);
    free(s->hot_x);
    free(s->hot_y);
    free(s->mov_f);
    free(s->mov_len);
    free(s->trails);
    free(s->trail_sg);
    free(s->stray_col);
    free(s->mov_x);
    free(s->mov_y);
    free(s->mov_vx);
    free(s->mov_vy);
    free(s->mov_br);
    free(s->model);
    free(s->srcs);
    free(s->cosmic);
    free(s);
    *ps = NULL;
}

/* A pixel's own variance, px²: a pixel-integrated Gaussian of σ is, to
 * the matched filter, a Gaussian of σ² + 1/12 (docs/QUALITY.md, the static
 * section: without it the truth SNR of an undersampled mover was one no
 * pixel map reaches). */
#define PIXEL_VAR (1.0 / 12.0)

/* Flux of mover i at transparency 1 from its SNR (the peak of the §6 SNR
 * map, kernel psf_sigma σ_k): a pixel-integrated Gaussian of σ_m (the star
 * PSF's σ, or mover_sigma) peaks at z = F·σ_k / (sqrt(π)·σ·(σ_m² + σ_k² +
 * 1/12)). */
static double mover_flux(const ss_synth_cfg_t *c, double sigma_ref, int i)
{
    double snr = c->n_mover_snr > 0 ? c->mover_snr_list[i % c->n_mover_snr] : c->mover_snr;
    const double k = c->psf_sigma, m = c->mover_sigma > 0.0 ? c->mover_sigma : k;
    return snr * sigma_ref * sqrt(M_PI) * (m * m + k * k + PIXEL_VAR) / k;
}

/* The length of mover i's trail at speed v px/frame, px: v·exposure /
 * frame_interval when that exceeds sqrt(12)·σ (σ its image's sigma:
 * mover_sigma, or psf_sigma), else 0 (a point; the header says why). */
static double trail_length(const ss_synth_cfg_t *c, double v)
{
    if (!c->trail || !(c->frame_interval > 0.0))
        return 0.0;
    const double L = v * c->exposure / c->frame_interval;
    const double sg = c->mover_sigma > 0.0 ? c->mover_sigma : c->psf_sigma;
    return L > sqrt(12.0) * sg ? L : 0.0;
}

/* Flux of a trail of length L > 0 whose §6 SNR map peaks at snr (at its
 * centre, kernel psf_sigma; the header's formula), at transparency 1, ADU. */
static double trail_flux(const ss_synth_cfg_t *c, double sigma_ref, double snr, double L)
{
    const double sg = c->mover_sigma > 0.0 ? c->mover_sigma : c->psf_sigma;
    const double sk = c->psf_sigma, ss = sqrt(sg * sg + sk * sk + PIXEL_VAR);
    const double lambda = snr * sigma_ref * ss / (M_SQRT2 * sk * erf(L / (2.0 * M_SQRT2 * ss)));
    return lambda * L;
}

/* Speed of mover i, px per frame: mover_speed, or its entry of the speed
 * list (each round of the SNR list starts one entry further on). */
static double mover_speed_of(const ss_synth_cfg_t *c, int i)
{
    if (c->n_mover_speed <= 0)
        return c->mover_speed;
    int k = c->n_mover_snr > 0 ? i + i / c->n_mover_snr : i;
    return c->mover_speed_list[k % c->n_mover_speed];
}

/* The crossing pairs (movers n_movers .. n_movers + 2·n_crossing - 1): pair
 * k meets at a sky point p_k drawn in the central half of the free area at
 * frame crossing_at, its two directions θ_k and θ_k + π·(k + 0.5)/n_crossing.
 * Draws from a stream of their own. */
static void setup_crossings(ss_synth_t *s)
{
    const ss_synth_cfg_t *c = &s->c;
    rng_t r;
    rng_seed(&r, c->seed, STREAM_CROSSING, 0, 0);
    const double fw = c->width - 2.0 * s->mover_edge, fh = c->height - 2.0 * s->mover_edge;
    const double tc = (double)c->crossing_at;
    for (int k = 0; k < c->n_crossing; k++) {
        double px = s->mover_edge + (0.25 + 0.5 * rng_uniform(&r)) * fw;
        double py = s->mover_edge + (0.25 + 0.5 * rng_uniform(&r)) * fh;
        double th = 2.0 * M_PI * rng_uniform(&r);
        double ang = M_PI * (k + 0.5) / c->n_crossing;
        for (int m = 0; m < 2; m++) {
            int i = c->n_movers + 2 * k + m;
            double v = mover_speed_of(c, i), a = th + m * ang;
            s->mov_vx[i] = v * cos(a);
            s->mov_vy[i] = v * sin(a);
            s->mov_x[i] = px - s->mov_vx[i] * tc;
            s->mov_y[i] = py - s->mov_vy[i] * tc;
            s->mov_f[i] = mover_flux(c, s->sigma_ref, i);
        }
    }
}

/* Each mover's trail length, and its flux when it is trailed. */
static void setup_trails(ss_synth_t *s)
{
    const ss_synth_cfg_t *c = &s->c;
    for (int i = 0; i < s->n_movers; i++) {
        s->mov_len[i] = trail_length(c, hypot(s->mov_vx[i], s->mov_vy[i]));
        if (s->mov_len[i] > 0.0) {
            double snr = c->n_mover_snr > 0 ? c->mover_snr_list[i % c->n_mover_snr] : c->mover_snr;
            s->mov_f[i] = trail_flux(c, s->sigma_ref, snr, s->mov_len[i]);
        }
    }
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

ss_synth_t *ss_synth_new(const ss_synth_cfg_t *c)
{
    if (!c || cfg_check(c) != 0)
        return NULL;
    ss_synth_t *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->c = *c;
    const int W = c->width, H = c->height;
    s->start_mjd = c->start_mjd > 0.0 ? c->start_mjd : ss_unix_to_mjd(ss_now_unix());
    s->tile_w = W + 2.0 * SKY_MARGIN;
    s->tile_h = H + 2.0 * SKY_MARGIN;
    if (c->noise_model == SS_SYNTH_NOISE_UNIFORM) {
        /* variance of U{0..k}: ((k + 1)² - 1) / 12 */
        double k1 = (double)c->uniform_max + 1.0;
        s->sigma_pix = sqrt((k1 * k1 - 1.0) / 12.0);
    } else {
        s->sigma_pix = sqrt((c->gain > 0.0 ? SS_MAX(c->sky, 0.0) / c->gain : 0.0) +
                            c->read_noise * c->read_noise);
    }
    s->sigma_ref = s->sigma_pix > 0.0 ? s->sigma_pix : 1.0;
    double fwhm = 2.0 * sqrt(2.0 * log(2.0)) * c->psf_sigma;
    s->moffat_alpha =
        c->psf == SS_SYNTH_MOFFAT ? fwhm / (2.0 * sqrt(pow(2.0, 1.0 / c->moffat_beta) - 1.0)) : 0.0;

    rng_t r;
    rng_seed(&r, c->seed, STREAM_SETUP, 0, 0);

    /* stars: the tile holds n_stars · tile area / frame area, so the frame
     * sees n_stars on average */
    double area_ratio = s->tile_w * s->tile_h / ((double)W * H);
    s->n_stars = (int)lround(c->n_stars * area_ratio);
    size_t ns = (size_t)(s->n_stars > 0 ? s->n_stars : 1);
    s->star_x = malloc(ns * sizeof *s->star_x);
    s->star_y = malloc(ns * sizeof *s->star_y);
    s->star_f = malloc(ns * sizeof *s->star_f);
    s->srcs = malloc((ns + SS_SYNTH_MAX_OBJ) * sizeof *s->srcs);
    s->model = malloc((size_t)W * H * sizeof *s->model);
    s->cosmic = malloc((size_t)COSMIC_MAX_HITS * COSMIC_MAX_LEN * sizeof *s->cosmic);
    size_t nh = (size_t)(c->n_hot > 0 ? c->n_hot : 1);
    s->hot_idx = malloc(nh * sizeof *s->hot_idx);
    s->hot_adu = malloc(nh * sizeof *s->hot_adu);
    s->hot_x = malloc(nh * sizeof *s->hot_x);
    s->hot_y = malloc(nh * sizeof *s->hot_y);
    const int n_mov = c->n_movers + 2 * c->n_crossing;
    size_t nm = (size_t)(n_mov > 0 ? n_mov : 1);
    s->mov_x = malloc(nm * sizeof(double));
    s->mov_y = malloc(nm * sizeof(double));
    s->mov_vx = malloc(nm * sizeof(double));
    s->mov_vy = malloc(nm * sizeof(double));
    s->mov_f = malloc(nm * sizeof(double));
    s->mov_br = calloc(nm, sizeof *s->mov_br);
    s->mov_len = calloc(nm, sizeof *s->mov_len);
    s->trails = calloc(nm, sizeof *s->trails);
    s->trail_sg = calloc(nm, sizeof *s->trail_sg);
    s->stray_col = malloc((size_t)W * sizeof *s->stray_col);
    if (!s->star_x || !s->star_y || !s->star_f || !s->model || !s->srcs || !s->cosmic || !s->hot_idx ||
        !s->hot_adu || !s->hot_x || !s->hot_y || !s->mov_x || !s->mov_y || !s->mov_vx ||
        !s->mov_vy || !s->mov_f || !s->mov_br || !s->stray_col || !s->mov_len || !s->trails ||
        !s->trail_sg) {
        SS_LOG(SS_LOG_ERR, TAG, "out of memory for %d stars", s->n_stars);
        ss_synth_destroy(&s);
        return NULL;
    }
    for (int i = 0; i < s->n_stars; i++) {
        s->star_x[i] = -SKY_MARGIN + rng_uniform(&r) * s->tile_w;
        s->star_y[i] = -SKY_MARGIN + rng_uniform(&r) * s->tile_h;
        s->star_f[i] = powerlaw_draw(rng_uniform(&r), c->flux_min, c->flux_max, c->star_alpha);
        if (c->star_snap) {     /* after the draws: the other stars' draws stay the same */
            s->star_x[i] = round(s->star_x[i]);
            s->star_y[i] = round(s->star_y[i]);
        }
    }

    /* hot pixels: distinct detector pixels (rejection on duplicates; at most
     * a quarter of the frame, so this terminates quickly) */
    s->n_hot = c->n_hot;
    for (int i = 0; i < s->n_hot; i++) {
        s->hot_idx[i] = (int)(rng_u64(&r) % ((uint64_t)W * H));
        s->hot_adu[i] = (float)(c->hot_level *
                                (HOT_LEVEL_LO + (HOT_LEVEL_HI - HOT_LEVEL_LO) * rng_uniform(&r)));
    }
    if (s->n_hot > 1) {
        /* levels were drawn independently of positions, so sorting the
         * positions alone keeps the pairing random */
        qsort(s->hot_idx, (size_t)s->n_hot, sizeof *s->hot_idx, cmp_int);
        for (int pass = 0; pass < 64; pass++) {
            int dup = 0;
            for (int i = 1; i < s->n_hot; i++)
                if (s->hot_idx[i] == s->hot_idx[i - 1]) {
                    s->hot_idx[i] = (int)(rng_u64(&r) % ((uint64_t)W * H));
                    dup = 1;
                }
            if (!dup)
                break;
            qsort(s->hot_idx, (size_t)s->n_hot, sizeof *s->hot_idx, cmp_int);
        }
    }
    for (int i = 0; i < s->n_hot; i++) {
        s->hot_x[i] = s->hot_idx[i] % W;
        s->hot_y[i] = s->hot_idx[i] / W;
    }

    /* movers: start anywhere inside the frame's free area, random direction */
    s->mover_edge = ceil(3.0 * c->psf_sigma) + 1.0;
    if (W - 2.0 * s->mover_edge < 1.0 || H - 2.0 * s->mover_edge < 1.0)
        s->mover_edge = 0.0;
    s->n_movers = n_mov;
    for (int i = 0; i < c->n_movers; i++) {
        s->mov_x[i] = s->mover_edge + rng_uniform(&r) * (W - 2.0 * s->mover_edge);
        s->mov_y[i] = s->mover_edge + rng_uniform(&r) * (H - 2.0 * s->mover_edge);
        double th = 2.0 * M_PI * rng_uniform(&r);
        double v = mover_speed_of(c, i);
        s->mov_vx[i] = v * cos(th);
        s->mov_vy[i] = v * sin(th);
        s->mov_f[i] = mover_flux(c, s->sigma_ref, i);
    }
    setup_crossings(s);
    setup_trails(s);
    if (c->stray > 0.0) {
        rng_t rs;
        rng_seed(&rs, c->seed, STREAM_STRAY_SETUP, 0, 0);
        s->stray_phi0 = 2.0 * M_PI * rng_uniform(&rs);
    }
    return s;
}

/* ---- rendering ---------------------------------------------------------- */

/* Rendering radius of a point source of flux f with this frame's PSF: far
 * enough that the flux outside is negligible and the last pixel is below
 * RENDER_FLOOR_FRAC·σ_ref; never beyond MAX_RADIUS (the sky tile's seam). */
static int src_radius_sg(const ss_synth_t *s, double f, double sg_src)
{
    double thr = RENDER_FLOOR_FRAC * s->sigma_ref;
    double r;
    if (sg_src > 0.0 || s->c.psf == SS_SYNTH_GAUSS) {
        double sg = sg_src > 0.0 ? sg_src : s->sigma_t;
        double peak = f / (2.0 * M_PI * sg * sg);
        r = GAUSS_MIN_RADIUS_SIGMA * sg;
        if (peak > thr)
            r = SS_MAX(r, sg * sqrt(2.0 * log(peak / thr)));
    } else {
        double a = s->alpha_t, b = s->c.moffat_beta;
        /* (1 + r²/α²)^(1-β) = 1 - enclosed */
        r = a * sqrt(pow(1.0 - MOFFAT_ENCLOSED, 1.0 / (1.0 - b)) - 1.0);
        double peak = f * (b - 1.0) / (M_PI * a * a);
        if (peak > thr)
            r = SS_MAX(r, a * sqrt(pow(thr / peak, -1.0 / b) - 1.0));
    }
    int ri = (int)ceil(r);
    return SS_CLAMP(ri, 1, MAX_RADIUS);
}

/* The same for a source drawn with the frame's PSF. */
static int src_radius(const ss_synth_t *s, double f) { return src_radius_sg(s, f, 0.0); }

/* Add a Gaussian point source to rows [ya, yb) of the model: exact pixel
 * integrals, separable (erf differences per axis). */
static void render_gauss(float *model, int W, int H, int ya, int yb, const src_t *p, double sg)
{
    double ex[2 * MAX_RADIUS + 3], ey[2 * MAX_RADIUS + 3];
    int xc = (int)lround(p->x), yc = (int)lround(p->y);
    int x0 = SS_MAX(xc - p->r, 0), x1 = SS_MIN(xc + p->r, W - 1);
    int y0 = SS_MAX(SS_MAX(yc - p->r, 0), ya), y1 = SS_MIN(SS_MIN(yc + p->r, H - 1), yb - 1);
    if (x0 > x1 || y0 > y1)
        return;
    double k = 1.0 / (M_SQRT2 * sg);
    double prev = erf((x0 - 0.5 - p->x) * k);
    for (int i = x0; i <= x1; i++) {
        double e = erf((i + 0.5 - p->x) * k);
        ex[i - x0] = 0.5 * (e - prev);
        prev = e;
    }
    prev = erf((y0 - 0.5 - p->y) * k);
    for (int j = y0; j <= y1; j++) {
        double e = erf((j + 0.5 - p->y) * k);
        ey[j - y0] = 0.5 * (e - prev) * p->flux;
        prev = e;
    }
    for (int j = y0; j <= y1; j++) {
        float *row = model + (size_t)j * W;
        double fy = ey[j - y0];
        for (int i = x0; i <= x1; i++)
            row[i] += (float)(fy * ex[i - x0]);
    }
}

/* Add a Moffat point source to rows [ya, yb): circular window of radius r,
 * 3×3 sub-samples in the core, centre samples in the wings, normalised by
 * the analytic enclosed fraction inside r. */
static void render_moffat(float *model, int W, int H, int ya, int yb, const src_t *p,
                          double alpha, double beta, double norm)
{
    int xc = (int)lround(p->x), yc = (int)lround(p->y);
    int x0 = SS_MAX(xc - p->r, 0), x1 = SS_MIN(xc + p->r, W - 1);
    int y0 = SS_MAX(SS_MAX(yc - p->r, 0), ya), y1 = SS_MIN(SS_MIN(yc + p->r, H - 1), yb - 1);
    if (x0 > x1 || y0 > y1)
        return;
    double ia2 = 1.0 / (alpha * alpha);
    double r2max = (double)p->r * p->r;
    double core = MOFFAT_CORE_ALPHA * alpha + 1.0;
    double core2 = core * core;
    /* the flux outside r is put back in proportion (analytic enclosed fraction) */
    double enclosed = 1.0 - pow(1.0 + r2max * ia2, 1.0 - beta);
    double amp = p->flux * norm / enclosed;
    for (int j = y0; j <= y1; j++) {
        float *row = model + (size_t)j * W;
        double dy = j - p->y;
        for (int i = x0; i <= x1; i++) {
            double dx = i - p->x;
            double d2 = dx * dx + dy * dy;
            if (d2 > r2max)
                continue;
            double v;
            if (d2 < core2) {
                v = 0.0;
                for (int sj = 0; sj < SUPERSAMPLE; sj++) {
                    double yy = dy + (sj + 0.5) / SUPERSAMPLE - 0.5;
                    for (int si = 0; si < SUPERSAMPLE; si++) {
                        double xx = dx + (si + 0.5) / SUPERSAMPLE - 0.5;
                        v += pow(1.0 + (xx * xx + yy * yy) * ia2, -beta);
                    }
                }
                v /= SUPERSAMPLE * SUPERSAMPLE;
            } else {
                v = pow(1.0 + d2 * ia2, -beta);
            }
            row[i] += (float)(amp * v);
        }
    }
}

/* Add the streak to rows [ya, yb): segment ⊗ Gaussian(σ), 3×3 sub-samples. */
static void render_streak(float *model, int W, int ya, int yb, const streak_t *st, double sg)
{
    int y0 = SS_MAX(st->by0, ya), y1 = SS_MIN(st->by1, yb - 1);
    double hw = STREAK_HALF_WIDTH_SIGMA * sg;
    double kx = 1.0 / (M_SQRT2 * sg);
    double g0 = st->lambda / (sqrt(2.0 * M_PI) * sg);
    for (int j = y0; j <= y1; j++) {
        float *row = model + (size_t)j * W;
        for (int i = st->bx0; i <= st->bx1; i++) {
            double px = i - st->x0, py = j - st->y0;
            double dc = -px * st->uy + py * st->ux;          /* across, at the centre */
            if (fabs(dc) > hw + 1.0)
                continue;
            double v = 0.0;
            for (int sj = 0; sj < SUPERSAMPLE; sj++) {
                double yy = py + (sj + 0.5) / SUPERSAMPLE - 0.5;
                for (int si = 0; si < SUPERSAMPLE; si++) {
                    double xx = px + (si + 0.5) / SUPERSAMPLE - 0.5;
                    double u = xx * st->ux + yy * st->uy;     /* along, from (x0, y0) */
                    double d = -xx * st->uy + yy * st->ux;
                    v += exp(-0.5 * d * d / (sg * sg)) * 0.5 *
                         (erf((st->len - u) * kx) + erf(u * kx));
                }
            }
            row[i] += (float)(g0 * v / (SUPERSAMPLE * SUPERSAMPLE));
        }
    }
}

/* Clip and store one pixel in the output type. */
static inline void store_px(double v, void *out, ss_dtype_t dt, size_t i, double lo, double hi)
{
    v = v < lo ? lo : v > hi ? hi : v;
    switch (dt) {
    case SS_DT_U8: ((uint8_t *)out)[i] = (uint8_t)lrint(v); break;
    case SS_DT_U16: ((uint16_t *)out)[i] = (uint16_t)lrint(v); break;
    case SS_DT_I16: ((int16_t *)out)[i] = (int16_t)lrint(v); break;
    case SS_DT_I32: ((int32_t *)out)[i] = (int32_t)llrint(v); break;
    default: ((float *)out)[i] = (float)v; break;
    }
}

/* Clip and store one row in the output type. */
static void store_row(const float *m, void *out, ss_dtype_t dt, size_t off, int W, double lo,
                      double hi)
{
    for (int i = 0; i < W; i++)
        store_px(m[i], out, dt, off + i, lo, hi);
}

static double dtype_min(ss_dtype_t t)
{
    switch (t) {
    case SS_DT_I16: return -32768.0;
    case SS_DT_I32: return -2147483648.0;
    case SS_DT_F32: return -INFINITY;
    default: return 0.0;
    }
}

/* One band of rows [ya, yb), start to finish: sky, sources, noise, detector
 * terms, output. Bands touch disjoint rows of model and out, so they run in
 * parallel without locks. */
static void render_band(const ss_synth_t *s, float *model, int ya, int yb, void *out, double lo,
                        double hi)
{
    const ss_synth_cfg_t *c = &s->c;
    const int W = c->width, H = c->height;
    double xcen = 0.5 * (W - 1), ycen = 0.5 * (H - 1);

    for (int j = ya; j < yb; j++) {
        float *row = model + (size_t)j * W;
        double base = c->sky + c->sky_grad_y * (j - ycen);
        if (!s->sky_scaled && !(s->stray_a > 0.0)) {
            for (int i = 0; i < W; i++)
                row[i] = (float)(base + c->sky_grad_x * (i - xcen));
            continue;
        }
        double dy = j - s->stray_qy;
        double gy = s->stray_a > 0.0
                        ? s->stray_a * exp(-0.5 * dy * dy / (s->stray_l * s->stray_l)) : 0.0;
        for (int i = 0; i < W; i++) {
            double v = s->sky_f * (base + c->sky_grad_x * (i - xcen));
            if (gy > 0.0)
                v += gy * s->stray_col[i];
            row[i] = (float)v;
        }
    }
    for (int k = 0; k < s->n_srcs; k++) {
        const src_t *p = &s->srcs[k];
        if (p->y + p->r < ya - 1 || p->y - p->r > yb)
            continue;
        if (p->sg > 0.0)
            render_gauss(model, W, H, ya, yb, p, p->sg);
        else if (c->psf == SS_SYNTH_GAUSS)
            render_gauss(model, W, H, ya, yb, p, s->sigma_t);
        else
            render_moffat(model, W, H, ya, yb, p, s->alpha_t, c->moffat_beta, s->moffat_norm_t);
    }
    for (int k = 0; k < s->n_trails; k++)
        if (s->trails[k].by1 >= ya - 1 && s->trails[k].by0 <= yb)
            render_streak(model, W, ya, yb, &s->trails[k], s->trail_sg[k]);
    if (s->streak.on)
        render_streak(model, W, ya, yb, &s->streak, s->sigma_t);

    /* noise: one generator per (frame, row) — thread-count independent */
    for (int j = ya; j < yb && c->noise_model == SS_SYNTH_NOISE_UNIFORM; j++) {
        if (c->uniform_max <= 0)
            break;
        float *row = model + (size_t)j * W;
        rng_t r;
        rng_seed(&r, c->seed, STREAM_UNIFORM, s->seq, (uint64_t)j);
        for (int i = 0; i < W; i++)
            row[i] = (float)((double)row[i] + uniform_int(&r, c->uniform_max));
    }
    for (int j = ya; j < yb && c->noise_model == SS_SYNTH_NOISE_GAUSS; j++) {
        float *row = model + (size_t)j * W;
        if (c->gain <= 0.0 && c->read_noise <= 0.0)
            break;
        rng_t r;
        rng_seed(&r, c->seed, STREAM_NOISE, s->seq, (uint64_t)j);
        for (int i = 0; i < W; i++) {
            double v = row[i];
            if (c->gain > 0.0)
                v = rng_poisson(&r, v * c->gain) / c->gain;
            if (c->read_noise > 0.0)
                v += c->read_noise * rng_normal(&r);
            row[i] = (float)v;
        }
    }

    /* detector terms: bias, hot pixels, cosmic-ray hits (not through the optics) */
    if (c->bias != 0.0)
        for (int j = ya; j < yb; j++) {
            float *row = model + (size_t)j * W;
            for (int i = 0; i < W; i++)
                row[i] += (float)c->bias;
        }
    if (s->n_hot > 0) {
        int lo_idx = ya * W, hi_idx = yb * W;
        /* first hot pixel of the band (hot_idx is sorted) */
        int a = 0, b = s->n_hot;
        while (a < b) {
            int m = (a + b) / 2;
            if (s->hot_idx[m] < lo_idx)
                a = m + 1;
            else
                b = m;
        }
        for (int k = a; k < s->n_hot && s->hot_idx[k] < hi_idx; k++)
            model[s->hot_idx[k]] += s->hot_adu[k];
    }
    for (int k = 0; k < s->n_cosmic; k++) {
        const cosmic_px_t *q = &s->cosmic[k];
        if (q->y >= ya && q->y < yb)
            model[(size_t)q->y * W + q->x] += q->adu;
    }
    const int WO = s->out_w;
    for (int j = ya; j < yb; j++)
        store_row(model + (size_t)j * W, out, c->dtype, (size_t)j * WO, W, lo, hi);

    /* overscan: bias + read noise (or the uniform noise), its own stream per row */
    for (int j = ya; j < yb && c->overscan > 0; j++) {
        rng_t r;
        rng_seed(&r, c->seed, STREAM_OVERSCAN, s->seq, (uint64_t)j);
        for (int i = 0; i < c->overscan; i++) {
            double v = c->bias;
            if (c->noise_model == SS_SYNTH_NOISE_UNIFORM)
                v += uniform_int(&r, c->uniform_max);
            else if (c->read_noise > 0.0)
                v += c->read_noise * rng_normal(&r);
            store_px(v, out, c->dtype, (size_t)j * WO + W + i, lo, hi);
        }
    }
}

/* ---- per frame ---------------------------------------------------------- */

static void add_obj(ss_synth_truth_t *t, const ss_synth_obj_t *o)
{
    if (!t)
        return;
    if (t->n_obj >= SS_SYNTH_MAX_OBJ) {
        SS_LOG(SS_LOG_DEBUG, TAG, "frame %llu: truth list full, object %d not listed",
               (unsigned long long)t->seq, o->id);
        return;
    }
    t->obj[t->n_obj++] = *o;
}

static void add_wcs_d(ss_frame_meta_t *m, const char *key, double v)
{
    if (m->n_wcs >= SS_WCS_MAX)
        return;
    ss_wcs_key_t *k = &m->wcs[m->n_wcs++];
    memset(k, 0, sizeof *k);
    ss_strlcpy(k->key, key, sizeof k->key);
    k->dval = v;
}

static void add_wcs_s(ss_frame_meta_t *m, const char *key, const char *v)
{
    if (m->n_wcs >= SS_WCS_MAX)
        return;
    ss_wcs_key_t *k = &m->wcs[m->n_wcs++];
    memset(k, 0, sizeof *k);
    ss_strlcpy(k->key, key, sizeof k->key);
    k->is_string = 1;
    ss_strlcpy(k->sval, v, sizeof k->sval);
}

/* Pick this frame's streak (frame coordinates): random length and angle,
 * centred so that both end points lie at least `edge` px inside the frame. */
static void make_streak(ss_synth_t *s, double T)
{
    const ss_synth_cfg_t *c = &s->c;
    streak_t *st = &s->streak;
    rng_t r;
    rng_seed(&r, c->seed, STREAM_STREAK, s->seq, 0);
    memset(st, 0, sizeof *st);
    double u0 = rng_uniform(&r), u1 = rng_uniform(&r), u2 = rng_uniform(&r),
           u3 = rng_uniform(&r), u4 = rng_uniform(&r);
    if (u0 >= c->streak_prob)
        return;
    const int W = c->width, H = c->height;
    double edge = ceil(3.0 * c->psf_sigma) + 1.0;
    double hx = 0.5 * (W - 1) - edge, hy = 0.5 * (H - 1) - edge;    /* room for half the segment */
    if (hx < 1.0 || hy < 1.0)
        return;
    double L = c->streak_len_min + u1 * (c->streak_len_max - c->streak_len_min);
    double th = M_PI * u2;
    double ux = cos(th), uy = sin(th);
    double fit = 1e300;
    if (fabs(ux) > 1e-12)
        fit = SS_MIN(fit, 2.0 * hx / fabs(ux));
    if (fabs(uy) > 1e-12)
        fit = SS_MIN(fit, 2.0 * hy / fabs(uy));
    L = SS_MIN(L, fit);
    double dx = 0.5 * L * ux, dy = 0.5 * L * uy;
    double cx = edge + fabs(dx) + u3 * (W - 1 - 2.0 * (edge + fabs(dx)));
    double cy = edge + fabs(dy) + u4 * (H - 1 - 2.0 * (edge + fabs(dy)));
    st->on = 1;
    st->x0 = cx - dx;
    st->y0 = cy - dy;
    st->x1 = cx + dx;
    st->y1 = cy + dy;
    st->len = L;
    st->ux = ux;
    st->uy = uy;
    st->lambda = c->streak_snr * s->sigma_ref * T;
    int pad = (int)ceil(STREAK_HALF_WIDTH_SIGMA * s->sigma_t) + 1;
    st->bx0 = SS_MAX((int)floor(SS_MIN(st->x0, st->x1)) - pad, 0);
    st->bx1 = SS_MIN((int)ceil(SS_MAX(st->x0, st->x1)) + pad, W - 1);
    st->by0 = SS_MAX((int)floor(SS_MIN(st->y0, st->y1)) - pad, 0);
    st->by1 = SS_MIN((int)ceil(SS_MAX(st->y0, st->y1)) + pad, H - 1);
}

/* The peak §6 SNR of a point mover of flux fl ADU with the pipeline's
 * kernel (a Gaussian of psf_sigma, k): a Gaussian mover of width m peaks
 * at fl·k / (σ_ref·sqrt(π)·(m² + k²)), m = mover_sigma, or this frame's
 * seeing σ_t when the mover has the star PSF (the Gaussian of the same
 * width for a Moffat). With m = k it is the F = snr·σ_ref·sqrt(4π)·k of
 * mover_flux; in a frame of worse seeing the same flux peaks lower. */
static double point_snr(const ss_synth_t *s, double fl)
{
    const ss_synth_cfg_t *c = &s->c;
    const double k = c->psf_sigma, m = c->mover_sigma > 0.0 ? c->mover_sigma : s->sigma_t;
    return fl * k / (s->sigma_ref * sqrt(M_PI) * (m * m + k * k + PIXEL_VAR));
}

/* The peak §6 SNR of a trail of flux fl ADU and length L at its centre,
 * drawn with this frame's seeing (or mover_sigma): trail_flux inverted
 * with m = σ_t, so that at m = psf_sigma it is the SNR the trail was
 * given, times the transparency, and lower in worse seeing (point_snr). */
static double trail_snr(const ss_synth_t *s, double fl, double L)
{
    const ss_synth_cfg_t *c = &s->c;
    const double k = c->psf_sigma, m = c->mover_sigma > 0.0 ? c->mover_sigma : s->sigma_t;
    const double ss = sqrt(m * m + k * k + PIXEL_VAR);
    return fl / L * M_SQRT2 * k * erf(L / (2.0 * M_SQRT2 * ss)) / (s->sigma_ref * ss);
}

/* Mover i's trail this frame, centred on (x, y) along its velocity, into
 * st (frame coordinates; flux fl ADU over its length, drawn with sigma
 * sg): the bounding box of its rendered pixels is clamped to the frame
 * and may be empty when the trail lies outside it. */
static void make_trail(const ss_synth_t *s, int i, double x, double y, double fl, double sg,
                       streak_t *st)
{
    const int W = s->c.width, H = s->c.height;
    const double L = s->mov_len[i], v = hypot(s->mov_vx[i], s->mov_vy[i]);
    memset(st, 0, sizeof *st);
    st->on = 1;
    st->ux = s->mov_vx[i] / v;
    st->uy = s->mov_vy[i] / v;
    st->x0 = x - 0.5 * L * st->ux;
    st->y0 = y - 0.5 * L * st->uy;
    st->x1 = x + 0.5 * L * st->ux;
    st->y1 = y + 0.5 * L * st->uy;
    st->len = L;
    st->lambda = fl / L;
    int pad = (int)ceil(STREAK_HALF_WIDTH_SIGMA * sg) + 1;
    st->bx0 = SS_MAX((int)floor(SS_MIN(st->x0, st->x1)) - pad, 0);
    st->bx1 = SS_MIN((int)ceil(SS_MAX(st->x0, st->x1)) + pad, W - 1);
    st->by0 = SS_MAX((int)floor(SS_MIN(st->y0, st->y1)) - pad, 0);
    st->by1 = SS_MIN((int)ceil(SS_MAX(st->y0, st->y1)) + pad, H - 1);
}

/* This frame's cosmic-ray hits, into s->cosmic; truth gets one object per hit. */
static void make_cosmics(ss_synth_t *s, ss_synth_truth_t *truth, int *next_id)
{
    const ss_synth_cfg_t *c = &s->c;
    const int W = c->width, H = c->height;
    s->n_cosmic = 0;
    if (c->cosmic_rate <= 0.0)
        return;
    rng_t r;
    rng_seed(&r, c->seed, STREAM_COSMIC, s->seq, 0);
    double n = rng_poisson(&r, c->cosmic_rate * (double)W * H / 1e6);
    int hits = (int)SS_MIN(n, (double)COSMIC_MAX_HITS);
    if (n > COSMIC_MAX_HITS)
        SS_LOG(SS_LOG_WARNING, TAG, "frame %llu: %.0f cosmic hits, only %d rendered",
               (unsigned long long)s->seq, n, COSMIC_MAX_HITS);
    static const int dirs[8][2] = {{1, 0}, {1, 1}, {0, 1}, {-1, 1},
                                   {-1, 0}, {-1, -1}, {0, -1}, {1, -1}};
    for (int h = 0; h < hits; h++) {
        int x = (int)(rng_u64(&r) % (uint64_t)W);
        int y = (int)(rng_u64(&r) % (uint64_t)H);
        int len = 1 + (int)(rng_u64(&r) % COSMIC_MAX_LEN);
        int d = (int)(rng_u64(&r) % 8);
        double sum = 0.0, sx = 0.0, sy = 0.0;
        for (int k = 0; k < len; k++) {
            double adu = s->sigma_ref * (COSMIC_MIN_SIGMA +
                                         (COSMIC_MAX_SIGMA - COSMIC_MIN_SIGMA) * rng_uniform(&r));
            int px = x + k * dirs[d][0], py = y + k * dirs[d][1];
            if (px < 0 || px >= W || py < 0 || py >= H)
                continue;       /* a hit at the frame edge may lose its tail */
            cosmic_px_t *q = &s->cosmic[s->n_cosmic++];
            q->x = px;
            q->y = py;
            q->adu = (float)adu;
            sum += adu;
            sx += adu * px;
            sy += adu * py;
        }
        ss_synth_obj_t o;
        memset(&o, 0, sizeof o);
        o.id = (*next_id)++;
        o.kind = SS_SYNTH_COSMIC;
        o.x = o.x0 = o.x1 = sx / sum;
        o.y = o.y0 = o.y1 = sy / sum;
        o.flux = sum;
        o.snr = sum / (s->sigma_ref * sqrt(4.0 * M_PI) * c->psf_sigma);
        add_obj(truth, &o);
    }
}

static double stray_angle(const ss_synth_t *s)
{
    return s->stray_phi0 + SS_SYNTH_STRAY_TURN * (double)s->seq;
}

/* This frame's sky factor K_t, stray-light glow and written size; each
 * knob draws from its own stream, and only when it is on. */
static void frame_sky_and_geometry(ss_synth_t *s)
{
    const ss_synth_cfg_t *c = &s->c;
    const int W = c->width, H = c->height;
    s->sky_scaled = c->sky_var > 0.0 || c->sky_trend != 0.0;
    s->sky_f = 1.0;
    if (c->sky_trend != 0.0)
        s->sky_f = pow(1.0 + c->sky_trend, (double)s->seq);
    if (c->sky_var > 0.0) {
        rng_t r;
        rng_seed(&r, c->seed, STREAM_SKY, s->seq, 0);
        s->sky_f *= SS_MAX(1.0 + c->sky_var * rng_normal(&r), 0.0);
    }
    s->stray_a = 0.0;
    if (c->stray > 0.0) {
        rng_t r;
        rng_seed(&r, c->seed, STREAM_STRAY, s->seq, 0);
        s->stray_a = c->stray * SS_MAX(1.0 + SS_SYNTH_STRAY_WOBBLE * rng_normal(&r), 0.0);
        double phi = stray_angle(s);
        s->stray_l = 0.5 * SS_MAX(W, H);
        s->stray_qx = 0.5 * (W - 1) + s->stray_l * cos(phi);
        s->stray_qy = 0.5 * (H - 1) + s->stray_l * sin(phi);
        for (int i = 0; i < W; i++) {
            double dx = i - s->stray_qx;
            s->stray_col[i] = exp(-0.5 * dx * dx / (s->stray_l * s->stray_l));
        }
    }
    s->out_w = W + c->overscan;
    s->out_h = H;
    if (c->height_jitter > 0) {
        rng_t r;
        rng_seed(&r, c->seed, STREAM_GEOM, s->seq, 0);
        s->out_h = H - (int)uniform_int(&r, c->height_jitter);
    }
}

size_t ss_synth_frame_bytes(const ss_synth_cfg_t *c)
{
    if (!c || c->width <= 0 || c->height <= 0 || c->overscan < 0)
        return 0;
    return (size_t)(c->width + c->overscan) * (size_t)c->height * ss_dtype_size(c->dtype);
}

/* Mover i's frame position this frame (true shift (sx, sy)), and its
 * segment. a = its sky position less the shift, from the free area's
 * corner; the position is a wrapped into the free area (cell w =
 * floor(a / size)). With wrap_scatter, a + o(w) is wrapped instead, o
 * drawn per (mover, w) (0 in w = (0, 0), where every mover starts and the
 * crossing pairs meet): linear within a cell, a random jump between cells.
 * The branch (w and the cell of a + o) is its segment (wrap_segment). */
static void mover_position(ss_synth_t *s, int i, double sx, double sy, double *x, double *y,
                           int *segment)
{
    const ss_synth_cfg_t *c = &s->c;
    const double mw = c->width - 2.0 * s->mover_edge, mh = c->height - 2.0 * s->mover_edge;
    double ax = s->mov_x[i] + s->mov_vx[i] * (double)s->seq - sx - s->mover_edge;
    double ay = s->mov_y[i] + s->mov_vy[i] * (double)s->seq - sy - s->mover_edge;
    long cell[4] = { (long)floor(ax / mw), (long)floor(ay / mh), 0, 0 };
    if (c->wrap_scatter && (cell[0] != 0 || cell[1] != 0)) {
        rng_t r;
        uint64_t key = ((uint64_t)(uint32_t)cell[0] << 32) | (uint64_t)(uint32_t)cell[1];
        rng_seed(&r, c->seed, STREAM_SCATTER, (uint64_t)i, key);
        ax += mw * rng_uniform(&r);
        ay += mh * rng_uniform(&r);
    }
    cell[2] = (long)floor(ax / mw);
    cell[3] = (long)floor(ay / mh);
    *segment = wrap_segment(s, i, cell);
    *x = s->mover_edge + fmod_pos(ax, mw);
    *y = s->mover_edge + fmod_pos(ay, mh);
}

ss_err_t ss_synth_next(ss_synth_t *s, ss_frame_t *f, ss_synth_truth_t *truth)
{
    if (!s || !f || !f->pixels)
        return SS_ERR_INVALID;
    const ss_synth_cfg_t *c = &s->c;
    const int W = c->width, H = c->height;
    size_t bytes = ss_synth_frame_bytes(c);
    if (f->capacity < bytes) {
        SS_LOG(SS_LOG_ERR, TAG, "frame buffer holds %zu bytes, %dx%d %s needs %zu", f->capacity,
               W + c->overscan, H, ss_dtype_name(c->dtype), bytes);
        return SS_ERR_SIZE;
    }
    /* pointing, seeing, transparency: fixed draw order, always all drawn */
    rng_t fr;
    rng_seed(&fr, c->seed, STREAM_FRAME, s->seq, 0);
    double jx = c->jitter * rng_normal(&fr), jy = c->jitter * rng_normal(&fr);
    double ju = rng_uniform(&fr), jth = 2.0 * M_PI * rng_uniform(&fr);
    double gs = rng_normal(&fr), gt = rng_normal(&fr);
    int jump_now = c->jump_at > 0 && s->seq == (uint64_t)c->jump_at;
    if (s->seq > 0 && (ju < c->jump_prob || jump_now)) {
        s->jump_x += c->jump_px * cos(jth);
        s->jump_y += c->jump_px * sin(jth);
    }
    double px = jx + c->drift_x * (double)s->seq + s->jump_x;
    double py = jy + c->drift_y * (double)s->seq + s->jump_y;
    if (s->seq == 0) {
        s->p0x = px;
        s->p0y = py;
    }
    double sx = px - s->p0x, sy = py - s->p0y;
    double seeing = SS_CLAMP(1.0 + c->seeing_wobble * gs, MIN_SEEING_FACTOR, MAX_SEEING_FACTOR);
    double T = SS_MAX(1.0 + c->transparency * gt, MIN_TRANSPARENCY);
    s->sigma_t = c->psf_sigma * seeing;
    s->alpha_t = s->moffat_alpha * seeing;
    if (c->psf == SS_SYNTH_MOFFAT)
        s->moffat_norm_t = (c->moffat_beta - 1.0) / (M_PI * s->alpha_t * s->alpha_t);
    frame_sky_and_geometry(s);

    if (truth) {
        memset(truth, 0, offsetof(ss_synth_truth_t, obj));
        truth->seq = s->seq;
        truth->sx = sx;
        truth->sy = sy;
        truth->psf_sigma = s->sigma_t;
        truth->transparency = T;
        truth->sigma_pix = s->sigma_pix;
        truth->sky = c->sky * s->sky_f;
        truth->stray = s->stray_a;
        truth->stray_angle = c->stray > 0.0 ? stray_angle(s) : 0.0;
        truth->width = s->out_w;
        truth->height = s->out_h;
        truth->overscan = c->overscan;
        truth->motion = c->truth_motion || c->n_mover_speed > 0 || c->n_crossing > 0;
        if (s->seq == 0 && s->n_hot > 0) {
            truth->n_hot = s->n_hot;
            truth->hot_x = s->hot_x;
            truth->hot_y = s->hot_y;
        }
        truth->n_obj = 0;
    }

    /* point sources of this frame: stars (periodic tile) then movers */
    s->n_srcs = 0;
    for (int i = 0; i < s->n_stars; i++) {
        double x = fmod_pos(s->star_x[i] - sx + SKY_MARGIN, s->tile_w) - SKY_MARGIN;
        double y = fmod_pos(s->star_y[i] - sy + SKY_MARGIN, s->tile_h) - SKY_MARGIN;
        double fl = s->star_f[i] * T;
        int r = src_radius(s, fl);
        if (x + r < -0.5 || x - r > W - 0.5 || y + r < -0.5 || y - r > H - 0.5)
            continue;
        s->srcs[s->n_srcs++] = (src_t){x, y, fl, r, 0.0};
    }
    int next_id = 0;
    const double msg = c->mover_sigma;     /* 0: the frame's PSF */
    s->n_trails = 0;
    for (int i = 0; i < s->n_movers; i++) {
        double x, y;
        int segment;
        mover_position(s, i, sx, sy, &x, &y, &segment);
        double fl = s->mov_f[i] * T;
        ss_synth_obj_t o;
        memset(&o, 0, sizeof o);
        o.id = next_id++;
        o.kind = SS_SYNTH_MOVER;
        o.x = o.x0 = o.x1 = x;
        o.y = o.y0 = o.y1 = y;
        o.flux = fl;
        if (s->mov_len[i] > 0.0) {
            streak_t *st = &s->trails[s->n_trails];
            s->trail_sg[s->n_trails++] = msg > 0.0 ? msg : s->sigma_t;
            make_trail(s, i, x, y, fl, msg > 0.0 ? msg : s->sigma_t, st);
            o.x0 = st->x0, o.y0 = st->y0, o.x1 = st->x1, o.y1 = st->y1;
            o.snr = trail_snr(s, fl, s->mov_len[i]);
        } else {
            s->srcs[s->n_srcs++] = (src_t){x, y, fl, src_radius_sg(s, fl, msg), msg};
            o.snr = point_snr(s, fl);
        }
        o.sigma = msg > 0.0 ? msg : s->sigma_t;
        o.vx = s->mov_vx[i];
        o.vy = s->mov_vy[i];
        o.vx_s = c->frame_interval > 0.0 ? o.vx / c->frame_interval : NAN;
        o.vy_s = c->frame_interval > 0.0 ? o.vy / c->frame_interval : NAN;
        o.segment = segment;
        o.pair = i >= c->n_movers ? (i - c->n_movers) / 2 : -1;
        add_obj(truth, &o);
    }
    /* ids: movers 0..n_movers-1, then streaks and cosmics numbered on */
    next_id = SS_MAX(next_id, c->n_movers);
    make_streak(s, T);
    if (s->streak.on) {
        ss_synth_obj_t o;
        memset(&o, 0, sizeof o);
        o.id = next_id++;
        o.kind = SS_SYNTH_STREAK;
        o.x0 = s->streak.x0;
        o.y0 = s->streak.y0;
        o.x1 = s->streak.x1;
        o.y1 = s->streak.y1;
        o.x = 0.5 * (o.x0 + o.x1);
        o.y = 0.5 * (o.y0 + o.y1);
        o.flux = s->streak.lambda * s->streak.len;
        o.snr = s->streak.lambda / s->sigma_ref;
        add_obj(truth, &o);
    }
    make_cosmics(s, truth, &next_id);

    /* render by bands of rows (see render_band); bands write disjoint rows */
    double hi = c->saturation > 0.0 ? SS_MIN(c->saturation, ss_dtype_max(c->dtype))
                                    : ss_dtype_max(c->dtype);
    double lo = dtype_min(c->dtype);
    /* only the rows this frame keeps (height_jitter) are rendered */
    const int HO = s->out_h;
    const int n_bands = (HO + BAND_ROWS - 1) / BAND_ROWS;
    const ss_synth_t *cs = s;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (int b = 0; b < n_bands; b++)
        render_band(cs, cs->model, b * BAND_ROWS, SS_MIN((b + 1) * BAND_ROWS, HO), f->pixels, lo,
                    hi);

    f->width = s->out_w;
    f->height = HO;
    f->dtype = c->dtype;
    f->valid = NULL;
    ss_frame_meta_clear(&f->meta);
    f->meta.seq = s->seq;
    f->meta.mjd_obs = s->start_mjd + (double)s->seq * c->frame_interval / 86400.0;
    f->meta.exposure = c->exposure;
    f->meta.recv_mono = ss_now_mono();
    ss_strlcpy(f->meta.source, "synth", sizeof f->meta.source);
    if (c->overscan > 0 || c->height_jitter > 0) {
        /* the image section as the camera declares it: the full configured
         * height, past the last row of a cut frame */
        f->meta.trim_x0 = 0;
        f->meta.trim_y0 = 0;
        f->meta.trim_w = W;
        f->meta.trim_h = H;
    }
    if (c->wcs) {
        /* TAN projection centred on frame 0's centre pixel; the reference
         * pixel follows the pointing: the sky of reference pixel p is at
         * p - s_t (FITS CRPIX is 1-based). North up, east left. */
        ss_frame_meta_t *m = &f->meta;
        add_wcs_s(m, "CTYPE1", "RA---TAN");
        add_wcs_s(m, "CTYPE2", "DEC--TAN");
        add_wcs_d(m, "CRPIX1", 0.5 * (W + 1) - sx);
        add_wcs_d(m, "CRPIX2", 0.5 * (H + 1) - sy);
        add_wcs_d(m, "CRVAL1", c->wcs_ra);
        add_wcs_d(m, "CRVAL2", c->wcs_dec);
        add_wcs_d(m, "CD1_1", -c->wcs_scale / 3600.0);
        add_wcs_d(m, "CD1_2", 0.0);
        add_wcs_d(m, "CD2_1", 0.0);
        add_wcs_d(m, "CD2_2", c->wcs_scale / 3600.0);
        add_wcs_s(m, "CUNIT1", "deg");
        add_wcs_s(m, "CUNIT2", "deg");
        add_wcs_s(m, "RADESYS", "ICRS");
        add_wcs_d(m, "EQUINOX", 2000.0);
    }
    s->seq++;
    return SS_OK;
}

/* ---- truth as JSON ------------------------------------------------------ */

static const char *kind_name(ss_synth_obj_kind_t k)
{
    switch (k) {
    case SS_SYNTH_MOVER: return "mover";
    case SS_SYNTH_STREAK: return "streak";
    case SS_SYNTH_COSMIC: return "cosmic";
    }
    return "?";
}

/* Append with snprintf; *len tracks the full length, -1 once it overflowed. */
#define APPEND(...)                                                  \
    do {                                                             \
        if (len >= 0) {                                              \
            size_t room = (size_t)len < n ? n - (size_t)len : 0;     \
            int k_ = snprintf(buf + (room ? (size_t)len : 0), room, __VA_ARGS__); \
            if (k_ < 0 || (size_t)k_ >= room)                        \
                len = -1;                                            \
            else                                                     \
                len += k_;                                           \
        }                                                            \
    } while (0)

int ss_synth_truth_json(const ss_synth_truth_t *t, char *buf, size_t n)
{
    if (!t || !buf || n == 0)
        return -1;
    long len = 0;
    APPEND("{\"seq\":%llu,\"sx\":%.6f,\"sy\":%.6f,\"psf_sigma\":%.6f,\"transparency\":%.6f,"
           "\"sigma_pix\":%.6f,\"sky\":%.4f,\"width\":%d,\"height\":%d",
           (unsigned long long)t->seq, t->sx, t->sy, t->psf_sigma, t->transparency, t->sigma_pix,
           t->sky, t->width, t->height);
    if (t->overscan > 0)
        APPEND(",\"overscan\":%d", t->overscan);
    if (t->stray > 0.0)
        APPEND(",\"stray\":%.4f,\"stray_angle\":%.6f", t->stray, t->stray_angle);
    APPEND(",\"objects\":[");
    int nobj = SS_CLAMP(t->n_obj, 0, SS_SYNTH_MAX_OBJ);
    for (int i = 0; i < nobj; i++) {
        const ss_synth_obj_t *o = &t->obj[i];
        APPEND("%s{\"id\":%d,\"kind\":\"%s\",\"x\":%.4f,\"y\":%.4f", i ? "," : "", o->id,
               kind_name(o->kind), o->x, o->y);
        if (o->kind == SS_SYNTH_STREAK ||
            (o->kind == SS_SYNTH_MOVER && (o->x0 != o->x1 || o->y0 != o->y1)))
            APPEND(",\"x0\":%.4f,\"y0\":%.4f,\"x1\":%.4f,\"y1\":%.4f", o->x0, o->y0, o->x1,
                   o->y1);
        APPEND(",\"flux\":%.6g,\"snr\":%.4f", o->flux, o->snr);
        if (o->kind == SS_SYNTH_MOVER)
            APPEND(",\"sigma\":%.4f", o->sigma);
        if (o->kind == SS_SYNTH_MOVER && t->motion) {
            APPEND(",\"vx\":%.6f,\"vy\":%.6f", o->vx, o->vy);
            if (isfinite(o->vx_s) && isfinite(o->vy_s))
                APPEND(",\"vx_s\":%.9g,\"vy_s\":%.9g", o->vx_s, o->vy_s);
            APPEND(",\"segment\":%d", o->segment);
            if (o->pair >= 0)
                APPEND(",\"pair\":%d", o->pair);
        }
        APPEND("}");
    }
    APPEND("]");
    if (t->n_hot > 0 && t->hot_x && t->hot_y) {
        APPEND(",\"hot\":[");
        for (int i = 0; i < t->n_hot; i++)
            APPEND("%s[%d,%d]", i ? "," : "", t->hot_x[i], t->hot_y[i]);
        APPEND("]");
    }
    APPEND("}");
    if (len < 0)
        return -1;
    return (int)len;
}

/* The header fields take < 400 bytes, an object < 260 (five coordinates
 * and a flux of up to ~24 characters each) and < 420 with the motion
 * fields (velocities of at most 1e6 px/frame: vx, vy < 30 characters each,
 * vx_s, vy_s < 32), < 520 with a trailed mover's four end coordinates
 * (< 25 characters each), a hot pixel < 26. */
#define TRUTH_HEAD_BYTES 512
#define TRUTH_OBJ_BYTES 560
#define TRUTH_HOT_BYTES 26

size_t ss_synth_truth_json_max(const ss_synth_cfg_t *c)
{
    size_t hot = c && c->n_hot > 0 ? (size_t)c->n_hot : 0;
    return TRUTH_HEAD_BYTES + (size_t)SS_SYNTH_MAX_OBJ * TRUTH_OBJ_BYTES + hot * TRUTH_HOT_BYTES;
}
