/*
 * track_bench.c — skysieve-track-bench: the tracker's step alone
 * (ss_tracker_frame), µs per frame, on a field of random detections and
 * five movers. A program, never a test: it prints a figure and a hash of
 * everything the tracker returned (each detection's track id, each
 * report's id, state and length), so that two builds can be compared for
 * the same output as well as for speed (docs/PERFORMANCE.md).
 *
 *   skysieve-track-bench [FIELD [FALSE_PER_FRAME [FRAMES]]] | --help
 *
 * FIELD: the square field's side in px (4096); FALSE_PER_FRAME: random
 * point detections a frame, SNR 5 to 10 (336: the bench's 4096² frames,
 * 20 cosmic-ray hits per Mpix); FRAMES (200): the first 20 are not timed.
 * The tracker runs with the keys' defaults; frames are 10 s apart.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pipeline/detection.h"
#include "pipeline/track.h"

static uint64_t rng = 88172645463325252ULL;

/* Uniform in [0, 1) (xorshift64). */
static double unif(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

/* A point detection at (x, y) of peak SNR snr into l. */
static void push(ss_detlist_t *l, double x, double y, double snr)
{
    ss_detection_t *d = ss_detlist_push(l);
    if (!d)
        return;
    d->sign = 1;
    d->x = d->x0 = d->x1 = x;
    d->y = d->y0 = d->y1 = y;
    d->peak_snr = snr;
    d->kind = SS_KIND_POINT;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec * 1e-3;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: skysieve-track-bench [FIELD >= 64 [FALSE_PER_FRAME 0-100000 [FRAMES > 20]]]\n"
                 "defaults 4096, 336, 200; prints µs a frame and the output's hash\n");
}

/* Argument i of argv as a number (the whole of it), or dflt when absent;
 * NAN when it is not one. */
static double num_arg(int argc, char **argv, int i, double dflt)
{
    if (argc <= i)
        return dflt;
    char *end;
    const double v = strtod(argv[i], &end);
    return end != argv[i] && *end == '\0' ? v : NAN;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        usage(stdout);
        return 0;
    }
    const double field = num_arg(argc, argv, 1, 4096.0), nf = num_arg(argc, argv, 2, 336.0);
    const double nt = num_arg(argc, argv, 3, 200.0);
    if (argc > 4 || !(field >= 64.0) || !(nf >= 0.0 && nf <= 100000.0 && nf == floor(nf)) ||
        !(nt > 20.0 && nt <= 1e7 && nt == floor(nt))) {
        usage(stderr);
        return 2;
    }
    const int nfa = (int)nf, frames = (int)nt;
    const ss_track_cfg_t cfg = { .enabled = 1, .max_speed = 500.0, .gate = 3.0, .max_missed = 3,
                                 .min_points = 3 };
    ss_tracker_t *t = ss_tracker_new(&cfg);
    ss_detlist_t dets;
    ss_tracklist_t out;
    if (!t || ss_detlist_init(&dets, nfa + 8) != 0 ||
        ss_tracklist_init(&out, ss_track_reports_max(nfa + 8)) != 0) {
        fprintf(stderr, "skysieve-track-bench: out of memory\n");
        return 1;
    }
    double us = 0.0;
    uint64_t hash = 1;
    for (int f = 0; f < frames; f++) {
        ss_detlist_clear(&dets);
        for (int i = 0; i < 5; i++)     /* movers at (2, 1) px a frame */
            push(&dets, 100.0 + 700.0 * i + 2.0 * f, 300.0 + 500.0 * i + f, 10.0);
        for (int k = 0; k < nfa; k++)
            push(&dets, field * unif(), field * unif(), 5.0 + 5.0 * unif());
        const ss_track_frame_t tf = { (uint64_t)f, 61000.0 + f * 10.0 / 86400.0, 0.0, 0.0,
                                      field * field };
        out.count = 0;
        const double t0 = now_us();
        if (ss_tracker_frame(t, &tf, &dets, &out) != 0) {
            fprintf(stderr, "skysieve-track-bench: tracker out of memory\n");
            return 1;
        }
        if (f >= 20)
            us += now_us() - t0;
        for (int k = 0; k < dets.count; k++)
            hash = hash * 1000003u + dets.items[k].track;
        for (int k = 0; k < out.count; k++)
            hash = hash * 1000003u + out.items[k].id * 7u + (uint64_t)out.items[k].state +
                   (uint64_t)out.items[k].n;
    }
    printf("%.0f² field, 5 movers + %d false a frame: %.1f µs a frame (%d frames timed), "
           "output hash %016llx\n",
           field, nfa, us / (frames - 20), frames - 20, (unsigned long long)hash);
    ss_tracklist_free(&out);
    ss_detlist_free(&dets);
    ss_tracker_destroy(&t);
    return 0;
}
