// trainer/comm_nccl.c — the nccl transport (see comm.h, comm_nccl.h).
//
// One NON-BLOCKING communicator (ncclConfig_t.blocking = 0) per process, on the
// CUDA backend's device. Every bucket collective is an in-place ncclAllReduce (sum)
// on the gradient buffer, on a communication stream of this file's own:
//
//   backend stream:  ... dW kernels of the bucket ... [ready event] ... rest of backward
//   comm stream:                      wait(ready) [start event] ncclAllReduce [done event]
//
// so the reduction overlaps the rest of backward on the device. The host never
// blocks on the device: completion is cudaEventQuery(done), "started" is
// cudaEventQuery(start) (the comm stream reached the collective), and an
// asynchronous NCCL error is ncclCommGetAsyncError; trainer/ddp.c polls these
// with its timeout and calls ncclc_abort (ncclCommAbort) when it expires. A
// non-blocking communicator may answer ncclInProgress to the init and to a
// collective call (the call has not finished enqueueing): we then poll
// ncclCommGetAsyncError, bounded by the same timeout, before touching the stream.
//
// The backend's stream comes from kernels/cuda/cuda_ddp_support.cu.
#ifdef NSA_HAVE_NCCL
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"   // nccl.h: ncclGroupStart() etc.
#include <nccl.h>
#pragma GCC diagnostic pop
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/util.h"
#include "trainer/comm_nccl.h"

void *nsa_cuda_ddp_stream(void);   // kernels/cuda/cuda_ddp_support.cu

_Static_assert(NCCLC_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "NCCL unique id size");

typedef struct {
    cudaEvent_t ready, start, done;
    int active, started;
} NcclSlot;

struct NcclComm {
    ncclComm_t comm;
    cudaStream_t stream;        // the communication stream
    cudaStream_t compute;       // the backend's stream
    int n_slots;
    NcclSlot *slots;
};

// Poll the communicator until it leaves ncclInProgress. 0 ok, -1 error, -2 timeout.
static int wait_not_in_progress(ncclComm_t comm, double timeout_s, const char *what, char *err, size_t errlen) {
    const double t0 = mono_s();
    for (;;) {
        ncclResult_t st = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(comm, &st);
        if (r != ncclSuccess) {
            snprintf(err, errlen, "%s: ncclCommGetAsyncError: %s", what, ncclGetErrorString(r));
            return -1;
        }
        if (st == ncclSuccess) return 0;
        if (st != ncclInProgress) {
            snprintf(err, errlen, "%s: %s (%s)", what, ncclGetErrorString(st), ncclGetLastError(comm));
            return -1;
        }
        if (mono_s() - t0 > timeout_s) {
            snprintf(err, errlen, "%s: not complete after %.0f s", what, timeout_s);
            return -2;
        }
        sleep_s(50e-6);
    }
}

int ncclc_get_id(unsigned char id[NCCLC_ID_BYTES], char *err, size_t errlen) {
    ncclUniqueId u;
    ncclResult_t r = ncclGetUniqueId(&u);
    if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclGetUniqueId: %s", ncclGetErrorString(r));
        return -1;
    }
    memcpy(id, u.internal, NCCLC_ID_BYTES);
    return 0;
}

NcclComm *ncclc_open(const unsigned char id[NCCLC_ID_BYTES], int rank, int world, int n_slots, double timeout_s,
                     int *timed_out, char *err, size_t errlen) {
    *timed_out = 0;
    NcclComm *c = xcalloc(1, sizeof *c);
    c->compute = (cudaStream_t)nsa_cuda_ddp_stream();
    ncclUniqueId u;
    memcpy(u.internal, id, NCCLC_ID_BYTES);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;   // every call returns; we poll (never an endless wait)
    ncclResult_t r = ncclCommInitRankConfig(&c->comm, world, u, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
        snprintf(err, errlen, "ncclCommInitRankConfig (rank %d of %d): %s", rank, world, ncclGetErrorString(r));
        free(c);
        return NULL;
    }
    int w = wait_not_in_progress(c->comm, timeout_s, "ncclCommInitRankConfig", err, errlen);
    if (w) {
        *timed_out = w == -2;
        ncclCommAbort(c->comm);
        free(c);
        return NULL;
    }
    int lo = 0, hi = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&lo, &hi);
    // the highest priority: a ready bucket's reduction should not queue behind backward kernels
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&c->stream, cudaStreamNonBlocking, hi);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamCreateWithPriority: %s", cudaGetErrorString(e));
        ncclCommAbort(c->comm);
        free(c);
        return NULL;
    }
    c->n_slots = n_slots;
    c->slots = xcalloc((size_t)n_slots, sizeof *c->slots);
    for (int i = 0; i < n_slots && e == cudaSuccess; i++) {
        e = cudaEventCreateWithFlags(&c->slots[i].ready, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->slots[i].start, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->slots[i].done, cudaEventDisableTiming);
    }
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaEventCreate: %s", cudaGetErrorString(e));
        ncclc_abort(c);
        return NULL;
    }
    return c;
}

