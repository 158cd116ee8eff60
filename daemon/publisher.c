/*
 * publisher.c — the one thread that owns the PUB socket (an XPUB, bound by
 * the main thread before READY=1).
 *
 * For every processed frame it sends a detections message
 * ["detections.<feed>", body] and, for frames that have a residual (status
 * ok) and when publish.residuals is on, a residual message
 * ["residual.<feed>", header, float32 pixels, (uint8 mask)]; after the
 * detections, for frames with track reports (res->tracks.count > 0), a
 * tracks message ["tracks.<feed>", body] — proto/ encodes them all.
 * The residual's other forms (PROTOCOL.md §5a, §5b) go out when the
 * result carries them, which it does only while subscribers ask
 * (outsubs.h: the subscriptions are tracked here, the workers read the
 * forms wanted per feed from ss_daemon_t.out_wanted): float16 on
 * "residual16.<feed>", every publish.every-th frame's on
 * "residual_every.<feed>" / "residual16_every.<feed>", and the stamps of
 * ok frames on "stamps.<feed>" [topic, body, float32 pixels].
 * Every status_interval seconds, and once more at shutdown, a status
 * message ["status", body]. Each JSON part gets "topic_seq", the message's
 * number on its topic (0, 1, ... from the daemon's start), so that a
 * subscriber sees its own gaps.
 *
 * Never blocking the pipeline, never one subscriber for another: the
 * worker hands results over through a queue that cannot fill (it holds
 * every result buffer); a subscriber whose queue is over SNDHWM (derived
 * from publish.byte_budget, so that what it holds is bounded in bytes)
 * loses the messages that do not fit — it alone (XPUB without NODROP),
 * and it sees the gap in topic_seq; the others get every message.
 * pub_dropped counts messages that could not be sent to anyone (errors).
 * The (un)subscriptions the XPUB passes up go to the subscription guard
 * (subguard.h), which caps them per peer and in total.
 */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "pipeline/half_core.h"

#define TAG "publisher"
#define HEADER_MAX 65536                /* residual JSON header */
#define STATUS_MAX (256u * 1024u)       /* status body of SS_MAX_FEEDS feeds */
#define TOPIC_SEQ_ROOM 48               /* bytes ,"topic_seq":<20 digits> needs */

typedef struct pub {
    ss_daemon_t *d;
    void *sock;
    ss_cfg_snap_t *snap;            /* the config, taken between results (cfgsnap.h) */
    /* the next topic_seq of each topic: residual.<feed>, detections.<feed>,
     * tracks.<feed> (by feed index), status */
    uint64_t res_seq[SS_MAX_FEEDS], det_seq[SS_MAX_FEEDS], trk_seq[SS_MAX_FEEDS], status_seq;
    /* the other forms' topics (the float32 one is res_seq) and stamps.<feed> */
    uint64_t form_seq[SS_FORM__COUNT][SS_MAX_FEEDS], stamp_seq[SS_MAX_FEEDS];
    ss_outsubs_t *subs;             /* topic prefixes held: the forms asked for */
    char *hdr;
    char *body;
    size_t body_cap;
    uint8_t *mask;
    size_t mask_cap;
    ss_proto_status_t *status;
} pub_t;

/* Send a multipart message; returns 1 when sent, 0 when it failed. An
 * XPUB without NODROP never blocks or refuses for a full subscriber. */
static int send_parts(pub_t *p, const void *const *data, const size_t *len, int n)
{
    for (int i = 0; i < n; i++) {
        int flags = (i < n - 1 ? ZMQ_SNDMORE : 0) | ZMQ_DONTWAIT;
        if (zmq_send(p->sock, data[i], len[i], flags) < 0) {
            SS_LOG(SS_LOG_ERR, TAG, "send: %s", zmq_strerror(zmq_errno()));
            return 0;
        }
    }
    return 1;
}

static int grow(void **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    void *nb = realloc(*buf, need);
    if (!nb)
        return -1;
    *buf = nb;
    *cap = need;
    return 0;
}

