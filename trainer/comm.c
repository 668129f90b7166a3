// trainer/comm.c — the world (bootstraps: MPI, torchrun-style variables, Slurm), the mpi
// transport, the control plane, and the dispatch to the nccl transport
// (trainer/comm_nccl.c) and the rendezvous (trainer/rendezvous.c). See comm.h.
#define _POSIX_C_SOURCE 200809L   // nanosleep, clock_gettime, gethostname
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "trainer/comm.h"
#include "common/digest.h"
#include "common/util.h"
#include "common/envparse.h"
#include "trainer/rendezvous.h"
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
    if (t == COMM_MPI) {
#ifdef NSA_HAVE_MPI
        return 1;
#else
        if (why) *why = "this build has no MPI support (MPI was not found at configure time: apt-get install "
                        "libopenmpi-dev openmpi-bin, then re-run cmake)";
        return 0;
#endif
    }
#ifdef NSA_HAVE_NCCL
    return 1;
#else
    if (why) *why = "this build has no NCCL support (needs the CUDA toolkit and NCCL (nccl.h, libnccl) at configure "
                    "time; set NCCL_HOME for a non-standard install)";
    return 0;
#endif
}

int comm_bootstrap_parse(const char *s) {
    if (!s) return -2;
    if (!strcmp(s, "auto")) return COMM_BOOT_AUTO;
    if (!strcmp(s, "mpi")) return COMM_BOOT_MPI;
    if (!strcmp(s, "env")) return COMM_BOOT_ENV;
    if (!strcmp(s, "slurm")) return COMM_BOOT_SLURM;
    return -2;
}

const char *comm_bootstrap_name(int b) {
    return b == COMM_BOOT_MPI ? "mpi" : b == COMM_BOOT_ENV ? "env" : b == COMM_BOOT_SLURM ? "slurm"
                                                               : b == COMM_BOOT_AUTO ? "auto" : "none";
}

int comm_env_rank(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "RANK", "SLURM_PROCID", NULL};
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
        sleep_s((double)nap * 1e-6);
        if (nap < 2000) nap *= 2;
    }
}
#endif

// Poll the rendezvous' control operation in flight until it completes or timeout_s
// passes. 0, -1 error (err names the peer), -2 timeout (err says whom it waited for).
static int rdzv_wait_bounded(struct Rdzv *z, double timeout_s, const char *what, char *err, size_t errlen) {
    const double t0 = mono_s();
    long nap = 20;
    for (;;) {
        int r = rdzv_ctrl_test(z);
        if (r < 0) { snprintf(err, errlen, "%s: %s", what, rdzv_error(z)); return -1; }
        if (r > 0) return 0;
        if (mono_s() - t0 > timeout_s) {
            char wt[512];
            rdzv_ctrl_waiting(z, wt, sizeof wt);
            snprintf(err, errlen, "%s: not complete after %.0f s (%s)", what, timeout_s, wt);
            return -2;
        }
        sleep_s((double)nap * 1e-6);
        if (nap < 2000) nap *= 2;
    }
}

// ---- the world: bootstraps ------------------------------------------------------------------

static const char *env_str(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

// the MPI launcher variable set in this environment, or NULL
static const char *mpi_launcher_var(void) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};
    for (int i = 0; vars[i]; i++)
        if (env_str(vars[i])) return vars[i];
    return NULL;
}

static void src_add(CommWorld *w, const char *name) {
    const char *v = getenv(name);
    size_t l = strlen(w->source), k = strlen(w->source_keys);
    if (v) snprintf(w->source + l, sizeof w->source - l, "%s%s=%s", l ? " " : "", name, v);
    snprintf(w->source_keys + k, sizeof w->source_keys - k, "%s%s", k ? "," : "", name);
}

