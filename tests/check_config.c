/*
 * check_config.c — tests of config/ (the key table, the loader, the
 * validator, the printer, the reload rules and the key reference).
 *
 * Error paths assert the exact message text (it must name the full key
 * path or the file); the printed default loads back byte-identical; the
 * checked-in example (config/skysieved.example.json) equals the printed
 * default — run this test with SKYSIEVE_UPDATE_EXAMPLE=1 to rewrite it
 * after changing the key table.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "ss_test.h"

static ss_config_t cfg, ref;
static char err[512];

/* Load a JSON text into cfg; returns the error code, message in err. */
static ss_err_t load(const char *json)
{
    err[0] = '\0';
    return ss_config_load_string(json, strlen(json), &cfg, err, sizeof err);
}

#define ASSERT_ERR(json, text)                                                             \
    do {                                                                                   \
        ck_assert_int_eq(load(json), SS_ERR_CONFIG);                                       \
        ck_assert_msg(strcmp(err, text) == 0, "input %s\n  got  '%s'\n  want '%s'", json,  \
                      err, text);                                                          \
    } while (0)

/* Set a string field the way the loader does: the whole field zeroed
 * first, so that structs compare equal byte for byte. */
static void setstr(char *dst, const char *src, size_t size)
{
    memset(dst, 0, size);
    ss_strlcpy(dst, src, size);
}

