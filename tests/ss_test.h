/*
 * ss_test.h — helpers the Check suites share: a small deterministic PRNG
 * (splitmix64, so every test draws the same numbers on every machine),
 * Gaussian deviates, the OpenMP thread count for thread-independence
 * checks, the monotonic clock and a sleep for the process tests, the
 * removal of a test's temporary directory, and a suite's main. Header-only
 * (static functions), included by the test files.
 */
#ifndef SS_TEST_H
#define SS_TEST_H

#include <check.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* Seconds of the monotonic clock. */
static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleep s seconds (s >= 0; a signal may cut it short). */
static inline void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    nanosleep(&ts, NULL);
}

static inline int rmtree_entry(const char *path, const struct stat *st, int type, struct FTW *f)
{
    (void)st, (void)type, (void)f;
    return remove(path);
}

/* Remove path and everything under it (depth first, links not followed):
 * 0, or -1 with errno from the first entry that could not be removed. */
static inline int rmtree(const char *path)
{
    return nftw(path, rmtree_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* The PRNG state; a test seeds it by assignment. */
static uint64_t rng_state;

static inline uint64_t rng_u64(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double rng_unif(void)
{
    return (double)(rng_u64() >> 11) * 0x1.0p-53;
}

/* Standard normal (Box-Muller, one of the pair). */
static inline double rng_gauss(void)
{
    double u = rng_unif(), v = rng_unif();
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
}

/* OpenMP team size of the calling thread (no-op without OpenMP). */
static inline void set_threads(int n)
{
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

/* A suite's main: run every test of s (CK_NORMAL output; CK_FORK and
 * CK_RUN_CASE as Check reads them), free it; the exit status. */
static inline int ss_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
