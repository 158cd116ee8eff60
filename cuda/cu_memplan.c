/*
 * cu_memplan.c — the CUDA backend's memory plan (cu_backend.h): every
 * device and pinned buffer of an instance as a table entry, allocated,
 * started and freed by one loop each, instead of one call per buffer.
 */
#include "cuda/cu_backend.h"

#include <stddef.h>
#include <string.h>
/* ---------------------------------------------------------------------- */
/* memory plan                                                             */
/* ---------------------------------------------------------------------- */

/* What a buffer's size counts: its element count is one of these, times
 * the entry's unit (bytes). */
typedef enum {
    PER_ONE,                        /* one element */
    PER_PIX,                        /* processed pixels */
    PER_RAW,                        /* raw pixels (geo.raw_w × raw_h) */
    PER_RAW_BYTES,                  /* raw pixels × the raw type's size (unit 1) */
    PER_ROW,                        /* processed rows */
    PER_CHUNK,                      /* 2 per CU_CHUNK pixels */
    PER_COMP,                       /* accumulators (max_comp) */
    PER_ALL_COMP,                   /* components a frame can hold (ncomp_max) */
    PER_HIST_BYTES,                 /* history slots × a slot's bytes (unit 1) */
} per_t;

/* How a buffer starts. Scratch starts defined too: compute-sanitizer's
 * initcheck, and whole read-back chunks. */
typedef enum { START_ZERO, START_NAN, START_ONES, START_COPIED } start_t;

/* When a buffer exists. */
typedef enum { WHEN_ALWAYS, WHEN_DARK, WHEN_FLAT, WHEN_BIAS, WHEN_BAD, WHEN_SPILL } when_t;

typedef struct dev_buf {
    size_t off;                     /* its pointer in ss_backend_t */
    per_t per;
    size_t unit;
    start_t start;
    when_t when;
} dev_buf_t;

#define DB(field, per, unit, start, when) { offsetof(ss_backend_t, field), per, unit, start, when }

/* The device buffers of an instance (the pyramid levels apart: their
 * sizes halve, plan_levels). */
static const dev_buf_t dev_plan[] = {
    DB(d_raw[0], PER_RAW_BYTES, 1, START_ZERO, WHEN_ALWAYS),
    DB(d_raw[1], PER_RAW_BYTES, 1, START_ZERO, WHEN_ALWAYS),
    DB(d_rawvalid[0], PER_RAW, 1, START_ONES, WHEN_ALWAYS),
    DB(d_rawvalid[1], PER_RAW, 1, START_ONES, WHEN_ALWAYS),
    DB(d_dark, PER_PIX, sizeof(float), START_COPIED, WHEN_DARK),
    DB(d_flat, PER_PIX, sizeof(float), START_COPIED, WHEN_FLAT),
    DB(d_bias, PER_PIX, sizeof(float), START_COPIED, WHEN_BIAS),
    DB(d_bad, PER_PIX, 1, START_COPIED, WHEN_BAD),
    DB(d_row_bias, PER_ROW, sizeof(double), START_ZERO, WHEN_ALWAYS),
    DB(d_hits, PER_PIX, sizeof(uint16_t), START_ZERO, WHEN_ALWAYS),
    DB(d_learned, PER_PIX, 1, START_ZERO, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_FRAME], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_FILTERED], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_HIPASS], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_REFERENCE], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_PREDICTION], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_RESIDUAL], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_CLEAN], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_SNR], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_SNR_RAW], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_plane[SS_PLANE_STAR], PER_PIX, sizeof(float), START_NAN, WHEN_ALWAYS),
    DB(d_labels, PER_PIX, sizeof(int32_t), START_ZERO, WHEN_ALWAYS),
    DB(d_hist, PER_HIST_BYTES, 1, START_ZERO, WHEN_ALWAYS),
    DB(d_gs[0], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_gs[1], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_gs[2], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_gs[3], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_gs[4], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_gs[5], PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_misc, PER_ONE, 256, START_ZERO, WHEN_ALWAYS),
    DB(d_parent, PER_PIX, sizeof(int32_t), START_ZERO, WHEN_ALWAYS),
    DB(d_u8, PER_PIX, 1, START_ZERO, WHEN_ALWAYS),
    DB(d_chunk, PER_CHUNK, sizeof(int), START_ZERO, WHEN_ALWAYS),
    DB(d_acc, PER_COMP, sizeof(cu_acc_t), START_ZERO, WHEN_ALWAYS),
    DB(d_pkey, PER_ALL_COMP, sizeof(unsigned long long), START_ZERO, WHEN_SPILL),
    DB(d_parea, PER_ALL_COMP, sizeof(int), START_ZERO, WHEN_SPILL),
    DB(d_topk, PER_ONE, sizeof(cu_topk_t), START_ZERO, WHEN_SPILL),
    DB(d_partials, PER_ONE, (size_t)CU_RED_BLOCKS * SS_FINE_NSUMS * sizeof(double), START_ZERO,
       WHEN_ALWAYS),
    DB(d_lsq, PER_ONE, ((size_t)SS_MAX_HISTORY * SS_MAX_HISTORY + SS_MAX_HISTORY) * sizeof(double),
       START_ZERO, WHEN_ALWAYS),
    DB(d_lsq_m, PER_ONE, ((size_t)SS_MAX_HISTORY * SS_MAX_HISTORY + SS_MAX_HISTORY) *
                             sizeof(double), START_ZERO, WHEN_ALWAYS),
    DB(d_counter, PER_ONE, sizeof(unsigned int), START_ZERO, WHEN_ALWAYS),
    DB(d_rwlist, PER_PIX, sizeof(uint32_t), START_ZERO, WHEN_ALWAYS),
    DB(d_rwcount, PER_ONE, sizeof(unsigned int), START_ZERO, WHEN_ALWAYS),
    DB(d_sel, PER_ONE, sizeof(cu_sel_ws_t), START_ZERO, WHEN_ALWAYS),
    DB(d_selbuf, PER_PIX, sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_half, PER_PIX, sizeof(uint16_t), START_ZERO, WHEN_ALWAYS),
    DB(d_stamps, PER_ONE, SS_STAMP_PIXELS_MAX * sizeof(float), START_ZERO, WHEN_ALWAYS),
    DB(d_boxes, PER_ONE, SS_STAMPS_MAX * sizeof(cu_box_t), START_ZERO, WHEN_ALWAYS),
    DB(d_params, PER_ONE, sizeof(cu_params_t), START_ZERO, WHEN_ALWAYS),
    DB(d_res, PER_ONE, sizeof(cu_results_t), START_ZERO, WHEN_ALWAYS),
    DB(d_peaks, PER_ONE, 2 * (size_t)SS_COARSE_PEAK_CAP * sizeof(ss_peak_t), START_ZERO,
       WHEN_ALWAYS),
    DB(d_npeaks, PER_ONE, 2 * sizeof(unsigned int), START_ZERO, WHEN_ALWAYS),
    DB(d_vote_hist, PER_ONE, (size_t)(2 * SS_COARSE_MAX_R + 1) * (2 * SS_COARSE_MAX_R + 1) *
                                 sizeof(int), START_ZERO, WHEN_ALWAYS),
};

