/*
 * check_daemon.c — skysieved end to end: the real binary
 * ($SKYSIEVE_BINARY_DIR/daemon/skysieved) started as a child process, on
 * ipc:// endpoints in a fresh temporary directory, driven over its real
 * sockets, signals and files:
 *   - ZeroMQ: a synthetic sequence with movers in, a detections message
 *     for every frame and a residual for every frame with one out, the
 *     movers found at their true positions;
 *   - FITS directory: files renamed into place while it runs, a slowly
 *     written one and a corrupt one: each good file processed once, in order;
 *   - sd_notify: READY=1 (after the sockets are bound), STATUS=,
 *     WATCHDOG=1, RELOADING=1 + MONOTONIC_USEC then READY=1 on SIGHUP,
 *     STOPPING=1 on SIGTERM, captured on a test NOTIFY_SOCKET;
 *   - SIGHUP with a valid config (a reloadable key changes), an invalid
 *     one and one that changes a fixed key (both rejected, old config kept);
 *   - SIGTERM drains: every received frame is accounted for, and every
 *     processed frame's messages reach the subscriber;
 *   - every control command, and bad requests;
 *   - hostile input: each malformed message counted under its reason,
 *     the daemon keeps serving.
 * Frames are 256x256 and sequences short: the suite is meant to run in
 * seconds, under ASan too.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fitsio.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>
#include <cJSON.h>

#include "config/config.h"
#include "pipeline/frame_fits.h"
#include "proto/proto.h"
#include "proto/curve.h"
#include "proto/proto_zmq.h"
#include "tools/synth.h"
#include "ss_test.h"
#include "pipeline/half_core.h"
#include "adzmq_sender.h"
#include "solve_scene.h"

#define W 256
#define H 256
#define START_TIMEOUT_S 30.0
#define STOP_TIMEOUT_S 60.0

/* ======================================================================
 * helpers: the daemon process
 * ==================================================================== */

typedef struct dmn {
    pid_t pid;
    const char *test;               /* the test's name, for kept logs */
    char dir[64];
    char cfg[128], log[128];
    char ctl[160], pub[160], in[160];
    int notify_fd;                  /* the test's NOTIFY_SOCKET, or -1 */
    const char *curve_key, *server_key; /* CURVE key files of the control client, or NULL */
    char keys_extra[384];           /* more daemon-level members (", \"k\": v"), or "" */
    char pub_extra[128];            /* more "publish" members, or "" */
    const char *queue_policy;       /* the synthetic feed's queue.policy; NULL: drop_oldest */
} dmn_t;

static void *zctx;

/* A fresh temp dir and endpoints for one daemon; test names the logs kept
 * in $SKYSIEVE_TEST_LOGDIR (when set: for debugging on other machines). */
#define dmn_init(d) dmn_init_named((d), __func__)
static void dmn_init_named(dmn_t *d, const char *test)
{
    memset(d, 0, sizeof *d);
    d->test = test;
    d->notify_fd = -1;
    snprintf(d->dir, sizeof d->dir, "/tmp/ssd-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d->dir));
    snprintf(d->cfg, sizeof d->cfg, "%s/skysieved.json", d->dir);
    snprintf(d->log, sizeof d->log, "%s/log", d->dir);
    snprintf(d->ctl, sizeof d->ctl, "ipc://%s/ctl", d->dir);
    snprintf(d->pub, sizeof d->pub, "ipc://%s/pub", d->dir);
    snprintf(d->in, sizeof d->in, "ipc://%s/in", d->dir);
    zctx = zmq_ctx_new();
    ck_assert_ptr_nonnull(zctx);
}

static void write_text(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void write_text(const char *path, const char *fmt, ...)
{
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    ck_assert_ptr_nonnull(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(rename(tmp, path), 0);
}

/* The whole file, NUL-terminated (its length in *len when len is not
 * NULL); NULL when it cannot be opened. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = '\0';
    fclose(f);
    if (len)
        *len = got;
    return buf;
}

static char *read_all(const char *path)
{
    return read_file(path, NULL);
}

/* Files in dir, hidden ones left out. */
static int count_files(const char *dir)
{
    int n = 0;
    DIR *dp = opendir(dir);
    ck_assert_ptr_nonnull(dp);
    for (struct dirent *e; (e = readdir(dp));)
        n += e->d_name[0] != '.';
    closedir(dp);
    return n;
}

static int log_contains(const dmn_t *d, const char *text)
{
    char *s = read_all(d->log);
    int found = s && strstr(s, text) != NULL;
    free(s);
    return found;
}

/* The value of the last "name=N" in the daemon's log (its final counter
 * line); -1 if absent. */
static long long log_counter(const dmn_t *d, const char *name)
{
    char *s = read_all(d->log);
    long long v = -1;
    char key[64];
    snprintf(key, sizeof key, "%s=", name);
    for (const char *p = s ? strstr(s, key) : NULL; p; p = strstr(p + 1, key))
        v = strtoll(p + strlen(key), NULL, 10);
    free(s);
    return v;
}

/* Start skysieved --config d->cfg; env: NULL-terminated "NAME=value" list. */
static void dmn_start(dmn_t *d, const char *const *env)
{
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    ck_assert_msg(bd != NULL, "SKYSIEVE_BINARY_DIR is not set (run through ctest)");
    char bin[512];
    snprintf(bin, sizeof bin, "%s/daemon/skysieved", bd);
    ck_assert_msg(access(bin, X_OK) == 0, "%s is not built", bin);
    d->pid = fork();
    ck_assert_int_ge(d->pid, 0);
    if (d->pid == 0) {
        unsetenv("NOTIFY_SOCKET");
        unsetenv("WATCHDOG_USEC");
        unsetenv("WATCHDOG_PID");
        unsetenv("JOURNAL_STREAM");
        for (int i = 0; env && env[i]; i++)
            putenv((char *)env[i]);
        int fd = open(d->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execl(bin, "skysieved", "--config", d->cfg, (char *)NULL);
        _exit(127);
    }
}

/* Whether the child is still running (reaps it when not: *status). */
static int dmn_alive(dmn_t *d, int *status)
{
    if (d->pid <= 0)
        return 0;
    int st;
    pid_t r = waitpid(d->pid, &st, WNOHANG);
    if (r == d->pid) {
        d->pid = 0;
        if (status)
            *status = st;
        return 0;
    }
    return 1;
}

/* One control request (JSON text) and its decoded response; 0 or -1 on
 * timeout / daemon gone. */
static int ctl_request(const dmn_t *d, const char *json, ss_ctl_response_t *resp, double timeout)
{
    void *s = zmq_socket(zctx, ZMQ_REQ);
    int zero = 0, tmo = (int)(timeout * 1000);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &tmo, sizeof tmo);
    int rc = -1;
    char cerr[600];
    ck_assert_msg(ss_curve_client_files(s, d->curve_key, d->server_key, cerr, sizeof cerr) == 0,
                  "%s", cerr);
    if (zmq_connect(s, d->ctl) == 0 && zmq_send(s, json, strlen(json), 0) >= 0) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) >= 0) {
            ss_proto_error_t err;
            if (ss_proto_decode_response(zmq_msg_data(&m), zmq_msg_size(&m), resp, &err) == SS_OK)
                rc = 0;
            else
                ck_abort_msg("control response does not decode: %s", err.text);
        }
        zmq_msg_close(&m);
    }
    zmq_close(s);
    return rc;
}

static int ctl_cmd(const dmn_t *d, ss_ctl_cmd_t cmd, const char *feed, ss_ctl_response_t *resp)
{
    ss_ctl_request_t r = { .cmd = cmd };
    if (feed)
        ss_strlcpy(r.feed, feed, sizeof r.feed);
    char buf[256];
    ck_assert_int_gt(ss_proto_encode_request(&r, buf, sizeof buf), 0);
    return ctl_request(d, buf, resp, 5.0);
}

/* Counters of one feed, through the control socket ("stats"). */
static ss_proto_status_t *stats_of(const dmn_t *d)
{
    ss_ctl_response_t r;
    if (ctl_cmd(d, SS_CTL_STATS, NULL, &r) != 0)
        return NULL;
    ck_assert_msg(r.ok, "stats failed: %s", r.error);
    ss_proto_status_t *st = malloc(sizeof *st);
    ck_assert_ptr_nonnull(st);
    ss_proto_error_t err;
    ck_assert_msg(ss_proto_decode_status_body(r.body, strlen(r.body), st, &err) == SS_OK, "%s",
                  err.text);
    ss_ctl_response_free(&r);
    return st;
}

/* The stats once feed 0 has processed at least n frames, or after wait_s
 * (polled every 50 ms); the caller frees them. */
static ss_proto_status_t *stats_when_processed(const dmn_t *d, uint64_t n, double wait_s)
{
    ss_proto_status_t *st = NULL;
    const double t0 = now_s();
    do {
        free(st);
        sleep_s(0.05);
        st = stats_of(d);
    } while (st->feeds[0].processed < n && now_s() - t0 < wait_s);
    return st;
}

/* Wait until the control socket answers "status" (the daemon is up). */
static void dmn_wait_ready(dmn_t *d)
{
    double t0 = now_s();
    while (now_s() - t0 < START_TIMEOUT_S) {
        int st;
        if (!dmn_alive(d, &st)) {
            char *log = read_all(d->log);
            ck_abort_msg("skysieved exited during start (status %d):\n%s", st, log ? log : "");
        }
        ss_ctl_response_t r;
        if (ctl_cmd(d, SS_CTL_STATUS, NULL, &r) == 0) {
            ck_assert(r.ok);
            ss_ctl_response_free(&r);
            return;
        }
        sleep_s(0.05);
    }
    ck_abort_msg("skysieved did not answer on %s", d->ctl);
}

/* Wait up to timeout s for a daemon that stops by itself; its wait status. */
static int dmn_wait_exit(dmn_t *d, double timeout)
{
    int st = 0;
    const double t0 = now_s();
    while (dmn_alive(d, &st) && now_s() - t0 < timeout)
        sleep_s(0.05);
    ck_assert_msg(d->pid == 0, "skysieved still runs after %.0f s", timeout);
    return st;
}

/* A daemon that did not stop: with $SKYSIEVE_TEST_LOGDIR set, its log and
 * the stacks of its threads (gdb, or cuda-gdb on a GPU host without gdb)
 * are kept there before it is killed. */
static void dmn_keep_hung(const dmn_t *d)
{
    const char *keep = getenv("SKYSIEVE_TEST_LOGDIR");
    if (!keep || !keep[0])
        return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "cp '%s' '%s/%s.hung.log'; dbg=$(command -v gdb || command -v cuda-gdb);"
             " [ -n \"$dbg\" ] && timeout 60 \"$dbg\" -batch -p %d -ex 'thread apply all bt'"
             " > '%s/%s.stacks' 2>&1",
             d->log, keep, d->test, (int)d->pid, keep, d->test);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot keep all of %s's hung daemon\n", d->test);
}

/* Discard the notifications queued on the test's NOTIFY_SOCKET: systemd
 * reads every one, and a full socket blocks the daemon's sd_notify (its
 * WATCHDOG=1 pings go on while it drains). */
static void dmn_discard_notes(const dmn_t *d)
{
    char buf[512];
    if (d->notify_fd >= 0)
        while (recv(d->notify_fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
            ;
}

/* Send sig and wait for the exit, reading the notifications meanwhile;
 * returns the exit status (-1 on a kill by a signal, which fails the
 * test's later assertion). */
static int dmn_stop(dmn_t *d, int sig)
{
    if (d->pid <= 0)
        return -1;
    kill(d->pid, sig);
    double t0 = now_s();
    int st = 0;
    while (dmn_alive(d, &st)) {
        if (now_s() - t0 > STOP_TIMEOUT_S) {
            dmn_keep_hung(d);
            kill(d->pid, SIGKILL);
            waitpid(d->pid, &st, 0);
            d->pid = 0;
            ck_abort_msg("skysieved did not stop within %.0f s", STOP_TIMEOUT_S);
        }
        dmn_discard_notes(d);
        sleep_s(0.02);
    }
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return -1;
}

static void dmn_cleanup(dmn_t *d)
{
    if (d->pid > 0) {
        kill(d->pid, SIGKILL);
        waitpid(d->pid, NULL, 0);
        d->pid = 0;
    }
    char cmd[512];
    const char *keep = getenv("SKYSIEVE_TEST_LOGDIR");
    if (keep && keep[0]) {
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s.log'", d->log, keep, d->test);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot keep %s\n", d->log);
    }
    if (rmtree(d->dir) != 0)
        fprintf(stderr, "cannot remove %s: %s\n", d->dir, strerror(errno));
    if (zctx) {
        zmq_ctx_term(zctx);
        zctx = NULL;
    }
}

/* The counters the daemon logs for a feed when it exits. */
typedef struct final {
    unsigned long long received, accepted, rejected, dropped, processed, ok, published;
} final_t;

static int final_counters(const dmn_t *d, const char *feed, final_t *f)
{
    char *log = read_all(d->log);
    ck_assert_ptr_nonnull(log);
    char key[96];
    snprintf(key, sizeof key, "feed %s final: ", feed);
    const char *p = strstr(log, key);
    int n = 0;
    if (p) {
        unsigned long long reference, warmup, regfail, error, detections;
        n = sscanf(p + strlen(key),
                   "received=%llu accepted=%llu rejected=%llu dropped=%llu processed=%llu ok=%llu "
                   "reference=%llu warmup=%llu regfail=%llu error=%llu detections=%llu "
                   "published=%llu",
                   &f->received, &f->accepted, &f->rejected, &f->dropped, &f->processed, &f->ok,
                   &reference, &warmup, &regfail, &error, &detections, &f->published);
    }
    free(log);
    return n == 12 ? 0 : -1;
}

/* ======================================================================
 * helpers: configs, frames, subscribers
 * ==================================================================== */

static const char *log_level = "info";     /* a test may want "debug" */

/* Common daemon keys: endpoints in the temp dir, fast status, and the
 * test's own (d->keys_extra, d->pub_extra). */
static void daemon_keys(const dmn_t *d, char *buf, size_t n)
{
    const int len = snprintf(buf, n,
             "\"log_level\": \"%s\", \"control\": {\"endpoint\": \"%s\"},"
             " \"publish\": {\"endpoint\": \"%s\"%s}, \"status_interval\": 0.2,"
             " \"shutdown\": {\"drain_timeout\": 30}%s",
             log_level, d->ctl, d->pub, d->pub_extra, d->keys_extra);
    ck_assert(len > 0 && (size_t)len < n);
}

/* The backend the daemon runs: cpu, or $SKYSIEVE_TEST_BACKEND (cuda on a
 * GPU machine: the same tests then drive the CUDA backend). */
static const char *test_backend(void)
{
    const char *b = getenv("SKYSIEVE_TEST_BACKEND");
    return b && b[0] ? b : "cpu";
}

/* Pipeline keys for short sequences: one CPU thread, a short history;
 * extra: more pipeline members (", \"k\": v"), or NULL. */
static const char *pipeline_keys_with(double thresh, const char *extra)
{
    static char buf[768];
    snprintf(buf, sizeof buf,
             "\"pipeline\": {\"backend\": \"%s\", \"threads\": 1, \"history\": 10,"
             " \"whiten\": {\"degree\": 1}, \"detect\": {\"thresh\": %g}%s}",
             test_backend(), thresh, extra ? extra : "");
    return buf;
}

static const char *pipeline_keys(double thresh)
{
    return pipeline_keys_with(thresh, NULL);
}

/* A zmq-fed feed "f0" on d->in (PULL, bound) reading messages of format
 * (source.zmq.format). */
static void write_zmq_config_format(const dmn_t *d, int depth, const char *policy,
                                    const char *format)
{
    char dk[1024];
    daemon_keys(d, dk, sizeof dk);
    write_text(d->cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"zmq\", \"zmq\": {\"endpoint\": \"%s\", \"socket\": \"pull\","
               " \"bind\": true, \"rcvhwm\": 100, \"format\": \"%s\"}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": %d, \"policy\": \"%s\"}, %s } ] }\n",
               dk, d->in, format, W, H, depth, policy, pipeline_keys(5.0));
}

/* The same with this protocol's frames. */
static void write_zmq_config(const dmn_t *d, int depth, const char *policy)
{
    write_zmq_config_format(d, depth, policy, "skysieve");
}

/* The scene of every test: stars, noise, jitter and (optionally) movers;
 * no hot pixels, cosmics or streaks, so that what is found is the movers. */
static void scene(ss_synth_cfg_t *c, int movers)
{
    ss_synth_defaults(c);
    c->width = W;
    c->height = H;
    c->dtype = SS_DT_U16;
    c->seed = 7;
    c->n_stars = 150;
    c->jitter = 0.7;
    c->n_hot = 0;
    c->cosmic_rate = 0;
    c->streak_prob = 0;
    c->n_movers = movers;
    c->mover_snr = 25;
    c->mover_speed = 1.5;
    c->start_mjd = 61000.0;
    c->frame_interval = 10.0;
}

typedef struct sender {
    ss_synth_t *gen;
    ss_frame_t f;
    void *sock;
    char hdr[65536];
} sender_t;

static void sender_open(sender_t *s, const dmn_t *d, int movers)
{
    memset(s, 0, sizeof *s);
    ss_synth_cfg_t c;
    scene(&c, movers);
    s->gen = ss_synth_new(&c);
    ck_assert_ptr_nonnull(s->gen);
    s->f.capacity = (size_t)W * H * 2;
    s->f.pixels = malloc(s->f.capacity);
    ck_assert_ptr_nonnull(s->f.pixels);
    s->sock = zmq_socket(zctx, ZMQ_PUSH);
    int linger = 5000, hwm = 1000;
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    ck_assert_int_eq(zmq_connect(s->sock, d->in), 0);
}

/* Render the next frame (truth may be NULL) and encode its header. */
static int sender_next(sender_t *s, ss_synth_truth_t *truth)
{
    ck_assert_int_eq(ss_synth_next(s->gen, &s->f, truth), SS_OK);
    ss_strlcpy(s->f.meta.feed, "f0", sizeof s->f.meta.feed);
    int hl = ss_proto_encode_frame_header(&s->f, s->hdr, sizeof s->hdr);
    ck_assert_int_gt(hl, 0);
    return hl;
}

static void send_parts(void *sock, const ss_proto_part_t *p, int n)
{
    ck_assert_int_eq(ss_proto_send_parts(sock, p, n, 0), SS_OK);
}

static void sender_send(sender_t *s, ss_synth_truth_t *truth)
{
    int hl = sender_next(s, truth);
    ss_proto_part_t p[2] = { { s->hdr, (size_t)hl }, { s->f.pixels, ss_frame_bytes(&s->f) } };
    send_parts(s->sock, p, 2);
}

static void sender_close(sender_t *s)
{
    zmq_close(s->sock);
    free(s->f.pixels);
    ss_synth_destroy(&s->gen);
}

static void *subscribe(const dmn_t *d)
{
    void *sub = zmq_socket(zctx, ZMQ_SUB);
    int zero = 0, tmo = 200;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    ck_assert_int_eq(zmq_connect(sub, d->pub), 0);
    /* a status message proves the subscription has reached the daemon */
    double t0 = now_s();
    while (now_s() - t0 < 20.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) == SS_OK) {
            ss_msg_type_t t = ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL);
            ss_proto_rx_close(&rx);
            if (t == SS_MSG_STATUS)
                return sub;
        }
    }
    ck_abort_msg("no status message on %s", d->pub);
    return NULL;
}

