/*
 * check_indi.c — the chain on frames from a real camera driver: INDI's CCD
 * simulator (indiserver + indi_simulator_ccd, Debian package indi-bin),
 * driven by tests/indi/capture.py with the gsc stand-in of tests/indi/
 * drawing a sparse field of 30 stars and one slow mover (0.7 px/frame).
 * Where the synthetic feeds of tools/synth.h are ours, these frames are
 * what an INDI station sends: u16 FITS with the driver's header, its PSF
 * (whole-pixel stamps), its noise (uniform 0..9 ADU) and its geometry.
 *
 * Three sequences of 25 frames, each through a CPU pipeline with the
 * default config: a static camera ("static"); a camera whose pointing
 * jumps by whole pixels (up to ±4 px per axis) between frames ("jitter");
 * and the same jumps on a sparser field, the first 10 of the 30 stars
 * ("sparse": none of them lies in a block of the default coarse
 * registration grid, the field of the issue). Each must give:
 *   - no frame with status regfail or error (the frames are clean: the
 *     registration has nothing to fail on);
 *   - an ok frame after the reference and the min_history warm-up
 *     frames, and every frame after the first ok one ok;
 *   - the shift of every registered frame within SHIFT_TOL_PX of the
 *     truth (whole pixels, from capture.py's truth.txt);
 *   - the mover: a positive detection within MOVER_TOL_PX of its pixel in
 *     at least MOVER_MIN_SHARE of the ok frames.
 * A line of counts is printed per sequence; a sequence that fails also
 * prints every frame's status, reason, shift, detections and the mover's
 * match, and its failure message lists each requirement that failed.
 * capture.py's output goes to a log beside the frames, shown (its end)
 * only when a capture fails, so that a failure stays near the top.
 *
 * Without indi-bin the suite FAILS and says what to install (CI installs
 * it through tools/install-deps.sh); only with SKYSIEVE_INDI_OPTIONAL=1
 * and no CI variable set does it skip (77) instead. SKYSIEVE_INDI_FRAMES=DIR
 * keeps the captured frames in DIR/static, DIR/jitter and DIR/sparse
 * (otherwise they go to a temporary directory that is removed, also when a
 * test fails); SKYSIEVE_INDI_REPLAY=DIR
 * runs the pipeline on frames kept so, without INDI (a quick loop while
 * working on the pipeline).
 */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "pipeline/frame_fits.h"
#include "pipeline/pipeline.h"
#include "ss_test.h"

#define NFRAMES 25
#define MAX_FRAMES 64
#define PYTHON "/usr/bin/python3"          /* Debian's, with python3-numpy */
#define CAPTURE_TIMEOUT_S 120              /* capture.py's own limit */
#define CAPTURE_GRACE_S 20                 /* then we stop it ourselves */
#define MOVER_TOL_PX 2.0
#define MOVER_MIN_SHARE 0.8
#define SHIFT_TOL_PX 0.25                  /* whole-pixel moves of an identical field */
#define EXIT_MISSING 3                     /* capture.py: indi-bin or numpy missing */

/* A sequence: its name (test, directory) and how capture.py makes it. */
typedef struct seq {
    const char *name;
    const char *mode;           /* --mode: static or jitter */
    int stars;                  /* --stars: the first N of tests/indi/skyfield.py's 30 */
} seq_t;

static const seq_t SEQ_STATIC = { "static", "static", 30 };
static const seq_t SEQ_JITTER = { "jitter", "jitter", 30 };
/* The first 10 stars: none lies within 9 px of one of the 36 blocks of the
 * default coarse registration grid, the failure of the issue ("0 of 0
 * structured blocks vote"). Ten stars of SNR 60 to 2600 are plenty for a
 * registration that uses whatever stars there are. */
static const seq_t SEQ_SPARSE = { "sparse", "jitter", 10 };

typedef struct truth_row {
    char file[64];
    int dx, dy;                 /* whole-pixel move of the field since frame 0 */
    int mover_x, mover_y;       /* the mover's stamp centre */
} truth_row_t;

typedef struct frame_out {
    ss_frame_status_t status;
    char reason[160];
    double sx, sy, ex, ey;      /* measured and expected shift */
    int shift_known;            /* a registered frame: sx, sy against a reference */
    int n_pos;                  /* positive detections */
    double mover_dist;          /* nearest positive detection to the mover, px (INFINITY: none) */
} frame_out_t;

/* ---- environment ---------------------------------------------------------- */

static int in_ci(void)
{
    const char *ci = getenv("CI");
    return ci && *ci && strcmp(ci, "0") != 0 && strcmp(ci, "false") != 0;
}

/* Is prog an executable on PATH? */
static int on_path(const char *prog)
{
    const char *path = getenv("PATH");
    char dir[1024], full[1200];
    if (!path)
        path = "/usr/bin:/bin";
    while (*path) {
        size_t n = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)n, path);
        snprintf(full, sizeof full, "%s/%s", n ? dir : ".", prog);
        if (access(full, X_OK) == 0)
            return 1;
        path += n + (path[n] == ':');
    }
    return 0;
}

/* What is missing to run the suite ("" when nothing). */
static void missing_software(char *buf, size_t n)
{
    buf[0] = '\0';
    if (!on_path("indiserver"))
        snprintf(buf + strlen(buf), n - strlen(buf), " indiserver");
    if (!on_path("indi_simulator_ccd"))
        snprintf(buf + strlen(buf), n - strlen(buf), " indi_simulator_ccd");
    if (access(PYTHON, X_OK) != 0)
        snprintf(buf + strlen(buf), n - strlen(buf), " " PYTHON);
}

/* a/b into buf, which must hold it */
static void join_path(char *buf, size_t n, const char *a, const char *b)
{
    int r = snprintf(buf, n, "%s/%s", a, b);
    ck_assert_msg(r >= 0 && (size_t)r < n, "path too long: %s/%s", a, b);
}

static const char *source_dir(void)
{
    const char *s = getenv("SKYSIEVE_SOURCE_DIR");
    return s ? s : "..";
}

/* ---- capture ---------------------------------------------------------------- */

/* Start capture.py with args (NULL-terminated, after the script), its
 * output into the file log (the test shows its end when it fails:
 * show_capture_log); it dies with this process (PR_SET_PDEATHSIG: it then
 * stops indiserver itself). */