/* Path of a fresh temporary file holding text (NULL text: no file). */
static void tmp_file(char *path, size_t n, const char *text)
{
    snprintf(path, n, "/tmp/check_config_XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    if (text)
        ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = '\0';
    fclose(f);
    return buf;
}

static const ss_config_key_t *key(ss_key_scope_t scope, const char *path)
{
    size_t n;
    const ss_config_key_t *k = ss_config_keys(scope, &n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(k[i].path, path) == 0)
            return &k[i];
    ck_abort_msg("no key %s", path);
    return NULL;
}

/* ======================================================================
 * the table itself
 * ==================================================================== */

START_TEST(test_table_well_formed)
{
    for (int s = 0; s < 2; s++) {
        size_t n;
        const ss_config_key_t *k = ss_config_keys((ss_key_scope_t)s, &n);
        ck_assert_int_gt(n, 5);
        for (size_t i = 0; i < n; i++) {
            ck_assert_int_eq(k[i].scope, s);
            ck_assert_msg(k[i].doc && strlen(k[i].doc) > 10, "%s: no doc", k[i].path);
            for (size_t j = 0; j < n; j++) {
                if (i == j)
                    continue;
                size_t li = strlen(k[i].path);
                ck_assert_msg(strcmp(k[i].path, k[j].path) != 0, "%s twice", k[i].path);
                /* a key is never also an object above another key */
                ck_assert_msg(!(strncmp(k[j].path, k[i].path, li) == 0 && k[j].path[li] == '.'),
                              "%s is a key and a prefix of %s", k[i].path, k[j].path);
            }
            /* each object prefix of row i is contiguous: once left, never seen again */
            for (const char *d = strchr(k[i].path, '.'); d; d = strchr(d + 1, '.')) {
                size_t pl = (size_t)(d - k[i].path) + 1;
                int left = 0;
                for (size_t j = i + 1; j < n; j++) {
                    int in = strncmp(k[j].path, k[i].path, pl) == 0;
                    ck_assert_msg(!(left && in), "rows of %.*s are not contiguous (%s)", (int)pl,
                                  k[i].path, k[j].path);
                    left |= !in;
                }
            }
            switch (k[i].type) {
            case SS_KEY_INT:
            case SS_KEY_U64:
            case SS_KEY_DOUBLE:
            case SS_KEY_INT4:
            case SS_KEY_BOOL:
                ck_assert_msg((k[i].nullable && isnan(k[i].def)) ||
                                  (k[i].min <= k[i].def && k[i].def <= k[i].max), "%s default",
                              k[i].path);
                ck_assert_msg(!k[i].nullable || k[i].type == SS_KEY_DOUBLE, "%s: nullable", k[i].path);
                break;
            case SS_KEY_STRING:
                ck_assert_msg(k[i].size > 1 && strlen(k[i].def_str) < k[i].size, "%s", k[i].path);
                break;
            case SS_KEY_ENUM: {
                int found = 0, count = 0;
                for (const ss_enum_name_t *e = k[i].names; e->name; e++, count++)
                    found |= strcmp(e->name, k[i].def_str) == 0;
                ck_assert_msg(found && count >= 2, "%s: default not among the names", k[i].path);
                break;
            }
            }
        }
    }
}
END_TEST

/* Every member of ss_pipeline_cfg_t has its key: set each member (named
 * here, independently of the table) to a nonzero value, then clear the
 * bytes of every pipeline key; nothing nonzero may remain. */
START_TEST(test_table_covers_pipeline)
{
    ss_feed_cfg_t f;
    memset(&f, 0, sizeof f);
    ss_pipeline_cfg_t *p = &f.pipeline;
    p->backend = SS_BACKEND_CUDA;
    p->device = p->threads = 1;
    p->dark[0] = p->flat[0] = p->bad_pixels[0] = 'x';
    p->dark[SS_PATH_MAX - 1] = p->flat[SS_PATH_MAX - 1] = p->bad_pixels[SS_PATH_MAX - 1] = 'x';
    p->bias[0] = p->bias[SS_PATH_MAX - 1] = 'x';
    p->overscan = SS_OVERSCAN_ROW;
    p->geometry_slack = 1;
    p->saturation = 1;
    p->roi_x = p->roi_y = p->roi_w = p->roi_h = 1;
    p->use_trimsec = p->hotpix_learn = 1;
    p->hotpix_k = p->hotpix_fraction = 1;
    p->hotpix_frames = p->hotpix_min_frames = 1;
    p->reg_levels = p->reg_search = p->reg_hipass = p->reg_max_iter = 1;
    p->reg_tol = p->reg_ambiguity = p->reg_min_det = p->reref_px = 1;
    p->max_failures = 1;
    p->history = p->min_history = p->poly_degree = p->remove_objects = 1;
    p->mode = SS_WHITEN_LSQ;
    p->gamma = p->forget = p->mask_radius = p->protect_speed = 1;
    p->guided = p->guided_radius = p->noise_stride = p->guided_mask = 1;
    p->guided_eps = p->psf_sigma = 1;
    p->model_error = 1;
    p->model_error_snr = 1;
    p->thresh = p->thresh_low = p->streak_ratio = p->streak_min_len = p->cosmic_fraction = 1;
    p->streak_min_b = 1;
    p->negative = p->min_area = p->max_detections = 1;
    p->track.enabled = p->track.max_missed = p->track.min_points = 1;
    p->track.max_speed = p->track.gate = 1;
    p->phot.zeropoint = 1;
    p->phot.per_second = 1;
    p->phot.band[0] = 'x';

    size_t n;
    int keys = 0;
    const ss_config_key_t *k = ss_config_keys(SS_SCOPE_FEED, &n);
    const size_t lo = offsetof(ss_feed_cfg_t, pipeline), hi = lo + sizeof(ss_pipeline_cfg_t);
    for (size_t i = 0; i < n; i++) {
        if (k[i].offset < lo || k[i].offset >= hi)
            continue;
        keys++;
        size_t sz = k[i].type == SS_KEY_STRING ? k[i].size
                    : k[i].type == SS_KEY_INT4 ? 4 * sizeof(int)
                    : k[i].type == SS_KEY_DOUBLE || k[i].type == SS_KEY_U64 ? 8 : sizeof(int);
        ck_assert_msg(k[i].offset + sz <= hi, "%s overruns the pipeline struct", k[i].path);
        memset((char *)&f + k[i].offset, 0, sz);
    }
    static const ss_pipeline_cfg_t zero;
    for (size_t b = 0; b < sizeof zero; b++)
        ck_assert_msg(((const unsigned char *)p)[b] == 0, "byte %zu of ss_pipeline_cfg_t has no key", b);
    ck_assert_int_eq(keys, 69);     /* 73 members, roi's 4 as one key, device_feeds
                                     * derived (ss_feed_pipeline_cfg) */
}
END_TEST

/* ======================================================================
 * defaults
 * ==================================================================== */

START_TEST(test_pipeline_defaults)
{
    ss_pipeline_cfg_t p;
    memset(&p, 0x5a, sizeof p);
    ss_pipeline_cfg_defaults(&p);
    ck_assert_int_eq(p.backend, SS_BACKEND_AUTO);
    ck_assert_int_eq(p.device, 0);
    ck_assert_int_eq(p.threads, 0);
    ck_assert_str_eq(p.dark, "");
    ck_assert_str_eq(p.flat, "");
    ck_assert_str_eq(p.bad_pixels, "");
    ck_assert(p.saturation == 0.0);
    ck_assert_int_eq(p.roi_x | p.roi_y | p.roi_w | p.roi_h, 0);
    ck_assert_int_eq(p.use_trimsec, 1);
    ck_assert_int_eq(p.hotpix_learn, 1);
    ck_assert(p.hotpix_k == 8.0);
    ck_assert_int_eq(p.hotpix_frames, 20);
    ck_assert(p.hotpix_fraction == 0.75);
    ck_assert_int_eq(p.hotpix_min_frames, 5);
    ck_assert_int_eq(p.reg_levels, 2);
    ck_assert_int_eq(p.reg_search, 16);
    ck_assert_int_eq(p.reg_hipass, 0);
    ck_assert_int_eq(p.reg_max_iter, 4);
    ck_assert(p.reg_tol == 0.002);
    ck_assert(p.reg_ambiguity == 0.9);
    ck_assert(p.reg_min_det == 1e-6);
    ck_assert_int_eq(p.max_failures, 5);
    ck_assert(p.reref_px == 16.0);
    ck_assert_int_eq(p.history, 20);
    ck_assert_int_eq(p.min_history, 0);
    ck_assert_int_eq(p.mode, SS_WHITEN_POLY);
    ck_assert_int_eq(p.poly_degree, 2);
    ck_assert(p.gamma == -1.0);
    ck_assert(p.forget == 1.0);
    ck_assert(p.protect_speed == 0.5);
    ck_assert_int_eq(p.remove_objects, 1);
    ck_assert(p.mask_radius == -1.0);
    ck_assert_int_eq(p.guided, 1);
    ck_assert_int_eq(p.guided_radius, 0);
    ck_assert(p.guided_eps == 0.1);
    ck_assert_int_eq(p.noise_stride, 2);
    ck_assert_int_eq(p.model_error, 1);
    ck_assert(p.model_error_snr == 20.0);
    ck_assert(p.psf_sigma == 1.4);
    ck_assert(p.thresh == 5.0);
    ck_assert(p.thresh_low == 2.5);
    ck_assert_int_eq(p.negative, 0);
    ck_assert_int_eq(p.min_area, 3);
    ck_assert(p.streak_ratio == 3.0);
    ck_assert(p.streak_min_len == 3.0);
    ck_assert(p.streak_min_b == 0.75);
    ck_assert(p.cosmic_fraction == 0.25);
    ck_assert_int_eq(p.max_detections, 1000);
    /* the derived values the driver computes from them */
    ck_assert(fabs(ss_cfg_gamma(&p) - 0.02) < 1e-15);
    ck_assert(fabs(ss_cfg_mask_radius(&p) - 3.8) < 1e-12);
    ck_assert_int_eq(ss_cfg_guided_radius(&p), 11);
    ck_assert_int_eq(ss_cfg_min_history(&p), 14);
}
END_TEST

START_TEST(test_default_config)
{
    ss_config_defaults(&cfg);
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_OK);
    ck_assert_int_eq(cfg.log_level, SS_LOG_INFO);
    ck_assert_str_eq(cfg.control_endpoint, "ipc:///run/skysieve/control");
    ck_assert_str_eq(cfg.publish_endpoint, "tcp://127.0.0.1:5560");
    ck_assert_int_eq(cfg.publish_residuals, 1);
    ck_assert_int_eq(cfg.n_feeds, 1);
    const ss_feed_cfg_t *f = &cfg.feeds[0];
    ck_assert_str_eq(f->name, "synth0");
    ck_assert_int_eq(f->source, SS_SOURCE_SYNTH);
    ck_assert_int_eq(f->synth.gen.width, 1024);
    ck_assert_int_eq(f->synth.gen.height, 1024);
    ck_assert_int_eq(f->synth.gen.dtype, SS_DT_U16);
    ck_assert(f->synth.rate == 2.0);
    ck_assert(f->synth.count == 0);
    ck_assert_int_gt(f->synth.gen.n_movers, 0);
    ck_assert(f->synth.gen.mover_snr == 10.0);
    ck_assert(f->synth.gen.streak_prob > 0.0 && f->synth.gen.streak_prob < 0.5);
    ck_assert_int_gt(f->synth.gen.n_hot, 0);
    ck_assert(f->synth.gen.cosmic_rate > 0.0);
    /* the generator and the matched filter assume the same PSF */
    ck_assert(f->synth.gen.psf_sigma == f->pipeline.psf_sigma);
    /* unused feed slots are zero */
    static const ss_feed_cfg_t zero;
    for (int i = 1; i < SS_MAX_FEEDS; i++)
        ck_assert(memcmp(&cfg.feeds[i], &zero, sizeof zero) == 0);
}
END_TEST

/* ======================================================================
 * printing and loading back
 * ==================================================================== */

START_TEST(test_default_roundtrip)
{
    ss_config_defaults(&ref);
    char *json = ss_config_to_json(&ref);
    ck_assert_ptr_nonnull(json);
    memset(&cfg, 0x77, sizeof cfg);
    ck_assert_msg(load(json) == SS_OK, "%s", err);
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);
    ck_assert(ss_config_equal(&cfg, &ref));
    /* and printing again gives the same text */
    char *again = ss_config_to_json(&cfg);
    ck_assert_str_eq(again, json);
    /* spot checks of the layout: nested objects, one key per line */
    ck_assert_ptr_nonnull(strstr(json, "\n      \"pipeline\": {\n        \"backend\": \"auto\",\n"));
    ck_assert_ptr_nonnull(strstr(json, "\n        \"registration\": {\n          \"levels\": 2,\n"));
    ck_assert_ptr_nonnull(strstr(json, "\"roi\": [0, 0, 0, 0],"));
    ck_assert_ptr_nonnull(strstr(json, "\"tol\": 0.002,"));
    ck_assert_ptr_nonnull(strstr(json, "\"byte_budget\": 268435456,"));
    free(again);
    free(json);
}
END_TEST

