/*
 * detection.c — the detection kinds' names and the fixed-capacity list of
 * detections a frame produces (detection.h). The list is allocated once,
 * when a pipeline result slot is created; per frame it is only cleared and
 * appended to, so nothing is allocated on the per-frame path.
 */
#include "detection.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[] = {
    [SS_KIND_POINT] = "point",
    [SS_KIND_STREAK] = "streak",
    [SS_KIND_COSMIC] = "cosmic",
};
#define KIND_COUNT ((int)(sizeof kind_names / sizeof kind_names[0]))

const char *ss_kind_name(ss_kind_t k)
{
    /* An out-of-range value is a bug upstream; still never return NULL so
     * that a log line or a JSON field cannot crash on it. */
    if ((int)k < 0 || (int)k >= KIND_COUNT)
        return "unknown";
    return kind_names[k];
}

int ss_kind_parse(const char *s, ss_kind_t *k)
{
    if (!s)
        return -1;
    for (int i = 0; i < KIND_COUNT; i++) {
        if (strcmp(s, kind_names[i]) == 0) {
            if (k)
                *k = (ss_kind_t)i;
            return 0;
        }
    }
    return -1;
}

int ss_detlist_init(ss_detlist_t *l, int capacity)
{
    if (!l)
        return -1;
    memset(l, 0, sizeof *l);
    if (capacity < 0)
        return -1;
    if (capacity > 0) {
        l->items = calloc((size_t)capacity, sizeof *l->items);
        if (!l->items)
            return -1;
    }
    l->capacity = capacity;
    return 0;
}

void ss_detlist_free(ss_detlist_t *l)
{
    if (!l)
        return;
    free(l->items);
    memset(l, 0, sizeof *l);
}

void ss_detlist_clear(ss_detlist_t *l)
{
    if (!l)
        return;
    l->count = 0;
    l->truncated = 0;
}

ss_detection_t *ss_detlist_push(ss_detlist_t *l)
{
    if (l->count >= l->capacity) {
        l->truncated++;
        return NULL;
    }
    ss_detection_t *d = &l->items[l->count++];
    memset(d, 0, sizeof *d);
    d->mag = d->mag_err = NAN;
    return d;
}