static pid_t spawn_capture(const char *const *args, const char *log)
{
    char script[1024];
    const char *argv[32];
    int k = 0;
    snprintf(script, sizeof script, "%s/tests/indi/capture.py", source_dir());
    argv[k++] = PYTHON;
    argv[k++] = script;
    for (int i = 0; args[i] && k < 31; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)        /* the test died before prctl */
            _exit(127);
        const int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) {
            fprintf(stderr, "capture log %s: %s\n", log, strerror(errno));
            _exit(127);
        }
        close(fd);
        execv(PYTHON, (char *const *)argv);
        fprintf(stderr, "exec %s %s: %s\n", PYTHON, script, strerror(errno));
        _exit(127);
    }
    return pid;
}

/* Wait for capture.py (pid); returns its exit status (or -1 when it had to
 * be stopped: by its PID, when it overruns). */
static int wait_capture(pid_t pid)
{
    struct timespec t0, now, nap = { 0, 50 * 1000 * 1000 };
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int st = 0, signalled = 0;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            break;
        ck_assert_msg(r == 0 || errno == EINTR, "waitpid: %s", strerror(errno));
        clock_gettime(CLOCK_MONOTONIC, &now);
        double el = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (!signalled && el > CAPTURE_TIMEOUT_S + CAPTURE_GRACE_S) {
            fprintf(stderr, "capture.py (pid %d) overran %d s: stopping it\n", (int)pid,
                    CAPTURE_TIMEOUT_S + CAPTURE_GRACE_S);
            kill(pid, SIGTERM);
            signalled = 1;
        } else if (signalled && el > CAPTURE_TIMEOUT_S + 2 * CAPTURE_GRACE_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
    if (signalled)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The last CAPTURE_LOG_LINES lines of a capture's log on stderr. */
#define CAPTURE_LOG_LINES 40
static void show_capture_log(const char *log)
{
    FILE *f = fopen(log, "r");
    if (!f) {
        fprintf(stderr, "capture log %s: %s\n", log, strerror(errno));
        return;
    }
    static char ring[CAPTURE_LOG_LINES][512];
    long n = 0;
    while (fgets(ring[n % CAPTURE_LOG_LINES], sizeof ring[0], f))
        n++;
    fclose(f);
    fprintf(stderr, "---- %s, its last %ld lines:\n", log, SS_MIN(n, CAPTURE_LOG_LINES));
    for (long k = SS_MAX(0, n - CAPTURE_LOG_LINES); k < n; k++)
        fputs(ring[k % CAPTURE_LOG_LINES], stderr);
    fprintf(stderr, "----\n");
}

/* Wait for the capture pid (wait_capture); its log shown when it did not
 * exit 0. Returns its exit status. */
static int finish_capture(pid_t pid, const char *log)
{
    const int rc = wait_capture(pid);
    if (rc != 0)
        show_capture_log(log);
    return rc;
}

/* Run capture.py into dir, its log in dir/capture.log; returns its exit
 * status (finish_capture). */
static int run_capture(const seq_t *sq, const char *dir)
{
    char frames[16], timeout[16], stars[16];
    snprintf(frames, sizeof frames, "%d", NFRAMES);
    snprintf(stars, sizeof stars, "%d", sq->stars);
    snprintf(timeout, sizeof timeout, "%d", CAPTURE_TIMEOUT_S);
    const char *args[] = { "--out", dir, "--mode", sq->mode, "--frames", frames, "--stars", stars,
                           "--timeout", timeout, NULL };
    char log[1100];
    join_path(log, sizeof log, dir, "capture.log");
    return finish_capture(spawn_capture(args, log), log);
}

/* truth.txt -> rows; returns the number of frames. */
static int read_truth(const char *dir, truth_row_t *rows, int max)
{
    char path[1100], line[512];
    join_path(path, sizeof path, dir, "truth.txt");
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s (capture.py wrote no truth)", path, strerror(errno));
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        ck_assert_msg(n < max, "%s: more than %d frames", path, max);
        int idx;
        double fx, fy;
        truth_row_t *t = &rows[n];
        int got = sscanf(line, "%d %63s %d %d %d %d %lf %lf", &idx, t->file, &t->dx, &t->dy,
                         &t->mover_x, &t->mover_y, &fx, &fy);
        ck_assert_msg(got == 8 && idx == n, "%s: bad line %d: %s", path, n + 1, line);
        n++;
    }
    fclose(f);
    return n;
}

/* Append to the string in buf (n bytes), truncating. */
static void addf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void addf(char *buf, size_t n, const char *fmt, ...)
{
    size_t l = strlen(buf);
    if (l + 1 >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + l, n - l, fmt, ap);
    va_end(ap);
}

/* ---- the sequence through the pipeline ---------------------------------- */

/* The temporary directory the sequences are captured into when they are
 * not kept; made and removed by main(), also when a test fails. */
static char tmp_root[512];

/* The frames of one sequence into dir: captured (into SKYSIEVE_INDI_FRAMES/
 * mode, kept, or tmp_root/mode), or, with SKYSIEVE_INDI_REPLAY, those kept
 * there before. */
static void get_frames(const seq_t *sq, char *dir, size_t n)
{
    const char *mode = sq->name;
    const char *keep = getenv("SKYSIEVE_INDI_FRAMES");
    const char *replay = getenv("SKYSIEVE_INDI_REPLAY");
    char missing[256];
    if (replay && *replay) {
        join_path(dir, n, replay, mode);
        fprintf(stderr, "== %s: replaying the frames of %s (no capture)\n", mode, dir);
        return;
    }
    missing_software(missing, sizeof missing);
    ck_assert_msg(missing[0] == '\0',
                  "missing:%s -- install the Debian package indi-bin (tools/install-deps.sh "
                  "does; the test needs indiserver and indi_simulator_ccd)", missing);
    if (keep && *keep) {
        mkdir(keep, 0755);
        join_path(dir, n, keep, mode);
    } else {
        ck_assert_msg(tmp_root[0], "no temporary directory");
        join_path(dir, n, tmp_root, mode);
        ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s: %s", dir,
                      strerror(errno));
    }
    fprintf(stderr, "== %s: capturing %d frames (%s, %d stars) into %s\n", mode, NFRAMES,
            sq->mode, sq->stars, dir);
    int rc = run_capture(sq, dir);
    ck_assert_msg(rc != EXIT_MISSING, "%s: capture.py found software missing (its message above): "
                  "install the Debian packages indi-bin and python3-numpy", mode);
    ck_assert_msg(rc == 0, "%s: capture.py failed (exit %d; its log's end is above): the INDI "
                  "simulator gave no usable frames", mode, rc);
}

