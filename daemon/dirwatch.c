/*
 * dirwatch.c — inotify directory watcher with "complete file" detection.
 *
 * One table of entries (name, state, last size/mtime, when it last
 * changed). States: PENDING (seen, waiting for a stable size), READY
 * (complete, not handed out yet), DONE (handed out), RETRY (handed out,
 * found incomplete by the caller: PENDING again as soon as it changes;
 * counted with DONE until then). The table grows by
 * doubling — an allocation per new *file*, amortised, never per pixel.
 */
#include "dirwatch.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define TAG "dirwatch"
#define NAME_LEN 256                /* NAME_MAX + NUL */
#define EVENT_BUF 16384
#define MIN_POLL_S 0.02             /* re-check pending sizes at least this often... */
#define MAX_POLL_S 0.25             /* ...and at most this long apart */
#define MAX_PATTERNS 16

typedef enum { ST_PENDING = 0, ST_READY, ST_DONE, ST_RETRY } state_t;

typedef struct entry {
    char name[NAME_LEN];
    state_t state;
    off_t size;
    struct timespec mtime;
    double changed;                 /* monotonic s of the last change seen */
    uint64_t batch;                 /* READY: the step it became complete in */
    double key;                     /* READY: the caller's order key */
    uint64_t done_seq;              /* DONE: order handed out (for pruning) */
} entry_t;

struct ss_dirwatch {
    char dir[SS_PATH_MAX];
    char pattern[MAX_PATTERNS][NAME_LEN];
    int n_patterns;                 /* 0 = every name */
    double settle_s;
    ss_dirwatch_key_fn key;
    void *key_user;
    int fd, wd;
    int gone;                       /* the directory was deleted or moved */
    entry_t *e;
    int n, cap;
    int n_done;
    uint64_t refused;               /* symbolic links seen and not followed */
    uint64_t batch;
    uint64_t done_seq;
};

static int matches(const ss_dirwatch_t *w, const char *name)
{
    if (name[0] == '.')
        return 0;
    if (!w->n_patterns)
        return 1;
    for (int i = 0; i < w->n_patterns; i++)
        if (fnmatch(w->pattern[i], name, 0) == 0)
            return 1;
    return 0;
}

static entry_t *find(ss_dirwatch_t *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return &w->e[i];
    return NULL;
}

static void remove_at(ss_dirwatch_t *w, int i)
{
    if (w->e[i].state == ST_DONE || w->e[i].state == ST_RETRY)
        w->n_done--;
    w->e[i] = w->e[w->n - 1];
    w->n--;
}

static void forget(ss_dirwatch_t *w, const char *name)
{
    entry_t *e = find(w, name);
    if (e)
        remove_at(w, (int)(e - w->e));
}

static entry_t *add(ss_dirwatch_t *w, const char *name)
{
    if (strlen(name) >= NAME_LEN)
        return NULL;
    if (w->n == w->cap) {
        int cap = w->cap ? 2 * w->cap : 64;
        entry_t *ne = realloc(w->e, (size_t)cap * sizeof *ne);
        if (!ne) {
            SS_LOG(SS_LOG_ERR, TAG, "%s: out of memory tracking files", w->dir);
            return NULL;
        }
        w->e = ne;
        w->cap = cap;
    }
    entry_t *e = &w->e[w->n++];
    memset(e, 0, sizeof *e);
    ss_strlcpy(e->name, name, sizeof e->name);
    e->size = -1;
    e->changed = ss_now_mono();
    return e;
}

static void full_path(const ss_dirwatch_t *w, const char *name, char *out, size_t n)
{
    snprintf(out, n, "%s/%s", w->dir, name);
}

static void make_ready(ss_dirwatch_t *w, entry_t *e)
{
    char path[SS_PATH_MAX + NAME_LEN];
    e->state = ST_READY;
    e->batch = w->batch;
    full_path(w, e->name, path, sizeof path);
    e->key = w->key ? w->key(path, w->key_user) : NAN;
}

/* Stat a pending entry (never through a symbolic link: a link is refused,
 * logged and counted); note changes. Returns 0 if it still exists as a
 * regular file, -1 otherwise. */
static int refresh(ss_dirwatch_t *w, entry_t *e, double now)
{
    char path[SS_PATH_MAX + NAME_LEN];
    struct stat st;
    full_path(w, e->name, path, sizeof path);
    if (lstat(path, &st) != 0)
        return -1;
    if (S_ISLNK(st.st_mode)) {
        w->refused++;
        SS_LOG(SS_LOG_WARNING, TAG, "%s is a symbolic link: not followed, not read", path);
        return -1;
    }
    if (!S_ISREG(st.st_mode))
        return -1;
    if (st.st_size != e->size || st.st_mtim.tv_sec != e->mtime.tv_sec ||
        st.st_mtim.tv_nsec != e->mtime.tv_nsec) {
        e->size = st.st_size;
        e->mtime = st.st_mtim;
        e->changed = now;
    }
    return 0;
}

