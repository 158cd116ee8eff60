/*
 * outsubs.c — the topic prefixes held, and the residual forms they ask
 * for (outsubs.h).
 */
#include "outsubs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/ss_common.h"

#define TAG "publisher"
/* Longer prefixes cannot be a prefix of any form's topic (the longest
 * type, its dot and a feed name of SS_NAME_MAX - 1 bytes). */
#define PREFIX_MAX (SS_PROTO_TOPIC_MAX)
#define HELD_MAX 8192               /* prefixes kept (the guard caps far lower by default) */

typedef struct prefix {
    char s[PREFIX_MAX];
    size_t len;
} prefix_t;

struct ss_outsubs {
    prefix_t *held;
    int n, cap;
    int full_logged;
};

ss_outsubs_t *ss_outsubs_new(void)
{
    return calloc(1, sizeof(ss_outsubs_t));
}

void ss_outsubs_destroy(ss_outsubs_t **ps)
{
    if (!ps || !*ps)
        return;
    free((*ps)->held);
    free(*ps);
    *ps = NULL;
}

static int find(const ss_outsubs_t *s, const void *topic, size_t len)
{
    for (int i = 0; i < s->n; i++)
        if (s->held[i].len == len && memcmp(s->held[i].s, topic, len) == 0)
            return i;
    return -1;
}

int ss_outsubs_note(ss_outsubs_t *s, int subscribe, const void *topic, size_t len)
{
    if (!s || len >= PREFIX_MAX)
        return 0;
    const int i = find(s, topic, len);
    if (!subscribe) {
        if (i < 0)
            return 0;
        s->held[i] = s->held[--s->n];
        return 1;
    }
    if (i >= 0)
        return 0;
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 16;
        prefix_t *h = cap <= HELD_MAX ? realloc(s->held, (size_t)cap * sizeof *h) : NULL;
        if (!h) {
            if (!s->full_logged++)
                SS_LOG(SS_LOG_WARNING, TAG, "%d topic prefixes held: further ones ask for no "
                       "residual form", s->n);
            return 0;
        }
        s->held = h;
        s->cap = cap;
    }
    memcpy(s->held[s->n].s, topic, len);
    s->held[s->n++].len = len;
    return 1;
}

/* Whether a held prefix is a prefix of "<type>.<feed>" at least
 * min_len bytes long. */
static int asks(const ss_outsubs_t *s, const char *type, const char *feed, size_t min_len)
{
    char topic[PREFIX_MAX];
    const int tl = snprintf(topic, sizeof topic, "%s.%s", type, feed);
    if (tl < 0 || (size_t)tl >= sizeof topic)
        return 0;
    for (int i = 0; i < s->n; i++)
        if (s->held[i].len >= min_len && s->held[i].len <= (size_t)tl &&
            memcmp(s->held[i].s, topic, s->held[i].len) == 0)
            return 1;
    return 0;
}

unsigned ss_outsubs_wanted(const ss_outsubs_t *s, const char *feed)
{
    if (!s)
        return 0;
    unsigned w = 0;
    for (int f = 0; f < SS_FORM__COUNT; f++) {
        const char *type = ss_proto_form_name((ss_residual_form_t)f);
        const size_t min_len = f == SS_FORM_F32 ? 0 : strlen(type) + 1;
        if (asks(s, type, feed, min_len))
            w |= SS_WANT_FORM(f);
    }
    if (asks(s, "stamps", feed, strlen("stamps.")))
        w |= SS_WANT_STAMPS;
    return w;
}