static void run_sequence(const seq_t *sq)
{
    const char *mode = sq->name;
    char dir[1024], err[512];
    get_frames(sq, dir, sizeof dir);
    truth_row_t truth[MAX_FRAMES];
    int n = read_truth(dir, truth, MAX_FRAMES);
    ck_assert_msg(n == NFRAMES, "%s: truth.txt has %d frames, expected %d", mode, n, NFRAMES);

    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    pc.backend = SS_BACKEND_CPU;
    int min_history = ss_cfg_min_history(&pc);
    ss_pipeline_t *p = ss_pipeline_new(&pc, "indi", err, sizeof err);
    ck_assert_msg(p != NULL, "pipeline: %s", err);
    char path[1200];
    int w = 0, h = 0;
    join_path(path, sizeof path, dir, truth[0].file);
    ck_assert_msg(ss_fits_probe(path, &w, &h, NULL, err, sizeof err) == SS_OK, "%s", err);
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, (size_t)w * h, 4000), 0);
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    f.capacity = (size_t)w * h * 4;
    f.pixels = malloc(f.capacity);
    ck_assert_ptr_nonnull(f.pixels);

    frame_out_t out[MAX_FRAMES];
    int ref = -1;                /* the current reference frame */
    double ms = 0.0;
    char *table = NULL;             /* shown when the sequence fails */
    size_t table_len = 0;
    FILE *tab = open_memstream(&table, &table_len);
    ck_assert_ptr_nonnull(tab);
    fprintf(tab, "%s: %dx%d frames, min_history %d\n"
            "frame  status     shift (x, y)        expected    dets  mover (x, y)  nearest  reason\n",
            mode, w, h, min_history);
    for (int k = 0; k < n; k++) {
        frame_out_t *o = &out[k];
        join_path(path, sizeof path, dir, truth[k].file);
        ss_frame_meta_clear(&f.meta);
        ck_assert_msg(ss_fits_read_frame(path, &f, err, sizeof err) == SS_OK, "%s", err);
        ss_err_t e = ss_pipeline_process(p, &f, &res);
        ms += res.total_ms;
        o->status = e == SS_OK ? res.status : SS_STATUS_ERROR;
        snprintf(o->reason, sizeof o->reason, "%s", e == SS_OK ? res.reason : ss_strerror(e));
        /* The reference the shift is measured against: this frame when it
         * became the reference; none after a reset until the next one. A
         * frame that re-references is not checked (which reference its
         * shift is against is the driver's business); later ones are. */
        if (o->status == SS_STATUS_REFERENCE)
            ref = k;
        else if (res.history_reset)
            ref = -1;
        o->shift_known = ref >= 0 && !res.rereferenced &&
                         (o->status == SS_STATUS_OK || o->status == SS_STATUS_WARMUP ||
                          o->status == SS_STATUS_REFERENCE);
        o->sx = res.shift.sx;
        o->sy = res.shift.sy;
        /* F_t(x) = R(x + s): a field moved by d since the reference has s = -d */
        o->ex = ref >= 0 ? -(double)(truth[k].dx - truth[ref].dx) : NAN;
        o->ey = ref >= 0 ? -(double)(truth[k].dy - truth[ref].dy) : NAN;
        if (res.rereferenced)
            ref = k;
        o->n_pos = 0;
        o->mover_dist = INFINITY;
        for (int j = 0; o->status == SS_STATUS_OK && j < res.dets.count; j++) {
            const ss_detection_t *d = &res.dets.items[j];
            if (d->sign <= 0)
                continue;
            o->n_pos++;
            double dist = hypot(d->x - truth[k].mover_x, d->y - truth[k].mover_y);
            if (dist < o->mover_dist)
                o->mover_dist = dist;
        }
        char shift[40] = "-", expect[24] = "-", near[16] = "-";
        if (o->shift_known)
            snprintf(shift, sizeof shift, "(%+7.3f, %+7.3f)", o->sx, o->sy);
        if (isfinite(o->ex))
            snprintf(expect, sizeof expect, "(%+3.0f, %+3.0f)", o->ex + 0.0, o->ey + 0.0);
        if (o->status == SS_STATUS_OK && isfinite(o->mover_dist))
            snprintf(near, sizeof near, "%.2f px", o->mover_dist);
        else if (o->status == SS_STATUS_OK)
            snprintf(near, sizeof near, "none");
        fprintf(tab, "%5d  %-9s  %-18s  %-10s  %4d  (%4d, %4d)  %-7s  %s\n", k,
                ss_status_name(o->status), shift, expect, o->n_pos, truth[k].mover_x,
                truth[k].mover_y, near, o->reason);
    }
    fprintf(stderr, "%s: %.0f ms per frame (CPU backend)\n", mode, ms / n);

    /* the requirements, each failure named */
    char msg[2048] = "";
#define FAIL(...) addf(msg, sizeof msg, __VA_ARGS__)
    int first_ok = -1, first_bad = -1, n_ok = 0, n_bad = 0, n_late = 0, n_shift = 0;
    int n_mover = 0;
    for (int k = 0; k < n; k++) {
        if (out[k].status == SS_STATUS_REG_FAILED || out[k].status == SS_STATUS_ERROR) {
            n_bad++;
            if (first_bad < 0)
                first_bad = k;
        }
        if (out[k].status == SS_STATUS_OK) {
            n_ok++;
            if (first_ok < 0)
                first_ok = k;
            n_mover += out[k].mover_dist <= MOVER_TOL_PX;
        } else if (first_ok >= 0) {
            n_late++;
        }
        if (out[k].shift_known &&
            !(fabs(out[k].sx - out[k].ex) <= SHIFT_TOL_PX && fabs(out[k].sy - out[k].ey) <= SHIFT_TOL_PX))
            n_shift++;
    }
    if (n_bad)
        FAIL("; %d of %d frames failed registration or errored (first: frame %d, %s: %s)",
             n_bad, n, first_bad, ss_status_name(out[first_bad].status), out[first_bad].reason);
    if (first_ok < 0)
        FAIL("; no ok frame in %d (the reference and %d warm-up frames come first)", n,
             min_history);
    if (n_late)
        FAIL("; %d frames after the first ok one (frame %d) are not ok", n_late, first_ok);
    if (n_shift)
        FAIL("; %d registered frames have a shift more than %.2f px from the truth", n_shift,
             SHIFT_TOL_PX);
    if (n_ok > 0 && n_mover < MOVER_MIN_SHARE * n_ok)
        FAIL("; the mover was detected (within %.0f px) in %d of %d ok frames, fewer than %.0f %%",
             MOVER_TOL_PX, n_mover, n_ok, 100.0 * MOVER_MIN_SHARE);