/* A value in range that differs from the default, for every key. */
static void mutate(const ss_config_key_t *k, void *base, int salt)
{
    char *p = (char *)base + k->offset;
    switch (k->type) {
    case SS_KEY_BOOL: *(int *)p = !*(int *)p; break;
    case SS_KEY_INT: {
        int v = (int)(k->min + floor((k->max - k->min) * 0.37)) + salt;
        if (v == (int)k->def || v > k->max)
            v = (int)k->min + (v == (int)k->min);
        *(int *)p = v;
        break;
    }
    case SS_KEY_U64: *(uint64_t *)p = (uint64_t)(k->def + 12345 + salt); break;
    case SS_KEY_DOUBLE: {
        /* values without a short decimal form test the printer's precision */
        double d = isnan(k->def) ? 0.5 * (k->min + k->max) : k->def;   /* null by default */
        double v = d + (k->max - d) * 0.3713 + salt * 1e-3 / 3.0;
        if (v == k->def || v > k->max)
            v = k->def - (k->def - k->min) / 3.0;
        *(double *)p = v;
        break;
    }
    case SS_KEY_STRING: memset(p, 0, k->size); snprintf(p, k->size, "a\"b\\c/d\te%d_\xc3\xa9", salt); break;
    case SS_KEY_ENUM: {
        const ss_enum_name_t *e = k->names;
        while (e[1].name)
            e++;
        if (e->value == *(int *)p)
            e = k->names;
        *(int *)p = e->value;
        break;
    }
    case SS_KEY_INT4:
        for (int j = 0; j < 4; j++)
            ((int *)p)[j] = 10 + j + salt;
        break;
    }
}

START_TEST(test_every_key_roundtrip)
{
    ss_config_defaults(&ref);
    ref.n_feeds = 3;
    size_t nd, nf;
    const ss_config_key_t *dk = ss_config_keys(SS_SCOPE_DAEMON, &nd);
    const ss_config_key_t *fk = ss_config_keys(SS_SCOPE_FEED, &nf);
    for (size_t k = 0; k < nd; k++)
        mutate(&dk[k], &ref, 0);
    setstr(ref.control_endpoint, "ipc:///tmp/x\"y", sizeof ref.control_endpoint);
    setstr(ref.publish_endpoint, "tcp://127.0.0.1:7777", sizeof ref.publish_endpoint);
    for (int i = 0; i < ref.n_feeds; i++) {
        ss_feed_cfg_t *f = &ref.feeds[i];
        ss_feed_defaults(f);
        for (size_t k = 0; k < nf; k++)
            mutate(&fk[k], f, i);
        /* restore what the cross-key checks require */
        memset(f->name, 0, sizeof f->name);
        snprintf(f->name, sizeof f->name, "cam-%d", i);
        f->source = SS_SOURCE_FITS;
        f->pipeline.thresh = 7.25;
        f->pipeline.thresh_low = 3.125;
        f->pipeline.min_history = 5;
        f->synth.gen.flux_min = 10.0;
        f->synth.gen.streak_len_min = 2.0;
        f->fits.after = SS_FITS_DELETE;
        setstr(f->pipeline.phot.band, i ? "Rc" : "V", sizeof f->pipeline.phot.band);
        memset(f->jsonl_path, 0, sizeof f->jsonl_path);
        snprintf(f->jsonl_path, sizeof f->jsonl_path, "/tmp/dets-%d.jsonl", i);
    }
    ck_assert_msg(ss_config_validate(&ref, err, sizeof err) == SS_OK, "%s", err);
    ck_assert(!ss_config_equal(&ref, &(ss_config_t){ 0 }));

    char *json = ss_config_to_json(&ref);
    ck_assert_ptr_nonnull(json);
    ck_assert_msg(load(json) == SS_OK, "%s\n%s", err, json);
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);
    ck_assert(ss_config_equal(&cfg, &ref));
    /* every key really differs from its default (so the round trip tested it) */
    ss_config_t *def = malloc(sizeof *def);
    ss_config_defaults(def);
    for (size_t k = 0; k < nd; k++) {
        size_t sz = dk[k].type == SS_KEY_STRING ? dk[k].size
                    : dk[k].type == SS_KEY_DOUBLE || dk[k].type == SS_KEY_U64 ? 8 : 4;
        ck_assert_msg(memcmp((char *)&cfg + dk[k].offset, (char *)def + dk[k].offset, sz) != 0,
                      "%s kept its default", dk[k].path);
    }
    free(def);
    free(json);
}
END_TEST

START_TEST(test_example_file)
{
    const char *src = getenv("SKYSIEVE_SOURCE_DIR");
    ck_assert_msg(src != NULL, "SKYSIEVE_SOURCE_DIR not set (run under ctest)");
    char path[1024];
    snprintf(path, sizeof path, "%s/config/skysieved.example.json", src);
    ss_config_defaults(&ref);
    char *json = ss_config_to_json(&ref);
    ck_assert_ptr_nonnull(json);
    const char *upd = getenv("SKYSIEVE_UPDATE_EXAMPLE");
    if (upd && *upd == '1') {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        fputs(json, f);
        fclose(f);
    }
    char *text = read_all(path);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    ck_assert_msg(strcmp(text, json) == 0,
                  "%s differs from --print-default-config; regenerate it with "
                  "SKYSIEVE_UPDATE_EXAMPLE=1 ctest -R check_config",
                  path);
    ck_assert_msg(ss_config_load_file(path, &cfg, err, sizeof err) == SS_OK, "%s", err);
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);
    free(text);
    free(json);
}
END_TEST