static ss_proto_limits_t limits(void)
{
    ss_proto_limits_t l;
    ss_proto_limits_default(&l);
    return l;
}

/* ======================================================================
 * end to end over ZeroMQ
 * ==================================================================== */

#define E2E_FRAMES 24
#define MOVERS 3
#define MATCH_PX 2.0

START_TEST(test_zmq_end_to_end)
{
    dmn_t d;
    dmn_init(&d);
    write_zmq_config(&d, 4, "block");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);

    sender_t s;
    sender_open(&s, &d, MOVERS);
    ss_synth_truth_t *truth = calloc(E2E_FRAMES, sizeof *truth);
    ck_assert_ptr_nonnull(truth);
    for (int i = 0; i < E2E_FRAMES; i++)
        sender_send(&s, &truth[i]);

    /* every frame: one detections message; frames with a residual (status
     * ok): one residual message, decoded and checked against its pair;
     * frames with track reports: one tracks message after the detections,
     * which reports every track its detections name */
    ss_result_t res, rres, tres;
    ck_assert_int_eq(ss_result_init(&res, (size_t)W * H, 1000), 0);
    ck_assert_int_eq(ss_result_init(&rres, (size_t)W * H, 1), 0);
    ck_assert_int_eq(ss_result_init(&tres, 1, 1000), 0);
    ss_proto_limits_t lim = limits();
    int got_det[E2E_FRAMES] = { 0 }, got_res[E2E_FRAMES] = { 0 }, ok_status[E2E_FRAMES] = { 0 };
    int got_trk[E2E_FRAMES] = { 0 };
    uint64_t linked[E2E_FRAMES][MOVERS + 1] = { { 0 } };    /* track ids the detections name */
    int n_det = 0, n_ok = 0, n_trk = 0, found = 0, wanted = 0, tracked = 0, movers_last = 0;
    uint8_t *mask = malloc((size_t)W * H);
    double t0 = now_s(), last_result = now_s();
    /* until every detections and residual message, and 1 s more for the
     * tracks message that follows the last detections */
    while ((n_det < E2E_FRAMES || n_ok > 0 || now_s() - last_result < 1.0) &&
           now_s() - t0 < 120.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) != SS_OK)
            continue;
        ss_proto_error_t err;
        char feed[SS_NAME_MAX];
        ss_msg_type_t t = ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, feed);
        if (t != SS_MSG_STATUS)
            last_result = now_s();
        if (t == SS_MSG_TRACKS) {
            ck_assert_str_eq(feed, "f0");
            ck_assert_msg(ss_proto_decode_tracks(rx.part, rx.n, &lim, &tres, &err) == SS_OK, "%s",
                          err.text);
            uint64_t k = tres.meta.seq;
            ck_assert_uint_lt(k, E2E_FRAMES);
            ck_assert_int_eq(got_det[k], 1);            /* after its detections */
            ck_assert_int_eq(got_trk[k]++, 0);
            ck_assert_int_gt(tres.tracks.count, 0);
            n_trk++;
            for (int i = 0; i < MOVERS + 1 && linked[k][i]; i++) {
                int reported = 0;
                for (int j = 0; j < tres.tracks.count; j++)
                    reported |= tres.tracks.items[j].id == linked[k][i] &&
                                tres.tracks.items[j].state == SS_TRACK_ACTIVE;
                ck_assert_msg(reported, "frame %d: track %llu not reported", (int)k,
                              (unsigned long long)linked[k][i]);
            }
            /* the last frame: each mover in the field is a track there */
            if (k == E2E_FRAMES - 1) {
                for (int m = 0; m < truth[k].n_obj; m++) {
                    const ss_synth_obj_t *o = &truth[k].obj[m];
                    if (o->kind != SS_SYNTH_MOVER || o->x < 8 || o->y < 8 || o->x > W - 9 ||
                        o->y > H - 9)
                        continue;
                    movers_last++;
                    for (int j = 0; j < tres.tracks.count; j++)
                        if (hypot(tres.tracks.items[j].x - o->x, tres.tracks.items[j].y - o->y) <
                            MATCH_PX) {
                            tracked++;
                            break;
                        }
                }
            }
        } else if (t == SS_MSG_DETECTIONS) {
            ck_assert_str_eq(feed, "f0");
            ck_assert_msg(ss_proto_decode_detections(rx.part, rx.n, &lim, &res, &err) == SS_OK,
                          "%s", err.text);
            uint64_t k = res.meta.seq;
            ck_assert_uint_lt(k, E2E_FRAMES);
            ck_assert_int_eq(got_det[k]++, 0);
            n_det++;
            ck_assert_uint_eq(k, truth[k].seq);
            for (int j = 0, n = 0; j < res.dets.count && n < MOVERS + 1; j++) {
                int seen = 0;
                for (int i = 0; i < n; i++)
                    seen |= linked[k][i] == res.dets.items[j].track;
                if (res.dets.items[j].track && !seen)
                    linked[k][n++] = res.dets.items[j].track;
            }
            if (res.status == SS_STATUS_OK) {
                ok_status[k] = 1;
                n_ok++;     /* a residual is owed */
                if (getenv("SS_TEST_DEBUG")) {
                    fprintf(stderr, "frame %d: %d dets, sigma %g, shift %.3f %.3f:", (int)k,
                            res.dets.count, res.sigma, res.shift.sx, res.shift.sy);
                    for (int j = 0; j < res.dets.count && j < 8; j++)
                        fprintf(stderr, " (%.1f,%.1f %.1f)", res.dets.items[j].x, res.dets.items[j].y,
                                res.dets.items[j].peak_snr);
                    fprintf(stderr, "\n truth:");
                    for (int m = 0; m < truth[k].n_obj; m++)
                        fprintf(stderr, " (%.1f,%.1f)", truth[k].obj[m].x, truth[k].obj[m].y);
                    fprintf(stderr, "\n");
                }
                ck_assert_int_lt(res.dets.count, 60);
                for (int m = 0; m < truth[k].n_obj; m++) {
                    const ss_synth_obj_t *o = &truth[k].obj[m];
                    if (o->kind != SS_SYNTH_MOVER || o->x < 8 || o->y < 8 || o->x > W - 9 ||
                        o->y > H - 9)
                        continue;
                    wanted++;
                    for (int j = 0; j < res.dets.count; j++)
                        if (hypot(res.dets.items[j].x - o->x, res.dets.items[j].y - o->y) < MATCH_PX &&
                            res.dets.items[j].sign > 0) {
                            found++;
                            break;
                        }
                }
            }
            if (got_res[k] && ok_status[k])
                n_ok--;
        } else if (t == SS_MSG_RESIDUAL) {
            int has_mask = 0;
            ck_assert_msg(ss_proto_decode_residual(rx.part, rx.n, &lim, &rres, mask, &has_mask,
                                                   &err) == SS_OK,
                          "%s", err.text);
            uint64_t k = rres.meta.seq;
            ck_assert_uint_lt(k, E2E_FRAMES);
            ck_assert_int_eq(got_res[k]++, 0);
            ck_assert_int_eq(rres.width, W);
            ck_assert_int_eq(rres.height, H);
            ck_assert(has_mask);
            size_t valid = 0;
            for (size_t i = 0; i < (size_t)W * H; i++) {
                ck_assert_int_eq(mask[i], isfinite(rres.residual[i]) ? 1 : 0);
                valid += mask[i];
            }
            if (rres.status == SS_STATUS_OK) {
                ck_assert(isfinite(rres.sigma) && rres.sigma > 0);
                ck_assert_uint_gt(valid, (size_t)W * H / 2);
            } else {
                /* no prediction yet: a residual all invalid, with its status */
                ck_assert_uint_eq(valid, 0);
            }
            if (got_det[k] && ok_status[k])
                n_ok--;
        }
        ss_proto_rx_close(&rx);
    }
    ck_assert_int_eq(n_det, E2E_FRAMES);
    ck_assert_int_eq(n_ok, 0);
    int n_res = 0, n_ok_frames = 0;
    for (int k = 0; k < E2E_FRAMES; k++) {
        n_res += got_res[k];
        n_ok_frames += ok_status[k];
        ck_assert_int_eq(got_res[k], 1);     /* a residual for every frame (all NaN without a prediction) */
    }
    ck_assert_int_ge(n_ok_frames, E2E_FRAMES / 3);
    /* the movers: found near their true positions in nearly every ok frame */
    ck_assert_int_gt(wanted, 0);
    fprintf(stderr, "end to end: %d frames, %d with a residual, movers found %d of %d\n",
            E2E_FRAMES, n_ok_frames, found, wanted);
    ck_assert_msg(found >= (int)ceil(0.9 * wanted), "movers found %d of %d", found, wanted);
    /* and tracked: a tracks message per frame with reports, each mover of
     * the last frame among them */
    fprintf(stderr, "end to end: %d tracks messages; the last frame's movers tracked: %d of %d\n",
            n_trk, tracked, movers_last);
    ck_assert_int_gt(movers_last, 0);
    ck_assert_int_eq(tracked, movers_last);
    ss_proto_status_t *st = stats_of(&d);
    ck_assert_ptr_nonnull(st);
    ck_assert_uint_eq(st->feeds[0].received, E2E_FRAMES);
    ck_assert_uint_eq(st->feeds[0].accepted, E2E_FRAMES);
    ck_assert_uint_eq(st->feeds[0].processed, E2E_FRAMES);
    ck_assert_uint_eq(st->feeds[0].status_count[SS_STATUS_OK], (uint64_t)n_ok_frames);
    ck_assert_uint_eq(st->feeds[0].published, (uint64_t)(E2E_FRAMES + n_res + n_trk));
    ck_assert_uint_eq(st->feeds[0].pub_dropped, 0);
    free(st);

    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    free(mask);
    free(truth);
    ss_result_free(&res);
    ss_result_free(&rres);
    ss_result_free(&tres);
    sender_close(&s);
    zmq_close(sub);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * FITS directory ingest
 * ==================================================================== */

#define FITS_FILES 8

static void write_fits(const char *path, ss_frame_t *f)
{
    char err[512];
    ck_assert_msg(ss_fits_write_frame(path, f, err, sizeof err) == SS_OK, "%s", err);
}

/* A w×h u16 calibration master at path (all 100 ADU). */
static void write_master(const char *path, int w, int h)
{
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    ss_frame_meta_clear(&f.meta);
    f.width = w;
    f.height = h;
    f.dtype = SS_DT_U16;
    uint16_t *px = malloc((size_t)w * (size_t)h * sizeof *px);
    ck_assert_ptr_nonnull(px);
    for (int i = 0; i < w * h; i++)
        px[i] = 100;
    f.pixels = px;
    f.capacity = (size_t)w * (size_t)h * sizeof *px;
    write_fits(path, &f);
    free(px);
}

/* Track lines (sinks.jsonl.tracks: a frame's tracks message body) of the
 * last jsonl_lines call. */
static int g_track_lines;

/* The JSON-lines sink: one object per detection, with the frame's seq and
 * the detection's position; returns the number of detection lines, and
 * counts the track lines ("type": "tracks", each a tracks body with its
 * seq and a non-empty "tracks" array) in g_track_lines. */
static int jsonl_lines(const char *path)
{
    g_track_lines = 0;
    char *text = read_all(path);
    if (!text)
        return 0;
    /* only complete lines: the daemon may be writing the next one */
    char *end = strrchr(text, '\n');
    if (end)
        end[1] = '\0';
    else
        text[0] = '\0';
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        ck_assert_msg(o != NULL, "not JSON: %s", line);
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "seq")));
        const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(o, "type"));
        if (type) {
            ck_assert_str_eq(type, "tracks");
            ck_assert(cJSON_GetArraySize(cJSON_GetObjectItem(o, "tracks")) > 0);
            g_track_lines++;
            cJSON_Delete(o);
            continue;
        }
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "x")));
        ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(o, "y")));
        ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(o, "feed")), "f0");
        const char *input = cJSON_GetStringValue(cJSON_GetObjectItem(o, "input"));
        ck_assert_msg(input && input[0], "no input name: %s", line);
        cJSON_Delete(o);
        n++;
    }
    free(text);
    return n;
}

/* How many files in dir follow the residual naming rule for feed and seq
 * (<feed>-<seq, 10 digits>-<yyyymmddThhmmss.sssZ>[-k].fits.fz); the path
 * of the last one found in path. */
static int residual_named(const char *dir, const char *feed, uint64_t seq, char *path, size_t n)
{
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s-%010llu-", feed, (unsigned long long)seq);
    int found = 0;
    DIR *dp = opendir(dir);
    ck_assert_ptr_nonnull(dp);
    for (struct dirent *e; (e = readdir(dp));) {
        const char *name = e->d_name, *t = name + strlen(prefix);
        if (strncmp(name, prefix, strlen(prefix)) != 0)
            continue;
        /* 20261122T060043.200Z */
        ck_assert_msg(strlen(t) >= 20 && t[8] == 'T' && t[15] == '.' && t[19] == 'Z', "%s", name);
        ck_assert_msg(strstr(t, ".fits.fz") != NULL, "%s", name);
        const int len = snprintf(path, n, "%s/%.*s", dir, 200, name);
        ck_assert(len > 0 && (size_t)len < n);
        found++;
    }
    closedir(dp);
    return found;
}

START_TEST(test_fits_directory)
{
    dmn_t d;
    dmn_init(&d);
    char in[128], stage[128], jsonl[128], resdir[128], dk[1024];
    snprintf(in, sizeof in, "%s/in", d.dir);
    snprintf(stage, sizeof stage, "%s/stage", d.dir);
    snprintf(jsonl, sizeof jsonl, "%s/det.jsonl", d.dir);
    snprintf(resdir, sizeof resdir, "%s/residuals", d.dir);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(stage, 0755), 0);
    ck_assert_int_eq(mkdir(resdir, 0755), 0);
    daemon_keys(&d, dk, sizeof dk);
    write_text(d.cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"directory\", \"path\": \"%s\","
               " \"settle\": 0.6}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 4, \"policy\": \"block\"},"
               " \"sinks\": {\"jsonl\": {\"path\": \"%s\"}, \"fits\": {\"dir\": \"%s\"}}, %s } ] }\n",
               dk, in, W, H, jsonl, resdir, pipeline_keys(5.0));
    /* present before the start: not taken (source.fits.existing is off) */
    sender_t s;
    memset(&s, 0, sizeof s);
    ss_synth_cfg_t c;
    scene(&c, 2);
    s.gen = ss_synth_new(&c);
    s.f.capacity = (size_t)W * H * 2;
    s.f.pixels = malloc(s.f.capacity);
    char path[300], tmp[300];
    snprintf(path, sizeof path, "%s/old.fits", in);
    ck_assert_int_eq(ss_synth_next(s.gen, &s.f, NULL), SS_OK);
    write_fits(path, &s.f);

    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);
    /* FITS_FILES frames (seq 1..), each written aside and renamed in */
    for (int i = 0; i < FITS_FILES; i++) {
        ck_assert_int_eq(ss_synth_next(s.gen, &s.f, NULL), SS_OK);
        snprintf(tmp, sizeof tmp, "%s/f%03d.fits", stage, i);
        snprintf(path, sizeof path, "%s/f%03d.fits", in, i);
        write_fits(tmp, &s.f);
        ck_assert_int_eq(rename(tmp, path), 0);
        sleep_s(0.03);
    }
    /* issue 11: a symbolic link to a good FITS file outside the watched
     * directory is never followed (the counts below would hold it) */
    snprintf(tmp, sizeof tmp, "%s/outside.fits", d.dir);
    write_fits(tmp, &s.f);
    snprintf(path, sizeof path, "%s/link.fits", in);
    ck_assert_int_eq(symlink(tmp, path), 0);
    /* a corrupt file: rejected, counted, the daemon goes on */
    snprintf(tmp, sizeof tmp, "%s/bad.fits", stage);
    write_text(tmp, "SIMPLE  =                    T / not really a FITS file\n");
    snprintf(path, sizeof path, "%s/bad.fits", in);
    ck_assert_int_eq(rename(tmp, path), 0);
    /* the last frame written in place, slowly, in four pieces */
    ck_assert_int_eq(ss_synth_next(s.gen, &s.f, NULL), SS_OK);
    uint64_t last_seq = s.f.meta.seq;
    snprintf(tmp, sizeof tmp, "%s/slow.fits", stage);
    write_fits(tmp, &s.f);
    char *bytes = NULL;
    size_t nbytes = 0;
    bytes = read_file(tmp, &nbytes);
    ck_assert_ptr_nonnull(bytes);
    snprintf(path, sizeof path, "%s/f%03d.fits", in, FITS_FILES);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    for (int piece = 0; piece < 4; piece++) {
        size_t a = nbytes * (size_t)piece / 4, b = nbytes * (size_t)(piece + 1) / 4;
        ck_assert_int_eq(write(fd, bytes + a, b - a), (ssize_t)(b - a));
        sleep_s(0.12);
    }
    close(fd);
    free(bytes);
    /* issue 10: one written in place with a pause longer than settle (0.6
     * s): taken early, rejected as unreadable, and taken again once the
     * rest is written */
    ck_assert_int_eq(ss_synth_next(s.gen, &s.f, NULL), SS_OK);
    last_seq = s.f.meta.seq;
    write_fits(tmp, &s.f);
    bytes = read_file(tmp, &nbytes);
    ck_assert_ptr_nonnull(bytes);
    snprintf(path, sizeof path, "%s/f%03d.fits", in, FITS_FILES + 1);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, bytes, nbytes / 2), (ssize_t)(nbytes / 2));
    sleep_s(1.5);
    ck_assert_int_eq(write(fd, bytes + nbytes / 2, nbytes - nbytes / 2),
                     (ssize_t)(nbytes - nbytes / 2));
    close(fd);
    free(bytes);

    /* every good file once, in order: the detections messages (one per
     * processed frame, in processing order) carry seqs 1..FITS_FILES+2 */
    uint64_t seqs[64];
    int n = 0;
    ss_result_t r;
    ck_assert_int_eq(ss_result_init(&r, 16, 1000), 0);
    ss_proto_limits_t lim = limits();
    double t0 = now_s(), quiet = now_s();
    while (now_s() - t0 < 60.0 && (n < FITS_FILES + 2 || now_s() - quiet < 1.0)) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) != SS_OK)
            continue;
        if (ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL) == SS_MSG_DETECTIONS) {
            ss_proto_error_t err;
            ck_assert(ss_proto_decode_detections(rx.part, rx.n, &lim, &r, &err) == SS_OK);
            ck_assert_int_lt(n, 64);
            seqs[n++] = r.meta.seq;
            /* issue 10: traceable to the input file (f<seq - 1>.fits) */
            char want[32];
            snprintf(want, sizeof want, "f%03llu.fits", (unsigned long long)r.meta.seq - 1);
            ck_assert_str_eq(r.meta.input, want);
            quiet = now_s();    /* then a second of nothing more (no duplicate) */
        }
        ss_proto_rx_close(&rx);
    }
    ss_result_free(&r);
    ck_assert_int_eq(n, FITS_FILES + 2);
    for (int i = 0; i < n; i++)
        ck_assert_uint_eq(seqs[i], (uint64_t)i + 1);
    ck_assert_uint_eq(seqs[n - 1], last_seq);

    /* received: every good file, bad.fits, and the paused one twice */
    ss_proto_status_t *st = stats_of(&d);
    ck_assert_uint_eq(st->feeds[0].received, FITS_FILES + 4);
    ck_assert_uint_eq(st->feeds[0].accepted, FITS_FILES + 2);
    ck_assert_uint_eq(st->feeds[0].rejected, 2);
    ck_assert_uint_eq(st->feeds[0].processed, FITS_FILES + 2);
    ck_assert(log_contains(&d, "is watched again"));
    ck_assert(log_contains(&d, "bad.fits"));
    ck_assert(log_contains(&d, "link.fits is a symbolic link: not followed"));
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    /* the sinks, flushed at exit: a line per detection, a residual FITS
     * file per frame with a residual */
    ck_assert_int_eq(jsonl_lines(jsonl), (int)st->feeds[0].detections);
    int files = 0;
    for (uint64_t k = 1; k <= last_seq; k++) {
        /* the naming rule: f0-<seq, 10 digits>-<DATE-OBS compact>.fits.fz */
        if (residual_named(resdir, "f0", k, path, sizeof path) != 1)
            continue;
        files++;
        float *px = NULL;
        int rw = 0, rh = 0;
        char err[512];
        ck_assert_msg(ss_fits_read_float(path, &px, &rw, &rh, err, sizeof err) == SS_OK, "%s", err);
        ck_assert_int_eq(rw, W);
        ck_assert_int_eq(rh, H);
        free(px);
    }
    /* a residual file for every frame handled (all NaN without a
     * prediction), or, when the disk fell behind (a slow sanitizer build),
     * counted as skipped: nothing silently lost */
    long long file_dropped = log_counter(&d, "file_dropped");
    ck_assert_int_ge(file_dropped, 0);
    ck_assert_int_eq(files + file_dropped,
                     (int)(st->feeds[0].status_count[SS_STATUS_OK] +
                           st->feeds[0].status_count[SS_STATUS_REFERENCE] +
                           st->feeds[0].status_count[SS_STATUS_WARMUP] +
                           st->feeds[0].status_count[SS_STATUS_REG_FAILED]));
    ck_assert_int_ge(files, 1);
    free(st);
    zmq_close(sub);

    free(s.f.pixels);
    ss_synth_destroy(&s.gen);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * sd_notify
 * ==================================================================== */

