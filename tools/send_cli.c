/*
 * send_cli.c — skysieve-send: stream frames to a skysieve receiver over
 * ZeroMQ in the wire protocol (proto/PROTOCOL.md): a FITS sequence named
 * on the command line, or synthetic star fields (tools/synth.h).
 *
 *   skysieve-send [options] FILE.fits ...
 *   skysieve-send --synth [options]
 *
 * A series_start message goes first and a series_end message last (unless
 * --no-series). Frames are paced on an absolute schedule (--rate), so a
 * slow send does not accumulate drift. Exit status: 0 all sent, 1 a file
 * or socket error (or --timeout expired), 2 bad usage.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "pipeline/frame_fits.h"
#include "proto/curve.h"
#include "proto/proto.h"
#include "proto/proto_zmq.h"
#include "tools/synth.h"

#define PROG "skysieve-send"
#define EXIT_FAIL 1
#define EXIT_USAGE 2
#define DEFAULT_ENDPOINT "tcp://127.0.0.1:5559"   /* skysieved source.zmq.endpoint default */
#define DEFAULT_SYNTH_COUNT 10
#define DEFAULT_HWM 4
#define DEFAULT_PUB_WAIT 0.5
#define HEADER_MAX 65536
#define SERIES_MAX 4096

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void usage(FILE *out)
{
    fprintf(out,
"Usage: " PROG " [options] FILE.fits ...\n"
"       " PROG " --synth [options]\n"
"Stream frames to a skysieve receiver (skysieved's zmq source) as wire-protocol\n"
"messages (proto/PROTOCOL.md): a header part, the pixels, optionally a mask.\n"
"FITS files are sent in the order given, with their own pixel type, DATE-OBS,\n"
"EXPTIME and WCS keywords; --synth sends synthetic star fields instead. A\n"
"series_start message comes first and a series_end message last.\n"
"\n"
"Socket\n"
"  -e, --endpoint EP     where to send                        [" DEFAULT_ENDPOINT "]\n"
"      --bind            bind EP instead of connecting to it\n"
"      --pub             a PUB socket (for a receiver that SUBscribes) instead of\n"
"                        PUSH; PUB drops what no subscriber takes, so this waits\n"
"                        --pub-wait seconds for subscribers before sending\n"
"      --pub-wait S      seconds to wait with --pub                 [%g]\n"
"      --hwm N           frames ZeroMQ may queue before a send blocks [%d]\n"
"      --timeout S       fail (exit 1) when a send blocks S seconds (no receiver);\n"
"                        0 = wait forever                           [0]\n"
"Stream\n"
"  -r, --rate FPS        frames per second; 0 = as fast as possible [0]\n"
"  -n, --count N         frames to send: FITS, the first N files (with --loop,\n"
"                        N in all); synthetic frames: N        [files | %d]\n"
"      --loop            FITS: start again at the first file until --count\n"
"      --feed NAME       the frames' \"feed\" field (A-Z a-z 0-9 _ - .) [none]\n"
"      --series ID       series id                       [send-<unix time>]\n"
"      --no-series       no series_start / series_end messages\n"
"      --seq0 N          seq of the first frame                     [0]\n"
"      --mask            also send a mask part: 1 where the pixel is finite\n"
"      --meta JSON       a JSON object sent as every frame's \"meta\"\n"
"      --now             stamp frames with the time they are sent (files without\n"
"                        DATE-OBS get it anyway)\n"
"Synthetic frames (tools/synth.h; defaults as skysieve-synth's)\n"
"      --synth           send synthetic frames instead of files\n"
"      --size WxH        frame size                                 [1024x1024]\n"
"      --dtype T         u8|u16|i16|i32|f32                         [u16]\n"
"      --seed S          random seed                                [1]\n"
"      --stars N         stars in the field\n"
"      --jitter PX       rms pointing jitter per frame\n"
"      --movers N        moving point sources\n"
"      --mover-snr S     their matched-filter SNR\n"
"      --mover-speed PX  their speed, px per frame\n"
"      --streak-prob P   probability per frame of a streak\n"
"      --exposure S      exposure time written in the headers\n"
"                        (frame times start now, 1/rate s apart; 1 s at --rate 0)\n"
"Other\n"
"  -q, --quiet           no summary line on stderr\n"
"      --curve-key FILE  CURVE: this client's key file (skysieve-keygen NAME:\n"
"                        NAME.key; the daemon must list NAME.pub)\n"
"      --server-key FILE CURVE: the daemon's public key file (its .pub)\n"
"  -h, --help            this text\n"
"Exit status: 0 all sent, 1 file or socket error (or --timeout), 2 bad usage.\n",
            DEFAULT_PUB_WAIT, DEFAULT_HWM, DEFAULT_SYNTH_COUNT);
}

