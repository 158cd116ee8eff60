/*
 * check_subguard.c — the publisher's subscription guard (daemon/subguard.c)
 * with a real XPUB over IPC in this process: a peer past
 * publish.max_subscriptions_per_peer is banned and its connection shut,
 * and the subscriptions it had queued before the ban, refused, do not
 * become topics that ask for residual forms (ss_outsubs). Noting them cost
 * the publisher a linear search each: under ThreadSanitizer a flood's
 * 20,000 stalled it past check_daemon's 10 s (CI, 2026-11-26).
 */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "daemon/outsubs.h"
#include "daemon/subguard.h"
#include "ss_test.h"

enum { FLOOD = 10000, PER_PEER = 100 };     /* FLOOD past outsubs.c's 8,192 */

START_TEST(test_refused_not_noted)
{
    char dir[] = "/tmp/ssg-XXXXXX", ep[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/pub", dir);
    void *ctx = zmq_ctx_new();
    void *xpub = zmq_socket(ctx, ZMQ_XPUB);
    const int zero = 0;
    zmq_setsockopt(xpub, ZMQ_LINGER, &zero, sizeof zero);
    /* no limits on the way (here and on the SUB): the whole flood can
     * wait in the XPUB at once, as it does when the publisher thread is
     * slow */
    zmq_setsockopt(xpub, ZMQ_RCVHWM, &zero, sizeof zero);
    ss_subguard_t *g = ss_subguard_new(ctx, xpub);
    ck_assert_ptr_nonnull(g);
    ck_assert_int_eq(zmq_bind(xpub, ep), 0);
    ss_outsubs_t *subs = ss_outsubs_new();
    ck_assert_ptr_nonnull(subs);

    void *sub = zmq_socket(ctx, ZMQ_SUB);
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_SNDHWM, &zero, sizeof zero);
    ck_assert_int_eq(zmq_connect(sub, ep), 0);
    char topic[64];
    for (int i = 0; i < FLOOD; i++) {
        const int len = snprintf(topic, sizeof topic, "flood-%d", i);
        ck_assert_int_eq(zmq_setsockopt(sub, ZMQ_SUBSCRIBE, topic, (size_t)len), 0);
    }
    sleep_s(1.0);                   /* the I/O threads move them all across */

    const ss_subguard_limits_t lim = { .max_subs = 1000000, .max_subs_peer = PER_PEER,
                                       .ban_s = 60.0 };
    /* the guard's log (stderr) into a file while it polls */
    char logpath[128];
    snprintf(logpath, sizeof logpath, "%s/log", dir);
    fflush(stderr);
    const int saved = dup(2), lf = open(logpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert(saved >= 0 && lf >= 0);
    dup2(lf, 2);
    close(lf);
    for (int k = 0; k < 20; k++) {
        ss_subguard_poll(g, xpub, NULL, &lim, subs);
        sleep_s(0.05);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char log[4096] = "";
    FILE *f = fopen(logpath, "r");
    ck_assert_ptr_nonnull(f);
    log[fread(log, 1, sizeof log - 1, f)] = '\0';
    fclose(f);
    fputs(log, stderr);
    ss_subguard_counts_t c;
    ss_subguard_counts(g, &c);
    printf("subguard: %d subscriptions sent, %llu refused, %llu bans\n", FLOOD,
           (unsigned long long)c.refused, (unsigned long long)c.banned);
    ck_assert_uint_eq(c.banned, 1);
    ck_assert_msg(strstr(log, "over publish.max_subscriptions_per_peer") != NULL,
                  "the ban is not in the captured log");
    /* what was queued past the cap arrived and was refused ... */
    ck_assert_uint_ge(c.refused + PER_PEER, FLOOD / 2);
    /* ... and did not fill the table of topics that ask for residual
     * forms (it logs once when full, at 8,192) */
    ck_assert_msg(strstr(log, "topic prefixes held") == NULL,
                  "the refused subscriptions filled the topic table");

    zmq_close(sub);
    ss_outsubs_destroy(&subs);
    ss_subguard_destroy(&g);
    zmq_close(xpub);
    zmq_ctx_term(ctx);
    rmtree(dir);
}
END_TEST

static Suite *subguard_suite(void)
{
    Suite *s = suite_create("subguard");
    TCase *tc = tcase_create("flood");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_refused_not_noted);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return ss_run_suite(subguard_suite());
}
