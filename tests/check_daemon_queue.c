/*
 * check_daemon_queue.c — the daemon's building blocks, in-process:
 * daemon/queue.h (bounded FIFO: order, DROP_OLDEST eviction, BLOCK
 * back-pressure, try_push refusal, close-then-drain, counters) and
 * daemon/dirwatch.h (complete-file detection: rename into place, stable
 * size, patterns, hidden names, files present at start, order keys,
 * delete and re-create).
 */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/cfgsnap.h"
#include "daemon/dirwatch.h"
#include "daemon/queue.h"
#include "ss_test.h"

/* ======================================================================
 * queue
 * ==================================================================== */

static int vals[64];

START_TEST(test_queue_fifo_and_counters)
{
    ss_queue_t *q = ss_queue_new(3, SS_QUEUE_BLOCK);
    ck_assert_ptr_nonnull(q);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(ss_queue_try_push(q, &vals[i]), SS_OK);
    ck_assert_int_eq(ss_queue_depth(q), 3);
    ck_assert_int_eq(ss_queue_try_push(q, &vals[3]), SS_ERR_FULL);
    void *it;
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(ss_queue_pop(q, &it, 0), SS_OK);
        ck_assert_ptr_eq(it, &vals[i]);
    }
    ck_assert_int_eq(ss_queue_pop(q, &it, 0), SS_ERR_TIMEOUT);
    ck_assert_int_eq(ss_queue_pop(q, &it, 0.05), SS_ERR_TIMEOUT);
    /* wrap around the ring */
    for (int round = 0; round < 5; round++) {
        ck_assert_int_eq(ss_queue_try_push(q, &vals[10 + round]), SS_OK);
        ck_assert_int_eq(ss_queue_pop(q, &it, 0), SS_OK);
        ck_assert_ptr_eq(it, &vals[10 + round]);
    }
    ss_queue_counters_t c;
    ss_queue_counters(q, &c);
    ck_assert_uint_eq(c.pushed, 8);
    ck_assert_uint_eq(c.popped, 8);
    ck_assert_uint_eq(c.dropped, 1);
    ck_assert_int_eq(c.depth, 0);
    ck_assert_int_eq(c.max_depth, 3);
    ck_assert_int_eq(c.capacity, 3);
    ss_queue_destroy(&q);
    ck_assert_ptr_null(q);
    ss_queue_destroy(&q);
}
END_TEST

START_TEST(test_queue_drop_oldest)
{
    ss_queue_t *q = ss_queue_new(2, SS_QUEUE_DROP_OLDEST);
    void *ev = (void *)1;
    ck_assert_int_eq(ss_queue_push(q, &vals[0], &ev), SS_OK);
    ck_assert_ptr_null(ev);
    ck_assert_int_eq(ss_queue_push(q, &vals[1], &ev), SS_OK);
    ck_assert_ptr_null(ev);
    ck_assert_int_eq(ss_queue_push(q, &vals[2], &ev), SS_OK);
    ck_assert_ptr_eq(ev, &vals[0]);     /* the oldest went */
    ck_assert_int_eq(ss_queue_push(q, &vals[3], &ev), SS_OK);
    ck_assert_ptr_eq(ev, &vals[1]);
    void *it;
    ck_assert_int_eq(ss_queue_pop(q, &it, 0), SS_OK);
    ck_assert_ptr_eq(it, &vals[2]);
    ck_assert_int_eq(ss_queue_pop(q, &it, 0), SS_OK);
    ck_assert_ptr_eq(it, &vals[3]);
    ss_queue_counters_t c;
    ss_queue_counters(q, &c);
    ck_assert_uint_eq(c.dropped, 2);
    ck_assert_uint_eq(c.pushed, 4);
    ss_queue_destroy(&q);
}
END_TEST

typedef struct producer {
    ss_queue_t *q;
    int n;
    int pushed;
    ss_err_t last;
} producer_t;

static void *produce(void *arg)
{
    producer_t *p = arg;
    for (int i = 0; i < p->n; i++) {
        void *ev = NULL;
        p->last = ss_queue_push(p->q, &vals[i], &ev);
        if (p->last != SS_OK || ev)
            break;
        __atomic_store_n(&p->pushed, i + 1, __ATOMIC_SEQ_CST);
    }
    return NULL;
}

/* BLOCK: a producer of 40 items through a queue of 2 never loses or
 * reorders one, and the queue never holds more than 2. */
