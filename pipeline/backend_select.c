/*
 * backend_select.c — choosing a backend at run time, and the names of
 * planes and stages.
 */
#include "backend.h"

#include <stdio.h>

#ifndef SKYSIEVE_HAVE_CUDA
const ss_backend_ops_t *ss_backend_cuda_ops(void)
{
    return NULL;
}
#endif

const ss_backend_ops_t *ss_backend_select(ss_backend_kind_t kind, int device, char *why,
                                          size_t why_len)
{
    if (kind == SS_BACKEND_CPU)
        return &ss_backend_cpu;
    const ss_backend_ops_t *cuda = ss_backend_cuda_ops();
    char reason[256] = "built without CUDA";
    if (cuda && cuda->probe(device, reason, sizeof reason))
        return cuda;
    if (kind == SS_BACKEND_CUDA) {
        snprintf(why, why_len, "backend \"cuda\" unavailable: %s", reason);
        return NULL;
    }
    SS_LOG(SS_LOG_NOTICE, "backend", "no usable GPU (%s): using the CPU backend", reason);
    return &ss_backend_cpu;
}

const char *ss_plane_name(ss_plane_t p)
{
    static const char *const names[SS_PLANE__COUNT] = {
        "frame", "filtered", "hipass", "reference", "ref_s", "ref_gx", "ref_gy", "prediction",
        "residual", "clean", "snr", "snr_raw", "star", "labels", "history", "badmask",
    };
    return (unsigned)p < SS_PLANE__COUNT ? names[p] : "?";
}

const char *ss_stage_name(ss_stage_id_t s)
{
    static const char *const names[SS_STAGE__COUNT] = {
        "upload", "calibrate", "reg_coarse", "reg_fine", "whiten", "guided",
        "noise", "matched", "detect", "history", "download",
    };
    return (unsigned)s < SS_STAGE__COUNT ? names[s] : "?";
}
