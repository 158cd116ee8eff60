/*
 * sub_cli.c — skysieve-sub: subscribe to a skysieve publisher and print
 * what arrives, one readable line per frame and per track report (or, with
 * --json, as JSON lines); optionally save the residuals as FITS.
 *
 *   skysieve-sub [--endpoint EP] [--feed NAME] [--count N] [--timeout S]
 *                [--save-residuals DIR] ...
 *
 * Every message is decoded (and so validated) by proto/; a malformed one
 * is reported on stderr and skipped. Exit status: 0 done (--count
 * reached, interrupted, or --timeout after messages arrived without a
 * --count), 1 socket or file error, 2 bad usage, 3 --timeout with nothing
 * (or fewer than --count messages) received.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zmq.h>

#include "pipeline/frame_fits.h"
#include "proto/proto.h"
#include "proto/curve.h"
#include "proto/proto_zmq.h"

#define PROG "skysieve-sub"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define EXIT_TIMEOUT 3
#define DEFAULT_ENDPOINT "tcp://127.0.0.1:5560"   /* skysieved publish.endpoint default */
#define MAX_TOPICS 16
#define POLL_MS 200             /* signal check interval */
#define RCVHWM 1000
#define LINE_MAX_BYTES 8192     /* one detection line */
/* A detection takes at least this many bytes on the wire: sizes the
 * detection list from the body before decoding it. */
#define MIN_DET_WIRE_BYTES 150
/* The same for a track (its members without points), and the most track
 * reports of a message kept (the rest are counted as truncated: a report
 * takes 1.2 kB in memory, six times its least on the wire). */
#define MIN_TRACK_WIRE_BYTES 200
#define MAX_TRACK_REPORTS 65536
#define MAX_TOPICS_SEEN 64          /* topics whose topic_seq is followed */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " [options]\n"
"Subscribe to a skysieve publisher (skysieved's PUB socket) and print what\n"
"arrives on stdout. By default, for people, one line per frame —\n"
"  FEED #SEQ TIME STATUS shift (X, Y) sigma S: N point, N streak, N cosmic\n"
"and below it one indented line per detection that is not a cosmic (kind,\n"
"position, SNR, flux, the track it belongs to; a streak's two ends; \"gone\"\n"
"for a negative one); reference, warm-up and failed frames say so, with the\n"
"reason. With --tracks, one line per track report (a confirmed track that was\n"
"linked, coasted or ended at a frame) —\n"
"  FEED #SEQ track ID KIND STATE n=N at (X, Y) v (VX, VY) px/s|px/frame\n"
"with its angular rate and position angle when known.\n"
"With --json, for programs, JSON lines (proto/PROTOCOL.md, \"JSON lines\"):\n"
"  detections  one line per detection: the frame's feed, series, seq, time,\n"
"              mjd, time_mid, mjd_mid, status and sigma, then the detection's\n"
"              fields (x, y, flux, ...); a frame without detections prints\n"
"              nothing. With --per-message: one line per detections message\n"
"              (its whole body, empty lists included).\n"
"  tracks      one line per tracks message (with --tracks or --topic tracks.):\n"
"              its whole body (\"type\": \"tracks\").\n"
"  status      one line per status message (with --status or --topic status).\n"
"  residual    nothing on stdout; saved as FITS with --save-residuals.\n"
"Malformed messages are reported on stderr and skipped (not counted).\n"
"Messages this subscriber missed (it read too slowly, or connected late\n"
"into a burst) are reported on stderr from each topic's topic_seq, and\n"
"counted in the last line.\n"
"\n"
"  -e, --endpoint EP       publisher to connect to              [" DEFAULT_ENDPOINT "]\n"
"      --bind              bind EP instead of connecting\n"
"  -t, --topic PREFIX      subscribe to a topic prefix (repeatable, up to %d)\n"
"                          [detections. ; and residual. with --save-residuals]\n"
"      --feed NAME         only this feed: subscribes residual.NAME,\n"
"                          detections.NAME and/or tracks.NAME and matches the\n"
"                          topic exactly\n"
"      --tracks            also subscribe to tracks. (tracks.NAME with --feed)\n"
"      --status            also subscribe to \"status\"\n"
"      --json              JSON lines instead of the readable lines\n"
"      --per-message       one line per detections message, not per detection (JSON)\n"
"      --save-residuals DIR  write each residual as DIR/<feed>-<seq, 10 digits>-\n"
"                          <DATE-OBS>.fits (float32, NaN = invalid, with\n"
"                          CHECKSUM; \"-k\" added rather than overwrite a\n"
"                          file: the daemon's rule); DIR is created\n"
"      --compress          tile-compress those files (GZIP, lossless)\n"
"  -n, --count N           exit after N messages (any subscribed topic) [0 = never]\n"
"      --timeout S         exit when nothing arrives for S seconds      [0 = never]\n"
"  -v, --verbose           a line on stderr per residual and per status message\n"
"                          (subscribes to \"status\" too)\n"
"  -q, --quiet             no summary line on stderr at exit\n"
"      --curve-key FILE    CURVE: this client's key file (skysieve-keygen NAME:\n"
"                          NAME.key; the daemon must list NAME.pub)\n"
"      --server-key FILE   CURVE: the daemon's public key file (its .pub)\n"
"  -h, --help              this text\n"
"Exit status: 0 done (--count reached, SIGINT/SIGTERM, or --timeout after\n"
"messages arrived when no --count was given); 1 socket or file error; 2 bad\n"
"usage; 3 --timeout before any message (or before --count messages).\n",
            MAX_TOPICS);
}