static void mark_done(ss_dirwatch_t *w, entry_t *e)
{
    e->state = ST_DONE;
    e->done_seq = ++w->done_seq;
    w->n_done++;
}

/* Add every matching file not known yet; files unchanged for settle_s
 * (by their mtime) are complete at once. ignore = 1: mark them handed
 * out instead (files present at start, when not wanted). */
static void scan(ss_dirwatch_t *w, int ignore)
{
    DIR *d = opendir(w->dir);
    if (!d) {
        SS_LOG(SS_LOG_ERR, TAG, "%s: cannot read directory: %s", w->dir, strerror(errno));
        return;
    }
    struct dirent *de;
    double now = ss_now_mono();
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    while ((de = readdir(d)) != NULL) {
        if (!matches(w, de->d_name) || find(w, de->d_name))
            continue;
        entry_t *e = add(w, de->d_name);
        if (!e)
            continue;
        if (refresh(w, e, now) != 0) {
            remove_at(w, w->n - 1);
            continue;
        }
        if (ignore) {
            mark_done(w, e);
            continue;
        }
        double age = (double)(wall.tv_sec - e->mtime.tv_sec) +
                     1e-9 * (double)(wall.tv_nsec - e->mtime.tv_nsec);
        if (age >= w->settle_s)
            make_ready(w, e);
    }
    closedir(d);
}

ss_dirwatch_t *ss_dirwatch_new(const char *dir, const char *const *patterns, double settle_s,
                               int existing, ss_dirwatch_key_fn key, void *key_user, char *err,
                               size_t err_len)
{
    ss_dirwatch_t *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    ss_strlcpy(w->dir, dir, sizeof w->dir);
    for (int i = 0; i < MAX_PATTERNS && patterns && patterns[i] && patterns[i][0]; i++)
        ss_strlcpy(w->pattern[w->n_patterns++], patterns[i], NAME_LEN);
    w->settle_s = settle_s > 0 ? settle_s : 0;
    w->key = key;
    w->key_user = key_user;
    w->fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (w->fd < 0) {
        snprintf(err, err_len, "inotify: %s", strerror(errno));
        free(w);
        return NULL;
    }
    /* Watch first, then scan: a file arriving in between shows up in both,
     * and the table keeps it once. */
    w->wd = inotify_add_watch(w->fd, dir,
                              IN_CREATE | IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO |
                                  IN_MOVED_FROM | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF |
                                  IN_ONLYDIR);
    if (w->wd < 0) {
        snprintf(err, err_len, "cannot watch directory %s: %s", dir, strerror(errno));
        close(w->fd);
        free(w);
        return NULL;
    }
    w->batch = 1;
    scan(w, !existing);
    return w;
}

void ss_dirwatch_destroy(ss_dirwatch_t **pw)
{
    if (!pw || !*pw)
        return;
    ss_dirwatch_t *w = *pw;
    close(w->fd);
    free(w->e);
    free(w);
    *pw = NULL;
}

int ss_dirwatch_fd(const ss_dirwatch_t *w)
{
    return w->fd;
}

int ss_dirwatch_pending(const ss_dirwatch_t *w)
{
    return w->n - w->n_done;
}

/* A RETRY entry whose file changed since it was found incomplete becomes
 * PENDING again (events of the writes before that change nothing).
 * Returns -1 when the file is gone (the caller removes the entry). */
static int retry_changed(ss_dirwatch_t *w, entry_t *e, double now)
{
    const double seen = e->changed;
    if (refresh(w, e, now) != 0)
        return -1;
    if (e->changed != seen) {
        e->state = ST_PENDING;
        w->n_done--;
    }
    return 0;
}

