/*
 * cu_exec.c — the CUDA backend's executor (cu_backend.h): checked calls
 * and the sticky broken state, timers, and the segments of steps that
 * ops append and flush, replayed from a cache of CUDA graphs keyed by
 * their shape (backend_cuda.c's head comment tells why).
 */
#include "cuda/cu_backend.h"

#include <pthread.h>

#define TAG "cuda"

/* ---------------------------------------------------------------------- */
/* calls that must not meet a capture                                      */
/* ---------------------------------------------------------------------- */

static pthread_once_t unsafe_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t unsafe_lock;

static void unsafe_init(void)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&unsafe_lock, &a);
    pthread_mutexattr_destroy(&a);
}

void cx_unsafe_begin(void)
{
    pthread_once(&unsafe_once, unsafe_init);
    pthread_mutex_lock(&unsafe_lock);
}

void cx_unsafe_end(void)
{
    pthread_mutex_unlock(&unsafe_lock);
}

/* ---------------------------------------------------------------------- */
/* errors                                                                  */
/* ---------------------------------------------------------------------- */

int cx_is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorContextIsDestroyed:
    case cudaErrorCudartUnloading:
    case cudaErrorUnknown:
    case cudaErrorSystemNotReady:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

void cx_drop_pending(ss_backend_t *b)
{
    b->npending = 0;
    b->out_open = 0;
    b->mv_hp_r = 0;
    b->seg_needs = 0;
    b->seg_raw_buf = -1;
    if (b->dl.pending) {
        b->dl.pending = 0;
        b->dl_dropped = b->dl.ticket;
    }
    if (b->capturing) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(b->cs, &g);
        if (g)
            cudaGraphDestroy(g);
        b->capturing = 0;
    }
}

ss_err_t cx_fail(ss_backend_t *b, cudaError_t e, const char *what, const char *file,
                        int line)
{
    b->errors++;
    cx_drop_pending(b);
    /* a non-sticky error is cleared here; a sticky one stays and also
     * shows up on the stream */
    (void)cudaGetLastError();
    int sticky = cx_is_sticky(e);
    if (!sticky) {
        const cudaError_t q = cudaStreamQuery(b->cs);
        sticky = cx_is_sticky(q);
        (void)cudaGetLastError();
    }
    if (sticky)
        b->broken = 1;
    SS_LOG(SS_LOG_ERR, TAG, "%s failed: %s (%s) at %s:%d%s", what, cudaGetErrorName(e),
           cudaGetErrorString(e), file, line, sticky ? " — backend broken" : "");
    return sticky ? SS_ERR_BROKEN : SS_ERR_BACKEND;
}


/* Every op starts here: broken instances refuse, the device is made
 * current for this thread, and a raw upload from the previous ingest is
 * completed (the caller's frame buffer is free once this returns). */
ss_err_t cx_op_begin(ss_backend_t *b)
{
    if (b->broken)
        return SS_ERR_BROKEN;
    CK(b, cudaSetDevice(b->device));
    if (b->upload_pending) {
        CK(b, cudaEventSynchronize(b->ev_up[b->raw_cur]));
        b->upload_pending = 0;
    }
    return SS_OK;
}

/* ---------------------------------------------------------------------- */
/* timers                                                                  */
/* ---------------------------------------------------------------------- */

timer_t_ *cx_timer_start(ss_backend_t *b, cudaStream_t s, int stage, int copy)
{
    if (b->ntimers >= MAX_TIMERS)
        return NULL;
    timer_t_ *t = &b->timers[b->ntimers];
    if (cudaEventRecord(t->a, s) != cudaSuccess)
        return NULL;
    t->stage = stage;
    t->copy = copy;
    b->ntimers++;
    return t;
}

void cx_timer_stop(ss_backend_t *b, timer_t_ *t, cudaStream_t s)
{
    if (t && cudaEventRecord(t->b, s) != cudaSuccess)
        b->ntimers = (int)(t - b->timers);      /* drop it */
}

/* ---------------------------------------------------------------------- */
/* segments, graphs                                                        */
/* ---------------------------------------------------------------------- */

/* Before the host writes the parameter mirror for a new segment, the
 * previous segment's copy of it must have left. */
ss_err_t cx_params_begin(ss_backend_t *b)
{
    if (b->npending == 0)
        CK(b, cudaEventSynchronize(b->ev_param));
    return SS_OK;
}

/* Append a step to the pending segment, with what it needs of the
 * segment (STEP_*); a full segment is flushed first. */
ss_err_t cx_enqueue_with(ss_backend_t *b, step_fn fn, int variant, int stage, unsigned needs)
{
    if (b->npending == MAX_STEPS || (b->dl.pending && (needs & STEP_WRITES_CLEAN))) {
        ss_err_t e = cx_flush(b);
        if (e)
            return e;
    }
    b->pending[b->npending++] = (step_t){ fn, variant, stage, needs & STEP_LANES };
    b->seg_needs |= needs & ~(unsigned)STEP_LANES;
    return SS_OK;
}