START_TEST(test_partial_config)
{
    /* top-level keys only: the default feed list stays */
    ck_assert_msg(load("{\"log_level\": \"debug\", \"publish\": {\"residuals\": false}}") == SS_OK,
                  "%s", err);
    ss_config_defaults(&ref);
    ref.log_level = SS_LOG_DEBUG;
    ref.publish_residuals = 0;
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);

    /* two feeds, each from the feed defaults plus what is given */
    const char *json =
        "{ \"control\": {\"endpoint\": \"ipc:///tmp/ss-test-control\"},\n"
        "  \"feeds\": [\n"
        "    {\"name\": \"cam1\", \"source\": {\"type\": \"zmq\", \"zmq\": {\"socket\": \"sub\"}},\n"
        "     \"pipeline\": {\"registration\": {\"levels\": 3}, \"roi\": [8, 16, 1000, 900]}},\n"
        "    {\"name\": \"cam2\", \"source\": {\"type\": \"fits\", \"fits\": {\"path\": \"/data/in\"}},\n"
        "     \"queue\": {\"policy\": \"block\"}, \"sinks\": {\"jsonl\": {\"path\": \"/tmp/d.jsonl\"}}}\n"
        "  ]\n"
        "}\n";
    ck_assert_msg(load(json) == SS_OK, "%s", err);
    ss_config_defaults(&ref);
    setstr(ref.control_endpoint, "ipc:///tmp/ss-test-control", sizeof ref.control_endpoint);
    ref.n_feeds = 2;
    ss_feed_defaults(&ref.feeds[1]);
    setstr(ref.feeds[0].name, "cam1", SS_NAME_MAX);
    ref.feeds[0].source = SS_SOURCE_ZMQ;
    ref.feeds[0].zmq.socket = SS_ZMQ_SUB;
    ref.feeds[0].pipeline.reg_levels = 3;
    ref.feeds[0].pipeline.roi_x = 8;
    ref.feeds[0].pipeline.roi_y = 16;
    ref.feeds[0].pipeline.roi_w = 1000;
    ref.feeds[0].pipeline.roi_h = 900;
    setstr(ref.feeds[1].name, "cam2", SS_NAME_MAX);
    ref.feeds[1].source = SS_SOURCE_FITS;
    setstr(ref.feeds[1].fits.path, "/data/in", SS_PATH_MAX);
    ref.feeds[1].queue_policy = SS_QUEUE_BLOCK;
    setstr(ref.feeds[1].jsonl_path, "/tmp/d.jsonl", SS_PATH_MAX);
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);

    /* an empty object is the default config */
    ck_assert_int_eq(load("  {}\n"), SS_OK);
    ss_config_defaults(&ref);
    ck_assert(memcmp(&cfg, &ref, sizeof cfg) == 0);
    /* a buffer that carries its terminating NUL is accepted too */
    ck_assert_int_eq(ss_config_load_string("{}", 3, &cfg, err, sizeof err), SS_OK);
}
END_TEST

/* ======================================================================
 * error paths: each message names the key (or the file)
 * ==================================================================== */

START_TEST(test_unknown_keys)
{
    ASSERT_ERR("{\"log_levl\": \"info\"}", "log_levl: unknown key (did you mean \"log_level\"?)");
    ASSERT_ERR("{\"colour\": 1}", "colour: unknown key");
    ASSERT_ERR("{\"publish\": {\"bytes\": 1}}", "publish.bytes: unknown key");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"registraton\": {\"levels\": 2}}}]}",
               "feeds[0].pipeline.registraton: unknown key (did you mean \"registration\"?)");
    ASSERT_ERR("{\"feeds\": [{}, {\"name\": \"b\", \"pipeline\": {\"registration\": {\"levls\": 2}}}]}",
               "feeds[1].pipeline.registration.levls: unknown key (did you mean \"levels\"?)");
    ASSERT_ERR("{\"feeds\": [{\"sourc\": {}}]}",
               "feeds[0].sourc: unknown key (did you mean \"source\"?)");
    ASSERT_ERR("{\"fedes\": []}", "fedes: unknown key (did you mean \"feeds\"?)");
    /* feed keys are not top-level keys, and daemon keys are not feed keys */
    ASSERT_ERR("{\"pipeline\": {}}", "pipeline: unknown key");
    ASSERT_ERR("{\"feeds\": [{\"log_level\": \"info\"}]}", "feeds[0].log_level: unknown key");
    /* dotted names are not a second spelling of nested objects */
    ASSERT_ERR("{\"feeds\": [{\"pipeline.history\": 5}]}", "feeds[0].pipeline.history: unknown key");
    ASSERT_ERR("{\"log_level\": \"info\", \"log_level\": \"debug\"}", "log_level: duplicate key");
}
END_TEST

START_TEST(test_wrong_types)
{
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"history\": \"20\"}}]}",
               "feeds[0].pipeline.history: expected an integer, got a string");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"history\": 20.5}}]}",
               "feeds[0].pipeline.history: expected an integer, got 20.5");
    ASSERT_ERR("{\"publish\": {\"residuals\": 1}}",
               "publish.residuals: expected true or false, got a number");
    ASSERT_ERR("{\"status_interval\": null}", "status_interval: expected a number, got null");
    /* a nullable number: null is "not set", a string is not */
    ASSERT_ERR("{\"feeds\": [{\"name\": \"a\", \"pipeline\": {\"photometry\": {\"zeropoint\": \"25\"}}}]}",
               "feeds[0].pipeline.photometry.zeropoint: expected a number or null, got a string");
    ASSERT_ERR("{\"feeds\": [{\"name\": \"a\", \"pipeline\": {\"photometry\": {\"zeropoint\": 101}}}]}",
               "feeds[0].pipeline.photometry.zeropoint: 101 is out of range [-100, 100]");
    ASSERT_ERR("{\"feeds\": [{\"name\": \"a\", \"pipeline\": {\"photometry\": {\"band\": \"R|x\"}}}]}",
               "feeds[0].pipeline.photometry.band: \"R|x\" is not a band name (letters and digits)");
    ck_assert_int_eq(load("{\"feeds\": [{\"name\": \"a\", \"pipeline\": {\"photometry\": {\"zeropoint\": 24.5, \"band\": \"Rc\"}}}]}"), SS_OK);
    ck_assert_double_eq(cfg.feeds[0].pipeline.phot.zeropoint, 24.5);
    ck_assert_str_eq(cfg.feeds[0].pipeline.phot.band, "Rc");
    ck_assert_int_eq(load("{\"feeds\": [{\"name\": \"a\", \"pipeline\": {\"photometry\": {\"zeropoint\": null}}}]}"), SS_OK);
    ck_assert(isnan(cfg.feeds[0].pipeline.phot.zeropoint));
    ASSERT_ERR("{\"feeds\": [{\"name\": 7}]}", "feeds[0].name: expected a string, got a number");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"registration\": 5}}]}",
               "feeds[0].pipeline.registration: expected an object, got a number");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"whiten\": {\"mode\": 1}}}]}",
               "feeds[0].pipeline.whiten.mode: expected a string (one of: poly, lsq), got a number");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [1, 2, 3]}}]}",
               "feeds[0].pipeline.roi: expected an array of 4 integers [x, y, w, h], got an array of another length");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [1, 2, \"3\", 4]}}]}",
               "feeds[0].pipeline.roi[2]: expected an integer, got a string");
    ASSERT_ERR("{\"feeds\": {\"name\": \"x\"}}", "feeds: expected an array of feed objects, got an object");
    ASSERT_ERR("{\"feeds\": [{}, 3]}", "feeds[1]: expected an object, got a number");
    ASSERT_ERR("[1, 2]", "the top level must be a JSON object, got an array");
}
END_TEST

START_TEST(test_out_of_range)
{
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"registration\": {\"levels\": 9}}}]}",
               "feeds[0].pipeline.registration.levels: 9 is out of range [0, 5]");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"registration\": {\"levels\": -1}}}]}",
               "feeds[0].pipeline.registration.levels: -1 is out of range [0, 5]");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"whiten\": {\"forget\": 1.5}}}]}",
               "feeds[0].pipeline.whiten.forget: 1.5 is out of range [0.5, 1]");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"history\": 257}}]}",
               "feeds[0].pipeline.history: 257 is out of range [2, 256]");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [0, -4, 10, 10]}}]}",
               "feeds[0].pipeline.roi[1]: -4 is out of range [0, 65536]");
    ASSERT_ERR("{\"status_interval\": 0}", "status_interval: 0 is out of range [0.1, 3600]");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"synth\": {\"count\": -1}}}]}",
               "feeds[0].source.synth.count: -1 is out of range [0, 9007199254740992]");
    /* a huge number is not silently wrapped into an int */
    ASSERT_ERR("{\"feeds\": [{\"queue\": {\"depth\": 1e20}}]}",
               "feeds[0].queue.depth: 1e+20 is out of range [1, 1024]");
    char longname[SS_NAME_MAX + 40];
    snprintf(longname, sizeof longname, "{\"feeds\": [{\"name\": \"%064d\"}]}", 0);
    ASSERT_ERR(longname, "feeds[0].name: 64 characters, at most 63 are allowed");
}
END_TEST

