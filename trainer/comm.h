// trainer/comm.h — the collective transports of the data-parallel layer (DESIGN 4,
// docs/ddp.md).
//
// Two transports, both optional at build time:
//   mpi   host buffers: MPI_Iallreduce on a host copy of the bucket (in place on the
//         gradient buffer itself for the CPU backends), progressed by MPI_Test. The
//         CPU path, and the A/B transport that tells an NCCL problem from a
//         training-graph problem on the GPU.
//   nccl  device buffers: a NON-BLOCKING NCCL communicator (config.blocking = 0),
//         in-place ncclAllReduce on the gradient buffer, on a stream of its own that
//         waits (cudaStreamWaitEvent) for the backend's stream at the moment the
//         bucket became ready; completion by cudaEventQuery, errors by
//         ncclCommGetAsyncError; ncclCommAbort after a timeout. The unique id is
//         broadcast over MPI.
// Whatever the transport, the process is an MPI process (mpirun / srun start it):
// rank, world size and local rank come from MPI, and small control-plane
// collectives (the step's mean loss, the static-graph used-set exchange, the
// end-of-run weight check) go over an MPI communicator of their own, so they never
// interleave with the bucket collectives.
//
// Nothing here ever blocks without a bound: every operation is started and then
// tested; the caller (trainer/ddp.c) polls with its timeout. comm_world_init and
// comm_open poll their own collectives with the timeout they are given.
#ifndef NSA_TRAINER_COMM_H
#define NSA_TRAINER_COMM_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/ops.h"

enum { COMM_NONE = 0, COMM_MPI = 1, COMM_NCCL = 2 };

// "none", "mpi", "nccl" -> COMM_*; -1 for anything else.
int comm_transport_parse(const char *s);
const char *comm_transport_name(int transport);
// 1 if the transport is built into this binary; else 0 and *why says what is missing.
int comm_transport_built(int transport, const char **why);

typedef struct {
    int transport;         // COMM_*
    int rank, world;       // MPI_COMM_WORLD (0, 1 for COMM_NONE)
    int local_rank;        // rank among the processes of this node (MPI_COMM_TYPE_SHARED)
    int local_size;
    int mpi_initialized;   // this process called MPI_Init_thread
} CommWorld;

// The rank the launcher gives this process, read from its environment before MPI
// is initialised (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, SLURM_PROCID), -1 if none.
int comm_env_rank(void);
// transport none: rank 0, world 1. mpi / nccl: MPI_Init_thread (MPI_THREAD_FUNNELED),
// rank and size of MPI_COMM_WORLD, the local rank from MPI_Comm_split_type. Returns
// 0, or -1 with err filled (MPI not built: the caller exits 2).
int comm_world_init(CommWorld *w, int transport, char *err, size_t errlen);
// MPI_Finalize; only after a clean run (every collective complete on every rank).
void comm_world_finalize(CommWorld *w);

// Library versions for --print-env. 0 and buf filled, or -1 when not built.
int comm_mpi_version(char *buf, size_t n);    // first line of MPI_Get_library_version
int comm_nccl_version(char *buf, size_t n);   // ncclGetVersion, "2.28.9"

typedef struct Comm Comm;

// The data-parallel communicators: for mpi a duplicate of MPI_COMM_WORLD for the
// buckets; for nccl a non-blocking NCCL communicator on the backend's device
// (CUDA backend only); for both a second MPI duplicate for the control plane.
// n_slots concurrent bucket collectives (one per bucket), each at most
// max_slot_bytes. Returns NULL with err filled; *timed_out = 1 if the reason is
// that the NCCL initialisation (or the id broadcast) did not finish in timeout_s.
Comm *comm_open(const CommWorld *w, const Backend *be, int n_slots, size_t max_slot_bytes, double timeout_s,
                int *timed_out, char *err, size_t errlen);
// Start an in-place SUM allreduce of n floating-point elements (elem_bytes 4 or 8)
// at buf (backend memory) in `slot`. The data must be final on the backend's
// stream when this is called (it is: grad_ready). 0, or -1 (comm_error).
int comm_allreduce_start(Comm *c, int slot, void *buf, int64_t n, int elem_bytes);
// 1 complete (for mpi with a device backend: copied back), 0 pending, -1 error
// (comm_error). *started (or NULL) becomes 1 once the transport has begun the
// collective (nccl: the comm stream reached it; mpi: handed to MPI).
int comm_test(Comm *c, int slot, int *started);

// Control plane: host buffers, one operation at a time, over MPI.
enum {
    COMM_CTRL_SUM_F64,        // recv[i] = sum over ranks of send[i] (double)
    COMM_CTRL_MAX_I64,        // recv[i] = max over ranks (int64)
    COMM_CTRL_MIN_I64,        // recv[i] = min over ranks (int64)
    COMM_CTRL_ALLGATHER_U8,   // recv[r*count + i] = send[i] of rank r (bytes)
};
int comm_ctrl_start(Comm *c, int op, const void *send, void *recv, int count);
int comm_ctrl_test(Comm *c);   // 1 complete, 0 pending, -1 error

const char *comm_error(const Comm *c);
// After a timeout or error: ncclCommAbort (nccl); MPI requests are left as they are
// (the process is about to exit without MPI_Finalize).
void comm_abort(Comm *c);
// Free the communicators; only after every collective completed.
void comm_close(Comm *c);
#endif