typedef struct opts {
    const char *endpoint;
    int bind, pub;
    double pub_wait;
    int hwm;
    double timeout;
    double rate;
    long long count;                /* -1: default */
    int loop;
    const char *feed;
    char series[SS_NAME_MAX];
    int no_series;
    unsigned long long seq0;
    int mask;
    const char *meta;
    int now;
    int synth;
    ss_synth_cfg_t sc;
    int quiet;
    const char *curve_key, *server_key;     /* CURVE client key files, or NULL */
} opts_t;

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

static int parse_ll(const char *s, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return -1;
    *out = v;
    return 0;
}

static int bad(const char *opt, const char *val)
{
    fprintf(stderr, PROG ": invalid value for %s: \"%s\" (see --help)\n", opt, val);
    return -1;
}

enum {
    O_BIND = 256, O_CURVE_KEY, O_SERVER_KEY, O_PUB, O_PUB_WAIT, O_HWM, O_TIMEOUT, O_LOOP, O_FEED, O_SERIES, O_NO_SERIES,
    O_SEQ0, O_MASK, O_META, O_NOW, O_SYNTH, O_SIZE, O_DTYPE, O_SEED, O_STARS, O_JITTER, O_MOVERS,
    O_MOVER_SNR, O_MOVER_SPEED, O_STREAK_PROB, O_EXPOSURE
};

