// trainer/comm.c — MPI world setup, the mpi transport, the control plane, and the
// dispatch to the nccl transport (trainer/comm_nccl.c). See comm.h.
#define _POSIX_C_SOURCE 200809L   // nanosleep, clock_gettime
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/comm.h"
#ifdef NSA_HAVE_MPI
#include <mpi.h>
#endif
#ifdef NSA_HAVE_NCCL
#include "trainer/comm_nccl.h"
#endif

int comm_transport_parse(const char *s) {
    if (!s) return -1;
    if (!strcmp(s, "none")) return COMM_NONE;
    if (!strcmp(s, "mpi")) return COMM_MPI;
    if (!strcmp(s, "nccl")) return COMM_NCCL;
    return -1;
}

const char *comm_transport_name(int t) {
    return t == COMM_MPI ? "mpi" : t == COMM_NCCL ? "nccl" : "none";
}

int comm_transport_built(int t, const char **why) {
    if (t == COMM_NONE) return 1;
#ifndef NSA_HAVE_MPI
    if (why) *why = "this build has no MPI support (MPI was not found at configure time: apt-get install "
                    "libopenmpi-dev openmpi-bin, then re-run cmake)";
    return 0;
#else
    if (t == COMM_MPI) return 1;
#ifdef NSA_HAVE_NCCL
    return 1;
#else
    if (why) *why = "this build has no NCCL support (needs the CUDA toolkit, MPI and NCCL (nccl.h, libnccl) at "
                    "configure time; set NCCL_HOME for a non-standard install)";
    return 0;
#endif
#endif
}

int comm_env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", NULL};
    for (int i = 0; vars[i]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end = NULL;
        long r = strtol(v, &end, 10);
        if (!*end && r >= 0 && r < (1L << 30)) return (int)r;
    }
    return -1;
}

#ifdef NSA_HAVE_MPI
static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

static void mpi_errstr(int rc, const char *what, char *err, size_t errlen) {
    char s[MPI_MAX_ERROR_STRING];
    int n = 0;
    if (MPI_Error_string(rc, s, &n) != MPI_SUCCESS) snprintf(s, sizeof s, "MPI error %d", rc);
    snprintf(err, errlen, "%s: %s", what, s);
}

// Poll one request until it completes or timeout_s passes. 0, -1 error, -2 timeout.
static int mpi_wait_bounded(MPI_Request *req, double timeout_s, const char *what, char *err, size_t errlen) {
    const double t0 = mono_s();
    long nap = 20;
    for (;;) {
        int flag = 0;
        int rc = MPI_Test(req, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) { mpi_errstr(rc, what, err, errlen); return -1; }
        if (flag) return 0;
        if (mono_s() - t0 > timeout_s) {
            snprintf(err, errlen, "%s: not complete after %.0f s", what, timeout_s);
            return -2;
        }
        nap_us(nap);
        if (nap < 2000) nap *= 2;
    }
}
#endif

int comm_world_init(CommWorld *w, int transport, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->transport = transport;
    w->rank = 0;
    w->world = 1;
    w->local_rank = 0;
    w->local_size = 1;
    if (transport == COMM_NONE) return 0;
    const char *why = NULL;
    if (!comm_transport_built(transport, &why)) {
        snprintf(err, errlen, "--transport %s: %s", comm_transport_name(transport), why);
        return -1;
    }
#ifdef NSA_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Init_thread", err, errlen); return -1; }
        w->mpi_initialized = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &w->world);
    MPI_Comm node;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &w->local_rank);
        MPI_Comm_size(node, &w->local_size);
        MPI_Comm_free(&node);
    } else {
        const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK"), *ls = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
        w->local_rank = lr ? atoi(lr) : 0;
        w->local_size = ls ? atoi(ls) : 1;
    }
    return 0;
#else
    return -1;
#endif
}

void comm_world_finalize(CommWorld *w) {
#ifdef NSA_HAVE_MPI
    if (w->mpi_initialized) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        w->mpi_initialized = 0;
    }
#else
    (void)w;
#endif
}

int comm_mpi_version(char *buf, size_t n) {
#ifdef NSA_HAVE_MPI
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) return -1;
    v[len < MPI_MAX_LIBRARY_VERSION_STRING ? len : MPI_MAX_LIBRARY_VERSION_STRING - 1] = '\0';
    size_t k = strcspn(v, "\n");
    while (k > 0 && (v[k - 1] == ',' || v[k - 1] == ' ' || v[k - 1] == '\r')) k--;
    snprintf(buf, n, "%.*s", (int)k, v);
    return 0;
#else
    (void)buf; (void)n;
    return -1;
#endif
}

int comm_nccl_version(char *buf, size_t n) {
#ifdef NSA_HAVE_NCCL
    return ncclc_version(buf, n);
#else
    (void)buf; (void)n;
    return -1;
#endif
}

// ---- the communicators ------------------------------------------------------------------