START_TEST(test_queue_block_backpressure)
{
    ss_queue_t *q = ss_queue_new(2, SS_QUEUE_BLOCK);
    producer_t p = { q, 40, 0, SS_OK };
    pthread_t t;
    pthread_create(&t, NULL, produce, &p);
    for (int i = 0; i < 40; i++) {
        void *it;
        ck_assert_int_eq(ss_queue_pop(q, &it, 10.0), SS_OK);
        ck_assert_ptr_eq(it, &vals[i]);
        ck_assert_int_le(ss_queue_depth(q), 2);
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(p.pushed, 40);
    ss_queue_counters_t c;
    ss_queue_counters(q, &c);
    ck_assert_uint_eq(c.dropped, 0);
    ck_assert_int_le(c.max_depth, 2);
    ss_queue_destroy(&q);
}
END_TEST

/* close: queued items still come out, then STOPPED; pushes fail; a
 * producer blocked on a full queue is released with STOPPED. */
START_TEST(test_queue_close_drains)
{
    ss_queue_t *q = ss_queue_new(2, SS_QUEUE_BLOCK);
    ck_assert_int_eq(ss_queue_try_push(q, &vals[0]), SS_OK);
    ck_assert_int_eq(ss_queue_try_push(q, &vals[1]), SS_OK);
    producer_t p = { q, 1, 0, SS_OK };
    pthread_t t;
    pthread_create(&t, NULL, produce, &p);     /* blocks: the queue is full */
    ss_queue_close(q);
    pthread_join(t, NULL);
    ck_assert_int_eq(p.last, SS_ERR_STOPPED);
    ck_assert_int_eq(p.pushed, 0);
    ck_assert(ss_queue_closed(q));
    ck_assert_int_eq(ss_queue_try_push(q, &vals[5]), SS_ERR_STOPPED);
    void *it;
    ck_assert_int_eq(ss_queue_pop(q, &it, -1), SS_OK);
    ck_assert_ptr_eq(it, &vals[0]);
    ck_assert_int_eq(ss_queue_pop(q, &it, -1), SS_OK);
    ck_assert_ptr_eq(it, &vals[1]);
    ck_assert_int_eq(ss_queue_pop(q, &it, -1), SS_ERR_STOPPED);
    ck_assert_int_eq(ss_queue_pop(q, &it, 1.0), SS_ERR_STOPPED);
    ss_queue_destroy(&q);
}
END_TEST

static void *close_later(void *arg)
{
    struct timespec ts = { 0, 50000000L };
    nanosleep(&ts, NULL);
    ss_queue_close(arg);
    return NULL;
}

/* A consumer waiting forever on an empty queue wakes up at close. */
START_TEST(test_queue_close_wakes_consumer)
{
    ss_queue_t *q = ss_queue_new(1, SS_QUEUE_DROP_OLDEST);
    pthread_t t;
    pthread_create(&t, NULL, close_later, q);
    void *it;
    ck_assert_int_eq(ss_queue_pop(q, &it, -1), SS_ERR_STOPPED);
    pthread_join(t, NULL);
    ss_queue_destroy(&q);
    ck_assert_ptr_null(ss_queue_new(0, SS_QUEUE_BLOCK));
}
END_TEST

/* ======================================================================
 * dirwatch
 * ==================================================================== */

static char tdir[256];

static void make_tmpdir(void)
{
    snprintf(tdir, sizeof tdir, "/tmp/ss-dirwatch-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tdir));
}

static void rm_tmpdir(void)
{
    ck_assert_int_eq(rmtree(tdir), 0);
}

static void write_file(const char *name, const char *text)
{
    char p[512];
    snprintf(p, sizeof p, "%s/%s", tdir, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void rename_in(const char *from, const char *to)
{
    char a[512], b[512];
    snprintf(a, sizeof a, "%s/%s", tdir, from);
    snprintf(b, sizeof b, "%s/%s", tdir, to);
    ck_assert_int_eq(rename(a, b), 0);
}

/* Next file's base name, or "" on timeout. */
static const char *next_name(ss_dirwatch_t *w, double timeout)
{
    static char path[1024];
    ss_err_t e = ss_dirwatch_next(w, path, sizeof path, timeout);
    if (e != SS_OK)
        return "";
    ck_assert_int_eq(strncmp(path, tdir, strlen(tdir)), 0);
    return path + strlen(tdir) + 1;
}

static const char *const fits_patterns[] = { "*.fits", "*.fz", NULL };

START_TEST(test_dirwatch_rename_into_place)
{
    make_tmpdir();
    char err[256];
    ss_dirwatch_t *w = ss_dirwatch_new(tdir, fits_patterns, 30.0, 0, NULL, NULL, err, sizeof err);
    ck_assert_msg(w != NULL, "%s", err);
    ck_assert_str_eq(next_name(w, 0), "");
    /* temporary names do not match the patterns, hidden ones never count */
    write_file("a.fits.part", "aaaa");
    write_file(".b.fits", "bbbb");
    write_file("notes.txt", "x");
    ck_assert_str_eq(next_name(w, 0.1), "");
    rename_in("a.fits.part", "a.fits");
    rename_in(".b.fits", "b.fits");
    /* renamed into place: complete at once, although settle is 30 s */
    ck_assert_str_eq(next_name(w, 5.0), "a.fits");
    ck_assert_str_eq(next_name(w, 5.0), "b.fits");
    ck_assert_str_eq(next_name(w, 0.1), "");      /* each exactly once */
    /* written again in place after it was handed out: not again */
    write_file("a.fits", "changed");
    ck_assert_str_eq(next_name(w, 0.1), "");
    /* deleted and renamed in anew: a new file */
    char p[512];
    snprintf(p, sizeof p, "%s/a.fits", tdir);
    ck_assert_int_eq(unlink(p), 0);
    write_file("a2.part", "new");
    rename_in("a2.part", "a.fits");
    ck_assert_str_eq(next_name(w, 5.0), "a.fits");
    ck_assert_int_eq(ss_dirwatch_pending(w), 0);
    ss_dirwatch_destroy(&w);
    ck_assert_ptr_null(w);
    rm_tmpdir();
}
END_TEST

/* Written in place, slowly: not handed out while it grows, then once its
 * size has been stable for settle seconds. */
START_TEST(test_dirwatch_stable_size)
{
    make_tmpdir();
    char err[256], p[512];
    const double settle = 1.5;
    ss_dirwatch_t *w = ss_dirwatch_new(tdir, fits_patterns, settle, 0, NULL, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(w);
    snprintf(p, sizeof p, "%s/slow.fits", tdir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    char chunk[2880];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(write(fd, chunk, sizeof chunk), (ssize_t)sizeof chunk);
        /* a change 0.1 s ago is far from settled */
        ck_assert_str_eq(next_name(w, 0.1), "");
    }
    close(fd);
    ck_assert_int_eq(ss_dirwatch_pending(w), 1);
    ck_assert_str_eq(next_name(w, 10.0), "slow.fits");
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    ck_assert_int_eq(st.st_size, 6 * 2880);
    ck_assert_str_eq(next_name(w, 0.2), "");
    ss_dirwatch_destroy(&w);
    rm_tmpdir();
}
END_TEST

static double key_by_table(const char *path, void *user)
{
    (void)user;
    const char *base = strrchr(path, '/') + 1;
    if (strcmp(base, "z.fits") == 0)
        return 100.0;
    if (strcmp(base, "y.fits") == 0)
        return 200.0;
    return NAN;     /* x.fits, w.fits: no key, after the keyed ones, by name */
}

/* Files present at start: ignored with existing = 0; with existing = 1
 * taken in key order, then by name. */
START_TEST(test_dirwatch_existing_and_order)
{
    make_tmpdir();
    char err[256];
    write_file("x.fits", "1");
    write_file("y.fits", "2");
    write_file("z.fits", "3");
    write_file("w.fits", "4");
    /* old enough to count as complete at once */
    const char *names[] = { "x.fits", "y.fits", "z.fits", "w.fits" };
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", tdir, names[i]);
        struct timespec old[2] = { { 1000000000, 0 }, { 1000000000, 0 } };
        ck_assert_int_eq(utimensat(AT_FDCWD, p, old, 0), 0);
    }
    ss_dirwatch_t *w = ss_dirwatch_new(tdir, NULL, 30.0, 0, key_by_table, NULL, err, sizeof err);
    ck_assert_str_eq(next_name(w, 0.1), "");
    ss_dirwatch_destroy(&w);

    w = ss_dirwatch_new(tdir, NULL, 30.0, 1, key_by_table, NULL, err, sizeof err);
    ck_assert_str_eq(next_name(w, 1.0), "z.fits");
    ck_assert_str_eq(next_name(w, 1.0), "y.fits");
    ck_assert_str_eq(next_name(w, 1.0), "w.fits");
    ck_assert_str_eq(next_name(w, 1.0), "x.fits");
    ck_assert_str_eq(next_name(w, 0.1), "");
    ss_dirwatch_destroy(&w);

    ck_assert_ptr_null(ss_dirwatch_new("/nonexistent/dir", NULL, 1.0, 0, NULL, NULL, err,
                                       sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/dir"));
    rm_tmpdir();
}
END_TEST

/* The watched directory goes away: SS_ERR_IO, not a hang. */
START_TEST(test_dirwatch_directory_gone)
{
    make_tmpdir();
    char err[256];
    ss_dirwatch_t *w = ss_dirwatch_new(tdir, NULL, 1.0, 0, NULL, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(rmdir(tdir), 0);
    char path[512];
    ss_err_t e = SS_ERR_TIMEOUT;
    for (int i = 0; i < 20 && e == SS_ERR_TIMEOUT; i++)
        e = ss_dirwatch_next(w, path, sizeof path, 0.1);
    ck_assert_int_eq(e, SS_ERR_IO);
    ss_dirwatch_destroy(&w);
}
END_TEST

/* ---- config snapshots (cfgsnap.h) ---------------------------------------- */

/* A reader on its own thread: takes the newest snapshot at each
 * "boundary" and checks that what it reads is one whole config (both keys
 * written by the same publish), until it has seen the last generation. */
typedef struct snap_reader {
    ss_cfg_board_t *board;
    ss_cfg_snap_t *held;            /* taken before the publishes start: it must swap */
    uint64_t last;
    int torn, swaps;
} snap_reader_t;

static void *snap_read(void *arg)
{
    snap_reader_t *r = arg;
    ss_cfg_snap_t *held = r->held;
    while (ss_cfg_snap_generation(held) < r->last) {
        r->swaps += ss_cfg_refresh(r->board, &held);
        const ss_config_t *c = ss_cfg_snap_config(held);
        r->torn += c->status_interval != c->peer_timeout;
    }
    ss_cfg_snap_release(&held);
    return NULL;
}

START_TEST(test_cfg_snapshots)
{
    ss_config_t *cfg = malloc(sizeof *cfg);
    ck_assert_ptr_nonnull(cfg);
    ss_config_defaults(cfg);
    cfg->status_interval = cfg->peer_timeout = 1;
    ss_cfg_board_t *b = ss_cfg_board_new(cfg);
    ck_assert_ptr_nonnull(b);
    ss_cfg_snap_t *held = ss_cfg_board_take(b);
    ck_assert_uint_eq(ss_cfg_snap_generation(held), 1);
    /* nothing newer: no swap, the same snapshot */
    ck_assert_ptr_null(ss_cfg_board_newer(b, held));
    ck_assert_int_eq(ss_cfg_refresh(b, &held), 0);
    /* a publish: the holder keeps its snapshot until its boundary */
    cfg->status_interval = cfg->peer_timeout = 2;
    ck_assert_int_eq(ss_cfg_board_publish(b, cfg), 0);
    ck_assert(ss_cfg_snap_config(held)->status_interval == 1);
    ck_assert_int_eq(ss_cfg_refresh(b, &held), 1);
    ck_assert_uint_eq(ss_cfg_snap_generation(held), 2);
    ck_assert(ss_cfg_snap_config(held)->status_interval == 2);
    /* a holder outlives the board */
    ss_cfg_board_destroy(&b);
    ck_assert_ptr_null(b);
    ck_assert(ss_cfg_snap_config(held)->peer_timeout == 2);
    ss_cfg_snap_release(&held);
    ck_assert_ptr_null(held);
    ss_cfg_snap_release(&held);         /* NULL accepted */

    /* publishes racing a reader (the TSan and ASan builds check the rest) */
    b = ss_cfg_board_new(cfg);
    ck_assert_ptr_nonnull(b);
    snap_reader_t r = { .board = b, .held = ss_cfg_board_take(b), .last = 201 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, snap_read, &r), 0);
    for (int g = 2; g <= 201; g++) {
        cfg->status_interval = cfg->peer_timeout = g;
        ck_assert_int_eq(ss_cfg_board_publish(b, cfg), 0);
    }
    pthread_join(t, NULL);
    ck_assert_int_eq(r.torn, 0);
    ck_assert_int_gt(r.swaps, 0);
    ss_cfg_board_destroy(&b);
    free(cfg);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("daemon_queue");
    TCase *tq = tcase_create("queue");
    tcase_add_test(tq, test_queue_fifo_and_counters);
    tcase_add_test(tq, test_queue_drop_oldest);
    tcase_add_test(tq, test_queue_block_backpressure);
    tcase_add_test(tq, test_queue_close_drains);
    tcase_add_test(tq, test_queue_close_wakes_consumer);
    suite_add_tcase(s, tq);
    TCase *tc = tcase_create("cfgsnap");
    tcase_add_test(tc, test_cfg_snapshots);
    suite_add_tcase(s, tc);
    TCase *tw = tcase_create("dirwatch");
    tcase_set_timeout(tw, 60);
    tcase_add_test(tw, test_dirwatch_rename_into_place);
    tcase_add_test(tw, test_dirwatch_stable_size);
    tcase_add_test(tw, test_dirwatch_existing_and_order);
    tcase_add_test(tw, test_dirwatch_directory_gone);
    suite_add_tcase(s, tw);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