int ncclc_allreduce_start(NcclComm *c, int slot, void *buf, int64_t n, int elem_bytes, double timeout_s,
                          char *err, size_t errlen) {
    NcclSlot *s = &c->slots[slot];
    cudaError_t e = cudaEventRecord(s->ready, c->compute);   // the bucket's gradients are enqueued before this
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, s->ready, 0);
    if (e == cudaSuccess) e = cudaEventRecord(s->start, c->stream);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "allreduce launch: %s", cudaGetErrorString(e));
        return -1;
    }
    ncclResult_t r = ncclAllReduce(buf, buf, (size_t)n, elem_bytes == 8 ? ncclFloat64 : ncclFloat32, ncclSum, c->comm,
                                   c->stream);
    if (r == ncclInProgress) {
        // not yet enqueued on the stream: wait until it is, before recording `done`
        int w = wait_not_in_progress(c->comm, timeout_s, "ncclAllReduce (enqueue)", err, errlen);
        if (w) return -1;
    } else if (r != ncclSuccess) {
        snprintf(err, errlen, "ncclAllReduce: %s (%s)", ncclGetErrorString(r), ncclGetLastError(c->comm));
        return -1;
    }
    e = cudaEventRecord(s->done, c->stream);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "cudaEventRecord: %s", cudaGetErrorString(e));
        return -1;
    }
    s->active = 1;
    s->started = 0;
    return 0;
}

int ncclc_test(NcclComm *c, int slot, int *started, char *err, size_t errlen) {
    NcclSlot *s = &c->slots[slot];
    if (!s->active) {
        if (started) *started = 1;
        return 1;
    }
    ncclResult_t st = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(c->comm, &st);
    if (r != ncclSuccess || (st != ncclSuccess && st != ncclInProgress)) {
        snprintf(err, errlen, "NCCL asynchronous error: %s (%s)", ncclGetErrorString(r != ncclSuccess ? r : st),
                 ncclGetLastError(c->comm));
        return -1;
    }
    if (!s->started) {
        cudaError_t q = cudaEventQuery(s->start);
        if (q == cudaSuccess) s->started = 1;
        else if (q != cudaErrorNotReady) {
            snprintf(err, errlen, "cudaEventQuery: %s", cudaGetErrorString(q));
            return -1;
        }
    }
    if (started) *started = s->started;
    cudaError_t q = cudaEventQuery(s->done);
    if (q == cudaErrorNotReady) return 0;
    if (q != cudaSuccess) {
        snprintf(err, errlen, "cudaEventQuery: %s", cudaGetErrorString(q));
        return -1;
    }
    s->active = 0;
    s->started = 1;
    if (started) *started = 1;
    return 1;
}

void ncclc_abort(NcclComm *c) {
    if (!c) return;
    ncclCommAbort(c->comm);   // non-blocking communicator: returns; kernels are torn down
    free(c->slots);
    free(c);
}

void ncclc_close(NcclComm *c) {
    if (!c) return;
    // every collective has completed (the caller waited): finalize, then destroy
    char err[256];
    ncclResult_t r = ncclCommFinalize(c->comm);
    if (r != ncclSuccess && r != ncclInProgress) {
        nsa_log(LOG_ERROR, "ncclCommFinalize: %s", ncclGetErrorString(r));
        ncclCommAbort(c->comm);
    } else if (wait_not_in_progress(c->comm, 30.0, "ncclCommFinalize", err, sizeof err)) {
        nsa_log(LOG_ERROR, "%s", err);
        ncclCommAbort(c->comm);
    } else {
        ncclCommDestroy(c->comm);
    }
    for (int i = 0; i < c->n_slots; i++) {
        cudaEventDestroy(c->slots[i].ready);
        cudaEventDestroy(c->slots[i].start);
        cudaEventDestroy(c->slots[i].done);
    }
    cudaStreamDestroy(c->stream);
    free(c->slots);
    free(c);
}

int ncclc_version(char *buf, size_t n) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return -1;
    // NCCL >= 2.9: major*10000 + minor*100 + patch
    snprintf(buf, n, "%d.%d.%d", v / 10000, (v / 100) % 100, v % 100);
    return 0;
}
#else
typedef int nsa_comm_nccl_not_built;   // keeps the translation unit non-empty
#endif
