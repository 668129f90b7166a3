// trainer/rendezvous.h — the TCP rendezvous of the env and Slurm bootstraps (docs/ddp.md,
// "Bootstraps"): how ranks started WITHOUT MPI (torchrun-style variables, Kubernetes jobs,
// srun) find each other, agree on the world, receive the NCCL unique id, and run the few
// small control-plane operations of data parallel.
//
// A star on MASTER_ADDR:MASTER_PORT: rank 0 listens, every other rank connects (retrying
// with backoff until rank 0 listens), sends HELLO (rank, world, job token, host, ...);
// rank 0 checks every HELLO (a duplicate rank, another world size or job token, another
// transport or protocol version is a clear error), and once all world-1 peers are there
// answers each with WELCOME (local ranks, every rank's address and host). The connections
// stay open for the run: each control operation (sum/max/min, allgather, broadcast) is
// every rank sending its contribution to rank 0 and rank 0 sending the result back. The
// gradients never go through here: they go over NCCL.
//
// Nothing blocks without a bound. rdzv_join polls with the timeout it is given; the
// control operations are started and then tested (non-blocking sockets, poll(2) with a
// zero timeout), the caller polls with its own timeout. Errors name the peer rank, its
// address and what happened. Pure POSIX: no MPI, no CUDA, no NCCL (tests run it on the CPU).
#ifndef NSA_TRAINER_RENDEZVOUS_H
#define NSA_TRAINER_RENDEZVOUS_H
#include <stddef.h>
#include <stdint.h>

#define RDZV_MAGIC "NSAR"
#define RDZV_VERSION 1
#define RDZV_HEADER_BYTES 16
#define RDZV_MAX_PAYLOAD (64u << 20)   // a frame larger than this is a protocol error
#define RDZV_TOKEN_MAX 255
#define RDZV_HOST_MAX 255
#define RDZV_TABLE_ALL_MAX 256         // WELCOME carries every rank's entry up to this world size

// frame types (the u16 at offset 6 of the header)
enum { RDZV_HELLO = 1, RDZV_WELCOME = 2, RDZV_REJECT = 3, RDZV_ABORT = 4, RDZV_CTRL = 5 };
// control operations (the u8 at offset 0 of a CTRL payload)
enum { RDZV_OP_SUM_F64 = 1, RDZV_OP_MAX_I64 = 2, RDZV_OP_MIN_I64 = 3, RDZV_OP_ALLGATHER_U8 = 4, RDZV_OP_BCAST_U8 = 5 };
// HELLO's mode byte: what the process will do with the world
enum { RDZV_MODE_TRAIN = 0, RDZV_MODE_CHECK = 1 };

typedef struct {
    int rank, world;
    int local_rank, local_size;    // -1: not given (rank 0 derives them from the hosts)
    char addr[256];                // MASTER_ADDR: where rank 0 is reached (rank 0 listens on every address)
    int port;                      // MASTER_PORT
    char token[RDZV_TOKEN_MAX + 1];// job token: every rank must present the same
    char host[RDZV_HOST_MAX + 1];  // this host's name ("" : gethostname)
    int transport;                 // COMM_* of the process; every rank must agree
    int mode;                      // RDZV_MODE_*; every rank must agree
} RdzvConfig;

typedef struct Rdzv Rdzv;

// Join the world: rank 0 listens on port `port` (all addresses) and waits for world-1
// HELLOs; the others connect to addr:port (retrying with backoff while rank 0 is not
// listening or addr does not resolve yet) and wait for WELCOME. Bounded by timeout_s,
// measured from the call. On failure NULL, *rc the exit code nsa-train ends with and err
// one line naming what happened:
//   1  rank 0 cannot listen (the port is in use, naming address and port), a socket error
//   2  the world is inconsistent: a duplicate rank, another WORLD_SIZE, job token,
//      transport, mode or protocol version (rank 0 names the rank and its address, and
//      sends the same message to every connected rank, which ends with it too)
//   4  a timeout: ranks that never arrived (rank 0 names them), rank 0 not reachable (the
//      others name the address and the last error), or a connection lost during the
//      rendezvous; err starts with [COMM-TIMEOUT] or [COMM-ERROR]
// world 1 needs no network: it returns at once.
Rdzv *rdzv_join(const RdzvConfig *c, double timeout_s, int *rc, char *err, size_t errlen);

int rdzv_rank(const Rdzv *z);
int rdzv_world(const Rdzv *z);
int rdzv_local_rank(const Rdzv *z);
int rdzv_local_size(const Rdzv *z);
double rdzv_join_ms(const Rdzv *z);
// Address (as rank 0 saw it; rank 0's: its end of the connections) and host of rank r;
// "" when this rank was not told (worlds above RDZV_TABLE_ALL_MAX: only rank 0 and self).
const char *rdzv_peer_addr(const Rdzv *z, int r);
const char *rdzv_peer_host(const Rdzv *z, int r);

// One control operation at a time over the star (host buffers):
//   SUM_F64 / MAX_I64 / MIN_I64: recv[i] = op over ranks of send[i] (count elements of 8
//     bytes; the sum is taken in rank order, 0, 1, 2, ..., on rank 0: deterministic)
//   ALLGATHER_U8: recv[r*count + i] = send[i] of rank r
//   BCAST_U8: recv[i] = rank 0's send[i] (send is read on rank 0 only)
// start: 0, or -1 (rdzv_error). test: 1 complete, 0 pending, -1 error (rdzv_error names
// the peer rank, its address and what happened).
int rdzv_ctrl_start(Rdzv *z, int op, const void *send, void *recv, int count);
int rdzv_ctrl_test(Rdzv *z);
// What the operation in flight still waits for, for timeout messages:
// "waiting for rank 1 (127.0.0.1)", "waiting for ranks 2-5,9", "waiting for rank 0's result".
void rdzv_ctrl_waiting(const Rdzv *z, char *buf, size_t n);
const char *rdzv_error(const Rdzv *z);
void rdzv_close(Rdzv *z);

// ---- helpers (exported for the tests) -----------------------------------------------------
// The first host of a Slurm node list in compressed notation: "node[01-04,07]" -> "node01",
// "a1,b[2-3]" -> "a1", "rack[1-2]-n[08-09]" -> "rack1-n08". 0, or -1 (malformed or empty).
int rdzv_first_host(const char *nodelist, char *out, size_t n);
// "rank 3", "ranks 1-3,7" of the listed ranks (ascending), cut with "..." past n bytes.
void rdzv_rank_list(const int *ranks, int n_ranks, char *buf, size_t n);
#endif