/* Send the [topic, body] message of type t (SS_MSG_DETECTIONS or
 * SS_MSG_TRACKS) for res, numbered *topic_seq (advanced when it encodes).
 * Returns 1 when sent, 0 when it did not encode (logged) or send. */
static int publish_body(pub_t *p, const ss_feed_t *f, const ss_result_t *res, ss_msg_type_t t,
                        uint64_t *topic_seq)
{
    const int tracks = t == SS_MSG_TRACKS;
    size_t bound = (tracks ? ss_proto_tracks_bound(res) : ss_proto_detections_bound(res)) +
                   TOPIC_SEQ_ROOM;
    char topic[SS_PROTO_TOPIC_MAX];
    int tl = ss_proto_topic(t, ss_feed_name(f), topic, sizeof topic);
    int bl = -1;
    if (grow((void **)&p->body, &p->body_cap, bound) == 0)
        bl = tracks ? ss_proto_encode_tracks(res, p->body, p->body_cap - TOPIC_SEQ_ROOM)
                    : ss_proto_encode_detections(res, p->body, p->body_cap - TOPIC_SEQ_ROOM);
    if (bl >= 0)
        bl = ss_proto_add_topic_seq(p->body, bl, p->body_cap, (*topic_seq)++);
    if (tl < 0 || bl < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: frame %llu: %s do not encode", ss_feed_name(f),
               (unsigned long long)res->meta.seq, ss_msg_type_name(t));
        return 0;
    }
    const void *data[2] = { topic, p->body };
    size_t len[2] = { (size_t)tl, (size_t)bl };
    return send_parts(p, data, len, 2);
}

/* Send residual form `form` of res, numbered *topic_seq: [topic, header,
 * pixels (float32 or binary16), (mask: 1 where not NaN)]. Returns 1 when
 * sent, 0 when it did not encode (logged) or send. */
static int publish_form(pub_t *p, const ss_feed_t *f, const ss_result_t *res,
                        ss_residual_form_t form, int every, int with_mask, uint64_t *topic_seq)
{
    const int f16 = form == SS_FORM_F16 || form == SS_FORM_F16_EVERY;
    char topic[SS_PROTO_TOPIC_MAX];
    const int tl = ss_proto_form_topic(form, ss_feed_name(f), topic, sizeof topic);
    int hl = ss_proto_encode_residual_form(res, form, every, p->hdr, HEADER_MAX);
    if (hl >= 0)
        hl = ss_proto_add_topic_seq(p->hdr, hl, HEADER_MAX, (*topic_seq)++);
    if (tl < 0 || hl < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: frame %llu: %s header does not encode",
               ss_feed_name(f), (unsigned long long)res->meta.seq, ss_proto_form_name(form));
        return 0;
    }
    const size_t npix = (size_t)res->width * (size_t)res->height;
    const void *data[4] = { topic, p->hdr, f16 ? (const void *)res->residual16 : res->residual,
                            p->mask };
    size_t len[4] = { (size_t)tl, (size_t)hl, npix * (f16 ? sizeof(uint16_t) : sizeof(float)),
                      npix };
    int parts = 3;
    if (with_mask && grow((void **)&p->mask, &p->mask_cap, npix) == 0) {
        data[3] = p->mask;
        if (f16)
            for (size_t i = 0; i < npix; i++)
                p->mask[i] = (uint8_t)(res->residual16[i] != SS_F16_NAN);
        else
            ss_proto_residual_mask(res->residual, npix, p->mask);
        parts = 4;
    }
    return send_parts(p, data, len, parts);
}

