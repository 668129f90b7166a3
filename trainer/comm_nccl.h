// trainer/comm_nccl.h — the NCCL transport (trainer/comm_nccl.c), used by comm.c
// only; built when CMake finds NCCL and CUDA (NSA_HAVE_NCCL). Needs no MPI: the unique id
// reaches the ranks over MPI or over the env/slurm rendezvous (trainer/comm.c).
#ifndef NSA_TRAINER_COMM_NCCL_H
#define NSA_TRAINER_COMM_NCCL_H
#include <stddef.h>
#include <stdint.h>

#define NCCLC_ID_BYTES 128   // NCCL_UNIQUE_ID_BYTES

typedef struct NcclComm NcclComm;

// Rank 0: a fresh unique id. 0 or -1 (err).
int ncclc_get_id(unsigned char id[NCCLC_ID_BYTES], char *err, size_t errlen);
// Non-blocking communicator on the current CUDA device (the backend's), polled
// until initialised or timeout_s passed (*timed_out = 1). NULL with err on failure.
NcclComm *ncclc_open(const unsigned char id[NCCLC_ID_BYTES], int rank, int world, int n_slots, double timeout_s,
                     int *timed_out, char *err, size_t errlen);
// In-place sum on buf (device memory), ordered after everything enqueued so far on
// the backend's stream. 0 or -1.
int ncclc_allreduce_start(NcclComm *c, int slot, void *buf, int64_t n, int elem_bytes, double timeout_s,
                          char *err, size_t errlen);
// 1 complete, 0 pending, -1 error (asynchronous NCCL error or CUDA error).
int ncclc_test(NcclComm *c, int slot, int *started, char *err, size_t errlen);
void ncclc_abort(NcclComm *c);
void ncclc_close(NcclComm *c);
int ncclc_version(char *buf, size_t n);
#endif