ss_err_t cx_enqueue(ss_backend_t *b, step_fn fn, int variant, int stage)
{
    return cx_enqueue_with(b, fn, variant, stage, 0);
}

/* The mark of a deferred download: ev_mark, as an external event node
 * when captured (the host's wait on ds, issued after the launch, then
 * waits for this point of the graph). */
static cudaError_t st_mark(ss_backend_t *b, cudaStream_t s, int v)
{
    (void)v;
    return cudaEventRecordWithFlags(b->ev_mark, s,
                                    b->capturing ? cudaEventRecordExternal : cudaEventRecordDefault);
}

ss_err_t cx_defer_download(ss_backend_t *b, void *dst, const void *src, size_t bytes,
                           uint64_t ticket)
{
    if (b->dl.pending) {
        const ss_err_t e = cx_flush(b);
        if (e)
            return e;
    }
    const ss_err_t e = cx_enqueue(b, st_mark, 0, -1);
    if (e)
        return e;
    b->dl.pending = 1;
    b->dl.dst = dst;
    b->dl.src = src;
    b->dl.bytes = bytes;
    b->dl.ticket = ticket;
    return SS_OK;
}

/* The deferred download, once its segment is launched: on ds after the
 * mark, then its ticket's event; work that writes CLEAN waits for it. A
 * failure drops it while still pending (cx_fail: its ticket is refused). */
static ss_err_t issue_download(ss_backend_t *b)
{
    CK(b, cudaStreamWaitEvent(b->ds, b->ev_mark, 0));
    timer_t_ *t = b->timed ? cx_timer_start(b, b->ds, SS_STAGE_DOWNLOAD, 1) : NULL;
    CK(b, cudaMemcpyAsync(b->dl.dst, b->dl.src, b->dl.bytes, cudaMemcpyDeviceToHost, b->ds));
    cx_timer_stop(b, t, b->ds);
    CK(b, cudaEventRecord(b->ev_rd[b->dl.ticket % RD_RING], b->ds));
    b->dl.pending = 0;
    b->rd_guard = 1;
    return SS_OK;
}

cudaError_t cx_copy_out(ss_backend_t *b, cudaStream_t s, void *dst, const void *src,
                        size_t bytes)
{
    if (!b->lanes || b->timed)
        return cu_copy_small(dst, src, bytes, s);
    SK(cudaEventRecord(b->ev_fork, s));
    SK(cudaStreamWaitEvent(b->os, b->ev_fork, 0));
    b->out_open = 1;
    return cu_copy_small(dst, src, bytes, b->os);
}

/* cs waits for what stream s has so far. */
static cudaError_t join(ss_backend_t *b, cudaStream_t s)
{
    SK(cudaEventRecord(b->ev_join, s));
    return cudaStreamWaitEvent(b->cs, b->ev_join, 0);
}

/* The pending steps, each on its lane (STEP_SIDE, where b->lanes), then
 * cs waits for the side and output lanes. Captured, the lanes' work
 * becomes branches of the graph that join where a step needs them and at
 * its end. Timed, every step runs on cs between its stage's events, so
 * that the stages' times do not overlap. */
static cudaError_t run_steps(ss_backend_t *b, int timed)
{
    const int lanes = b->lanes && !timed;
    int side_open = 0;
    for (int k = 0; k < b->npending; k++) {
        const step_t *st = &b->pending[k];
        cudaStream_t s = b->cs;
        if (lanes && (st->lane & STEP_SIDE)) {
            SK(cudaEventRecord(b->ev_fork, b->cs));
            SK(cudaStreamWaitEvent(b->ps, b->ev_fork, 0));
            s = b->ps;
            side_open = 1;
        } else if (side_open && !(st->lane & STEP_BESIDE)) {
            SK(join(b, b->ps));
            side_open = 0;
        }
        timer_t_ *t = timed ? cx_timer_start(b, s, st->stage, 0) : NULL;
        SK(st->fn(b, s, st->variant));
        cx_timer_stop(b, t, s);
    }
    if (side_open)
        SK(join(b, b->ps));
    if (b->out_open) {
        b->out_open = 0;
        SK(join(b, b->os));
    }
    return cudaSuccess;
}

static graph_entry_t *graph_find(ss_backend_t *b)
{
    for (int g = 0; g < b->ngraphs; g++) {
        graph_entry_t *ge = &b->graphs[g];
        if (ge->nsteps != b->npending)
            continue;
        int same = 1;
        for (int k = 0; k < ge->nsteps && same; k++)
            same = ge->fn[k] == b->pending[k].fn && ge->variant[k] == b->pending[k].variant &&
                   ge->lane[k] == b->pending[k].lane;
        if (same)
            return ge;
    }
    return NULL;
}

/* Capture the pending steps as a graph into a free (or the least recently
 * used) cache entry (under the unsafe-calls lock: graph_capture). */
