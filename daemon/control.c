/*
 * control.c — answers the control socket's JSON requests (proto/PROTOCOL.md
 * "Control"), on the main thread:
 *   status  version, uptime and a per-feed summary;
 *   stats   every counter of every feed (or of "feed");
 *   reset   forget the history of "feed" (every feed when absent), before
 *           its next frame;
 *   reload  read the config file again (as SIGHUP does); the reason when
 *           it is rejected;
 *   config  the effective (running) config, as --print-default-config
 *           prints one.
 * A request that does not decode (not JSON, unknown command, wrong field)
 * gets {"ok": false, "error": ...} with proto/'s error text.
 */
#include "daemon.h"

#include <stdlib.h>
#include <string.h>

#define TAG "control"
#define BODY_MAX (256u * 1024u)

static int find_feed(ss_daemon_t *d, const char *name)
{
    for (int i = 0; i < d->n_feeds; i++)
        if (strcmp(d->feeds[i].name, name) == 0)
            return i;
    return -1;
}

static int status_reply(ss_daemon_t *d, const ss_ctl_request_t *r, int full, char *buf, size_t n)
{
    const char *cmd = ss_ctl_cmd_name(r->cmd);
    ss_proto_status_t *st = malloc(sizeof *st);
    char *body = malloc(BODY_MAX);
    int len = -1;
    if (!st || !body) {
        len = ss_proto_encode_error_response(cmd, "out of memory", buf, n);
        goto out;
    }
    ss_daemon_status(d, st);
    if (r->feed[0]) {
        int i = find_feed(d, r->feed);
        st->feeds[0] = st->feeds[i];
        st->n_feeds = 1;
    }
    if (ss_proto_encode_status_body(st, full, body, BODY_MAX) < 0)
        len = ss_proto_encode_error_response(cmd, "status does not encode", buf, n);
    else
        len = ss_proto_encode_response(cmd, body, buf, n);
out:
    free(st);
    free(body);
    return len;
}

static int config_reply(ss_daemon_t *d, char *buf, size_t n)
{
    char *json = ss_config_to_json(&d->cfg);    /* the main thread's own */
    if (!json)
        return ss_proto_encode_error_response("config", "out of memory", buf, n);
    /* the config is a JSON object: it becomes the member "config" */
    size_t jl = strlen(json);
    char *body = malloc(jl + 16);
    int len;
    if (!body) {
        len = ss_proto_encode_error_response("config", "out of memory", buf, n);
    } else {
        snprintf(body, jl + 16, "{\"config\":%s}", json);
        len = ss_proto_encode_response("config", body, buf, n);
    }
    free(body);
    free(json);
    return len;
}

int ss_control_handle(ss_daemon_t *d, const void *req, size_t len, char *buf, size_t n)
{
    ss_ctl_request_t r;
    ss_proto_error_t err;
    if (ss_proto_decode_request(req, len, &r, &err) != SS_OK) {
        SS_LOG(SS_LOG_INFO, TAG, "bad request: %s", err.text);
        return ss_proto_encode_error_response(NULL, err.text, buf, n);
    }
    const char *cmd = ss_ctl_cmd_name(r.cmd);
    if (r.feed[0] && find_feed(d, r.feed) < 0) {
        char text[SS_PROTO_ERR_MAX];
        snprintf(text, sizeof text, "no feed named \"%s\"", r.feed);
        return ss_proto_encode_error_response(cmd, text, buf, n);
    }
    SS_LOG(SS_LOG_DEBUG, TAG, "request %s%s%s", cmd, r.feed[0] ? " " : "", r.feed);
    switch (r.cmd) {
    case SS_CTL_STATUS:
        return status_reply(d, &r, 0, buf, n);
    case SS_CTL_STATS:
        return status_reply(d, &r, 1, buf, n);
    case SS_CTL_RESET: {
        /* the member "feeds" names the feeds reset (names are [A-Za-z0-9_-]:
         * nothing to escape) */
        char body[SS_MAX_FEEDS * (SS_NAME_MAX + 3) + 16];
        size_t at = (size_t)snprintf(body, sizeof body, "{\"feeds\":[");
        for (int i = 0; i < d->n_feeds; i++)
            if (!r.feed[0] || strcmp(r.feed, d->feeds[i].name) == 0) {
                atomic_store(&d->feeds[i].reset_req, 1);
                SS_LOG(SS_LOG_NOTICE, TAG, "feed %s: history reset requested", d->feeds[i].name);
                at += (size_t)snprintf(body + at, sizeof body - at, "%s\"%s\"",
                                       body[at - 1] == '[' ? "" : ",", d->feeds[i].name);
            }
        snprintf(body + at, sizeof body - at, "]}");
        return ss_proto_encode_response(cmd, body, buf, n);
    }
    case SS_CTL_RELOAD: {
        char e[600];
        if (ss_daemon_reload(d, "control request", e, sizeof e) != 0)
            return ss_proto_encode_error_response(cmd, e, buf, n);
        return ss_proto_encode_response(cmd, NULL, buf, n);
    }
    case SS_CTL_CONFIG:
        return config_reply(d, buf, n);
    default:
        return ss_proto_encode_error_response(cmd, "unknown command", buf, n);
    }
}
