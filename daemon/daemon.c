/*
 * daemon.c — skysieved's life cycle: build the feeds from a config, start
 * the threads, run the main loop (signals, control socket, sd_notify,
 * watchdog, reloads), and shut down by draining every queue.
 *
 * Shutdown order (SIGTERM/SIGINT, exit_at_end, broken backend):
 *   1. STOPPING=1; sources stop taking input (a source blocked on a full
 *      queue still hands over the frame it holds);
 *   2. the frame queues close: workers finish what is queued, then exit —
 *      after shutdown.drain_timeout they drop the rest (counted);
 *   3. the sink queues close: the publisher sends what is queued and a
 *      last status message, the file sink writes what is queued;
 *   4. sockets close (the PUB socket lingers SS_PUB_LINGER_MS), the
 *      counters of every feed are logged, exit 0 (1 after a broken backend).
 */
#include "daemon.h"

#include "notify.h"
#include "pipeline/frame_fits.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define TAG "daemon"
#define CTL_MAX_REQUEST SS_PROTO_CTL_REQUEST_MAX   /* bytes of a control request */
/* Requests up to this size are read and answered with an error when over
 * CTL_MAX_REQUEST; libzmq drops a peer that sends more (ZMQ_MAXMSGSIZE). */
#define CTL_MAX_MESSAGE (1 << 20)
#define CTL_RESPONSE_MAX (1u << 20)     /* bytes of a control response (config of 8 feeds fits) */
#define MAIN_POLL_MS 100                /* main loop tick */
#define STOP_GRACE_S 5.0                /* beyond the drain timeout, for a worker in a long frame */
#define HEADER_ALLOWANCE 65536          /* bytes of a residual's JSON header, for SNDHWM */
#define SUBSCRIPTION_MAX 4096           /* bytes of one message from a subscriber (CURVE's INITIATE
                                         * is ~300): longer ones drop the peer */

/* ---- small helpers ------------------------------------------------------ */

static uint64_t mono_us(void)
{
    return (uint64_t)(ss_now_mono() * 1e6);
}

void ss_daemon_block_signals(void)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
}

void ss_daemon_request_stop(ss_daemon_t *d, int exit_code, const char *why)
{
    if (exit_code)
        atomic_store(&d->exit_code, exit_code);
    if (!atomic_exchange(&d->stop_req, 1))
        SS_LOG(exit_code ? SS_LOG_ERR : SS_LOG_NOTICE, TAG, "stopping: %s", why);
    uint64_t one = 1;
    if (write(d->wake_fd, &one, sizeof one) < 0) {
        /* the eventfd counter cannot overflow here; nothing to do */
    }
}

void ss_daemon_status(ss_daemon_t *d, ss_proto_status_t *st)
{
    ss_proto_status_clear(st);
    ss_strlcpy(st->version, SKYSIEVE_VERSION, sizeof st->version);
    st->mjd = ss_unix_to_mjd(ss_now_unix());
    st->uptime_s = ss_now_mono() - d->start_mono;
    st->n_feeds = SS_MIN(d->n_feeds, SS_PROTO_MAX_FEEDS);
    for (int i = 0; i < st->n_feeds; i++)
        ss_stats_snapshot(d->feeds[i].stats, &st->feeds[i], NULL);
}

/* ---- building ----------------------------------------------------------- */

/* The feed's source says its input ended (source.h, on its thread): the
 * daemon stops when the source asks it to (exit_at_end). */
static void source_ended(void *user, const char *stop_why)
{
    ss_feed_t *f = user;
    if (stop_why)
        ss_daemon_request_stop(f->d, 0, stop_why);
}

/* The feed's source makes a socket a CURVE server (source.h). */
static int source_secure(void *user, void *sock, const char *what, char *err, size_t n)
{
    const ss_feed_t *f = user;
    return ss_daemon_secure(f->d, sock, what, err, n);
}