// The rendezvous port: NSA_RDZV_PORT, else MASTER_PORT (+1 under torchrun's agent store,
// which holds MASTER_PORT itself), else `dflt`. 0 or 2 (err).
static int rdzv_port_from_env(CommWorld *w, int dflt, const char *dflt_why, char *err, size_t errlen) {
    int port = 0, r;
    if ((r = nsa_env_int("NSA_RDZV_PORT", 1, 65535, &port, err, errlen)) < 0) return 2;
    if (r) { src_add(w, "NSA_RDZV_PORT"); w->rdzv_port = port; return 0; }
    if ((r = nsa_env_int("MASTER_PORT", 1, 65535, &port, err, errlen)) < 0) return 2;
    if (r) {
        src_add(w, "MASTER_PORT");
        const char *agent = env_str("TORCHELASTIC_USE_AGENT_STORE");
        if (agent && (!strcmp(agent, "True") || !strcmp(agent, "1"))) {
            // torchrun's static rendezvous: its agent's TCPStore listens on MASTER_PORT
            if (port == 65535) {
                snprintf(err, errlen, "MASTER_PORT=65535 is torchrun's store (TORCHELASTIC_USE_AGENT_STORE=%s) and the "
                         "rendezvous would take MASTER_PORT+1: set NSA_RDZV_PORT", agent);
                return 2;
            }
            src_add(w, "TORCHELASTIC_USE_AGENT_STORE");
            port++;
        }
        w->rdzv_port = port;
        return 0;
    }
    if (dflt <= 0) {
        snprintf(err, errlen, "%s", dflt_why);
        return 2;
    }
    w->rdzv_port = dflt;
    return 0;
}

// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. 0 or 2.
static int setup_env(CommWorld *w, char *err, size_t errlen) {
    int have_r, have_w, r;
    w->rank = w->world = -1;
    w->local_rank = w->local_size = -1;
    if ((have_r = nsa_env_int("RANK", 0, 1 << 24, &w->rank, err, errlen)) < 0) return 2;
    if ((have_w = nsa_env_int("WORLD_SIZE", 1, 1 << 24, &w->world, err, errlen)) < 0) return 2;
    if (!have_r && !have_w) {   // no variables at all: one rank
        w->rank = 0;
        w->world = 1;
        snprintf(w->source, sizeof w->source, "no RANK/WORLD_SIZE: one rank");
        snprintf(w->source_keys, sizeof w->source_keys, "-");
    } else if (!have_r || !have_w) {
        snprintf(err, errlen, "bootstrap env: %s is set but %s is not (torchrun-style variables: RANK, WORLD_SIZE, "
                 "MASTER_ADDR, MASTER_PORT; LOCAL_RANK, LOCAL_WORLD_SIZE optional)", have_r ? "RANK" : "WORLD_SIZE",
                 have_r ? "WORLD_SIZE" : "RANK");
        return 2;
    } else {
        src_add(w, "RANK");
        src_add(w, "WORLD_SIZE");
    }
    if (w->rank >= w->world) {
        snprintf(err, errlen, "bootstrap env: RANK=%d is not below WORLD_SIZE=%d", w->rank, w->world);
        return 2;
    }
    if ((r = nsa_env_int("LOCAL_RANK", 0, 1 << 24, &w->local_rank, err, errlen)) < 0) return 2;
    if (r) src_add(w, "LOCAL_RANK");
    if ((r = nsa_env_int("LOCAL_WORLD_SIZE", 1, 1 << 24, &w->local_size, err, errlen)) < 0) return 2;
    if (r) src_add(w, "LOCAL_WORLD_SIZE");
    if (w->local_rank >= 0 && w->local_size > 0 && w->local_rank >= w->local_size) {
        snprintf(err, errlen, "bootstrap env: LOCAL_RANK=%d is not below LOCAL_WORLD_SIZE=%d", w->local_rank,
                 w->local_size);
        return 2;
    }
    const char *addr = env_str("MASTER_ADDR");
    if (addr) {
        src_add(w, "MASTER_ADDR");
        snprintf(w->rdzv_addr, sizeof w->rdzv_addr, "%s", addr);
    } else if (w->world > 1) {
        snprintf(err, errlen, "bootstrap env: WORLD_SIZE=%d but MASTER_ADDR is not set (rank 0's address: every rank "
                 "connects to MASTER_ADDR:MASTER_PORT)", w->world);
        return 2;
    }
    if (rdzv_port_from_env(w, 29500, "", err, errlen)) return 2;
    const char *tok = env_str("NSA_RDZV_TOKEN");
    if (tok) src_add(w, "NSA_RDZV_TOKEN");
    else if ((tok = env_str("TORCHELASTIC_RUN_ID"))) src_add(w, "TORCHELASTIC_RUN_ID");
    snprintf(w->rdzv_token, sizeof w->rdzv_token, "%s", tok ? tok : "");
    return 0;
}

