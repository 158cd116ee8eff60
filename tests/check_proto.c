/*
 * check_proto.c — the wire protocol (proto/proto.h, proto/proto_zmq.h).
 *
 * Three independent references pin the codec down:
 *  - tests/golden/<msg>/expected.json, written by hand: what each golden
 *    message means ("view" below: a canonical JSON rendering of the decoded
 *    structs that clients/python/test_client.py produces too);
 *  - the golden message bytes themselves (tests/golden/<msg>/N-*.{txt,json,bin}),
 *    which the C encoder must reproduce byte for byte from the fixtures;
 *  - tests/golden/malformed.json: malformed inputs (and output messages,
 *    "decoder": "output") with the reason and the exact error text
 *    PROTOCOL.md documents (also run by the Python tests).
 * Plus randomised encode -> decode round trips of every message, encoder
 * buffer-size edges, and real ZeroMQ sockets (inproc) for proto_zmq.c.
 *
 * SKYSIEVE_REGEN_GOLDEN=1 rewrites the golden bytes from the fixtures
 * (after a deliberate format change; the expected.json files are never
 * generated).
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/proto.h"
#include "proto/proto_zmq.h"
#include "pipeline/half_core.h"
#include "pipeline/outputs.h"
#include "pipeline/pipeline.h"

#include "adzmq_sender.h"
#include "ss_test.h"

#define GOLDEN_MAX_PARTS 6
#define RESIDUAL_PARTS_TEXT_T \
    "a residual message has a topic, a header, a pixel part and an optional mask part"
#define BUF_BIG (1 << 20)
#define TOL_REL 1e-12

/* ---- files --------------------------------------------------------------- */

static const char *source_dir(void)
{
    const char *s = getenv("SKYSIEVE_SOURCE_DIR");
    return s && s[0] ? s : ".";
}

static int regen(void)
{
    const char *s = getenv("SKYSIEVE_REGEN_GOLDEN");
    return s && s[0] == '1';
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    if (buf) {
        buf[n] = '\0';
        *len = (size_t)n;
    }
    return buf;
}

static void golden_path(char *out, size_t n, const char *msg, const char *file)
{
    snprintf(out, n, "%s/tests/golden/%s/%s", source_dir(), msg, file);
}

/* The parts of a golden message, in file-name order (N-<label>.<ext>). */
typedef struct golden {
    int n;
    char *data[GOLDEN_MAX_PARTS];
    ss_proto_part_t part[GOLDEN_MAX_PARTS];
} golden_t;

static const char *const part_names[] = {
    "0-header.json", "0-topic.txt", "0-request.json", "0-response.json",
    "1-pixels.bin", "1-header.json", "1-body.json",
    "2-mask.bin", "2-pixels.bin",
    "3-mask.bin",
};

static void golden_load(const char *msg, golden_t *g)
{
    memset(g, 0, sizeof *g);
    for (int idx = 0; idx < GOLDEN_MAX_PARTS; idx++) {
        int found = 0;
        for (size_t k = 0; k < sizeof part_names / sizeof part_names[0]; k++) {
            if (part_names[k][0] != '0' + idx)
                continue;
            char path[1024];
            size_t len = 0;
            golden_path(path, sizeof path, msg, part_names[k]);
            char *d = read_file(path, &len);
            if (d) {
                g->data[g->n] = d;
                g->part[g->n].data = d;
                g->part[g->n].len = len;
                g->n++;
                found = 1;
                break;
            }
        }
        if (!found)
            break;
    }
    ck_assert_msg(g->n > 0, "golden message %s not found under %s/tests/golden", msg, source_dir());
}

static void golden_free(golden_t *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->data[i]);
    g->n = 0;
}

static cJSON *load_expected(const char *msg)
{
    char path[1024];
    size_t len = 0;
    golden_path(path, sizeof path, msg, "expected.json");
    char *txt = read_file(path, &len);
    ck_assert_msg(txt != NULL, "missing %s", path);
    cJSON *j = cJSON_ParseWithLength(txt, len);
    ck_assert_msg(j != NULL, "%s is not JSON", path);
    free(txt);
    return j;
}

/* Compare (or, in regen mode, write) one golden part against encoder output. */
static void golden_bytes(const char *msg, const char *file, const void *data, size_t len)
{
    char path[1024];
    golden_path(path, sizeof path, msg, file);
    if (regen()) {
        FILE *fp = fopen(path, "wb");
        ck_assert_msg(fp != NULL, "cannot write %s", path);
        ck_assert_uint_eq(fwrite(data, 1, len, fp), len);
        fclose(fp);
        return;
    }
    size_t glen = 0;
    char *g = read_file(path, &glen);
    ck_assert_msg(g != NULL, "missing %s (SKYSIEVE_REGEN_GOLDEN=1 writes it)", path);
    ck_assert_msg(glen == len && memcmp(g, data, len) == 0,
                  "%s differs from the encoder's output (%zu vs %zu bytes):\n%.*s", path, glen, len,
                  (int)(len < 400 ? len : 400), (const char *)data);
    free(g);
}

/* ---- JSON comparison ----------------------------------------------------- */

static int num_equal(double a, double b)
{
    if (a == b)
        return 1;
    return fabs(a - b) <= TOL_REL * fmax(fabs(a), fabs(b));
}

/* Deep equality: same key sets, same array lengths, numbers within
 * TOL_REL. On failure writes the path of the first difference. */
static int json_equal(const cJSON *a, const cJSON *b, char *path, size_t plen)
{
    size_t base = strlen(path);
    if (cJSON_IsNumber(a) && cJSON_IsNumber(b))
        return num_equal(a->valuedouble, b->valuedouble);
    if ((a->type & 0xFF) != (b->type & 0xFF))
        return 0;
    if (cJSON_IsString(a))
        return strcmp(a->valuestring, b->valuestring) == 0;
    if (cJSON_IsArray(a)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b))
            return 0;
        int i = 0;
        for (const cJSON *x = a->child, *y = b->child; x && y; x = x->next, y = y->next, i++) {
            snprintf(path + base, plen - base, "[%d]", i);
            if (!json_equal(x, y, path, plen))
                return 0;
        }
        path[base] = '\0';
        return 1;
    }
    if (cJSON_IsObject(a)) {
        if (cJSON_GetArraySize(a) != cJSON_GetArraySize(b)) {
            snprintf(path + base, plen - base, " (member count %d vs %d)", cJSON_GetArraySize(a),
                     cJSON_GetArraySize(b));
            return 0;
        }
        for (const cJSON *x = a->child; x; x = x->next) {
            snprintf(path + base, plen - base, ".%s", x->string);
            const cJSON *y = cJSON_GetObjectItemCaseSensitive(b, x->string);
            if (!y || !json_equal(x, y, path, plen))
                return 0;
        }
        path[base] = '\0';
        return 1;
    }
    return 1; /* null, true, false: the type compare decided */
}

static void assert_json_equal(const cJSON *got, const cJSON *want, const char *what)
{
    char path[512] = "";
    if (!json_equal(got, want, path, sizeof path)) {
        char *g = cJSON_Print(got), *w = cJSON_Print(want);
        ck_abort_msg("%s: differs at %s\n-- got:\n%s\n-- expected:\n%s", what, path[0] ? path : "(root)",
                     g, w);
    }
}

/* ---- canonical views (the same rendering as test_client.py's) ------------ */

static cJSON *num_or_null(double v)
{
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *view_wcs(const ss_frame_meta_t *m)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < m->n_wcs; i++) {
        if (m->wcs[i].is_string)
            cJSON_AddStringToObject(o, m->wcs[i].key, m->wcs[i].sval);
        else
            cJSON_AddNumberToObject(o, m->wcs[i].key, m->wcs[i].dval);
    }
    return o;
}

static cJSON *view_meta(const char *meta_json)
{
    if (!meta_json[0])
        return cJSON_CreateObject();
    cJSON *o = cJSON_Parse(meta_json);
    ck_assert_msg(o != NULL, "meta_json is not JSON: %s", meta_json);
    return o;
}

static cJSON *view_pixels(const void *pix, ss_dtype_t dt, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, num_or_null(ss_dtype_get(pix, dt, i)));
    return a;
}

static cJSON *view_mask(const uint8_t *mask, size_t n)
{
    if (!mask)
        return cJSON_CreateNull();
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(mask[i]));
    return a;
}

static cJSON *view_input(const ss_proto_input_t *in, const ss_frame_t *f)
{
    cJSON *v = cJSON_CreateObject();
    const ss_frame_meta_t *m = &in->meta;
    cJSON_AddStringToObject(v, "type", ss_msg_type_name(in->type));
    cJSON_AddStringToObject(v, "series", m->series);
    cJSON_AddStringToObject(v, "feed", m->feed);
    cJSON_AddItemToObject(v, "mjd", num_or_null(m->mjd_obs));
    cJSON_AddItemToObject(v, "frames", in->frames >= 0 ? cJSON_CreateNumber((double)in->frames)
                                                        : cJSON_CreateNull());
    cJSON_AddItemToObject(v, "meta", view_meta(m->meta_json));
    if (in->type == SS_MSG_FRAME) {
        size_t n = (size_t)in->width * (size_t)in->height;
        cJSON_AddNumberToObject(v, "seq", (double)m->seq);
        cJSON_AddNumberToObject(v, "exposure", m->exposure);
        cJSON_AddNumberToObject(v, "width", in->width);
        cJSON_AddNumberToObject(v, "height", in->height);
        cJSON_AddStringToObject(v, "dtype", ss_dtype_name(in->dtype));
        cJSON_AddItemToObject(v, "wcs", view_wcs(m));
        cJSON_AddItemToObject(v, "pixels", view_pixels(f->pixels, f->dtype, n));
        cJSON_AddItemToObject(v, "mask", view_mask(f->valid, n));
    }
    return v;
}

static cJSON *view_shift(const ss_shift_t *s)
{
    if (!s->ok)
        return cJSON_CreateNull();
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "x", num_or_null(s->sx));
    cJSON_AddItemToObject(o, "y", num_or_null(s->sy));
    cJSON_AddItemToObject(o, "err_x", num_or_null(s->err_x));
    cJSON_AddItemToObject(o, "err_y", num_or_null(s->err_y));
    cJSON_AddItemToObject(o, "cov_xy", num_or_null(s->cov_xy));
    return o;
}

static cJSON *pair(double a, double b)
{
    cJSON *p = cJSON_CreateArray();
    cJSON_AddItemToArray(p, cJSON_CreateNumber(a));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(b));
    return p;
}

static cJSON *view_detection(const ss_detection_t *d)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "x", d->x);
    cJSON_AddNumberToObject(o, "y", d->y);
    cJSON_AddItemToObject(o, "flux", num_or_null(d->flux));
    cJSON_AddItemToObject(o, "flux_err", num_or_null(d->flux_err));
    cJSON_AddItemToObject(o, "peak_snr", num_or_null(d->peak_snr));
    cJSON_AddNumberToObject(o, "peak_x", d->peak_x);
    cJSON_AddNumberToObject(o, "peak_y", d->peak_y);
    cJSON_AddNumberToObject(o, "area", d->area);
    int bb[4] = { d->bbox_x0, d->bbox_y0, d->bbox_x1, d->bbox_y1 };
    cJSON_AddItemToObject(o, "bbox", cJSON_CreateIntArray(bb, 4));
    cJSON_AddItemToObject(o, "a", num_or_null(d->a));
    cJSON_AddItemToObject(o, "b", num_or_null(d->b));
    cJSON_AddItemToObject(o, "theta", num_or_null(d->theta));
    cJSON_AddStringToObject(o, "kind", ss_kind_name(d->kind));
    cJSON_AddNumberToObject(o, "sign", d->sign);
    cJSON *ends = cJSON_CreateArray();
    cJSON_AddItemToArray(ends, pair(d->x0, d->y0));
    cJSON_AddItemToArray(ends, pair(d->x1, d->y1));
    cJSON_AddItemToObject(o, "ends", ends);
    cJSON_AddItemToObject(o, "peak_fraction", num_or_null(d->peak_fraction));
    cJSON *flags = cJSON_CreateArray();
    for (int bit = 1; bit <= SS_DET_TOUCHES_EDGE; bit <<= 1)
        if (d->flags & bit)
            cJSON_AddItemToArray(flags, cJSON_CreateString(ss_proto_flag_name(bit)));
    cJSON_AddItemToObject(o, "flags", flags);
    cJSON_AddNumberToObject(o, "label", d->label);
    cJSON_AddNumberToObject(o, "track", (double)d->track);
    cJSON_AddItemToObject(o, "ra", d->has_radec ? cJSON_CreateNumber(d->ra) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "dec", d->has_radec ? cJSON_CreateNumber(d->dec) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "mag", num_or_null(d->mag));
    cJSON_AddItemToObject(o, "mag_err", num_or_null(d->mag_err));
    return o;
}

/* A track's first / last: seq, time (from mjd, as the Python client
 * derives it) and mjd. */
static cJSON *view_track_end(uint64_t seq, double mjd)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "seq", (double)seq);
    char iso[40];
    if (isfinite(mjd)) {
        ss_mjd_to_iso(mjd, iso, sizeof iso);
        cJSON_AddStringToObject(o, "time", iso);
    } else {
        cJSON_AddNullToObject(o, "time");
    }
    cJSON_AddItemToObject(o, "mjd", num_or_null(mjd));
    return o;
}

static cJSON *view_track(const ss_track_t *t)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", (double)t->id);
    cJSON_AddStringToObject(o, "kind", ss_kind_name(t->kind));
    cJSON_AddStringToObject(o, "state", ss_track_state_name(t->state));
    cJSON_AddNumberToObject(o, "n", t->n);
    cJSON_AddNumberToObject(o, "missed", t->missed);
    cJSON_AddItemToObject(o, "first", view_track_end(t->seq_first, t->mjd_first));
    cJSON_AddItemToObject(o, "last", view_track_end(t->seq_last, t->mjd_last));
    cJSON *pos = cJSON_AddObjectToObject(o, "position");
    cJSON_AddNumberToObject(pos, "x", t->x);
    cJSON_AddNumberToObject(pos, "y", t->y);
    cJSON *v = cJSON_AddObjectToObject(o, "velocity");
    cJSON_AddItemToObject(v, "x", num_or_null(t->vx));
    cJSON_AddItemToObject(v, "y", num_or_null(t->vy));
    cJSON_AddItemToObject(v, "err_x", num_or_null(t->vx_err));
    cJSON_AddItemToObject(v, "err_y", num_or_null(t->vy_err));
    cJSON_AddStringToObject(v, "unit", t->timed ? "px/s" : "px/frame");
    cJSON_AddItemToObject(o, "rms", num_or_null(t->rms));
    cJSON_AddItemToObject(o, "snr", num_or_null(t->snr));
    cJSON_AddItemToObject(o, "rate", t->has_rate ? cJSON_CreateNumber(t->rate) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "pa", t->has_rate ? cJSON_CreateNumber(t->pa) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "mag", num_or_null(t->mag));
    cJSON_AddItemToObject(o, "mag_err", num_or_null(t->mag_err));
    cJSON *pts = cJSON_AddArrayToObject(o, "points");
    for (int i = 0; i < t->n_points; i++) {
        cJSON *p = cJSON_CreateObject();
        cJSON_AddNumberToObject(p, "seq", (double)t->points[i].seq);
        cJSON_AddNumberToObject(p, "x", t->points[i].x);
        cJSON_AddNumberToObject(p, "y", t->points[i].y);
        cJSON_AddItemToObject(p, "mjd", num_or_null(t->points[i].mjd));
        cJSON_AddItemToArray(pts, p);
    }
    return o;
}