START_TEST(test_bad_enums)
{
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"whiten\": {\"mode\": \"fast\"}}}]}",
               "feeds[0].pipeline.whiten.mode: \"fast\" is not one of: poly, lsq");
    ASSERT_ERR("{\"log_level\": \"loud\"}",
               "log_level: \"loud\" is not one of: err, warning, notice, info, debug");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"camera\"}}]}",
               "feeds[0].source.type: \"camera\" is not one of: synth, zmq, fits, indi");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"indi\", \"indi\": {\"active\": true}}}]}",
               "feeds[0].source.indi.device: required in active mode");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"indi\", \"indi\": {\"device\": \"a<b\"}}}]}",
               "feeds[0].source.indi: device and blob names may not hold < > & \"");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"indi\", \"indi\": {\"port\": 0}}}]}",
               "feeds[0].source.indi.port: 0 is out of range [1, 65535]");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"backend\": \"CUDA\"}}]}",
               "feeds[0].pipeline.backend: \"CUDA\" is not one of: auto, cpu, cuda");
}
END_TEST

START_TEST(test_invalid_json)
{
    ASSERT_ERR("{\n  \"log_level\": \"info\",\n  \"feeds\": [\n    {\"name\": \"a\",}\n  ]\n}\n",
               "invalid JSON at line 4, column 19 (near: {\"name\": \"a\",})");
    ASSERT_ERR("{\"log_level\": \"info\"} trailing", "invalid JSON at line 1, column 23 (near: level\": \"info\"} trailing)");
    ASSERT_ERR("", "invalid JSON at line 1, column 1 (unexpected end of input)");
    ASSERT_ERR("{\"a\": ", "invalid JSON at line 1, column 7 (unexpected end of input)");
    /* a truncated buffer: len stops inside the text */
    const char *t = "{\"log_level\": \"info\"}";
    ck_assert_int_eq(ss_config_load_string(t, 10, &cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_msg(strncmp(err, "invalid JSON at line 1", 22) == 0, "%s", err);
}
END_TEST

START_TEST(test_files)
{
    char path[64], want[256];
    /* missing */
    ck_assert_int_eq(ss_config_load_file("/nonexistent/skysieve/x.json", &cfg, err, sizeof err), SS_ERR_IO);
    ck_assert_str_eq(err, "/nonexistent/skysieve/x.json: cannot open: No such file or directory");
    /* a directory */
    ck_assert_int_eq(ss_config_load_file("/tmp", &cfg, err, sizeof err), SS_ERR_IO);
    ck_assert_str_eq(err, "/tmp: not a regular file");
    /* invalid JSON in a file: the file and the line */
    tmp_file(path, sizeof path, "{\n  \"log_level\": info\n}\n");
    ck_assert_int_eq(ss_config_load_file(path, &cfg, err, sizeof err), SS_ERR_CONFIG);
    snprintf(want, sizeof want, "%s: invalid JSON at line 2, column 16 (near: \"log_level\": info)", path);
    ck_assert_str_eq(err, want);
    unlink(path);
    /* a bad value in a file: the file and the key */
    tmp_file(path, sizeof path, "{\"feeds\": [{\"pipeline\": {\"registration\": {\"levels\": 9}}}]}");
    ck_assert_int_eq(ss_config_load_file(path, &cfg, err, sizeof err), SS_ERR_CONFIG);
    snprintf(want, sizeof want, "%s: feeds[0].pipeline.registration.levels: 9 is out of range [0, 5]", path);
    ck_assert_str_eq(err, want);
    unlink(path);
    /* unreadable (skipped as root, who reads anything) */
    if (geteuid() != 0) {
        tmp_file(path, sizeof path, "{}");
        chmod(path, 0);
        ck_assert_int_eq(ss_config_load_file(path, &cfg, err, sizeof err), SS_ERR_IO);
        snprintf(want, sizeof want, "%s: cannot open: Permission denied", path);
        ck_assert_str_eq(err, want);
        unlink(path);
    }
    /* a good file */
    tmp_file(path, sizeof path, "{\"feeds\": [{\"name\": \"cam\"}]}");
    ck_assert_int_eq(ss_config_load_file(path, &cfg, err, sizeof err), SS_OK);
    ck_assert_str_eq(cfg.feeds[0].name, "cam");
    unlink(path);
}
END_TEST

START_TEST(test_cross_checks)
{
    ASSERT_ERR("{\"feeds\": []}", "feeds: at least one feed is required");
    ASSERT_ERR("{\"feeds\": [{\"name\":\"a\"},{\"name\":\"b\"},{\"name\":\"c\"},{\"name\":\"d\"},"
               "{\"name\":\"e\"},{\"name\":\"f\"},{\"name\":\"g\"},{\"name\":\"h\"},{\"name\":\"i\"}]}",
               "feeds: 9 feeds given, at most 8 are supported");
    ASSERT_ERR("{\"feeds\": [{\"name\": \"a\"}, {\"name\": \"b\"}, {\"name\": \"a\"}]}",
               "feeds[2].name: \"a\" is also the name of feeds[0]");
    ASSERT_ERR("{\"feeds\": [{}, {}]}", "feeds[1].name: \"synth0\" is also the name of feeds[0]");
    ASSERT_ERR("{\"feeds\": [{\"name\": \"cam/1\"}]}",
               "feeds[0].name: \"cam/1\" is not a valid feed name (letters, digits, '_', '-', '.')");
    ASSERT_ERR("{\"feeds\": [{\"name\": \"\"}]}",
               "feeds[0].name: \"\" is not a valid feed name (letters, digits, '_', '-', '.')");
    /* PROTOCOL.md §2's rule: '.' is allowed */
    ck_assert_msg(load("{\"feeds\": [{\"name\": \"site-2.cam_1\"}]}") == SS_OK, "%s", err);
    ck_assert_str_eq(cfg.feeds[0].name, "site-2.cam_1");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"detect\": {\"thresh\": 4, \"thresh_low\": 4.5}}}]}",
               "feeds[0].pipeline.detect.thresh_low: 4.5 is above detect.thresh 4");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [0, 0, 100, 0]}}]}",
               "feeds[0].pipeline.roi: w and h must both be 0 (whole frame) or both positive");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [4000, 0, 100, 100]}}]}",
               "feeds[0].pipeline.roi: [4000, 0, 100, 100] reaches beyond limits.max_width x max_height 4096x4096");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"roi\": [1000, 0, 100, 100]}}]}",
               "feeds[0].pipeline.roi: [1000, 0, 100, 100] reaches beyond the 1024x1024 synthetic frames");
    ck_assert_int_eq(load("{\"feeds\": [{\"pipeline\": {\"roi\": [924, 0, 100, 1024]}}]}"), SS_OK);
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"history\": 8, \"min_history\": 9}}]}",
               "feeds[0].pipeline.min_history: 9 is above history 8");
    ASSERT_ERR("{\"feeds\": [{\"pipeline\": {\"history\": 4}}]}",
               "feeds[0].pipeline.history: 4 frames cannot fit the 6 terms of whiten.degree 2");
    ck_assert_int_eq(load("{\"feeds\": [{\"pipeline\": {\"history\": 4, \"whiten\": {\"degree\": 1}}}]}"), SS_OK);
    ASSERT_ERR("{\"feeds\": [{\"limits\": {\"max_width\": 65536, \"max_height\": 16385}}]}",
               "feeds[0].limits: 65536x16385 is more than 1073741824 pixels");
    ck_assert_int_eq(load("{\"feeds\": [{\"limits\": {\"max_width\": 65536, \"max_height\": 16384}}]}"), SS_OK);
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"synth\": {\"width\": 16, \"height\": 16, \"n_hot\": 65}}}]}",
               "feeds[0].source.synth.n_hot: 65 is more than a quarter of the pixels");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"synth\": {\"flux_min\": 10, \"flux_max\": 5}}}]}",
               "feeds[0].source.synth.flux_min: above flux_max");
    ASSERT_ERR("{\"feeds\": [{\"limits\": {\"max_width\": 512}}]}",
               "feeds[0].source.synth: 1024x1024 frames exceed limits.max_width x max_height 512x4096");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"zmq\", \"zmq\": {\"endpoint\": \"localhost:5559\"}}}]}",
               "feeds[0].source.zmq.endpoint: \"localhost:5559\" is not a ZeroMQ endpoint (transport://address)");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"fits\"}}]}",
               "feeds[0].source.fits.path: required in directory mode");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"glob\"}}}]}",
               "feeds[0].source.fits.pattern: required in glob mode");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"list\"}}}]}",
               "feeds[0].source.fits.list: required in list mode");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"fits\", \"fits\": {\"path\": \"/in\", \"after\": \"move\"}}}]}",
               "feeds[0].source.fits.move_dir: required when after is \"move\"");
    ASSERT_ERR("{\"feeds\": [{\"source\": {\"type\": \"fits\", \"fits\": {\"path\": \"/in\", \"after\": \"move\", "
               "\"move_dir\": \"/in\"}}}]}",
               "feeds[0].source.fits.move_dir: must differ from the watched path");
    ASSERT_ERR("{\"publish\": {\"endpoint\": \"tcp://127.0.0.1:9\"}, \"feeds\": [{\"source\": {\"type\": \"zmq\", "
               "\"zmq\": {\"endpoint\": \"tcp://127.0.0.1:9\"}}}]}",
               "feeds[0].source.zmq.endpoint: \"tcp://127.0.0.1:9\" is also bound as publish.endpoint");
    /* connecting to it is fine (another process may publish frames there) */
    ck_assert_int_eq(load("{\"publish\": {\"endpoint\": \"tcp://127.0.0.1:9\"}, \"feeds\": [{\"source\": "
                          "{\"type\": \"zmq\", \"zmq\": {\"endpoint\": \"tcp://127.0.0.1:9\", \"bind\": false}}}]}"),
                     SS_OK);
    ASSERT_ERR("{\"control\": {\"endpoint\": \"/run/ctl\"}}",
               "control.endpoint: \"/run/ctl\" is not a ZeroMQ endpoint (transport://address)");
    /* issue 11: no unauthenticated control socket open to other hosts */
    ASSERT_ERR("{\"control\": {\"endpoint\": \"tcp://0.0.0.0:5599\"}}",
               "control.endpoint: \"tcp://0.0.0.0:5599\" is reachable from other hosts: it needs "
               "CURVE (security.curve_key and security.client_keys), or bind it to "
               "tcp://127.0.0.1:PORT or ipc://");
    ASSERT_ERR("{\"control\": {\"endpoint\": \"tcp://eth0:5599\"}}",
               "control.endpoint: \"tcp://eth0:5599\" is reachable from other hosts: it needs "
               "CURVE (security.curve_key and security.client_keys), or bind it to "
               "tcp://127.0.0.1:PORT or ipc://");
    ck_assert_int_eq(load("{\"control\": {\"endpoint\": \"tcp://0.0.0.0:5599\"}, \"security\": "
                          "{\"curve_key\": \"/k/d.key\", \"client_keys\": \"/k/clients\"}}"),
                     SS_OK);
    ASSERT_ERR("{\"security\": {\"curve_key\": \"/k/d.key\"}}",
               "security.client_keys: required with security.curve_key");
    ck_assert_int_eq(load("{\"control\": {\"endpoint\": \"tcp://127.0.0.1:5599\"}}"), SS_OK);
    ck_assert_int_eq(load("{\"control\": {\"endpoint\": \"tcp://[::1]:5599\"}}"), SS_OK);
    ASSERT_ERR("{\"feeds\": [{\"name\": \"a\", \"sinks\": {\"jsonl\": {\"path\": \"/tmp/x\"}}}, "
               "{\"name\": \"b\", \"sinks\": {\"jsonl\": {\"path\": \"/tmp/x\"}}}]}",
               "feeds[1].sinks.jsonl.path: \"/tmp/x\" is also used by feeds[0]");
    /* empty endpoints switch the sockets off */
    ck_assert_int_eq(load("{\"control\": {\"endpoint\": \"\"}, \"publish\": {\"endpoint\": \"\"}}"), SS_OK);
}
END_TEST