typedef struct opts {
    const char *endpoint;
    int bind;
    const char *topics[MAX_TOPICS];
    int n_topics;
    const char *feed;
    int status;
    int tracks;
    int per_message;
    int json;
    const char *save_dir;
    int compress;
    long long count;
    double timeout;
    int verbose, quiet;
    const char *curve_key, *server_key;     /* CURVE client key files, or NULL */
} opts_t;

static int bad(const char *opt, const char *val)
{
    fprintf(stderr, PROG ": invalid value for %s: \"%s\" (see --help)\n", opt, val);
    return -1;
}

enum { O_BIND = 256, O_FEED, O_STATUS, O_TRACKS, O_PER_MESSAGE, O_SAVE, O_COMPRESS, O_TIMEOUT,
       O_JSON, O_CURVE_KEY, O_SERVER_KEY };

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        { "endpoint", required_argument, 0, 'e' }, { "bind", no_argument, 0, O_BIND },
        { "topic", required_argument, 0, 't' }, { "feed", required_argument, 0, O_FEED },
        { "status", no_argument, 0, O_STATUS }, { "tracks", no_argument, 0, O_TRACKS },
        { "per-message", no_argument, 0, O_PER_MESSAGE },
        { "json", no_argument, 0, O_JSON },
        { "save-residuals", required_argument, 0, O_SAVE },
        { "compress", no_argument, 0, O_COMPRESS }, { "count", required_argument, 0, 'n' },
        { "timeout", required_argument, 0, O_TIMEOUT }, { "verbose", no_argument, 0, 'v' },
        { "quiet", no_argument, 0, 'q' }, { "help", no_argument, 0, 'h' },
        { "curve-key", required_argument, 0, O_CURVE_KEY },
        { "server-key", required_argument, 0, O_SERVER_KEY }, { 0, 0, 0, 0 },
    };
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "e:t:n:vqh", lo, NULL)) != -1) {
        switch (c) {
        case O_CURVE_KEY: o->curve_key = optarg; break;
        case O_SERVER_KEY: o->server_key = optarg; break;
        case 'e': o->endpoint = optarg; break;
        case O_BIND: o->bind = 1; break;
        case 't':
            if (o->n_topics >= MAX_TOPICS)
                return bad("--topic", optarg);
            o->topics[o->n_topics++] = optarg;
            break;
        case O_FEED:
            if (!optarg[0] || strlen(optarg) >= SS_NAME_MAX)
                return bad("--feed", optarg);
            o->feed = optarg;
            break;
        case O_STATUS: o->status = 1; break;
        case O_TRACKS: o->tracks = 1; break;
        case O_PER_MESSAGE: o->per_message = o->json = 1; break;
        case O_JSON: o->json = 1; break;
        case O_SAVE: o->save_dir = optarg; break;
        case O_COMPRESS: o->compress = 1; break;
        case 'n':
            errno = 0;
            o->count = strtoll(optarg, &end, 10);
            if (errno || end == optarg || *end || o->count < 0)
                return bad("--count", optarg);
            break;
        case O_TIMEOUT:
            errno = 0;
            o->timeout = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->timeout >= 0) || o->timeout > 2e6)
                return bad("--timeout", optarg);
            break;
        case 'v': o->verbose = 1; break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, PROG ": unexpected argument \"%s\" (see --help)\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* The result the messages decode into; its buffers grow to what arrives
 * (a tool, not the daemon: allocation per message size is fine here). */
