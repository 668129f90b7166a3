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
//         ncclCommGetAsyncError; ncclCommAbort after a timeout.
// How a process learns its rank and world, and how the ranks find each other, is the
// BOOTSTRAP (docs/ddp.md, "Bootstraps"):
//   mpi    the process is an MPI process (mpirun / srun --mpi start it): rank, world
//          size and local rank come from MPI; the NCCL unique id is broadcast over MPI
//          and the small control-plane collectives (the step's mean loss, the
//          static-graph used-set exchange, the end-of-run weight check) go over an MPI
//          communicator of their own, so they never interleave with the bucket
//          collectives. The only bootstrap of the mpi transport.
//   env    torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
//          MASTER_PORT): no MPI. The ranks meet at a TCP rendezvous of our own on
//          MASTER_ADDR:MASTER_PORT (trainer/rendezvous.h), which carries the NCCL unique
//          id and the control plane (a star through rank 0). nccl transport only.
//   slurm  the same rendezvous, rank/world/local rank from SLURM_PROCID, SLURM_NTASKS,
//          SLURM_LOCALID, rank 0's host from the first host of the step's node list.
// Precedence when not forced (--bootstrap): an MPI launcher's variables > torchrun-style
// > Slurm (comm_world_setup).
//
// Nothing here ever blocks without a bound: every operation is started and then
// tested; the caller (trainer/ddp.c) polls with its timeout. comm_world_join and
// comm_open poll their own exchanges with the timeout they are given.
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

enum { COMM_BOOT_AUTO = -1, COMM_BOOT_NONE = 0, COMM_BOOT_MPI = 1, COMM_BOOT_ENV = 2, COMM_BOOT_SLURM = 3 };
// "auto", "mpi", "env", "slurm" -> COMM_BOOT_*; -2 for anything else.
int comm_bootstrap_parse(const char *s);
const char *comm_bootstrap_name(int bootstrap);   // "none", "mpi", "env", "slurm"

struct Rdzv;
typedef struct {
    int transport;         // COMM_*
    int bootstrap;         // COMM_BOOT_*: NONE is one process (transport none, no --check-world)
    int rank, world;       // (0, 1 for COMM_BOOT_NONE)
    int local_rank;        // rank among the processes of this node (mpi: MPI_COMM_TYPE_SHARED;
    int local_size;        //   env/slurm: LOCAL_RANK / SLURM_LOCALID, else derived at the rendezvous)
    int mpi_initialized;   // this process called MPI_Init_thread
    int check_world;       // --check-world (the rendezvous HELLO says so)
    char source[512];      // the variables rank and world came from, e.g. "RANK=1 WORLD_SIZE=2"
    char source_keys[160]; // their names only, comma-separated ("RANK,WORLD_SIZE,MASTER_ADDR,MASTER_PORT")
    char rdzv_addr[256];   // env/slurm: rank 0's address (MASTER_ADDR or Slurm's first host)
    int rdzv_port;         //   and port
    char rdzv_token[256];  //   the job token every rank must present
    struct Rdzv *rdzv;     // env/slurm: the rendezvous, after comm_world_join
    double join_ms;        // how long comm_world_join took
} CommWorld;

