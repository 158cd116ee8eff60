/*
 * launch_floor.cu — skysieve-launch-floor: how many frames a second the
 * GPU can start when a frame is a graph of K kernels that do nothing
 * (docs/PERFORMANCE.md, what bounds many feeds). A development program,
 * not installed, never a test: it prints figures, it asserts nothing.
 *
 *   skysieve-launch-floor [--threads T] [--kernels K] [--blocks G]
 *                         [--batch B] [--frames F] [--pdl 0|1]
 *
 * T host threads (the feeds), each with its own stream, launch F graphs
 * one after the other, waiting for graph t-1 after launching graph t, as
 * a feed's worker waits for the frame before. Each graph holds B
 * independent chains of K empty kernels of G blocks of 128 threads: B
 * feeds' frames in one launch. With --pdl 1 the kernels are launched as
 * the chain's are (cu_launch: programmatic stream serialisation, each
 * waiting for the one before in cu_pdl_wait). Prints graphs/s and
 * frames/s (graphs/s × B) over all threads.
 */
#include "cuda/cu_internal.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

namespace {

struct opts {
    int threads = 8, kernels = 68, blocks = 132, batch = 1, frames = 2000, pdl = 1;
};

__global__ void k_empty(int *sink)
{
    cu_pdl_wait();
    if (sink && threadIdx.x == 1023)    /* never: keeps the kernel from being empty code */
        *sink = blockIdx.x;
}

#define CK(call)                                                                      \
    do {                                                                              \
        cudaError_t e_ = (call);                                                      \
        if (e_ != cudaSuccess) {                                                      \
            fprintf(stderr, "launch-floor: %s: %s\n", #call, cudaGetErrorString(e_)); \
            exit(1);                                                                  \
        }                                                                             \
    } while (0)

/* K kernels on stream s, each after the one before (--pdl 1: as the
 * chain launches its kernels). */
void chain(const opts &o, cudaStream_t s)
{
    const dim3 grid((unsigned)o.blocks), block(128);
    for (int k = 0; k < o.kernels; k++) {
        if (o.pdl) {
            CK(cu_launch(k_empty, grid, block, 0, s, (int *)nullptr));
        } else {
            k_empty<<<grid, block, 0, s>>>(nullptr);
            CK(cudaGetLastError());
        }
    }
}

/* The graph of B chains, captured from s (forked onto B-1 more streams). */
cudaGraphExec_t make_graph(const opts &o, cudaStream_t s)
{
    cudaStream_t side[64];
    cudaEvent_t fork, join[64];
    CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    for (int b = 1; b < o.batch; b++) {
        CK(cudaStreamCreateWithFlags(&side[b], cudaStreamNonBlocking));
        CK(cudaEventCreateWithFlags(&join[b], cudaEventDisableTiming));
    }
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CK(cudaEventRecord(fork, s));
    for (int b = 1; b < o.batch; b++) {
        CK(cudaStreamWaitEvent(side[b], fork, 0));
        chain(o, side[b]);
        CK(cudaEventRecord(join[b], side[b]));
    }
    chain(o, s);
    for (int b = 1; b < o.batch; b++)
        CK(cudaStreamWaitEvent(s, join[b], 0));
    CK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t x;
    CK(cudaGraphInstantiate(&x, g, 0));
    CK(cudaGraphDestroy(g));
    return x;
}

struct run {
    const opts *o;
    pthread_barrier_t *start;
    cudaGraphExec_t x;
    cudaStream_t s;
};

void *feed(void *arg)
{
    run *r = (run *)arg;
    cudaEvent_t ev[2];
    for (int i = 0; i < 2; i++)
        CK(cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming));
    pthread_barrier_wait(r->start);
    for (int t = 0; t < r->o->frames; t++) {
        CK(cudaGraphLaunch(r->x, r->s));
        CK(cudaEventRecord(ev[t & 1], r->s));
        if (t > 0)
            CK(cudaEventSynchronize(ev[(t - 1) & 1]));
    }
    CK(cudaStreamSynchronize(r->s));
    pthread_barrier_wait(r->start);
    return nullptr;
}

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int parse(int argc, char **argv, opts *o)
{
    struct { const char *name; int *v, lo, hi; } ks[] = {
        { "--threads", &o->threads, 1, 64 }, { "--kernels", &o->kernels, 1, 1000 },
        { "--blocks", &o->blocks, 1, 100000 }, { "--batch", &o->batch, 1, 64 },
        { "--frames", &o->frames, 1, 10000000 }, { "--pdl", &o->pdl, 0, 1 },
    };
    for (int i = 1; i < argc; i++) {
        int hit = 0;
        for (auto &k : ks)
            if (!strcmp(argv[i], k.name) && i + 1 < argc) {
                char *end;
                long v = strtol(argv[++i], &end, 10);
                if (*end || v < k.lo || v > k.hi) {
                    fprintf(stderr, "launch-floor: %s takes %d..%d\n", k.name, k.lo, k.hi);
                    return -1;
                }
                *k.v = (int)v;
                hit = 1;
            }
        if (!hit) {
            fprintf(stderr, "usage: skysieve-launch-floor [--threads T] [--kernels K] "
                            "[--blocks G] [--batch B] [--frames F] [--pdl 0|1]\n");
            return -1;
        }
    }
    return 0;
}

} // namespace

int main(int argc, char **argv)
{
    opts o;
    if (parse(argc, argv, &o) != 0)
        return 2;
    pthread_barrier_t start;
    pthread_barrier_init(&start, nullptr, (unsigned)o.threads + 1);
    run r[64];
    pthread_t th[64];
    for (int i = 0; i < o.threads; i++) {
        r[i].o = &o;
        r[i].start = &start;
        CK(cudaStreamCreateWithFlags(&r[i].s, cudaStreamNonBlocking));
        r[i].x = make_graph(o, r[i].s);
        CK(cudaGraphLaunch(r[i].x, r[i].s));         /* warm-up */
        CK(cudaStreamSynchronize(r[i].s));
    }
    for (int i = 0; i < o.threads; i++)
        if (pthread_create(&th[i], nullptr, feed, &r[i]) != 0) {
            fprintf(stderr, "launch-floor: cannot start thread %d\n", i);
            return 1;
        }
    pthread_barrier_wait(&start);
    const double t0 = now();
    pthread_barrier_wait(&start);
    const double t1 = now();
    for (int i = 0; i < o.threads; i++)
        pthread_join(th[i], nullptr);
    const double gps = (double)o.threads * o.frames / (t1 - t0);
    printf("launch-floor: threads %d, kernels %d, blocks %d, batch %d, pdl %d: "
           "%.0f graphs/s, %.0f frames/s, %.2f us a frame, %.3f us a kernel\n",
           o.threads, o.kernels, o.blocks, o.batch, o.pdl, gps, gps * o.batch,
           1e6 / (gps * o.batch), 1e6 / (gps * o.batch * o.kernels));
    return 0;
}
