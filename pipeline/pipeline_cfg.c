/*
 * pipeline_cfg.c — values derived from the pipeline config, computed in one
 * place so that both backends and the driver agree.
 */
#include "pipeline_cfg.h"

#include <math.h>

int ss_poly_terms(int degree)
{
    return degree <= 0 ? 1 : degree == 1 ? 3 : 6;
}

double ss_cfg_gamma(const ss_pipeline_cfg_t *c)
{
    return c->gamma >= 0.0 ? c->gamma : 1e-3 * c->history;
}

double ss_cfg_mask_radius(const ss_pipeline_cfg_t *c)
{
    return c->mask_radius >= 0.0 ? c->mask_radius : 2.0 * c->psf_sigma + 1.0;
}

int ss_cfg_guided_radius(const ss_pipeline_cfg_t *c)
{
    return c->guided_radius > 0 ? c->guided_radius : (int)lround(8.0 * c->psf_sigma);
}

int ss_cfg_min_valid(const ss_pipeline_cfg_t *c, int n)
{
    int want = c->min_valid;
    if (want <= 0) {
        /* m + 2: two frames beyond the m constraints, so the minimum-norm
         * solution is never the exact interpolation through m frames
         * (whose ‖a‖² blows up when their fractions cluster); n/2: the
         * prediction noise ‖a‖² at most about twice the full history's */
        const int m = ss_poly_terms(c->poly_degree);
        const int half = (n + 1) / 2;
        want = m + 2 > half ? m + 2 : half;
    }
    return want < n ? want : n;
}

int ss_cfg_min_history(const ss_pipeline_cfg_t *c)
{
    if (c->min_history > 0)
        return c->min_history < c->history ? c->min_history : c->history;
    /* enough frames to satisfy the moment constraints with some margin */
    int m = c->mode == SS_WHITEN_POLY ? ss_poly_terms(c->poly_degree) : 1;
    int want = 2 * m + 2;
    return want < c->history ? want : c->history;
}