typedef struct note {
    char text[512];
    double t;
} note_t;

static int notify_socket(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    ss_strlcpy(a.sun_path, path, sizeof a.sun_path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    return fd;
}

/* Next datagram within timeout; 0, or -1 on timeout. */
static int next_note(int fd, note_t *n, double timeout)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    if (poll(&p, 1, (int)(timeout * 1000)) <= 0)
        return -1;
    ssize_t len = recv(fd, n->text, sizeof n->text - 1, 0);
    if (len < 0)
        return -1;
    n->text[len] = '\0';
    n->t = now_s();
    return 0;
}

/* Read notes until one contains want (0), or timeout (-1). Counts the
 * WATCHDOG=1 and STATUS= seen on the way. */
static int wait_note(int fd, const char *want, double timeout, note_t *out, int *watchdogs,
                     int *statuses)
{
    double t0 = now_s();
    note_t n;
    while (now_s() - t0 < timeout) {
        if (next_note(fd, &n, 0.2) != 0)
            continue;
        if (watchdogs && strcmp(n.text, "WATCHDOG=1") == 0)
            (*watchdogs)++;
        if (statuses && strncmp(n.text, "STATUS=", 7) == 0)
            (*statuses)++;
        if (strstr(n.text, want)) {
            if (out)
                *out = n;
            return 0;
        }
    }
    return -1;
}

static void write_synth_config_feed(const dmn_t *d, double thresh, const char *extra,
                                   const char *feed_extra, const char *pipe_extra)
{
    char dk[1024];
    daemon_keys(d, dk, sizeof dk);
    write_text(d->cfg,
               "{ %s%s, \"feeds\": [ { \"name\": \"f0\",%s"
               " \"source\": {\"type\": \"synth\", \"synth\": {\"rate\": 20, \"width\": %d,"
               " \"height\": %d, \"n_stars\": 150, \"n_hot\": 0, \"cosmic_rate\": 0,"
               " \"streak_prob\": 0, \"n_movers\": 2, \"mover_snr\": 20}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 4, \"policy\": \"%s\"}, %s } ] }\n",
               dk, extra ? extra : "", feed_extra ? feed_extra : "", W, H, W, H,
               d->queue_policy ? d->queue_policy : "drop_oldest",
               pipeline_keys_with(thresh, pipe_extra));
}

static void write_synth_config(const dmn_t *d, double thresh, const char *extra)
{
    write_synth_config_feed(d, thresh, extra, NULL, NULL);
}

/* The sky report sinks end to end: the synthetic feed with a WCS, its two
 * movers tracked; with sinks.iod.min_rate above their rate they are slow
 * movers, appended as ADES PSV rows (header once, rows with the track's
 * trkSub), and no IOD line (no streaks); the final counters say so. */
START_TEST(test_sky_reports)
{
    dmn_t d;
    dmn_init(&d);
    char ades[256], iod[256], dk[1024];
    snprintf(ades, sizeof ades, "%s/slow.psv", d.dir);
    snprintf(iod, sizeof iod, "%s/sat.iod", d.dir);
    daemon_keys(&d, dk, sizeof dk);
    write_text(d.cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"synth\", \"synth\": {\"rate\": 20, \"width\": %d,"
               " \"height\": %d, \"n_stars\": 150, \"n_hot\": 0, \"cosmic_rate\": 0,"
               " \"streak_prob\": 0, \"n_movers\": 2, \"mover_snr\": 20, \"wcs\": true}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 4, \"policy\": \"block\"},"
               " \"sinks\": {\"ades\": {\"path\": \"%s\", \"stn\": \"Z99\"},"
               " \"iod\": {\"path\": \"%s\", \"min_rate\": 1000000}}, %s } ] }\n",
               dk, W, H, W, H, ades, iod,
               pipeline_keys_with(5.0, ", \"photometry\": {\"zeropoint\": 22.5, \"band\": \"R\"}"));
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    const double t0 = now_s();
    char *text = NULL;
    while (now_s() - t0 < 40.0) {
        free(text);
        text = read_all(ades);
        if (text && strstr(text, "|CCD |Z99 |"))
            break;
        sleep_s(0.1);
    }
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    free(text);
    text = read_all(ades);
    ck_assert_msg(text && strstr(text, "|CCD |Z99 |"), "no ADES row: %s", text ? text : "(no file)");
    ck_assert(strncmp(text, "# version=2022\n# observatory\n! mpcCode Z99\n", 43) == 0);
    const char *first = strstr(text, "# version"), *again = strstr(first + 1, "# version");
    ck_assert_msg(again == NULL, "the header written twice");
    ck_assert_ptr_nonnull(strstr(text, "\nss"));
    /* with a zero point configured every row has mag, rmsMag, band R and
     * photCat: fields 10-13; a mover's component flux (> 1 ADU, far below
     * 10^6) puts mag between 7.5 and 22.5 */
    int n_rows = 0;
    for (const char *row = strstr(text, "\nss"); row; row = strstr(row + 1, "\nss")) {
        const char *f = row + 1;
        for (int k = 0; k < 9 && f; k++)
            f = strchr(f, '|') ? strchr(f, '|') + 1 : NULL;
        double mag = NAN, rms = NAN;
        char band[8] = "";
        ck_assert_msg(f && sscanf(f, "%lf |%lf |%7[^ |]", &mag, &rms, band) == 3, "row %.120s", row + 1);
        ck_assert_msg(mag > 7.5 && mag < 22.5 && rms > 0.0 && rms < 1.0, "mag %g ± %g", mag, rms);
        ck_assert_str_eq(band, "R");
        n_rows++;
    }
    ck_assert_int_gt(n_rows, 0);
    free(text);
    char *log = read_all(d.log);
    unsigned long long rows = 0, lines = 9;
    const char *p = log ? strstr(log, "ades_written=") : NULL;
    ck_assert(p && sscanf(p, "ades_written=%llu", &rows) == 1 && rows > 0);
    p = strstr(log, "iod_written=");
    ck_assert(p && sscanf(p, "iod_written=%llu", &lines) == 1 && lines == 0);
    free(log);
    dmn_cleanup(&d);
}
END_TEST

/* Plate solving end to end (wcs.solve, README "Plate solving"): FITS
 * frames without a WCS, made from the Tycho-2 stars of a 2.8° field
 * (solve_scene.h) at 20"/px, rotated 30°, with a known sub-pixel pointing
 * jitter per frame and a bright mover, dropped into the watched directory
 * one by one while the daemon runs. The reference is solved off the frame
 * path; once solved, the mover's detections carry RA/Dec, which must be
 * the sky position of the detected centroid through the known WCS of
 * *its* frame within 1" (a shift applied with the wrong sign or not at
 * all would be off by 20-60"); the final counters say one solve started
 * and succeeded. Loop 1: wcs.solve_program is a stand-in that sleeps past
 * wcs.solve_timeout (1 s): it is killed and counted, every frame is
 * processed meanwhile, and no detection gets RA/Dec. */
#define PS_W 512
#define PS_H 512
#define PS_N 40
#define PS_RA 150.0
#define PS_DEC 20.0
#define PS_SCALE 20.0
#define PS_ROT 30.0

static void ps_mover(int k, double *x, double *y, double *dx, double *dy)
{
    *dx = 1.5 * sin(k * 1.3);
    *dy = 1.5 * cos(k * 0.7);
    *x = 100.0 + 5.0 * k + *dx;
    *y = 150.0 + 4.0 * k + *dy;
}

START_TEST(test_plate_solve)
{
    const int slow = _i == 1;
    const char *missing = scene_missing();
    if (missing) {
        printf("test_plate_solve: skipped: %s\n", missing);
        return;
    }
    dmn_t d;
    dmn_init(&d);
    char in[128], stage[128], jsonl[128], dk[1024];
    snprintf(in, sizeof in, "%s/in", d.dir);
    snprintf(stage, sizeof stage, "%s/stage", d.dir);
    snprintf(jsonl, sizeof jsonl, "%s/det.jsonl", d.dir);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(stage, 0755), 0);
    char prog[200] = "solve-field";
    if (slow) {
        snprintf(prog, sizeof prog, "%s/slow-solver", d.dir);
        write_text(prog, "#!/bin/sh\nsleep 120\n");
        ck_assert_int_eq(chmod(prog, 0755), 0);
    }
    daemon_keys(&d, dk, sizeof dk);
    write_text(d.cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"directory\", \"path\": \"%s\","
               " \"settle\": 0.05}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 4, \"policy\": \"block\"},"
               " \"wcs\": {\"solve\": true, \"solve_timeout\": %d, \"solve_scale_low\": 15,"
               " \"solve_scale_high\": 25, \"solve_index_dir\": \"%s\", \"solve_program\": \"%s\"},"
               " \"sinks\": {\"jsonl\": {\"path\": \"%s\"}}, %s } ] }\n",
               dk, in, PS_W, PS_H, slow ? 1 : 60, SCENE_INDEX_DIR, prog, jsonl,
               pipeline_keys(5.0));
    static scene_cat_t cat;
    scene_catalogue(&cat, d.dir, PS_RA, PS_DEC, 2.3);
    float *img = malloc(sizeof *img * PS_W * PS_H);
    uint16_t *px = malloc(sizeof *px * PS_W * PS_H);
    ck_assert(img && px);
    double jx_k[PS_N], jy_k[PS_N];
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    rng_state = 21;
    for (int k = 0; k < PS_N; k++) {
        double mx, my, dx, dy;
        ps_mover(k, &mx, &my, &dx, &dy);
        ss_wcs_t t;
        scene_wcs(&t, PS_W, PS_H, PS_RA, PS_DEC, PS_SCALE, PS_ROT, dx, dy);
        scene_render(&t, &cat, img, PS_W, PS_H);
        scene_star(img, PS_W, PS_H, mx, my, 30000.0, 1.5);
        jx_k[k] = dx;
        jy_k[k] = dy;
        ss_wcs_free(&t);
        for (int i = 0; i < PS_W * PS_H; i++)
            px[i] = (uint16_t)fmin(65535.0, fmax(0.0, img[i] + 0.5));
        ss_frame_t f;
        memset(&f, 0, sizeof f);
        ss_frame_meta_clear(&f.meta);
        f.width = PS_W;
        f.height = PS_H;
        f.dtype = SS_DT_U16;
        f.pixels = px;
        f.capacity = sizeof *px * PS_W * PS_H;
        f.meta.seq = (uint64_t)k + 1;
        char tmp[300], path[300];
        snprintf(tmp, sizeof tmp, "%s/p%03d.fits", stage, k);
        snprintf(path, sizeof path, "%s/p%03d.fits", in, k);
        write_fits(tmp, &f);
        ck_assert_int_eq(rename(tmp, path), 0);
        sleep_s(0.1);
    }
    /* until every frame is processed (a line per detection of the last
     * frames) or the time is up */
    const double t0 = now_s();
    while (now_s() - t0 < 60.0) {
        ss_proto_status_t *st = stats_of(&d);
        const int done = st && st->n_feeds > 0 && st->feeds[0].processed >= PS_N;
        free(st);
        if (done)
            break;
        sleep_s(0.2);
    }
    const double t_end = now_s() - t0;
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    ck_assert_int_eq(log_counter(&d, "solve_started"), 1);
    ck_assert_int_eq(log_counter(&d, "solve_ok"), slow ? 0 : 1);
    ck_assert_int_eq(log_counter(&d, "solve_timeouts"), slow ? 1 : 0);
    ck_assert_int_eq(log_counter(&d, "solve_failed"), 0);
    ck_assert_int_eq(log_counter(&d, "processed"), PS_N);
    /* the mover's detections: with RA/Dec once solved, at its known sky
     * position */
    char *text = read_all(jsonl);
    ck_assert_ptr_nonnull(text);
    int with = 0, without = 0, first_with = 0, with_mag = 0;
    double worst = 0.0, mag_sum = 0.0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *o = cJSON_Parse(line);
        ck_assert_ptr_nonnull(o);
        const cJSON *js = cJSON_GetObjectItem(o, "seq"), *jx = cJSON_GetObjectItem(o, "x"),
                    *jy = cJSON_GetObjectItem(o, "y"), *jr = cJSON_GetObjectItem(o, "ra"),
                    *jd = cJSON_GetObjectItem(o, "dec");
        if (cJSON_IsNumber(js) && cJSON_IsNumber(jx) && cJSON_IsNumber(jy)) {
            const int k = (int)js->valuedouble - 1;
            double mx, my, dx, dy;
            ck_assert(k >= 0 && k < PS_N);
            ps_mover(k, &mx, &my, &dx, &dy);
            if (hypot(jx->valuedouble - mx, jy->valuedouble - my) < 2.0) {
                if (cJSON_IsNumber(jr) && cJSON_IsNumber(jd)) {
                    ss_wcs_t tw;
                    double tr, td;
                    scene_wcs(&tw, PS_W, PS_H, PS_RA, PS_DEC, PS_SCALE, PS_ROT, jx_k[k], jy_k[k]);
                    ck_assert_int_eq(ss_wcs_pix2sky(&tw, jx->valuedouble, jy->valuedouble, &tr,
                                                    &td), 0);
                    ss_wcs_free(&tw);
                    const double sep = scene_sep(jr->valuedouble, jd->valuedouble, tr, td);
                    worst = fmax(worst, sep);
                    if (getenv("PS_DEBUG"))
                        printf("frame %d mover x %.2f y %.2f off %.2f\"\n", k + 1,
                               jx->valuedouble, jy->valuedouble, sep);
                    if (!with++)
                        first_with = k + 1;
                    const cJSON *jm = cJSON_GetObjectItem(o, "mag");
                    if (cJSON_IsNumber(jm)) {
                        with_mag++;
                        mag_sum += jm->valuedouble;
                    }
                } else {
                    without++;
                }
            }
        }
        cJSON_Delete(o);
    }
    free(text);
    printf("test_plate_solve(%s): mover detections %d with RA/Dec (from frame %d), %d without; "
           "worst %.3f\"; %d with a magnitude, mean %.3f; all processed %.1f s after the last "
           "file\n", slow ? "timeout" : "solve", with, first_with, without, worst, with_mag,
           with_mag ? mag_sum / with_mag : NAN, t_end);
    /* the zero point fitted against the Tycho-2 magnitudes of the matched
     * stars (2e5 ADU at V_T = 9: 22.253, less the light outside the
     * aperture), and the mover (30000 ADU: V_T 11.060) measured with it;
     * the residual's flux runs ~0.1 mag faint (README, "Photometry") */
    if (!slow) {
        ck_assert_msg(log_contains(&d, "zero point 22.2"), "no zero point of ~22.25 fitted");
        ck_assert_int_eq(with_mag, with);
        ck_assert_msg(fabs(mag_sum / with_mag - 11.06) < 0.25, "mover at V_T %.3f, not 11.06",
                      mag_sum / with_mag);
    } else {
        ck_assert_int_eq(with_mag, 0);
    }
    if (slow) {
        ck_assert_int_eq(with, 0);
        ck_assert_int_ge(without, 5);
    } else {
        ck_assert_int_ge(with, 5);
        ck_assert_msg(worst < 1.0, "the mover's RA/Dec off by %.2f\"", worst);
    }
    free(img);
    free(px);
    dmn_cleanup(&d);
}
END_TEST