/* A pinned host buffer, zeroed; mapped ones also get the address the
 * device reads them by. */
typedef struct pin_buf {
    size_t off, moff;               /* its pointers in ss_backend_t (moff 0: not mapped) */
    per_t per;
    size_t unit;
} pin_buf_t;

#define PB(field, mfield, per, unit) { offsetof(ss_backend_t, field), offsetof(ss_backend_t, mfield), per, unit }
#define PB_UNMAPPED(field, per, unit) { offsetof(ss_backend_t, field), 0, per, unit }

static const pin_buf_t pin_plan[] = {
    PB(h_params, m_params, PER_ONE, sizeof(cu_params_t)),
    PB(h_res, m_res, PER_ONE, sizeof(cu_results_t)),
    PB(h_plan, m_plan, PER_ONE, sizeof(cu_plan_out_t)),
    PB(h_acc, m_acc, PER_ONE, HOST_ACC * sizeof(cu_acc_t)),
    PB(h_lsq, m_lsq, PER_ONE, ((size_t)SS_MAX_HISTORY * SS_MAX_HISTORY + SS_MAX_HISTORY) *
                                  sizeof(double)),
    PB(h_row_bias, m_row_bias, PER_ROW, sizeof(double)),
    PB_UNMAPPED(h_boxes, PER_ONE, SS_STAMPS_MAX * sizeof(cu_box_t)),
};

#define PLAN_N(t) (sizeof(t) / sizeof((t)[0]))

/* The pointer field at off in b. */
static void **plan_slot(ss_backend_t *b, size_t off)
{
    return (void **)((char *)b + off);
}

/* Bytes of a buffer of per × unit in b. */
static size_t plan_bytes(const ss_backend_t *b, per_t per, size_t unit)
{
    const size_t raw = (size_t)b->geo.raw_w * (size_t)b->geo.raw_h;
    switch (per) {
    case PER_ONE: return unit;
    case PER_PIX: return b->npix * unit;
    case PER_RAW: return raw * unit;
    case PER_RAW_BYTES: return raw * ss_dtype_size(b->geo.raw_dtype) * unit;
    case PER_ROW: return (size_t)b->h * unit;
    case PER_CHUNK: return 2 * ((b->npix + CU_CHUNK - 1) / CU_CHUNK) * unit;
    case PER_COMP: return (size_t)b->max_comp * unit;
    case PER_ALL_COMP: return (size_t)b->ncomp_max * unit;
    case PER_HIST_BYTES:
        return b->npix * ss_dtype_size(b->geo.hist_dtype) * (size_t)b->geo.history * unit;
    }
    return 0;
}