typedef struct state {
    const opts_t *o;
    ss_proto_limits_t lim;
    ss_result_t res;
    uint8_t *mask;
    size_t mask_cap;
    char *buf;                      /* encoder output */
    size_t buf_cap;
    unsigned long long messages, detections, track_reports, residuals, malformed, missed;
    /* per topic: the topic_seq expected next (gap reports) */
    struct { char topic[SS_PROTO_TOPIC_MAX]; uint64_t next; } seen[MAX_TOPICS_SEEN];
    int n_seen;
} state_t;

/* A message numbered seq on `topic` (part 0) arrived: a gap since the
 * previous one is reported and counted; a lower number means the daemon
 * started again. Topics beyond MAX_TOPICS_SEEN are not followed. */
static void note_topic_seq(state_t *s, const ss_proto_part_t *topic, uint64_t seq)
{
    char t[SS_PROTO_TOPIC_MAX];
    const size_t n = SS_MIN(topic->len, sizeof t - 1);
    memcpy(t, topic->data, n);
    t[n] = '\0';
    int i = 0;
    while (i < s->n_seen && strcmp(s->seen[i].topic, t) != 0)
        i++;
    if (i == s->n_seen) {
        if (s->n_seen == MAX_TOPICS_SEEN)
            return;
        ss_strlcpy(s->seen[s->n_seen++].topic, t, sizeof s->seen[0].topic);
    } else if (seq > s->seen[i].next) {
        const uint64_t gap = seq - s->seen[i].next;
        s->missed += gap;
        fprintf(stderr, PROG ": %s: %llu message%s missed (topic_seq %llu to %llu)\n", t,
                (unsigned long long)gap, gap == 1 ? "" : "s",
                (unsigned long long)s->seen[i].next, (unsigned long long)seq - 1);
    } else if (seq < s->seen[i].next) {
        fprintf(stderr, PROG ": %s: topic_seq went back to %llu (the publisher restarted)\n", t,
                (unsigned long long)seq);
    }
    s->seen[i].next = seq + 1;
}

static int ensure_pixels(state_t *s, size_t npix)
{
    if (npix <= s->res.residual_capacity && npix <= s->mask_cap)
        return 0;
    float *p = realloc(s->res.residual, npix * sizeof(float));
    if (p)
        s->res.residual = p;
    uint8_t *m = realloc(s->mask, npix);
    if (m)
        s->mask = m;
    if (!p || !m)
        return -1;
    s->res.residual_capacity = s->mask_cap = npix;
    return 0;
}

static int ensure_dets(state_t *s, int n)
{
    if (n <= s->res.dets.capacity)
        return 0;
    ss_detection_t *d = realloc(s->res.dets.items, (size_t)n * sizeof *d);
    if (!d)
        return -1;
    s->res.dets.items = d;
    s->res.dets.capacity = n;
    return 0;
}

static int ensure_tracks(state_t *s, int n)
{
    if (n <= s->res.tracks.capacity)
        return 0;
    ss_track_t *t = realloc(s->res.tracks.items, (size_t)n * sizeof *t);
    if (!t)
        return -1;
    s->res.tracks.items = t;
    s->res.tracks.capacity = n;
    return 0;
}

static int ensure_buf(state_t *s, size_t n)
{
    if (n <= s->buf_cap)
        return 0;
    char *b = realloc(s->buf, n);
    if (!b)
        return -1;
    s->buf = b;
    s->buf_cap = n;
    return 0;
}

static void malformed(state_t *s, ss_msg_type_t t, const ss_proto_error_t *err)
{
    s->malformed++;
    fprintf(stderr, PROG ": skipped a malformed %s message: %s\n", ss_msg_type_name(t), err->text);
}

/* The readable form of a detections message: the frame's line, then one
 * indented line per detection that is not a cosmic. */
