/*
 * check_cuda_errors.c — the CUDA backend's error paths (issue 3, item 5):
 * a failed launch fails the op with SS_ERR_BACKEND and is counted, and
 * the instance keeps working; a sticky error (an illegal address) marks
 * the instance broken, and every later call says SS_ERR_BROKEN; argument
 * errors are SS_ERR_INVALID / SS_ERR_SIZE without touching the GPU; the
 * probe does not initialise CUDA in the calling process.
 *
 * Kept apart from check_cuda_parity because it provokes a real illegal
 * address, which compute-sanitizer (rightly) reports. Skips (77) without
 * a GPU.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "pipeline/backend.h"
#ifdef SKYSIEVE_HAVE_CUDA
#include "cuda/backend_cuda.h"
#endif

#ifdef SKYSIEVE_HAVE_CUDA

enum { W = 128, H = 96 };

static ss_backend_t *make(const ss_backend_ops_t **ops)
{
    ss_pipeline_cfg_t cfg;
    static ss_pipeline_cfg_t keep;
    ss_pipeline_cfg_defaults(&cfg);
    keep = cfg;                         /* the backend keeps a pointer to it */
    const ss_geometry_t geo = { .raw_w = W, .raw_h = H, .raw_dtype = SS_DT_U16,
                                .roi = { 0, 0, W, H }, .hist_dtype = SS_DT_U16, .history = 3 };
    *ops = ss_backend_cuda_ops();
    ss_backend_t *b = NULL;
    ck_assert_int_eq((*ops)->create(&keep, &geo, NULL, &b), SS_OK);
    return b;
}

static void fill(float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i] = (float)((i * 2654435761u) % 1000) * 0.01f;
}

START_TEST(test_recoverable_error)
{
    const ss_backend_ops_t *ops;
    ss_backend_t *b = make(&ops);
    float *v = malloc(W * H * sizeof(float));
    fill(v, W * H);
    ck_assert_int_eq(ops->write_plane(b, SS_PLANE_RESIDUAL, 0, v), SS_OK);
    float s0 = 0.0f, s1 = 0.0f;
    ck_assert_int_eq(ops->noise(b, SS_PLANE_RESIDUAL, 1, &s0), SS_OK);
    ck_assert_int_eq(ss_cuda_inject_fault(b, 1), SS_ERR_BACKEND);
    ck_assert_int_eq(ss_cuda_error_count(b), 1);
    /* the instance still works and gives the same answer */
    ck_assert_int_eq(ops->noise(b, SS_PLANE_RESIDUAL, 1, &s1), SS_OK);
    ck_assert(s0 == s1 && s0 > 0.0f);
    ck_assert_int_eq(ss_cuda_error_count(b), 1);
    ops->destroy(&b);
    free(v);
}
END_TEST

START_TEST(test_sticky_error)
{
    const ss_backend_ops_t *ops;
    ss_backend_t *b = make(&ops);
    float *v = malloc(W * H * sizeof(float));
    fill(v, W * H);
    ck_assert_int_eq(ss_cuda_inject_fault(b, 0), SS_ERR_BROKEN);
    float s = 0.0f;
    ck_assert_int_eq(ops->noise(b, SS_PLANE_RESIDUAL, 1, &s), SS_ERR_BROKEN);
    ck_assert_int_eq(ops->write_plane(b, SS_PLANE_RESIDUAL, 0, v), SS_ERR_BROKEN);
    ck_assert_int_eq(ops->guided(b, 3, 1.0f, NULL), SS_ERR_BROKEN);
    ck_assert_int_eq(ops->history_store(b, 0, 0, 0), SS_ERR_BROKEN);
    double ms[SS_STAGE__COUNT];
    ops->stage_times(b, ms);
    ck_assert(ms[SS_STAGE_WHITEN] < 0.0);
    ops->destroy(&b);                   /* destroying a broken instance is fine */
    ck_assert_ptr_null(b);
    free(v);
}
END_TEST

START_TEST(test_argument_errors)
{
    const ss_backend_ops_t *ops;
    ss_backend_t *b = make(&ops);
    int slots[2] = { 0, 5 }, ix[2] = { 0, 0 }, iy[2] = { 0, 0 };
    double a[2] = { 0.5, 0.5 }, R[4], p[2];
    ck_assert_int_eq(ops->whiten(b, slots, ix, iy, a, 2, NULL), SS_ERR_INVALID);
    ck_assert_int_eq(ops->lsq_moments(b, slots, ix, iy, 2, R, p), SS_ERR_INVALID);
    ck_assert_int_eq(ops->history_store(b, -1, 0, 0), SS_ERR_INVALID);
    float s;
    ck_assert_int_eq(ops->noise(b, SS_PLANE_HISTORY, 1, &s), SS_ERR_INVALID);
    uint16_t px[4];
    ss_frame_t f = { .width = 2, .height = 2, .dtype = SS_DT_U16, .pixels = px, .capacity = 8 };
    ck_assert_int_eq(ops->ingest(b, &f, NULL), SS_ERR_SIZE);
    ck_assert_int_eq(ops->read_plane(b, SS_PLANE_HISTORY, 7, px), SS_ERR_INVALID);
    ck_assert_int_eq(ss_cuda_error_count(b), 0);
    const ss_geometry_t bad = { .raw_w = W, .raw_h = H, .raw_dtype = SS_DT_U16,
                                .roi = { 0, 0, W + 1, H }, .hist_dtype = SS_DT_U16, .history = 3 };
    ss_pipeline_cfg_t cfg;
    ss_pipeline_cfg_defaults(&cfg);
    ss_backend_t *b2 = (ss_backend_t *)&cfg;
    ck_assert_int_eq(ops->create(&cfg, &bad, NULL, &b2), SS_ERR_INVALID);
    ck_assert_ptr_null(b2);
    ops->destroy(&b);
}
END_TEST

/* probe() leaves the caller fork-safe: a child forked after it can still
 * use CUDA (it could not if the parent had initialised CUDA). */
START_TEST(test_probe_fork_safe)
{
    const ss_backend_ops_t *ops = ss_backend_cuda_ops();
    char why[256];
    ck_assert(ops->probe(0, why, sizeof why));
    ck_assert(!ops->probe(999, why, sizeof why));
    ck_assert_msg(strstr(why, "999") != NULL, "%s", why);
    const pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const ss_backend_ops_t *o;
        ss_backend_t *b = make(&o);
        float s = 0.0f;
        const int ok = o->noise(b, SS_PLANE_FRAME, 1, &s) == SS_OK;
        o->destroy(&b);
        _exit(ok ? 0 : 3);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
END_TEST

#endif

int main(void)
{
#ifndef SKYSIEVE_HAVE_CUDA
    printf("check_cuda_errors: SKIP: built without CUDA\n");
    return 77;
#else
    char why[256] = "";
    if (!ss_backend_cuda_ops()->probe(0, why, sizeof why)) {
        printf("check_cuda_errors: SKIP: no usable GPU: %s\n", why);
        return 77;
    }
    ss_log_setup(SS_LOG_WARNING, 0);
    Suite *s = suite_create("cuda_errors");
    TCase *tc = tcase_create("errors");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_recoverable_error);
    tcase_add_test(tc, test_sticky_error);
    tcase_add_test(tc, test_argument_errors);
    tcase_add_test(tc, test_probe_fork_safe);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
#endif
}
