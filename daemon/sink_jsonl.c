/*
 * sink_jsonl.c — detections as JSON lines: one self-contained line per
 * detection, in proto/'s "JSON lines" form (the frame's feed, series, seq,
 * times, status and sigma, then the detection's members) — the same lines
 * skysieve-sub prints, so one parser reads both — and, with
 * sinks.jsonl.tracks, a frame's track reports as one more line: its tracks
 * message body ("type": "tracks"), as skysieve-sub --json --tracks prints
 * it. A frame's lines are written together and flushed once per frame;
 * frames with neither write nothing (the messages and the counters cover
 * those).
 */
#include "daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "jsonl-sink"
#define LINE_MAX_BYTES 16384        /* one detection line; ~1 KB in practice */

struct ss_jsonl {
    FILE *fp;
    char path[SS_PATH_MAX];
    char buf[LINE_MAX_BYTES];
    char *tbuf;                     /* the tracks line, grown to its bound */
    size_t tcap;
};

ss_jsonl_t *ss_jsonl_open(const char *path)
{
    ss_jsonl_t *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->fp = fopen(path, "a");
    if (!j->fp) {
        SS_LOG(SS_LOG_ERR, TAG, "cannot open %s: %s", path, strerror(errno));
        free(j);
        return NULL;
    }
    ss_strlcpy(j->path, path, sizeof j->path);
    return j;
}

void ss_jsonl_close(ss_jsonl_t **pj)
{
    if (!pj || !*pj)
        return;
    ss_jsonl_t *j = *pj;
    if (fclose(j->fp) != 0)
        SS_LOG(SS_LOG_ERR, TAG, "closing %s: %s", j->path, strerror(errno));
    free(j->tbuf);
    free(j);
    *pj = NULL;
}

const char *ss_jsonl_path(const ss_jsonl_t *j)
{
    return j->path;
}

/* res's tracks message body as one line; 0 written, 1 on failure. */
static int write_tracks(ss_jsonl_t *j, const ss_result_t *res)
{
    size_t need = ss_proto_tracks_bound(res) + 2;
    if (need > j->tcap) {
        char *nb = realloc(j->tbuf, need);
        if (!nb)
            return 1;
        j->tbuf = nb;
        j->tcap = need;
    }
    int len = ss_proto_encode_tracks(res, j->tbuf, j->tcap - 1);
    if (len < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: frame %llu: tracks do not encode", j->path,
               (unsigned long long)res->meta.seq);
        return 1;
    }
    j->tbuf[len++] = '\n';
    return fwrite(j->tbuf, 1, (size_t)len, j->fp) != (size_t)len;
}

int ss_jsonl_write(ss_jsonl_t *j, const ss_result_t *res, int tracks)
{
    int failed = 0;
    for (int i = 0; i < res->dets.count; i++) {
        int len = ss_proto_encode_detection_line(res, i, j->buf, sizeof j->buf - 1);
        if (len < 0) {
            SS_LOG(SS_LOG_ERR, TAG, "%s: frame %llu detection %d does not encode", j->path,
                   (unsigned long long)res->meta.seq, i);
            failed++;
            continue;
        }
        j->buf[len++] = '\n';
        if (fwrite(j->buf, 1, (size_t)len, j->fp) != (size_t)len)
            failed++;
    }
    const int track_line = tracks && res->tracks.count > 0;
    if (track_line)
        failed += write_tracks(j, res);
    if (fflush(j->fp) != 0)
        failed++;
    if (failed) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: write failed: %s", j->path, strerror(errno));
        clearerr(j->fp);
        return -1;
    }
    return res->dets.count + track_line;
}