static void print_frame(const ss_result_t *r)
{
    char when[40] = "";
    if (isfinite(r->meta.mjd_obs))
        ss_mjd_to_iso(r->meta.mjd_obs, when, sizeof when);
    int kinds[3] = { 0, 0, 0 };
    for (int i = 0; i < r->dets.count; i++)
        kinds[SS_CLAMP((int)r->dets.items[i].kind, 0, 2)]++;
    /* the input's file name, when it is not the "<series>#<seq>" of a frame without one */
    char plain[SS_PROTO_INPUT_MAX];
    ss_proto_series_seq(&r->meta, plain, sizeof plain);
    const int named = r->meta.input[0] && strcmp(r->meta.input, plain) != 0;
    printf("%s #%llu%s%s%s%s %s", r->meta.feed, (unsigned long long)r->meta.seq,
           named ? " " : "", named ? r->meta.input : "", when[0] ? " " : "", when,
           ss_status_name(r->status));
    if (r->status == SS_STATUS_OK) {
        printf(" shift (%+.3f, %+.3f) sigma %.3g: %d point, %d streak, %d cosmic", r->shift.sx,
               r->shift.sy, (double)r->sigma, kinds[SS_KIND_POINT], kinds[SS_KIND_STREAK],
               kinds[SS_KIND_COSMIC]);
        if (r->dets.truncated)
            printf(" (%d more not listed)", r->dets.truncated);
    } else if (r->reason[0]) {
        printf(" (%s)", r->reason);
    }
    putchar('\n');
    for (int i = 0; i < r->dets.count; i++) {
        const ss_detection_t *d = &r->dets.items[i];
        if (d->kind == SS_KIND_COSMIC)
            continue;
        if (d->kind == SS_KIND_STREAK)
            printf("    streak  (%.1f, %.1f) to (%.1f, %.1f)  SNR %.1f  flux %.4g", d->x0, d->y0,
                   d->x1, d->y1, d->peak_snr, d->flux);
        else
            printf("    %-6s  (%.2f, %.2f)  SNR %.1f  flux %.4g%s", d->sign < 0 ? "gone" : "point",
                   d->x, d->y, d->peak_snr, d->flux, d->flags ? "  (near invalid pixels)" : "");
        if (isfinite(d->mag))
            printf("  mag %.2f±%.2f", d->mag, d->mag_err);
        if (d->track)
            printf("  track %llu", (unsigned long long)d->track);
        putchar('\n');
    }
}

/* The readable form of a track report: one line, with the frame's feed
 * and seq (a tracks message follows its frame's detections message). */
static void print_track(const ss_result_t *r, const ss_track_t *t)
{
    printf("%s #%llu track %llu %s %s n=%d at (%.2f, %.2f) v (%+.4g, %+.4g) %s", r->meta.feed,
           (unsigned long long)r->meta.seq, (unsigned long long)t->id, ss_kind_name(t->kind),
           ss_track_state_name(t->state), t->n, t->x, t->y, t->vx, t->vy,
           t->timed ? "px/s" : "px/frame");
    if (t->has_rate)
        printf(" %.3g\"/s PA %.1f", t->rate, t->pa);
    if (isfinite(t->mag))
        printf(" mag %.2f±%.2f", t->mag, t->mag_err);
    if (t->missed)
        printf(" (%d missed)", t->missed);
    putchar('\n');
}

static int on_detections(state_t *s, const ss_proto_rx_t *rx)
{
    ss_proto_error_t err;
    size_t body = rx->n > 1 ? rx->part[1].len : 0;
    if (ensure_dets(s, (int)SS_MIN(body / MIN_DET_WIRE_BYTES + 16, (size_t)1 << 24)) != 0)
        return -1;
    if (ss_proto_decode_detections(rx->part, rx->total > rx->n ? rx->total : rx->n, &s->lim,
                                   &s->res, &err) != SS_OK) {
        malformed(s, SS_MSG_DETECTIONS, &err);
        return 1;
    }
    if (s->res.has_topic_seq)
        note_topic_seq(s, &rx->part[0], s->res.topic_seq);
    if (!s->o->json) {
        print_frame(&s->res);
    } else if (s->o->per_message) {
        if (ensure_buf(s, ss_proto_detections_bound(&s->res)) != 0)
            return -1;
        if (ss_proto_encode_detections(&s->res, s->buf, s->buf_cap) < 0)
            return -1;
        puts(s->buf);
    } else {
        if (ensure_buf(s, LINE_MAX_BYTES + strlen(s->res.meta.series)) != 0)
            return -1;
        for (int i = 0; i < s->res.dets.count; i++) {
            if (ss_proto_encode_detection_line(&s->res, i, s->buf, s->buf_cap) < 0)
                return -1;
            puts(s->buf);
        }
    }
    if (s->res.dets.truncated && s->o->verbose)
        fprintf(stderr, PROG ": %s #%llu: %d detections beyond the list\n", s->res.meta.feed,
                (unsigned long long)s->res.meta.seq, s->res.dets.truncated);
    s->detections += (unsigned long long)s->res.dets.count;
    fflush(stdout);
    return 0;
}