START_TEST(test_sd_notify_sequence)
{
    dmn_t d;
    dmn_init(&d);
    write_synth_config(&d, 5.0, NULL);
    char sock[128], env_sock[200];
    snprintf(sock, sizeof sock, "%s/notify", d.dir);
    snprintf(env_sock, sizeof env_sock, "NOTIFY_SOCKET=%s", sock);
    int fd = notify_socket(sock);
    d.notify_fd = fd;
    const char *env[] = { env_sock, "WATCHDOG_USEC=400000", NULL };
    dmn_start(&d, env);

    /* READY=1 comes first, and only once the control socket is bound */
    note_t n;
    ck_assert_int_eq(next_note(fd, &n, START_TIMEOUT_S), 0);
    ck_assert_str_eq(n.text, "READY=1");
    struct stat stt;
    ck_assert_int_eq(stat(d.ctl + strlen("ipc://"), &stt), 0);
    ck_assert_int_eq(stat(d.pub + strlen("ipc://"), &stt), 0);
    ss_ctl_response_t r;
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_STATUS, NULL, &r), 0);
    ck_assert(r.ok);
    ss_ctl_response_free(&r);

    /* STATUS= with frames/s and drops, WATCHDOG=1 every WATCHDOG_USEC/2 */
    int watchdogs = 0, statuses = 0;
    note_t st;
    ck_assert_int_eq(wait_note(fd, "STATUS=", 10.0, &st, &watchdogs, &statuses), 0);
    ck_assert_ptr_nonnull(strstr(st.text, "frames/s"));
    ck_assert_ptr_nonnull(strstr(st.text, "dropped"));
    while (watchdogs < 3)
        ck_assert_int_eq(wait_note(fd, "WATCHDOG=1", 10.0, NULL, &watchdogs, &statuses), 0);

    /* SIGHUP: RELOADING=1 with MONOTONIC_USEC of now, then READY=1 */
    uint64_t before = (uint64_t)(now_s() * 1e6);
    kill(d.pid, SIGHUP);
    note_t rel;
    ck_assert_int_eq(wait_note(fd, "RELOADING=1", 10.0, &rel, NULL, NULL), 0);
    uint64_t after = (uint64_t)(now_s() * 1e6);
    const char *mu = strstr(rel.text, "MONOTONIC_USEC=");
    ck_assert_ptr_nonnull(mu);
    unsigned long long usec = strtoull(mu + strlen("MONOTONIC_USEC="), NULL, 10);
    ck_assert_uint_ge(usec, before);
    ck_assert_uint_le(usec, after);
    ck_assert_int_eq(wait_note(fd, "READY=1", 10.0, NULL, NULL, NULL), 0);
    watchdogs = 0;
    while (watchdogs < 1)   /* the watchdog goes on after a reload */
        ck_assert_int_eq(wait_note(fd, "WATCHDOG=1", 10.0, NULL, &watchdogs, NULL), 0);

    /* SIGTERM: STOPPING=1 with the drain's time (shutdown.drain_timeout 30
     * s, plus the grace) asked for beyond TimeoutStopSec; exit 0 */
    kill(d.pid, SIGTERM);
    note_t stop;
    ck_assert_int_eq(wait_note(fd, "STOPPING=1", 10.0, &stop, NULL, NULL), 0);
    const char *ext = strstr(stop.text, "EXTEND_TIMEOUT_USEC=");
    ck_assert_ptr_nonnull(ext);
    ck_assert_uint_ge(strtoull(ext + strlen("EXTEND_TIMEOUT_USEC="), NULL, 10), 30000000ull);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    close(fd);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * SIGHUP reloads
 * ==================================================================== */

/* The running config's pipeline.detect.thresh of feed 0 and
 * status_interval, through the control "config" command. */
static void running_config(const dmn_t *d, ss_config_t *out)
{
    ss_ctl_response_t r;
    ck_assert_int_eq(ctl_cmd(d, SS_CTL_CONFIG, NULL, &r), 0);
    ck_assert_msg(r.ok, "%s", r.error);
    /* body: {"config":{...}}: the member is the config JSON */
    const char *pre = "{\"config\":";
    ck_assert_int_eq(strncmp(r.body, pre, strlen(pre)), 0);
    size_t len = strlen(r.body) - strlen(pre) - 1;
    char err[512];
    ck_assert_msg(ss_config_load_string(r.body + strlen(pre), len, out, err, sizeof err) == SS_OK,
                  "%s", err);
    ss_ctl_response_free(&r);
}

START_TEST(test_sighup_reload)
{
    dmn_t d;
    dmn_init(&d);
    char jsonl[256], rotated[270], sinks[700], ds9[256];
    snprintf(jsonl, sizeof jsonl, "%s/det.jsonl", d.dir);
    snprintf(rotated, sizeof rotated, "%s.1", jsonl);
    snprintf(ds9, sizeof ds9, "%s/regions", d.dir);
    ck_assert_int_eq(mkdir(ds9, 0755), 0);
    snprintf(sinks, sizeof sinks,
             " \"sinks\": {\"jsonl\": {\"path\": \"%s\"}, \"ds9\": {\"dir\": \"%s\"}},", jsonl,
             ds9);
    write_synth_config_feed(&d, 5.0, NULL, sinks, NULL);
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    /* detections arrive in the JSON-lines file, and the movers' track
     * reports (sinks.jsonl.tracks, on by default); then it is rotated away */
    double t1 = now_s();
    while ((jsonl_lines(jsonl) <= 0 || g_track_lines <= 0) && now_s() - t1 < 30.0)
        sleep_s(0.05);
    ck_assert_int_gt(jsonl_lines(jsonl), 0);
    ck_assert_msg(g_track_lines > 0, "no track line in the JSON-lines file");
    /* and a DS9 region file per frame with results (sinks.ds9.dir) */
    DIR *dp = opendir(ds9);
    ck_assert_ptr_nonnull(dp);
    struct dirent *de;
    int regions = 0;
    while ((de = readdir(dp)))
        if (strncmp(de->d_name, "f0-", 3) == 0 && strstr(de->d_name, ".reg")) {
            char rp[600];
            snprintf(rp, sizeof rp, "%s/%s", ds9, de->d_name);
            char *text = read_all(rp);
            ck_assert_ptr_nonnull(text);
            ck_assert(strncmp(text, "# Region file format: DS9 version 4.1\n", 38) == 0);
            ck_assert_ptr_nonnull(strstr(text, "\nimage\n"));
            free(text);
            regions++;
        }
    closedir(dp);
    ck_assert_msg(regions > 0, "no DS9 region file");
    ck_assert_int_eq(rename(jsonl, rotated), 0);
    ss_config_t *c = malloc(sizeof *c);
    running_config(&d, c);
    ck_assert_double_eq(c->feeds[0].pipeline.thresh, 5.0);
    ck_assert_str_eq(c->publish_endpoint, d.pub);

    /* a valid file with a reloadable key changed */
    write_synth_config_feed(&d, 6.5, NULL, sinks, NULL);
    kill(d.pid, SIGHUP);
    double t0 = now_s();
    do {
        sleep_s(0.05);
        running_config(&d, c);
    } while (c->feeds[0].pipeline.thresh != 6.5 && now_s() - t0 < 20.0);
    ck_assert_double_eq(c->feeds[0].pipeline.thresh, 6.5);
    t0 = now_s();
    while (!log_contains(&d, "pipeline config applied") && now_s() - t0 < 20.0)
        sleep_s(0.05);
    ck_assert(log_contains(&d, "pipeline config applied"));
    /* the reload reopened the sink: a new file at the configured path */
    t0 = now_s();
    while (jsonl_lines(jsonl) <= 0 && now_s() - t0 < 30.0)
        sleep_s(0.05);
    ck_assert_msg(jsonl_lines(jsonl) > 0, "no new JSON-lines file after the reload");
    ck_assert_int_gt(jsonl_lines(rotated), 0);

    /* an invalid file: rejected with the reason, the old config stays */
    write_text(d.cfg, "{ \"feeds\": [ { \"name\": \"f0\" ] }\n");
    kill(d.pid, SIGHUP);
    t0 = now_s();
    while (!log_contains(&d, "reload rejected") && now_s() - t0 < 20.0)
        sleep_s(0.05);
    ck_assert(log_contains(&d, "reload rejected"));
    ck_assert(log_contains(&d, "invalid JSON"));
    running_config(&d, c);
    ck_assert_double_eq(c->feeds[0].pipeline.thresh, 6.5);
    ck_assert(dmn_alive(&d, NULL));

    /* issue 10: a dark that cannot hold the frames now arriving (16×16
     * against W×H) would fail every frame: rejected, naming the key */
    char dark[200];
    snprintf(dark, sizeof dark, "%s/dark16.fits", d.dir);
    write_master(dark, 16, 16);
    char pipe_extra[300];
    snprintf(pipe_extra, sizeof pipe_extra, ", \"dark\": \"%s\"", dark);
    write_synth_config_feed(&d, 7.0, NULL, sinks, pipe_extra);
    kill(d.pid, SIGHUP);
    t0 = now_s();
    while (!log_contains(&d, "does not hold the processed region") && now_s() - t0 < 20.0)
        sleep_s(0.05);
    ck_assert(log_contains(&d, "feeds[0].pipeline.dark"));
    ck_assert(log_contains(&d, "does not hold the processed region"));
    running_config(&d, c);
    ck_assert_double_eq(c->feeds[0].pipeline.thresh, 6.5);
    ck_assert_str_eq(c->feeds[0].pipeline.dark, "");

    /* a file that changes a key that is not reloadable: rejected, named */
    char other[200];
    snprintf(other, sizeof other, "ipc://%s/pub2", d.dir);
    {
        char dk[1024];
        snprintf(dk, sizeof dk,
                 "\"log_level\": \"info\", \"control\": {\"endpoint\": \"%s\"},"
                 " \"publish\": {\"endpoint\": \"%s\"}, \"status_interval\": 0.2",
                 d.ctl, other);
        write_text(d.cfg,
                   "{ %s, \"feeds\": [ { \"name\": \"f0\", \"source\": {\"type\": \"synth\","
                   " \"synth\": {\"rate\": 20, \"width\": %d, \"height\": %d}},"
                   " \"limits\": {\"max_width\": %d, \"max_height\": %d}, %s } ] }\n",
                   dk, W, H, W, H, pipeline_keys(8.0));
    }
    kill(d.pid, SIGHUP);
    t0 = now_s();
    while (!log_contains(&d, "publish.endpoint") && now_s() - t0 < 20.0)
        sleep_s(0.05);
    ck_assert(log_contains(&d, "publish.endpoint cannot change without a restart"));
    running_config(&d, c);
    ck_assert_double_eq(c->feeds[0].pipeline.thresh, 6.5);
    ck_assert_str_eq(c->publish_endpoint, d.pub);

    ss_proto_status_t *st = stats_of(&d);
    ck_assert_str_eq(st->feeds[0].state, "running");
    free(st);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    free(c);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * SIGTERM drains
 * ==================================================================== */

#define DRAIN_FRAMES 40

START_TEST(test_sigterm_drains)
{
    dmn_t d;
    dmn_init(&d);
    write_zmq_config(&d, 2, "block");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);
    sender_t s;
    sender_open(&s, &d, 0);
    for (int i = 0; i < DRAIN_FRAMES; i++)
        sender_send(&s, NULL);
    /* stop while frames are queued and in flight */
    double t0 = now_s();
    for (;;) {
        ss_proto_status_t *st = stats_of(&d);
        ck_assert_ptr_nonnull(st);
        uint64_t received = st->feeds[0].received;
        free(st);
        if (received >= 12)     /* past the warm-up: some frames have residuals */
            break;
        ck_assert(now_s() - t0 < 60.0);
        sleep_s(0.01);
    }
    kill(d.pid, SIGTERM);

    /* everything the daemon processed reaches the subscriber */
    int dets = 0, residuals = 0, tracks = 0, status_after = 0;
    t0 = now_s();
    int exited = 0, code = -1;
    double quiet_since = now_s();
    while (now_s() - t0 < 60.0) {
        int st;
        if (!exited && !dmn_alive(&d, &st)) {
            exited = 1;
            code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        }
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) == SS_OK) {
            ss_msg_type_t t = ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL);
            dets += t == SS_MSG_DETECTIONS;
            residuals += t == SS_MSG_RESIDUAL;
            tracks += t == SS_MSG_TRACKS;
            status_after += t == SS_MSG_STATUS;
            ss_proto_rx_close(&rx);
            quiet_since = now_s();
        } else if (exited && now_s() - quiet_since > 1.0) {
            break;
        }
    }
    ck_assert(exited);
    ck_assert_int_eq(code, 0);
    final_t f;
    ck_assert_msg(final_counters(&d, "f0", &f) == 0, "no final counters in the log");
    fprintf(stderr, "drain: sent %d, received %llu, processed %llu, dropped %llu; subscriber got %d "
            "detections + %d residuals\n", DRAIN_FRAMES, f.received, f.processed, f.dropped, dets,
            residuals);
    ck_assert_uint_ge(f.received, 12);
    ck_assert_uint_le(f.received, DRAIN_FRAMES);
    ck_assert_uint_eq(f.rejected, 0);
    ck_assert_uint_eq(f.received, f.accepted + f.rejected);
    ck_assert_uint_eq(f.accepted, f.processed + f.dropped);
    ck_assert_uint_eq(f.dropped, 0);                    /* block policy: nothing dropped */
    ck_assert_uint_eq((unsigned long long)dets, f.processed);
    ck_assert_uint_eq((unsigned long long)residuals, f.processed);
    ck_assert_uint_eq(f.published, 2 * f.processed + (unsigned long long)tracks);
    ck_assert(log_contains(&d, "shutting down"));

    sender_close(&s);
    zmq_close(sub);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * control commands
 * ==================================================================== */

/* "Max open files" soft and hard limits of process pid (-1 when unread). */
static void fd_limits(pid_t pid, long long *soft, long long *hard)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/limits", (int)pid);
    FILE *fp = fopen(path, "r");
    *soft = *hard = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "Max open files %lld %lld", soft, hard) == 2)
            break;
    if (fp)
        fclose(fp);
}

START_TEST(test_control_commands)
{
    dmn_t d;
    dmn_init(&d);
    write_synth_config(&d, 5.0, NULL);
    /* issue 11: started with a soft limit of 256 open files, the daemon
     * raises it to the hard limit */
    struct rlimit rl0, rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl0), 0);
    rl = rl0;
    rl.rlim_cur = rl0.rlim_max > 256 ? 256 : rl0.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    dmn_start(&d, NULL);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl0), 0);
    dmn_wait_ready(&d);
    long long soft, hard;
    fd_limits(d.pid, &soft, &hard);
    ck_assert_msg(soft > 0 && soft == hard, "open files: soft %lld, hard %lld", soft, hard);
    if (rl0.rlim_max > 256)
        ck_assert(log_contains(&d, "open files: soft limit raised from 256"));
    ss_ctl_response_t r;
    ss_proto_error_t err;
    ss_proto_status_t *st = malloc(sizeof *st);

    /* status: the summary */
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_STATUS, NULL, &r), 0);
    ck_assert(r.ok);
    ck_assert_str_eq(r.cmd, "status");
    ck_assert_int_eq(ss_proto_decode_status_body(r.body, strlen(r.body), st, &err), SS_OK);
    ck_assert_int_eq(st->n_feeds, 1);
    ck_assert_str_eq(st->feeds[0].name, "f0");
    ck_assert_str_eq(st->feeds[0].backend, test_backend());
    ck_assert_ptr_nonnull(strstr(st->feeds[0].source, "synth"));
    ck_assert_ptr_nonnull(strstr(st->version, "."));
    ss_ctl_response_free(&r);

    /* stats: every counter, consistent */
    double t0 = now_s();
    for (;;) {
        free(st);
        st = stats_of(&d);
        if (st->feeds[0].status_count[SS_STATUS_OK] >= 2 || now_s() - t0 > 60.0)
            break;
        sleep_s(0.1);
    }
    const ss_proto_feed_stats_t *fs = &st->feeds[0];
    ck_assert_uint_ge(fs->status_count[SS_STATUS_OK], 2);
    ck_assert_uint_eq(fs->received, fs->accepted + fs->rejected);
    ck_assert_uint_ge(fs->accepted, fs->processed + fs->dropped_queue);
    ck_assert_uint_eq(fs->status_count[SS_STATUS_REFERENCE], 1);
    ck_assert_int_eq(fs->queue_capacity, 4);
    ck_assert(fs->total_ms > 0);
    ck_assert(isfinite(fs->last_mjd));
    ck_assert_uint_eq(fs->resets, 0);

    /* reset: the history goes, the next frame becomes the reference */
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_RESET, "f0", &r), 0);
    ck_assert(r.ok);
    ck_assert_str_eq(r.cmd, "reset");
    ck_assert_str_eq(r.body, "{\"feeds\":[\"f0\"]}");
    ss_ctl_response_free(&r);
    t0 = now_s();
    do {
        free(st);
        st = stats_of(&d);
        sleep_s(0.05);
    } while (st->feeds[0].status_count[SS_STATUS_REFERENCE] < 2 && now_s() - t0 < 30.0);
    ck_assert_uint_eq(st->feeds[0].status_count[SS_STATUS_REFERENCE], 2);
    ck_assert_uint_eq(st->feeds[0].resets, 1);

    /* config: the effective config */
    ss_config_t *c = malloc(sizeof *c);
    running_config(&d, c);
    ck_assert_int_eq(c->n_feeds, 1);
    ck_assert_str_eq(c->feeds[0].name, "f0");
    ck_assert_int_eq(c->feeds[0].synth.gen.width, W);
    ck_assert_str_eq(c->control_endpoint, d.ctl);

    /* reload: ok for the same file; the reason when the file is bad */
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_RELOAD, NULL, &r), 0);
    ck_assert_msg(r.ok, "%s", r.error);
    ss_ctl_response_free(&r);
    write_text(d.cfg, "{\"feeds\": []}\n");
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_RELOAD, NULL, &r), 0);
    ck_assert(!r.ok);
    ck_assert_str_eq(r.cmd, "reload");
    ck_assert_ptr_nonnull(strstr(r.error, d.cfg));
    ss_ctl_response_free(&r);

    /* bad requests: unknown command, not JSON, unknown feed */
    ck_assert_int_eq(ctl_request(&d, "{\"cmd\": \"frobnicate\"}", &r, 5.0), 0);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.error, "unknown command"));
    ss_ctl_response_free(&r);
    ck_assert_int_eq(ctl_request(&d, "status please", &r, 5.0), 0);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.error, "not valid JSON"));
    ss_ctl_response_free(&r);
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_STATS, "nope", &r), 0);
    ck_assert(!r.ok);
    ck_assert_ptr_nonnull(strstr(r.error, "nope"));
    ss_ctl_response_free(&r);
    /* the one request limit (4096 bytes): a request of 4096 is read, longer
     * ones up to 1 MiB get an answer that says so (issue 10: 4-64 KiB were
     * refused by the decoder and over 64 KiB got no answer at all) */
    static char big[200001];
    for (int k = 0; k < 3; k++) {
        static const int sizes[] = { SS_PROTO_CTL_REQUEST_MAX, 10000, 200000 };
        const int len = sizes[k];
        snprintf(big, sizeof big, "{\"cmd\": \"status\", \"feed\": \"f0\"}");
        const size_t head = strlen(big);
        memset(big + head, ' ', (size_t)len - head);     /* JSON whitespace */
        big[len] = '\0';
        ck_assert_int_eq(ctl_request(&d, big, &r, 5.0), 0);
        if (k == 0) {
            ck_assert_msg(r.ok, "%s", r.error);
        } else {
            ck_assert(!r.ok);
            ck_assert_msg(strstr(r.error, "too long") && strstr(r.error, "4096"), "%s", r.error);
        }
        ss_ctl_response_free(&r);
    }
    /* and it still serves */
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_STATS, "f0", &r), 0);
    ck_assert(r.ok);
    ss_ctl_response_free(&r);

    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    free(c);
    free(st);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * hostile input
 * ==================================================================== */