/* Structs built in code are checked like loaded ones. */
START_TEST(test_validate_struct)
{
    ss_config_defaults(&cfg);
    cfg.feeds[0].pipeline.reg_levels = 9;
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_str_eq(err, "feeds[0].pipeline.registration.levels: 9 is out of range [0, 5]");
    ss_config_defaults(&cfg);
    cfg.feeds[0].pipeline.mode = (ss_whiten_mode_t)7;
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_str_eq(err, "feeds[0].pipeline.whiten.mode: value 7 is not one of: poly, lsq");
    ss_config_defaults(&cfg);
    cfg.feeds[0].pipeline.psf_sigma = NAN;
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_str_eq(err, "feeds[0].pipeline.psf_sigma: nan is out of range [0.3, 8]");
    ss_config_defaults(&cfg);
    cfg.n_feeds = 0;
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_str_eq(err, "feeds: at least one feed is required");
    ss_config_defaults(&cfg);
    cfg.publish_mask = 2;
    ck_assert_int_eq(ss_config_validate(&cfg, err, sizeof err), SS_ERR_CONFIG);
    ck_assert_str_eq(err, "publish.residual_mask: 2 is not a boolean (0 or 1)");
}
END_TEST

/* ======================================================================
 * reload rules
 * ==================================================================== */