static int on_tracks(state_t *s, const ss_proto_rx_t *rx)
{
    ss_proto_error_t err;
    size_t body = rx->n > 1 ? rx->part[1].len : 0;
    if (ensure_tracks(s, (int)SS_MIN(body / MIN_TRACK_WIRE_BYTES + 16, MAX_TRACK_REPORTS)) != 0)
        return -1;
    if (ss_proto_decode_tracks(rx->part, rx->total > rx->n ? rx->total : rx->n, &s->lim,
                               &s->res, &err) != SS_OK) {
        malformed(s, SS_MSG_TRACKS, &err);
        return 1;
    }
    if (s->res.has_topic_seq)
        note_topic_seq(s, &rx->part[0], s->res.topic_seq);
    if (s->o->json) {
        if (ensure_buf(s, ss_proto_tracks_bound(&s->res)) != 0 ||
            ss_proto_encode_tracks(&s->res, s->buf, s->buf_cap) < 0)
            return -1;
        puts(s->buf);
    } else {
        for (int i = 0; i < s->res.tracks.count; i++)
            print_track(&s->res, &s->res.tracks.items[i]);
    }
    if (s->res.tracks.truncated && s->o->verbose)
        fprintf(stderr, PROG ": %s #%llu: %d track reports beyond the list\n", s->res.meta.feed,
                (unsigned long long)s->res.meta.seq, s->res.tracks.truncated);
    s->track_reports += (unsigned long long)s->res.tracks.count;
    fflush(stdout);
    return 0;
}

static int on_residual(state_t *s, const ss_proto_rx_t *rx)
{
    ss_proto_error_t err;
    int has_mask = 0;
    if (rx->n >= 3 && ensure_pixels(s, rx->part[2].len / sizeof(float) + 1) != 0)
        return -1;
    if (ss_proto_decode_residual(rx->part, rx->total > rx->n ? rx->total : rx->n, &s->lim,
                                 &s->res, s->mask, &has_mask, &err) != SS_OK) {
        malformed(s, SS_MSG_RESIDUAL, &err);
        return 1;
    }
    if (s->res.has_topic_seq)
        note_topic_seq(s, &rx->part[0], s->res.topic_seq);
    s->residuals++;
    if (s->o->verbose)
        fprintf(stderr, PROG ": residual %s #%llu %dx%d status %s sigma %.4g shift %s\n",
                s->res.meta.feed, (unsigned long long)s->res.meta.seq, s->res.width,
                s->res.height, ss_status_name(s->res.status), (double)s->res.sigma,
                s->res.shift.ok ? "ok" : "none");
    if (s->o->save_dir) {
        /* the daemon's naming rule (ss_residual_file_name), never over a file */
        char path[SS_PATH_MAX + 128], ferr[512];
        int k = 0;
        struct stat sb;
        do {
            if (ss_residual_file_name(path, sizeof path, s->o->save_dir, s->res.meta.feed,
                                      s->res.meta.seq, s->res.meta.mjd_obs,
                                      s->o->compress ? ".fits.fz" : ".fits", k++) < 0) {
                fprintf(stderr, PROG ": a residual file name is too long\n");
                return -1;
            }
        } while (stat(path, &sb) == 0 && k < 1000);
        if (ss_fits_write_residual(path, &s->res, s->o->compress, ferr, sizeof ferr) != SS_OK) {
            fprintf(stderr, PROG ": %s\n", ferr);
            return -1;
        }
    }
    return 0;
}

