/*
 * dirwatch.h — watch a directory (inotify) and hand out the files that are
 * complete, each exactly once: the FITS source's directory mode.
 *
 * A file counts as complete when it was renamed into the directory
 * (IN_MOVED_TO: writers that write a temporary name and rename it into
 * place) or when its size and modification time have not changed for
 * `settle_s` seconds (writers that write in place, slowly). Files present
 * at start are either ignored or taken the same way (those older than
 * settle_s at once). Only regular files whose name matches one of the
 * patterns (fnmatch) and does not start with '.' are considered: writers
 * that write "name.part" or ".name" and rename are never seen half-way.
 *
 * Order: files are handed out in the order they became complete; files
 * that became complete together (the start-up scan, one poll) are ordered
 * by the caller's key (DATE-OBS for FITS), then by name.
 *
 * A handed-out name is remembered so that it is not handed out again
 * (unless it is deleted or moved away and comes back). The memory is
 * bounded (SS_DIRWATCH_MAX_DONE names; the oldest are forgotten first),
 * which only matters for files left in place for very long runs.
 */
#ifndef SS_DIRWATCH_H
#define SS_DIRWATCH_H

#include <stdint.h>

#include "pipeline/frame.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_DIRWATCH_MAX_DONE 100000

typedef struct ss_dirwatch ss_dirwatch_t;

/* Order key of a file (smaller first), e.g. its DATE-OBS as MJD; return
 * NAN when unknown (those sort after the known ones, by name). */
typedef double (*ss_dirwatch_key_fn)(const char *path, void *user);

/* Watch dir for files matching any of patterns (a NULL-terminated array;
 * NULL or an empty first pattern: every name). existing = 1 takes the
 * files already there, 0 ignores them (they count as handed out). key may
 * be NULL (name order). Returns NULL with a reason in err on failure (no
 * such directory, no inotify). */
ss_dirwatch_t *ss_dirwatch_new(const char *dir, const char *const *patterns, double settle_s,
                               int existing, ss_dirwatch_key_fn key, void *key_user, char *err,
                               size_t err_len);
void ss_dirwatch_destroy(ss_dirwatch_t **w);

/* The inotify descriptor (readable when events arrive), for callers that
 * poll several things; ss_dirwatch_next polls it itself. */
int ss_dirwatch_fd(const ss_dirwatch_t *w);

/* The next complete file: its full path (dir/name) into path (n bytes).
 * Waits up to timeout_s seconds (0: do not wait). Returns SS_OK,
 * SS_ERR_TIMEOUT when nothing is complete yet, or SS_ERR_IO when the
 * directory went away. The file is marked as handed out. */
ss_err_t ss_dirwatch_next(ss_dirwatch_t *w, char *path, size_t n, double timeout_s);

/* Symbolic links met in the directory so far: never followed nor handed
 * out (each sighting logged). */
uint64_t ss_dirwatch_refused(const ss_dirwatch_t *w);

/* The file at path, handed out by ss_dirwatch_next, turned out incomplete
 * (a writer that paused longer than settle_s): hand it out again once its
 * size or mtime changes and then stands still for settle_s. Returns 0, or
 * -1 when path is not a handed-out file (or is gone). */
int ss_dirwatch_retry(ss_dirwatch_t *w, const char *path);

/* Files seen but not complete yet, and complete but not yet handed out. */
int ss_dirwatch_pending(const ss_dirwatch_t *w);

#ifdef __cplusplus
}
#endif
#endif