START_TEST(test_reload_diff)
{
    ss_config_t *neu = malloc(sizeof *neu);
    char which[128];
    ss_config_defaults(&ref);
    ss_config_defaults(neu);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 0);
    ck_assert_str_eq(which, "");

    /* reloadable changes only */
    neu->log_level = SS_LOG_DEBUG;
    neu->feeds[0].pipeline.history = 30;
    neu->feeds[0].pipeline.reg_levels = 3;
    setstr(neu->feeds[0].jsonl_path, "/tmp/a.jsonl", SS_PATH_MAX);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 0);

    /* one fixed key in a feed */
    setstr(neu->feeds[0].zmq.endpoint, "tcp://127.0.0.1:1", SS_ENDPOINT_MAX);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 1);
    ck_assert_str_eq(which, "feeds[0].source.zmq.endpoint");
    /* plus a daemon key: that one is named first, both counted */
    neu->publish_budget *= 2;
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 2);
    ck_assert_str_eq(which, "publish.byte_budget");

    /* apply: reloadable keys taken, the others kept */
    ss_config_apply_reloadable(&ref, neu);
    ck_assert_int_eq(ref.log_level, SS_LOG_DEBUG);
    ck_assert_int_eq(ref.feeds[0].pipeline.history, 30);
    ck_assert_int_eq(ref.feeds[0].pipeline.reg_levels, 3);
    ck_assert_str_eq(ref.feeds[0].jsonl_path, "/tmp/a.jsonl");
    ck_assert_str_eq(ref.feeds[0].zmq.endpoint, "tcp://127.0.0.1:5559");
    ck_assert(ref.publish_budget == 268435456u);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, NULL, 0), 2);

    /* a second feed, or a renamed one */
    ss_config_defaults(&ref);
    ss_config_defaults(neu);
    neu->n_feeds = 2;
    ss_feed_defaults(&neu->feeds[1]);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 1);
    ck_assert_str_eq(which, "feeds");
    neu->n_feeds = 1;
    setstr(neu->feeds[0].name, "other", SS_NAME_MAX);
    ck_assert_int_eq(ss_config_diff_nonreloadable(&ref, neu, which, sizeof which), 1);
    ck_assert_str_eq(which, "feeds[0].name");

    /* the reload flags the daemon relies on */
    ck_assert_int_eq(key(SS_SCOPE_DAEMON, "control.endpoint")->reloadable, 0);
    ck_assert_int_eq(key(SS_SCOPE_DAEMON, "log_level")->reloadable, 1);
    ck_assert_int_eq(key(SS_SCOPE_FEED, "source.type")->reloadable, 0);
    ck_assert_int_eq(key(SS_SCOPE_FEED, "limits.max_width")->reloadable, 0);
    ck_assert_int_eq(key(SS_SCOPE_FEED, "pipeline.detect.thresh")->reloadable, 1);
    free(neu);
}
END_TEST

/* ======================================================================
 * docs and derived values
 * ==================================================================== */

START_TEST(test_markdown)
{
    char *md = ss_config_doc_markdown();
    ck_assert_ptr_nonnull(md);
    ck_assert_ptr_nonnull(strstr(md, "| Key | Type | Default | Range or values | Reload | Meaning |\n"));
    ck_assert_ptr_nonnull(strstr(md, "| `pipeline.registration.levels` | integer | `2` | 0 to 5 | yes | "));
    ck_assert_ptr_nonnull(strstr(md, "| `pipeline.whiten.mode` | enum | `\"poly\"` | poly, lsq | yes | "));
    ck_assert_ptr_nonnull(strstr(md, "| `control.endpoint` | string | `\"ipc:///run/skysieve/control\"` | up to 255 characters | no | "));
    ck_assert_ptr_nonnull(strstr(md, "| `pipeline.roi` | [x, y, w, h] | `[0, 0, 0, 0]` | 0 to 65536 each | yes | "));
    /* one row per key, each row a table row of 6 cells */
    for (int s = 0; s < 2; s++) {
        size_t n;
        const ss_config_key_t *k = ss_config_keys((ss_key_scope_t)s, &n);
        for (size_t i = 0; i < n; i++) {
            char cell[160];
            snprintf(cell, sizeof cell, "\n| `%s` |", k[i].path);
            const char *row = strstr(md, cell);
            ck_assert_msg(row != NULL, "no row for %s", k[i].path);
            ck_assert_ptr_null(strstr(row + 1, cell));
            int bars = 0;
            for (const char *p = row + 1; *p && *p != '\n'; p++)
                bars += *p == '|' && p[-1] != '\\';
            ck_assert_msg(bars == 7, "%s: %d cell borders", k[i].path, bars);
        }
    }
    free(md);
}
END_TEST

START_TEST(test_derived)
{
    ss_config_defaults(&cfg);
    ss_feed_cfg_t *f = &cfg.feeds[0];
    ck_assert_uint_eq(ss_feed_max_pixel_bytes(f), 4096u * 4096u * 4u);
    ck_assert_uint_eq(ss_feed_max_message_bytes(f), 65536u + 4096u * 4096u * 5u);
    ss_synth_cfg_t g;
    ss_feed_synth_cfg(f, &g);
    ck_assert(g.frame_interval == 0.5);
    ck_assert_int_eq(g.width, 1024);
    f->synth.rate = 0.0;
    ss_feed_synth_cfg(f, &g);
    ck_assert(g.frame_interval == 1.0);
    f->synth.gen.frame_interval = 0.25;
    ss_feed_synth_cfg(f, &g);
    ck_assert(g.frame_interval == 0.25);
    /* 256 MiB over 1024² residual messages of 5 bytes a pixel: 51 */
    ck_assert_int_eq(ss_publish_sndhwm(268435456u, 1024u * 1024u * 5u), 51);
    ck_assert_int_eq(ss_publish_sndhwm(1048576u, 100u * 1048576u), SS_PUBLISH_MIN_HWM);
    ck_assert_int_eq(ss_publish_sndhwm(1ull << 40, 1), 2147483647);
    ck_assert_str_eq(ss_source_type_name(SS_SOURCE_FITS), "fits");
    ck_assert_str_eq(ss_queue_policy_name(SS_QUEUE_BLOCK), "block");
    ck_assert_str_eq(ss_source_type_name((ss_source_type_t)9), "?");
}
END_TEST

/* ss_feed_pipeline_cfg: a feed's pipeline keys, and the feeds that may
 * run on its CUDA device (cuda or auto, the same device). */
START_TEST(test_feed_pipeline_cfg)
{
    const char *json =
        "{\"feeds\": [\n"
        "  {\"name\": \"a\", \"pipeline\": {\"backend\": \"cuda\", \"history\": 7}},\n"
        "  {\"name\": \"b\", \"pipeline\": {\"backend\": \"auto\"}},\n"
        "  {\"name\": \"c\", \"pipeline\": {\"backend\": \"cpu\"}},\n"
        "  {\"name\": \"d\", \"pipeline\": {\"backend\": \"cuda\", \"device\": 1}},\n"
        "  {\"name\": \"e\", \"pipeline\": {\"backend\": \"cpu\", \"device\": 2}}]}";
    ck_assert_msg(load(json) == SS_OK, "%s", err);
    static const int want[] = { 2, 2, 2, 1, 1 };
    for (int i = 0; i < 5; i++) {
        const ss_pipeline_cfg_t p = ss_feed_pipeline_cfg(&cfg, i);
        ck_assert_msg(p.device_feeds == want[i], "feed %d: device_feeds %d, want %d", i,
                      p.device_feeds, want[i]);
        ck_assert_int_eq(p.history, cfg.feeds[i].pipeline.history);
        ck_assert_int_eq(p.backend, cfg.feeds[i].pipeline.backend);
        /* the config itself is left as loaded */
        ck_assert_int_eq(cfg.feeds[i].pipeline.device_feeds, 0);
    }
    ck_assert_int_eq(ss_feed_pipeline_cfg(&cfg, 0).history, 7);
}
END_TEST