// SLURM_PROCID, SLURM_STEP_NUM_TASKS / SLURM_NTASKS, SLURM_LOCALID, the first host of the
// step's node list (or MASTER_ADDR), MASTER_PORT or 20000 + SLURM_JOB_ID % 10000. 0 or 2.
static int setup_slurm(CommWorld *w, char *err, size_t errlen) {
    int r;
    w->local_rank = w->local_size = -1;
    if ((r = nsa_env_int("SLURM_PROCID", 0, 1 << 24, &w->rank, err, errlen)) <= 0) {
        if (!r) snprintf(err, errlen, "bootstrap slurm: SLURM_PROCID is not set (start the ranks with srun)");
        return 2;
    }
    src_add(w, "SLURM_PROCID");
    static const char *const nt[] = {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS", NULL};
    r = 0;
    for (int i = 0; nt[i] && !r; i++) {
        if ((r = nsa_env_int(nt[i], 1, 1 << 24, &w->world, err, errlen)) < 0) return 2;
        if (r) src_add(w, nt[i]);
    }
    if (!r) {
        snprintf(err, errlen, "bootstrap slurm: none of SLURM_STEP_NUM_TASKS, SLURM_NTASKS, SLURM_NPROCS is set");
        return 2;
    }
    if (w->rank >= w->world) {
        snprintf(err, errlen, "bootstrap slurm: SLURM_PROCID=%d is not below the number of tasks %d", w->rank, w->world);
        return 2;
    }
    if ((r = nsa_env_int("SLURM_LOCALID", 0, 1 << 24, &w->local_rank, err, errlen)) < 0) return 2;
    if (r) src_add(w, "SLURM_LOCALID");
    const char *addr = env_str("MASTER_ADDR");
    if (addr) {
        src_add(w, "MASTER_ADDR");
        snprintf(w->rdzv_addr, sizeof w->rdzv_addr, "%s", addr);
    } else {
        static const char *const nl[] = {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", NULL};
        const char *list = NULL, *name = NULL;
        for (int i = 0; nl[i] && !list; i++)
            if ((list = env_str(nl[i]))) name = nl[i];
        if (!list) {
            if (w->world > 1) {
                snprintf(err, errlen, "bootstrap slurm: no node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) and no "
                         "MASTER_ADDR: rank 0's host is unknown");
                return 2;
            }
        } else if (rdzv_first_host(list, w->rdzv_addr, sizeof w->rdzv_addr)) {
            snprintf(err, errlen, "bootstrap slurm: %s=%s: cannot read its first host (set MASTER_ADDR)", name, list);
            return 2;
        } else {
            src_add(w, name);
        }
    }
    int job = -1;
    if ((r = nsa_env_int("SLURM_JOB_ID", 0, 0x7fffffff, &job, err, errlen)) < 0) return 2;
    if (r) src_add(w, "SLURM_JOB_ID");
    if (rdzv_port_from_env(w, job >= 0 ? 20000 + job % 10000 : (w->world > 1 ? 0 : 29500),
                           "bootstrap slurm: neither MASTER_PORT nor SLURM_JOB_ID is set: the rendezvous port is unknown",
                           err, errlen))
        return 2;
    const char *tok = env_str("NSA_RDZV_TOKEN");
    if (tok) {
        src_add(w, "NSA_RDZV_TOKEN");
        snprintf(w->rdzv_token, sizeof w->rdzv_token, "%s", tok);
    } else {
        const char *step = env_str("SLURM_STEP_ID");
        snprintf(w->rdzv_token, sizeof w->rdzv_token, "slurm-%s.%s", env_str("SLURM_JOB_ID") ? getenv("SLURM_JOB_ID") : "?",
                 step ? step : "?");
    }
    return 0;
}

#ifdef NSA_HAVE_MPI
static int setup_mpi(CommWorld *w, char *err, size_t errlen) {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
        int provided = 0;
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
        if (rc != MPI_SUCCESS) { mpi_errstr(rc, "MPI_Init_thread", err, errlen); return 1; }
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
    const char *v = mpi_launcher_var();
    if (v) src_add(w, v);
    else snprintf(w->source, sizeof w->source, "MPI singleton");
    if (!v) snprintf(w->source_keys, sizeof w->source_keys, "-");
    return 0;
}
#endif

int comm_world_setup(CommWorld *w, int transport, int bootstrap, int check_world, char *err, size_t errlen) {
    memset(w, 0, sizeof *w);
    w->transport = transport;
    w->bootstrap = COMM_BOOT_NONE;
    w->rank = 0;
    w->world = 1;
    w->local_rank = 0;
    w->local_size = 1;
    w->check_world = check_world;
    if (transport == COMM_NONE && !check_world) return 0;
    const char *why = NULL;
    if (!comm_transport_built(transport, &why)) {
        snprintf(err, errlen, "--transport %s: %s", comm_transport_name(transport), why);
        return 2;
    }
    const char *mv = mpi_launcher_var();
#ifdef NSA_HAVE_MPI
    const int have_mpi = 1;
#else
    const int have_mpi = 0;
#endif
    int b = bootstrap;
    if (transport == COMM_MPI) {
        if (b != COMM_BOOT_AUTO && b != COMM_BOOT_MPI) {
            snprintf(err, errlen, "--transport mpi --bootstrap %s: the mpi transport is MPI: it needs the mpi bootstrap "
                     "(mpirun, or srun with an MPI plugin); --bootstrap env|slurm carries the nccl transport",
                     comm_bootstrap_name(b));
            return 2;
        }
        b = COMM_BOOT_MPI;
    } else if (b == COMM_BOOT_AUTO) {
        if (mv && have_mpi) b = COMM_BOOT_MPI;
        else if (env_str("RANK") || env_str("WORLD_SIZE")) b = COMM_BOOT_ENV;
        else if (env_str("SLURM_PROCID")) b = COMM_BOOT_SLURM;
        else if (mv) {
            snprintf(err, errlen, "%s is set (an MPI launcher started this process) but this build has no MPI support: "
                     "start the ranks with torchrun-style variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or "
                     "srun, or pass --bootstrap env|slurm", mv);
            return 2;
        } else if (transport == COMM_NCCL && have_mpi) b = COMM_BOOT_MPI;   // an MPI singleton, as always
        else b = COMM_BOOT_ENV;                                             // one rank, no network
    }
    if (b == COMM_BOOT_MPI && !have_mpi) {
        snprintf(err, errlen, "--bootstrap mpi: this build has no MPI support (apt-get install libopenmpi-dev "
                 "openmpi-bin, then re-run cmake)");
        return 2;
    }
    w->bootstrap = b;
    int rc = 0;
    if (b == COMM_BOOT_ENV) rc = setup_env(w, err, errlen);
    else if (b == COMM_BOOT_SLURM) rc = setup_slurm(w, err, errlen);
#ifdef NSA_HAVE_MPI
    else rc = setup_mpi(w, err, errlen);
#endif
    if (rc) return rc;
    if (b != COMM_BOOT_MPI) {
        // what is not given comes from the rendezvous (comm_world_join); until then
        if (w->local_rank < 0) w->local_rank = w->world == 1 ? 0 : -1;
        if (w->local_size < 0) w->local_size = w->world == 1 ? 1 : -1;
    }
    return 0;
}

int comm_world_init(CommWorld *w, int transport, char *err, size_t errlen) {
    return comm_world_setup(w, transport, COMM_BOOT_AUTO, 0, err, errlen) ? -1 : 0;
}

int comm_world_join(CommWorld *w, double timeout_s, char *err, size_t errlen) {
    if (w->bootstrap != COMM_BOOT_ENV && w->bootstrap != COMM_BOOT_SLURM) return 0;
    if (w->rdzv) return 0;
    const double t0 = mono_s();
    RdzvConfig c;
    memset(&c, 0, sizeof c);
    c.rank = w->rank;
    c.world = w->world;
    c.local_rank = w->local_rank;
    c.local_size = w->local_size;
    snprintf(c.addr, sizeof c.addr, "%s", w->rdzv_addr);
    c.port = w->rdzv_port;
    snprintf(c.token, sizeof c.token, "%s", w->rdzv_token);
    if (gethostname(c.host, sizeof c.host - 1)) snprintf(c.host, sizeof c.host, "?");
    c.host[sizeof c.host - 1] = 0;
    c.transport = w->transport;
    c.mode = w->check_world ? RDZV_MODE_CHECK : RDZV_MODE_TRAIN;
    int rc = 0;
    w->rdzv = rdzv_join(&c, timeout_s, &rc, err, errlen);
    if (!w->rdzv) return rc ? rc : 1;
    w->local_rank = rdzv_local_rank(w->rdzv);
    w->local_size = rdzv_local_size(w->rdzv);
    w->join_ms = (mono_s() - t0) * 1e3;
    return 0;
}

// --check-world's control collectives: over the rendezvous, or MPI_COMM_WORLD
static int world_ctrl(CommWorld *w, int op, const void *send, void *recv, int count, double timeout_s,
                      const char *what, char *err, size_t errlen) {
    if (w->rdzv) {
        int rop = op == COMM_CTRL_ALLGATHER_U8 ? RDZV_OP_ALLGATHER_U8 : RDZV_OP_BCAST_U8;
        if (rdzv_ctrl_start(w->rdzv, rop, send, recv, count)) {
            snprintf(err, errlen, "%s: %s", what, rdzv_error(w->rdzv));
            return -1;
        }
        return rdzv_wait_bounded(w->rdzv, timeout_s, what, err, errlen);
    }
#ifdef NSA_HAVE_MPI
    if (w->bootstrap == COMM_BOOT_MPI) {
        MPI_Request rq;
        int rc;
        if (op == COMM_CTRL_ALLGATHER_U8) {
            rc = MPI_Iallgather(send, count, MPI_BYTE, recv, count, MPI_BYTE, MPI_COMM_WORLD, &rq);
        } else {
            if (w->rank == 0) memcpy(recv, send, (size_t)count);
            rc = MPI_Ibcast(recv, count, MPI_BYTE, 0, MPI_COMM_WORLD, &rq);
        }
        if (rc != MPI_SUCCESS) { mpi_errstr(rc, what, err, errlen); return -1; }
        return mpi_wait_bounded(&rq, timeout_s, what, err, errlen);
    }
#endif
    memcpy(recv, send, (size_t)count);   // one process
    return 0;
}

#define CHECK_REC 80   // u32 rank | u32 pid | u64 digest of the broadcast bytes | host (64 bytes, NUL-padded)

int comm_world_check(CommWorld *w, double timeout_s, char *line, size_t linelen, char *err, size_t errlen) {
    const int W = w->world;
    unsigned char id[128], got[128];
    memset(id, 0, sizeof id);
    if (w->rank == 0) {   // fresh bytes, as ncclGetUniqueId's would be
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        ssize_t k = fd >= 0 ? read(fd, id, sizeof id) : -1;
        if (fd >= 0) close(fd);
        if (k != (ssize_t)sizeof id) {
            uint64_t s = (uint64_t)getpid() ^ (uint64_t)(mono_s() * 1e9);
            for (size_t i = 0; i < sizeof id; i++) { s = s * 6364136223846793005ull + 1442695040888963407ull; id[i] = (unsigned char)(s >> 56); }
        }
    }
    char e2[1024];
    int r = world_ctrl(w, COMM_CTRL_BCAST_U8, id, got, (int)sizeof got, timeout_s, "broadcast (the id exchange)", e2,
                       sizeof e2);
    if (r) {
        snprintf(err, errlen, "%s rank %d: --check-world: %s", r == -2 ? "[COMM-TIMEOUT]" : "[COMM-ERROR]", w->rank, e2);
        return 4;
    }
    const uint64_t h = digest64(got, sizeof got, 0);
    unsigned char mine[CHECK_REC];
    memset(mine, 0, sizeof mine);
    uint32_t u[2] = {(uint32_t)w->rank, (uint32_t)getpid()};
    for (int i = 0; i < 2; i++)
        for (int b = 0; b < 4; b++) mine[4 * i + b] = (unsigned char)(u[i] >> (24 - 8 * b));
    for (int b = 0; b < 8; b++) mine[8 + b] = (unsigned char)(h >> (56 - 8 * b));
    char host[256] = "?";
    if (gethostname(host, sizeof host - 1)) snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    snprintf((char *)mine + 16, 64, "%s", host);
    unsigned char *all = xcalloc((size_t)W, CHECK_REC);
    r = world_ctrl(w, COMM_CTRL_ALLGATHER_U8, mine, all, CHECK_REC, timeout_s, "allgather (the world check)", e2,
                   sizeof e2);
    if (r) {
        snprintf(err, errlen, "%s rank %d: --check-world: %s", r == -2 ? "[COMM-TIMEOUT]" : "[COMM-ERROR]", w->rank, e2);
        free(all);
        return 4;
    }
    char hex[17], rz[300] = "-";
    digest64_hex(h, hex);
    if (w->rdzv && W > 1)
        snprintf(rz, sizeof rz, strchr(w->rdzv_addr, ':') ? "[%s]:%d" : "%s:%d", w->rdzv_addr, w->rdzv_port);
    size_t n = (size_t)snprintf(line, linelen,
        "[WORLD] rank=%d world=%d local_rank=%d local_size=%d bootstrap=%s transport=%s source=%s rendezvous=%s "
        "id=%s join_ms=%.1f peers=", w->rank, W, w->local_rank, w->local_size, comm_bootstrap_name(w->bootstrap),
        comm_transport_name(w->transport), w->source_keys[0] ? w->source_keys : "-", rz, hex, w->join_ms);
    int bad = -1;
    for (int q = 0; q < W; q++) {
        const unsigned char *rec = all + (size_t)q * CHECK_REC;
        uint32_t rr = (uint32_t)rec[0] << 24 | (uint32_t)rec[1] << 16 | (uint32_t)rec[2] << 8 | rec[3];
        uint64_t hq = 0;
        for (int b = 0; b < 8; b++) hq = hq << 8 | rec[8 + b];
        if (rr != (uint32_t)q || hq != h) {
            if (bad < 0) bad = q;
            continue;
        }
        char hq_host[65];
        snprintf(hq_host, sizeof hq_host, "%.64s", (const char *)rec + 16);
        const char *addr = w->rdzv ? rdzv_peer_addr(w->rdzv, q) : "";
        if (n < linelen)
            n += (size_t)snprintf(line + n, linelen - n, "%s%d@%s(%s)", q ? "," : "", q, addr[0] ? addr : "-", hq_host);
    }
    if (bad >= 0) {
        const unsigned char *rec = all + (size_t)bad * CHECK_REC;
        snprintf(err, errlen, "rank %d: --check-world: the record of rank %d is wrong (it says rank %u; its digest of "
                 "rank 0's bytes %s this rank's): the control plane is broken", w->rank, bad,
                 (unsigned)((uint32_t)rec[0] << 24 | (uint32_t)rec[1] << 16 | (uint32_t)rec[2] << 8 | rec[3]),
                 memcmp(rec + 8, mine + 8, 8) ? "differs from" : "equals");
        free(all);
        return 1;
    }
    free(all);
    return 0;
}

void comm_world_finalize(CommWorld *w) {
    if (w->rdzv) {
        rdzv_close(w->rdzv);
        w->rdzv = NULL;
    }
#ifdef NSA_HAVE_MPI
    if (w->mpi_initialized) {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
        w->mpi_initialized = 0;
    }
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
    struct Rdzv *rdzv;  // env/slurm bootstrap: the control plane is the rendezvous star (the world owns it)
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

// env/slurm bootstrap: nccl only; the unique id over the rendezvous, the control plane on it
static Comm *open_rdzv(Comm *c, const CommWorld *w, int n_slots, double timeout_s, int *timed_out, char *err,
                       size_t errlen) {
    if (c->transport != COMM_NCCL) {
        snprintf(err, errlen, "--transport %s needs the mpi bootstrap (bootstrap here: %s)",
                 comm_transport_name(c->transport), comm_bootstrap_name(w->bootstrap));
        free(c);
        return NULL;
    }
    if (!w->rdzv) {
        snprintf(err, errlen, "comm_open: bootstrap %s: the world was not joined (comm_world_join)",
                 comm_bootstrap_name(w->bootstrap));
        free(c);
        return NULL;
    }
    c->rdzv = w->rdzv;
#ifdef NSA_HAVE_NCCL
    if (strcmp(c->be->name, "cuda")) {
        snprintf(err, errlen, "--transport nccl needs the cuda backend (train.backend is \"%s\")", c->be->name);
        free(c);
        return NULL;
    }
    unsigned char id[NCCLC_ID_BYTES], got[NCCLC_ID_BYTES];
    memset(id, 0, sizeof id);
    if (c->rank == 0 && ncclc_get_id(id, err, errlen)) {
        // the others wait in the broadcast: they see rank 0's connection close when it exits
        free(c);
        return NULL;
    }
    if (rdzv_ctrl_start(c->rdzv, RDZV_OP_BCAST_U8, id, got, NCCLC_ID_BYTES)) {
        snprintf(err, errlen, "broadcast of the NCCL unique id over the rendezvous: %s", rdzv_error(c->rdzv));
        free(c);
        return NULL;
    }
    int rc = rdzv_wait_bounded(c->rdzv, timeout_s, "broadcast of the NCCL unique id over the rendezvous", err, errlen);
    if (rc) { *timed_out = 1; free(c); return NULL; }   // a timeout or a lost connection: exit 4
    c->nccl = ncclc_open(got, c->rank, c->world, n_slots, timeout_s, timed_out, err, errlen);
    if (!c->nccl) { free(c); return NULL; }
    return c;
#else
    (void)n_slots; (void)timeout_s; (void)timed_out;
    snprintf(err, errlen, "this build has no NCCL support");
    free(c);
    return NULL;
#endif
}

Comm *comm_open(const CommWorld *w, const Backend *be, int n_slots, size_t max_slot_bytes, double timeout_s,
                int *timed_out, char *err, size_t errlen) {
    *timed_out = 0;
    if (w->transport == COMM_NONE) {
        snprintf(err, errlen, "comm_open: no transport");
        return NULL;
    }
    Comm *c = xcalloc(1, sizeof *c);
    c->transport = w->transport;
    c->rank = w->rank;
    c->world = w->world;
    c->be = be;
    c->host_buffers = !strcmp(be->name, "cpu") || !strcmp(be->name, "cpu64");
    c->n_slots = n_slots;
    c->max_slot_bytes = max_slot_bytes;
    c->timeout_s = timeout_s;
#ifdef NSA_HAVE_MPI
    c->data = c->ctrl = MPI_COMM_NULL;   // (Open MPI's MPI_COMM_NULL is not 0: comm_close compares)
#endif
    if (w->bootstrap != COMM_BOOT_MPI) return open_rdzv(c, w, n_slots, timeout_s, timed_out, err, errlen);
#ifndef NSA_HAVE_MPI
    snprintf(err, errlen, "this build has no MPI support");
    free(c);
    return NULL;
#else
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
        c->slots = xcalloc((size_t)n_slots, sizeof *c->slots);
        c->stage = xcalloc((size_t)n_slots, sizeof *c->stage);
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
        if (!c->stage[slot]) c->stage[slot] = xmalloc(c->max_slot_bytes > bytes ? c->max_slot_bytes : bytes);
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
    snprintf(c->err, sizeof c->err, "no transport for the buckets");
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
    snprintf(c->err, sizeof c->err, "no transport for the buckets");
    return -1;
#endif
}

static int rdzv_op_of(int op) {
    switch (op) {
    case COMM_CTRL_SUM_F64: return RDZV_OP_SUM_F64;
    case COMM_CTRL_MAX_I64: return RDZV_OP_MAX_I64;
    case COMM_CTRL_MIN_I64: return RDZV_OP_MIN_I64;
    case COMM_CTRL_ALLGATHER_U8: return RDZV_OP_ALLGATHER_U8;
    case COMM_CTRL_BCAST_U8: return RDZV_OP_BCAST_U8;
    default: return -1;
    }
}

int comm_ctrl_start(Comm *c, int op, const void *send, void *recv, int count) {
    if (c->rdzv) {
        int rop = rdzv_op_of(op);
        if (rop < 0) { snprintf(c->err, sizeof c->err, "unknown control op %d", op); return -1; }
        if (rdzv_ctrl_start(c->rdzv, rop, send, recv, count)) {
            snprintf(c->err, sizeof c->err, "%s", rdzv_error(c->rdzv));
            return -1;
        }
        return 0;
    }
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
    case COMM_CTRL_BCAST_U8:
        if (c->rank == 0 && recv != send) memcpy(recv, send, (size_t)count);
        rc = MPI_Ibcast(recv, count, MPI_BYTE, 0, c->ctrl, &c->ctrl_req);
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
    if (c->rdzv) {
        int r = rdzv_ctrl_test(c->rdzv);
        if (r < 0) snprintf(c->err, sizeof c->err, "%s", rdzv_error(c->rdzv));
        return r;
    }
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

void comm_ctrl_waiting(const Comm *c, char *buf, size_t n) {
    if (n) buf[0] = 0;
    if (c->rdzv) rdzv_ctrl_waiting(c->rdzv, buf, n);
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
    free(c);   // the rendezvous is the world's (comm_world_finalize)
}