// The rank the launcher gives this process, read from its environment before MPI
// is initialised (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK, RANK, SLURM_PROCID), -1 if none.
int comm_env_rank(void);
// Which bootstrap, rank and world (docs/ddp.md "Bootstraps"); no network yet.
//   transport none without check_world: one process (COMM_BOOT_NONE, rank 0, world 1).
//   transport mpi: MPI_Init_thread (MPI_THREAD_FUNNELED), rank and size of MPI_COMM_WORLD,
//     the local rank from MPI_Comm_split_type. bootstrap must be AUTO or MPI.
//   transport nccl, or check_world: `bootstrap` if not AUTO, else the first that applies:
//     an MPI launcher's variables (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK) in a build
//     with MPI -> mpi; RANK/WORLD_SIZE -> env; SLURM_PROCID -> slurm; none of them:
//     nccl in a build with MPI -> mpi (a singleton, world 1), otherwise env with world 1.
// Returns 0, or the exit code (1 MPI failed to initialise, 2 usage: a missing or invalid
// variable, a bootstrap the transport or the build cannot use) with err filled.
int comm_world_setup(CommWorld *w, int transport, int bootstrap, int check_world, char *err, size_t errlen);
// comm_world_setup(w, transport, COMM_BOOT_AUTO, 0, ...): 0, or -1 with err filled.
int comm_world_init(CommWorld *w, int transport, char *err, size_t errlen);
// env/slurm: the TCP rendezvous (trainer/rendezvous.h), bounded by timeout_s; fills the
// local rank/size when the variables did not give them. Nothing to do for mpi/none.
// Returns 0, or the exit code (1 cannot listen, 2 the ranks disagree, 4 a rank never
// arrived / rank 0 unreachable / a connection lost) with err one line (for 4 it starts
// with [COMM-TIMEOUT] or [COMM-ERROR]).
int comm_world_join(CommWorld *w, double timeout_s, char *err, size_t errlen);
// --check-world: after the join, rank 0 broadcasts 128 bytes (as the NCCL unique id would
// be) and every rank allgathers (its rank, pid, host, a digest of the bytes it received);
// each rank checks every record. line: the [WORLD] line (docs/ddp.md). 0, or the exit code
// (1 the records disagree, 4 a timeout or a lost connection) with err filled.
int comm_world_check(CommWorld *w, double timeout_s, char *line, size_t linelen, char *err, size_t errlen);
// MPI_Finalize / closing the rendezvous; only after a clean run (every collective complete
// on every rank).
void comm_world_finalize(CommWorld *w);

// Library versions for --print-env. 0 and buf filled, or -1 when not built.
int comm_mpi_version(char *buf, size_t n);    // first line of MPI_Get_library_version
int comm_nccl_version(char *buf, size_t n);   // ncclGetVersion, "2.28.9"

typedef struct Comm Comm;

// The data-parallel communicators: for mpi a duplicate of MPI_COMM_WORLD for the
// buckets; for nccl a non-blocking NCCL communicator on the backend's device
// (CUDA backend only; its unique id from rank 0 over MPI or the rendezvous); the
// control plane on a second MPI duplicate (mpi bootstrap) or the rendezvous star
// (env/slurm bootstrap, comm_world_join first).
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

// Control plane: host buffers, one operation at a time, over MPI (mpi bootstrap) or
// the rendezvous star through rank 0 (env/slurm).
enum {
    COMM_CTRL_SUM_F64,        // recv[i] = sum over ranks of send[i] (double)
    COMM_CTRL_MAX_I64,        // recv[i] = max over ranks (int64)
    COMM_CTRL_MIN_I64,        // recv[i] = min over ranks (int64)
    COMM_CTRL_ALLGATHER_U8,   // recv[r*count + i] = send[i] of rank r (bytes)
    COMM_CTRL_BCAST_U8,       // recv[i] = send[i] of rank 0 (bytes; send is read on rank 0 only)
};
int comm_ctrl_start(Comm *c, int op, const void *send, void *recv, int count);
int comm_ctrl_test(Comm *c);   // 1 complete, 0 pending, -1 error
// For a timeout message: whom the control collective in flight still waits for
// ("waiting for rank 1 (10.0.0.2)"; rendezvous star only, "" otherwise).
void comm_ctrl_waiting(const Comm *c, char *buf, size_t n);

const char *comm_error(const Comm *c);
// After a timeout or error: ncclCommAbort (nccl); MPI requests are left as they are
// (the process is about to exit without MPI_Finalize).
void comm_abort(Comm *c);
// Free the communicators; only after every collective completed.
void comm_close(Comm *c);
#endif