/* Whether the buffer exists for this instance. */
static int plan_wanted(const ss_backend_t *b, const ss_calib_data_t *calib, when_t when)
{
    switch (when) {
    case WHEN_ALWAYS: return 1;
    case WHEN_DARK: return calib && calib->dark;
    case WHEN_FLAT: return calib && calib->flat;
    case WHEN_BIAS: return calib && calib->bias;
    case WHEN_BAD: return calib && calib->bad;
    case WHEN_SPILL: return b->ncomp_max > b->max_comp;
    }
    return 0;
}

/* Allocate and start every buffer of the plans (the pyramid's too). The
 * calibration masters are copied in. On failure the call that failed is
 * named in *what; what was allocated stays for cm_plan_free. */
cudaError_t cm_plan_alloc(ss_backend_t *b, const ss_calib_data_t *calib, const char **what)
{
    static const int fill[] = { [START_ZERO] = 0, [START_NAN] = 0xff, [START_ONES] = 1 };
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < PLAN_N(dev_plan) && e == cudaSuccess; i++) {
        const dev_buf_t *d = &dev_plan[i];
        if (!plan_wanted(b, calib, d->when))
            continue;
        const size_t bytes = plan_bytes(b, d->per, d->unit);
        void **slot = plan_slot(b, d->off);
        *what = "cudaMalloc";
        if ((e = cudaMalloc(slot, bytes ? bytes : 1)) != cudaSuccess)
            break;
        b->dev_bytes += bytes;
        *what = d->start == START_COPIED ? "cudaMemcpy (calibration master)" : "cudaMemset";
        if (d->start != START_COPIED)
            e = cudaMemset(*slot, fill[d->start], bytes);
        else
            e = cudaMemcpy(*slot, d->when == WHEN_DARK ? (const void *)calib->dark
                                  : d->when == WHEN_FLAT ? (const void *)calib->flat
                                  : d->when == WHEN_BIAS ? (const void *)calib->bias
                                                         : (const void *)calib->bad,
                           bytes, cudaMemcpyHostToDevice);
    }
    for (int l = 1; l <= b->L && e == cudaSuccess; l++) {
        const size_t n = (size_t)b->lw[l] * (size_t)b->lh[l], bytes = (n ? n : 1) * sizeof(float);
        *what = "pyramid level";
        if ((e = cudaMalloc((void **)&b->d_ref_lvl[l], bytes)) == cudaSuccess &&
            (e = cudaMalloc((void **)&b->d_cur_lvl[l], bytes)) == cudaSuccess &&
            (e = cudaMemset(b->d_ref_lvl[l], 0xff, bytes)) == cudaSuccess)
            e = cudaMemset(b->d_cur_lvl[l], 0xff, bytes);
        if (e == cudaSuccess)
            b->dev_bytes += 2 * bytes;
    }
    const unsigned mapped = cudaHostAllocPortable | cudaHostAllocMapped;
    for (size_t i = 0; i < PLAN_N(pin_plan) && e == cudaSuccess; i++) {
        const pin_buf_t *h = &pin_plan[i];
        const size_t bytes = plan_bytes(b, h->per, h->unit);
        void **slot = plan_slot(b, h->off);
        *what = "cudaHostAlloc";
        if ((e = cudaHostAlloc(slot, bytes, h->moff ? mapped : cudaHostAllocPortable)) != cudaSuccess)
            break;
        memset(*slot, 0, bytes);
        *what = "cudaHostGetDevicePointer";
        if (h->moff)
            e = cudaHostGetDevicePointer(plan_slot(b, h->moff), *slot, 0);
    }
    return e;
}

/* Free every buffer of the plans that was allocated. */
void cm_plan_free(ss_backend_t *b)
{
    for (size_t i = 0; i < PLAN_N(dev_plan); i++) {
        void **slot = plan_slot(b, dev_plan[i].off);
        if (*slot)
            cudaFree(*slot);
        *slot = NULL;
    }
    for (int l = 1; l <= SS_MAX_LEVELS; l++) {
        if (b->d_ref_lvl[l])
            cudaFree(b->d_ref_lvl[l]);
        if (b->d_cur_lvl[l])
            cudaFree(b->d_cur_lvl[l]);
        b->d_ref_lvl[l] = b->d_cur_lvl[l] = NULL;
    }
    for (size_t i = 0; i < PLAN_N(pin_plan); i++) {
        void **slot = plan_slot(b, pin_plan[i].off);
        if (*slot)
            cudaFreeHost(*slot);
        *slot = NULL;
    }
}