static ss_err_t capture_steps(ss_backend_t *b, graph_entry_t **out)
{
    graph_entry_t *ge;
    if (b->ngraphs < MAX_GRAPHS) {
        ge = &b->graphs[b->ngraphs++];
    } else {
        ge = &b->graphs[0];
        for (int g = 1; g < MAX_GRAPHS; g++)
            if (b->graphs[g].last_used < ge->last_used)
                ge = &b->graphs[g];
        if (ge->exec)
            CK(b, cudaGraphExecDestroy(ge->exec));
        ge->exec = NULL;
    }
    ge->nsteps = 0;
    CK(b, cudaStreamBeginCapture(b->cs, cudaStreamCaptureModeRelaxed));
    b->capturing = 1;
    CK(b, run_steps(b, 0));
    cudaGraph_t g = NULL;
    b->capturing = 0;
    CK(b, cudaStreamEndCapture(b->cs, &g));
    const cudaError_t e = cudaGraphInstantiate(&ge->exec, g, 0);
    cudaGraphDestroy(g);
    CK(b, e);
    ge->nsteps = b->npending;
    for (int k = 0; k < b->npending; k++) {
        ge->fn[k] = b->pending[k].fn;
        ge->variant[k] = b->pending[k].variant;
        ge->lane[k] = b->pending[k].lane;
    }
    *out = ge;
    return SS_OK;
}

static ss_err_t graph_capture(ss_backend_t *b, graph_entry_t **out)
{
    cx_unsafe_begin();
    const ss_err_t e = capture_steps(b, out);
    cx_unsafe_end();
    return e;
}

/* Run the pending segment: parameters up, then the steps (timed one by
 * one, replayed from a graph, or launched directly), then ev_done. */
ss_err_t cx_flush(ss_backend_t *b)
{
    if (b->npending == 0)
        return SS_OK;
    const unsigned needs = b->seg_needs;
    b->seg_needs = 0;
    if (b->rd_guard && (needs & STEP_WRITES_CLEAN)) {
        /* the residual download of an earlier frame (read_begin) must have
         * left CLEAN first; the wait is recorded on the stream, outside
         * any graph */
        CK(b, cudaStreamWaitEvent(b->cs, b->ev_rd[b->rd_issued % RD_RING], 0));
        b->rd_guard = 0;
    }
    /* the plan's parts travel only with the steps that read them from the
     * host (cu_params_t) */
    const size_t pbytes = needs & STEP_REWEIGHT ? sizeof(cu_params_t)
                          : needs & STEP_PLAN   ? CU_PARAMS_PLAN_BYTES
                          : needs & STEP_PLAN_IN ? CU_PARAMS_PLAN_IN_BYTES
                                                 : CU_PARAMS_BASE_BYTES;
    CK(b, cu_copy_small(b->d_params, b->m_params, pbytes, b->cs));
    if (b->row_bias_dirty) {
        CK(b, cu_copy_small(b->d_row_bias, b->m_row_bias, (size_t)b->h * sizeof(double), b->cs));
        b->row_bias_dirty = 0;
    }
    /* the host may rewrite both mirrors once this event has passed */
    CK(b, cudaEventRecord(b->ev_param, b->cs));
    if (b->timed) {
        CK(b, run_steps(b, 1));
    } else if (b->use_graphs) {
        graph_entry_t *ge = graph_find(b);
        if (!ge) {
            ss_err_t e = graph_capture(b, &ge);
            if (e)
                return e;
        }
        ge->last_used = ++b->clock;
        timer_t_ *t = cx_timer_start(b, b->cs, -1, 0);
        CK(b, cudaGraphLaunch(ge->exec, b->cs));
        cx_timer_stop(b, t, b->cs);
        b->launches++;
    } else {
        timer_t_ *t = cx_timer_start(b, b->cs, -1, 0);
        CK(b, run_steps(b, 0));
        cx_timer_stop(b, t, b->cs);
    }
    b->npending = 0;
    if (b->seg_raw_buf >= 0) {
        /* the segment calibrated a raw buffer: the copy stream may refill
         * it once the segment is through (recorded here, outside any graph,
         * so that the other stream can wait on it) */
        CK(b, cudaEventRecord(b->ev_free[b->seg_raw_buf], b->cs));
        b->seg_raw_buf = -1;
    }
    CK(b, cudaEventRecord(b->ev_done, b->cs));
    return b->dl.pending ? issue_download(b) : SS_OK;
}

/* Block the host until the compute stream's work so far is through: one
 * host round trip, counted (ss_cuda_graph_stats). */
ss_err_t cx_wait_done(ss_backend_t *b)
{
    CK(b, cudaEventRecord(b->ev_done, b->cs));
    CK(b, cudaEventSynchronize(b->ev_done));
    b->waits++;
    return SS_OK;
}

/* Flush and wait for this segment (its last copy to the host). */
ss_err_t cx_flush_wait(ss_backend_t *b)
{
    ss_err_t e = cx_flush(b);
    return e ? e : cx_wait_done(b);
}

/* In the timed mode ops run at once, so each is timed inside its frame. */
ss_err_t cx_op_end(ss_backend_t *b)
{
    return b->timed ? cx_flush(b) : SS_OK;
}
