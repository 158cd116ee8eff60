/*
 * slowdisk.c — an LD_PRELOAD shim for the daemon tests: a slow disk. Every
 * rename(2) and every fflush(3) of a file other than stdout/stderr sleeps
 * $SS_SLOWDISK_MS milliseconds (default 20) first: the residual FITS sink
 * renames each file into place, the JSON-lines sink flushes after each
 * frame, so the file sink falls behind a fast pipeline as on a loaded or
 * throttled disk. With $SS_SLOWDISK_FAIL set, rename fails (EIO): a disk
 * that breaks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void slow(void)
{
    const char *s = getenv("SS_SLOWDISK_MS");
    const long ms = s ? atol(s) : 20;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    slow();
    if (getenv("SS_SLOWDISK_FAIL")) {
        errno = EIO;
        return -1;
    }
    return real(from, to);
}

int fflush(FILE *f)
{
    static int (*real)(FILE *);
    if (!real)
        real = (int (*)(FILE *))dlsym(RTLD_NEXT, "fflush");
    if (f && f != stdout && f != stderr)
        slow();
    return real(f);
}