static cJSON *view_result(const ss_result_t *r, ss_msg_type_t type, const uint8_t *mask)
{
    cJSON *v = cJSON_CreateObject();
    const ss_frame_meta_t *m = &r->meta;
    cJSON_AddStringToObject(v, "type", ss_msg_type_name(type));
    cJSON_AddStringToObject(v, "feed", m->feed);
    cJSON_AddStringToObject(v, "series", m->series);
    cJSON_AddNumberToObject(v, "seq", (double)m->seq);
    char in[SS_PROTO_INPUT_MAX];
    cJSON_AddStringToObject(v, "input", ss_proto_input(m, in, sizeof in));
    cJSON_AddItemToObject(v, "mjd", num_or_null(m->mjd_obs));
    cJSON_AddNumberToObject(v, "exposure", m->exposure);
    cJSON_AddNumberToObject(v, "width", r->width);
    cJSON_AddNumberToObject(v, "height", r->height);
    cJSON_AddStringToObject(v, "status", ss_status_name(r->status));
    cJSON_AddStringToObject(v, "reason", r->reason);
    cJSON_AddItemToObject(v, "shift", view_shift(&r->shift));
    cJSON_AddItemToObject(v, "sigma", num_or_null(r->sigma));
    cJSON_AddNumberToObject(v, "history_len", r->history_len);
    cJSON_AddBoolToObject(v, "rereferenced", r->rereferenced);
    cJSON_AddBoolToObject(v, "history_reset", r->history_reset);
    cJSON_AddItemToObject(v, "meta", view_meta(m->meta_json));
    if (type == SS_MSG_RESIDUAL) {
        size_t n = (size_t)r->width * (size_t)r->height;
        cJSON_AddItemToObject(v, "weights", cJSON_CreateDoubleArray(r->weights, r->n_weights));
        cJSON_AddItemToObject(v, "wcs", view_wcs(m));
        cJSON_AddItemToObject(v, "pixels", view_pixels(r->residual, SS_DT_F32, n));
        cJSON_AddItemToObject(v, "mask", view_mask(mask, n));
    } else if (type == SS_MSG_TRACKS) {
        cJSON_AddNumberToObject(v, "truncated", r->tracks.truncated);
        cJSON *list = cJSON_CreateArray();
        for (int i = 0; i < r->tracks.count; i++)
            cJSON_AddItemToArray(list, view_track(&r->tracks.items[i]));
        cJSON_AddItemToObject(v, "tracks", list);
    } else {
        cJSON_AddNumberToObject(v, "truncated", r->dets.truncated);
        cJSON *list = cJSON_CreateArray();
        for (int i = 0; i < r->dets.count; i++)
            cJSON_AddItemToArray(list, view_detection(&r->dets.items[i]));
        cJSON_AddItemToObject(v, "detections", list);
    }
    return v;
}

static cJSON *view_status(const ss_proto_status_t *st)
{
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "version", st->version);
    cJSON_AddItemToObject(v, "mjd", num_or_null(st->mjd));
    cJSON_AddNumberToObject(v, "uptime_s", st->uptime_s);
    cJSON *feeds = cJSON_AddArrayToObject(v, "feeds");
    for (int i = 0; i < st->n_feeds; i++) {
        const ss_proto_feed_stats_t *f = &st->feeds[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", f->name);
        cJSON_AddStringToObject(o, "state", f->state);
        cJSON_AddStringToObject(o, "backend", f->backend);
        cJSON_AddStringToObject(o, "source", f->source);
        cJSON_AddNumberToObject(o, "received", (double)f->received);
        cJSON_AddNumberToObject(o, "accepted", (double)f->accepted);
        cJSON_AddNumberToObject(o, "rejected", (double)f->rejected);
        cJSON *rb = cJSON_AddObjectToObject(o, "rejected_by");
        for (int r = 1; r < SS_PR__COUNT; r++)
            cJSON_AddNumberToObject(rb, ss_proto_reason_name((ss_proto_reason_t)r),
                                    (double)f->rejected_by[r]);
        cJSON_AddNumberToObject(o, "dropped_queue", (double)f->dropped_queue);
        cJSON_AddNumberToObject(o, "processed", (double)f->processed);
        cJSON *sc = cJSON_AddObjectToObject(o, "status");
        for (int s = 0; s < SS_STATUS__COUNT; s++)
            cJSON_AddNumberToObject(sc, ss_status_name((ss_frame_status_t)s),
                                    (double)f->status_count[s]);
        cJSON_AddNumberToObject(o, "detections", (double)f->detections);
        cJSON_AddNumberToObject(o, "detections_truncated", (double)f->detections_truncated);
        cJSON_AddNumberToObject(o, "reg_failures", (double)f->reg_failures);
        cJSON_AddNumberToObject(o, "resets", (double)f->resets);
        cJSON_AddNumberToObject(o, "published", (double)f->published);
        cJSON_AddNumberToObject(o, "pub_dropped", (double)f->pub_dropped);
        cJSON_AddNumberToObject(o, "queue_depth", f->queue_depth);
        cJSON_AddNumberToObject(o, "queue_capacity", f->queue_capacity);
        cJSON_AddItemToObject(o, "fps", num_or_null(f->fps));
        cJSON_AddNumberToObject(o, "last_seq", (double)f->last_seq);
        cJSON_AddItemToObject(o, "last_mjd", num_or_null(f->last_mjd));
        cJSON *sm = cJSON_AddObjectToObject(o, "stage_ms");
        for (int s = 0; s < SS_STAGE__COUNT; s++)
            cJSON_AddItemToObject(sm, ss_stage_name((ss_stage_id_t)s), num_or_null(f->stage_ms[s]));
        cJSON_AddItemToObject(o, "total_ms", num_or_null(f->total_ms));
        cJSON_AddNumberToObject(o, "device_mem_used", (double)f->device_mem_used);
        cJSON_AddNumberToObject(o, "device_mem_total", (double)f->device_mem_total);
        cJSON_AddItemToArray(feeds, o);
    }
    return v;
}

static cJSON *view_request(const ss_ctl_request_t *r)
{
    cJSON *v = cJSON_CreateObject();
    cJSON_AddStringToObject(v, "cmd", ss_ctl_cmd_name(r->cmd));
    cJSON_AddStringToObject(v, "feed", r->feed);
    return v;
}

static cJSON *view_response(const ss_ctl_response_t *r)
{
    cJSON *v = cJSON_CreateObject();
    cJSON_AddBoolToObject(v, "ok", r->ok);
    cJSON_AddStringToObject(v, "cmd", r->cmd);
    cJSON_AddStringToObject(v, "error", r->error);
    cJSON *body = cJSON_Parse(r->body);
    ck_assert_msg(body != NULL, "response body is not JSON: %s", r->body);
    cJSON_AddItemToObject(v, "body", body);
    return v;
}

/* ---- fixtures (the same values as the expected.json files) -------------- */

#define MJD_FRAME 61366.25          /* 2026-11-22T06:00:00Z */
#define MJD_RESULT 61366.2505       /* 2026-11-22T06:00:43.200Z */

static void add_wcs_s(ss_frame_meta_t *m, const char *k, const char *v)
{
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->is_string = 1;
    ss_strlcpy(w->sval, v, sizeof w->sval);
}

static void add_wcs_d(ss_frame_meta_t *m, const char *k, double v)
{
    ss_wcs_key_t *w = &m->wcs[m->n_wcs++];
    memset(w, 0, sizeof *w);
    ss_strlcpy(w->key, k, sizeof w->key);
    w->dval = v;
}

static const uint16_t FX_U16_PIX[12] = { 0, 1, 2, 65535, 1000, 1001, 1002, 1003, 32768, 12345, 7, 8 };
static const uint8_t FX_U16_MASK[12] = { 1, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1 };

static void fx_frame_u16(ss_frame_t *f)
{
    ss_frame_meta_clear(&f->meta);
    f->width = 4;
    f->height = 3;
    f->dtype = SS_DT_U16;
    memcpy(f->pixels, FX_U16_PIX, sizeof FX_U16_PIX);
    ss_frame_meta_t *m = &f->meta;
    m->seq = 42;
    ss_strlcpy(m->series, "night-2026-11-22", sizeof m->series);
    ss_strlcpy(m->feed, "cam1", sizeof m->feed);
    m->mjd_obs = MJD_FRAME;
    m->exposure = 2.5;
    add_wcs_s(m, "CTYPE1", "RA---TAN");
    add_wcs_s(m, "CTYPE2", "DEC--TAN");
    add_wcs_d(m, "CRPIX1", 2.5);
    add_wcs_d(m, "CRPIX2", 1.5);
    add_wcs_d(m, "CRVAL1", 83.633);
    add_wcs_d(m, "CRVAL2", 22.0145);
    add_wcs_d(m, "CD1_1", -0.000277778);
    add_wcs_d(m, "CD1_2", 0);
    add_wcs_d(m, "CD2_1", 0);
    add_wcs_d(m, "CD2_2", 0.000277778);
    ss_strlcpy(m->meta_json, "{\"observer\":\"ops\",\"target\":{\"name\":\"M1\",\"id\":7}}",
               sizeof m->meta_json);
}

static const float FX_RES_PIX[6] = { 0.5f, -1.25f, NAN, 3.0f, 0.125f, -7.5f };

/* a result buffer of its own (ss_result_init belongs to the pipeline), with
 * room for max_dets detections and as many track reports */
static void result_alloc(ss_result_t *r, size_t max_pixels, int max_dets)
{
    memset(r, 0, sizeof *r);
    r->residual = calloc(max_pixels ? max_pixels : 1, sizeof(float));
    r->residual_capacity = max_pixels;
    r->dets.items = calloc((size_t)(max_dets > 0 ? max_dets : 1), sizeof(ss_detection_t));
    r->dets.capacity = max_dets;
    r->tracks.items = calloc((size_t)(max_dets > 0 ? max_dets : 1), sizeof(ss_track_t));
    r->tracks.capacity = max_dets;
    ck_assert(r->residual && r->dets.items && r->tracks.items);
    r->sigma = NAN;
}

static void result_release(ss_result_t *r)
{
    free(r->residual);
    free(r->dets.items);
    free(r->tracks.items);
    memset(r, 0, sizeof *r);
}

static void fx_result_common(ss_result_t *r)
{
    ss_frame_meta_clear(&r->meta);
    ss_frame_meta_t *m = &r->meta;
    m->seq = 57;
    ss_strlcpy(m->series, "night-2026-11-22", sizeof m->series);
    ss_strlcpy(m->feed, "cam1", sizeof m->feed);
    ss_strlcpy(m->input, "img_0057.fits", sizeof m->input);
    m->mjd_obs = MJD_RESULT;
    m->exposure = 2.5;
    ss_strlcpy(m->meta_json, "{\"observer\":\"ops\"}", sizeof m->meta_json);
    r->status = SS_STATUS_OK;
    r->reason[0] = '\0';
    memset(&r->shift, 0, sizeof r->shift);
    r->shift.ok = 1;
    r->shift.sx = 0.4375;
    r->shift.sy = -1.25;
    r->shift.err_x = 0.0125;
    r->shift.err_y = 0.015;
    r->shift.cov_xy = -2.5e-05;
    r->sigma = 3.5f;
    r->history_len = 4;
    r->rereferenced = r->history_reset = 0;
}

static void fx_residual(ss_result_t *r)
{
    fx_result_common(r);
    r->width = 3;
    r->height = 2;
    r->n_weights = 4;
    r->weights[0] = 0.25;
    r->weights[1] = 0.3;
    r->weights[2] = 0.2;
    r->weights[3] = 0.25;
    add_wcs_s(&r->meta, "CTYPE1", "RA---TAN");
    add_wcs_d(&r->meta, "CRVAL1", 83.633);
    memcpy(r->residual, FX_RES_PIX, sizeof FX_RES_PIX);
    r->has_residual = 1;
    r->dets.count = 0;
}

static ss_detection_t det(double x, double y, double flux, double flux_err, double snr, int px,
                          int py, int area, int x0, int y0, int x1, int y1, double a, double b,
                          double theta, ss_kind_t kind, int sign, double pf, int flags, int label)
{
    ss_detection_t d;
    memset(&d, 0, sizeof d);
    d.mag = d.mag_err = NAN;        /* no zero point unless a fixture sets one */
    d.x = x;
    d.y = y;
    d.flux = flux;
    d.flux_err = flux_err;
    d.peak_snr = snr;
    d.peak_x = px;
    d.peak_y = py;
    d.area = area;
    d.bbox_x0 = x0;
    d.bbox_y0 = y0;
    d.bbox_x1 = x1;
    d.bbox_y1 = y1;
    d.a = a;
    d.b = b;
    d.theta = theta;
    d.kind = kind;
    d.sign = sign;
    d.x0 = d.x1 = x;
    d.y0 = d.y1 = y;
    d.peak_fraction = pf;
    d.flags = flags;
    d.label = label;
    return d;
}

static void fx_detections(ss_result_t *r)
{
    fx_result_common(r);
    r->width = 160;
    r->height = 120;
    r->has_residual = 0;
    ss_detection_t *d = r->dets.items;
    d[0] = det(10.25, 20.5, 1500.5, 25.25, 12.5, 10, 21, 14, 8, 18, 12, 23, 1.75, 1.5, 0.25,
               SS_KIND_POINT, 1, 0.0875, 0, 1);
    d[0].has_radec = 1;
    d[0].ra = 83.6;
    d[0].dec = 22.01;
    d[0].track = 7;                 /* tracks golden: track 7 took it */
    d[0].mag = 17.125;              /* a zero point was known */
    d[0].mag_err = 0.0185;
    d[1] = det(100.5, 50.25, 8000, 90.5, 9.75, 101, 50, 240, 70, 45, 131, 56, 18.5, 1.625, -0.125,
               SS_KIND_STREAK, 1, 0.01, SS_DET_TOUCHES_EDGE, 2);
    d[1].x0 = 70.5;
    d[1].y0 = 48.25;
    d[1].x1 = 130.5;
    d[1].y1 = 52.25;
    d[2] = det(5.5, 6.5, 300.25, 20, 6.5, 5, 6, 9, 4, 5, 7, 8, 1.25, 1.125, 1.5, SS_KIND_POINT, -1,
               0.125, SS_DET_TOUCHES_INVALID | SS_DET_TOUCHES_EDGE, -1);
    d[3] = det(60, 70, 900, 15, 30, 60, 70, 3, 59, 70, 61, 70, 0.75, 0.25, 0, SS_KIND_COSMIC, 1,
               0.625, 0, 3);
    r->dets.count = 4;
    r->dets.truncated = 2;
}

static ss_track_point_t tpoint(uint64_t seq, double mjd, double x, double y)
{
    ss_track_point_t p = { .seq = seq, .mjd = mjd, .x = x, .y = y };
    return p;
}

/* The frame of fx_detections with two track reports: 7, a timed point
 * that took detections[0] (0.0625, -0.03125 px/s over 8.64 s frames), and
 * 8, an untimed streak that missed this frame. */
static void fx_tracks(ss_result_t *r)
{
    fx_result_common(r);
    r->width = 160;
    r->height = 120;
    r->has_residual = 0;
    r->dets.count = 0;
    ss_track_t *t = r->tracks.items;
    memset(t, 0, 2 * sizeof *t);
    t[0].id = 7;
    t[0].kind = SS_KIND_POINT;
    t[0].state = SS_TRACK_ACTIVE;
    t[0].n = 5;
    t[0].missed = 0;
    t[0].timed = 1;
    t[0].seq_first = 53;
    t[0].seq_last = 57;
    t[0].mjd_first = 61366.250114467596;
    t[0].mjd_last = 61366.250514467596;
    t[0].x = 10.25;
    t[0].y = 20.5;
    t[0].vx = 0.0625;
    t[0].vy = -0.03125;
    t[0].vx_err = 0.0025;
    t[0].vy_err = 0.003;
    t[0].rms = 0.125;
    t[0].snr = 11.75;
    t[0].has_rate = 1;
    t[0].rate = 0.0699;
    t[0].pa = 243.4;
    t[0].mag = 17.25;
    t[0].mag_err = 0.0625;
    t[0].n_points = 5;
    t[0].points[0] = tpoint(53, 61366.250114467596, 8.09, 21.58);
    t[0].points[1] = tpoint(54, 61366.250214467596, 8.63, 21.31);
    t[0].points[2] = tpoint(55, 61366.250314467596, 9.17, 21.04);
    t[0].points[3] = tpoint(56, 61366.250414467596, 9.71, 20.77);
    t[0].points[4] = tpoint(57, 61366.250514467596, 10.25, 20.5);
    t[1].id = 8;
    t[1].kind = SS_KIND_STREAK;
    t[1].state = SS_TRACK_COASTING;
    t[1].n = 3;
    t[1].missed = 1;
    t[1].timed = 0;
    t[1].seq_first = 54;
    t[1].seq_last = 56;
    t[1].mjd_first = t[1].mjd_last = NAN;
    t[1].x = 130.75;
    t[1].y = 88.5;
    t[1].vx = 2.5;
    t[1].vy = 1.25;
    t[1].vx_err = 0.0625;
    t[1].vy_err = 0.05;
    t[1].rms = 0.375;
    t[1].snr = 7.25;
    t[1].has_rate = 0;
    t[1].rate = t[1].pa = NAN;
    t[1].mag = t[1].mag_err = NAN;
    t[1].n_points = 3;
    t[1].points[0] = tpoint(54, NAN, 125.75, 86);
    t[1].points[1] = tpoint(55, NAN, 128.25, 87.25);
    t[1].points[2] = tpoint(56, NAN, 130.75, 88.5);
    r->tracks.count = 2;
    r->tracks.truncated = 0;
}