START_TEST(test_hostile_input)
{
    dmn_t d;
    dmn_init(&d);
    write_zmq_config(&d, 4, "block");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    sender_t s;
    sender_open(&s, &d, 0);
    int hl = sender_next(&s, NULL);
    size_t bytes = ss_frame_bytes(&s.f);
    char *bad = malloc((size_t)hl + 64);

    /* 1. not JSON */
    ss_proto_part_t p1[2] = { { "{not json", 9 }, { s.f.pixels, bytes } };
    send_parts(s.sock, p1, 2);
    /* 2. a header without its pixel part (truncated message) */
    ss_proto_part_t p2[1] = { { s.hdr, (size_t)hl } };
    send_parts(s.sock, p2, 1);
    /* 3. a pixel part of the wrong size */
    ss_proto_part_t p3[2] = { { s.hdr, (size_t)hl }, { s.f.pixels, 1000 } };
    send_parts(s.sock, p3, 2);
    /* 4. too many parts */
    ss_proto_part_t p4[5] = { { s.hdr, (size_t)hl }, { s.f.pixels, bytes }, { "x", 1 },
                              { "y", 1 }, { "z", 1 } };
    send_parts(s.sock, p4, 5);
    /* 5. an unknown dtype */
    ck_assert_ptr_nonnull(strstr(s.hdr, "\"u16\""));
    ss_strlcpy(bad, s.hdr, (size_t)hl + 64);
    memcpy(strstr(bad, "\"u16\""), "\"c64\"", 5);
    ss_proto_part_t p5[2] = { { bad, (size_t)hl }, { s.f.pixels, bytes } };
    send_parts(s.sock, p5, 2);
    /* 6. a mask part with a value other than 0/1 */
    uint8_t *mask = malloc((size_t)W * H);
    memset(mask, 1, (size_t)W * H);
    mask[1000] = 7;
    ss_proto_part_t p6[3] = { { s.hdr, (size_t)hl }, { s.f.pixels, bytes }, { mask, (size_t)W * H } };
    send_parts(s.sock, p6, 3);
    /* 7. a header that is a JSON array */
    ss_proto_part_t p7[2] = { { "[1,2,3]", 7 }, { s.f.pixels, bytes } };
    send_parts(s.sock, p7, 2);
    /* 8. not hostile: a float frame of NaN only (every pixel invalid) is
     * accepted and processed (its status says what became of it) */
    {
        ss_frame_t nf = { .width = W, .height = H, .dtype = SS_DT_F32 };
        nf.capacity = (size_t)W * H * sizeof(float);
        float *nan_px = malloc(nf.capacity);
        for (size_t i = 0; i < (size_t)W * H; i++)
            nan_px[i] = NAN;
        nf.pixels = nan_px;
        ss_frame_meta_clear(&nf.meta);
        nf.meta.seq = 1000;
        nf.meta.mjd_obs = 61000.5;
        char nh[4096];
        int nl = ss_proto_encode_frame_header(&nf, nh, sizeof nh);
        ck_assert_int_gt(nl, 0);
        ss_proto_part_t p8[2] = { { nh, (size_t)nl }, { nan_px, nf.capacity } };
        send_parts(s.sock, p8, 2);
        free(nan_px);
    }
    /* then good frames: still served */
    for (int i = 0; i < 3; i++)
        sender_send(&s, NULL);

    ss_proto_status_t *st = stats_when_processed(&d, 4, 60.0);
    const ss_proto_feed_stats_t *fs = &st->feeds[0];
    ck_assert_uint_eq(fs->processed, 4);
    ck_assert_uint_eq(fs->accepted, 4);
    ck_assert_uint_eq(fs->received, 11);
    ck_assert_uint_eq(fs->rejected, 7);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_NOT_JSON], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_MISSING_PART], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_DATA_SIZE], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_TOO_MANY_PARTS], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_UNKNOWN_DTYPE], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_BAD_VALUE], 1);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_NOT_OBJECT], 1);
    ck_assert(log_contains(&d, "message rejected"));
    /* 9. a part over ZMQ_MAXMSGSIZE: libzmq ends that connection before
     * anything reaches the daemon; the disconnect is counted and logged,
     * the daemon goes on (issue 10) */
    {
        void *big = zmq_socket(zctx, ZMQ_PUSH);
        int linger = 5000;
        zmq_setsockopt(big, ZMQ_LINGER, &linger, sizeof linger);
        ck_assert_int_eq(zmq_connect(big, d.in), 0);
        const size_t nbig = (size_t)W * H * 8 + ((size_t)1 << 20);
        char *huge = calloc(1, nbig);
        ck_assert_ptr_nonnull(huge);
        ss_proto_part_t p9[2] = { { s.hdr, (size_t)hl }, { huge, nbig } };
        send_parts(big, p9, 2);
        const double t0 = now_s();
        while (!log_contains(&d, "disconnected (a part over the size limit") && now_s() - t0 < 20.0)
            sleep_s(0.05);
        ck_assert(log_contains(&d, "disconnected (a part over the size limit"));
        zmq_close(big);
        free(huge);
    }
    sender_send(&s, NULL);
    free(st);
    st = stats_when_processed(&d, 5, 60.0);
    ck_assert_uint_eq(st->feeds[0].processed, 5);
    free(st);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    final_t f;
    ck_assert_int_eq(final_counters(&d, "f0", &f), 0);
    ck_assert_uint_eq(f.received, 12);
    ck_assert_uint_eq(f.processed, 5);
    char *log = read_all(d.log);
    const char *pd = log ? strstr(log, "peer_disconnects=") : NULL;
    ck_assert_ptr_nonnull(pd);
    ck_assert_int_ge(atoi(pd + strlen("peer_disconnects=")), 1);
    free(log);

    free(mask);
    free(bad);
    sender_close(&s);
    dmn_cleanup(&d);
}
END_TEST


/* ======================================================================
 * source.zmq.format "adzmq": frames as EPICS areaDetector's NDPluginZMQ
 * sends them (tests/adzmq_sender.h), both forms
 * ==================================================================== */

#define ADZMQ_FRAMES 16

/* Send the sender's next frame as NDPluginZMQ would: [header, array]; the
 * header's form (current or pre-1.4), type and codec as given. */
static void adzmq_send(sender_t *s, int current, const char *type, const char *codec,
                       ss_synth_truth_t *truth)
{
    ck_assert_int_eq(ss_synth_next(s->gen, &s->f, truth), SS_OK);
    const double ts = (s->f.meta.mjd_obs - SS_EPICS_EPOCH_MJD) * 86400.0;
    int hl = ss_test_adzmq_header(s->hdr, sizeof s->hdr, current, type, s->f.width, s->f.height,
                                  (long)s->f.meta.seq, ts, codec, "{\"Camera\":\"sim\"}");
    ck_assert(hl > 0 && (size_t)hl < sizeof s->hdr);
    ss_proto_part_t p[2] = { { s->hdr, (size_t)hl }, { s->f.pixels, ss_frame_bytes(&s->f) } };
    send_parts(s->sock, p, 2);
}

START_TEST(test_adzmq_source)
{
    dmn_t d;
    dmn_init(&d);
    write_zmq_config_format(&d, 4, "block", "adzmq");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);
    sender_t s;
    sender_open(&s, &d, MOVERS);
    ss_synth_truth_t truth[ADZMQ_FRAMES + 3];
    double mjd[ADZMQ_FRAMES + 3];
    /* the current form, then pre-1.4; among them a compressed array, a
     * type skysieve does not take and this protocol's own header, each
     * rejected and counted (the sequence numbers they use are skipped) */
    int sent = 0;
    for (int i = 0; i < ADZMQ_FRAMES + 3; i++) {
        if (i == 5)
            adzmq_send(&s, 1, "uint16", "blosc", &truth[i]);
        else if (i == 9)
            adzmq_send(&s, 0, "uint32", "", &truth[i]);
        else if (i == 12)
            sender_send(&s, &truth[i]);
        else {
            adzmq_send(&s, i < ADZMQ_FRAMES / 2, "uint16", i % 2 ? "" : NULL, &truth[i]);
            sent++;
        }
        mjd[i] = s.f.meta.mjd_obs;
    }
    ck_assert_int_eq(sent, ADZMQ_FRAMES);

    /* each accepted frame's detections message carries its uniqueId as seq,
     * its timeStamp as the time and its attributes as meta */
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, 1, 1000), 0);
    ss_proto_limits_t lim = limits();
    int n_det = 0, n_ok = 0, dets = 0, seen[ADZMQ_FRAMES + 3] = { 0 };
    const double t0 = now_s();
    while (n_det < ADZMQ_FRAMES && now_s() - t0 < 120.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) != SS_OK)
            continue;
        ss_proto_error_t err;
        if (ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL) == SS_MSG_DETECTIONS) {
            ck_assert_msg(ss_proto_decode_detections(rx.part, rx.n, &lim, &res, &err) == SS_OK,
                          "%s", err.text);
            const uint64_t k = res.meta.seq;
            ck_assert_uint_lt(k, ADZMQ_FRAMES + 3);
            ck_assert(k != 5 && k != 9 && k != 12);
            ck_assert_uint_eq(truth[k].seq, k);
            ck_assert_msg(fabs(res.meta.mjd_obs - mjd[k]) * 86400.0 < 1e-3,
                          "frame %d: mjd %.9f, sent %.9f", (int)k, res.meta.mjd_obs, mjd[k]);
            ck_assert_str_eq(res.meta.meta_json, "{\"Camera\":\"sim\"}");
            n_ok += res.status == SS_STATUS_OK;
            dets += res.dets.count;
            n_det++;
            seen[k]++;
        }
        ss_proto_rx_close(&rx);
    }
    if (n_det != ADZMQ_FRAMES) {
        ss_proto_status_t *st = stats_of(&d);
        char got[256] = "";
        for (int k = 0; k < ADZMQ_FRAMES + 3; k++)
            if (seen[k])
                snprintf(got + strlen(got), sizeof got - strlen(got), " %d", k);
        for (int r = 1; st && r < SS_PR__COUNT; r++)
            if (st->feeds[0].rejected_by[r])
                snprintf(got + strlen(got), sizeof got - strlen(got), " %s=%llu",
                         ss_proto_reason_name((ss_proto_reason_t)r),
                         (unsigned long long)st->feeds[0].rejected_by[r]);
        ck_abort_msg("%d detections messages of %d (seqs%s); processed %llu, received %llu, "
                     "rejected %llu", n_det, ADZMQ_FRAMES, got,
                     st ? (unsigned long long)st->feeds[0].processed : 0ull,
                     st ? (unsigned long long)st->feeds[0].received : 0ull,
                     st ? (unsigned long long)st->feeds[0].rejected : 0ull);
    }
    ck_assert_int_gt(n_ok, 0);
    ck_assert_int_gt(dets, 0);

    ss_proto_status_t *st = stats_when_processed(&d, ADZMQ_FRAMES, 60.0);
    const ss_proto_feed_stats_t *fs = &st->feeds[0];
    ck_assert_uint_eq(fs->processed, ADZMQ_FRAMES);
    ck_assert_uint_eq(fs->received, ADZMQ_FRAMES + 3);
    ck_assert_uint_eq(fs->rejected, 3);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_UNKNOWN_DTYPE], 2);
    ck_assert_uint_eq(fs->rejected_by[SS_PR_MISSING_FIELD], 1);
    ck_assert_uint_eq(fs->last_seq, ADZMQ_FRAMES + 2);
    ck_assert_ptr_nonnull(strstr(fs->source, "(adzmq)"));
    free(st);
    /* the first rejection is logged (the later ones within 5 s are counted) */
    ck_assert(log_contains(&d, "compressed arrays are not accepted"));

    ss_result_free(&res);
    zmq_close(sub);
    sender_close(&s);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * drop_oldest: a full queue drops, and every drop is counted
 * ==================================================================== */

#define BURST_FRAMES 30

START_TEST(test_drop_oldest_counted)
{
    dmn_t d;
    dmn_init(&d);
    write_zmq_config(&d, 1, "drop_oldest");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);
    sender_t s;
    sender_open(&s, &d, 0);
    /* a burst: the source takes a frame in microseconds, the pipeline in
     * a millisecond or so (less on a GPU than the rendering of a frame:
     * the frames are rendered first, then sent back to back), so a queue
     * of one must drop */
    static char hdrs[BURST_FRAMES][4096];
    int hls[BURST_FRAMES];
    const size_t fb = (size_t)W * H * 2;
    uint8_t *pix = malloc((size_t)BURST_FRAMES * fb);
    ck_assert_ptr_nonnull(pix);
    for (int i = 0; i < BURST_FRAMES; i++) {
        hls[i] = sender_next(&s, NULL);
        ck_assert_int_le(hls[i], (int)sizeof hdrs[i]);
        memcpy(hdrs[i], s.hdr, (size_t)hls[i]);
        memcpy(pix + (size_t)i * fb, s.f.pixels, fb);
    }
    for (int i = 0; i < BURST_FRAMES; i++) {
        ss_proto_part_t p[2] = { { hdrs[i], (size_t)hls[i] }, { pix + (size_t)i * fb, fb } };
        send_parts(s.sock, p, 2);
    }
    free(pix);
    ss_proto_status_t *st = NULL;
    double t0 = now_s();
    do {
        free(st);
        sleep_s(0.05);
        st = stats_of(&d);
    } while (st->feeds[0].processed + st->feeds[0].dropped_queue < BURST_FRAMES &&
             now_s() - t0 < 60.0);
    const ss_proto_feed_stats_t *fs = &st->feeds[0];
    ck_assert_uint_eq(fs->received, BURST_FRAMES);
    ck_assert_uint_eq(fs->accepted, BURST_FRAMES);
    ck_assert_uint_eq(fs->processed + fs->dropped_queue, BURST_FRAMES);
    ck_assert_uint_gt(fs->dropped_queue, 0);
    ck_assert_uint_gt(fs->processed, 0);
    /* the newest frame always survives a drop_oldest queue */
    ck_assert_uint_eq(fs->last_seq, BURST_FRAMES - 1);
    fprintf(stderr, "drop_oldest: %d sent, %llu processed, %llu dropped\n", BURST_FRAMES,
            (unsigned long long)fs->processed, (unsigned long long)fs->dropped_queue);
    /* one detections message per processed frame, none for the dropped */
    int dets = 0;
    t0 = now_s();
    while (dets < (int)fs->processed && now_s() - t0 < 20.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) == SS_OK) {
            dets += ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL) == SS_MSG_DETECTIONS;
            ss_proto_rx_close(&rx);
        }
    }
    ck_assert_int_eq(dets, (int)fs->processed);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    final_t f;
    ck_assert_int_eq(final_counters(&d, "f0", &f), 0);
    ck_assert_uint_eq(f.accepted, f.processed + f.dropped);
    ck_assert_uint_eq(f.dropped, fs->dropped_queue);
    free(st);
    sender_close(&s);
    zmq_close(sub);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * FITS glob mode: DATE-OBS order, move after, exit_at_end
 * ==================================================================== */

#define GLOB_FILES 6

START_TEST(test_fits_glob_exit_at_end)
{
    dmn_t d;
    dmn_init(&d);
    char in[128], done[128], dk[1024], pattern[160], path[300];
    snprintf(in, sizeof in, "%s/in", d.dir);
    snprintf(done, sizeof done, "%s/done", d.dir);
    snprintf(pattern, sizeof pattern, "%s/*.fits", in);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(done, 0755), 0);
    log_level = "debug";        /* the source logs each file it takes */
    daemon_keys(&d, dk, sizeof dk);
    write_text(d.cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"glob\", \"pattern\": \"%s\","
               " \"after\": \"move\", \"move_dir\": \"%s\", \"exit_at_end\": true}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 2, \"policy\": \"block\"}, %s } ] }\n",
               dk, pattern, done, W, H, pipeline_keys(5.0));
    /* names run against time: z_0 is the earliest frame, u_5 the latest */
    ss_synth_cfg_t c;
    scene(&c, 0);
    ss_synth_t *gen = ss_synth_new(&c);
    ss_frame_t f = { .capacity = (size_t)W * H * 2 };
    f.pixels = malloc(f.capacity);
    for (int i = 0; i < GLOB_FILES; i++) {
        ck_assert_int_eq(ss_synth_next(gen, &f, NULL), SS_OK);
        snprintf(path, sizeof path, "%s/%c_%d.fits", in, 'z' - i, i);
        write_fits(path, &f);
    }
    dmn_start(&d, NULL);
    /* it stops by itself, after draining, with exit status 0 */
    const int st = dmn_wait_exit(&d, 60.0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    ck_assert(log_contains(&d, "exit_at_end"));
    final_t fc;
    ck_assert_int_eq(final_counters(&d, "f0", &fc), 0);
    ck_assert_uint_eq(fc.received, GLOB_FILES);
    ck_assert_uint_eq(fc.processed, GLOB_FILES);
    /* moved after reading */
    for (int i = 0; i < GLOB_FILES; i++) {
        snprintf(path, sizeof path, "%s/%c_%d.fits", in, 'z' - i, i);
        ck_assert_msg(access(path, F_OK) != 0, "%s was not moved", path);
        snprintf(path, sizeof path, "%s/%c_%d.fits", done, 'z' - i, i);
        ck_assert_msg(access(path, F_OK) == 0, "%s is missing", path);
    }
    /* taken in DATE-OBS order (z_0 first), not in name order (u_5 first) */
    char *log = read_all(d.log);
    const char *p = log;
    for (int i = 0; i < GLOB_FILES; i++) {
        char name[64];
        snprintf(name, sizeof name, "/%c_%d.fits", 'z' - i, i);
        const char *q = strstr(p, name);
        ck_assert_msg(q != NULL, "%s not logged in order", name);
        p = q + 1;
    }
    free(log);
    free(f.pixels);
    ss_synth_destroy(&gen);
    dmn_cleanup(&d);
}
END_TEST