/* Send the stamps of res: [topic, body, pixels]. 1 when sent. */
static int publish_stamps(pub_t *p, const ss_feed_t *f, const ss_result_t *res,
                          uint64_t *topic_seq)
{
    char topic[SS_PROTO_TOPIC_MAX];
    const int tl = ss_proto_topic(SS_MSG_STAMPS, ss_feed_name(f), topic, sizeof topic);
    const size_t bound = ss_proto_stamps_bound(res) + TOPIC_SEQ_ROOM;
    int bl = -1;
    if (grow((void **)&p->body, &p->body_cap, bound) == 0)
        bl = ss_proto_encode_stamps(res, p->body, p->body_cap - TOPIC_SEQ_ROOM);
    if (bl >= 0)
        bl = ss_proto_add_topic_seq(p->body, bl, p->body_cap, (*topic_seq)++);
    if (tl < 0 || bl < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "feed %s: frame %llu: stamps do not encode", ss_feed_name(f),
               (unsigned long long)res->meta.seq);
        return 0;
    }
    const void *data[3] = { topic, p->body, res->stamps.pixels };
    size_t len[3] = { (size_t)tl, (size_t)bl, res->stamps.npix * sizeof(float) };
    return send_parts(p, data, len, 3);
}

/* The other forms of res that it carries and someone asks for. */
static void publish_forms(pub_t *p, const ss_feed_t *f, int fi, const ss_result_t *res,
                          uint64_t *sent, uint64_t *dropped)
{
    const ss_config_t *c = ss_cfg_snap_config(p->snap);
    const unsigned want = atomic_load(&p->d->out_wanted[fi]);
    const int k = c->publish_every;
    const int every = k > 0 && res->meta.seq % (uint64_t)k == 0;
    const struct { ss_residual_form_t form; int has; } forms[] = {
        { SS_FORM_F16, res->has_residual16 },
        { SS_FORM_F32_EVERY, every && res->has_residual },
        { SS_FORM_F16_EVERY, every && res->has_residual16 },
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        if (!forms[i].has || !(want & SS_WANT_FORM(forms[i].form)))
            continue;
        if (publish_form(p, f, res, forms[i].form, k, c->publish_mask,
                         &p->form_seq[forms[i].form][fi]))
            ++*sent;
        else
            ++*dropped;
    }
    if (res->has_stamps && (want & SS_WANT_STAMPS)) {
        if (publish_stamps(p, f, res, &p->stamp_seq[fi]))
            ++*sent;
        else
            ++*dropped;
    }
}

static void publish_result(pub_t *p, ss_out_t *o)
{
    ss_feed_t *f = ss_out_feed(o);
    const int fi = ss_feed_index(f);
    const ss_result_t *res = ss_out_result(o);
    const ss_config_t *c = ss_cfg_snap_config(p->snap);
    const int residuals = c->publish_residuals, with_mask = c->publish_mask;
    uint64_t sent = 0, dropped = 0;
    char topic[SS_PROTO_TOPIC_MAX];

    if (residuals && res->has_residual) {
        int tl = ss_proto_topic(SS_MSG_RESIDUAL, ss_feed_name(f), topic, sizeof topic);
        int hl = ss_proto_encode_residual(res, p->hdr, HEADER_MAX);
        if (hl >= 0)
            hl = ss_proto_add_topic_seq(p->hdr, hl, HEADER_MAX, p->res_seq[fi]++);
        size_t npix = (size_t)res->width * (size_t)res->height;
        if (tl < 0 || hl < 0) {
            SS_LOG(SS_LOG_ERR, TAG, "feed %s: frame %llu: residual header does not encode",
                   ss_feed_name(f), (unsigned long long)res->meta.seq);
            dropped++;
        } else {
            const void *data[4] = { topic, p->hdr, res->residual, p->mask };
            size_t len[4] = { (size_t)tl, (size_t)hl, npix * sizeof(float), npix };
            int parts = 3;
            if (with_mask && grow((void **)&p->mask, &p->mask_cap, npix) == 0) {
                data[3] = p->mask;
                ss_proto_residual_mask(res->residual, npix, p->mask);
                parts = 4;
            }
            if (send_parts(p, data, len, parts))
                sent++;
            else
                dropped++;
        }
    }

    publish_forms(p, f, fi, res, &sent, &dropped);

    if (publish_body(p, f, res, SS_MSG_DETECTIONS, &p->det_seq[fi]))
        sent++;
    else
        dropped++;
    if (res->tracks.count > 0) {
        if (publish_body(p, f, res, SS_MSG_TRACKS, &p->trk_seq[fi]))
            sent++;
        else
            dropped++;
    }
    if (sent)
        ss_stats_published(ss_feed_stats(f), sent);
    if (dropped)
        ss_stats_pub_dropped(ss_feed_stats(f), dropped);
}