#undef FAIL
    fclose(tab);
    if (msg[0])
        fputs(table, stderr);
    free(table);
    fprintf(stderr, "%s: %d ok frames (first: %d), mover detected in %d, %d regfail/error, "
            "%d shifts off\n", mode, n_ok, first_ok, n_mover, n_bad, n_shift);

    free(f.pixels);
    ss_result_free(&res);
    ss_pipeline_destroy(&p);
    ck_assert_msg(msg[0] == '\0', "INDI %s sequence: %s", mode, msg + 2);   /* past the first "; " */
}

START_TEST(test_indi_static)
{
    run_sequence(&SEQ_STATIC);
}
END_TEST

START_TEST(test_indi_jitter)
{
    run_sequence(&SEQ_JITTER);
}
END_TEST

START_TEST(test_indi_sparse)
{
    run_sequence(&SEQ_SPARSE);
}
END_TEST

/* ---- skysieved as an INDI client (source.type "indi") ------------------- */

#define DMN_FRAMES 25           /* the first server's frames */
#define DMN_FRAMES_B 3          /* the restarted server's */
#define DMN_WAIT_S 30.0

/* A whole file as a string (NULL when absent); the caller frees it. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t got = b ? fread(b, 1, (size_t)(n > 0 ? n : 0), f) : 0;
    if (b)
        b[got] = '\0';
    fclose(f);
    return b;
}

/* How often text occurs in the file at path. */
static int count_in(const char *path, const char *text)
{
    char *b = slurp(path);
    int k = 0;
    for (const char *p = b ? strstr(b, text) : NULL; p; p = strstr(p + 1, text))
        k++;
    free(b);
    return k;
}

/* Wait until text occurs at least k times in path: 1, or 0 at the timeout. */
static int wait_for(const char *path, const char *text, int k, double timeout)
{
    const double end = now_s() + timeout;
    while (count_in(path, text) < k)
        if (now_s() > end)
            return 0;
        else
            sleep_s(0.05);
    return 1;
}

/* The counter name= of the line starting with line_start in the log, -1 if none. */
static long long final_counter(const char *log, const char *line_start, const char *name)
{
    char *b = slurp(log);
    long long v = -1;
    const char *l = b ? strstr(b, line_start) : NULL;
    char key[96];
    snprintf(key, sizeof key, " %s=", name);
    const char *eol = l ? strchr(l, '\n') : NULL;
    const char *p = l ? strstr(l, key) : NULL;
    if (p && (!eol || p < eol))
        v = strtoll(p + strlen(key), NULL, 10);
    free(b);
    return v;
}

/* A TCP port free on the loopback now. */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Start skysieved (the built binary) with config cfg, its output to log. */
static pid_t start_daemon(const char *cfg, const char *log)
{
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    ck_assert_msg(bd != NULL, "SKYSIEVE_BINARY_DIR is not set (run through ctest)");
    char bin[600];
    snprintf(bin, sizeof bin, "%s/daemon/skysieved", bd);
    ck_assert_msg(access(bin, X_OK) == 0, "%s is not built", bin);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        unsetenv("NOTIFY_SOCKET");
        unsetenv("JOURNAL_STREAM");
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(bin, "skysieved", "--config", cfg, (char *)NULL);
        _exit(127);
    }
    return pid;
}

#define DRAIN_S 300           /* the daemon configs' shutdown.drain_timeout, s */

/* SIGTERM skysieved and wait for it (it drains its queues): its exit status,
 * or -1 when it is still running past the drain timeout of its config
 * (DRAIN_S) and 30 s more. A sanitizer build on a busy machine drains the
 * frames queued at SIGTERM for over a minute. */