static void fx_regfail(ss_result_t *r)
{
    ss_frame_meta_clear(&r->meta);
    r->meta.seq = 58;
    ss_strlcpy(r->meta.feed, "cam2", sizeof r->meta.feed);
    r->meta.mjd_obs = 61366.2506;
    r->meta.exposure = 0;
    r->width = 160;
    r->height = 120;
    r->status = SS_STATUS_REG_FAILED;
    ss_strlcpy(r->reason, "registration failed: featureless frame (det/(u*w) = 1e-09)",
               sizeof r->reason);
    memset(&r->shift, 0, sizeof r->shift);
    r->sigma = NAN;
    r->history_len = 0;
    r->rereferenced = 0;
    r->history_reset = 1;
    r->n_weights = 0;
    r->has_residual = 0;
    r->dets.count = 0;
    r->dets.truncated = 0;
}

static void fx_status(ss_proto_status_t *st)
{
    ss_proto_status_clear(st);
    ss_strlcpy(st->version, "0.1.0", sizeof st->version);
    st->mjd = 61366.3;
    st->uptime_s = 3600.5;
    st->n_feeds = 2;
    ss_proto_feed_stats_t *a = &st->feeds[0], *b = &st->feeds[1];
    ss_strlcpy(a->name, "cam1", sizeof a->name);
    ss_strlcpy(a->state, "running", sizeof a->state);
    ss_strlcpy(a->backend, "cpu", sizeof a->backend);
    ss_strlcpy(a->source, "zmq pull bind tcp://0.0.0.0:5555", sizeof a->source);
    a->received = 1000;
    a->accepted = 990;
    a->rejected = 10;
    a->rejected_by[SS_PR_MISSING_FIELD] = 3;
    a->rejected_by[SS_PR_DATA_SIZE] = 5;
    a->rejected_by[SS_PR_DIMENSIONS] = 2;
    a->dropped_queue = 4;
    a->processed = 986;
    a->status_count[SS_STATUS_OK] = 960;
    a->status_count[SS_STATUS_REFERENCE] = 1;
    a->status_count[SS_STATUS_WARMUP] = 19;
    a->status_count[SS_STATUS_REG_FAILED] = 5;
    a->status_count[SS_STATUS_ERROR] = 1;
    a->detections = 1234;
    a->detections_truncated = 17;
    a->reg_failures = 5;
    a->resets = 1;
    a->published = 1972;
    a->queue_depth = 2;
    a->queue_capacity = 16;
    a->fps = 9.75;
    a->last_seq = 1041;
    a->last_mjd = 61366.2999;
    const double ms[SS_STAGE__COUNT] = { 0.25, 1.5, 2.25, 3.5, 4.75, 6, 1.25, 2.5, 1.75, 0.5, 0.125 };
    memcpy(a->stage_ms, ms, sizeof ms);
    a->total_ms = 24.5;
    ss_strlcpy(b->name, "cam2", sizeof b->name);
    ss_strlcpy(b->state, "idle", sizeof b->state);
    ss_strlcpy(b->source, "synth", sizeof b->source);
    b->queue_capacity = 16;
}

/* ---- golden messages ----------------------------------------------------- */

static ss_proto_limits_t limits(void)
{
    ss_proto_limits_t l;
    ss_proto_limits_default(&l);
    return l;
}

static char *big(void)
{
    char *b = malloc(BUF_BIG);
    ck_assert(b != NULL);
    return b;
}

START_TEST(test_golden_frame_u16)
{
    ss_frame_pool_t *pool = ss_frame_pool_new(2, 4096, 4096, NULL);
    ss_frame_t *fx = ss_frame_pool_get(pool), *f = ss_frame_pool_get(pool);
    fx_frame_u16(fx);
    fx->valid = (uint8_t *)FX_U16_MASK;
    char *buf = big();
    int n = ss_proto_encode_frame_header(fx, buf, BUF_BIG);
    ck_assert_int_gt(n, 0);
    golden_bytes("frame_u16", "0-header.json", buf, (size_t)n);
    golden_bytes("frame_u16", "1-pixels.bin", FX_U16_PIX, sizeof FX_U16_PIX);
    golden_bytes("frame_u16", "2-mask.bin", FX_U16_MASK, sizeof FX_U16_MASK);

    cJSON *want = load_expected("frame_u16");
    ss_proto_input_t in_fx = { .type = SS_MSG_FRAME, .width = 4, .height = 3, .dtype = SS_DT_U16,
                               .frames = -1 };
    in_fx.meta = fx->meta;
    cJSON *v = view_input(&in_fx, fx);
    assert_json_equal(v, want, "fixture frame_u16 vs expected.json");
    cJSON_Delete(v);

    golden_t g;
    golden_load("frame_u16", &g);
    ck_assert_int_eq(g.n, 3);
    ss_proto_limits_t lim = limits();
    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_err_t e = ss_proto_decode_input(g.part, g.n, &lim, &in, f, &err);
    ck_assert_msg(e == SS_OK, "decode: %s", err.text);
    ck_assert_ptr_eq(f->valid, ss_frame_mask_buffer(f));
    v = view_input(&in, f);
    assert_json_equal(v, want, "decoded frame_u16 vs expected.json");
    cJSON_Delete(v);
    cJSON_Delete(want);
    golden_free(&g);
    free(buf);
    ss_frame_pool_put(fx);
    ss_frame_pool_put(f);
    ss_frame_pool_destroy(&pool);
}
END_TEST

START_TEST(test_golden_frame_f32_minimal)
{
    /* hand-written header in a foreign sender's style: only the required
     * fields, "mjd" instead of "time", a long dtype name, an extra member */
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_t *f = ss_frame_pool_get(pool);
    if (regen()) {
        const float pix[6] = { 1.5f, -2.25f, NAN, 0.0f, 1e6f, -0.0f };
        golden_bytes("frame_f32_minimal", "1-pixels.bin", pix, sizeof pix);
    }
    golden_t g;
    golden_load("frame_f32_minimal", &g);
    ck_assert_int_eq(g.n, 2);
    ss_proto_limits_t lim = limits();
    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_err_t e = ss_proto_decode_input(g.part, g.n, &lim, &in, f, &err);
    ck_assert_msg(e == SS_OK, "decode: %s", err.text);
    ck_assert_ptr_null(f->valid);
    cJSON *want = load_expected("frame_f32_minimal");
    cJSON *v = view_input(&in, f);
    assert_json_equal(v, want, "decoded frame_f32_minimal vs expected.json");
    /* -0.0 keeps its sign bit through the pixel part */
    ck_assert(signbit(((const float *)f->pixels)[5]));
    cJSON_Delete(v);
    cJSON_Delete(want);
    golden_free(&g);
    ss_frame_pool_put(f);
    ss_frame_pool_destroy(&pool);
}
END_TEST

