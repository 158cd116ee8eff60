/*
 * check_bench_cli.c — skysieve-bench's command line (tools/bench.c), run
 * as a person runs it, on the CPU backend and small frames: --help on
 * stdout with exit 0; each bad value refused with exit 2 and a message
 * naming the option; a run's table and CSV with a line per case, its ok
 * frames counted after the warm-up it announces; a CSV that cannot be
 * written is an error (exit 1), not a run whose figures went nowhere.
 * The timings themselves are never asserted: the bench is a program, not
 * a test.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ss_test.h"

static char dir[64];

/* Run skysieve-bench with args: its exit code; stdout into out, stderr
 * into err (each n bytes at most, NUL-terminated). */
static int run_bench(const char *args, char *out, char *err, size_t n)
{
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    ck_assert_msg(bd != NULL, "SKYSIEVE_BINARY_DIR is not set (run through ctest)");
    char cmd[4096], errpath[128];
    snprintf(errpath, sizeof errpath, "%s/stderr", dir);
    snprintf(cmd, sizeof cmd, "'%s/tools/skysieve-bench' %s 2>'%s'", bd, args, errpath);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    const size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    const int st = pclose(p);
    FILE *e = fopen(errpath, "r");
    ck_assert_ptr_nonnull(e);
    const size_t eg = fread(err, 1, n - 1, e);
    err[eg] = '\0';
    fclose(e);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/ssbench-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    ck_assert_int_eq(rmtree(dir), 0);
}

enum { OUT_MAX = 65536 };
static char out[OUT_MAX], err[OUT_MAX];

START_TEST(test_help)
{
    ck_assert_int_eq(run_bench("--help", out, err, OUT_MAX), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: skysieve-bench"));
    ck_assert_ptr_nonnull(strstr(out, "--verbose"));
    ck_assert_str_eq(err, "");
}
END_TEST

/* Each bad command line: exit 2, and stderr says what was wrong. */
START_TEST(test_bad_values)
{
    static const struct { const char *args, *says; } bad[] = {
        { "--frames x", "--frames: expected an integer from 1 to" },
        { "--frames 0", "--frames: expected an integer from 1 to" },
        { "--frames 5x", "--frames: expected an integer" },
        { "--warmup -1", "--warmup: expected an integer from 0 to" },
        { "--model-error 2", "--model-error: expected an integer from 0 to 1" },
        { "--guided-mask yes", "--guided-mask: expected an integer" },
        { "--feeds 65", "--feeds: expected an integer from 1 to 64" },
        { "--backend gpu", "--backend: 'gpu' is not a value it takes" },
        { "--output f64", "--output: 'f64' is not a value it takes" },
        { "--size 512,0", "--size: '512,0' is not a value it takes" },
        { "--history", "--history needs a value" },
        { "--bogus", "unknown option '--bogus'" },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ck_assert_msg(run_bench(bad[k].args, out, err, OUT_MAX) == 2, "%s: not exit 2", bad[k].args);
        ck_assert_msg(strstr(err, bad[k].says) != NULL, "%s: stderr '%s', not '%s'", bad[k].args,
                      err, bad[k].says);
    }
}
END_TEST

/* The CSV's line of a case: its fields into f (at most nf); their count. */
static int csv_fields(char *line, char **f, int nf)
{
    int n = 0;
    for (char *s = strtok(line, ","); s && n < nf; s = strtok(NULL, ","))
        f[n++] = s;
    return n;
}

START_TEST(test_cpu_run)
{
    char args[512], csv[128];
    snprintf(csv, sizeof csv, "%s/b.csv", dir);
    snprintf(args, sizeof args, "--backend cpu --size 64,96 --history 4 --frames 3 --csv '%s'",
             csv);
    ck_assert_msg(run_bench(args, out, err, OUT_MAX) == 0, "exit not 0: %s", err);
    /* the warm-up it announces: 2N + 4 */
    ck_assert_ptr_nonnull(strstr(err, "bench: cpu 64² N=4, 3 frames after 12 of warm-up"));
    ck_assert_ptr_nonnull(strstr(err, "bench: cpu 96² N=4, 3 frames after 12 of warm-up"));
    /* the table: a header and a line per case */
    ck_assert_ptr_nonnull(strstr(out, "total_ms"));
    ck_assert_ptr_nonnull(strstr(out, "\ncpu      64   4 |"));
    ck_assert_ptr_nonnull(strstr(out, "\ncpu      96   4 |"));
    FILE *f = fopen(csv, "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    char *hdr[64];
    const int nh = csv_fields(line, hdr, 64);
    ck_assert_str_eq(hdr[0], "backend");
    ck_assert_str_eq(hdr[nh - 2], "ok_frames");
    const int sizes[] = { 64, 96 };
    for (int k = 0; k < 2; k++) {
        ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
        char *v[64];
        ck_assert_int_eq(csv_fields(line, v, 64), nh);
        ck_assert_str_eq(v[0], "cpu");
        ck_assert_int_eq(atoi(v[1]), sizes[k]);
        ck_assert_int_eq(atoi(v[2]), 4);
        ck_assert_int_eq(atoi(v[3]), 3);
        ck_assert_int_eq(atoi(v[nh - 2]), 3);       /* every timed frame ok */
        ck_assert(atof(v[4 + 1]) > 0.0);            /* calibrate_ms was timed */
    }
    ck_assert_ptr_null(fgets(line, sizeof line, f));
    fclose(f);

    /* --warmup and --verbose: the frames' statuses, the first the reference */
    ck_assert_int_eq(run_bench("--backend cpu --size 64 --history 4 --frames 1 --warmup 6 "
                               "--verbose", out, err, OUT_MAX), 0);
    ck_assert_ptr_nonnull(strstr(err, "1 frames after 6 of warm-up"));
    ck_assert_ptr_nonnull(strstr(err, "frame 0: reference"));
    ck_assert_ptr_nonnull(strstr(err, "frame 6: ok"));
}
END_TEST

START_TEST(test_csv_unwritable)
{
    char args[512];
    snprintf(args, sizeof args, "--backend cpu --size 64 --history 4 --frames 1 --csv '%s/no/b.csv'",
             dir);
    ck_assert_int_eq(run_bench(args, out, err, OUT_MAX), 1);
    ck_assert_ptr_nonnull(strstr(err, "no/b.csv: No such file or directory"));
    ck_assert_ptr_null(strstr(out, "total_ms"));
}
END_TEST

static Suite *bench_cli_suite(void)
{
    Suite *s = suite_create("bench_cli");
    TCase *tc = tcase_create("cli");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_help);
    tcase_add_test(tc, test_bad_values);
    tcase_add_test(tc, test_cpu_run);
    tcase_add_test(tc, test_csv_unwritable);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(bench_cli_suite());
}
