/*
 * vote_core.h — the decisions of the coarse vote (ALGORITHM.md §2a,
 * ss_coarse_vote in stages.h), header-only so that the CPU
 * (register_coarse.c) and the CUDA backend (cuda/k_vote.cu, which votes on
 * the device with no host round trip) score windows, test the vote and
 * place the shift with the same arithmetic. Integer counts, and doubles
 * rounded alike on both (--fmad=false, ISO C).
 */
#ifndef SS_VOTE_CORE_H
#define SS_VOTE_CORE_H

#include <math.h>

#include "pipeline/stages.h"

#if defined(__CUDACC__)
#define SS_VC_FN static __host__ __device__ __forceinline__
#else
#define SS_VC_FN static inline
#endif

/* Why a vote failed (ss_vote_why words it). */
enum { SS_VW_OK = 0, SS_VW_FEW_STARS, SS_VW_NO_MATCH, SS_VW_AMBIGUOUS };

/* The histogram bin of displacement (dx, dy), |dx|, |dy| <= R: dy-major,
 * so that ascending bins are ascending dy, then dx. */
SS_VC_FN int ss_vote_bin(int R, int dx, int dy)
{
    return (dy + R) * (2 * R + 1) + (dx + R);
}

/* The score of bin (dx, dy): the 3×3 window sum of the histogram. */
SS_VC_FN int ss_vote_window(const int *hist, int R, int dx, int dy)
{
    int s = 0;
    for (int ey = (dy - 1 > -R ? dy - 1 : -R); ey <= (dy + 1 < R ? dy + 1 : R); ey++)
        for (int ex = (dx - 1 > -R ? dx - 1 : -R); ex <= (dx + 1 < R ? dx + 1 : R); ex++)
            s += hist[ss_vote_bin(R, ex, ey)];
    return s;
}

/* The test of the best window (n_votes) against random pairs (`votes`
 * pairs fell inside the (2R+1)² histogram) and the best other window
 * (second): *expected, and SS_VW_OK, _NO_MATCH or _AMBIGUOUS. */
SS_VC_FN int ss_vote_test(int n_votes, int second, long votes, int R, double ambiguity,
                          double *expected)
{
    const int side = 2 * R + 1;
    *expected = 9.0 * (double)votes / ((double)side * side);
    const double need = *expected + SS_COARSE_VOTE_SIGMA * sqrt(*expected);
    if (n_votes < SS_COARSE_MIN_VOTES || n_votes < need)
        return SS_VW_NO_MATCH;
    if (second >= ambiguity * n_votes)
        return SS_VW_AMBIGUOUS;
    return SS_VW_OK;
}

/* Round half away from zero. */
SS_VC_FN int ss_vote_round(double v)
{
    return (int)(v < 0.0 ? -floor(-v + 0.5) : floor(v + 0.5));
}

/* The vote-weighted mean displacement of the best window (bx, by) with
 * n_votes > 0 votes, rounded, into *dx, *dy. */
SS_VC_FN void ss_vote_place(const int *hist, int R, int bx, int by, int n_votes, int *dx, int *dy)
{
    double sx = 0.0, sy = 0.0;
    for (int ey = (by - 1 > -R ? by - 1 : -R); ey <= (by + 1 < R ? by + 1 : R); ey++)
        for (int ex = (bx - 1 > -R ? bx - 1 : -R); ex <= (bx + 1 < R ? bx + 1 : R); ex++) {
            const int k = hist[ss_vote_bin(R, ex, ey)];
            sx += (double)k * ex;
            sy += (double)k * ey;
        }
    *dx = ss_vote_round(sx / n_votes);
    *dy = ss_vote_round(sy / n_votes);
}

#ifdef __cplusplus
extern "C" {
#endif
/* out->why for a failed vote (code SS_VW_*) from out's counts
 * (register_coarse.c). */
void ss_vote_why(int code, ss_coarse_t *out);
#ifdef __cplusplus
}
#endif

#endif