#ifdef NSA_HAVE_MPI
typedef struct {
    MPI_Request req;
    int active;
    void *dev;          // the backend buffer (for the copy back when staged)
    size_t bytes;
} MpiSlot;
#endif

struct Comm {
    int transport;
    int rank, world;
    const Backend *be;
    int host_buffers;   // the backend's memory is host memory (cpu, cpu64): reduce in place
    int n_slots;
    size_t max_slot_bytes;
    double timeout_s;
    char err[1024];
#ifdef NSA_HAVE_MPI
    MPI_Comm data, ctrl;
    MpiSlot *slots;
    char **stage;       // [n_slots] host staging buffers (device backend + mpi), lazily allocated
    MPI_Request ctrl_req;
    int ctrl_active;
#endif
#ifdef NSA_HAVE_NCCL
    NcclComm *nccl;
#endif
};

const char *comm_error(const Comm *c) { return c->err; }

Comm *comm_open(const CommWorld *w, const Backend *be, int n_slots, size_t max_slot_bytes, double timeout_s,
                int *timed_out, char *err, size_t errlen) {
    *timed_out = 0;
    if (w->transport == COMM_NONE) {
        snprintf(err, errlen, "comm_open: no transport");
        return NULL;
    }
#ifndef NSA_HAVE_MPI
    (void)be; (void)n_slots; (void)max_slot_bytes; (void)timeout_s;
    snprintf(err, errlen, "this build has no MPI support");
    return NULL;
#else
    Comm *c = calloc(1, sizeof *c);
    c->transport = w->transport;
    c->rank = w->rank;
    c->world = w->world;
    c->be = be;
    c->host_buffers = !strcmp(be->name, "cpu") || !strcmp(be->name, "cpu64");
    c->n_slots = n_slots;
    c->max_slot_bytes = max_slot_bytes;
    c->timeout_s = timeout_s;
    c->data = c->ctrl = MPI_COMM_NULL;
    // both duplicates through MPI_Comm_idup, polled: a rank that never arrives is a
    // timeout, not an endless wait
    MPI_Request rq;
    int rc = MPI_Comm_idup(MPI_COMM_WORLD, &c->ctrl, &rq);
    if (rc == MPI_SUCCESS) {
        rc = mpi_wait_bounded(&rq, timeout_s, "MPI_Comm_idup (control communicator)", err, errlen);
        if (rc == -2) *timed_out = 1;
        if (rc) { free(c); return NULL; }
    } else {
        mpi_errstr(rc, "MPI_Comm_idup", err, errlen);
        free(c);
        return NULL;
    }
    MPI_Comm_set_errhandler(c->ctrl, MPI_ERRORS_RETURN);
    if (c->transport == COMM_MPI) {
        rc = MPI_Comm_idup(MPI_COMM_WORLD, &c->data, &rq);
        if (rc == MPI_SUCCESS) {
            rc = mpi_wait_bounded(&rq, timeout_s, "MPI_Comm_idup (bucket communicator)", err, errlen);
            if (rc == -2) *timed_out = 1;
        } else {
            mpi_errstr(rc, "MPI_Comm_idup", err, errlen);
        }
        if (rc) { free(c); return NULL; }
        MPI_Comm_set_errhandler(c->data, MPI_ERRORS_RETURN);
        c->slots = calloc((size_t)n_slots, sizeof *c->slots);
        c->stage = calloc((size_t)n_slots, sizeof *c->stage);
        return c;
    }
#ifdef NSA_HAVE_NCCL
    if (strcmp(be->name, "cuda")) {
        snprintf(err, errlen, "--transport nccl needs the cuda backend (train.backend is \"%s\"; use --transport mpi "
                 "for the CPU)", be->name);
        free(c);
        return NULL;
    }
    unsigned char id[NCCLC_ID_BYTES];
    memset(id, 0, sizeof id);
    if (c->rank == 0 && ncclc_get_id(id, err, errlen)) {
        // the others are waiting in the broadcast: they time out, this rank exits
        free(c);
        return NULL;
    }
    rc = MPI_Ibcast(id, NCCLC_ID_BYTES, MPI_BYTE, 0, c->ctrl, &rq);
    if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Ibcast (NCCL unique id)", err, errlen); free(c); return NULL; }
    rc = mpi_wait_bounded(&rq, timeout_s, "MPI_Ibcast (NCCL unique id)", err, errlen);
    if (rc) { *timed_out = rc == -2; free(c); return NULL; }
    c->nccl = ncclc_open(id, c->rank, c->world, n_slots, timeout_s, timed_out, err, errlen);
    if (!c->nccl) { free(c); return NULL; }
    return c;
#else
    snprintf(err, errlen, "this build has no NCCL support");
    free(c);
    return NULL;
#endif
#endif
}