/* A batch feed "f0": the FITS files of <d.dir>/in (glob, exit_at_end,
 * queue.policy block, depth 2), residual files into <d.dir>/res and, when
 * jsonl is not NULL, detection lines into it; in and res (128 bytes each)
 * get the two directories, created here. */
static void batch_config(dmn_t *d, const char *jsonl, char *in, char *res)
{
    char dk[1024], lines[300] = "";
    snprintf(in, 128, "%s/in", d->dir);
    snprintf(res, 128, "%s/res", d->dir);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(res, 0755), 0);
    if (jsonl)
        snprintf(lines, sizeof lines, ", \"jsonl\": {\"path\": \"%s\"}", jsonl);
    daemon_keys(d, dk, sizeof dk);
    write_text(d->cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"glob\", \"pattern\": \"%s/*.fits\","
               " \"exit_at_end\": true}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": 2, \"policy\": \"block\"},"
               " \"sinks\": {\"fits\": {\"dir\": \"%s\"}%s}, %s } ] }\n",
               dk, in, W, H, res, lines, pipeline_keys(5.0));
}


/* Issue 10, item 2: residual files never collide. Frames from FITS files
 * without SEQ take the source's arrival number (all had seq 0 and
 * overwrote one file); the same frame taken twice (a file copied in under
 * two names: same SEQ, same DATE-OBS) gets the rule's "-1" name instead
 * of replacing the first. 4 files in, 4 residual files out. */
static void drop_seq(const char *path)
{
    fitsfile *fp;
    int status = 0;
    ck_assert_int_eq(fits_open_file(&fp, path, READWRITE, &status), 0);
    fits_delete_key(fp, "SEQ", &status);
    fits_close_file(fp, &status);
    ck_assert_int_eq(status, 0);
}

START_TEST(test_residual_names_unique)
{
    dmn_t d;
    dmn_init(&d);
    char in[128], res[128], path[300], copy[300];
    batch_config(&d, NULL, in, res);
    ss_synth_cfg_t c;
    scene(&c, 0);
    ss_synth_t *gen = ss_synth_new(&c);
    ss_frame_t f = { .capacity = (size_t)W * H * 2 };
    f.pixels = malloc(f.capacity);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ss_synth_next(gen, &f, NULL), SS_OK);
        snprintf(path, sizeof path, "%s/a_%d.fits", in, i);
        write_fits(path, &f);
        if (i < 2)
            drop_seq(path);
    }
    snprintf(copy, sizeof copy, "cp '%s/a_2.fits' '%s/b_2.fits'", in, in);
    ck_assert_int_eq(system(copy), 0);
    dmn_start(&d, NULL);
    const int st = dmn_wait_exit(&d, 60.0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
    final_t fc;
    ck_assert_int_eq(final_counters(&d, "f0", &fc), 0);
    ck_assert_uint_eq(fc.processed, 4);
    ck_assert_int_eq(count_files(res), 4);
    /* a_0 and a_1 without SEQ: arrival numbers 1 and 2; a_2 and its copy
     * b_2: SEQ 2 (the synthetic frames count from 0) and the same DATE-OBS,
     * so one of them is the "-1" twin */
    ck_assert_int_eq(residual_named(res, "f0", 1, path, sizeof path), 1);
    ck_assert_int_eq(residual_named(res, "f0", 2, path, sizeof path), 3);
    int twins = 0;
    DIR *dp = opendir(res);
    for (struct dirent *e; (e = readdir(dp));)
        twins += strstr(e->d_name, "Z-1.fits") != NULL;
    closedir(dp);
    ck_assert_int_eq(twins, 1);
    free(f.pixels);
    ss_synth_destroy(&gen);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 10, item 3: a control endpoint whose directory does not exist
 * (/run/skysieve when run by hand) moves to $XDG_RUNTIME_DIR for any
 * config, not only the built-in one, and the log says where; a reload of
 * the same file still works (the config keeps the configured value).
 * Before, such a config exited 1 ("cannot bind"). */
START_TEST(test_control_fallback)
{
    dmn_t d;
    dmn_init(&d);
    snprintf(d.ctl, sizeof d.ctl, "ipc://%s/missing/control", d.dir);
    write_synth_config(&d, 5.0, NULL);
    char xdg[200];
    snprintf(xdg, sizeof xdg, "XDG_RUNTIME_DIR=%s", d.dir);
    const char *env[] = { xdg, NULL };
    dmn_start(&d, env);
    snprintf(d.ctl, sizeof d.ctl, "ipc://%s/skysieve-control", d.dir);
    dmn_wait_ready(&d);
    ck_assert(log_contains(&d, "the control socket is on"));
    ck_assert(log_contains(&d, d.ctl));
    ss_ctl_response_t r;
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_RELOAD, NULL, &r), 0);
    ck_assert_msg(r.ok, "%s", r.error);
    ss_ctl_response_free(&r);
    /* skysieve-ctl (item 5) finds it from the same config file, as the
     * daemon moved it: status and reload answered, an unknown feed refused */
    static const struct { const char *args; int code; const char *want; } ctl[] = {
        { "status", 0, "\"ok\":true" },
        { "--feed f0 stats", 0, "\"processed\"" },
        { "reload", 0, "\"ok\":true" },
        { "--feed nope reset", 1, "nope" },
        { "frobnicate", 2, "one command expected" },
    };
    for (size_t k = 0; k < sizeof ctl / sizeof ctl[0]; k++) {
        char cmd[1024];
        static char out[1 << 16];
        snprintf(cmd, sizeof cmd, "XDG_RUNTIME_DIR='%s' '%s/tools/skysieve-ctl' --config '%s' %s 2>&1",
                 d.dir, getenv("SKYSIEVE_BINARY_DIR"), d.cfg, ctl[k].args);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        size_t got = fread(out, 1, sizeof out - 1, p);
        out[got] = '\0';
        const int st = pclose(p);
        ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == ctl[k].code, "%s: status %d: %s",
                      ctl[k].args, WEXITSTATUS(st), out);
        ck_assert_msg(strstr(out, ctl[k].want), "%s: %s", ctl[k].args, out);
    }
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 10, item 4: source.fits.after moves a file only once its frame was
 * processed; a frame dropped at the drain timeout (0 s here, SIGTERM right
 * after 30 files arrive) leaves its file in the watched directory. So:
 * files moved = frames processed, files left = 30 - processed. Before,
 * every file was moved as soon as it was read. */
#define MOVE_FILES 30