/* ss_config_check_paths: every path key, missing, of the wrong kind and
 * usable; the error names the key and the reason. */
START_TEST(test_check_paths)
{
    char root[] = "/tmp/check_paths_XXXXXX", p[512], json[2048], file[600];
    ck_assert_ptr_nonnull(mkdtemp(root));
    snprintf(file, sizeof file, "%s/plain", root);
    FILE *fp = fopen(file, "w");
    ck_assert_ptr_nonnull(fp);
    fclose(fp);
    static const struct { const char *fmt, *want; } bad[] = {
        { "\"sinks\": {\"fits\": {\"dir\": \"%s/none\"}}", "feeds[0].sinks.fits.dir: " },
        { "\"sinks\": {\"fits\": {\"dir\": \"%s/plain\"}}", "is not a directory" },
        { "\"sinks\": {\"jsonl\": {\"path\": \"%s/none/d.jsonl\"}}", "feeds[0].sinks.jsonl.path: " },
        { "\"sinks\": {\"ds9\": {\"dir\": \"%s/none\"}}", "feeds[0].sinks.ds9.dir: " },
        { "\"sinks\": {\"iod\": {\"path\": \"%s/none/obs.iod\"}}", "feeds[0].sinks.iod.path: " },
        { "\"sinks\": {\"ades\": {\"path\": \"%s/none/obs.psv\"}}", "feeds[0].sinks.ades.path: " },
        { "\"source\": {\"type\": \"fits\", \"fits\": {\"path\": \"%s/none\"}}",
          "feeds[0].source.fits.path: " },
        { "\"source\": {\"type\": \"fits\", \"fits\": {\"mode\": \"list\", \"list\": \"%s/none.txt\"}}",
          "feeds[0].source.fits.list: " },
        { "\"source\": {\"type\": \"fits\", \"fits\": {\"path\": \"%s\", \"after\": \"move\","
          " \"move_dir\": \"%s/none\"}}", "feeds[0].source.fits.move_dir: " },
        { "\"wcs\": {\"solve\": true, \"solve_program\": \"no-such-solve-field-%.0s\"}",
          "feeds[0].wcs.solve: \"no-such-solve-field-\" is not found on PATH" },
        { "\"wcs\": {\"solve\": true, \"solve_program\": \"%s/plain\"}",
          "feeds[0].wcs.solve: " },
        { "\"wcs\": {\"solve\": true, \"solve_program\": \"/bin/true\", \"solve_index_dir\": \"%s/none\"}",
          "feeds[0].wcs.solve_index_dir: " },
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        char member[1024];
        snprintf(member, sizeof member, bad[k].fmt, root, root);
        snprintf(json, sizeof json, "{\"feeds\": [{\"name\": \"f0\", %s}]}", member);
        ck_assert_msg(load(json) == SS_OK, "%s: %s", json, err);
        ck_assert_int_eq(ss_config_check_paths(&cfg, err, sizeof err), SS_ERR_CONFIG);
        ck_assert_msg(strstr(err, bad[k].want), "%s: got '%s', want '%s'", json, err, bad[k].want);
    }
    /* wcs.solve off: the program is not looked for */
    snprintf(json, sizeof json, "{\"feeds\": [{\"name\": \"f0\", \"wcs\": {\"solve_program\": "
             "\"no-such-solve-field\"}}]}");
    ck_assert_msg(load(json) == SS_OK, "%s", err);
    ck_assert_msg(ss_config_check_paths(&cfg, err, sizeof err) == SS_OK, "%s", err);
    /* the scale bounds: both or neither, low <= high (ss_config_validate) */
    ck_assert_int_eq(load("{\"feeds\": [{\"name\": \"f0\", \"wcs\": {\"solve_scale_low\": 5}}]}"),
                     SS_ERR_CONFIG);
    ck_assert_ptr_nonnull(strstr(err, "wcs.solve_scale_high"));
    ck_assert_int_eq(load("{\"feeds\": [{\"name\": \"f0\", \"wcs\": {\"solve_scale_low\": 5,"
                          " \"solve_scale_high\": 4}}]}"), SS_ERR_CONFIG);
    ck_assert_int_eq(load("{\"feeds\": [{\"name\": \"f0\", \"wcs\": {\"solve_scale_low\": 5,"
                          " \"solve_scale_high\": 6}}]}"), SS_OK);
    /* all there: fine */
    snprintf(p, sizeof p, "%s/res", root);
    ck_assert_int_eq(mkdir(p, 0700), 0);
    snprintf(json, sizeof json,
             "{\"feeds\": [{\"name\": \"f0\", \"source\": {\"type\": \"fits\", \"fits\": {\"path\": "
             "\"%s\", \"after\": \"move\", \"move_dir\": \"%s\"}}, \"sinks\": {\"fits\": {\"dir\": "
             "\"%s\"}, \"jsonl\": {\"path\": \"%s/d.jsonl\"}}}]}", root, p, p, root);
    ck_assert_msg(load(json) == SS_OK, "%s", err);
    ck_assert_msg(ss_config_check_paths(&cfg, err, sizeof err) == SS_OK, "%s", err);
    ck_assert_int_eq(rmtree(root), 0);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *t = tcase_create("table");
    tcase_add_test(t, test_table_well_formed);
    tcase_add_test(t, test_table_covers_pipeline);
    tcase_add_test(t, test_pipeline_defaults);
    tcase_add_test(t, test_default_config);
    suite_add_tcase(s, t);
    t = tcase_create("roundtrip");
    tcase_add_test(t, test_default_roundtrip);
    tcase_add_test(t, test_every_key_roundtrip);
    tcase_add_test(t, test_example_file);
    tcase_add_test(t, test_partial_config);
    suite_add_tcase(s, t);
    t = tcase_create("errors");
    tcase_add_test(t, test_unknown_keys);
    tcase_add_test(t, test_wrong_types);
    tcase_add_test(t, test_out_of_range);
    tcase_add_test(t, test_bad_enums);
    tcase_add_test(t, test_invalid_json);
    tcase_add_test(t, test_files);
    tcase_add_test(t, test_cross_checks);
    tcase_add_test(t, test_check_paths);
    tcase_add_test(t, test_validate_struct);
    suite_add_tcase(s, t);
    t = tcase_create("reload_docs");
    tcase_add_test(t, test_reload_diff);
    tcase_add_test(t, test_markdown);
    tcase_add_test(t, test_derived);
    tcase_add_test(t, test_feed_pipeline_cfg);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return ss_run_suite(config_suite());
}