static int on_status(state_t *s, const ss_proto_rx_t *rx)
{
    static ss_proto_status_t st;
    ss_proto_error_t err;
    if (ss_proto_decode_status(rx->part, rx->total > rx->n ? rx->total : rx->n, &s->lim, &st,
                               &err) != SS_OK) {
        malformed(s, SS_MSG_STATUS, &err);
        return 1;
    }
    if (st.has_topic_seq)
        note_topic_seq(s, &rx->part[0], st.topic_seq);
    /* readable: a line per feed, on stderr with -v, on stdout with --status */
    for (int i = 0; i < st.n_feeds && (s->o->verbose || (s->o->status && !s->o->json)); i++) {
        const ss_proto_feed_stats_t *f = &st.feeds[i];
        char line[512];
        snprintf(line, sizeof line, "status %s: %.2f frames/s, %llu processed (%llu ok), %llu "
                 "dropped, %llu rejected, %llu detections", f->name, f->fps,
                 (unsigned long long)f->processed, (unsigned long long)f->status_count[SS_STATUS_OK],
                 (unsigned long long)f->dropped_queue, (unsigned long long)f->rejected,
                 (unsigned long long)f->detections);
        if (s->o->verbose)
            fprintf(stderr, PROG ": %s\n", line);
        if (s->o->status && !s->o->json)
            puts(line);
    }
    if (s->o->status && s->o->json) {
        if (ensure_buf(s, (size_t)1 << 20) != 0 ||
            ss_proto_encode_status(&st, s->buf, s->buf_cap) < 0)
            return -1;
        puts(s->buf);
    }
    fflush(stdout);
    return 0;
}

/* Handle one received message: 0 counted, 1 skipped, -1 fatal. */
static int on_message(state_t *s, const ss_proto_rx_t *rx)
{
    char feed[SS_NAME_MAX];
    ss_msg_type_t t = ss_proto_topic_parse(rx->part[0].data, rx->part[0].len, feed);
    if (s->o->feed && t != SS_MSG_STATUS && strcmp(feed, s->o->feed) != 0)
        return 1; /* a prefix match of another feed (cam1 vs cam10) */
    switch (t) {
    case SS_MSG_DETECTIONS: return on_detections(s, rx);
    case SS_MSG_TRACKS: return on_tracks(s, rx);
    case SS_MSG_RESIDUAL: return on_residual(s, rx);
    case SS_MSG_STATUS: return on_status(s, rx);
    case SS_MSG_STAMPS: return 1;   /* the residual's forms (PROTOCOL.md §5a, §5b): not shown */
    default: {
        if (ss_proto_form_topic_parse(rx->part[0].data, rx->part[0].len, NULL) >= 0)
            return 1;
        ss_proto_error_t err = { SS_PR_BAD_TOPIC, "" };
        snprintf(err.text, sizeof err.text, "not a skysieve topic (%zu bytes)", rx->part[0].len);
        malformed(s, SS_MSG_NONE, &err);
        return 1;
    }
    }
}

static int subscribe(void *sock, const char *topic)
{
    if (zmq_setsockopt(sock, ZMQ_SUBSCRIBE, topic, strlen(topic)) != 0) {
        fprintf(stderr, PROG ": subscribe \"%s\": %s\n", topic, zmq_strerror(zmq_errno()));
        return -1;
    }
    return 0;
}

/* Topics: --topic as given; default detections. (+ residual. when saving);
 * + tracks. with --tracks, + status with --status; with --feed, the feed is
 * appended to the residual./detections./tracks. prefixes. */