static void publish_status(pub_t *p)
{
    ss_daemon_status(p->d, p->status);
    char topic[SS_PROTO_TOPIC_MAX];
    int tl = ss_proto_topic(SS_MSG_STATUS, NULL, topic, sizeof topic);
    if (grow((void **)&p->body, &p->body_cap, STATUS_MAX) != 0)
        return;
    int bl = ss_proto_encode_status(p->status, p->body, p->body_cap - TOPIC_SEQ_ROOM);
    if (bl >= 0)
        bl = ss_proto_add_topic_seq(p->body, bl, p->body_cap, p->status_seq++);
    if (tl < 0 || bl < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "status message does not encode");
        return;
    }
    const void *data[2] = { topic, p->body };
    size_t len[2] = { (size_t)tl, (size_t)bl };
    send_parts(p, data, len, 2);
}

/* The forms each feed's subscribers ask for, for the workers. */
static void update_wanted(pub_t *p)
{
    for (int i = 0; i < p->d->n_feeds; i++)
        atomic_store(&p->d->out_wanted[i], ss_outsubs_wanted(p->subs, ss_feed_name(p->d->feeds[i])));
}

/* The subscription caps of config c. */
static ss_subguard_limits_t guard_limits(const ss_config_t *c)
{
    const ss_subguard_limits_t lim = { .max_subs = c->publish_max_subs,
                                       .max_subs_peer = c->publish_max_subs_peer,
                                       .ban_s = c->publish_ban_s };
    return lim;
}

void *ss_publisher_main(void *arg)
{
    ss_daemon_t *d = arg;
    pub_t p = { .d = d, .sock = d->pub_sock, .snap = ss_cfg_board_take(d->board) };
    p.hdr = malloc(HEADER_MAX);
    p.status = malloc(sizeof *p.status);
    p.subs = ss_outsubs_new();
    if (!p.hdr || !p.status || !p.subs)
        SS_LOG(SS_LOG_ERR, TAG, "out of memory: nothing will be published");
    int can = p.sock && p.hdr && p.status && p.subs;
    double next_status = ss_now_mono();
    for (;;) {
        double now = ss_now_mono();
        double wait = SS_CLAMP(next_status - now, 0.0, SS_POLL_S);
        void *item = NULL;
        ss_err_t e = ss_queue_pop(d->pub_q, &item, wait);
        if (e == SS_ERR_STOPPED)
            break;
        ss_cfg_refresh(d->board, &p.snap);     /* a reload's config, between results */
        if (e == SS_OK) {
            if (can)
                publish_result(&p, item);
            ss_out_release(item);
        }
        if (!can)
            continue;
        const ss_subguard_limits_t lim = guard_limits(ss_cfg_snap_config(p.snap));
        if (ss_subguard_poll(d->pub_guard, p.sock, d->zap, &lim, p.subs))
            update_wanted(&p);
        now = ss_now_mono();
        if (now >= next_status) {
            publish_status(&p);
            next_status = now + ss_cfg_snap_config(p.snap)->status_interval;
        }
    }
    if (can)
        publish_status(&p);     /* the final counters */
    ss_subguard_counts(d->pub_guard, &d->pub_counts);
    ss_subguard_destroy(&d->pub_guard);
    if (p.sock) {
        zmq_close(p.sock);      /* lingers SS_PUB_LINGER_MS to flush */
        d->pub_sock = NULL;
    }
    free(p.hdr);
    free(p.body);
    free(p.mask);
    free(p.status);
    ss_outsubs_destroy(&p.subs);
    ss_cfg_snap_release(&p.snap);
    return NULL;
}