/* Read every queued inotify event (non-blocking). */
static void drain_events(ss_dirwatch_t *w)
{
    char buf[EVENT_BUF] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t len = read(w->fd, buf, sizeof buf);
        if (len <= 0)
            return;
        for (char *p = buf; p < buf + len;) {
            const struct inotify_event *ev = (const struct inotify_event *)p;
            p += sizeof *ev + ev->len;
            if (ev->mask & IN_Q_OVERFLOW) {
                SS_LOG(SS_LOG_WARNING, TAG, "%s: inotify queue overflow, rescanning", w->dir);
                scan(w, 0);
                continue;
            }
            if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED)) {
                w->gone = 1;
                continue;
            }
            if (!ev->len || (ev->mask & IN_ISDIR) || !matches(w, ev->name))
                continue;
            if (ev->mask & (IN_DELETE | IN_MOVED_FROM)) {
                forget(w, ev->name);
                continue;
            }
            entry_t *e = find(w, ev->name);
            if (ev->mask & IN_MOVED_TO) {
                /* renamed into place: complete now, even over a name
                 * handed out before (it is a new file) */
                if (e && e->state == ST_DONE) {
                    remove_at(w, (int)(e - w->e));
                    e = NULL;
                }
                if (!e && !(e = add(w, ev->name)))
                    continue;
                if (e->state != ST_READY)
                    make_ready(w, e);
                continue;
            }
            /* created or written in place: wait for a stable size */
            if (!e && !(e = add(w, ev->name)))
                continue;
            if (e->state == ST_RETRY)
                retry_changed(w, e, ss_now_mono());
            if (e->state == ST_PENDING)
                e->changed = ss_now_mono();
        }
    }
}

/* Promote pending entries whose size and mtime stood still long enough
 * (RETRY entries whose size or mtime changed become pending first). */
static void settle(ss_dirwatch_t *w)
{
    double now = ss_now_mono();
    for (int i = 0; i < w->n; i++) {
        entry_t *e = &w->e[i];
        if (e->state == ST_RETRY && retry_changed(w, e, now) != 0) {
            remove_at(w, i--);
            continue;
        }
        if (e->state != ST_PENDING)
            continue;
        if (refresh(w, e, now) != 0) {
            remove_at(w, i--);
            continue;
        }
        if (now - e->changed >= w->settle_s)
            make_ready(w, e);
    }
}

static int before(const entry_t *a, const entry_t *b)
{
    if (a->batch != b->batch)
        return a->batch < b->batch;
    int ka = isfinite(a->key), kb = isfinite(b->key);
    if (ka != kb)
        return ka;
    if (ka && a->key != b->key)
        return a->key < b->key;
    return strcmp(a->name, b->name) < 0;
}

/* Forget the oldest handed-out names beyond the bound. */
static void prune_done(ss_dirwatch_t *w)
{
    while (w->n_done > SS_DIRWATCH_MAX_DONE) {
        int oldest = -1;
        for (int i = 0; i < w->n; i++)
            if (w->e[i].state == ST_DONE &&
                (oldest < 0 || w->e[i].done_seq < w->e[oldest].done_seq))
                oldest = i;
        if (oldest < 0)
            return;
        remove_at(w, oldest);
    }
}

uint64_t ss_dirwatch_refused(const ss_dirwatch_t *w)
{
    return w->refused;
}

int ss_dirwatch_retry(ss_dirwatch_t *w, const char *path)
{
    const char *slash = strrchr(path, '/');
    entry_t *e = find(w, slash ? slash + 1 : path);
    if (!e || e->state != ST_DONE)
        return -1;
    e->state = ST_RETRY;
    e->size = -1;                   /* the next refresh records the file as it is now */
    if (refresh(w, e, ss_now_mono()) != 0) {
        remove_at(w, (int)(e - w->e));
        return -1;
    }
    return 0;
}

ss_err_t ss_dirwatch_next(ss_dirwatch_t *w, char *path, size_t n, double timeout_s)
{
    double deadline = ss_now_mono() + (timeout_s > 0 ? timeout_s : 0);
    for (;;) {
        drain_events(w);
        settle(w);
        w->batch++;
        entry_t *best = NULL;
        for (int i = 0; i < w->n; i++)
            if (w->e[i].state == ST_READY && (!best || before(&w->e[i], best)))
                best = &w->e[i];
        if (best) {
            full_path(w, best->name, path, n);
            mark_done(w, best);
            prune_done(w);
            return SS_OK;
        }
        if (w->gone)
            return SS_ERR_IO;
        double left = deadline - ss_now_mono();
        if (left <= 0)
            return SS_ERR_TIMEOUT;
        /* wait for events, waking up to re-check files still settling */
        double wait = left;
        if (w->n > w->n_done)
            wait = SS_MIN(wait, SS_CLAMP(w->settle_s / 4, MIN_POLL_S, MAX_POLL_S));
        struct pollfd pfd = { .fd = w->fd, .events = POLLIN };
        int ms = (int)ceil(wait * 1e3);
        if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
            return SS_ERR_IO;
    }
}