static int parse_args(int argc, char **argv, opts_t *o)
{
    static const struct option lo[] = {
        { "endpoint", required_argument, 0, 'e' }, { "bind", no_argument, 0, O_BIND },
        { "pub", no_argument, 0, O_PUB }, { "pub-wait", required_argument, 0, O_PUB_WAIT },
        { "hwm", required_argument, 0, O_HWM }, { "timeout", required_argument, 0, O_TIMEOUT },
        { "rate", required_argument, 0, 'r' }, { "count", required_argument, 0, 'n' },
        { "loop", no_argument, 0, O_LOOP }, { "feed", required_argument, 0, O_FEED },
        { "series", required_argument, 0, O_SERIES }, { "no-series", no_argument, 0, O_NO_SERIES },
        { "seq0", required_argument, 0, O_SEQ0 }, { "mask", no_argument, 0, O_MASK },
        { "meta", required_argument, 0, O_META }, { "now", no_argument, 0, O_NOW },
        { "synth", no_argument, 0, O_SYNTH }, { "size", required_argument, 0, O_SIZE },
        { "dtype", required_argument, 0, O_DTYPE }, { "seed", required_argument, 0, O_SEED },
        { "stars", required_argument, 0, O_STARS }, { "jitter", required_argument, 0, O_JITTER },
        { "movers", required_argument, 0, O_MOVERS },
        { "mover-snr", required_argument, 0, O_MOVER_SNR },
        { "mover-speed", required_argument, 0, O_MOVER_SPEED },
        { "streak-prob", required_argument, 0, O_STREAK_PROB },
        { "exposure", required_argument, 0, O_EXPOSURE }, { "quiet", no_argument, 0, 'q' },
        { "help", no_argument, 0, 'h' }, { "curve-key", required_argument, 0, O_CURVE_KEY },
        { "server-key", required_argument, 0, O_SERVER_KEY }, { 0, 0, 0, 0 },
    };
    int c;
    long long ll;
    double d;
    while ((c = getopt_long(argc, argv, "e:r:n:qh", lo, NULL)) != -1) {
        switch (c) {
        case O_CURVE_KEY: o->curve_key = optarg; break;
        case O_SERVER_KEY: o->server_key = optarg; break;
        case 'e': o->endpoint = optarg; break;
        case O_BIND: o->bind = 1; break;
        case O_PUB: o->pub = 1; break;
        case O_PUB_WAIT:
            if (parse_double(optarg, &o->pub_wait) || o->pub_wait < 0)
                return bad("--pub-wait", optarg);
            break;
        case O_HWM:
            if (parse_ll(optarg, &ll) || ll < 1 || ll > 1000000)
                return bad("--hwm", optarg);
            o->hwm = (int)ll;
            break;
        case O_TIMEOUT:
            if (parse_double(optarg, &o->timeout) || o->timeout < 0 || o->timeout > 2e6)
                return bad("--timeout", optarg);
            break;
        case 'r':
            if (parse_double(optarg, &o->rate) || o->rate < 0)
                return bad("--rate", optarg);
            break;
        case 'n':
            if (parse_ll(optarg, &o->count) || o->count < 0)
                return bad("--count", optarg);
            break;
        case O_LOOP: o->loop = 1; break;
        case O_FEED: o->feed = optarg; break;
        case O_SERIES:
            if (!optarg[0] || strlen(optarg) >= sizeof o->series)
                return bad("--series", optarg);
            ss_strlcpy(o->series, optarg, sizeof o->series);
            break;
        case O_NO_SERIES: o->no_series = 1; break;
        case O_SEQ0:
            if (parse_ll(optarg, &ll) || ll < 0)
                return bad("--seq0", optarg);
            o->seq0 = (unsigned long long)ll;
            break;
        case O_MASK: o->mask = 1; break;
        case O_META: o->meta = optarg; break;
        case O_NOW: o->now = 1; break;
        case O_SYNTH: o->synth = 1; break;
        case O_SIZE: {
            int w, h, used = 0;
            if (sscanf(optarg, "%dx%d%n", &w, &h, &used) != 2 || optarg[used] || w < 1 || h < 1)
                return bad("--size", optarg);
            o->sc.width = w;
            o->sc.height = h;
            break;
        }
        case O_DTYPE:
            if (ss_dtype_parse(optarg, &o->sc.dtype) != 0)
                return bad("--dtype", optarg);
            break;
        case O_SEED:
            if (parse_ll(optarg, &ll) || ll < 0)
                return bad("--seed", optarg);
            o->sc.seed = (uint64_t)ll;
            break;
        case O_STARS:
            if (parse_ll(optarg, &ll) || ll < 0 || ll > 10000000)
                return bad("--stars", optarg);
            o->sc.n_stars = (int)ll;
            break;
        case O_JITTER:
            if (parse_double(optarg, &d) || d < 0)
                return bad("--jitter", optarg);
            o->sc.jitter = d;
            break;
        case O_MOVERS:
            if (parse_ll(optarg, &ll) || ll < 0 || ll > SS_SYNTH_MAX_OBJ)
                return bad("--movers", optarg);
            o->sc.n_movers = (int)ll;
            break;
        case O_MOVER_SNR:
            if (parse_double(optarg, &d) || d < 0)
                return bad("--mover-snr", optarg);
            o->sc.mover_snr = d;
            break;
        case O_MOVER_SPEED:
            if (parse_double(optarg, &d) || d < 0)
                return bad("--mover-speed", optarg);
            o->sc.mover_speed = d;
            break;
        case O_STREAK_PROB:
            if (parse_double(optarg, &d) || d < 0 || d > 1)
                return bad("--streak-prob", optarg);
            o->sc.streak_prob = d;
            break;
        case O_EXPOSURE:
            if (parse_double(optarg, &d) || d < 0)
                return bad("--exposure", optarg);
            o->sc.exposure = d;
            break;
        case 'q': o->quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: return -1;
        }
    }
    return 0;
}

/* ---- the socket --------------------------------------------------------- */

typedef struct sender {
    void *ctx, *sock;
    const opts_t *o;
    uint64_t frames, bytes;
} sender_t;