static int subscribe_all(void *sock, const opts_t *o)
{
    const char *defaults[3];
    int n = 0;
    const char *const *list = o->topics;
    if (o->n_topics == 0) {
        defaults[n++] = "detections.";
        if (o->save_dir)
            defaults[n++] = "residual.";
        list = defaults;
    } else {
        n = o->n_topics;
    }
    for (int i = 0; i < n; i++) {
        char t[SS_PROTO_TOPIC_MAX + 64];
        size_t len = strlen(list[i]);
        int per_feed = o->feed && len > 0 && list[i][len - 1] == '.';
        snprintf(t, sizeof t, "%s%s", list[i], per_feed ? o->feed : "");
        if (subscribe(sock, t) != 0)
            return -1;
    }
    if (o->tracks) {
        char t[SS_PROTO_TOPIC_MAX];
        snprintf(t, sizeof t, "tracks.%s", o->feed ? o->feed : "");
        if (subscribe(sock, t) != 0)
            return -1;
    }
    if ((o->status || o->verbose) && subscribe(sock, "status") != 0)
        return -1;
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    memset(&o, 0, sizeof o);
    o.endpoint = DEFAULT_ENDPOINT;
    if (parse_args(argc, argv, &o) != 0)
        return EXIT_USAGE;
    for (int i = 0; i < o.n_topics; i++)      /* --topic status asks for them too */
        o.status |= strncmp(o.topics[i], "status", strlen(o.topics[i])) == 0;
    if (o.save_dir && mkdir(o.save_dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, PROG ": cannot create %s: %s\n", o.save_dir, strerror(errno));
        return EXIT_FAIL;
    }

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    state_t s;
    memset(&s, 0, sizeof s);
    s.o = &o;
    ss_proto_limits_default(&s.lim);
    s.res.sigma = NAN;
    int rc = EXIT_FAIL;
    void *ctx = zmq_ctx_new();
    void *sock = ctx ? zmq_socket(ctx, ZMQ_SUB) : NULL;
    if (!sock) {
        fprintf(stderr, PROG ": zmq: %s\n", zmq_strerror(zmq_errno()));
        goto out;
    }
    int linger = 0, hwm = RCVHWM;
    zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(sock, ZMQ_RCVHWM, &hwm, sizeof hwm);
    ss_proto_set_maxmsgsize(sock, &s.lim);
    char cerr[600];
    if (ss_curve_client_files(sock, o.curve_key, o.server_key, cerr, sizeof cerr) != 0) {
        fprintf(stderr, PROG ": %s\n", cerr);
        rc = EXIT_USAGE;
        goto out;
    }
    if (subscribe_all(sock, &o) != 0)
        goto out;
    if ((o.bind ? zmq_bind(sock, o.endpoint) : zmq_connect(sock, o.endpoint)) != 0) {
        fprintf(stderr, PROG ": cannot %s %s: %s\n", o.bind ? "bind" : "connect to", o.endpoint,
                zmq_strerror(zmq_errno()));
        goto out;
    }
    double last = ss_now_mono();
    while (!g_stop && (o.count == 0 || s.messages < (unsigned long long)o.count)) {
        zmq_pollitem_t pi = { sock, 0, ZMQ_POLLIN, 0 };
        int pr = zmq_poll(&pi, 1, POLL_MS);
        if (pr < 0 && zmq_errno() != EINTR) {
            fprintf(stderr, PROG ": poll: %s\n", zmq_strerror(zmq_errno()));
            goto out;
        }
        if (pr <= 0) {
            if (o.timeout > 0 && ss_now_mono() - last >= o.timeout) {
                if (!o.quiet)
                    fprintf(stderr, PROG ": nothing for %g s\n", o.timeout);
                rc = (o.count > 0 || s.messages == 0) ? EXIT_TIMEOUT : 0;
                goto out;
            }
            continue;
        }
        ss_proto_rx_t rx;
        ss_err_t e = ss_proto_recv_parts(sock, ZMQ_DONTWAIT, &rx);
        if (e == SS_ERR_TIMEOUT)
            continue;
        if (e != SS_OK) {
            fprintf(stderr, PROG ": receive: %s\n", zmq_strerror(zmq_errno()));
            goto out;
        }
        last = ss_now_mono();
        int r = on_message(&s, &rx);
        ss_proto_rx_close(&rx);
        if (r < 0) {
            fprintf(stderr, PROG ": out of memory or output error\n");
            goto out;
        }
        if (r == 0)
            s.messages++;
    }
    rc = 0;
out:
    if (sock)
        zmq_close(sock);
    if (ctx)
        zmq_ctx_term(ctx);
    if (!o.quiet)
        fprintf(stderr,
                PROG ": %llu messages (%llu detections, %llu track reports, %llu residuals), "
                     "%llu malformed skipped, %llu missed\n",
                s.messages, s.detections, s.track_reports, s.residuals, s.malformed, s.missed);
    free(s.res.residual);
    free(s.res.dets.items);
    free(s.res.tracks.items);
    free(s.mask);
    free(s.buf);
    return rc;
}