START_TEST(test_fits_move_after_processing)
{
    dmn_t d;
    dmn_init(&d);
    char in[128], stage[128], done[128], dk[1024], path[300], tmp[300];
    snprintf(in, sizeof in, "%s/in", d.dir);
    snprintf(stage, sizeof stage, "%s/stage", d.dir);
    snprintf(done, sizeof done, "%s/done", d.dir);
    ck_assert_int_eq(mkdir(in, 0755), 0);
    ck_assert_int_eq(mkdir(stage, 0755), 0);
    ck_assert_int_eq(mkdir(done, 0755), 0);
    daemon_keys(&d, dk, sizeof dk);
    char *zero = strstr(dk, "\"drain_timeout\": 30");
    ck_assert_ptr_nonnull(zero);
    memcpy(zero, "\"drain_timeout\":  0", strlen("\"drain_timeout\":  0"));
    write_text(d.cfg,
               "{ %s, \"feeds\": [ { \"name\": \"f0\","
               " \"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"directory\", \"path\": \"%s\","
               " \"after\": \"move\", \"move_dir\": \"%s\"}},"
               " \"limits\": {\"max_width\": %d, \"max_height\": %d},"
               " \"queue\": {\"depth\": %d, \"policy\": \"block\"}, %s } ] }\n",
               dk, in, done, W, H, MOVE_FILES, pipeline_keys(5.0));
    ss_synth_cfg_t c;
    scene(&c, 2);
    ss_synth_t *gen = ss_synth_new(&c);
    ss_frame_t f = { .capacity = (size_t)W * H * 2 };
    f.pixels = malloc(f.capacity);
    for (int i = 0; i < MOVE_FILES; i++) {
        ck_assert_int_eq(ss_synth_next(gen, &f, NULL), SS_OK);
        snprintf(tmp, sizeof tmp, "%s/m%03d.fits", stage, i);
        write_fits(tmp, &f);
    }
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    for (int i = 0; i < MOVE_FILES; i++) {
        snprintf(tmp, sizeof tmp, "%s/m%03d.fits", stage, i);
        snprintf(path, sizeof path, "%s/m%03d.fits", in, i);
        ck_assert_int_eq(rename(tmp, path), 0);
    }
    sleep_s(0.3);
    const int st = dmn_stop(&d, SIGTERM);
    ck_assert_msg(st == 0 || st == 3, "exit %d", st);
    final_t fc;
    ck_assert_int_eq(final_counters(&d, "f0", &fc), 0);
    int left = 0, moved = 0;
    for (int i = 0; i < MOVE_FILES; i++) {
        snprintf(path, sizeof path, "%s/m%03d.fits", in, i);
        left += access(path, F_OK) == 0;
        snprintf(path, sizeof path, "%s/m%03d.fits", done, i);
        moved += access(path, F_OK) == 0;
    }
    fprintf(stderr, "move after processing: %llu processed, %llu dropped, %d moved, %d left\n",
            fc.processed, fc.dropped, moved, left);
    ck_assert_int_eq(moved, (int)fc.processed);
    ck_assert_int_eq(left, MOVE_FILES - (int)fc.processed);
    free(f.pixels);
    ss_synth_destroy(&gen);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 10: a batch (glob, exit_at_end, queue.policy block) with both file
 * sinks on a slow disk (tests/slowdisk.c: every rename and flush of a file
 * waits 25 ms, so the file sink takes ~50 ms a frame while the pipeline
 * takes a few). _i = 0: nothing is lost: one residual file per frame with
 * a residual, one JSON line per detection, nothing counted as dropped,
 * exit 0 (before, the file sinks skipped frames whenever the disk was 2
 * frames behind: 19 of 40 here, exit 0). _i = 1: the disk fails every
 * rename: the daemon exits 3 and its last lines say what was lost.
 * SKYSIEVE_BATCH_FILES sets the number of frames (default 40; the issue's
 * figure, 200 frames in 20 runs, is in docs/OPERATIONS.md with the
 * command). */
#define BATCH_FILES_DEFAULT 40

static int batch_files(void)
{
    const char *e = getenv("SKYSIEVE_BATCH_FILES");
    const int n = e ? atoi(e) : BATCH_FILES_DEFAULT;
    return n >= 1 && n <= 1000 ? n : BATCH_FILES_DEFAULT;
}

START_TEST(test_batch_slow_disk)
{
    dmn_t d;
    dmn_init(&d);
    char in[128], res[128], jl[160], path[300];
    snprintf(jl, sizeof jl, "%s/dets.jsonl", d.dir);
    batch_config(&d, jl, in, res);
    ss_synth_cfg_t c;
    scene(&c, 4);
    ss_synth_t *gen = ss_synth_new(&c);
    ss_frame_t f = { .capacity = (size_t)W * H * 2 };
    f.pixels = malloc(f.capacity);
    const int nfiles = batch_files();
    for (int i = 0; i < nfiles; i++) {
        ck_assert_int_eq(ss_synth_next(gen, &f, NULL), SS_OK);
        snprintf(path, sizeof path, "%s/f_%03d.fits", in, i);
        write_fits(path, &f);
    }
    char preload[600], asan[600];
    snprintf(preload, sizeof preload, "LD_PRELOAD=%s/tests/libss_slowdisk.so",
             getenv("SKYSIEVE_BINARY_DIR"));
    const char *ao = getenv("ASAN_OPTIONS");
    snprintf(asan, sizeof asan, "ASAN_OPTIONS=%s%sverify_asan_link_order=0", ao ? ao : "",
             ao && ao[0] ? ":" : "");
    const char *env[] = { preload, "SS_SLOWDISK_MS=25", asan, _i ? "SS_SLOWDISK_FAIL=1" : NULL,
                          NULL };
    dmn_start(&d, env);
    const int st = dmn_wait_exit(&d, 120.0 + 0.5 * nfiles);
    ck_assert(WIFEXITED(st));
    final_t fc;
    ck_assert_int_eq(final_counters(&d, "f0", &fc), 0);
    ck_assert_uint_eq(fc.processed, (unsigned)nfiles);
    char *log = read_all(d.log);
    unsigned long long dets = 0, fdrop = 1, sdrop = 1, written = 0, ferr = 0;
    const char *p = strstr(log, "feed f0 final: ");
    ck_assert_ptr_nonnull(p);
    ck_assert(sscanf(strstr(p, "detections="), "detections=%llu", &dets) == 1);
    ck_assert(sscanf(strstr(p, "sink_dropped="), "sink_dropped=%llu", &sdrop) == 1);
    ck_assert(sscanf(strstr(p, "file_dropped="), "file_dropped=%llu", &fdrop) == 1);
    ck_assert(sscanf(strstr(p, "fits_written="), "fits_written=%llu", &written) == 1);
    ck_assert(sscanf(strstr(p, "fits_errors="), "fits_errors=%llu", &ferr) == 1);
    ck_assert_msg(fdrop == 0 && sdrop == 0, "file_dropped %llu, sink_dropped %llu", fdrop, sdrop);
    if (_i == 1) {
        ck_assert_msg(WEXITSTATUS(st) == 3, "exit %d", WEXITSTATUS(st));
        ck_assert_uint_eq(written, 0);
        ck_assert_uint_ge(ferr, fc.ok);
        const char *lost = strstr(log, "results lost: feed f0: ");
        ck_assert_msg(lost && strstr(lost, "FITS"), "%s", log);
        ck_assert_ptr_nonnull(strstr(lost, "stopped (exit 3)"));
    } else {
        ck_assert_msg(WEXITSTATUS(st) == 0, "exit %d", WEXITSTATUS(st));
        ck_assert_msg(!strstr(log, "results lost"), "%s", log);
        /* one residual file per frame with a residual (every ok frame) */
        ck_assert_uint_ge(written, fc.ok);
        ck_assert_int_eq(count_files(res), (int)written);
    }
    ck_assert_uint_eq((unsigned long long)jsonl_lines(jl), dets);
    ck_assert_uint_gt(dets, 0);
    free(log);
    free(f.pixels);
    ss_synth_destroy(&gen);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * command line
 * ==================================================================== */

static int run_cli(const char *args, char *out, size_t n)
{
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    ck_assert_ptr_nonnull(bd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s/daemon/skysieved' %s 2>&1", bd, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(test_command_line)
{
    static char out[1 << 20];
    ck_assert_int_eq(run_cli("--version", out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "skysieved "));
    ck_assert_int_eq(run_cli("--help", out, sizeof out), 0);
    for (const char *o = "--config\0--check-config\0--print-default-config\0--version\0--log-level\0"
                         "--print-config-reference\0";
         *o; o += strlen(o) + 1)
        ck_assert_msg(strstr(out, o) != NULL, "--help does not mention %s", o);
    ck_assert_int_eq(run_cli("--frobnicate", out, sizeof out), 2);
    /* README.md carries the key table's reference, up to date */
    ck_assert_int_eq(run_cli("--print-config-reference", out, sizeof out), 0);
    const char *src = getenv("SKYSIEVE_SOURCE_DIR");
    ck_assert_ptr_nonnull(src);
    char docpath[512];
    snprintf(docpath, sizeof docpath, "%s/README.md", src);
    char *doc = read_all(docpath);
    ck_assert_msg(doc != NULL, "%s is missing", docpath);
    char *begin = strstr(doc, "<!-- BEGIN CONFIG REFERENCE");
    char *end = strstr(doc, "<!-- END CONFIG REFERENCE -->");
    ck_assert_msg(begin && end && end > begin, "README.md lacks the config reference markers");
    begin = strchr(begin, '\n') + 1;
    size_t olen = strlen(out);
    while (olen > 0 && out[olen - 1] == '\n')
        olen--;
    ck_assert_msg((size_t)(end - begin) == olen + 1 && strncmp(begin, out, olen) == 0,
                  "README.md's config reference is out of date: run tools/update-docs.sh");
    free(doc);
    ck_assert_ptr_nonnull(strstr(out, "| `pipeline.detect.thresh` |"));
    /* the printed default config loads back to the built-in default */
    ck_assert_int_eq(run_cli("--print-default-config", out, sizeof out), 0);
    ss_config_t *a = malloc(sizeof *a), *b = malloc(sizeof *b);
    char err[512];
    char *json = strstr(out, "{");
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(ss_config_load_string(json, strlen(json), a, err, sizeof err) == SS_OK, "%s", err);
    ss_config_defaults(b);
    ck_assert(ss_config_equal(a, b));
    /* --check-config: a good file, a bad one (exit 78, the reason) */
    dmn_t d;
    dmn_init(&d);
    write_synth_config(&d, 5.0, NULL);
    char args[300];
    snprintf(args, sizeof args, "--check-config --config '%s'", d.cfg);
    ck_assert_int_eq(run_cli(args, out, sizeof out), 0);
    ck_assert_ptr_nonnull(strstr(out, "OK"));
    write_text(d.cfg, "{\"feeds\": [{\"name\": \"f0\", \"queue\": {\"depth\": 0}}]}\n");
    ck_assert_int_eq(run_cli(args, out, sizeof out), 78);
    const char *at = strstr(out, "queue.depth");
    ck_assert_ptr_nonnull(at);
    ck_assert_msg(!strstr(at + 1, "queue.depth"), "the error is printed twice: %s", out);
    /* a sink directory that does not exist: refused at check time, naming the key */
    write_text(d.cfg, "{\"feeds\": [{\"name\": \"f0\", \"sinks\": {\"fits\": {\"dir\": "
                      "\"%s/missing\"}}}]}\n", d.dir);
    ck_assert_int_eq(run_cli(args, out, sizeof out), 78);
    ck_assert_msg(strstr(out, "sinks.fits.dir") && strstr(out, "No such file"), "%s", out);
    /* calibration: a dark that cannot be read, one that cannot hold pipeline.roi */
    write_text(d.cfg, "{\"feeds\": [{\"name\": \"f0\", \"pipeline\": {\"dark\": "
                      "\"%s/missing.fits\"}}]}\n", d.dir);
    ck_assert_int_eq(run_cli(args, out, sizeof out), 78);
    ck_assert_msg(strstr(out, "feeds[0].pipeline.dark") && strstr(out, "missing.fits"), "%s", out);
    char master[200];
    snprintf(master, sizeof master, "%s/flat16.fits", d.dir);
    write_master(master, 16, 16);
    write_text(d.cfg, "{\"feeds\": [{\"name\": \"f0\", \"pipeline\": {\"flat\": \"%s\","
                      " \"roi\": [8, 8, 32, 32]}}]}\n", master);
    ck_assert_int_eq(run_cli(args, out, sizeof out), 78);
    ck_assert_msg(strstr(out, "feeds[0].pipeline.flat") && strstr(out, "does not hold"), "%s", out);
    write_text(d.cfg, "{\"feeds\": [{\"name\": \"f0\", \"pipeline\": {\"flat\": \"%s\","
                      " \"roi\": [2, 2, 8, 8]}}]}\n", master);
    ck_assert_int_eq(run_cli(args, out, sizeof out), 0);
    /* the instance example of deploy/ is a valid config (its directories
     * are a station's, which --check-config would also require) */
    char ex[512];
    snprintf(ex, sizeof ex, "%s/deploy/skysieved-cam1.example.json", getenv("SKYSIEVE_SOURCE_DIR"));
    ck_assert_msg(ss_config_load_file(ex, a, err, sizeof err) == SS_OK, "%s", err);
    /* logging: "<N>" priority prefixes exactly when stderr is the journal
     * stream that JOURNAL_STREAM names (device:inode) */
    char jlog[160], cmd[1024];
    snprintf(jlog, sizeof jlog, "%s/journal.log", d.dir);
    const char *bd = getenv("SKYSIEVE_BINARY_DIR");
    snprintf(cmd, sizeof cmd,
             ": > '%s'; JOURNAL_STREAM=$(stat -c %%d:%%i '%s') '%s/daemon/skysieved' "
             "--config /nonexistent/skysieved.json 2>>'%s'; "
             "JOURNAL_STREAM=1:2 '%s/daemon/skysieved' --config /nonexistent/skysieved.json 2>>'%s'",
             jlog, jlog, bd, jlog, bd, jlog);
    ck_assert_int_ne(system(cmd), -1);
    char *jl = read_all(jlog);
    ck_assert_ptr_nonnull(jl);
    ck_assert_msg(strncmp(jl, "<3>main: ", 9) == 0, "journal form expected: %s", jl);
    ck_assert_ptr_nonnull(strstr(jl, "/nonexistent/skysieved.json"));
    ck_assert_msg(strstr(jl, "\nskysieve err     main: ") != NULL, "plain form expected: %s", jl);
    free(jl);
    free(a);
    free(b);
    dmn_cleanup(&d);
}
END_TEST

/* ======================================================================
 * Issue 11: a stalled subscriber costs only itself
 * ==================================================================== */

/* The topic_seq of a received message (part 1 is the JSON body or
 * header); -1 when it has none. */
static long long topic_seq_of(const ss_proto_rx_t *rx)
{
    if (rx->n < 2)
        return -1;
    char *text = strndup(rx->part[1].data, rx->part[1].len);
    cJSON *o = text ? cJSON_Parse(text) : NULL;
    const cJSON *q = o ? cJSON_GetObjectItem(o, "topic_seq") : NULL;
    const long long v = cJSON_IsNumber(q) ? (long long)q->valuedouble : -1;
    cJSON_Delete(o);
    free(text);
    return v;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    long kib = -1;
    while (fp && fgets(line, sizeof line, fp))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (fp)
        fclose(fp);
    return kib;
}

/* A subscriber that never reads, beside one that reads, for
 * SKYSIEVE_SLOW_SUB_S seconds (default 60) of a 20 frames/s feed with
 * residuals: the reading one gets every message of every topic (topic_seq
 * without a gap), and the daemon's RSS stays within 64 MiB of what it was
 * after the first seconds (the stalled one holds at most SNDHWM messages:
 * about 40 from a 16 MiB budget; with 1 MiB, 4 messages, the reading one
 * lost a few too on the loaded GPU host). Before: XPUB_NODROP made the
 * stalled one's full queue refuse each message for everyone. */
/* What the daemon's RSS may grow by in test_stalled_subscriber: 64 MiB,
 * and under AddressSanitizer also its quarantine of freed memory (256 MiB
 * by default), which the published messages fill. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_GROWTH_KIB ((64 + 256) * 1024L)
#else
#define RSS_GROWTH_KIB (64 * 1024L)
#endif

START_TEST(test_stalled_subscriber)
{
    const char *e = getenv("SKYSIEVE_SLOW_SUB_S");
    const double span = e && atof(e) > 0 ? atof(e) : 60.0;
    dmn_t d;
    dmn_init(&d);
    snprintf(d.pub_extra, sizeof d.pub_extra, ", \"byte_budget\": 16777216");
    write_synth_config(&d, 5.0, NULL);
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *stalled = zmq_socket(zctx, ZMQ_SUB);
    int zero = 0, one = 1;
    zmq_setsockopt(stalled, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(stalled, ZMQ_RCVHWM, &one, sizeof one);
    zmq_setsockopt(stalled, ZMQ_SUBSCRIBE, "", 0);
    ck_assert_int_eq(zmq_connect(stalled, d.pub), 0);
    void *sub = subscribe(&d);
    struct { char topic[SS_PROTO_TOPIC_MAX]; long long next; } seen[8];
    int n_seen = 0;
    unsigned long long got = 0, gaps = 0;
    long rss0 = -1;
    const double t0 = now_s();
    while (now_s() - t0 < span) {
        if (rss0 < 0 && now_s() - t0 > SS_MIN(5.0, span / 4))
            rss0 = rss_kib(d.pid);
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) != SS_OK)
            continue;
        char topic[SS_PROTO_TOPIC_MAX];
        const size_t tl = SS_MIN(rx.part[0].len, sizeof topic - 1);
        memcpy(topic, rx.part[0].data, tl);
        topic[tl] = '\0';
        const long long q = topic_seq_of(&rx);
        ss_proto_rx_close(&rx);
        ck_assert_msg(q >= 0, "%s: no topic_seq", topic);
        int i = 0;
        while (i < n_seen && strcmp(seen[i].topic, topic) != 0)
            i++;
        if (i == n_seen) {
            ck_assert_int_lt(n_seen, 8);
            ss_strlcpy(seen[n_seen++].topic, topic, sizeof seen[0].topic);
        } else if (q != seen[i].next) {
            gaps += (unsigned long long)(q - seen[i].next);
        }
        seen[i].next = q + 1;
        got++;
    }
    const long rss1 = rss_kib(d.pid);
    ck_assert_msg(gaps == 0, "the reading subscriber missed %llu of %llu messages", gaps, got);
    ck_assert_msg(got > (unsigned long long)(span * 10), "only %llu messages in %.0f s", got, span);
    /* residual, detections and status; tracks too once the synthetic
     * feed's movers are tracked */
    int kinds = 0;
    for (int i = 0; i < n_seen; i++)
        kinds |= 1 << ss_proto_topic_parse(seen[i].topic, strlen(seen[i].topic), NULL);
    const int base = 1 << SS_MSG_RESIDUAL | 1 << SS_MSG_DETECTIONS | 1 << SS_MSG_STATUS;
    ck_assert_msg((kinds & base) == base && (kinds & ~(base | 1 << SS_MSG_TRACKS)) == 0 &&
                      n_seen <= 4,
                  "topics seen: %d (residual, detections, status, and tracks)", n_seen);
    ck_assert_msg(rss0 > 0 && rss1 > 0 && rss1 - rss0 < RSS_GROWTH_KIB,
                  "RSS %ld KiB after 5 s, %ld KiB at the end", rss0, rss1);
    zmq_close(stalled);
    zmq_close(sub);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 14 item 4: the residual's other forms, asked for by topic. A
 * subscriber to everything ("") gets none of them while nobody names
 * them; a subscriber to residual16., residual_every. and stamps. gets,
 * for the frames it also has the float32 residual of: binary16 pixels
 * equal to ss_f16_bits of the float32 ones (within half-precision
 * rounding: |h − f| ≤ 2^-11·|f| or 2^-25), every-k residuals only for
 * seq % k == 0 (equal to the float32 one), and stamps, one per detection
 * (up to publish.stamps.max), whose pixels are the float32 residual's at
 * their box. */
#define FORMS_EVERY 3
#define FORMS_FRAMES 24             /* frames with all three forms checked */

typedef struct forms_frame {
    uint64_t seq;
    float *f32;                     /* W·H */
    uint16_t *f16;                  /* W·H, or NULL */
    cJSON *stamps;                  /* the stamps body, or NULL */
    float *stamp_px;
    size_t stamp_n;
    int n_dets;                     /* -1: no detections message yet */
} forms_frame_t;

static void forms_free(forms_frame_t *s)
{
    free(s->f32);
    free(s->f16);
    free(s->stamp_px);
    cJSON_Delete(s->stamps);
}

/* The ring slot of seq, emptied when it held another frame. */
static forms_frame_t *forms_slot(forms_frame_t *fr, int n, uint64_t seq)
{
    forms_frame_t *s = &fr[seq % (uint64_t)n];
    if (s->seq != seq) {
        forms_free(s);
        *s = (forms_frame_t){ .seq = seq, .n_dets = -1 };
    }
    return s;
}

/* The value of binary16 bits h. */
static double f16_value(uint16_t h)
{
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return h & 0x8000 ? -v : v;
}

/* The frame's checks once it has every part; 1 when checked. */
static int forms_check(forms_frame_t *s)
{
    if (!s->f32 || !s->f16 || !s->stamps || s->n_dets < 0)
        return 0;
    for (size_t i = 0; i < (size_t)W * H; i++) {
        const float f = s->f32[i];
        ck_assert_uint_eq(s->f16[i], ss_f16_bits(f));
        if (isnan(f)) {
            ck_assert_uint_eq(s->f16[i], 0x7E00);
            continue;
        }
        const double h = f16_value(s->f16[i]);
        ck_assert_msg(fabs(h - f) <= fmax(ldexp(fabs(f), -11), ldexp(1.0, -25)),
                      "seq %llu pixel %zu: float16 %g for %g", (unsigned long long)s->seq, i, h, f);
    }
    const cJSON *list = cJSON_GetObjectItem(s->stamps, "stamps");
    const int count = cJSON_GetObjectItem(s->stamps, "count")->valueint;
    ck_assert_int_eq(cJSON_GetArraySize(list), count);
    ck_assert_int_eq(count + cJSON_GetObjectItem(s->stamps, "truncated")->valueint, s->n_dets);
    size_t off = 0;
    for (int k = 0; k < count; k++) {
        const cJSON *st = cJSON_GetArrayItem(list, k);
        const int x0 = cJSON_GetObjectItem(st, "x0")->valueint;
        const int y0 = cJSON_GetObjectItem(st, "y0")->valueint;
        const int w = cJSON_GetObjectItem(st, "w")->valueint;
        const int h = cJSON_GetObjectItem(st, "h")->valueint;
        const int det = cJSON_GetObjectItem(st, "det")->valueint;
        ck_assert(det >= 0 && det < s->n_dets && x0 >= 0 && y0 >= 0 && x0 + w <= W &&
                  y0 + h <= H && w > 0 && h > 0);
        if (strcmp(cJSON_GetObjectItem(st, "kind")->valuestring, "streak") != 0)
            ck_assert(w <= 31 && h <= 31 && (w == 31 || x0 == 0 || x0 + w == W) &&
                      (h == 31 || y0 == 0 || y0 + h == H));
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                const float a = s->stamp_px[off + (size_t)y * w + x];
                const float b = s->f32[(size_t)(y0 + y) * W + x0 + x];
                ck_assert_msg(memcmp(&a, &b, sizeof a) == 0,
                              "seq %llu stamp %d (%d, %d): %g, residual %g",
                              (unsigned long long)s->seq, k, x, y, a, b);
            }
        off += (size_t)w * h;
    }
    ck_assert_uint_eq(off, s->stamp_n);
    return 1;
}

START_TEST(test_residual_forms)
{
    dmn_t d;
    dmn_init(&d);
    snprintf(d.pub_extra, sizeof d.pub_extra, ", \"every\": %d", FORMS_EVERY);
    /* every frame processed: a daemon slower than the feed (ThreadSanitizer)
     * dropping the oldest frames at a steady stride of FORMS_EVERY would
     * process no frame whose seq is a multiple of it */
    d.queue_policy = "block";
    write_synth_config(&d, 5.0, NULL);
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    /* nobody names a form: a subscriber to everything sees none */
    void *all = subscribe(&d);
    const double t0 = now_s();
    int n_all = 0;
    while (now_s() - t0 < 2.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(all, 0, &rx) != SS_OK)
            continue;
        ck_assert_int_lt(ss_proto_form_topic_parse(rx.part[0].data, rx.part[0].len, NULL), 1);
        ck_assert_int_ne(ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, NULL),
                         SS_MSG_STAMPS);
        n_all++;
        ss_proto_rx_close(&rx);
    }
    ck_assert_int_gt(n_all, 10);

    void *sub = zmq_socket(zctx, ZMQ_SUB);
    int zero = 0, tmo = 200;
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    const char *topics[] = { "residual.f0", "residual16.f0", "residual_every.f0", "stamps.f0",
                             "detections.f0" };
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++)
        zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topics[i], strlen(topics[i]));
    ck_assert_int_eq(zmq_connect(sub, d.pub), 0);

    enum { RING = 16 };
    forms_frame_t fr[RING];
    for (int i = 0; i < RING; i++)
        fr[i] = (forms_frame_t){ .seq = UINT64_MAX, .n_dets = -1 };
    /* every: every-k residuals matched; owed: ok float32 residuals of
     * seq % k == 0 since the first every-k one (frames may be dropped:
     * drop_oldest) */
    int checked = 0, every = 0, owed = 0, with_stamps = 0;
    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, (size_t)W * H, 1000), 0);
    ss_proto_limits_t lim = limits();
    const double t1 = now_s();
    while (checked < FORMS_FRAMES && now_s() - t1 < 60.0) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) != SS_OK)
            continue;
        ss_proto_error_t err;
        char feed[SS_NAME_MAX];
        const int form = ss_proto_form_topic_parse(rx.part[0].data, rx.part[0].len, feed);
        const ss_msg_type_t t = ss_proto_topic_parse(rx.part[0].data, rx.part[0].len, feed);
        forms_frame_t *s = NULL;
        if (form == SS_FORM_F32) {
            ck_assert_msg(ss_proto_decode_residual(rx.part, rx.n, &lim, &res, NULL, NULL, &err) ==
                              SS_OK, "%s", err.text);
            if (res.status == SS_STATUS_OK) {
                s = forms_slot(fr, RING, res.meta.seq);
                owed += every > 0 && res.meta.seq % FORMS_EVERY == 0;
                s->f32 = malloc((size_t)W * H * sizeof(float));
                memcpy(s->f32, res.residual, (size_t)W * H * sizeof(float));
            }
        } else if (form >= 0 || t == SS_MSG_STAMPS) {
            cJSON *hdr = cJSON_ParseWithLength(rx.part[1].data, rx.part[1].len);
            ck_assert_ptr_nonnull(hdr);
            const uint64_t seq = (uint64_t)cJSON_GetObjectItem(hdr, "seq")->valuedouble;
            const int ok = strcmp(cJSON_GetObjectItem(hdr, "status")->valuestring, "ok") == 0;
            if (form == SS_FORM_F32_EVERY) {
                ck_assert_uint_eq(seq % FORMS_EVERY, 0);
                ck_assert_int_eq(cJSON_GetObjectItem(hdr, "every")->valueint, FORMS_EVERY);
                ck_assert_str_eq(cJSON_GetObjectItem(hdr, "dtype")->valuestring, "f32");
                ck_assert_uint_eq(rx.part[2].len, (size_t)W * H * sizeof(float));
                forms_frame_t *e = &fr[seq % RING];
                if (ok && e->seq == seq && e->f32) {
                    ck_assert(memcmp(e->f32, rx.part[2].data, rx.part[2].len) == 0);
                    every++;
                }
            } else if (form == SS_FORM_F16) {
                ck_assert_str_eq(cJSON_GetObjectItem(hdr, "dtype")->valuestring, "f16");
                ck_assert_uint_eq(rx.part[2].len, (size_t)W * H * sizeof(uint16_t));
                if (ok) {
                    s = forms_slot(fr, RING, seq);
                    s->f16 = malloc(rx.part[2].len);
                    memcpy(s->f16, rx.part[2].data, rx.part[2].len);
                }
            } else if (t == SS_MSG_STAMPS) {
                ck_assert(ok);
                s = forms_slot(fr, RING, seq);
                s->stamps = hdr;
                hdr = NULL;
                s->stamp_n = rx.part[2].len / sizeof(float);
                s->stamp_px = malloc(rx.part[2].len + 1);
                memcpy(s->stamp_px, rx.part[2].data, rx.part[2].len);
                with_stamps += s->stamp_n > 0;
            } else {
                ck_abort_msg("form %d on a topic not subscribed", form);
            }
            cJSON_Delete(hdr);
        } else if (t == SS_MSG_DETECTIONS) {
            ck_assert_msg(ss_proto_decode_detections(rx.part, rx.n, &lim, &res, &err) == SS_OK,
                          "%s", err.text);
            if (res.status == SS_STATUS_OK) {
                s = forms_slot(fr, RING, res.meta.seq);
                s->n_dets = res.dets.count;
            }
        }
        ss_proto_rx_close(&rx);
        if (s && forms_check(s)) {
            checked++;
            forms_free(s);
            *s = (forms_frame_t){ .seq = UINT64_MAX, .n_dets = -1 };
        }
    }
    ck_assert_int_eq(checked, FORMS_FRAMES);
    ck_assert_int_ge(every, 3);
    ck_assert_int_ge(every, owed);      /* the first one is not owed */
    ck_assert_int_gt(with_stamps, FORMS_FRAMES / 2);
    for (int i = 0; i < RING; i++)
        forms_free(&fr[i]);
    ss_result_free(&res);
    zmq_close(sub);
    zmq_close(all);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 11: a peer that stops half-way through a message is dropped after
 * peer_timeout (heartbeats) and its partial message freed, and one that
 * never finishes its handshake after peer_timeout too: here a raw
 * ZMTP 3.0 peer on the frame socket (greeting, READY as PUSH, then a
 * 10000-byte frame cut after 100 bytes, then silence). The disconnect is
 * logged and counted; the daemon goes on serving. */
