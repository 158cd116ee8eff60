/*
 * sink_jsonl.c — detections as JSON lines: one line per processed frame,
 * the detections body of proto/PROTOCOL.md (so a line reads exactly like a
 * detections message), appended and flushed line by line.
 *
 * The encode buffer grows to the largest body seen (once, not per frame).
 */
#include "daemon.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAG "jsonl-sink"

struct ss_jsonl {
    FILE *fp;
    char path[SS_PATH_MAX];
    char *buf;
    size_t cap;
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
    free(j->buf);
    free(j);
    *pj = NULL;
}

const char *ss_jsonl_path(const ss_jsonl_t *j)
{
    return j->path;
}

int ss_jsonl_write(ss_jsonl_t *j, const ss_result_t *res)
{
    size_t need = ss_proto_detections_bound(res) + 1;
    if (need > j->cap) {
        char *nb = realloc(j->buf, need);
        if (!nb) {
            SS_LOG(SS_LOG_ERR, TAG, "%s: out of memory", j->path);
            return -1;
        }
        j->buf = nb;
        j->cap = need;
    }
    int len = ss_proto_encode_detections(res, j->buf, j->cap - 1);
    if (len < 0) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: frame %llu does not encode", j->path,
               (unsigned long long)res->meta.seq);
        return -1;
    }
    j->buf[len++] = '\n';
    if (fwrite(j->buf, 1, (size_t)len, j->fp) != (size_t)len || fflush(j->fp) != 0) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: write failed: %s", j->path, strerror(errno));
        clearerr(j->fp);
        return -1;
    }
    return 0;
}