START_TEST(test_golden_series)
{
    char buf[1024];
    ss_proto_limits_t lim = limits();
    static ss_proto_input_t in;
    ss_proto_error_t err;
    int n = ss_proto_encode_series(SS_MSG_SERIES_START, "night-2026-11-22", "cam1", MJD_FRAME, 100,
                                   "{\"program\":\"survey\"}", buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("series_start", "0-header.json", buf, (size_t)n);
    n = ss_proto_encode_series(SS_MSG_SERIES_END, "night-2026-11-22", "cam1", NAN, 100, NULL, buf,
                               sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("series_end", "0-header.json", buf, (size_t)n);

    const char *names[] = { "series_start", "series_end" };
    for (int k = 0; k < 2; k++) {
        golden_t g;
        golden_load(names[k], &g);
        ss_err_t e = ss_proto_decode_input(g.part, g.n, &lim, &in, NULL, &err);
        ck_assert_msg(e == SS_OK, "%s: %s", names[k], err.text);
        cJSON *want = load_expected(names[k]);
        cJSON *v = view_input(&in, NULL);
        assert_json_equal(v, want, names[k]);
        cJSON_Delete(v);
        cJSON_Delete(want);
        golden_free(&g);
    }
}
END_TEST

START_TEST(test_golden_residual)
{
    ss_result_t fx, r;
    result_alloc(&fx, 64, 4);
    result_alloc(&r, 64, 4);
    fx_residual(&fx);
    uint8_t mask[6];
    ck_assert_uint_eq(ss_proto_residual_mask(fx.residual, 6, mask), 5);
    char topic[SS_PROTO_TOPIC_MAX];
    int tn = ss_proto_topic(SS_MSG_RESIDUAL, fx.meta.feed, topic, sizeof topic);
    ck_assert_str_eq(topic, "residual.cam1");
    char *buf = big();
    int n = ss_proto_encode_residual(&fx, buf, BUF_BIG);
    ck_assert_int_gt(n, 0);
    golden_bytes("residual", "0-topic.txt", topic, (size_t)tn);
    golden_bytes("residual", "1-header.json", buf, (size_t)n);
    golden_bytes("residual", "2-pixels.bin", FX_RES_PIX, sizeof FX_RES_PIX);
    golden_bytes("residual", "3-mask.bin", mask, sizeof mask);

    cJSON *want = load_expected("residual");
    cJSON *v = view_result(&fx, SS_MSG_RESIDUAL, mask);
    assert_json_equal(v, want, "fixture residual vs expected.json");
    cJSON_Delete(v);

    golden_t g;
    golden_load("residual", &g);
    ck_assert_int_eq(g.n, 4);
    ss_proto_limits_t lim = limits();
    ss_proto_error_t err;
    uint8_t got_mask[6];
    int has_mask = 0;
    ss_err_t e = ss_proto_decode_residual(g.part, g.n, &lim, &r, got_mask, &has_mask, &err);
    ck_assert_msg(e == SS_OK, "decode: %s", err.text);
    ck_assert_int_eq(has_mask, 1);
    ck_assert_int_eq(r.has_residual, 1);
    v = view_result(&r, SS_MSG_RESIDUAL, got_mask);
    assert_json_equal(v, want, "decoded residual vs expected.json");
    cJSON_Delete(v);
    /* without the mask part */
    e = ss_proto_decode_residual(g.part, 3, &lim, &r, got_mask, &has_mask, &err);
    ck_assert_msg(e == SS_OK, "decode: %s", err.text);
    ck_assert_int_eq(has_mask, 0);
    cJSON_Delete(want);
    golden_free(&g);
    free(buf);
    result_release(&fx);
    result_release(&r);
}
END_TEST

/* The list messages' encoders and decoders by type: detections or tracks. */
static size_t list_bound(ss_msg_type_t type, const ss_result_t *r)
{
    return type == SS_MSG_TRACKS ? ss_proto_tracks_bound(r) : ss_proto_detections_bound(r);
}

static int encode_list(ss_msg_type_t type, const ss_result_t *r, char *buf, size_t n)
{
    return type == SS_MSG_TRACKS ? ss_proto_encode_tracks(r, buf, n)
                                 : ss_proto_encode_detections(r, buf, n);
}

static ss_err_t decode_list(ss_msg_type_t type, const ss_proto_part_t *parts, int n,
                            const ss_proto_limits_t *lim, ss_result_t *r, ss_proto_error_t *err)
{
    return type == SS_MSG_TRACKS ? ss_proto_decode_tracks(parts, n, lim, r, err)
                                 : ss_proto_decode_detections(parts, n, lim, r, err);
}

/* A golden [topic, body] message of a list type (detections, tracks): the
 * encoder writes it from the fixture byte for byte, and the fixture and the
 * decoded golden both read as its expected.json. */
static void golden_list(const char *name, ss_msg_type_t type, void (*fixture)(ss_result_t *))
{
    ss_result_t fx, r;
    result_alloc(&fx, 1, 8);
    result_alloc(&r, 1, 8);
    fixture(&fx);
    char topic[SS_PROTO_TOPIC_MAX];
    int tn = ss_proto_topic(type, fx.meta.feed, topic, sizeof topic);
    ck_assert_int_gt(tn, 0);
    size_t cap = list_bound(type, &fx);
    char *buf = malloc(cap);
    int n = encode_list(type, &fx, buf, cap);
    ck_assert_int_gt(n, 0);
    golden_bytes(name, "0-topic.txt", topic, (size_t)tn);
    golden_bytes(name, "1-body.json", buf, (size_t)n);

    cJSON *want = load_expected(name);
    cJSON *v = view_result(&fx, type, NULL);
    assert_json_equal(v, want, "fixture vs expected.json");
    cJSON_Delete(v);

    golden_t g;
    golden_load(name, &g);
    ck_assert_int_eq(g.n, 2);
    ss_proto_limits_t lim = limits();
    ss_proto_error_t err;
    ss_err_t e = decode_list(type, g.part, g.n, &lim, &r, &err);
    ck_assert_msg(e == SS_OK, "%s: decode: %s", name, err.text);
    v = view_result(&r, type, NULL);
    assert_json_equal(v, want, name);
    cJSON_Delete(v);
    cJSON_Delete(want);
    golden_free(&g);
    free(buf);
    result_release(&fx);
    result_release(&r);
}

START_TEST(test_golden_detections)
{
    golden_list("detections", SS_MSG_DETECTIONS, fx_detections);
    golden_list("detections_regfail", SS_MSG_DETECTIONS, fx_regfail);
}
END_TEST

START_TEST(test_golden_tracks)
{
    golden_list("tracks", SS_MSG_TRACKS, fx_tracks);
}
END_TEST

/* topic_seq (PROTOCOL.md §2, "Gaps"): the publisher appends it as the last
 * member; the decoders read it back (absent: has_topic_seq 0). */
START_TEST(test_topic_seq)
{
    char buf[64] = "{}";
    ck_assert_int_eq(ss_proto_add_topic_seq(buf, 2, sizeof buf, 7), 15);
    ck_assert_str_eq(buf, "{\"topic_seq\":7}");
    strcpy(buf, "{\"a\":1}");
    ck_assert_int_eq(ss_proto_add_topic_seq(buf, 7, sizeof buf, 18446744073709551615ull), 40);
    ck_assert_str_eq(buf, "{\"a\":1,\"topic_seq\":18446744073709551615}");
    strcpy(buf, "{\"a\":1}");
    ck_assert_int_eq(ss_proto_add_topic_seq(buf, 7, 20, 123456), -1);   /* does not fit */
    ck_assert_str_eq(buf, "{\"a\":1}");
    ck_assert_int_eq(ss_proto_add_topic_seq(buf, 6, sizeof buf, 1), -1);   /* not an object */

    ss_result_t r;
    result_alloc(&r, 1, 8);
    fx_detections(&r);
    char body[16384];
    int n = ss_proto_encode_detections(&r, body, sizeof body - 48);
    ck_assert_int_gt(n, 0);
    ss_result_t back;
    result_alloc(&back, 1, 8);
    ss_proto_limits_t lim;
    ss_proto_limits_default(&lim);
    ss_proto_error_t err;
    char topic[SS_PROTO_TOPIC_MAX];
    int tl = ss_proto_topic(SS_MSG_DETECTIONS, "cam1", topic, sizeof topic);
    ss_proto_part_t parts[2] = { { topic, (size_t)tl }, { body, (size_t)n } };
    ck_assert(ss_proto_decode_detections(parts, 2, &lim, &back, &err) == SS_OK);
    ck_assert_int_eq(back.has_topic_seq, 0);
    n = ss_proto_add_topic_seq(body, n, sizeof body, 41);
    parts[1].len = (size_t)n;
    ck_assert_msg(ss_proto_decode_detections(parts, 2, &lim, &back, &err) == SS_OK, "%s", err.text);
    ck_assert_int_eq(back.has_topic_seq, 1);
    ck_assert_uint_eq(back.topic_seq, 41);
    result_release(&r);
    result_release(&back);
}
END_TEST

/* The JSON-lines form: each line is the frame context plus one detection,
 * and its detection members equal that detection's in the body. */
START_TEST(test_detection_lines)
{
    ss_result_t r;
    result_alloc(&r, 1, 8);
    fx_detections(&r);
    char body[16384], line[4096];
    int n = ss_proto_encode_detections(&r, body, sizeof body);
    ck_assert_int_gt(n, 0);
    cJSON *b = cJSON_Parse(body);
    const cJSON *list = cJSON_GetObjectItem(b, "detections");
    for (int i = 0; i < r.dets.count; i++) {
        ck_assert_int_gt(ss_proto_encode_detection_line(&r, i, line, sizeof line), 0);
        ck_assert_ptr_null(strchr(line, '\n'));
        cJSON *l = cJSON_Parse(line);
        ck_assert_ptr_nonnull(l);
        ck_assert_str_eq(cJSON_GetObjectItem(l, "feed")->valuestring, "cam1");
        ck_assert_int_eq(cJSON_GetObjectItem(l, "seq")->valueint, 57);
        ck_assert_str_eq(cJSON_GetObjectItem(l, "input")->valuestring, "img_0057.fits");
        ck_assert_str_eq(cJSON_GetObjectItem(l, "time")->valuestring, "2026-11-22T06:00:43.200Z");
        ck_assert_str_eq(cJSON_GetObjectItem(l, "status")->valuestring, "ok");
        const cJSON *d = cJSON_GetArrayItem(list, i), *m;
        cJSON_ArrayForEach(m, d)
        {
            const cJSON *x = cJSON_GetObjectItemCaseSensitive(l, m->string);
            ck_assert_msg(x && cJSON_Compare(x, m, 1), "line %d: member %s differs", i, m->string);
        }
        /* 10 frame members (feed series seq input time mjd time_mid mjd_mid status
         * sigma) */
        ck_assert_int_eq(cJSON_GetArraySize(l), cJSON_GetArraySize(d) + 10);
        /* a magnitude only where a zero point gave one (detection 0) */
        const cJSON *mag = cJSON_GetObjectItem(l, "mag");
        ck_assert(i == 0 ? mag && mag->valuedouble == 17.125 : mag == NULL);
        ck_assert(i == 0 ? cJSON_GetObjectItem(l, "mag_err") != NULL
                         : cJSON_GetObjectItem(l, "mag_err") == NULL);
        cJSON_Delete(l);
    }
    ck_assert_int_eq(ss_proto_encode_detection_line(&r, r.dets.count, line, sizeof line), -1);
    cJSON_Delete(b);
    result_release(&r);
}
END_TEST

START_TEST(test_golden_status)
{
    static ss_proto_status_t fx, st;
    fx_status(&fx);
    char *buf = big();
    int n = ss_proto_encode_status(&fx, buf, BUF_BIG);
    ck_assert_int_gt(n, 0);
    golden_bytes("status", "0-topic.txt", "status", 6);
    golden_bytes("status", "1-body.json", buf, (size_t)n);
    cJSON *want = load_expected("status");
    cJSON *v = view_status(&fx);
    assert_json_equal(v, want, "fixture status vs expected.json");
    cJSON_Delete(v);
    golden_t g;
    golden_load("status", &g);
    ss_proto_limits_t lim = limits();
    ss_proto_error_t err;
    ss_err_t e = ss_proto_decode_status(g.part, g.n, &lim, &st, &err);
    ck_assert_msg(e == SS_OK, "decode: %s", err.text);
    v = view_status(&st);
    assert_json_equal(v, want, "decoded status vs expected.json");
    cJSON_Delete(v);
    cJSON_Delete(want);
    golden_free(&g);
    free(buf);
}
END_TEST

START_TEST(test_golden_control)
{
    char buf[8192];
    ss_ctl_request_t rq = { .cmd = SS_CTL_STATS };
    ss_strlcpy(rq.feed, "cam1", sizeof rq.feed);
    int n = ss_proto_encode_request(&rq, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("control_request", "0-request.json", buf, (size_t)n);

    n = ss_proto_encode_response("reset", "{\"feeds\": [\"cam1\"]}", buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("control_response_ok", "0-response.json", buf, (size_t)n);
    n = ss_proto_encode_error_response(
        "reload",
        "config: /etc/skysieve/skysieved.json: feeds[0].pipeline.history: 0 is out of range (2 to 256)",
        buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("control_response_error", "0-response.json", buf, (size_t)n);
    static ss_proto_status_t st;
    fx_status(&st);
    char body[4096];
    ck_assert_int_gt(ss_proto_encode_status_body(&st, 0, body, sizeof body), 0);
    n = ss_proto_encode_response("status", body, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    golden_bytes("control_response_status", "0-response.json", buf, (size_t)n);

    golden_t g;
    ss_proto_error_t err;
    golden_load("control_request", &g);
    ss_ctl_request_t got;
    ck_assert_msg(ss_proto_decode_request(g.part[0].data, g.part[0].len, &got, &err) == SS_OK, "%s",
                  err.text);
    cJSON *want = load_expected("control_request");
    cJSON *v = view_request(&got);
    assert_json_equal(v, want, "control_request");
    cJSON_Delete(v);
    cJSON_Delete(want);
    golden_free(&g);

    const char *resp[] = { "control_response_ok", "control_response_error",
                           "control_response_status" };
    for (int k = 0; k < 3; k++) {
        golden_load(resp[k], &g);
        ss_ctl_response_t r;
        ck_assert_msg(ss_proto_decode_response(g.part[0].data, g.part[0].len, &r, &err) == SS_OK,
                      "%s: %s", resp[k], err.text);
        want = load_expected(resp[k]);
        v = view_response(&r);
        assert_json_equal(v, want, resp[k]);
        cJSON_Delete(v);
        cJSON_Delete(want);
        ss_ctl_response_free(&r);
        golden_free(&g);
    }
}
END_TEST

/* ---- malformed messages (tests/golden/malformed.json) -------------------- */

/* Decode an output message by its topic part, as a subscriber does (the
 * cases of malformed.json with "decoder": "output"). */
static ss_err_t decode_output(const ss_proto_part_t *parts, int n, const ss_proto_limits_t *lim,
                              ss_result_t *r, ss_proto_error_t *err)
{
    static ss_proto_status_t st;
    ss_msg_type_t t = ss_proto_topic_parse(parts[0].data, parts[0].len, NULL);
    switch (t) {
    case SS_MSG_RESIDUAL: return ss_proto_decode_residual(parts, n, lim, r, NULL, NULL, err);
    case SS_MSG_DETECTIONS: return ss_proto_decode_detections(parts, n, lim, r, err);
    case SS_MSG_TRACKS: return ss_proto_decode_tracks(parts, n, lim, r, err);
    case SS_MSG_STATUS: return ss_proto_decode_status(parts, n, lim, &st, err);
    default: ck_abort_msg("an output case needs a skysieve topic as its first part");
    }
    return SS_ERR_INVALID;
}

START_TEST(test_malformed)
{
    char path[1024];
    size_t len = 0;
    snprintf(path, sizeof path, "%s/tests/golden/malformed.json", source_dir());
    char *txt = read_file(path, &len);
    ck_assert_msg(txt != NULL, "missing %s", path);
    cJSON *cases = cJSON_ParseWithLength(txt, len);
    ck_assert_msg(cJSON_IsArray(cases), "%s is not a JSON array", path);
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 1 << 16, 1 << 16, NULL);
    static ss_proto_input_t in;
    ss_result_t res;
    result_alloc(&res, 64, 8);
    int n_cases = 0, n_outputs = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases)
    {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        ss_proto_limits_t lim = limits();
        const cJSON *l = cJSON_GetObjectItem(c, "limits");
        if (l) {
            const cJSON *x;
            if ((x = cJSON_GetObjectItem(l, "max_width")))
                lim.max_width = x->valueint;
            if ((x = cJSON_GetObjectItem(l, "max_height")))
                lim.max_height = x->valueint;
            if ((x = cJSON_GetObjectItem(l, "max_header_bytes")))
                lim.max_header_bytes = (size_t)x->valuedouble;
            if ((x = cJSON_GetObjectItem(l, "max_meta_bytes")))
                lim.max_meta_bytes = (size_t)x->valuedouble;
        }
        ss_proto_part_t parts[8];
        uint8_t *owned[8] = { 0 };
        int np = 0;
        const cJSON *p;
        cJSON_ArrayForEach(p, cJSON_GetObjectItem(c, "parts"))
        {
            ck_assert_int_lt(np, 8);
            if (cJSON_IsString(p)) {
                parts[np].data = p->valuestring;
                parts[np].len = strlen(p->valuestring);
            } else if (cJSON_GetObjectItem(p, "bytes")) {
                const cJSON *b = cJSON_GetObjectItem(p, "bytes");
                size_t nb = (size_t)cJSON_GetArraySize(b);
                owned[np] = malloc(nb + 1);
                size_t i = 0;
                const cJSON *x;
                cJSON_ArrayForEach(x, b) owned[np][i++] = (uint8_t)x->valueint;
                parts[np].data = owned[np];
                parts[np].len = nb;
            } else {
                size_t nb = (size_t)cJSON_GetObjectItem(p, "size")->valuedouble;
                const cJSON *fill = cJSON_GetObjectItem(p, "fill");
                owned[np] = malloc(nb + 1);
                memset(owned[np], fill ? fill->valueint : 0, nb);
                parts[np].data = owned[np];
                parts[np].len = nb;
            }
            np++;
        }
        ss_frame_t *f = ss_frame_pool_get(pool);
        ss_proto_error_t err;
        const cJSON *dec = cJSON_GetObjectItem(c, "decoder");
        const int output = dec && strcmp(dec->valuestring, "output") == 0;
        ss_err_t e = output ? decode_output(parts, np, &lim, &res, &err)
                            : ss_proto_decode_input(parts, np, &lim, &in, f, &err);
        n_outputs += output;
        const char *want_reason = cJSON_GetObjectItem(c, "reason")->valuestring;
        const char *want_text = cJSON_GetObjectItem(c, "error")->valuestring;
        ck_assert_msg(e != SS_OK, "case %s: accepted", name);
        ck_assert_msg(strcmp(ss_proto_reason_name(err.reason), want_reason) == 0,
                      "case %s: reason %s, expected %s (%s)", name,
                      ss_proto_reason_name(err.reason), want_reason, err.text);
        ck_assert_msg(strcmp(err.text, want_text) == 0, "case %s:\n  got:      %s\n  expected: %s",
                      name, err.text, want_text);
        ss_frame_pool_put(f);
        for (int i = 0; i < np; i++)
            free(owned[i]);
        n_cases++;
    }
    ck_assert_int_ge(n_cases, 30);
    ck_assert_int_ge(n_outputs, 10);
    result_release(&res);
    ss_frame_pool_destroy(&pool);
    cJSON_Delete(cases);
    free(txt);
}
END_TEST

/* Output messages that a subscriber must refuse. */
START_TEST(test_malformed_outputs)
{
    ss_result_t fx, r;
    result_alloc(&fx, 64, 8);
    result_alloc(&r, 64, 8);
    fx_residual(&fx);
    char hdr[8192];
    int n = ss_proto_encode_residual(&fx, hdr, sizeof hdr);
    ck_assert_int_gt(n, 0);
    ss_proto_limits_t lim = limits();
    ss_proto_error_t err;
    ss_proto_part_t p[5] = {
        { "residual.cam1", 13 }, { hdr, (size_t)n }, { FX_RES_PIX, sizeof FX_RES_PIX },
        { "\1\1\0\1\1\1", 6 }, { "x", 1 },
    };
    ck_assert_int_eq(ss_proto_decode_residual(p, 4, &lim, &r, NULL, NULL, &err), SS_OK);
    /* too many parts, missing pixel part */
    ck_assert_int_ne(ss_proto_decode_residual(p, 5, &lim, &r, NULL, NULL, &err), SS_OK);
    ck_assert_str_eq(err.text, "too many parts: 5 (" RESIDUAL_PARTS_TEXT_T ")");
    ck_assert_int_ne(ss_proto_decode_residual(p, 2, &lim, &r, NULL, NULL, &err), SS_OK);
    ck_assert_str_eq(err.text, "missing part: 2 of 3 (" RESIDUAL_PARTS_TEXT_T ")");
    /* topic of another feed */
    ss_proto_part_t q[4] = { { "residual.cam2", 13 }, p[1], p[2], p[3] };
    ck_assert_int_ne(ss_proto_decode_residual(q, 4, &lim, &r, NULL, NULL, &err), SS_OK);
    ck_assert_str_eq(err.text, "topic \"residual.cam2\" does not match the body (expected \"residual.cam1\")");
    /* pixel part one float short */
    q[0] = p[0];
    q[2].len -= 4;
    ck_assert_int_ne(ss_proto_decode_residual(q, 4, &lim, &r, NULL, NULL, &err), SS_OK);
    ck_assert_str_eq(err.text, "pixel part is 20 bytes; the header says 3 x 2 f32 = 24 bytes");
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "data_size");
    /* result buffer too small */
    q[2] = p[2];
    r.residual_capacity = 5;
    ck_assert_int_ne(ss_proto_decode_residual(q, 4, &lim, &r, NULL, NULL, &err), SS_OK);
    ck_assert_str_eq(err.text, "residual of 6 pixels does not fit the buffer (5 pixels)");
    r.residual_capacity = 64;
    /* a header from a newer protocol */
    char *v2 = strdup(hdr);
    memcpy(strstr(v2, "\"protocol\":1"), "\"protocol\":2", 12);
    q[1].data = v2;
    ck_assert_int_eq(ss_proto_decode_residual(q, 4, &lim, &r, NULL, NULL, &err), SS_ERR_UNSUPPORTED);
    ck_assert_str_eq(err.text, "unsupported protocol version 2 (this receiver speaks version 1)");
    free(v2);

    /* detections: count disagreeing with the list, a detection missing x */
    fx_detections(&fx);
    char body[16384];
    n = ss_proto_encode_detections(&fx, body, sizeof body);
    ck_assert_int_gt(n, 0);
    char *bad = strdup(body);
    memcpy(strstr(bad, "\"count\":4"), "\"count\":5", 9);
    ss_proto_part_t d[2] = { { "detections.cam1", 15 }, { bad, strlen(bad) } };
    ck_assert_int_ne(ss_proto_decode_detections(d, 2, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "field \"count\" is 5 but \"detections\" has 4 entries");
    free(bad);
    bad = strdup(body);
    char *x = strstr(bad, "\"x\":100.5");
    x[1] = 'X'; /* the second detection's "x" becomes "X" */
    d[1].data = bad;
    ck_assert_int_ne(ss_proto_decode_detections(d, 2, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "missing field \"detections[1].x\"");
    free(bad);
    /* "track" is optional (older senders): 0 */
    bad = strdup(body);
    x = strstr(bad, ",\"track\":7");
    ck_assert_ptr_nonnull(x);
    memmove(x, x + 10, strlen(x + 10) + 1);
    d[1].data = bad;
    d[1].len = strlen(bad);
    ck_assert_msg(ss_proto_decode_detections(d, 2, &lim, &r, &err) == SS_OK, "%s", err.text);
    ck_assert_uint_eq(r.dets.items[0].track, 0);
    free(bad);
    /* a smaller list capacity: the overflow is counted as truncated */
    d[1].data = body;
    d[1].len = strlen(body);
    r.dets.capacity = 3;
    ck_assert_int_eq(ss_proto_decode_detections(d, 2, &lim, &r, &err), SS_OK);
    ck_assert_int_eq(r.dets.count, 3);
    ck_assert_int_eq(r.dets.truncated, 2 + 1);

    /* tracks: parts, and a list longer than the result's room */
    fx_tracks(&fx);
    fx.tracks.truncated = 4;
    char tbody[16384];
    n = ss_proto_encode_tracks(&fx, tbody, sizeof tbody);
    ck_assert_int_gt(n, 0);
    ss_proto_part_t t[3] = { { "tracks.cam1", 11 }, { tbody, (size_t)n }, { "x", 1 } };
    ck_assert_int_ne(ss_proto_decode_tracks(t, 3, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "too many parts: 3 (a tracks message has a topic and a body)");
    ck_assert_int_ne(ss_proto_decode_tracks(t, 1, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "missing part: 1 of 2 (a tracks message has a topic and a body)");
    /* a detections body on the tracks topic, and the other way round */
    ck_assert_int_ne(ss_proto_decode_tracks(d, 2, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "unknown message type \"detections\" (expected tracks)");
    ck_assert_int_ne(ss_proto_decode_detections(t, 2, &lim, &r, &err), SS_OK);
    ck_assert_str_eq(err.text, "unknown message type \"tracks\" (expected detections)");
    r.dets.count = 3;
    r.tracks.capacity = 1;
    ck_assert_int_eq(ss_proto_decode_tracks(t, 2, &lim, &r, &err), SS_OK);
    ck_assert_int_eq(r.tracks.count, 1);
    ck_assert_int_eq(r.tracks.truncated, 4 + 1);
    ck_assert_uint_eq(r.tracks.items[0].id, 7);
    ck_assert_int_eq(r.dets.count, 3);              /* not touched */
    result_release(&fx);
    result_release(&r);

    /* control requests */
    ss_ctl_request_t rq;
    ck_assert_int_ne(ss_proto_decode_request("{\"cmd\":\"shutdown\"}", 18, &rq, &err), SS_OK);
    ck_assert_str_eq(err.text,
                     "unknown command \"shutdown\" (expected status, stats, reset, reload or config)");
    ck_assert_int_ne(ss_proto_decode_request("{\"feed\":\"cam1\"}", 15, &rq, &err), SS_OK);
    ck_assert_str_eq(err.text, "missing field \"cmd\"");
    ck_assert_int_ne(ss_proto_decode_request("status", 6, &rq, &err), SS_OK);
    ck_assert_str_eq(err.text, "request is not valid JSON (error at byte 0)");
    ck_assert_int_ne(ss_proto_decode_request("{\"cmd\":\"reset\",\"feed\":7}", 24, &rq, &err), SS_OK);
    ck_assert_str_eq(err.text, "field \"feed\" has the wrong type: expected a string, got a number");
    ck_assert_int_ne(ss_proto_decode_request("{\"cmd\":\"stats\",\"protocol\":3}", 28, &rq, &err),
                     SS_OK);
    ck_assert_str_eq(err.text, "unsupported protocol version 3 (this receiver speaks version 1)");
    /* responses: the body may not override the envelope */
    char buf[256];
    ck_assert_int_eq(ss_proto_encode_response("stats", "{\"ok\":false}", buf, sizeof buf), -1);
    ck_assert_int_eq(ss_proto_encode_response("stats", "[1]", buf, sizeof buf), -1);
    ck_assert_int_gt(ss_proto_encode_response(NULL, NULL, buf, sizeof buf), 0);
    ck_assert_str_eq(buf, "{\"ok\":true}");
}
END_TEST

/* ---- round trips ---------------------------------------------------------- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    /* xorshift64*: reproducible without libc's rand */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 2685821657736338717ull;
}
static double urand(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }
/* doubles of every magnitude, including awkward ones */
static double anyd(void)
{
    switch (rnd() % 5) {
    case 0: return (urand() - 0.5) * 1e3;
    case 1: return ldexp(urand() - 0.5, (int)(rnd() % 200) - 100);
    case 2: return (double)(int64_t)(rnd() % 100000) - 50000;
    case 3: return 0.1 * (double)(rnd() % 1000);
    default: return (urand() - 0.5) * 1e-300;
    }
}

static void assert_det_equal(const ss_detection_t *a, const ss_detection_t *b, int i)
{
#define EQD(f) ck_assert_msg(a->f == b->f || (isnan(a->f) && isnan(b->f)), "det %d: " #f " %.17g != %.17g", i, a->f, b->f)
#define EQI(f) ck_assert_msg(a->f == b->f, "det %d: " #f " %d != %d", i, (int)a->f, (int)b->f)
    EQD(x); EQD(y); EQD(flux); EQD(flux_err); EQD(peak_snr); EQI(peak_x); EQI(peak_y); EQI(area);
    EQI(bbox_x0); EQI(bbox_y0); EQI(bbox_x1); EQI(bbox_y1); EQD(a); EQD(b); EQD(theta); EQI(kind);
    EQI(sign); EQD(x0); EQD(y0); EQD(x1); EQD(y1); EQD(peak_fraction); EQI(flags); EQI(label);
    EQI(has_radec);
    if (a->has_radec) {
        EQD(ra);
        EQD(dec);
    }
    EQD(mag);
    EQD(mag_err);
    ck_assert_msg(a->track == b->track, "det %d: track %llu != %llu", i,
                  (unsigned long long)a->track, (unsigned long long)b->track);
#undef EQD
#undef EQI
}

static void assert_track_equal(const ss_track_t *a, const ss_track_t *b, int i)
{
#define EQD(f) ck_assert_msg(a->f == b->f || (isnan(a->f) && isnan(b->f)), "track %d: " #f " %.17g != %.17g", i, a->f, b->f)
#define EQI(f) ck_assert_msg(a->f == b->f, "track %d: " #f " %lld != %lld", i, (long long)a->f, (long long)b->f)
    EQI(id); EQI(kind); EQI(state); EQI(n); EQI(missed); EQI(timed); EQD(mjd_first);
    EQD(mjd_last); EQI(seq_first); EQI(seq_last); EQD(x); EQD(y); EQD(vx); EQD(vy); EQD(vx_err);
    EQD(vy_err); EQD(rms); EQD(snr); EQI(has_rate); EQI(n_points);
    if (a->has_rate) {
        EQD(rate);
        EQD(pa);
    }
    EQD(mag);
    EQD(mag_err);
    for (int k = 0; k < a->n_points; k++) {
        EQI(points[k].seq); EQD(points[k].mjd); EQD(points[k].x); EQD(points[k].y);
    }
#undef EQD
#undef EQI
}

/* A track of random values, timed or not, with or without a rate. */
static void random_track(ss_track_t *t)
{
    memset(t, 0, sizeof *t);
    t->id = 1 + rnd() % (1ull << 52);
    t->kind = rnd() % 2 ? SS_KIND_STREAK : SS_KIND_POINT;
    t->state = (ss_track_state_t)(rnd() % 3);
    t->n = 1 + (int)(rnd() % 1000);
    t->missed = (int)(rnd() % 10);
    t->timed = (int)(rnd() % 2);
    t->seq_first = rnd() % (1ull << 53);
    t->seq_last = rnd() % (1ull << 53);
    t->mjd_first = t->timed ? 50000.0 + urand() * 20000.0 : NAN;
    t->mjd_last = t->timed ? 50000.0 + urand() * 20000.0 : NAN;
    t->x = anyd();
    t->y = anyd();
    t->vx = anyd();
    t->vy = rnd() % 9 ? anyd() : NAN;
    t->vx_err = rnd() % 5 ? fabs(anyd()) : NAN;
    t->vy_err = fabs(anyd());
    t->rms = rnd() % 5 ? fabs(anyd()) : NAN;
    t->snr = anyd();
    t->has_rate = t->timed && rnd() % 2;
    t->rate = t->has_rate ? fabs(anyd()) : NAN;
    t->pa = t->has_rate ? urand() * 360.0 : NAN;
    t->mag = rnd() % 2 ? anyd() : NAN;
    t->mag_err = isnan(t->mag) ? NAN : fabs(anyd());
    t->n_points = (int)(rnd() % (SS_TRACK_POINTS + 1));
    for (int k = 0; k < t->n_points; k++)
        t->points[k] = tpoint(rnd() % (1ull << 53), t->timed ? 50000.0 + urand() * 20000.0 : NAN,
                              anyd(), anyd());
}

static void random_meta(ss_frame_meta_t *m, int with_wcs)
{
    ss_frame_meta_clear(m);
    m->seq = rnd() % (1ull << 53);
    snprintf(m->feed, sizeof m->feed, "feed_%u.x-%u", (unsigned)(rnd() % 1000), (unsigned)(rnd() % 7));
    if (rnd() % 2)
        snprintf(m->series, sizeof m->series, "s %u \"quoted\" \\ back", (unsigned)(rnd() % 100));
    m->mjd_obs = 50000.0 + urand() * 20000.0;
    m->exposure = rnd() % 3 ? urand() * 100.0 : 0.0;
    if (with_wcs) {
        int nk = (int)(rnd() % (SS_WCS_MAX + 1));
        for (int k = 0; k < nk; k++) {
            char key[9];
            snprintf(key, sizeof key, "K%d", k);
            if (rnd() % 3 == 0) {
                char val[40];
                snprintf(val, sizeof val, "v'%d' RA---TAN-SIP", (int)(rnd() % 1000));
                add_wcs_s(m, key, val);
            } else {
                add_wcs_d(m, key, anyd());
            }
        }
    }
    if (rnd() % 2)
        snprintf(m->meta_json, sizeof m->meta_json,
                 "{\"a\":%d,\"b\":[1,2,{\"c\":\"d\\\"e\"}],\"u\":\"\\u00e9t\\u00e9\"}",
                 (int)(rnd() % 100));
}

static void assert_meta_equal(const ss_frame_meta_t *a, const ss_frame_meta_t *b, int wcs)
{
    ck_assert_uint_eq(a->seq, b->seq);
    ck_assert_str_eq(a->feed, b->feed);
    ck_assert_str_eq(a->series, b->series);
    ck_assert_msg(a->mjd_obs == b->mjd_obs, "mjd %.17g != %.17g", a->mjd_obs, b->mjd_obs);
    ck_assert_msg(a->exposure == b->exposure, "exposure %.17g != %.17g", a->exposure, b->exposure);
    if (wcs) {
        ck_assert_int_eq(a->n_wcs, b->n_wcs);
        for (int k = 0; k < a->n_wcs; k++) {
            ck_assert_str_eq(a->wcs[k].key, b->wcs[k].key);
            ck_assert_int_eq(a->wcs[k].is_string, b->wcs[k].is_string);
            if (a->wcs[k].is_string)
                ck_assert_str_eq(a->wcs[k].sval, b->wcs[k].sval);
            else
                ck_assert_msg(a->wcs[k].dval == b->wcs[k].dval, "wcs %s: %.17g != %.17g",
                              a->wcs[k].key, a->wcs[k].dval, b->wcs[k].dval);
        }
    }
    /* meta comes back as cJSON's compact printing of the same object */
    cJSON *ma = cJSON_Parse(a->meta_json[0] ? a->meta_json : "{}");
    cJSON *mb = cJSON_Parse(b->meta_json[0] ? b->meta_json : "{}");
    ck_assert(ma && mb);
    ck_assert(cJSON_Compare(ma, mb, 1));
    cJSON_Delete(ma);
    cJSON_Delete(mb);
}

START_TEST(test_roundtrip_frames)
{
    ss_frame_pool_t *pool = ss_frame_pool_new(2, 64 * 64 * 4, 64 * 64 * 4, NULL);
    ss_frame_t *a = ss_frame_pool_get(pool), *b = ss_frame_pool_get(pool);
    ss_proto_limits_t lim = limits();
    static ss_proto_input_t in;
    char *hdr = big();
    uint8_t mask[64 * 64];
    for (int it = 0; it < 300; it++) {
        random_meta(&a->meta, 1);
        a->width = 1 + (int)(rnd() % 64);
        a->height = 1 + (int)(rnd() % 64);
        a->dtype = (ss_dtype_t)(rnd() % SS_DT__COUNT);
        size_t bytes = ss_frame_bytes(a), npix = (size_t)a->width * (size_t)a->height;
        for (size_t i = 0; i < bytes; i++)
            ((uint8_t *)a->pixels)[i] = (uint8_t)rnd();
        int with_mask = (int)(rnd() % 2);
        for (size_t i = 0; i < npix; i++)
            mask[i] = (uint8_t)(rnd() % 2);
        int n = ss_proto_encode_frame_header(a, hdr, BUF_BIG);
        ck_assert_int_gt(n, 0);
        ss_proto_part_t p[3] = { { hdr, (size_t)n }, { a->pixels, bytes }, { mask, npix } };
        ss_proto_error_t err;
        ss_err_t e = ss_proto_decode_input(p, with_mask ? 3 : 2, &lim, &in, b, &err);
        ck_assert_msg(e == SS_OK, "iteration %d: %s\n%s", it, err.text, hdr);
        ck_assert_int_eq(in.type, SS_MSG_FRAME);
        ck_assert_int_eq(b->width, a->width);
        ck_assert_int_eq(b->height, a->height);
        ck_assert_int_eq(b->dtype, a->dtype);
        ck_assert(memcmp(a->pixels, b->pixels, bytes) == 0);
        if (with_mask)
            ck_assert(b->valid && memcmp(b->valid, mask, npix) == 0);
        else
            ck_assert_ptr_null(b->valid);
        assert_meta_equal(&a->meta, &b->meta, 1);

        /* series messages */
        int64_t frames = rnd() % 2 ? (int64_t)(rnd() % 100000) : -1;
        double mjd = rnd() % 2 ? a->meta.mjd_obs : NAN;
        ss_msg_type_t t = rnd() % 2 ? SS_MSG_SERIES_START : SS_MSG_SERIES_END;
        const char *series = a->meta.series[0] ? a->meta.series : "s";
        n = ss_proto_encode_series(t, series, a->meta.feed, mjd, frames, a->meta.meta_json, hdr,
                                   BUF_BIG);
        ck_assert_int_gt(n, 0);
        p[0].len = (size_t)n;
        e = ss_proto_decode_input(p, 1, &lim, &in, NULL, &err);
        ck_assert_msg(e == SS_OK, "series: %s", err.text);
        ck_assert_int_eq(in.type, t);
        ck_assert_str_eq(in.meta.series, series);
        ck_assert_str_eq(in.meta.feed, a->meta.feed);
        ck_assert_int_eq(in.frames, frames);
        ck_assert(in.meta.mjd_obs == mjd || (isnan(mjd) && isnan(in.meta.mjd_obs)));
    }
    free(hdr);
    ss_frame_pool_put(a);
    ss_frame_pool_put(b);
    ss_frame_pool_destroy(&pool);
}
END_TEST

START_TEST(test_roundtrip_results)
{
    enum { MAXD = 40 };
    ss_result_t a, b;
    result_alloc(&a, 32 * 32, MAXD);
    result_alloc(&b, 32 * 32, MAXD);
    ss_proto_limits_t lim = limits();
    char *buf = big();
    uint8_t mask[32 * 32], got_mask[32 * 32];
    for (int it = 0; it < 200; it++) {
        random_meta(&a.meta, 1);
        a.width = 1 + (int)(rnd() % 32);
        a.height = 1 + (int)(rnd() % 32);
        a.status = (ss_frame_status_t)(rnd() % SS_STATUS__COUNT);
        snprintf(a.reason, sizeof a.reason, "why \"%d\"\n\ttab", (int)(rnd() % 9));
        memset(&a.shift, 0, sizeof a.shift);
        a.shift.ok = (int)(rnd() % 4 != 0);
        if (a.shift.ok) {
            a.shift.sx = anyd();
            a.shift.sy = anyd();
            a.shift.err_x = rnd() % 5 ? fabs(anyd()) : NAN;
            a.shift.err_y = fabs(anyd());
            a.shift.cov_xy = anyd();
        }
        a.sigma = rnd() % 5 ? (float)fabs(anyd()) : NAN;
        a.history_len = (int)(rnd() % 65);
        a.n_weights = a.history_len;
        for (int k = 0; k < a.n_weights; k++)
            a.weights[k] = anyd();
        a.rereferenced = (int)(rnd() % 2);
        a.history_reset = (int)(rnd() % 2);
        a.origin_x = rnd() % 3 ? 0 : (int)(rnd() % 5000);
        a.origin_y = rnd() % 3 ? 0 : (int)(rnd() % 5000);
        size_t npix = (size_t)a.width * (size_t)a.height;
        for (size_t i = 0; i < npix; i++)
            a.residual[i] = rnd() % 7 ? (float)anyd() : NAN;
        a.has_residual = 1;
        a.dets.count = (int)(rnd() % (MAXD + 1));
        a.dets.truncated = (int)(rnd() % 3);
        for (int i = 0; i < a.dets.count; i++) {
            ss_kind_t kind = (ss_kind_t)(rnd() % 3);
            double x = urand() * 1000, y = urand() * 1000;
            a.dets.items[i] = det(x, y, anyd(), fabs(anyd()), anyd(), (int)(rnd() % 1000),
                                  (int)(rnd() % 1000), (int)(rnd() % 5000), 1, 2, 3, 4, fabs(anyd()),
                                  fabs(anyd()), (urand() - 0.5) * M_PI, kind, rnd() % 2 ? 1 : -1,
                                  rnd() % 4 ? urand() : NAN, (int)(rnd() % 4),
                                  (int)(rnd() % 2000) - 1000);
            if (kind == SS_KIND_STREAK) {
                a.dets.items[i].x0 = anyd();
                a.dets.items[i].y0 = anyd();
                a.dets.items[i].x1 = anyd();
                a.dets.items[i].y1 = anyd();
            }
            if (rnd() % 2) {
                a.dets.items[i].has_radec = 1;
                a.dets.items[i].ra = urand() * 360;
                a.dets.items[i].dec = (urand() - 0.5) * 180;
            }
            if (rnd() % 2)
                a.dets.items[i].track = 1 + rnd() % (1ull << 53);
            if (rnd() % 2) {
                a.dets.items[i].mag = anyd();
                a.dets.items[i].mag_err = fabs(anyd());
            }
        }
        a.tracks.count = (int)(rnd() % (MAXD + 1));
        a.tracks.truncated = (int)(rnd() % 3);
        for (int i = 0; i < a.tracks.count; i++)
            random_track(&a.tracks.items[i]);
        char topic[SS_PROTO_TOPIC_MAX];
        ss_proto_error_t err;

        /* residual */
        int tn = ss_proto_topic(SS_MSG_RESIDUAL, a.meta.feed, topic, sizeof topic);
        int n = ss_proto_encode_residual(&a, buf, BUF_BIG);
        ck_assert_int_gt(n, 0);
        ss_proto_residual_mask(a.residual, npix, mask);
        ss_proto_part_t p[4] = { { topic, (size_t)tn }, { buf, (size_t)n },
                                 { a.residual, npix * sizeof(float) }, { mask, npix } };
        int has_mask = 0;
        ss_err_t e = ss_proto_decode_residual(p, 4, &lim, &b, got_mask, &has_mask, &err);
        ck_assert_msg(e == SS_OK, "residual %d: %s\n%s", it, err.text, buf);
        ck_assert_int_eq(b.origin_x, a.origin_x);
        ck_assert_int_eq(b.origin_y, a.origin_y);
        /* the residual's WCS describes its own grid: CRPIX moved by origin */
        for (int k = 0; k < b.meta.n_wcs; k++) {
            if (strcmp(b.meta.wcs[k].key, "CRPIX1") == 0 && !b.meta.wcs[k].is_string)
                b.meta.wcs[k].dval += a.origin_x;
            if (strcmp(b.meta.wcs[k].key, "CRPIX2") == 0 && !b.meta.wcs[k].is_string)
                b.meta.wcs[k].dval += a.origin_y;
        }
        assert_meta_equal(&a.meta, &b.meta, 1);
        ck_assert_int_eq(b.width, a.width);
        ck_assert_int_eq(b.height, a.height);
        ck_assert_int_eq(b.status, a.status);
        ck_assert_str_eq(b.reason, a.reason);
        ck_assert_int_eq(b.shift.ok, a.shift.ok);
        if (a.shift.ok) {
            ck_assert(b.shift.sx == a.shift.sx && b.shift.sy == a.shift.sy);
            ck_assert(b.shift.err_x == a.shift.err_x || (isnan(a.shift.err_x) && isnan(b.shift.err_x)));
            ck_assert(b.shift.err_y == a.shift.err_y && b.shift.cov_xy == a.shift.cov_xy);
        }
        ck_assert(b.sigma == a.sigma || (isnan(a.sigma) && isnan(b.sigma)));
        ck_assert_int_eq(b.history_len, a.history_len);
        ck_assert_int_eq(b.n_weights, a.n_weights);
        for (int k = 0; k < a.n_weights; k++)
            ck_assert(b.weights[k] == a.weights[k]);
        ck_assert_int_eq(b.rereferenced, a.rereferenced);
        ck_assert_int_eq(b.history_reset, a.history_reset);
        ck_assert(memcmp(b.residual, a.residual, npix * sizeof(float)) == 0);
        ck_assert(memcmp(got_mask, mask, npix) == 0);

        /* detections */
        tn = ss_proto_topic(SS_MSG_DETECTIONS, a.meta.feed, topic, sizeof topic);
        size_t cap = ss_proto_detections_bound(&a);
        n = ss_proto_encode_detections(&a, buf, cap);
        ck_assert_msg(n > 0, "detections bound %zu too small", cap);
        p[0].len = (size_t)tn;
        p[1].len = (size_t)n;
        e = ss_proto_decode_detections(p, 2, &lim, &b, &err);
        ck_assert_msg(e == SS_OK, "detections %d: %s", it, err.text);
        assert_meta_equal(&a.meta, &b.meta, 0);
        ck_assert_int_eq(b.status, a.status);
        ck_assert_int_eq(b.dets.count, a.dets.count);
        ck_assert_int_eq(b.dets.truncated, a.dets.truncated);
        for (int i = 0; i < a.dets.count; i++)
            assert_det_equal(&a.dets.items[i], &b.dets.items[i], i);

        /* tracks */
        tn = ss_proto_topic(SS_MSG_TRACKS, a.meta.feed, topic, sizeof topic);
        cap = ss_proto_tracks_bound(&a);
        n = ss_proto_encode_tracks(&a, buf, cap);
        ck_assert_msg(n > 0, "tracks bound %zu too small", cap);
        p[0].len = (size_t)tn;
        p[1].len = (size_t)n;
        b.tracks.count = -1;
        e = ss_proto_decode_tracks(p, 2, &lim, &b, &err);
        ck_assert_msg(e == SS_OK, "tracks %d: %s\n%s", it, err.text, buf);
        assert_meta_equal(&a.meta, &b.meta, 0);
        ck_assert_int_eq(b.status, a.status);
        ck_assert_int_eq(b.tracks.count, a.tracks.count);
        ck_assert_int_eq(b.tracks.truncated, a.tracks.truncated);
        for (int i = 0; i < a.tracks.count; i++)
            assert_track_equal(&a.tracks.items[i], &b.tracks.items[i], i);
        /* the tracks decoder leaves the detections alone */
        ck_assert_int_eq(b.dets.count, a.dets.count);
    }
    free(buf);
    result_release(&a);
    result_release(&b);
}
END_TEST

START_TEST(test_roundtrip_status_control)
{
    static ss_proto_status_t a, b;
    char *buf = big();
    ss_proto_limits_t lim = limits();
    for (int it = 0; it < 50; it++) {
        ss_proto_status_clear(&a);
        snprintf(a.version, sizeof a.version, "0.%d.%d", (int)(rnd() % 9), (int)(rnd() % 9));
        a.mjd = 60000 + urand() * 1000;
        a.uptime_s = urand() * 1e6;
        a.n_feeds = (int)(rnd() % (SS_PROTO_MAX_FEEDS + 1));
        for (int i = 0; i < a.n_feeds; i++) {
            ss_proto_feed_stats_t *f = &a.feeds[i];
            snprintf(f->name, sizeof f->name, "cam%d", i);
            ss_strlcpy(f->state, rnd() % 2 ? "running" : "broken", sizeof f->state);
            ss_strlcpy(f->backend, rnd() % 2 ? "cuda" : "cpu", sizeof f->backend);
            snprintf(f->source, sizeof f->source, "fits /data/cam%d", i);
            uint64_t *u[] = { &f->received, &f->accepted, &f->rejected, &f->dropped_queue,
                              &f->processed, &f->detections, &f->detections_truncated,
                              &f->reg_failures, &f->resets,
                              &f->published, &f->pub_dropped, &f->last_seq, &f->device_mem_used,
                              &f->device_mem_total };
            for (size_t k = 0; k < sizeof u / sizeof u[0]; k++)
                *u[k] = rnd() % (1ull << 53);
            for (int r = 1; r < SS_PR__COUNT; r++)
                f->rejected_by[r] = rnd() % 1000;
            for (int s = 0; s < SS_STATUS__COUNT; s++)
                f->status_count[s] = rnd() % 100000;
            f->queue_depth = (int)(rnd() % 64);
            f->queue_capacity = 64;
            f->fps = urand() * 100;
            f->last_mjd = rnd() % 2 ? 60000 + urand() : NAN;
            for (int s = 0; s < SS_STAGE__COUNT; s++)
                f->stage_ms[s] = rnd() % 3 ? urand() * 10 : -1;
            f->total_ms = urand() * 50;
        }
        int n = ss_proto_encode_status(&a, buf, BUF_BIG);
        ck_assert_int_gt(n, 0);
        ss_proto_part_t p[2] = { { "status", 6 }, { buf, (size_t)n } };
        ss_proto_error_t err;
        ck_assert_msg(ss_proto_decode_status(p, 2, &lim, &b, &err) == SS_OK, "%s", err.text);
        cJSON *va = view_status(&a), *vb = view_status(&b);
        assert_json_equal(vb, va, "status round trip");
        cJSON_Delete(va);
        cJSON_Delete(vb);
        /* the full body alone decodes to the same */
        n = ss_proto_encode_status_body(&a, 1, buf, BUF_BIG);
        ck_assert_msg(ss_proto_decode_status_body(buf, (size_t)n, &b, &err) == SS_OK, "%s", err.text);
        va = view_status(&a);
        vb = view_status(&b);
        assert_json_equal(vb, va, "status body round trip");
        cJSON_Delete(va);
        cJSON_Delete(vb);
    }
    /* every control command, with and without a feed */
    for (int c = 0; c < SS_CTL__COUNT; c++) {
        for (int wf = 0; wf < 2; wf++) {
            ss_ctl_request_t rq = { .cmd = (ss_ctl_cmd_t)c }, got;
            if (wf)
                ss_strlcpy(rq.feed, "cam-7", sizeof rq.feed);
            int n = ss_proto_encode_request(&rq, buf, BUF_BIG);
            ck_assert_int_gt(n, 0);
            ss_proto_error_t err;
            ck_assert_int_eq(ss_proto_decode_request(buf, (size_t)n, &got, &err), SS_OK);
            ck_assert_int_eq(got.cmd, rq.cmd);
            ck_assert_str_eq(got.feed, rq.feed);
            /* and a response for it */
            n = ss_proto_encode_response(ss_ctl_cmd_name(rq.cmd), "{\"n\": 3, \"s\": \"x\"}", buf,
                                         BUF_BIG);
            ss_ctl_response_t r;
            ck_assert_int_eq(ss_proto_decode_response(buf, (size_t)n, &r, &err), SS_OK);
            ck_assert_int_eq(r.ok, 1);
            ck_assert_str_eq(r.cmd, ss_ctl_cmd_name(rq.cmd));
            ck_assert_str_eq(r.body, "{\"n\":3,\"s\":\"x\"}");
            ss_ctl_response_free(&r);
            n = ss_proto_encode_error_response(ss_ctl_cmd_name(rq.cmd), "no such feed \"x\"", buf,
                                               BUF_BIG);
            ck_assert_int_eq(ss_proto_decode_response(buf, (size_t)n, &r, &err), SS_OK);
            ck_assert_int_eq(r.ok, 0);
            ck_assert_str_eq(r.error, "no such feed \"x\"");
            ck_assert_str_eq(r.body, "{}");
            ss_ctl_response_free(&r);
        }
    }
    free(buf);
}
END_TEST

/* Every encoder, for every buffer size below what it needs, returns -1
 * and writes nothing past the buffer (ASan watches the heap copy). */
START_TEST(test_encoder_buffer_sizes)
{
    ss_result_t r;
    result_alloc(&r, 64, 8);
    fx_detections(&r);
    char *full = big();
    int need = ss_proto_encode_detections(&r, full, BUF_BIG);
    ck_assert_int_gt(need, 0);
    for (int n = 0; n <= need; n++) {
        char *b = malloc((size_t)n + (n == 0));
        int got = ss_proto_encode_detections(&r, n ? b : NULL, (size_t)n);
        ck_assert_int_eq(got, -1);
        free(b);
    }
    char *b = malloc((size_t)need + 1);
    ck_assert_int_eq(ss_proto_encode_detections(&r, b, (size_t)need + 1), need);
    ck_assert(memcmp(b, full, (size_t)need + 1) == 0);
    free(b);

    fx_tracks(&r);
    need = ss_proto_encode_tracks(&r, full, BUF_BIG);
    ck_assert_int_gt(need, 0);
    ck_assert_uint_le((size_t)need, ss_proto_tracks_bound(&r));
    for (int n = 1; n <= need; n++) {
        b = malloc((size_t)n);
        ck_assert_int_eq(ss_proto_encode_tracks(&r, b, (size_t)n), -1);
        free(b);
    }
    /* no feed: no topic to publish on */
    r.meta.feed[0] = '\0';
    ck_assert_int_eq(ss_proto_encode_tracks(&r, full, BUF_BIG), -1);

    fx_residual(&r);
    need = ss_proto_encode_residual(&r, full, BUF_BIG);
    for (int n = 1; n <= need; n++) {
        b = malloc((size_t)n);
        ck_assert_int_eq(ss_proto_encode_residual(&r, b, (size_t)n), -1);
        free(b);
    }
    /* no residual: nothing to publish */
    r.has_residual = 0;
    ck_assert_int_eq(ss_proto_encode_residual(&r, full, BUF_BIG), -1);
    /* a frame must carry its time */
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_t *f = ss_frame_pool_get(pool);
    fx_frame_u16(f);
    need = ss_proto_encode_frame_header(f, full, BUF_BIG);
    for (int n = 1; n <= need; n++) {
        b = malloc((size_t)n);
        ck_assert_int_eq(ss_proto_encode_frame_header(f, b, (size_t)n), -1);
        free(b);
    }
    f->meta.mjd_obs = NAN;
    ck_assert_int_eq(ss_proto_encode_frame_header(f, full, BUF_BIG), -1);
    ss_frame_pool_put(f);
    ss_frame_pool_destroy(&pool);
    /* topics */
    char t[16];
    ck_assert_int_eq(ss_proto_topic(SS_MSG_DETECTIONS, "cam1", t, sizeof t), 15);
    ck_assert_int_eq(ss_proto_topic(SS_MSG_DETECTIONS, "cam12", t, sizeof t), -1);
    ck_assert_int_eq(ss_proto_topic(SS_MSG_RESIDUAL, "", t, sizeof t), -1);
    ck_assert_int_eq(ss_proto_topic(SS_MSG_FRAME, "cam1", t, sizeof t), -1);
    ck_assert_int_eq(ss_proto_topic(SS_MSG_TRACKS, "cam1", t, sizeof t), 11);
    ck_assert_str_eq(t, "tracks.cam1");
    ck_assert_int_eq(ss_proto_topic(SS_MSG_TRACKS, "", t, sizeof t), -1);
    char feed[SS_NAME_MAX];
    ck_assert_int_eq(ss_proto_topic_parse("detections.cam1", 15, feed), SS_MSG_DETECTIONS);
    ck_assert_str_eq(feed, "cam1");
    ck_assert_int_eq(ss_proto_topic_parse("tracks.cam-2", 12, feed), SS_MSG_TRACKS);
    ck_assert_str_eq(feed, "cam-2");
    ck_assert_int_eq(ss_proto_topic_parse("tracks.", 7, feed), SS_MSG_NONE);
    ck_assert_int_eq(ss_proto_topic_parse("status", 6, feed), SS_MSG_STATUS);
    ck_assert_int_eq(ss_proto_topic_parse("statusx", 7, feed), SS_MSG_NONE);
    ck_assert_int_eq(ss_proto_topic_parse("residual.", 9, feed), SS_MSG_NONE);
    ck_assert_int_eq(ss_proto_topic_parse("residual.a\0b", 12, feed), SS_MSG_NONE);
    free(full);
    result_release(&r);
}
END_TEST

/* Names the protocol shares with the pipeline must stay in step. */
START_TEST(test_names)
{
    for (int r = 0; r < SS_PR__COUNT; r++)
        ck_assert_int_eq(ss_proto_reason_parse(ss_proto_reason_name((ss_proto_reason_t)r)), r);
    ck_assert_int_eq(ss_proto_reason_parse("nonsense"), SS_PR__COUNT);
    ck_assert_str_eq(ss_status_name(SS_STATUS_REG_FAILED), "regfail");
    ck_assert_str_eq(ss_kind_name(SS_KIND_STREAK), "streak");
    ck_assert_str_eq(ss_msg_type_name(SS_MSG_SERIES_END), "series_end");
    ck_assert_str_eq(ss_msg_type_name(SS_MSG_TRACKS), "tracks");
    for (int t = 0; t < 3; t++) {
        ss_track_state_t back;
        ck_assert_int_eq(ss_track_state_parse(ss_track_state_name((ss_track_state_t)t), &back), 0);
        ck_assert_int_eq(back, t);
    }
    ck_assert_str_eq(ss_ctl_cmd_name(SS_CTL_CONFIG), "config");
    ss_proto_limits_t l = limits();
    ck_assert_uint_eq(ss_proto_max_data_bytes(&l), (size_t)16384 * 16384 * 4);
}
END_TEST

/* ---- ZeroMQ ----------------------------------------------------------------- */

static void zmq_pair(void **ctx, void **tx, void **rx, const char *ep)
{
    *ctx = zmq_ctx_new();
    *rx = zmq_socket(*ctx, ZMQ_PULL);
    *tx = zmq_socket(*ctx, ZMQ_PUSH);
    int linger = 0, timeo = 2000;
    zmq_setsockopt(*rx, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(*tx, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(*rx, ZMQ_RCVTIMEO, &timeo, sizeof timeo);
    ck_assert_int_eq(zmq_bind(*rx, ep), 0);
    ck_assert_int_eq(zmq_connect(*tx, ep), 0);
}

START_TEST(test_zmq_input)
{
    void *ctx, *tx, *rx;
    zmq_pair(&ctx, &tx, &rx, "inproc://proto-input");
    ss_proto_limits_t lim = limits();
    ck_assert_int_eq(ss_proto_set_maxmsgsize(rx, &lim), 0);
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_pool_t *src_pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_t *src = ss_frame_pool_get(src_pool);
    fx_frame_u16(src);
    char hdr[4096], ser[512];
    int n = ss_proto_encode_frame_header(src, hdr, sizeof hdr);
    int ns = ss_proto_encode_series(SS_MSG_SERIES_START, "s1", "cam1", MJD_FRAME, 3, NULL, ser,
                                    sizeof ser);
    ss_proto_part_t frame3[3] = { { hdr, (size_t)n }, { FX_U16_PIX, 24 }, { FX_U16_MASK, 12 } };
    ss_proto_part_t frame4[4] = { frame3[0], frame3[1], frame3[2], { "extra", 5 } };
    ss_proto_part_t series[2] = { { ser, (size_t)ns }, { "x", 1 } };
    ss_proto_part_t bad[2] = { { "{\"protocol\":1}", 14 }, { FX_U16_PIX, 24 } };

    /* a series message, a frame with mask, a frame that is one part too
     * long (drained), a bad header (drained), a frame while the pool is
     * empty (drained), a series message with an extra part; each receive
     * must start on the next message */
    ck_assert_int_eq(ss_proto_send_parts(tx, series, 1, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, frame3, 3, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, frame4, 4, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, bad, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, frame3, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, series, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, frame3, 2, 0), SS_OK);

    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_frame_t *f = NULL;
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_OK);
    ck_assert_int_eq(in.type, SS_MSG_SERIES_START);
    ck_assert_ptr_null(f);
    ck_assert_int_eq(in.frames, 3);

    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(f->width, 4);
    ck_assert(memcmp(f->pixels, FX_U16_PIX, 24) == 0);
    ck_assert_ptr_nonnull(f->valid);
    ck_assert(memcmp(f->valid, FX_U16_MASK, 12) == 0);
    ck_assert_str_eq(f->meta.feed, "cam1");
    ss_frame_t *held = f;

    /* pool now empty: the next frame (4 parts) is still checked in order:
     * the pool is asked only after the header validated */
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_FULL);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "no_buffer");
    ss_frame_pool_put(held);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_FORMAT);
    ck_assert_str_eq(err.text, "missing field \"type\"");
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_null(f->valid);
    ss_frame_pool_put(f);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "too many parts: 2 (a series_start message has 1)");
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_OK);
    ss_frame_pool_put(f);
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);

    /* too many parts, received straight from the socket */
    ck_assert_int_eq(ss_proto_send_parts(tx, frame4, 4, 0), SS_OK);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "too many parts: 4 (a frame has at most 3: header, pixels, mask)");
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    /* pixel part too short / too long, mask with a bad value */
    ss_proto_part_t shortp[2] = { frame3[0], { FX_U16_PIX, 23 } };
    ck_assert_int_eq(ss_proto_send_parts(tx, shortp, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "pixel part is 23 bytes; the header says 4 x 3 u16 = 24 bytes");
    uint8_t longpix[100] = { 0 };
    ss_proto_part_t longp[2] = { frame3[0], { longpix, sizeof longpix } };
    ck_assert_int_eq(ss_proto_send_parts(tx, longp, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "pixel part is 100 bytes; the header says 4 x 3 u16 = 24 bytes");
    uint8_t badmask[12] = { 1, 1, 1, 1, 1, 7, 1, 1, 1, 1, 1, 1 };
    ss_proto_part_t bm[3] = { frame3[0], frame3[1], { badmask, 12 } };
    ck_assert_int_eq(ss_proto_send_parts(tx, bm, 3, 0), SS_OK);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim, pool, &in, &f, &err), SS_ERR_FORMAT);
    ck_assert_str_eq(err.text, "mask part has value 7 at pixel (1, 1) (expected 0 or 1)");
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    /* a frame bigger than the pool's buffers */
    ss_proto_limits_t lim2 = lim;
    ss_frame_pool_t *tiny = ss_frame_pool_new(1, 16, 16, NULL);
    ck_assert_int_eq(ss_proto_send_parts(tx, frame3, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_recv_input(rx, 0, &lim2, tiny, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "frame of 24 bytes does not fit the frame buffer (16 bytes)");
    ck_assert_int_eq(ss_frame_pool_free_count(tiny), 1);
    ss_frame_pool_destroy(&tiny);

    /* nothing left: a non-blocking receive says so */
    ck_assert_int_eq(ss_proto_recv_input(rx, ZMQ_DONTWAIT, &lim, pool, &in, &f, &err),
                     SS_ERR_TIMEOUT);

    /* a subscriber-style receive keeps SS_PROTO_RX_MAX parts and counts all */
    ss_proto_part_t many[12];
    for (int i = 0; i < 12; i++) {
        many[i].data = "p";
        many[i].len = 1;
    }
    ck_assert_int_eq(ss_proto_send_parts(tx, many, 12, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, many, 2, 0), SS_OK);
    ss_proto_rx_t r;
    ck_assert_int_eq(ss_proto_recv_parts(rx, 0, &r), SS_OK);
    ck_assert_int_eq(r.n, SS_PROTO_RX_MAX);
    ck_assert_int_eq(r.total, 12);
    ss_proto_rx_close(&r);
    ck_assert_int_eq(ss_proto_recv_parts(rx, 0, &r), SS_OK);
    ck_assert_int_eq(r.total, 2);
    ss_proto_rx_close(&r);

    ss_frame_pool_put(src);
    ss_frame_pool_destroy(&src_pool);
    ss_frame_pool_destroy(&pool);
    zmq_close(tx);
    zmq_close(rx);
    zmq_ctx_term(ctx);
}
END_TEST

/* The receive path's frame getter for test_zmq_input_caps: a frame of
 * the pool labelled the way skysieved's source labels it. */
static ss_frame_t *labelled_get(void *pool)
{
    ss_frame_t *f = ss_frame_pool_get(pool);
    if (f)
        ss_strlcpy(f->meta.source, "test source", sizeof f->meta.source);
    return f;
}

static ss_frame_t *no_frame(void *user)
{
    (void)user;
    return NULL;
}

/* ss_proto_recv_message's caps on a whole frame message (skysieved's
 * limits.max_parts and total bytes), its getter and the label it keeps. */
START_TEST(test_zmq_input_caps)
{
    void *ctx, *tx, *rx;
    zmq_pair(&ctx, &tx, &rx, "inproc://proto-input-caps");
    ss_proto_limits_t lim = limits();
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_pool_t *src_pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_frame_t *src = ss_frame_pool_get(src_pool);
    fx_frame_u16(src);
    char hdr[4096];
    int n = ss_proto_encode_frame_header(src, hdr, sizeof hdr);
    ss_proto_part_t frame3[3] = { { hdr, (size_t)n }, { FX_U16_PIX, 24 }, { FX_U16_MASK, 12 } };
    const size_t whole = (size_t)n + 24 + 12;
    ss_proto_recv_cfg_t cfg = { .lim = &lim, .max_parts = 2, .frame_get = labelled_get,
                                .user = pool };
    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_frame_t *f = NULL;
    char want[SS_PROTO_ERR_MAX];

    for (int i = 0; i < 5; i++)
        ck_assert_int_eq(ss_proto_send_parts(tx, frame3, i == 3 ? 2 : 3, 0), SS_OK);
    /* one part over limits.max_parts */
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "too_many_parts");
    ck_assert_str_eq(err.text, "too many parts: 3 (limits.max_parts is 2)");
    ck_assert_ptr_null(f);
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    /* one byte over the cap on the whole message */
    cfg.max_parts = 3;
    cfg.max_bytes = whole - 1;
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "too_long");
    snprintf(want, sizeof want, "message too large: %zu bytes (maximum %zu)", whole, whole - 1);
    ck_assert_str_eq(err.text, want);
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    /* at the caps: accepted, with the getter's label kept */
    cfg.max_bytes = whole;
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(f->valid);
    ck_assert(memcmp(f->pixels, FX_U16_PIX, 24) == 0);
    ck_assert_str_eq(f->meta.source, "test source");
    ck_assert_str_eq(f->meta.feed, "cam1");
    ss_frame_pool_put(f);
    /* no mask part: no mask */
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_OK);
    ck_assert_ptr_null(f->valid);
    ss_frame_pool_put(f);
    /* a getter without a frame: the message is consumed */
    cfg.frame_get = no_frame;
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_FULL);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "no_buffer");
    ck_assert_ptr_null(f);
    /* nothing left: nothing received, reason ok */
    ck_assert_int_eq(ss_proto_recv_message(rx, ZMQ_DONTWAIT, &cfg, &in, &f, &err),
                     SS_ERR_TIMEOUT);
    ck_assert_int_eq(err.reason, SS_PR_OK);

    ss_frame_pool_put(src);
    ss_frame_pool_destroy(&src_pool);
    ss_frame_pool_destroy(&pool);
    zmq_close(tx);
    zmq_close(rx);
    zmq_ctx_term(ctx);
}
END_TEST

