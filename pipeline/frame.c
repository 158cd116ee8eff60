/*
 * frame.c — frame helpers and the frame pool (a free-list under a mutex).
 */
#include "frame.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct ss_frame_pool {
    pthread_mutex_t lock;
    int count;
    int nfree;
    size_t max_bytes;
    ss_frame_t *frames;
    ss_frame_t **free_list;
    uint8_t **mask_bufs;        /* per frame, max_mask bytes (NULL when max_mask is 0) */
    size_t max_mask;
    ss_host_allocator_t alloc;
};

size_t ss_frame_bytes(const ss_frame_t *f)
{
    return (size_t)f->width * (size_t)f->height * ss_dtype_size(f->dtype);
}

void ss_frame_meta_clear(ss_frame_meta_t *m)
{
    memset(m, 0, sizeof *m);
    m->mjd_obs = NAN;
}

void ss_input_name(char *dst, size_t n, const char *path)
{
    if (n == 0)
        return;
    const char *slash = strrchr(path, '/');
    const unsigned char *s = (const unsigned char *)(slash ? slash + 1 : path);
    size_t o = 0, left = strlen((const char *)s);
    while (left > 0) {
        int len = ss_utf8_char_len(s, left);
        if (len == 1 && (*s < 0x20 || *s == 0x7F))
            len = 0;                    /* a control character */
        const size_t want = len ? (size_t)len : 1;
        if (o + want >= n)
            break;
        if (len)
            memcpy(dst + o, s, want);
        else
            dst[o] = '?';
        o += want;
        s += want;
        left -= want;
    }
    dst[o] = '\0';
}

double ss_frame_mid_mjd(const ss_frame_meta_t *m)
{
    return isfinite(m->mjd_obs) ? m->mjd_obs + m->exposure / 2.0 / 86400.0 : NAN;
}

const ss_wcs_key_t *ss_frame_wcs_find(const ss_frame_meta_t *m, const char *key)
{
    for (int i = 0; i < m->n_wcs; i++)
        if (strcmp(m->wcs[i].key, key) == 0)
            return &m->wcs[i];
    return NULL;
}

static void *malloc_alloc(size_t n, void *u)
{
    (void)u;
    return malloc(n);
}

static void malloc_free(void *p, void *u)
{
    (void)u;
    free(p);
}

ss_frame_pool_t *ss_frame_pool_new(int count, size_t max_bytes, size_t max_mask,
                                   const ss_host_allocator_t *alloc)
{
    if (count <= 0 || max_bytes == 0)
        return NULL;
    ss_frame_pool_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    p->alloc = alloc ? *alloc : (ss_host_allocator_t){ malloc_alloc, malloc_free, NULL };
    p->count = count;
    p->max_bytes = max_bytes;
    p->max_mask = max_mask;
    p->frames = calloc((size_t)count, sizeof *p->frames);
    p->free_list = calloc((size_t)count, sizeof *p->free_list);
    p->mask_bufs = calloc((size_t)count, sizeof *p->mask_bufs);
    if (!p->frames || !p->free_list || !p->mask_bufs)
        goto fail;
    for (int i = 0; i < count; i++) {
        ss_frame_t *f = &p->frames[i];
        f->pixels = p->alloc.alloc(max_bytes, p->alloc.user);
        if (max_mask)
            p->mask_bufs[i] = malloc(max_mask);
        if (!f->pixels || (max_mask && !p->mask_bufs[i]))
            goto fail;
        f->capacity = max_bytes;
        f->pool = p;
        p->free_list[p->nfree++] = f;
    }
    return p;
fail:
    ss_frame_pool_destroy(&p);
    return NULL;
}

void ss_frame_pool_destroy(ss_frame_pool_t **pp)
{
    if (!pp || !*pp)
        return;
    ss_frame_pool_t *p = *pp;
    for (int i = 0; p->frames && i < p->count; i++) {
        if (p->frames[i].pixels)
            p->alloc.free(p->frames[i].pixels, p->alloc.user);
        if (p->mask_bufs)
            free(p->mask_bufs[i]);
    }
    free(p->frames);
    free(p->free_list);
    free(p->mask_bufs);
    pthread_mutex_destroy(&p->lock);
    free(p);
    *pp = NULL;
}

ss_frame_t *ss_frame_pool_get(ss_frame_pool_t *p)
{
    ss_frame_t *f = NULL;
    pthread_mutex_lock(&p->lock);
    if (p->nfree > 0)
        f = p->free_list[--p->nfree];
    pthread_mutex_unlock(&p->lock);
    if (f) {
        ss_frame_meta_clear(&f->meta);
        f->valid = NULL;
        f->width = f->height = 0;
        f->dtype = SS_DT_U16;
    }
    return f;
}

/* A frame's own mask buffer, for sources that supply a validity mask. */
static uint8_t *pool_mask_of(ss_frame_pool_t *p, ss_frame_t *f)
{
    return p->mask_bufs[f - p->frames];
}

void ss_frame_pool_put(ss_frame_t *f)
{
    if (!f || !f->pool)
        return;
    ss_frame_pool_t *p = f->pool;
    pthread_mutex_lock(&p->lock);
    if (p->nfree < p->count)
        p->free_list[p->nfree++] = f;
    pthread_mutex_unlock(&p->lock);
}

int ss_frame_pool_free_count(ss_frame_pool_t *p)
{
    pthread_mutex_lock(&p->lock);
    int n = p->nfree;
    pthread_mutex_unlock(&p->lock);
    return n;
}

size_t ss_frame_pool_max_bytes(const ss_frame_pool_t *p)
{
    return p->max_bytes;
}

uint8_t *ss_frame_mask_buffer(ss_frame_t *f)
{
    return f->pool ? pool_mask_of(f->pool, f) : NULL;
}