static int open_socket(sender_t *s, const opts_t *o)
{
    s->o = o;
    s->ctx = zmq_ctx_new();
    s->sock = s->ctx ? zmq_socket(s->ctx, o->pub ? ZMQ_PUB : ZMQ_PUSH) : NULL;
    if (!s->sock) {
        fprintf(stderr, PROG ": zmq: %s\n", zmq_strerror(zmq_errno()));
        return -1;
    }
    int hwm = o->hwm;
    /* at exit, wait for queued messages as long as a send may block */
    int linger = o->timeout > 0 ? (int)(o->timeout * 1000) : -1;
    int sndtimeo = o->timeout > 0 ? (int)(o->timeout * 1000) : -1;
    zmq_setsockopt(s->sock, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s->sock, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(s->sock, ZMQ_SNDTIMEO, &sndtimeo, sizeof sndtimeo);
    /* PUSH queues only to connected receivers: without this, frames sent
     * before (or without) a receiver would sit in a queue and be dropped
     * at exit while the summary claimed them sent */
    int immediate = 1;
    if (!o->pub)
        zmq_setsockopt(s->sock, ZMQ_IMMEDIATE, &immediate, sizeof immediate);
    char cerr[600];
    if (ss_curve_client_files(s->sock, o->curve_key, o->server_key, cerr, sizeof cerr) != 0) {
        fprintf(stderr, PROG ": %s\n", cerr);
        return -1;
    }
    int rc = o->bind ? zmq_bind(s->sock, o->endpoint) : zmq_connect(s->sock, o->endpoint);
    if (rc != 0) {
        fprintf(stderr, PROG ": cannot %s %s: %s\n", o->bind ? "bind" : "connect to", o->endpoint,
                zmq_strerror(zmq_errno()));
        return -1;
    }
    if (o->pub && o->pub_wait > 0) {
        struct timespec ts = { (time_t)o->pub_wait,
                               (long)((o->pub_wait - floor(o->pub_wait)) * 1e9) };
        nanosleep(&ts, NULL);
    }
    return 0;
}

static void close_socket(sender_t *s)
{
    if (s->sock)
        zmq_close(s->sock);
    if (s->ctx)
        zmq_ctx_term(s->ctx);
}

static int send_parts(sender_t *s, const ss_proto_part_t *p, int n)
{
    ss_err_t e = ss_proto_send_parts(s->sock, p, n, 0);
    if (e == SS_OK)
        return 0;
    if (e == SS_ERR_TIMEOUT)
        fprintf(stderr, PROG ": send blocked for %g s (no receiver at %s?)\n", s->o->timeout,
                s->o->endpoint);
    else
        fprintf(stderr, PROG ": send failed: %s\n", zmq_strerror(zmq_errno()));
    return -1;
}

static int send_series(sender_t *s, ss_msg_type_t t, int64_t frames)
{
    char buf[SERIES_MAX];
    int n = ss_proto_encode_series(t, s->o->series, s->o->feed, ss_unix_to_mjd(ss_now_unix()),
                                   frames, NULL, buf, sizeof buf);
    if (n < 0) {
        fprintf(stderr, PROG ": cannot encode the %s message\n", ss_msg_type_name(t));
        return -1;
    }
    ss_proto_part_t p = { buf, (size_t)n };
    return send_parts(s, &p, 1);
}

/* One frame: header, pixels (and mask). f->meta is completed here: seq,
 * feed, series, meta, and the time when the frame has none or --now. */
static int send_frame(sender_t *s, ss_frame_t *f, uint64_t seq, uint8_t *mask, char *hdr)
{
    const opts_t *o = s->o;
    f->meta.seq = seq;
    ss_strlcpy(f->meta.feed, o->feed ? o->feed : "", sizeof f->meta.feed);
    ss_strlcpy(f->meta.series, o->no_series ? "" : o->series, sizeof f->meta.series);
    ss_strlcpy(f->meta.meta_json, o->meta ? o->meta : "", sizeof f->meta.meta_json);
    if (o->now || !isfinite(f->meta.mjd_obs))
        f->meta.mjd_obs = ss_unix_to_mjd(ss_now_unix());
    int n = ss_proto_encode_frame_header(f, hdr, HEADER_MAX);
    if (n < 0) {
        fprintf(stderr, PROG ": frame %llu: header does not fit %d bytes\n",
                (unsigned long long)seq, HEADER_MAX);
        return -1;
    }
    size_t npix = (size_t)f->width * (size_t)f->height;
    ss_proto_part_t p[3] = { { hdr, (size_t)n }, { f->pixels, ss_frame_bytes(f) }, { mask, npix } };
    if (o->mask) {
        for (size_t i = 0; i < npix; i++)
            mask[i] = (uint8_t)(f->dtype != SS_DT_F32 || isfinite(((const float *)f->pixels)[i]));
    }
    if (send_parts(s, p, o->mask ? 3 : 2) != 0)
        return -1;
    s->frames++;
    s->bytes += ss_frame_bytes(f);
    return 0;
}

/* Sleep until frame i's slot on the absolute schedule t0 + i / rate. */
static void pace(double t0, uint64_t i, double rate)
{
    if (rate <= 0)
        return;
    double due = t0 + (double)i / rate;
    for (;;) {
        double wait = due - ss_now_mono();
        if (wait <= 0 || g_stop)
            return;
        struct timespec ts = { (time_t)wait, (long)((wait - floor(wait)) * 1e9) };
        if (nanosleep(&ts, NULL) == 0)
            return;
    }
}

/* ---- the two sources ------------------------------------------------------ */

static int run_synth(sender_t *s, const opts_t *o, uint64_t count)
{
    ss_synth_cfg_t c = o->sc;
    if (o->rate > 0)
        c.frame_interval = 1.0 / o->rate;
    ss_synth_t *syn = ss_synth_new(&c);
    if (!syn) {
        fprintf(stderr, PROG ": invalid synthetic-field settings\n");
        return -1;
    }
    size_t npix = (size_t)c.width * (size_t)c.height;
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    f.capacity = npix * ss_dtype_size(c.dtype);
    f.pixels = malloc(f.capacity);
    uint8_t *mask = malloc(npix);
    char *hdr = malloc(HEADER_MAX);
    int rc = -1;
    if (!f.pixels || !mask || !hdr) {
        fprintf(stderr, PROG ": out of memory for %zu-pixel frames\n", npix);
        goto out;
    }
    double t0 = ss_now_mono();
    for (uint64_t i = 0; i < count && !g_stop; i++) {
        ss_err_t e = ss_synth_next(syn, &f, NULL);
        if (e != SS_OK) {
            fprintf(stderr, PROG ": synthetic frame %llu: %s\n", (unsigned long long)i,
                    ss_strerror(e));
            goto out;
        }
        pace(t0, i, o->rate);
        if (send_frame(s, &f, o->seq0 + i, mask, hdr) != 0)
            goto out;
    }
    rc = 0;
out:
    free(f.pixels);
    free(mask);
    free(hdr);
    ss_synth_destroy(&syn);
    return rc;
}

static int run_files(sender_t *s, const opts_t *o, char **files, int nfiles, uint64_t count)
{
    ss_frame_t f;
    memset(&f, 0, sizeof f);
    uint8_t *mask = NULL;
    char *hdr = malloc(HEADER_MAX);
    char err[512];
    int rc = -1;
    if (!hdr)
        goto out;
    double t0 = ss_now_mono();
    for (uint64_t i = 0; i < count && !g_stop; i++) {
        const char *path = files[i % (uint64_t)nfiles];
        int w, h;
        ss_dtype_t dt;
        if (ss_fits_probe(path, &w, &h, &dt, err, sizeof err) != SS_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            goto out;
        }
        /* buffers grow to the largest file; files of any size may follow */
        size_t npix = (size_t)w * (size_t)h, bytes = npix * ss_dtype_size(dt);
        if (bytes > f.capacity) {
            void *p = realloc(f.pixels, bytes);
            uint8_t *m = realloc(mask, npix);
            if (p)
                f.pixels = p;
            if (m)
                mask = m;
            if (!p || !m) {
                fprintf(stderr, PROG ": out of memory for %s\n", path);
                goto out;
            }
            f.capacity = bytes;
        }
        if (ss_fits_read_frame(path, &f, err, sizeof err) != SS_OK) {
            fprintf(stderr, PROG ": %s\n", err);
            goto out;
        }
        if (!isfinite(f.meta.mjd_obs) && !o->now && !o->quiet)
            fprintf(stderr, PROG ": %s has no usable DATE-OBS: sent with the current time\n",
                    path);
        pace(t0, i, o->rate);
        if (send_frame(s, &f, o->seq0 + i, mask, hdr) != 0)
            goto out;
    }
    rc = 0;
out:
    free(f.pixels);
    free(mask);
    free(hdr);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    memset(&o, 0, sizeof o);
    o.endpoint = DEFAULT_ENDPOINT;
    o.pub_wait = DEFAULT_PUB_WAIT;
    o.hwm = DEFAULT_HWM;
    o.count = -1;
    ss_synth_defaults(&o.sc);
    if (parse_args(argc, argv, &o) != 0)
        return EXIT_USAGE;
    int nfiles = argc - optind;
    if (o.synth == (nfiles > 0)) {
        fprintf(stderr, PROG ": give FITS files or --synth (one of them; see --help)\n");
        return EXIT_USAGE;
    }
    if (o.feed) {
        for (const char *p = o.feed; *p; p++)
            if (!(((*p | 32) >= 'a' && (*p | 32) <= 'z') || (*p >= '0' && *p <= '9') ||
                  *p == '_' || *p == '-' || *p == '.'))
                return bad("--feed", o.feed), EXIT_USAGE;
        if (strlen(o.feed) >= SS_NAME_MAX)
            return bad("--feed", o.feed), EXIT_USAGE;
    }
    if (o.meta) {
        /* validated the way a receiver will: as the "meta" of a frame */
        char probe[SS_META_MAX + 256];
        snprintf(probe, sizeof probe,
                 "{\"protocol\":1,\"type\":\"series_start\",\"series\":\"x\",\"meta\":%s}", o.meta);
        ss_proto_limits_t lim;
        ss_proto_limits_default(&lim);
        static ss_proto_input_t in;
        ss_proto_error_t perr;
        if (strlen(o.meta) >= SS_META_MAX ||
            ss_proto_parse_input(probe, strlen(probe), &lim, &in, &perr) != SS_OK) {
            fprintf(stderr, PROG ": --meta: %s\n",
                    strlen(o.meta) >= SS_META_MAX ? "too large" : perr.text);
            return EXIT_USAGE;
        }
        static char compact[SS_META_MAX];
        ss_strlcpy(compact, in.meta.meta_json, sizeof compact);
        o.meta = compact;
    }
    if (!o.series[0])
        snprintf(o.series, sizeof o.series, "send-%lld", (long long)time(NULL));
    uint64_t count = o.count >= 0 ? (uint64_t)o.count
                     : o.synth ? DEFAULT_SYNTH_COUNT : (uint64_t)nfiles;
    if (!o.synth && !o.loop && count > (uint64_t)nfiles)
        count = (uint64_t)nfiles;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    sender_t s;
    memset(&s, 0, sizeof s);
    int rc = EXIT_FAIL;
    double t0 = ss_now_mono();
    if (open_socket(&s, &o) != 0)
        goto out;
    if (!o.no_series && send_series(&s, SS_MSG_SERIES_START, (int64_t)count) != 0)
        goto out;
    int r = o.synth ? run_synth(&s, &o, count) : run_files(&s, &o, argv + optind, nfiles, count);
    if (r != 0)
        goto out;
    if (!o.no_series && send_series(&s, SS_MSG_SERIES_END, (int64_t)s.frames) != 0)
        goto out;
    rc = 0;
out:
    close_socket(&s); /* waits (up to --timeout) for queued messages to leave */
    if (!o.quiet) {
        double dt = ss_now_mono() - t0;
        fprintf(stderr, PROG ": %llu frames (%.1f MB) in %.2f s (%.1f frames/s) to %s%s\n",
                (unsigned long long)s.frames, (double)s.bytes / 1e6, dt,
                dt > 0 ? (double)s.frames / dt : 0.0, o.endpoint, g_stop ? " (interrupted)" : "");
    }
    return rc;
}