int comm_allreduce_start(Comm *c, int slot, void *buf, int64_t n, int elem_bytes) {
    if (slot < 0 || slot >= c->n_slots) { snprintf(c->err, sizeof c->err, "bad slot %d", slot); return -1; }
    size_t bytes = (size_t)n * (size_t)elem_bytes;
#ifdef NSA_HAVE_NCCL
    if (c->transport == COMM_NCCL)
        return ncclc_allreduce_start(c->nccl, slot, buf, n, elem_bytes, c->timeout_s, c->err, sizeof c->err);
#endif
#ifdef NSA_HAVE_MPI
    if (n > 2147483647LL) { snprintf(c->err, sizeof c->err, "bucket of %lld elements is too large for MPI", (long long)n); return -1; }
    MpiSlot *s = &c->slots[slot];
    void *host = buf;
    if (!c->host_buffers) {
        if (!c->stage[slot]) c->stage[slot] = malloc(c->max_slot_bytes > bytes ? c->max_slot_bytes : bytes);
        host = c->stage[slot];
        c->be->to_host(host, buf, bytes);   // synchronises the backend's stream: the gradients are final
    }
    s->dev = buf;
    s->bytes = bytes;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, host, (int)n, elem_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, c->data,
                            &s->req);
    if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Iallreduce", c->err, sizeof c->err); return -1; }
    s->active = 1;
    return 0;
#else
    (void)buf; (void)bytes;
    return -1;
#endif
}

int comm_test(Comm *c, int slot, int *started) {
#ifdef NSA_HAVE_NCCL
    if (c->transport == COMM_NCCL) return ncclc_test(c->nccl, slot, started, c->err, sizeof c->err);
#endif
#ifdef NSA_HAVE_MPI
    MpiSlot *s = &c->slots[slot];
    if (started) *started = 1;
    if (!s->active) return 1;
    int flag = 0;
    int rc = MPI_Test(&s->req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Test (MPI_Iallreduce)", c->err, sizeof c->err); return -1; }
    if (!flag) return 0;
    s->active = 0;
    if (!c->host_buffers) c->be->from_host(s->dev, c->stage[slot], s->bytes);
    return 1;
#else
    (void)slot; (void)started;
    return -1;
#endif
}

int comm_ctrl_start(Comm *c, int op, const void *send, void *recv, int count) {
#ifdef NSA_HAVE_MPI
    if (c->ctrl_active) { snprintf(c->err, sizeof c->err, "control collective already in flight"); return -1; }
    int rc;
    switch (op) {
    case COMM_CTRL_SUM_F64: rc = MPI_Iallreduce(send, recv, count, MPI_DOUBLE, MPI_SUM, c->ctrl, &c->ctrl_req); break;
    case COMM_CTRL_MAX_I64: rc = MPI_Iallreduce(send, recv, count, MPI_INT64_T, MPI_MAX, c->ctrl, &c->ctrl_req); break;
    case COMM_CTRL_MIN_I64: rc = MPI_Iallreduce(send, recv, count, MPI_INT64_T, MPI_MIN, c->ctrl, &c->ctrl_req); break;
    case COMM_CTRL_ALLGATHER_U8:
        rc = MPI_Iallgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, c->ctrl, &c->ctrl_req);
        break;
    default: snprintf(c->err, sizeof c->err, "unknown control op %d", op); return -1;
    }
    if (rc != MPI_SUCCESS) { mpi_errstr(rc, "control collective", c->err, sizeof c->err); return -1; }
    c->ctrl_active = 1;
    return 0;
#else
    (void)op; (void)send; (void)recv; (void)count;
    snprintf(c->err, sizeof c->err, "no MPI");
    return -1;
#endif
}

int comm_ctrl_test(Comm *c) {
#ifdef NSA_HAVE_MPI
    if (!c->ctrl_active) return 1;
    int flag = 0;
    int rc = MPI_Test(&c->ctrl_req, &flag, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Test (control collective)", c->err, sizeof c->err); return -1; }
    if (!flag) return 0;
    c->ctrl_active = 0;
    return 1;
#else
    (void)c;
    return -1;
#endif
}

void comm_abort(Comm *c) {
    if (!c) return;
#ifdef NSA_HAVE_NCCL
    if (c->transport == COMM_NCCL && c->nccl) {
        ncclc_abort(c->nccl);
        c->nccl = NULL;
    }
#endif
}

void comm_close(Comm *c) {
    if (!c) return;
#ifdef NSA_HAVE_NCCL
    if (c->nccl) ncclc_close(c->nccl);
#endif
#ifdef NSA_HAVE_MPI
    if (c->stage)
        for (int i = 0; i < c->n_slots; i++) free(c->stage[i]);
    free(c->stage);
    free(c->slots);
    if (c->data != MPI_COMM_NULL) MPI_Comm_free(&c->data);
    if (c->ctrl != MPI_COMM_NULL) MPI_Comm_free(&c->ctrl);
#endif
    free(c);
}