/* ---- ADZMQ (EPICS areaDetector NDPluginZMQ) ----------------------------------- */

/* 2026-11-22T06:00:00Z (MJD 61366.25) in seconds since the EPICS epoch */
#define ADZMQ_TS ((61366.25 - 47892.0) * 86400.0)

/* One malformed ADZMQ header: its reason and exact text. */
static void adzmq_reject(const char *hdr, const ss_proto_limits_t *lim, const char *reason,
                         const char *text)
{
    static ss_proto_input_t in;
    ss_proto_error_t err;
    ck_assert_msg(ss_proto_parse_adzmq(hdr, strlen(hdr), lim, &in, &err) != SS_OK, "%s", hdr);
    ck_assert_int_eq(in.type, SS_MSG_NONE);
    ck_assert_msg(strcmp(err.text, text) == 0, "%s: got \"%s\", want \"%s\"", hdr, err.text, text);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), reason);
}

/* Both forms of a NDPluginZMQ header map to the same frame: shape to
 * width and height by form, type to dtype, frame to seq, timeStamp (EPICS
 * epoch) to the MJD, ndattr to meta; an empty or absent encoding is a raw
 * array. */
START_TEST(test_adzmq_headers)
{
    ss_proto_limits_t lim = limits();
    char hdr[1024];
    static ss_proto_input_t in;
    ss_proto_error_t err;
    for (int current = 0; current < 2; current++) {
        for (int codec = 0; codec < 2; codec++) {
            int n = ss_test_adzmq_header(hdr, sizeof hdr, current, "uint16", 4, 3, 42, ADZMQ_TS,
                                 codec ? "" : NULL, "{\"Exposure\":2.5, \"Camera\":\"sim\"}");
            ck_assert_int_eq(ss_proto_parse_adzmq(hdr, (size_t)n, &lim, &in, &err), SS_OK);
            ck_assert_int_eq(in.format, SS_PROTO_FMT_ADZMQ);
            ck_assert_int_eq(in.type, SS_MSG_FRAME);
            ck_assert_int_eq(in.width, 4);
            ck_assert_int_eq(in.height, 3);
            ck_assert_int_eq(in.dtype, SS_DT_U16);
            ck_assert_uint_eq(in.meta.seq, 42);
            ck_assert_double_eq_tol(in.meta.mjd_obs, 61366.25, 1e-9);
            ck_assert_str_eq(in.meta.meta_json, "{\"Exposure\":2.5,\"Camera\":\"sim\"}");
            ck_assert_str_eq(in.meta.feed, "");
            ck_assert_double_eq(in.meta.exposure, 0.0);
            ck_assert_uint_eq(ss_proto_input_data_bytes(&in), 24);
            ck_assert_int_eq(ss_proto_check_parts(&in, 2, 24, 0, &err), SS_OK);
        }
    }
    /* the same header read as this protocol's is not a frame */
    ss_test_adzmq_header(hdr, sizeof hdr, 1, "uint16", 4, 3, 42, ADZMQ_TS, "", "{}");
    ck_assert_int_ne(ss_proto_parse_header(SS_PROTO_FMT_SKYSIEVE, hdr, strlen(hdr), &lim, &in, &err),
                     SS_OK);
    ck_assert_str_eq(err.text, "missing field \"protocol\"");
    ck_assert_int_eq(ss_proto_parse_header(SS_PROTO_FMT_ADZMQ, hdr, strlen(hdr), &lim, &in, &err),
                     SS_OK);
    ck_assert_str_eq(ss_proto_format_name(SS_PROTO_FMT_ADZMQ), "adzmq");
    ck_assert_str_eq(ss_proto_format_name(SS_PROTO_FMT_SKYSIEVE), "skysieve");

    /* the parts: two, the array part of the header's size */
    ck_assert_int_eq(ss_proto_check_parts(&in, 1, 0, 0, &err), SS_ERR_FORMAT);
    ck_assert_str_eq(err.text,
                     "missing array part (an ADZMQ message has a header part and an array part)");
    ck_assert_int_eq(ss_proto_check_parts(&in, 3, 24, 12, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "too many parts: 3 (an ADZMQ message has 2: header, array)");
    ck_assert_int_eq(ss_proto_check_parts(&in, 2, 23, 0, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "pixel part is 23 bytes; the header says 4 x 3 u16 = 24 bytes");
}
END_TEST

/* Malformed NDPluginZMQ headers: each rejected with its reason and text,
 * the limits held as for this protocol's frames. */
START_TEST(test_adzmq_malformed)
{
    ss_proto_limits_t lim = limits();
    lim.max_width = 100;
    lim.max_height = 50;
    lim.max_meta_bytes = 16;
    char hdr[1024];
#define T "\"type\":\"uint16\", "
#define S "\"shape\":[3,4], "
#define F "\"frame\":1, "
#define TS "\"timeStamp\":1e9"
    adzmq_reject("{" T S F TS "}", &lim, "missing_field", "missing field \"htype\"");
    adzmq_reject("{\"htype\":\"chunk-1.0\", " T S F TS "}", &lim, "bad_value",
                 "field \"htype\" is \"chunk-1.0\" (expected \"array-1.0\" or [\"array-1.0\"])");
    adzmq_reject("{\"htype\":[\"chunk-1.0\"], " T S F TS "}", &lim, "bad_value",
                 "field \"htype\" is \"chunk-1.0\" (expected \"array-1.0\" or [\"array-1.0\"])");
    adzmq_reject("{\"htype\":[\"array-1.0\",\"x\"], " T S F TS "}", &lim, "bad_value",
                 "field \"htype\" is an array other than [\"array-1.0\"]");
    adzmq_reject("{\"htype\":1, " T S F TS "}", &lim, "wrong_type",
                 "field \"htype\" has the wrong type: expected a string or an array, got a number");
#define H "{\"htype\":\"array-1.0\", "
    adzmq_reject(H S F TS "}", &lim, "missing_field", "missing field \"type\"");
    adzmq_reject(H "\"type\":\"uint32\", " S F TS "}", &lim, "unknown_dtype",
                 "unknown type \"uint32\" (expected uint8, uint16, int16, int32 or float32)");
    adzmq_reject(H "\"type\":\"float64\", " S F TS "}", &lim, "unknown_dtype",
                 "unknown type \"float64\" (expected uint8, uint16, int16, int32 or float32)");
    adzmq_reject(H T F TS "}", &lim, "missing_field", "missing field \"shape\"");
    adzmq_reject(H T "\"shape\":{}, " F TS "}", &lim, "wrong_type",
                 "field \"shape\" has the wrong type: expected an array, got an object");
    adzmq_reject(H T "\"shape\":[3,100,100], " F TS "}", &lim, "dimensions",
                 "field \"shape\" has 3 dimensions (expected 2: a monochrome image)");
    adzmq_reject(H T "\"shape\":[12], " F TS "}", &lim, "dimensions",
                 "field \"shape\" has 1 dimensions (expected 2: a monochrome image)");
    adzmq_reject(H T "\"shape\":[3,\"4\"], " F TS "}", &lim, "wrong_type",
                 "field \"shape[1]\" has the wrong type: expected an integer, got a string");
    adzmq_reject(H T "\"shape\":[3.5,4], " F TS "}", &lim, "wrong_type",
                 "field \"shape[0]\" has the wrong type: expected an integer, got 3.5");
    /* current form: [y, x]; pre-1.4: [x, y] — each held to its own limit */
    adzmq_reject(H T "\"shape\":[10,101], " F TS "}", &lim, "dimensions",
                 "width 101 is out of range (1 to 100)");
    adzmq_reject(H T "\"shape\":[51,10], " F TS "}", &lim, "dimensions",
                 "height 51 is out of range (1 to 50)");
    {
        const char *ok = "{\"htype\":[\"array-1.0\"], " T "\"shape\":[51,10], " F TS "}";
        static ss_proto_input_t in;
        ss_proto_error_t err;
        ck_assert_int_eq(ss_proto_parse_adzmq(ok, strlen(ok), &lim, &in, &err), SS_OK);
        ck_assert_int_eq(in.width, 51);
        ck_assert_int_eq(in.height, 10);
    }
    adzmq_reject("{\"htype\":[\"array-1.0\"], " T "\"shape\":[10,51], " F TS "}", &lim,
                 "dimensions", "height 51 is out of range (1 to 50)");
    adzmq_reject(H T "\"shape\":[0,4], " F TS "}", &lim, "dimensions",
                 "height 0 is out of range (1 to 50)");
    adzmq_reject(H T S TS "}", &lim, "missing_field", "missing field \"frame\"");
    adzmq_reject(H T S "\"frame\":-1, " TS "}", &lim, "bad_value",
                 "field \"frame\" is out of range: -1 (expected 0 to 2^53)");
    adzmq_reject(H T S F "\"frame\":2, " TS "}", &lim, "duplicate_field",
                 "duplicate field \"frame\"");
    adzmq_reject(H T S F "\"x\":1}", &lim, "missing_field", "missing field \"timeStamp\"");
    adzmq_reject(H T S F "\"timeStamp\":\"now\"}", &lim, "wrong_type",
                 "field \"timeStamp\" has the wrong type: expected a number, got a string");
    adzmq_reject(H T S F "\"timeStamp\":-5e9}", &lim, "bad_time",
                 "field \"timeStamp\" is out of range: -5000000000 s after 1990-01-01 (expected "
                 "MJD 0 to 200000)");
    adzmq_reject(H T S F TS ", \"encoding\":\"blosc\"}", &lim, "unknown_dtype",
                 "field \"encoding\" is \"blosc\": compressed arrays are not accepted (expected \"\")");
    adzmq_reject(H T S F TS ", \"encoding\":\"jpeg\"}", &lim, "unknown_dtype",
                 "field \"encoding\" is \"jpeg\": compressed arrays are not accepted (expected \"\")");
    adzmq_reject(H T S F TS ", \"encoding\":0}", &lim, "wrong_type",
                 "field \"encoding\" has the wrong type: expected a string, got a number");
    adzmq_reject(H T S F TS ", \"ndattr\":{\"Temperature\":-20.5}}", &lim, "meta_too_large",
                 "field \"ndattr\" is too large: 21 bytes as compact JSON (maximum 16)");
    adzmq_reject(H T S F TS ", \"ndattr\":[1]}", &lim, "wrong_type",
                 "field \"ndattr\" has the wrong type: expected an object, got an array");
    /* NDPluginZMQ prints a NaN attribute as nan: not JSON */
    adzmq_reject(H T S F TS ", \"ndattr\":{\"T\":nan}}", &lim, "not_json",
                 "header is not valid JSON (error at byte 96)");
    adzmq_reject("[\"array-1.0\"]", &lim, "not_object",
                 "header is not a JSON object (got an array)");
    lim.max_header_bytes = 20;
    ss_test_adzmq_header(hdr, sizeof hdr, 1, "uint16", 4, 3, 1, 1e9, "", "{}");
    char want[SS_PROTO_ERR_MAX];
    snprintf(want, sizeof want, "header too long: %zu bytes (maximum 20)", strlen(hdr));
    adzmq_reject(hdr, &lim, "too_long", want);
#undef H
#undef T
#undef S
#undef F
#undef TS
}
END_TEST

/* The receive path with format adzmq: [header, array] into a pooled frame;
 * a third part, a missing array part and a wrong size are refused whole,
 * and the pool's frame comes back each time. */
START_TEST(test_adzmq_receive)
{
    void *ctx, *tx, *rx;
    zmq_pair(&ctx, &tx, &rx, "inproc://proto-adzmq");
    ss_proto_limits_t lim = limits();
    ss_frame_pool_t *pool = ss_frame_pool_new(1, 4096, 4096, NULL);
    ss_proto_recv_cfg_t cfg = { .lim = &lim, .format = SS_PROTO_FMT_ADZMQ, .max_parts = 3,
                                .frame_get = labelled_get, .user = pool };
    char hdr[1024];
    int n = ss_test_adzmq_header(hdr, sizeof hdr, 1, "uint16", 4, 3, 7, ADZMQ_TS, "", "{}");
    ss_proto_part_t msg[3] = { { hdr, (size_t)n }, { FX_U16_PIX, 24 }, { FX_U16_MASK, 12 } };
    ck_assert_int_eq(ss_proto_send_parts(tx, msg, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, msg, 3, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, msg, 1, 0), SS_OK);
    ss_proto_part_t shortp[2] = { msg[0], { FX_U16_PIX, 22 } };
    ck_assert_int_eq(ss_proto_send_parts(tx, shortp, 2, 0), SS_OK);
    ck_assert_int_eq(ss_proto_send_parts(tx, msg, 2, 0), SS_OK);

    static ss_proto_input_t in;
    ss_proto_error_t err;
    ss_frame_t *f = NULL;
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_OK);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(f->width, 4);
    ck_assert_int_eq(f->height, 3);
    ck_assert_int_eq(f->dtype, SS_DT_U16);
    ck_assert(memcmp(f->pixels, FX_U16_PIX, 24) == 0);
    ck_assert_ptr_null(f->valid);
    ck_assert_uint_eq(f->meta.seq, 7);
    ck_assert_double_eq_tol(f->meta.mjd_obs, 61366.25, 1e-9);
    ck_assert_str_eq(f->meta.source, "test source");
    ss_frame_pool_put(f);
    /* a third part is no mask in this format */
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "too many parts: 3 (an ADZMQ message has 2: header, array)");
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_FORMAT);
    ck_assert_str_eq(ss_proto_reason_name(err.reason), "missing_part");
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_ERR_SIZE);
    ck_assert_str_eq(err.text, "pixel part is 22 bytes; the header says 4 x 3 u16 = 24 bytes");
    ck_assert_int_eq(ss_frame_pool_free_count(pool), 1);
    /* and the next message starts clean */
    ck_assert_int_eq(ss_proto_recv_message(rx, 0, &cfg, &in, &f, &err), SS_OK);
    ck_assert_uint_eq(f->meta.seq, 7);
    ss_frame_pool_put(f);

    ss_frame_pool_destroy(&pool);
    zmq_close(tx);
    zmq_close(rx);
    zmq_ctx_term(ctx);
}
END_TEST