static int feed_build(ss_daemon_t *d, int i, char *err, size_t n)
{
    ss_feed_t *f = &d->feeds[i];
    f->index = i;
    f->d = d;
    f->start = ss_cfg_board_take(d->board);
    f->cfg = &ss_cfg_snap_config(f->start)->feeds[i];
    ss_strlcpy(f->name, f->cfg->name, sizeof f->name);
    int masks = 0;
    ss_source_frame_needs(f->cfg, &f->max_pixels, &f->frame_bytes, &masks);

    if (!(f->pipe = ss_pipeline_new(&f->cfg->pipeline, f->name, err, n)))
        return -1;
    /* the backend chosen for the feed gives the frame pool its host memory
     * (pinned under CUDA, for asynchronous uploads) */
    const ss_backend_ops_t *ops = NULL;
    ss_pipeline_backend(f->pipe, &ops);

    /* queue depth + 3: the queue's frames, the worker's two (the current
     * one and the next, prefetched), the source's */
    int pool_n = f->cfg->queue_depth + 3;
    /* mask buffers only where the source type can deliver a mask */
    size_t mask_bytes = masks ? f->max_pixels : 0;
    f->pool = ss_frame_pool_new(pool_n, f->frame_bytes, mask_bytes, &ops->host_alloc);
    f->frames = ss_queue_new(f->cfg->queue_depth, f->cfg->queue_policy);
    f->n_outs = SS_OUTS_PER_FEED;
    f->outs = calloc((size_t)f->n_outs, sizeof *f->outs);
    f->free_outs = ss_queue_new(f->n_outs, SS_QUEUE_BLOCK);
    if (!f->pool || !f->frames || !f->outs || !f->free_outs) {
        snprintf(err, n, "feed %s: cannot allocate %d frames of %zu bytes", f->name, pool_n,
                 f->frame_bytes);
        return -1;
    }
    for (int k = 0; k < f->n_outs; k++) {
        ss_out_t *o = &f->outs[k];
        o->feed = f;
        if (ss_pipeline_result_init(f->pipe, &o->res, f->max_pixels,
                                    f->cfg->pipeline.max_detections) != 0) {
            snprintf(err, n, "feed %s: cannot allocate result buffers", f->name);
            return -1;
        }
        if (k == 0)
            f->work = o;
        else
            ss_queue_try_push(f->free_outs, o);
    }

    const ss_source_env_t env = {
        .zctx = d->zctx,
        .peer_timeout = d->cfg.peer_timeout,
        .secure = source_secure,
        .ended = source_ended,
        .user = f,
    };
    if (!(f->source = ss_source_open(f, &env, err, n)))
        return -1;
    if (!(f->stats = ss_feed_stats_new(f->name, ss_source_desc(f->source)))) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    if (f->cfg->wcs_solve && !(f->solver = ss_solver_new(f->name, f->cfg, f->stats))) {
        snprintf(err, n, "feed %s: cannot start the plate solver", f->name);
        return -1;
    }
    ss_stats_set_queue(f->stats, 0, f->cfg->queue_depth);
    ss_stats_set_backend(f->stats, ss_pipeline_backend_name(f->pipe));
    SS_LOG(SS_LOG_INFO, TAG, "feed %s: %s; queue %d (%s); frames up to %zu bytes; backend %s",
           f->name, ss_source_desc(f->source), f->cfg->queue_depth,
           ss_queue_policy_name(f->cfg->queue_policy), f->frame_bytes,
           ss_pipeline_backend_name(f->pipe));
    return 0;
}

static void feed_free(ss_feed_t *f)
{
    ss_solver_destroy(&f->solver);
    ss_source_destroy(&f->source);
    ss_pipeline_destroy(&f->pipe);
    if (f->outs)
        for (int k = 0; k < f->n_outs; k++)
            ss_result_free(&f->outs[k].res);
    free(f->outs);
    f->outs = NULL;
    ss_queue_destroy(&f->free_outs);
    ss_queue_destroy(&f->frames);
    ss_frame_pool_destroy(&f->pool);
    ss_feed_stats_destroy(&f->stats);
    ss_cfg_snap_release(&f->wsnap);
    ss_cfg_snap_release(&f->start);
    f->cfg = NULL;
}