static int stop_daemon(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    const double end = now_s() + DRAIN_S + 30.0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        if (now_s() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        sleep_s(0.05);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* One feed of an INDI daemon config (a JSON array element); extra: more
 * members of its source.indi object (", \"active\": true", or ""). */
static void indi_feed(char *buf, size_t n, const char *name, const char *host, int port,
                      const char *local, const char *jsonl, const char *extra)
{
    addf(buf, n, "%s{\"name\": \"%s\", \"source\": {\"type\": \"indi\", \"indi\": {\"host\": \"%s\","
         " \"port\": %d, \"local\": \"%s\", \"device\": \"CCD Simulator\", \"retry_max\": 0.5%s}},"
         " \"limits\": {\"max_width\": 1280, \"max_height\": 1024},"
         " \"queue\": {\"depth\": 32, \"policy\": \"block\"},"
         " \"pipeline\": {\"backend\": \"cpu\", \"threads\": 1},"
         " \"sinks\": {\"jsonl\": {\"path\": \"%s\"}}}", buf[0] ? ", " : "", name, host, port,
         local, extra, jsonl);
}

/* A daemon config of feeds, logging at level ("debug": a line per frame). */
static void write_indi_config(const char *path, const char *level, const char *feeds)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fprintf(f, "{\"log_level\": \"%s\", \"control\": {\"endpoint\": \"\"},"
            " \"publish\": {\"endpoint\": \"\"}, \"shutdown\": {\"drain_timeout\": %d},"
            " \"feeds\": [%s]}\n", level, DRAIN_S, feeds);
    fclose(f);
}

/* The first frame of seq in feed's JSON lines with a positive detection
 * within MOVER_TOL_PX of (x, y): 1 if there is one. */
static int mover_found(const char *jsonl, int seq, int x, int y)
{
    char *b = slurp(jsonl), key[32];
    int found = 0;
    snprintf(key, sizeof key, "\"seq\":%d,", seq);
    for (char *l = b; l && *l && !found; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        char *eol = strchr(l, '\n');
        if (eol)
            *eol = '\0';
        const char *px = strstr(l, ",\"x\":"), *py = strstr(l, ",\"y\":");
        if (strstr(l, key) && strstr(l, "\"sign\":1") && px && py) {
            double dx = strtod(px + 5, NULL) - x, dy = strtod(py + 5, NULL) - y;
            found = sqrt(dx * dx + dy * dy) <= MOVER_TOL_PX;
        }
        if (eol)
            *eol = '\n';
    }
    free(b);
    return found;
}

/* The checks of one feed of the INDI daemon test (the final log lines,
 * the JSON lines against truth). */
static void check_indi_feed(const char *log, const char *feed, const char *jsonl,
                            const truth_row_t *truth, int min_history, const char *how)
{
    char line[64], line_indi[80], conn[128];
    snprintf(line, sizeof line, "feed %s final:", feed);
    snprintf(line_indi, sizeof line_indi, "feed %s final (indi):", feed);
    const long long rec = final_counter(log, line, "received");
    const long long acc = final_counter(log, line, "accepted");
    const long long ok = final_counter(log, line, "ok");
    const long long bad = final_counter(log, line, "regfail") + final_counter(log, line, "error");
    const long long conns = final_counter(log, line_indi, "indi_connects");
    const long long lost = final_counter(log, line_indi, "indi_disconnects");
    const long long malformed = final_counter(log, line_indi, "indi_malformed");
    snprintf(conn, sizeof conn, "feed %s: connected to indiserver (%s)", feed, how);
    int first_ok = min_history + 2, movers = 0;      /* seq: reference 1, warm-up, then ok */
    for (int q = first_ok; q <= DMN_FRAMES; q++)
        movers += mover_found(jsonl, q, truth[q - 1].mover_x, truth[q - 1].mover_y);
    const int want_movers = (int)ceil(MOVER_MIN_SHARE * (DMN_FRAMES - first_ok + 1));
    fprintf(stderr, "feed %s: received %lld accepted %lld ok %lld regfail+error %lld; "
            "connects %lld disconnects %lld malformed %lld; mover in %d of frames %d..%d\n",
            feed, rec, acc, ok, bad, conns, lost, malformed, movers, first_ok, DMN_FRAMES);
    ck_assert_msg(count_in(log, conn) >= 2, "feed %s: not connected twice over the %s", feed, how);
    ck_assert_msg(rec == DMN_FRAMES + DMN_FRAMES_B && acc == rec,
                  "feed %s: %lld frames received, %lld accepted; %d sent", feed, rec, acc,
                  DMN_FRAMES + DMN_FRAMES_B);
    ck_assert_msg(bad == 0 && ok >= DMN_FRAMES + DMN_FRAMES_B - 1 - min_history,
                  "feed %s: %lld ok, %lld regfail or error", feed, ok, bad);
    ck_assert_msg(conns >= 2 && lost >= 1 && malformed == 0,
                  "feed %s: connects %lld disconnects %lld malformed %lld: the restart should "
                  "reconnect", feed, conns, lost, malformed);
    ck_assert_msg(movers >= want_movers, "feed %s: the mover found in %d frames, wanted %d",
                  feed, movers, want_movers);
}

/* A capture.py serving other clients: its pid and the files that drive it
 * (DIR.ready it writes once set up; DIR.go starts its exposures; DIR.stop,
 * after its frames, lets it stop the server). */
typedef struct served {
    pid_t pid;
    char ready[900], go[900], stop[900], log[900];
} served_t;

/* Start a capture of frames into dir that serves port and the local socket
 * unix, and wait until it is set up (its ready file). */
static void serve(served_t *sv, const char *dir, int frames, int port, const char *unix_name)
{
    char fr[16], ps[16];
    snprintf(fr, sizeof fr, "%d", frames);
    snprintf(ps, sizeof ps, "%d", port);
    snprintf(sv->ready, sizeof sv->ready, "%s.ready", dir);
    snprintf(sv->go, sizeof sv->go, "%s.go", dir);
    snprintf(sv->stop, sizeof sv->stop, "%s.stop", dir);
    snprintf(sv->log, sizeof sv->log, "%s.capture.log", dir);
    const char *args[] = { "--out", dir, "--mode", "static", "--frames", fr, "--port", ps,
                           "--unix", unix_name, "--ready-file", sv->ready, "--go-file", sv->go,
                           "--stop-file", sv->stop, "--timeout", "90", NULL };
    sv->pid = spawn_capture(args, sv->log);
    const double end = now_s() + DMN_WAIT_S;
    while (access(sv->ready, F_OK) != 0) {
        int st;
        const int gone = waitpid(sv->pid, &st, WNOHANG) != 0;
        if (gone || now_s() > end) {
            show_capture_log(sv->log);
            ck_abort_msg("capture.py for %s %s", dir, gone ? "exited early" : "not ready in time");
        }
        sleep_s(0.05);
    }
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    fclose(f);
}

#define DMN_STALL_AT 20         /* the first server's frame before which skysieved stops */
#define DMN_TAKE_S 90.0         /* the wait for both feeds to take a server's frames */

/* Both feeds' debug lines of the frames they took: 1 once each has taken
 * n (since the start), 0 after DMN_TAKE_S. */
static int feeds_took(const char *log, int n)
{
    return wait_for(log, "feed tcp: CCD Simulator.CCD1 (.fits) ", n, DMN_TAKE_S) &&
           wait_for(log, "feed local: CCD Simulator.CCD1 (.fits) ", n, DMN_TAKE_S);
}

/* Stop skysieved (SIGSTOP) from capture frame DMN_STALL_AT until the
 * capture into dir has taken all its frames (truth.txt) and 2 s more: the
 * last frames wait in indiserver's queues for the stalled client. Nothing
 * here may end the test while the daemon is stopped. */
static void stall_daemon(pid_t dmn, const char *dir)
{
    char frame[900], truth[900];
    snprintf(frame, sizeof frame, "%s/frame_%03d.fits", dir, DMN_STALL_AT);
    snprintf(truth, sizeof truth, "%s/truth.txt", dir);
    const double end = now_s() + DMN_TAKE_S;
    while (access(frame, F_OK) != 0 && now_s() < end)
        sleep_s(0.01);
    kill(dmn, SIGSTOP);
    while (access(truth, F_OK) != 0 && now_s() < end)
        sleep_s(0.05);
    sleep_s(2.0);
    kill(dmn, SIGCONT);
}

/* skysieved listens passively, over TCP (feed "tcp") and over the local
 * socket (feed "local"), while capture.py, another client, takes the
 * frames; skysieved stalls while the last ones go out (stall_daemon), and
 * the server stays up until both feeds have taken them (capture.py's
 * --stop-file). Then that server stops and a new one starts on the same
 * port and socket: both feeds reconnect and take its frames too. */
START_TEST(test_indi_daemon)
{
    char dir[700], a[800], b[800], cfg[800], log[800], jt[800], jl[800], feeds[2048] = "";
    char unix_name[96];
    snprintf(dir, sizeof dir, "%s/daemon", tmp_root[0] ? tmp_root : "/tmp");
    ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    join_path(a, sizeof a, dir, "a");
    join_path(b, sizeof b, dir, "b");
    join_path(cfg, sizeof cfg, dir, "skysieved.json");
    join_path(log, sizeof log, dir, "skysieved.log");
    join_path(jt, sizeof jt, dir, "tcp.jsonl");
    join_path(jl, sizeof jl, dir, "local.jsonl");
    const int port = free_port();
    snprintf(unix_name, sizeof unix_name, "/tmp/skysieve-indi-test-%d", (int)getpid());
    const double t0 = now_s();

    served_t sv;
    serve(&sv, a, DMN_FRAMES, port, unix_name);
    indi_feed(feeds, sizeof feeds, "tcp", "127.0.0.1", port, "", jt, "");
    indi_feed(feeds, sizeof feeds, "local", "localhost", port, unix_name, jl, "");
    write_indi_config(cfg, "debug", feeds);
    pid_t dmn = start_daemon(cfg, log);
    ck_assert_msg(wait_for(log, "connected to indiserver", 2, DMN_WAIT_S),
                  "skysieved did not connect both feeds (see %s)", log);
    touch(sv.go);               /* the other client takes the frames */
    stall_daemon(dmn, a);
    const int took_a = feeds_took(log, DMN_FRAMES);
    touch(sv.stop);
    ck_assert_int_eq(finish_capture(sv.pid, sv.log), 0);

    /* the server is gone: a new one on the same port and socket */
    serve(&sv, b, DMN_FRAMES_B, port, unix_name);
    ck_assert_msg(wait_for(log, "connected to indiserver", 4, DMN_WAIT_S),
                  "skysieved did not reconnect both feeds to the restarted server (see %s)", log);
    touch(sv.go);
    const int took_b = feeds_took(log, DMN_FRAMES + DMN_FRAMES_B);
    touch(sv.stop);
    ck_assert_int_eq(finish_capture(sv.pid, sv.log), 0);
    ck_assert_int_eq(stop_daemon(dmn), 0);
    fprintf(stderr, "indi daemon test: %.1f s; both feeds took the first server's frames: %s, "
            "the second's: %s\n", now_s() - t0, took_a ? "yes" : "no", took_b ? "yes" : "no");

    truth_row_t truth[MAX_FRAMES];
    ck_assert_int_eq(read_truth(a, truth, MAX_FRAMES), DMN_FRAMES);
    ss_pipeline_cfg_t pc;
    ss_pipeline_cfg_defaults(&pc);
    const int min_history = ss_cfg_min_history(&pc);
    check_indi_feed(log, "tcp", jt, truth, min_history, "TCP");
    check_indi_feed(log, "local", jl, truth, min_history, "local socket");
    rmtree(dir);
}
END_TEST

/* ---- a fake indiserver that fails: mid-BLOB, then malformed ------------- */

#define FAKE_W 128              /* the fake server's frames: 128 x 128 u16 */
#define FAKE_H 128
#define FAKE_GOOD 2             /* whole BLOBs its third connection sends */
#define FAKE_WAIT_S 15.0

/* One 80-character FITS card "KEY = value" at *at (advanced). */
static void fits_card(char **at, const char *key, const char *value)
{
    char card[81];
    snprintf(card, sizeof card, "%-8s= %20s", key, value);
    memset(card + strlen(card), ' ', 80 - strlen(card));
    memcpy(*at, card, 80);
    *at += 80;
}

/* A small valid FITS frame (FAKE_W x FAKE_H, BITPIX 16 with BZERO, a few
 * stars on a noisy background, as INDI cameras send them) in a buffer of
 * *n bytes; the caller frees it. */
static uint8_t *fake_fits(size_t *n)
{
    const size_t data = (size_t)FAKE_W * FAKE_H * 2;
    *n = 2880 + (data + 2879) / 2880 * 2880;
    uint8_t *b = calloc(1, *n);
    ck_assert_ptr_nonnull(b);
    char *at = (char *)b;
    memset(b, ' ', 2880);
    fits_card(&at, "SIMPLE", "T");
    fits_card(&at, "BITPIX", "16");
    fits_card(&at, "NAXIS", "2");
    fits_card(&at, "NAXIS1", "128");
    fits_card(&at, "NAXIS2", "128");
    fits_card(&at, "BZERO", "32768");
    fits_card(&at, "EXPTIME", "0.5");
    fits_card(&at, "DATE-OBS", "'2024-03-01T22:00:00.000'");
    fits_card(&at, "ROWORDER", "'TOP-DOWN'");
    memcpy(at, "END", 3);
    uint8_t *px = b + 2880;
    for (int y = 0; y < FAKE_H; y++)
        for (int x = 0; x < FAKE_W; x++) {
            int v = 100 + (int)((unsigned)(x * 7919 + y * 104729) % 10u);
            for (int k = 0; k < 5; k++) {
                const int sx = 20 + 21 * k, sy = 30 + 17 * k, d2 = (x - sx) * (x - sx) +
                                                                   (y - sy) * (y - sy);
                v += (int)(3000.0 * exp(-d2 / 4.5));
            }
            const int s = v - 32768;
            px[2 * ((size_t)y * FAKE_W + x)] = (uint8_t)((unsigned)s >> 8 & 0xff);
            px[2 * ((size_t)y * FAKE_W + x) + 1] = (uint8_t)((unsigned)s & 0xff);
        }
    return b;
}

/* A setBLOBVector message of the camera's CCD1 with the FITS of n bytes,
 * base64 in lines of 72 as indiserver sends it; the caller frees it. */
static char *blob_message(const uint8_t *fits, size_t n)
{
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t cap = 4 * n / 3 + n / 54 + 512;
    char *m = malloc(cap);
    ck_assert_ptr_nonnull(m);
    size_t o = (size_t)snprintf(m, cap, "<setBLOBVector device=\"CCD Simulator\" name=\"CCD1\" "
                                "state=\"Ok\" timeout=\"60\" timestamp=\"2024-03-01T22:00:01\">\n"
                                "    <oneBLOB name=\"CCD1\" size=\"%zu\" format=\".fits\">\n", n);
    for (size_t i = 0; i < n; i += 3) {
        const unsigned v = (unsigned)fits[i] << 16 | (i + 1 < n ? (unsigned)fits[i + 1] << 8 : 0) |
                           (i + 2 < n ? fits[i + 2] : 0);
        m[o++] = A[v >> 18 & 63];
        m[o++] = A[v >> 12 & 63];
        m[o++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        m[o++] = i + 2 < n ? A[v & 63] : '=';
        if (i % 54 == 51)
            m[o++] = '\n';
    }
    snprintf(m + o, cap - o, "\n    </oneBLOB>\n</setBLOBVector>\n");
    return m;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        const ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Wait up to timeout s for fd to be readable: 1, or 0. */
static int readable(int fd, double timeout)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    return poll(&p, 1, (int)(timeout * 1e3)) == 1;
}

/* The next client of ls, once it has sent its hello (getProperties and
 * enableBLOB): its fd, or -1 after FAKE_WAIT_S. */
static int accept_client(int ls)
{
    if (!readable(ls, FAKE_WAIT_S))
        return -1;
    const int fd = accept(ls, NULL, NULL);
    char hello[1024];
    size_t got = 0;
    while (fd >= 0 && got + 1 < sizeof hello && readable(fd, FAKE_WAIT_S)) {
        const ssize_t k = recv(fd, hello + got, sizeof hello - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        hello[got] = '\0';
        if (strstr(hello, "getProperties") && strstr(hello, "</enableBLOB>"))
            return fd;
    }
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Read and drop what the client sends until it hangs up: 0, or -1 when
 * it does not within timeout s. */
static int until_hang_up(int fd, double timeout)
{
    char buf[4096];
    const double end = now_s() + timeout;
    while (now_s() < end)
        if (readable(fd, 0.1) && recv(fd, buf, sizeof buf, 0) <= 0)
            return 0;
    return -1;
}

/* The fake server's script on the listening socket ls (in a child
 * process; it exits with the result):
 *   1. a client's hello, then half of a BLOB, and the connection closed;
 *   2. the next client's hello, then malformed XML: it must hang up;
 *   3. the next client's hello, then FAKE_GOOD whole BLOBs, and the
 *      connection held until the client hangs up (skysieved stops).
 * Exit 0 when every step went so, else the step that did not. */
static int fake_server(int ls)
{
    size_t n;
    uint8_t *fits = fake_fits(&n);
    char *m = blob_message(fits, n);
    const char *garbage = "<defNumberVector device=\"CCD Simulator\" name=\"CCD_TEMPERATURE\">"
                          "<defNumber name=\"T\">-10</defNumber></defNumberVector\n<<!-- \x01";
    int fd = accept_client(ls);
    if (fd < 0 || send_all(fd, m, strlen(m) / 2) != 0)
        return 1;
    shutdown(fd, SHUT_WR);               /* the server dies mid-BLOB */
    int bad = until_hang_up(fd, FAKE_WAIT_S) != 0;
    close(fd);
    if (bad)
        return 1;
    fd = accept_client(ls);
    if (fd < 0 || send_all(fd, garbage, strlen(garbage)) != 0 ||
        until_hang_up(fd, FAKE_WAIT_S) != 0)
        return 2;
    close(fd);
    fd = accept_client(ls);
    for (int i = 0; fd >= 0 && i < FAKE_GOOD; i++)
        if (send_all(fd, m, strlen(m)) != 0)
            return 3;
    if (fd < 0 || until_hang_up(fd, 2 * DMN_WAIT_S) != 0)
        return 3;
    close(fd);
    free(m);
    free(fits);
    return 0;
}

/* A listening TCP socket on a free loopback port (*port). */
static int listen_loopback(int *port)
{
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    ck_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 4) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &al) == 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* skysieved against a server that dies mid-BLOB, then sends malformed
 * XML, then good frames: the half BLOB is counted lost (received and
 * rejected, data_size), never read as a frame; the malformed stream is
 * counted and the connection made again; the good frames are processed;
 * the daemon serves on and exits 0. No indi-bin needed. */
START_TEST(test_indi_fake_server)
{
    char dir[700], cfg[800], log[800], jt[800], feeds[2048] = "";
    snprintf(dir, sizeof dir, "%s/fake", tmp_root[0] ? tmp_root : "/tmp");
    ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    join_path(cfg, sizeof cfg, dir, "skysieved.json");
    join_path(log, sizeof log, dir, "skysieved.log");
    join_path(jt, sizeof jt, dir, "fake.jsonl");
    int port;
    const int ls = listen_loopback(&port);
    const double t0 = now_s();
    fflush(NULL);
    const pid_t srv = fork();
    ck_assert_int_ge(srv, 0);
    if (srv == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        _exit(fake_server(ls));
    }
    close(ls);
    indi_feed(feeds, sizeof feeds, "fake", "127.0.0.1", port, "", jt, "");
    write_indi_config(cfg, "debug", feeds);
    const pid_t dmn = start_daemon(cfg, log);
    const int frames = wait_for(log, "CCD Simulator.CCD1 (.fits) ", FAKE_GOOD, 2 * FAKE_WAIT_S);
    const int dmn_rc = stop_daemon(dmn);
    int st = 0;
    waitpid(srv, &st, 0);
    const int srv_rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    fprintf(stderr, "indi fake server test: %.1f s\n", now_s() - t0);

    const char *line = "feed fake final:", *line_indi = "feed fake final (indi):";
    const long long rec = final_counter(log, line, "received");
    const long long acc = final_counter(log, line, "accepted");
    const long long rej = final_counter(log, line, "rejected");
    const long long proc = final_counter(log, line, "processed");
    const long long conns = final_counter(log, line_indi, "indi_connects");
    const long long lost = final_counter(log, line_indi, "indi_disconnects");
    const long long malformed = final_counter(log, line_indi, "indi_malformed");
    const int cut = count_in(log, "frame rejected (data_size)");
    fprintf(stderr, "feed fake: received %lld accepted %lld rejected %lld (data_size %d) "
            "processed %lld; connects %lld disconnects %lld malformed %lld; server step %d, "
            "daemon exit %d\n", rec, acc, rej, cut, proc, conns, lost, malformed, srv_rc, dmn_rc);
    ck_assert_msg(frames, "the %d good frames did not arrive in %.0f s (see %s)", FAKE_GOOD,
                  2 * FAKE_WAIT_S, log);
    ck_assert_msg(srv_rc == 0, "the fake server's step %d failed: skysieved did not reconnect, "
                  "or did not hang up on the malformed stream (see %s)", srv_rc, log);
    ck_assert_msg(dmn_rc == 0, "skysieved exited %d (see %s)", dmn_rc, log);
    ck_assert_msg(conns == 3 && lost == 2 && malformed == 1,
                  "connects %lld disconnects %lld malformed %lld: wanted 3, 2 (the death "
                  "mid-BLOB, the malformed stream), 1", conns, lost, malformed);
    ck_assert_msg(rec == FAKE_GOOD + 1 && acc == FAKE_GOOD && rej == 1 && cut == 1,
                  "received %lld accepted %lld rejected %lld (data_size %d): wanted the half "
                  "BLOB received and rejected as data_size, the %d good ones accepted", rec, acc,
                  rej, cut, FAKE_GOOD);
    ck_assert_msg(proc == FAKE_GOOD, "processed %lld of %d frames", proc, FAKE_GOOD);
    rmtree(dir);
}
END_TEST

/* ---- active mode: skysieved takes the exposures -------------------------- */

#define ACTIVE_FRAMES 4

/* skysieved in active mode (source.indi.active, exposure 0.2 s) is the only
 * client taking exposures: capture.py sets the simulator up (--frames 0)
 * and takes none. The frames must come, each accepted and processed. */
START_TEST(test_indi_active)
{
    char dir[700], a[800], cfg[800], log[800], jt[800], feeds[2048] = "";
    char unix_name[96];
    snprintf(dir, sizeof dir, "%s/active", tmp_root[0] ? tmp_root : "/tmp");
    ck_assert_msg(mkdir(dir, 0755) == 0 || errno == EEXIST, "mkdir %s", dir);
    join_path(a, sizeof a, dir, "a");
    join_path(cfg, sizeof cfg, dir, "skysieved.json");
    join_path(log, sizeof log, dir, "skysieved.log");
    join_path(jt, sizeof jt, dir, "active.jsonl");
    const int port = free_port();
    snprintf(unix_name, sizeof unix_name, "/tmp/skysieve-indi-active-%d", (int)getpid());
    const double t0 = now_s();
    served_t sv;
    serve(&sv, a, 0, port, unix_name);
    indi_feed(feeds, sizeof feeds, "active", "127.0.0.1", port, "", jt,
              ", \"active\": true, \"exposure\": 0.2");
    write_indi_config(cfg, "debug", feeds);
    pid_t dmn = start_daemon(cfg, log);
    const int got = wait_for(log, "CCD Simulator.CCD1 (.fits) ", ACTIVE_FRAMES, DMN_WAIT_S);
    const int dmn_rc = stop_daemon(dmn);
    touch(sv.go);
    const int cap_rc = finish_capture(sv.pid, sv.log);
    fprintf(stderr, "indi active test: %.1f s\n", now_s() - t0);
    const char *line = "feed active final:";
    const long long rec = final_counter(log, line, "received");
    const long long acc = final_counter(log, line, "accepted");
    const long long proc = final_counter(log, line, "processed");
    const long long conns = final_counter(log, "feed active final (indi):", "indi_connects");
    fprintf(stderr, "feed active: received %lld accepted %lld processed %lld connects %lld\n", rec,
            acc, proc, conns);
    ck_assert_msg(got, "skysieved in active mode got fewer than %d frames in %.0f s (see %s)",
                  ACTIVE_FRAMES, DMN_WAIT_S, log);
    ck_assert_int_eq(dmn_rc, 0);
    ck_assert_int_eq(cap_rc, 0);
    ck_assert_msg(rec >= ACTIVE_FRAMES && acc == rec && proc == acc && conns == 1,
                  "received %lld accepted %lld processed %lld connects %lld", rec, acc, proc,
                  conns);
    rmtree(dir);
}
END_TEST

int main(void)
{
    char missing[256];
    const char *replay = getenv("SKYSIEVE_INDI_REPLAY");
    missing_software(missing, sizeof missing);
    if (missing[0] && !(replay && *replay)) {
        const char *opt = getenv("SKYSIEVE_INDI_OPTIONAL");
        int skip = opt && strcmp(opt, "1") == 0 && !in_ci();
        fprintf(stderr, "check_indi: missing:%s -- install the Debian package indi-bin "
                "(tools/install-deps.sh does)%s\n", missing,
                skip ? "; skipping (SKYSIEVE_INDI_OPTIONAL=1)" : "");
        if (skip)
            return 77;
    }
    const char *keep = getenv("SKYSIEVE_INDI_FRAMES");
    if (!(replay && *replay) && !(keep && *keep)) {
        const char *tmp = getenv("TMPDIR");
        snprintf(tmp_root, sizeof tmp_root, "%s/skysieve-indi-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(tmp_root)) {
            fprintf(stderr, "check_indi: mkdtemp %s: %s\n", tmp_root, strerror(errno));
            return EXIT_FAILURE;
        }
    }
    Suite *s = suite_create("indi");
    TCase *tc = tcase_create("indi");
    tcase_set_timeout(tc, CAPTURE_TIMEOUT_S + 3 * CAPTURE_GRACE_S + 60);
    tcase_add_test(tc, test_indi_static);
    tcase_add_test(tc, test_indi_jitter);
    tcase_add_test(tc, test_indi_sparse);
    suite_add_tcase(s, tc);
    TCase *td = tcase_create("daemon");
    tcase_set_timeout(td, 2 * CAPTURE_TIMEOUT_S + 2 * DMN_TAKE_S);
    tcase_add_test(td, test_indi_daemon);
    suite_add_tcase(s, td);
    TCase *tf = tcase_create("fake");
    tcase_set_timeout(tf, 4 * FAKE_WAIT_S + 60);
    tcase_add_test(tf, test_indi_fake_server);
    suite_add_tcase(s, tf);
    TCase *ta = tcase_create("active");
    tcase_set_timeout(ta, CAPTURE_TIMEOUT_S);
    tcase_add_test(ta, test_indi_active);
    suite_add_tcase(s, ta);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (tmp_root[0] && rmtree(tmp_root) != 0)     /* also what a failed test left */
        fprintf(stderr, "check_indi: cannot remove %s: %s\n", tmp_root, strerror(errno));
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
