/*
 * outsubs.h — which residual forms the subscribers ask for, from the
 * subscriptions the XPUB passes up (PROTOCOL.md §5a).
 *
 * An XPUB without XPUB_VERBOSE passes up each topic prefix's first
 * subscription and its last unsubscription (a closed connection's
 * included), so the prefixes held form a set. A form of a feed is wanted
 * while a held prefix is a prefix of its topic and names the form: at
 * least "<form>." ("residual16.", "stamps.", ...), so that a subscriber to
 * everything ("") receives the forms others asked for but does not make
 * them. The float32 residual of "residual.<feed>" counts any prefix, ""
 * included (publish.residual_on_demand: what it always received).
 *
 * The publisher thread's alone (ss_outsubs_note from its subscription
 * poll); the workers read the result through ss_daemon_t.out_wanted.
 */
#ifndef SS_OUTSUBS_H
#define SS_OUTSUBS_H

#include <stddef.h>

#include "proto/proto.h"

/* Bits of ss_outsubs_wanted: 1 << ss_residual_form_t, and the stamps. */
#define SS_WANT_FORM(f) (1u << (f))
#define SS_WANT_STAMPS (1u << SS_FORM__COUNT)

typedef struct ss_outsubs ss_outsubs_t;

ss_outsubs_t *ss_outsubs_new(void);
void ss_outsubs_destroy(ss_outsubs_t **s);

/* A (un)subscription of the topic prefix topic[0..len) passed up. Returns
 * 1 when the set changed. */
int ss_outsubs_note(ss_outsubs_t *s, int subscribe, const void *topic, size_t len);

/* The forms subscribed for feed: SS_WANT_* bits. */
unsigned ss_outsubs_wanted(const ss_outsubs_t *s, const char *feed);

#endif
