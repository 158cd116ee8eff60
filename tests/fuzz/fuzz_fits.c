/*
 * fuzz_fits.c — libFuzzer target: the FITS reader on a file held in
 * memory (a memfd, read through /proc/self/fd): probe, frame, master.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pipeline/frame_fits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static void *px;
    enum { CAP = 256 * 256 * 4 };
    if (!px && !(px = malloc(CAP)))
        abort();
    ss_fits_set_inflate_limit(4u << 20);    /* as a daemon with small frames sets it */
    const int fd = memfd_create("fuzz.fits", MFD_CLOEXEC);
    if (fd < 0)
        abort();
    if (size && write(fd, data, size) != (ssize_t)size)
        abort();
    char path[64], err[512];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int w, h;
    ss_dtype_t dt;
    if (ss_fits_probe(path, &w, &h, &dt, err, sizeof err) == SS_OK) {
        ss_frame_t f = { .pixels = px, .capacity = CAP };
        ss_frame_meta_clear(&f.meta);
        ss_fits_read_frame(path, &f, err, sizeof err);
        if ((size_t)w * (size_t)h <= 256 * 256) {
            float *m = NULL;
            ss_fits_master_t info;
            if (ss_fits_read_master(path, &m, &w, &h, &info, err, sizeof err) == SS_OK)
                free(m);
        }
    }
    close(fd);
    return 0;
}