/* float32 -> binary16, round to nearest even (half_core.h): the edges
 * by value, and, where the compiler has _Float16 (whose conversion rounds
 * so), every 1021st float32 bit pattern against it. */
static float f_of_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

START_TEST(test_f16_rounding)
{
    static const struct { float f; uint16_t h; } cases[] = {
        { 0.0f, 0x0000 }, { -0.0f, 0x8000 }, { 1.0f, 0x3C00 }, { -2.0f, 0xC000 },
        { 65504.0f, 0x7BFF }, { 65519.99f, 0x7BFF }, { 65520.0f, 0x7C00 }, { -1e9f, 0xFC00 },
        { INFINITY, 0x7C00 }, { -INFINITY, 0xFC00 }, { NAN, 0x7E00 }, { -NAN, 0x7E00 },
        { 0x1p-14f, 0x0400 }, { 0x1p-24f, 0x0001 }, { 0x1p-25f, 0x0000 },
        { 0x1.8p-25f, 0x0001 }, { 0x1.8p-24f, 0x0002 },    /* subnormal ties to even */
        { 1.0f + 0x1p-11f, 0x3C00 }, { 1.0f + 0x3p-11f, 0x3C02 },    /* ties to even */
        { 1.0f + 0x1.04p-11f, 0x3C01 }, { 0.1f, 0x2E66 }, { 3.14159265f, 0x4248 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(ss_f16_bits(cases[i].f) == cases[i].h, "%a: 0x%04x, expected 0x%04x",
                      cases[i].f, ss_f16_bits(cases[i].f), cases[i].h);
    ck_assert_uint_eq(ss_f16_bits(f_of_bits(0x7F800001u)), 0x7E00);
#ifdef __FLT16_MAX__
    uint64_t bad = 0, first = 0;
    for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 1021) {
        const float f = f_of_bits((uint32_t)u);
        const _Float16 h = (_Float16)f;
        uint16_t hb;
        memcpy(&hb, &h, sizeof hb);
        if (!isnan(f) && ss_f16_bits(f) != hb && !bad++)
            first = u;
    }
    ck_assert_msg(bad == 0, "%llu differ from _Float16, the first 0x%08llx",
                  (unsigned long long)bad, (unsigned long long)first);
#endif
}
END_TEST

/* Stamp boxes (outputs.h): a point's square on its peak, clipped at the
 * edge; a streak's box grown and capped around its centre; the count. */
START_TEST(test_stamp_boxes)
{
    ss_detlist_t l;
    ck_assert_int_eq(ss_detlist_init(&l, 8), 0);
    ss_detection_t *d = ss_detlist_push(&l);
    *d = (ss_detection_t){ .kind = SS_KIND_POINT, .peak_x = 50, .peak_y = 40 };
    d = ss_detlist_push(&l);
    *d = (ss_detection_t){ .kind = SS_KIND_POINT, .peak_x = 2, .peak_y = 78 };
    d = ss_detlist_push(&l);
    *d = (ss_detection_t){ .kind = SS_KIND_STREAK, .bbox_x0 = 10, .bbox_x1 = 90, .bbox_y0 = 40,
                           .bbox_y1 = 42 };
    d = ss_detlist_push(&l);
    *d = (ss_detection_t){ .kind = SS_KIND_POINT, .peak_x = 5, .peak_y = 5 };
    ss_outputs_t o = ss_outputs_default();
    o.stamp_size = 31;
    o.stamp_streak_max = 63;
    o.stamp_max = 3;
    ss_stamps_t st;
    ss_stamp_boxes(&l, 100, 80, &o, &st);
    ck_assert_int_eq(st.count, 3);
    ck_assert_int_eq(st.truncated, 1);
    const ss_stamp_t want[3] = {
        { .det = 0, .x0 = 35, .y0 = 25, .w = 31, .h = 31, .offset = 0 },
        { .det = 1, .x0 = 0, .y0 = 63, .w = 18, .h = 17, .offset = 961 },
        /* 81 + 30 px wide: capped at 63 around x = 50; 3 + 30 high */
        { .det = 2, .x0 = 19, .y0 = 25, .w = 63, .h = 33, .offset = 961 + 18 * 17 },
    };
    for (int k = 0; k < 3; k++)
        ck_assert_msg(st.items[k].det == want[k].det && st.items[k].x0 == want[k].x0 &&
                          st.items[k].y0 == want[k].y0 && st.items[k].w == want[k].w &&
                          st.items[k].h == want[k].h && st.items[k].offset == want[k].offset,
                      "stamp %d: det %d at (%d, %d) %d x %d, offset %zu", k, st.items[k].det,
                      st.items[k].x0, st.items[k].y0, st.items[k].w, st.items[k].h,
                      st.items[k].offset);
    ck_assert_uint_eq(st.npix, 961 + 18 * 17 + 63 * 33);
    /* the cut: pixel values are their plane's */
    float *plane = malloc(100 * 80 * sizeof(float));
    for (int i = 0; i < 100 * 80; i++)
        plane[i] = (float)i;
    st.pixels = malloc(st.npix * sizeof(float));
    ss_stamps_cut(plane, 100, &st);
    ck_assert_float_eq(st.pixels[0], 25 * 100 + 35);
    ck_assert_float_eq(st.pixels[961 + 18 * 17 - 1], 79 * 100 + 17);
    ck_assert_float_eq(st.pixels[st.npix - 1], (25 + 32) * 100 + 19 + 62);
    free(st.pixels);
    free(plane);
    ss_detlist_free(&l);
}
END_TEST

/* The forms' topics and the stamps body. */
START_TEST(test_forms_encode)
{
    char topic[SS_PROTO_TOPIC_MAX], feed[SS_NAME_MAX];
    const char *longest = "abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijk";
    ck_assert_uint_eq(strlen(longest), SS_NAME_MAX - 1);
    for (int f = 0; f < SS_FORM__COUNT; f++) {
        const int tl = ss_proto_form_topic((ss_residual_form_t)f, longest, topic, sizeof topic);
        ck_assert_int_gt(tl, 0);
        ck_assert_int_eq(ss_proto_form_topic_parse(topic, (size_t)tl, feed), f);
        ck_assert_str_eq(feed, longest);
    }
    ck_assert_int_eq(ss_proto_form_topic_parse("residual16x.cam1", 16, NULL), -1);
    ck_assert_int_eq(ss_proto_topic_parse("residual16.cam1", 15, NULL), SS_MSG_NONE);
    ck_assert_int_eq(ss_proto_topic(SS_MSG_STAMPS, "cam1", topic, sizeof topic), 11);
    ck_assert_str_eq(topic, "stamps.cam1");

    ss_result_t res;
    ck_assert_int_eq(ss_result_init(&res, 64, 4), 0);
    ss_strlcpy(res.meta.feed, "cam1", sizeof res.meta.feed);
    res.meta.seq = 9;
    res.meta.mjd_obs = NAN;
    res.width = res.height = 8;
    res.origin_x = 100;
    res.origin_y = 200;
    ss_detection_t *d = ss_detlist_push(&res.dets);
    *d = (ss_detection_t){ .kind = SS_KIND_POINT, .x = 103.5, .y = 204.25 };
    res.has_stamps = 1;
    res.stamps.count = 1;
    res.stamps.items[0] = (ss_stamp_t){ .det = 0, .x0 = 1, .y0 = 2, .w = 5, .h = 4 };
    res.stamps.npix = 20;
    char buf[8192];
    const int n = ss_proto_encode_stamps(&res, buf, sizeof buf);
    ck_assert_int_gt(n, 0);
    ck_assert_uint_le((size_t)n, ss_proto_stamps_bound(&res));
    cJSON *j = cJSON_ParseWithLength(buf, (size_t)n);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "type")->valuestring, "stamps");
    ck_assert_int_eq(cJSON_GetObjectItem(j, "count")->valueint, 1);
    const cJSON *s0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "stamps"), 0);
    ck_assert_int_eq(cJSON_GetObjectItem(s0, "x0")->valueint, 101);
    ck_assert_int_eq(cJSON_GetObjectItem(s0, "y0")->valueint, 202);
    ck_assert_int_eq(cJSON_GetObjectItem(s0, "w")->valueint, 5);
    ck_assert_double_eq(cJSON_GetObjectItem(s0, "x")->valuedouble, 103.5);
    cJSON_Delete(j);
    /* a float16 residual header says so */
    res.has_residual16 = 1;
    ck_assert_int_eq(ss_proto_encode_residual_form(&res, SS_FORM_F32, 0, buf, sizeof buf), -1);
    const int hl = ss_proto_encode_residual_form(&res, SS_FORM_F16_EVERY, 5, buf, sizeof buf);
    ck_assert_int_gt(hl, 0);
    j = cJSON_ParseWithLength(buf, (size_t)hl);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "type")->valuestring, "residual");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "dtype")->valuestring, "f16");
    ck_assert_int_eq(cJSON_GetObjectItem(j, "every")->valueint, 5);
    cJSON_Delete(j);
    ss_result_free(&res);
}
END_TEST