static int bind_socket(void *sock, const char *endpoint, const char *what, char *err, size_t n)
{
    if (zmq_bind(sock, endpoint) != 0) {
        snprintf(err, n, "%s: cannot bind %s: %s", what, endpoint, zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* Bind the control socket where ss_config_control_endpoint says (a
 * missing directory moves it), logging where it went. The config keeps
 * the configured value (a reload compares it). */
static int bind_control(void *sock, const char *endpoint, char *err, size_t n)
{
    char ep[SS_ENDPOINT_MAX + 32], why[300];
    if (ss_config_control_endpoint(endpoint, ep, sizeof ep, why, sizeof why))
        SS_LOG(SS_LOG_NOTICE, TAG, "control.endpoint %s: %s; the control socket is on %s instead",
               endpoint, why, ep);
    return bind_socket(sock, ep, "control", err, n);
}

static int open_sockets(ss_daemon_t *d, char *err, size_t n)
{
    const ss_config_t *c = &d->cfg;
    if (c->publish_endpoint[0]) {
        /* XPUB (it passes subscriptions up) without NODROP: a subscriber
         * over its SNDHWM loses what does not fit, it alone, and sees the
         * gap in topic_seq (publisher.c); SNDHWM from the byte budget
         * bounds what each one holds. */
        size_t largest = HEADER_ALLOWANCE;
        for (int i = 0; i < d->n_feeds; i++)
            largest = SS_MAX(largest, HEADER_ALLOWANCE + d->feeds[i].max_pixels * 5);
        d->pub_hwm = ss_publish_sndhwm(c->publish_budget, largest);
        int linger = SS_PUB_LINGER_MS;
        d->pub_sock = zmq_socket(d->zctx, ZMQ_XPUB);
        if (!d->pub_sock) {
            snprintf(err, n, "publish: %s", zmq_strerror(zmq_errno()));
            return -1;
        }
        /* subscriptions are short: a peer sending more is dropped */
        const int64_t maxmsg = SUBSCRIPTION_MAX;
        zmq_setsockopt(d->pub_sock, ZMQ_SNDHWM, &d->pub_hwm, sizeof d->pub_hwm);
        zmq_setsockopt(d->pub_sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        ss_zmq_heartbeats(d->pub_sock, c->peer_timeout);
        if (ss_daemon_secure(d, d->pub_sock, "publish", err, n) != 0)
            return -1;
        /* without CURVE too, the ZAP handler sees every subscriber: the
         * subscription guard bans flooding addresses through it */
        if (!ss_zap_curve(d->zap))
            zmq_setsockopt(d->pub_sock, ZMQ_ZAP_DOMAIN, "skysieve", 8);
        if (!(d->pub_guard = ss_subguard_new(d->zctx, d->pub_sock))) {
            snprintf(err, n, "publish: the subscription guard cannot start");
            return -1;
        }
        zmq_setsockopt(d->pub_sock, ZMQ_LINGER, &linger, sizeof linger);
        if (bind_socket(d->pub_sock, c->publish_endpoint, "publish", err, n) != 0)
            return -1;
        SS_LOG(SS_LOG_INFO, TAG, "publishing on %s (SNDHWM %d messages from a %llu byte budget)",
               c->publish_endpoint, d->pub_hwm, (unsigned long long)c->publish_budget);
    }
    if (c->control_endpoint[0]) {
        int zero = 0;
        int64_t maxmsg = CTL_MAX_MESSAGE;
        d->ctl_sock = zmq_socket(d->zctx, ZMQ_REP);
        if (!d->ctl_sock) {
            snprintf(err, n, "control: %s", zmq_strerror(zmq_errno()));
            return -1;
        }
        zmq_setsockopt(d->ctl_sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_setsockopt(d->ctl_sock, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
        ss_zmq_heartbeats(d->ctl_sock, c->peer_timeout);
        if (ss_daemon_secure(d, d->ctl_sock, "control", err, n) != 0)
            return -1;
        if (bind_control(d->ctl_sock, c->control_endpoint, err, n) != 0)
            return -1;
        char bound[SS_ENDPOINT_MAX + 32] = "";
        size_t bl = sizeof bound;
        zmq_getsockopt(d->ctl_sock, ZMQ_LAST_ENDPOINT, bound, &bl);
        SS_LOG(SS_LOG_INFO, TAG, "control socket on %s", bound[0] ? bound : c->control_endpoint);
    }
    return 0;
}

/* The ZAP handler, started before any socket binds (libzmq admits anyone
 * while no handler is bound): with CURVE on (security.curve_key) the
 * daemon's key pair read and the admitted keys loaded; without it, when
 * publishing, for the subscription guard's bans alone. */
static int start_zap(ss_daemon_t *d, char *err, size_t n)
{
    const ss_config_t *c = &d->cfg;
    if (c->curve_key[0]) {
        char why[480];
        if (ss_curve_read_key(c->curve_key, 1, &d->curve, why, sizeof why) != 0) {
            snprintf(err, n, "security.curve_key: %s", why);
            return -1;
        }
        return (d->zap = ss_zap_start(d->zctx, c->client_keys, err, n)) ? 0 : -1;
    }
    if (!c->publish_endpoint[0])
        return 0;
    return (d->zap = ss_zap_start(d->zctx, NULL, err, n)) ? 0 : -1;
}

int ss_daemon_secure(const ss_daemon_t *d, void *sock, const char *what, char *err, size_t n)
{
    if (!ss_zap_curve(d->zap) || ss_curve_server(sock, &d->curve) == 0)
        return 0;
    snprintf(err, n, "%s: CURVE: %s", what, zmq_strerror(zmq_errno()));
    return -1;
}

/* A gzip'ed FITS file may inflate to the largest frame a feed accepts, as
 * 64-bit pixels, plus GZ_HEADROOM for headers, extensions and overscan. */
#define GZ_HEADROOM ((size_t)16 << 20)
static void set_inflate_limit(const ss_daemon_t *d)
{
    size_t most = 0;
    for (int i = 0; i < d->n_feeds; i++) {
        const ss_feed_cfg_t *c = &d->cfg.feeds[i];
        most = SS_MAX(most, (size_t)c->max_width * (size_t)c->max_height * 8);
    }
    ss_fits_set_inflate_limit(most + GZ_HEADROOM);
}

ss_daemon_t *ss_daemon_new(const ss_config_t *cfg, const char *config_path)
{
    ss_daemon_t *d = calloc(1, sizeof *d);
    if (!d) {
        SS_LOG(SS_LOG_ERR, TAG, "out of memory");
        return NULL;
    }
    d->cfg = *cfg;
    ss_strlcpy(d->config_path, config_path ? config_path : "", sizeof d->config_path);
    d->log_level_override = -1;
    pthread_mutex_init(&d->region_lock, NULL);
    d->start_mono = ss_now_mono();
    d->start_unix = ss_now_unix();
    d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    d->zctx = zmq_ctx_new();
    d->board = ss_cfg_board_new(cfg);
    char err[512] = "";
    if (d->wake_fd < 0 || !d->zctx || !d->board) {
        snprintf(err, sizeof err, "cannot create the event fd, the ZeroMQ context or the config");
        goto fail;
    }
    if (start_zap(d, err, sizeof err) != 0)
        goto fail;
    d->n_feeds = cfg->n_feeds;
    for (int i = 0; i < d->n_feeds; i++)
        if (feed_build(d, i, err, sizeof err) != 0)
            goto fail;
    set_inflate_limit(d);
    int total_outs = d->n_feeds * SS_OUTS_PER_FEED;
    d->pub_q = ss_queue_new(total_outs, SS_QUEUE_BLOCK);
    d->file_q = ss_queue_new(total_outs, SS_QUEUE_BLOCK);
    if (!d->pub_q || !d->file_q) {
        snprintf(err, sizeof err, "out of memory");
        goto fail;
    }
    if (open_sockets(d, err, sizeof err) != 0)
        goto fail;
    return d;
fail:
    SS_LOG(SS_LOG_ERR, TAG, "%s", err);
    ss_daemon_destroy(&d);
    return NULL;
}

void ss_daemon_destroy(ss_daemon_t **pd)
{
    if (!pd || !*pd)
        return;
    ss_daemon_t *d = *pd;
    for (int i = 0; i < SS_MAX_FEEDS; i++)
        feed_free(&d->feeds[i]);
    if (d->pub_sock)
        zmq_close(d->pub_sock);
    if (d->ctl_sock)
        zmq_close(d->ctl_sock);
    ss_zap_stop(&d->zap);
    if (d->zctx)
        zmq_ctx_term(d->zctx);
    ss_queue_destroy(&d->pub_q);
    ss_queue_destroy(&d->file_q);
    if (d->wake_fd >= 0)
        close(d->wake_fd);
    ss_cfg_board_destroy(&d->board);
    pthread_mutex_destroy(&d->region_lock);
    free(d);
    *pd = NULL;
}

/* ---- reload ---------------------------------------------------------------- */

static int reload_file(ss_daemon_t *d, char *err, size_t n)
{
    if (!d->config_path[0]) {
        snprintf(err, n, "running the built-in default config: there is no file to reload");
        return -1;
    }
    ss_config_t *neu = malloc(sizeof *neu);
    if (!neu) {
        snprintf(err, n, "out of memory");
        return -1;
    }
    int rc = -1;
    char which[256];
    if (ss_config_load_checked(d->config_path, neu, err, n) != SS_OK)
        goto out;
    if (ss_config_diff_nonreloadable(&d->cfg, neu, which, sizeof which) > 0) {
        snprintf(err, n, "%s: %s cannot change without a restart; nothing was reloaded",
                 d->config_path, which);
        goto out;
    }
    /* calibration the new config names must fit the frames now arriving */
    for (int i = 0; i < d->n_feeds; i++) {
        pthread_mutex_lock(&d->region_lock);
        const ss_roi_t region = d->feeds[i].region;
        pthread_mutex_unlock(&d->region_lock);
        char e[480];
        if (ss_pipeline_check_calibration(&neu->feeds[i].pipeline, region, e, sizeof e) != 0) {
            snprintf(err, n, "%s: feeds[%d].%s; nothing was reloaded", d->config_path, i, e);
            goto out;
        }
    }

    /* the running config with the new reloadable keys, published for the
     * threads (each takes it at its next frame boundary), then kept */
    ss_config_t *next = malloc(sizeof *next);
    if (!next) {
        snprintf(err, n, "out of memory");
        goto out;
    }
    *next = d->cfg;
    ss_config_apply_reloadable(next, neu);
    if (ss_cfg_board_publish(d->board, next) != 0) {
        snprintf(err, n, "out of memory");
        free(next);
        goto out;
    }
    d->cfg = *next;
    free(next);
    ss_log_setup(d->log_level_override >= 0 ? d->log_level_override : d->cfg.log_level,
                 ss_log_prefix_wanted(d->cfg.log_prefix));
    rc = 0;
    SS_LOG(SS_LOG_NOTICE, TAG, "reloaded %s", d->config_path);
out:
    free(neu);
    return rc;
}

int ss_daemon_reload(ss_daemon_t *d, const char *by, char *err, size_t n)
{
    ss_notify_reloading();
    SS_LOG(SS_LOG_NOTICE, TAG, "reload requested (%s)", by);
    int rc = reload_file(d, err, n);
    if (rc != 0)
        SS_LOG(SS_LOG_ERR, TAG, "reload rejected, the running config stays: %s", err);
    ss_notify_ready();
    return rc;
}

int ss_log_prefix_wanted(ss_log_prefix_t p)
{
    if (p != SS_LOG_PREFIX_AUTO)
        return p == SS_LOG_PREFIX_ALWAYS;
    const char *js = getenv("JOURNAL_STREAM");
    unsigned long long dev, ino;
    struct stat st;
    if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) != 0)
        return 0;
    return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

/* ---- run ------------------------------------------------------------------ */

static int start_threads(ss_daemon_t *d)
{
    for (int i = 0; i < d->n_feeds; i++) {
        ss_feed_t *f = &d->feeds[i];
        if (pthread_create(&f->worker, NULL, ss_worker_main, f) != 0)
            return -1;
        f->worker_started = 1;
    }
    if (pthread_create(&d->publisher, NULL, ss_publisher_main, d) != 0)
        return -1;
    d->publisher_started = 1;
    if (pthread_create(&d->filesink, NULL, ss_filesink_main, d) != 0)
        return -1;
    d->filesink_started = 1;
    for (int i = 0; i < d->n_feeds; i++)
        if (ss_source_start(d->feeds[i].source) != SS_OK)
            return -1;
    return 0;
}

/* Every pipeline is idle or its current frame started less than
 * watchdog.stall_timeout ago: the proof of progress behind WATCHDOG=1. */
static int pipelines_progress(ss_daemon_t *d, double stall_s)
{
    uint64_t now = mono_us();
    for (int i = 0; i < d->n_feeds; i++) {
        uint64_t since = atomic_load(&d->feeds[i].busy_since_us);
        if (since && (double)(now - since) * 1e-6 > stall_s) {
            static double last_warn;
            if (ss_now_mono() - last_warn > 10.0) {
                last_warn = ss_now_mono();
                SS_LOG(SS_LOG_ERR, TAG, "feed %s: one frame has taken %.1f s: withholding WATCHDOG=1",
                       d->feeds[i].name, (double)(now - since) * 1e-6);
            }
            return 0;
        }
    }
    return 1;
}

static void notify_status(ss_daemon_t *d)
{
    double fps = 0;
    uint64_t processed = 0, dropped = 0, rejected = 0, pub_dropped = 0;
    for (int i = 0; i < d->n_feeds; i++) {
        ss_proto_feed_stats_t s;
        ss_stats_tick(d->feeds[i].stats, ss_now_mono());
        ss_stats_snapshot(d->feeds[i].stats, &s, NULL);
        fps += s.fps;
        processed += s.processed;
        dropped += s.dropped_queue;
        rejected += s.rejected;
        pub_dropped += s.pub_dropped;
    }
    ss_notify_status("%d feed%s, %.2f frames/s, %llu processed, %llu dropped, %llu rejected, "
                     "%llu publish drops",
                     d->n_feeds, d->n_feeds == 1 ? "" : "s", fps, (unsigned long long)processed,
                     (unsigned long long)dropped, (unsigned long long)rejected,
                     (unsigned long long)pub_dropped);
}

static void serve_control(ss_daemon_t *d, char *req, char *resp)
{
    for (;;) {
        int len = zmq_recv(d->ctl_sock, req, CTL_MAX_REQUEST, ZMQ_DONTWAIT);
        if (len < 0)
            return;
        int more = 0;
        size_t ml = sizeof more;
        zmq_getsockopt(d->ctl_sock, ZMQ_RCVMORE, &more, &ml);
        int extra = 0;
        while (more) {  /* a request is one part: drop the others */
            char dummy[1];
            if (zmq_recv(d->ctl_sock, dummy, sizeof dummy, 0) < 0)
                break;
            extra++;
            zmq_getsockopt(d->ctl_sock, ZMQ_RCVMORE, &more, &ml);
        }
        int rl;
        if (extra)
            rl = ss_proto_encode_error_response(NULL, "a control request is one message part",
                                                resp, CTL_RESPONSE_MAX);
        else if ((size_t)len > CTL_MAX_REQUEST) {
            char why[96];
            snprintf(why, sizeof why, "control request too long: %d bytes (at most %d)", len,
                     CTL_MAX_REQUEST);
            rl = ss_proto_encode_error_response(NULL, why, resp, CTL_RESPONSE_MAX);
        }
        else
            rl = ss_control_handle(d, req, (size_t)len, resp, CTL_RESPONSE_MAX);
        if (rl < 0)
            rl = ss_proto_encode_error_response(NULL, "response too large", resp,
                                                CTL_RESPONSE_MAX);
        zmq_send(d->ctl_sock, resp, rl < 0 ? 0 : (size_t)rl, 0);
    }
}

/* Wait for the workers to finish what is queued, up to the drain timeout;
 * then make them drop the rest. Keeps feeding the watchdog meanwhile. */
static void drain_workers(ss_daemon_t *d, uint64_t wd_us)
{
    double t0 = ss_now_mono(), last_wd = 0;
    double limit = d->cfg.drain_timeout;
    int discarding = 0;
    for (;;) {
        int pending = 0;
        for (int i = 0; i < d->n_feeds; i++)
            pending += d->feeds[i].worker_started && !atomic_load(&d->feeds[i].worker_done);
        if (!pending)
            return;
        double now = ss_now_mono();
        if (!discarding && now - t0 > limit) {
            SS_LOG(SS_LOG_WARNING, TAG, "drain timeout (%.1f s): dropping what is still queued",
                   limit);
            for (int i = 0; i < d->n_feeds; i++)
                atomic_store(&d->feeds[i].discard, 1);
            discarding = 1;
        }
        if (now - t0 > limit + STOP_GRACE_S) {
            SS_LOG(SS_LOG_ERR, TAG, "a pipeline does not finish its frame: exiting without cleanup");
            _exit(1);
        }
        if (wd_us && (now - last_wd) * 1e6 > (double)wd_us / 2 &&
            pipelines_progress(d, d->cfg.watchdog_stall)) {
            ss_notify_watchdog();
            last_wd = now;
        }
        struct timespec ts = { 0, 20000000L };
        nanosleep(&ts, NULL);
    }
}

static void log_summary(ss_daemon_t *d)
{
    if (ss_zap_curve(d->zap))
        SS_LOG(SS_LOG_NOTICE, TAG, "security final: admitted=%llu refused=%llu (peers by CURVE key)",
               (unsigned long long)ss_zap_admitted(d->zap),
               (unsigned long long)ss_zap_refused(d->zap));
    if (d->cfg.publish_endpoint[0])
        SS_LOG(SS_LOG_NOTICE, TAG,
               "publish final: subscriptions_held=%lld subscriptions_refused=%llu "
               "peers_banned=%llu refused_banned=%llu connections_refused=%llu",
               (long long)d->pub_counts.held, (unsigned long long)d->pub_counts.refused,
               (unsigned long long)d->pub_counts.banned,
               (unsigned long long)ss_zap_refused_banned(d->zap),
               (unsigned long long)d->pub_counts.conns_refused);
    for (int i = 0; i < d->n_feeds; i++) {
        ss_proto_feed_stats_t s;
        ss_sink_counters_t k;
        ss_stats_snapshot(d->feeds[i].stats, &s, &k);
        SS_LOG(SS_LOG_NOTICE, TAG,
               "feed %s final: received=%llu accepted=%llu rejected=%llu dropped=%llu "
               "processed=%llu ok=%llu reference=%llu warmup=%llu regfail=%llu error=%llu "
               "detections=%llu published=%llu pub_dropped=%llu sink_dropped=%llu "
               "file_dropped=%llu fits_written=%llu fits_errors=%llu jsonl_written=%llu "
               "jsonl_errors=%llu ds9_written=%llu ds9_errors=%llu iod_written=%llu "
               "iod_errors=%llu ades_written=%llu ades_errors=%llu detections_truncated=%llu "
               "peer_disconnects=%llu connections_refused=%llu solve_started=%llu solve_ok=%llu "
               "solve_failed=%llu solve_timeouts=%llu",
               s.name, (unsigned long long)s.received, (unsigned long long)s.accepted,
               (unsigned long long)s.rejected, (unsigned long long)s.dropped_queue,
               (unsigned long long)s.processed,
               (unsigned long long)s.status_count[SS_STATUS_OK],
               (unsigned long long)s.status_count[SS_STATUS_REFERENCE],
               (unsigned long long)s.status_count[SS_STATUS_WARMUP],
               (unsigned long long)s.status_count[SS_STATUS_REG_FAILED],
               (unsigned long long)s.status_count[SS_STATUS_ERROR],
               (unsigned long long)s.detections, (unsigned long long)s.published,
               (unsigned long long)s.pub_dropped, (unsigned long long)k.sink_dropped,
               (unsigned long long)k.file_dropped, (unsigned long long)k.fits_written,
               (unsigned long long)k.fits_errors,
               (unsigned long long)k.jsonl_written, (unsigned long long)k.jsonl_errors,
               (unsigned long long)k.ds9_written, (unsigned long long)k.ds9_errors,
               (unsigned long long)k.iod_written, (unsigned long long)k.iod_errors,
               (unsigned long long)k.ades_written, (unsigned long long)k.ades_errors,
               (unsigned long long)s.detections_truncated,
               (unsigned long long)k.peer_disconnects,
               (unsigned long long)k.connections_refused, (unsigned long long)k.solve_started,
               (unsigned long long)k.solve_ok, (unsigned long long)k.solve_failed,
               (unsigned long long)k.solve_timeouts);
        if (d->feeds[i].cfg->source == SS_SOURCE_INDI)
            SS_LOG(SS_LOG_NOTICE, TAG, "feed %s final (indi): indi_connects=%llu "
                   "indi_connect_failures=%llu indi_disconnects=%llu indi_malformed=%llu", s.name,
                   (unsigned long long)k.indi_connects, (unsigned long long)k.indi_connect_failures,
                   (unsigned long long)k.indi_disconnects, (unsigned long long)k.indi_malformed);
    }
}

/* What accepted frames did not deliver, over every feed: frames dropped at
 * the drain timeout, residual files and JSON lines that failed to write,
 * and, for a feed under queue.policy block (where nothing is dropped by
 * design), results no sink saw or the file sinks skipped. Logged as one
 * line naming each count; returns the total. (Under drop_oldest, frames
 * and file results skipped while the daemon ran to keep its pace are the
 * policy, counted in dropped_queue / sink_dropped / file_dropped, and not
 * part of this; during the drain every feed waits for its sinks.) */
static uint64_t report_losses(ss_daemon_t *d)
{
    char line[1024] = "";
    size_t at = 0;
    uint64_t total = 0;
    for (int i = 0; i < d->n_feeds; i++) {
        ss_feed_t *f = &d->feeds[i];
        ss_proto_feed_stats_t s;
        ss_sink_counters_t k;
        ss_stats_snapshot(f->stats, &s, &k);
        const uint64_t drained = (uint64_t)atomic_load(&f->drain_dropped);
        const int block = f->cfg->queue_policy == SS_QUEUE_BLOCK;
        const uint64_t skipped = block ? k.sink_dropped + k.file_dropped : 0;
        const uint64_t lost =
            drained + skipped + k.fits_errors + k.jsonl_errors + k.ds9_errors + k.iod_errors +
            k.ades_errors;
        if (!lost)
            continue;
        total += lost;
        int w = snprintf(line + at, sizeof line - at,
                         "%sfeed %s: %llu frames dropped at the drain timeout, %llu results no "
                         "sink saw (sink_dropped), %llu skipped by the file sinks (file_dropped), "
                         "%llu FITS, %llu JSON-lines, %llu DS9, %llu IOD and %llu ADES write "
                         "errors",
                         at ? "; " : "", f->name, (unsigned long long)drained,
                         (unsigned long long)(block ? k.sink_dropped : 0),
                         (unsigned long long)(block ? k.file_dropped : 0),
                         (unsigned long long)k.fits_errors, (unsigned long long)k.jsonl_errors,
                         (unsigned long long)k.ds9_errors, (unsigned long long)k.iod_errors,
                         (unsigned long long)k.ades_errors);
        if (w > 0 && (size_t)w < sizeof line - at)
            at += (size_t)w;
    }
    if (total)
        SS_LOG(SS_LOG_ERR, TAG, "results lost: %s", line);
    return total;
}

static void shutdown_all(ss_daemon_t *d, uint64_t wd_us)
{
    atomic_store(&d->draining, 1);
    /* the drain may take up to drain_timeout + the grace: systemd's
     * TimeoutStopSec is extended to that (and a second more) */
    ss_notify_stopping((uint64_t)((d->cfg.drain_timeout + STOP_GRACE_S + 1.0) * 1e6));
    SS_LOG(SS_LOG_NOTICE, TAG, "shutting down: stopping intake, draining the queues");
    for (int i = 0; i < d->n_feeds; i++)
        ss_source_stop(d->feeds[i].source);
    for (int i = 0; i < d->n_feeds; i++)
        ss_queue_close(d->feeds[i].frames);
    drain_workers(d, wd_us);
    for (int i = 0; i < d->n_feeds; i++)
        if (d->feeds[i].worker_started) {
            pthread_join(d->feeds[i].worker, NULL);
            d->feeds[i].worker_started = 0;
        }
    ss_queue_close(d->pub_q);
    ss_queue_close(d->file_q);
    if (d->publisher_started) {
        pthread_join(d->publisher, NULL);
        d->publisher_started = 0;
    }
    if (d->filesink_started) {
        pthread_join(d->filesink, NULL);
        d->filesink_started = 0;
    }
    log_summary(d);
}

int ss_daemon_run(ss_daemon_t *d)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "signalfd: %s", strerror(errno));
        return 1;
    }
    char *req = malloc(CTL_MAX_REQUEST + 1), *resp = malloc(CTL_RESPONSE_MAX);
    if (!req || !resp || start_threads(d) != 0) {
        SS_LOG(SS_LOG_ERR, TAG, "cannot start the threads");
        atomic_store(&d->exit_code, 1);
        ss_daemon_request_stop(d, 1, "start failed");
        goto stop;
    }

    uint64_t wd_us = ss_notify_watchdog_usec();
    ss_notify_ready();
    SS_LOG(SS_LOG_NOTICE, TAG, "skysieved %s ready: %d feed%s%s", SKYSIEVE_VERSION, d->n_feeds,
           d->n_feeds == 1 ? "" : "s", wd_us ? ", watchdog on" : "");
    notify_status(d);
    double last_status = ss_now_mono(), last_wd = 0;

    while (!atomic_load(&d->stop_req)) {
        zmq_pollitem_t items[3];
        int ni = 0;
        items[ni++] = (zmq_pollitem_t){ .fd = sfd, .events = ZMQ_POLLIN };
        items[ni++] = (zmq_pollitem_t){ .fd = d->wake_fd, .events = ZMQ_POLLIN };
        if (d->ctl_sock)
            items[ni++] = (zmq_pollitem_t){ .socket = d->ctl_sock, .events = ZMQ_POLLIN };
        int rc = zmq_poll(items, ni, MAIN_POLL_MS);
        if (rc < 0 && zmq_errno() != EINTR) {
            SS_LOG(SS_LOG_ERR, TAG, "zmq_poll: %s", zmq_strerror(zmq_errno()));
            ss_daemon_request_stop(d, 1, "main loop failed");
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                char err[600];
                if (si.ssi_signo == SIGHUP)
                    ss_daemon_reload(d, "SIGHUP", err, sizeof err);
                else
                    ss_daemon_request_stop(d, 0, si.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM");
            }
        }
        if (items[1].revents & ZMQ_POLLIN) {
            uint64_t v;
            if (read(d->wake_fd, &v, sizeof v) < 0) {
                /* nothing pending */
            }
        }
        if (ni > 2 && (items[2].revents & ZMQ_POLLIN))
            serve_control(d, req, resp);

        double now = ss_now_mono();
        const double interval = d->cfg.status_interval, stall = d->cfg.watchdog_stall;
        if (now - last_status >= interval) {
            notify_status(d);
            last_status = now;
        }
        if (wd_us && (now - last_wd) * 1e6 >= (double)wd_us / 2 && pipelines_progress(d, stall)) {
            ss_notify_watchdog();
            last_wd = now;
        }
    }

stop:
    shutdown_all(d, ss_notify_watchdog_usec());
    close(sfd);
    free(req);
    free(resp);
    int code = atomic_load(&d->exit_code);
    if (report_losses(d) && code == 0)
        code = SS_EXIT_LOST;
    SS_LOG(SS_LOG_NOTICE, TAG, "stopped (exit %d)", code);
    return code;
}