START_TEST(test_stalled_partial_message)
{
    dmn_t d;
    dmn_init(&d);
    snprintf(d.keys_extra, sizeof d.keys_extra, ", \"peer_timeout\": 2");
    write_zmq_config(&d, 4, "block");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    ck_assert(strncmp(d.in, "ipc://", 6) == 0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ss_strlcpy(sa.sun_path, d.in + 6, sizeof sa.sun_path);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    /* and one that never even greets: dropped after the handshake time
     * (peer_timeout too) */
    const int mute = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(mute, (struct sockaddr *)&sa, sizeof sa), 0);
    const double tm = now_s();
    unsigned char greet[64] = { 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0x7F, 3, 0, 'N', 'U', 'L', 'L' };
    ck_assert_int_eq(write(fd, greet, sizeof greet), (ssize_t)sizeof greet);
    static const unsigned char ready[] = { 0x04, 26, 5, 'R', 'E', 'A', 'D', 'Y', 11, 'S', 'o',
                                           'c', 'k', 'e', 't', '-', 'T', 'y', 'p', 'e', 0, 0,
                                           0, 4, 'P', 'U', 'S', 'H' };
    ck_assert_int_eq(write(fd, ready, sizeof ready), (ssize_t)sizeof ready);
    unsigned char part[9 + 100] = { 0x02, 0, 0, 0, 0, 0, 0, 0x27, 0x10 };   /* 10000 bytes */
    ck_assert_int_eq(write(fd, part, sizeof part), (ssize_t)sizeof part);
    /* then nothing: within peer_timeout (2 s) plus a PING interval, dropped */
    double t0 = now_s();
    while (!log_contains(&d, "disconnected (a part over the size limit") && now_s() - t0 < 20.0)
        sleep_s(0.1);
    const double took = now_s() - t0;
    ck_assert_msg(log_contains(&d, "disconnected (a part over the size limit"),
                  "the stalled peer was not dropped in 20 s");
    ck_assert_msg(took < 10.0, "dropped after %.1f s", took);
    close(fd);
    /* the mute peer: libzmq sent its own greeting, then closed */
    char junk[128];
    ssize_t got;
    while ((got = read(mute, junk, sizeof junk)) > 0 && now_s() - tm < 20.0)
        ;
    ck_assert_msg(got == 0 && now_s() - tm < 10.0, "a peer that never greets kept for %.1f s",
                  now_s() - tm);
    close(mute);
    /* still serving */
    sender_t snd;
    sender_open(&snd, &d, 0);
    sender_send(&snd, NULL);
    ss_proto_status_t *st = stats_when_processed(&d, 1, 30.0);
    ck_assert_uint_eq(st->feeds[0].processed, 1);
    free(st);
    sender_close(&snd);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 11: peers that hog connections. The daemon's open-files limit is
 * cut to 512 (prlimit), then 700 connections are opened to its frame
 * socket, in bursts of 50. Connections accepted into the headroom (the
 * last 128 descriptors for frame sockets) are shut down at once, counted;
 * control answers, a new subscriber gets in, the frame of a sender
 * connected before is processed, and the daemon exits 0.
 * Before: libzmq aborted the daemon at the first accept without a
 * descriptor (an IPC listener's accept fails its assertion on EMFILE). */
START_TEST(test_fd_exhaustion)
{
    enum { LIMIT = 512, HOGS = 700, BURST = 50 };
    dmn_t d;
    dmn_init(&d);
    write_zmq_config(&d, 4, "block");
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    const struct rlimit rl = { .rlim_cur = LIMIT, .rlim_max = LIMIT };
    ck_assert_int_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0);
    sender_t snd;                   /* a camera connected before the hogs */
    sender_open(&snd, &d, 0);
    static int hog[HOGS];
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    ss_strlcpy(sa.sun_path, d.in + 6, sizeof sa.sun_path);
    for (int i = 0; i < HOGS; i++) {
        hog[i] = socket(AF_UNIX, SOCK_STREAM, 0);
        ck_assert_int_ge(hog[i], 0);
        ck_assert_int_eq(connect(hog[i], (struct sockaddr *)&sa, sizeof sa), 0);
        if (i % BURST == BURST - 1)
            sleep_s(0.02);
    }
    sleep_s(0.5);
    ck_assert_msg(kill(d.pid, 0) == 0, "the daemon died");
    ss_ctl_response_t r;
    ck_assert_int_eq(ctl_cmd(&d, SS_CTL_STATUS, NULL, &r), 0);
    ck_assert(r.ok);
    ss_ctl_response_free(&r);
    void *sub = subscribe(&d);
    sender_send(&snd, NULL);
    ss_proto_status_t *st = stats_when_processed(&d, 1, 30.0);
    ck_assert_uint_eq(st->feeds[0].processed, 1);
    free(st);
    sender_close(&snd);
    zmq_close(sub);
    for (int i = 0; i < HOGS; i++)
        close(hog[i]);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    ck_assert_int_ge(log_counter(&d, "connections_refused"), HOGS - LIMIT);
    dmn_cleanup(&d);
}
END_TEST

/* Whether sub receives any message within wait_s. */
static int receives(void *sub, double wait_s)
{
    const double t0 = now_s();
    while (now_s() - t0 < wait_s) {
        ss_proto_rx_t rx;
        if (ss_proto_recv_parts(sub, 0, &rx) == SS_OK) {
            ss_proto_rx_close(&rx);
            return 1;
        }
    }
    return 0;
}

/* The flooder of test_subscription_flood, in a process of its own (over
 * IPC a peer is a process): n distinct subscriptions on endpoint, with a
 * poll now and then so that libzmq keeps sending them, then a pause. */
static void flood_subscriptions(const char *endpoint, int n)
{
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_SUB);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(s, endpoint);
    char topic[64];
    for (int i = 0; i < n; i++) {
        const int len = snprintf(topic, sizeof topic, "flood-%d-xxxxxxxxxxxxxxxxxxxx", i);
        zmq_setsockopt(s, ZMQ_SUBSCRIBE, topic, (size_t)len);
        if (i % 100 == 0) {
            zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
            zmq_poll(&it, 1, 1);
        }
    }
    for (int i = 0; i < 40; i++) {
        zmq_pollitem_t it = { .socket = s, .events = ZMQ_POLLIN };
        zmq_poll(&it, 1, 100);
    }
    zmq_close(s);
    zmq_ctx_term(ctx);
}

#if defined(__SANITIZE_ADDRESS__)
#define FLOOD_RSS_KIB ((16 + 256) * 1024L)     /* plus ASan's quarantine */
#else
#define FLOOD_RSS_KIB (16 * 1024L)
#endif

/* Issue 11: a subscription flood. Another process sends 20000 distinct
 * subscriptions (libzmq alone keeps each, ~2 kB apiece); past
 * publish.max_subscriptions_per_peer (100; loop 0) or, with that out of
 * reach, past publish.max_subscriptions (1000; loop 1) it is banned, its
 * connection closed and its reconnection refused by the ZAP handler,
 * counted; the daemon's memory stays bounded and the test's own
 * subscriber keeps receiving, not banned. */
START_TEST(test_subscription_flood)
{
    dmn_t d;
    dmn_init(&d);
    snprintf(d.pub_extra, sizeof d.pub_extra,
             ", \"max_subscriptions_per_peer\": %d, \"max_subscriptions\": 1000, "
             "\"ban_s\": 60", _i == 0 ? 100 : 1000000);
    const char *why = _i == 0 ? "banned for 60 s: over publish.max_subscriptions_per_peer"
                              : "banned for 60 s: publish.max_subscriptions reached";
    write_synth_config(&d, 5.0, NULL);
    dmn_start(&d, NULL);
    dmn_wait_ready(&d);
    void *sub = subscribe(&d);
    const long rss0 = rss_kib(d.pid);
    /* the flooder: this binary again (main's --flood-subscriptions), so
     * that the child is single-threaded until exec */
    const pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        execl("/proc/self/exe", "check_daemon", "--flood-subscriptions", d.pub, "20000",
              (char *)NULL);
        _exit(127);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    const long rss1 = rss_kib(d.pid);
    ck_assert_msg(log_contains(&d, why), "the flooding peer was not banned: no \"%s\"", why);
    /* the refused subscriptions were not kept as topics asking for
     * residual forms (check_subguard shows it deterministically; noting
     * them stalled a ThreadSanitizer daemon past the 10 s below) */
    ck_assert_msg(!log_contains(&d, "topic prefixes held"),
                  "the refused subscriptions filled the publisher's topic table");
    /* the test's own subscriber still gets messages */
    ck_assert_msg(receives(sub, 10.0), "the reading subscriber got nothing after the flood");
    /* measured here 3-6 MiB (2026-11-24; 20000 kept would be ~40 MiB);
     * ThreadSanitizer's allocator and shadow multiply it, unbounded there */
#if !defined(__SANITIZE_THREAD__)
    ck_assert_msg(rss0 > 0 && rss1 > 0 && rss1 - rss0 < FLOOD_RSS_KIB,
                  "RSS %ld KiB before the flood, %ld KiB after", rss0, rss1);
#else
    (void)rss0;
    (void)rss1;
#endif
    zmq_close(sub);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    ck_assert_int_eq(log_counter(&d, "peers_banned"), 1);
    ck_assert_int_ge(log_counter(&d, "subscriptions_refused"), 1);
    /* its SUB reconnected after the close, and ZAP refused it */
    ck_assert_int_ge(log_counter(&d, "refused_banned"), 1);
    dmn_cleanup(&d);
}
END_TEST

/* Issue 11: CURVE with ZAP on every socket. With security.curve_key and
 * security.client_keys set, a client whose key is listed gets in (control,
 * results, frames); one with an unknown key, or without CURVE, gets
 * nothing — no answer, no message, no frame into the pipeline — and the
 * refusals are counted. */
static void *curve_socket(int type, const char *endpoint, const char *key, const char *server)
{
    void *s = zmq_socket(zctx, type);
    int zero = 0, tmo = 200;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    char err[600];
    ck_assert_msg(ss_curve_client_files(s, key, server, err, sizeof err) == 0, "%s", err);
    if (type == ZMQ_SUB)
        zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
    ck_assert_int_eq(zmq_connect(s, endpoint), 0);
    return s;
}

START_TEST(test_curve)
{
#if defined(__SANITIZE_THREAD__)
    /* under ThreadSanitizer the CURVE handshakes (libsodium, in libzmq's
     * threads, neither instrumented) outlast the case's timeout, and what
     * TSan could check here is theirs */
    fprintf(stderr, "test_curve: not run under ThreadSanitizer\n");
    return;
#endif
    dmn_t d;
    dmn_init(&d);
    char clients[96], err[600], dkey[128], dpub[128], gkey[128], bkey[128];
    snprintf(clients, sizeof clients, "%s/clients", d.dir);
    ck_assert_int_eq(mkdir(clients, 0755), 0);
    ck_assert_msg(ss_curve_write_keypair(d.dir, "daemon", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ss_curve_write_keypair(clients, "good", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(ss_curve_write_keypair(d.dir, "bad", err, sizeof err) == 0, "%s", err);
    snprintf(dkey, sizeof dkey, "%s/daemon.key", d.dir);
    snprintf(dpub, sizeof dpub, "%s/daemon.pub", d.dir);
    snprintf(gkey, sizeof gkey, "%s/good.key", clients);
    snprintf(bkey, sizeof bkey, "%s/bad.key", d.dir);
    snprintf(d.keys_extra, sizeof d.keys_extra,
             ", \"security\": {\"curve_key\": \"%s\", \"client_keys\": \"%s\"}", dkey, clients);
    write_zmq_config(&d, 4, "block");
    dmn_start(&d, NULL);
    d.curve_key = gkey;
    d.server_key = dpub;
    dmn_wait_ready(&d);                             /* control, with the listed key */
    ck_assert(log_contains(&d, "CURVE on: 2 client keys admitted"));   /* good.key, good.pub */

    /* control: an unknown key, and no CURVE at all, get no answer */
    ss_ctl_response_t r;
    d.curve_key = bkey;
    ck_assert_int_ne(ctl_request(&d, "{\"cmd\":\"status\"}", &r, 1.0), 0);
    d.curve_key = d.server_key = NULL;
    ck_assert_int_ne(ctl_request(&d, "{\"cmd\":\"status\"}", &r, 1.0), 0);
    d.curve_key = gkey;
    d.server_key = dpub;

    /* results: the listed subscriber receives, the others nothing */
    void *good_sub = curve_socket(ZMQ_SUB, d.pub, gkey, dpub);
    void *bad_sub = curve_socket(ZMQ_SUB, d.pub, bkey, dpub);
    void *plain_sub = curve_socket(ZMQ_SUB, d.pub, NULL, NULL);
    ck_assert_msg(receives(good_sub, 10.0), "the listed subscriber received nothing");
    ck_assert_msg(!receives(bad_sub, 2.0), "a subscriber with an unknown key received");
    ck_assert_msg(!receives(plain_sub, 0.5), "a subscriber without CURVE received");

    /* frames: an unknown key gets nothing into the pipeline, the listed one does */
    sender_t snd;
    memset(&snd, 0, sizeof snd);
    ss_synth_cfg_t c;
    scene(&c, 0);
    snd.gen = ss_synth_new(&c);
    snd.f.capacity = (size_t)W * H * 2;
    snd.f.pixels = malloc(snd.f.capacity);
    snd.sock = curve_socket(ZMQ_PUSH, d.in, bkey, dpub);
    int hl = sender_next(&snd, NULL);
    ss_proto_part_t parts[2] = { { snd.hdr, (size_t)hl }, { snd.f.pixels, ss_frame_bytes(&snd.f) } };
    /* queued, or refused at once when the failed handshake has already
     * taken the pipe away: either way it must never be delivered */
    (void)ss_proto_send_parts(snd.sock, parts, 2, ZMQ_DONTWAIT);
    sleep_s(2.0);
    ss_proto_status_t *st = stats_of(&d);
    ck_assert_uint_eq(st->feeds[0].received, 0);
    free(st);
    zmq_close(snd.sock);
    snd.sock = curve_socket(ZMQ_PUSH, d.in, gkey, dpub);
    sender_send(&snd, NULL);
    const double t0 = now_s();
    do {
        sleep_s(0.05);
        st = stats_of(&d);
        if (st->feeds[0].processed >= 1)
            break;
        free(st);
        st = NULL;
    } while (now_s() - t0 < 30.0);
    ck_assert_msg(st && st->feeds[0].processed == 1, "the listed sender's frame was not processed");
    free(st);
    sender_close(&snd);
    zmq_close(good_sub);
    zmq_close(bad_sub);
    zmq_close(plain_sub);
    ck_assert_int_eq(dmn_stop(&d, SIGTERM), 0);
    char *log = read_all(d.log);
    const char *sec = log ? strstr(log, "security final: admitted=") : NULL;
    ck_assert_ptr_nonnull(sec);
    unsigned long long admitted = 0, refused = 0;
    ck_assert_int_eq(sscanf(sec, "security final: admitted=%llu refused=%llu", &admitted, &refused), 2);
    ck_assert_msg(admitted >= 3 && refused >= 3, "admitted %llu, refused %llu", admitted, refused);
    free(log);
    dmn_cleanup(&d);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--flood-subscriptions") == 0) {
        flood_subscriptions(argv[2], atoi(argv[3]));    /* test_subscription_flood's child */
        return 0;
    }
    Suite *s = suite_create("daemon");
    TCase *tc = tcase_create("skysieved");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_command_line);
    tcase_add_test(tc, test_control_commands);
    tcase_add_test(tc, test_hostile_input);
    tcase_add_test(tc, test_zmq_end_to_end);
    tcase_add_test(tc, test_adzmq_source);
    tcase_add_test(tc, test_fits_directory);
    tcase_add_test(tc, test_sd_notify_sequence);
    tcase_add_test(tc, test_sighup_reload);
    tcase_add_test(tc, test_sigterm_drains);
    tcase_add_test(tc, test_drop_oldest_counted);
    tcase_add_test(tc, test_fits_glob_exit_at_end);
    tcase_add_test(tc, test_fits_move_after_processing);
    tcase_add_test(tc, test_control_fallback);
    tcase_add_test(tc, test_residual_names_unique);
    tcase_add_test(tc, test_sky_reports);
    suite_add_tcase(s, tc);
    /* plate solving: its own case (CK_RUN_CASE=solve) */
    TCase *solve = tcase_create("solve");
    tcase_set_timeout(solve, 300);
    tcase_add_loop_test(solve, test_plate_solve, 0, 2);
    suite_add_tcase(s, solve);
    /* its own case, so that CK_RUN_CASE=batch runs it alone */
    TCase *batch = tcase_create("batch");
    tcase_set_timeout(batch, 900);
    tcase_add_loop_test(batch, test_batch_slow_disk, 0, 2);
    suite_add_tcase(s, batch);
    TCase *subs = tcase_create("subscribers");
    tcase_set_timeout(subs, 900);
    tcase_add_test(subs, test_stalled_subscriber);
    tcase_add_test(subs, test_residual_forms);
    tcase_add_test(subs, test_stalled_partial_message);
    tcase_add_test(subs, test_fd_exhaustion);
    tcase_add_loop_test(subs, test_subscription_flood, 0, 2);
    TCase *sec = tcase_create("security");
    tcase_set_timeout(sec, 300);
    tcase_add_test(sec, test_curve);
    suite_add_tcase(s, sec);
    suite_add_tcase(s, subs);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