static Suite *proto_suite(void)
{
    Suite *s = suite_create("proto");
    TCase *g = tcase_create("golden");
    tcase_add_test(g, test_golden_frame_u16);
    tcase_add_test(g, test_golden_frame_f32_minimal);
    tcase_add_test(g, test_golden_series);
    tcase_add_test(g, test_golden_residual);
    tcase_add_test(g, test_golden_detections);
    tcase_add_test(g, test_golden_tracks);
    tcase_add_test(g, test_topic_seq);
    tcase_add_test(g, test_detection_lines);
    tcase_add_test(g, test_golden_status);
    tcase_add_test(g, test_golden_control);
    suite_add_tcase(s, g);
    TCase *m = tcase_create("malformed");
    tcase_add_test(m, test_malformed);
    tcase_add_test(m, test_malformed_outputs);
    suite_add_tcase(s, m);
    TCase *r = tcase_create("roundtrip");
    tcase_add_test(r, test_roundtrip_frames);
    tcase_add_test(r, test_roundtrip_results);
    tcase_add_test(r, test_roundtrip_status_control);
    tcase_add_test(r, test_encoder_buffer_sizes);
    tcase_add_test(r, test_names);
    tcase_add_test(r, test_f16_rounding);
    tcase_add_test(r, test_stamp_boxes);
    tcase_add_test(r, test_forms_encode);
    suite_add_tcase(s, r);
    TCase *z = tcase_create("zmq");
    tcase_add_test(z, test_zmq_input);
    tcase_add_test(z, test_zmq_input_caps);
    tcase_add_test(z, test_adzmq_receive);
    suite_add_tcase(s, z);
    TCase *a = tcase_create("adzmq");
    tcase_add_test(a, test_adzmq_headers);
    tcase_add_test(a, test_adzmq_malformed);
    suite_add_tcase(s, a);
    return s;
}

int main(void)
{
    return ss_run_suite(proto_suite());
}
