// tests/trainer/test_rendezvous.c — the env and Slurm bootstraps and their TCP rendezvous
// (trainer/rendezvous.h, comm_world_setup in trainer/comm.c; docs/ddp.md "Bootstraps").
//
// Asserts, on the CPU, without MPI or a GPU (ranks are forked processes on 127.0.0.1):
//   - the first host of Slurm's compressed node lists, rank lists in messages
//   - comm_world_setup: rank/world/local rank/address/port/token from the torchrun-style
//     variables and from the Slurm ones (first-host expansion, the port derived from
//     SLURM_JOB_ID, SLURM_STEP_* before SLURM_*); the precedence (torchrun-style over
//     Slurm; --bootstrap forces); torchrun's agent store (MASTER_PORT + 1) and
//     NSA_RDZV_PORT; every invalid or missing variable is exit 2 naming it
//   - 3 ranks join: local ranks derived from the hosts (or as given), every rank's
//     address; the id exchange (every rank gets rank 0's 128 bytes); sum in rank order
//     (bitwise: (1e16 + 1) - 1e16 = 0, not 1), max/min of negative int64, allgather
//   - a peer that never arrives: rank 0 fails within its timeout (+ 2 s) naming the
//     missing rank, and the ranks that did arrive get rank 0's message; rank 0 that is
//     not there: the others fail within the timeout naming address and port
//   - a port already in use: exit 1 naming port and "Address already in use"
//   - another WORLD_SIZE, a duplicate rank, another mode: exit 2 on both sides, naming
//     the rank; another job token: that process is rejected (2), rank 0 keeps waiting
//     and names the rejection in its timeout
//   - a connection that is not ours (an HTTP request) is ignored; a rank that exits
//     during a control operation is an error naming it; ranks in different operations
//     are an error naming the rank
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "trainer/comm.h"
#include "trainer/rendezvous.h"

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void nap_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

// a port nobody listens on right now (bind to port 0, read it, close)
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    close(fd);
    return ntohs(a.sin_port);
}

// ---- helpers -------------------------------------------------------------------------------

static void test_first_host(void **st) {
    (void)st;
    char h[64];
    struct { const char *in, *out; } ok[] = {
        {"node[01-04,07]", "node01"}, {"a1,b[2-3]", "a1"}, {"rack[1-2]-n[08-09]", "rack1-n08"},
        {"gpu-[001-004]-ib", "gpu-001-ib"}, {"single", "single"}, {"n[7]", "n7"}, {"n[10,2-3]", "n10"},
        {"host.example.org,other", "host.example.org"}, {" node[3-4]", "node3"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        assert_int_equal(rdzv_first_host(ok[i].in, h, sizeof h), 0);
        assert_string_equal(h, ok[i].out);
    }
    const char *bad[] = {"", "n[01-04", "[]", "n[-3]", ",a", "n]"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) assert_int_equal(rdzv_first_host(bad[i], h, sizeof h), -1);
    assert_int_equal(rdzv_first_host("averyveryverylonghostname", h, 8), -1);   // does not fit: an error, not a cut
}

static void test_rank_list(void **st) {
    (void)st;
    char b[128];
    int one[] = {1};
    rdzv_rank_list(one, 1, b, sizeof b);
    assert_string_equal(b, "rank 1");
    int some[] = {1, 2, 3, 7, 9, 10};
    rdzv_rank_list(some, 6, b, sizeof b);
    assert_string_equal(b, "ranks 1-3,7,9-10");
    int many[200];
    for (int i = 0; i < 200; i++) many[i] = 2 * i;
    rdzv_rank_list(many, 200, b, 40);
    assert_non_null(strstr(b, "..."));
    assert_true(strlen(b) < 40);
}

// ---- comm_world_setup from the variables ----------------------------------------------------

static const char *const g_vars[] = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NSA_RDZV_PORT",
    "NSA_RDZV_TOKEN", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "SLURM_PROCID", "SLURM_NTASKS",
    "SLURM_STEP_NUM_TASKS", "SLURM_NPROCS", "SLURM_LOCALID", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
    "SLURM_NODELIST", "SLURM_JOB_ID", "SLURM_STEP_ID", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", NULL};

static void clear_env(void) {
    for (int i = 0; g_vars[i]; i++) unsetenv(g_vars[i]);
}

static int setup_vars(void **st) { (void)st; clear_env(); return 0; }

// comm_world_setup with check_world (transport none: no NCCL or MPI needed)
static int world_from_env(CommWorld *w, int bootstrap, char *err) {
    return comm_world_setup(w, COMM_NONE, bootstrap, 1, err, 1024);
}

static void test_env_vars(void **st) {
    (void)st;
    CommWorld w;
    char err[1024];
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("LOCAL_RANK", "1", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "10.0.0.1", 1);
    setenv("MASTER_PORT", "29555", 1);
    setenv("TORCHELASTIC_RUN_ID", "job7", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_ENV);
    assert_int_equal(w.rank, 3);
    assert_int_equal(w.world, 8);
    assert_int_equal(w.local_rank, 1);
    assert_int_equal(w.local_size, 2);
    assert_string_equal(w.rdzv_addr, "10.0.0.1");
    assert_int_equal(w.rdzv_port, 29555);
    assert_string_equal(w.rdzv_token, "job7");
    assert_non_null(strstr(w.source, "RANK=3"));
    assert_non_null(strstr(w.source_keys, "MASTER_PORT"));
    // torchrun's static rendezvous holds MASTER_PORT itself: ours is MASTER_PORT + 1
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.rdzv_port, 29556);
    setenv("NSA_RDZV_PORT", "31000", 1);   // stated wins
    setenv("NSA_RDZV_TOKEN", "mine", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.rdzv_port, 31000);
    assert_string_equal(w.rdzv_token, "mine");
    // MASTER_PORT defaults to 29500; LOCAL_* absent: derived at the rendezvous (-1 until then)
    clear_env();
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_ADDR", "h", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.rdzv_port, 29500);
    assert_int_equal(w.local_rank, -1);
    assert_string_equal(w.rdzv_token, "");
    // no variables at all: one rank, env bootstrap, no network
    clear_env();
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_ENV);
    assert_int_equal(w.world, 1);
    assert_int_equal(w.local_rank, 0);
    assert_int_equal(w.local_size, 1);
    // transport none without --check-world: one process, whatever is set
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(comm_world_setup(&w, COMM_NONE, COMM_BOOT_AUTO, 0, err, sizeof err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_NONE);
    assert_int_equal(w.world, 1);
}

static void expect_usage(const char *what, const char *needle) {
    CommWorld w;
    char err[1024] = "";
    int rc = world_from_env(&w, COMM_BOOT_AUTO, err);
    if (rc != 2 || !strstr(err, needle)) fail_msg("%s: rc %d, err '%s' (expected 2 naming '%s')", what, rc, err, needle);
}

static void test_env_errors(void **st) {
    (void)st;
    setenv("RANK", "1", 1);
    expect_usage("RANK without WORLD_SIZE", "WORLD_SIZE is not");
    setenv("WORLD_SIZE", "2", 1);
    expect_usage("WORLD_SIZE 2 without MASTER_ADDR", "MASTER_ADDR is not set");
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("RANK", "2", 1);
    expect_usage("RANK not below WORLD_SIZE", "RANK=2 is not below WORLD_SIZE=2");
    setenv("RANK", "x1", 1);
    expect_usage("RANK not a number", "RANK=x1");
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "0", 1);
    expect_usage("WORLD_SIZE 0", "WORLD_SIZE=0");
    setenv("WORLD_SIZE", "2", 1);
    setenv("MASTER_PORT", "70000", 1);
    expect_usage("MASTER_PORT out of range", "MASTER_PORT=70000");
    setenv("MASTER_PORT", "29500", 1);
    setenv("LOCAL_RANK", "2", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    expect_usage("LOCAL_RANK not below LOCAL_WORLD_SIZE", "LOCAL_RANK=2 is not below LOCAL_WORLD_SIZE=2");
    unsetenv("LOCAL_RANK");
    unsetenv("LOCAL_WORLD_SIZE");
    // the mpi transport is MPI: the env/slurm bootstraps cannot carry it
    CommWorld w;
    char err[1024] = "";
    if (comm_transport_built(COMM_MPI, NULL)) {
        assert_int_equal(comm_world_setup(&w, COMM_MPI, COMM_BOOT_ENV, 0, err, sizeof err), 2);
        assert_non_null(strstr(err, "needs the mpi bootstrap"));
    }
    clear_env();
    setenv("SLURM_PROCID", "0", 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_JOB_NODELIST", "n[01-", 1);
    expect_usage("a malformed node list without MASTER_ADDR", "SLURM_JOB_NODELIST=n[01-");
    unsetenv("SLURM_JOB_NODELIST");
    setenv("SLURM_JOB_ID", "5", 1);
    expect_usage("no node list", "no node list");
    setenv("SLURM_JOB_NODELIST", "n1", 1);
    unsetenv("SLURM_JOB_ID");
    expect_usage("no port", "neither MASTER_PORT nor SLURM_JOB_ID");
}

static void test_slurm_vars(void **st) {
    (void)st;
    CommWorld w;
    char err[1024];
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_NTASKS", "16", 1);
    setenv("SLURM_LOCALID", "1", 1);
    setenv("SLURM_JOB_NODELIST", "gpu-[003-004,010]", 1);
    setenv("SLURM_JOB_ID", "123456", 1);
    setenv("SLURM_STEP_ID", "2", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_SLURM);
    assert_int_equal(w.rank, 5);
    assert_int_equal(w.world, 16);
    assert_int_equal(w.local_rank, 1);
    assert_int_equal(w.local_size, -1);   // from the rendezvous (the hosts)
    assert_string_equal(w.rdzv_addr, "gpu-003");
    assert_int_equal(w.rdzv_port, 20000 + 123456 % 10000);
    assert_string_equal(w.rdzv_token, "slurm-123456.2");
    // the step's variables first: srun -n 4 inside a 16-task allocation
    setenv("SLURM_STEP_NUM_TASKS", "4", 1);
    setenv("SLURM_STEP_NODELIST", "node[07-08]", 1);
    setenv("SLURM_PROCID", "3", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.world, 4);
    assert_string_equal(w.rdzv_addr, "node07");
    // MASTER_ADDR / MASTER_PORT win over the node list and the job id
    setenv("MASTER_ADDR", "10.1.2.3", 1);
    setenv("MASTER_PORT", "29999", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_string_equal(w.rdzv_addr, "10.1.2.3");
    assert_int_equal(w.rdzv_port, 29999);
    // precedence: torchrun-style variables over Slurm's (a torchrun inside an allocation)
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(world_from_env(&w, COMM_BOOT_AUTO, err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_ENV);
    assert_int_equal(w.world, 2);
    // ... unless forced
    assert_int_equal(world_from_env(&w, COMM_BOOT_SLURM, err), 0);
    assert_int_equal(w.bootstrap, COMM_BOOT_SLURM);
    assert_int_equal(w.world, 4);
    assert_int_equal(w.rank, 3);
    // comm_bootstrap_parse / name
    assert_int_equal(comm_bootstrap_parse("auto"), COMM_BOOT_AUTO);
    assert_int_equal(comm_bootstrap_parse("slurm"), COMM_BOOT_SLURM);
    assert_int_equal(comm_bootstrap_parse("torchrun"), -2);
    assert_string_equal(comm_bootstrap_name(COMM_BOOT_ENV), "env");
}

// ---- ranks as forked processes -----------------------------------------------------------------

enum { DO_NOTHING, DO_CTRL, DO_EXIT, DO_WRONG_OP, DO_SUM_ONLY };

typedef struct {
    int rank, world, port, local_rank, local_size, mode, what;
    const char *token, *host;
    double timeout;
} Spec;

typedef struct {
    int rc;               // rdzv_join's exit code, or 100 + the control step that failed
    double join_s;
    int local_rank, local_size;
    char err[1200];
    char addr[4][64], host[4][64];
    unsigned char bcast[128];
    double sum;
    int64_t mx[2], mn[2];
    unsigned char gather[4 * 5];
} Result;

static int ctrl_wait(Rdzv *z, double timeout) {
    const double t0 = mono_s();
    for (;;) {
        int r = rdzv_ctrl_test(z);
        if (r) return r;
        if (mono_s() - t0 > timeout) return -2;
        nap_ms(1);
    }
}

static void child(const Spec *s, Result *r) {
    RdzvConfig c;
    memset(&c, 0, sizeof c);
    c.rank = s->rank;
    c.world = s->world;
    c.local_rank = s->local_rank;
    c.local_size = s->local_size;
    snprintf(c.addr, sizeof c.addr, "127.0.0.1");
    c.port = s->port;
    snprintf(c.token, sizeof c.token, "%s", s->token ? s->token : "");
    snprintf(c.host, sizeof c.host, "%s", s->host ? s->host : "testhost");
    c.transport = COMM_NONE;
    c.mode = s->mode;
    const double t0 = mono_s();
    int rc = 0;
    Rdzv *z = rdzv_join(&c, s->timeout, &rc, r->err, sizeof r->err);
    r->join_s = mono_s() - t0;
    r->rc = rc;
    if (!z) return;
    r->local_rank = rdzv_local_rank(z);
    r->local_size = rdzv_local_size(z);
    for (int q = 0; q < s->world && q < 4; q++) {
        snprintf(r->addr[q], sizeof r->addr[q], "%s", rdzv_peer_addr(z, q));
        snprintf(r->host[q], sizeof r->host[q], "%s", rdzv_peer_host(z, q));
    }
#define STEP(n, op, send, recv, count)                                                              \
    do {                                                                                            \
        if (rdzv_ctrl_start(z, op, send, recv, count) || ctrl_wait(z, 10) != 1) {                   \
            r->rc = 100 + (n);                                                                      \
            snprintf(r->err, sizeof r->err, "%s", rdzv_error(z));                                   \
            rdzv_close(z);                                                                          \
            return;                                                                                 \
        }                                                                                           \
    } while (0)
    if (s->what == DO_EXIT) _exit(0);   // leaves in the middle: its connection closes
    if (s->what == DO_WRONG_OP) {
        unsigned char b[3] = {1, 2, 3}, all[12];
        STEP(1, RDZV_OP_ALLGATHER_U8, b, all, 3);
    }
    if (s->what == DO_SUM_ONLY) {
        double one = 1.0;
        STEP(1, RDZV_OP_SUM_F64, &one, &r->sum, 1);
    }
    if (s->what == DO_CTRL) {
        unsigned char id[128];
        for (int i = 0; i < 128; i++) id[i] = s->rank == 0 ? (unsigned char)(i * 7 + 3) : 0xEE;
        STEP(1, RDZV_OP_BCAST_U8, id, r->bcast, 128);
        const double vals[3] = {1e16, 1.0, -1e16};
        double v = s->rank < 3 ? vals[s->rank] : 0.0;
        STEP(2, RDZV_OP_SUM_F64, &v, &r->sum, 1);
        int64_t m[2] = {-5 - s->rank, ((int64_t)1 << 40) + s->rank};
        STEP(3, RDZV_OP_MAX_I64, m, r->mx, 2);
        STEP(4, RDZV_OP_MIN_I64, m, r->mn, 2);
        unsigned char g[5];
        for (int i = 0; i < 5; i++) g[i] = (unsigned char)(s->rank * 16 + i);
        STEP(5, RDZV_OP_ALLGATHER_U8, g, r->gather, 5);
    }
#undef STEP
    rdzv_close(z);
}

typedef struct { pid_t pid; int fd; } Kid;

static Kid spawn(const Spec *s) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        static Result r;
        memset(&r, 0, sizeof r);
        child(s, &r);
        const char *b = (const char *)&r;
        size_t left = sizeof r;
        while (left) {
            ssize_t k = write(p[1], b, left);
            if (k <= 0) break;
            b += k;
            left -= (size_t)k;
        }
        _exit(0);
    }
    close(p[1]);
    Kid k = {pid, p[0]};
    return k;
}

static void collect(Kid k, Result *r) {
    memset(r, 0, sizeof *r);
    char *b = (char *)r;
    size_t got = 0;
    while (got < sizeof *r) {
        ssize_t n = read(k.fd, b + got, sizeof *r - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(k.fd);
    int st = 0;
    waitpid(k.pid, &st, 0);
    if (got != sizeof *r) {
        r->rc = -1;
        snprintf(r->err, sizeof r->err, "child wrote %zu of %zu bytes", got, sizeof *r);
    }
}

static Spec spec(int rank, int world, int port, int what) {
    Spec s = {rank, world, port, -1, -1, RDZV_MODE_CHECK, what, NULL, NULL, 10.0};
    return s;
}

static void test_three_ranks(void **st) {
    (void)st;
    const int port = free_port();
    Kid k[3];
    // rank 2 first: it must retry until rank 0 listens
    Spec s2 = spec(2, 3, port, DO_CTRL);
    k[2] = spawn(&s2);
    nap_ms(150);
    for (int r = 0; r < 2; r++) {
        Spec s = spec(r, 3, port, DO_CTRL);
        if (r == 1) { s.host = "otherhost"; s.local_rank = 4; s.local_size = 5; }   // given: taken as given
        k[r] = spawn(&s);
    }
    Result res[3];
    for (int r = 0; r < 3; r++) collect(k[r], &res[r]);
    for (int r = 0; r < 3; r++) {
        if (res[r].rc) fail_msg("rank %d: rc %d: %s", r, res[r].rc, res[r].err);
        // the id exchange: rank 0's bytes everywhere
        for (int i = 0; i < 128; i++) assert_int_equal(res[r].bcast[i], (unsigned char)(i * 7 + 3));
        // rank order, bitwise: (1e16 + 1) - 1e16 == 0 in double (another order would give 1)
        assert_true(res[r].sum == 0.0);
        assert_true(res[r].mx[0] == -5 && res[r].mx[1] == ((int64_t)1 << 40) + 2);
        assert_true(res[r].mn[0] == -7 && res[r].mn[1] == ((int64_t)1 << 40));
        for (int q = 0; q < 3; q++)
            for (int i = 0; i < 5; i++) assert_int_equal(res[r].gather[q * 5 + i], q * 16 + i);
        // every rank is told every rank's address and host
        for (int q = 0; q < 3; q++) assert_string_equal(res[r].addr[q], "127.0.0.1");
        assert_string_equal(res[r].host[1], "otherhost");
        assert_string_equal(res[r].host[2], "testhost");
    }
    // local ranks: ranks 0 and 2 share "testhost" (0 and 1 of 2); rank 1 gave its own
    assert_int_equal(res[0].local_rank, 0);
    assert_int_equal(res[0].local_size, 2);
    assert_int_equal(res[2].local_rank, 1);
    assert_int_equal(res[2].local_size, 2);
    assert_int_equal(res[1].local_rank, 4);
    assert_int_equal(res[1].local_size, 5);
}

static void test_world_of_one(void **st) {
    (void)st;
    Spec s = spec(0, 1, 1, DO_CTRL);   // port 1: never touched
    Result r;
    collect(spawn(&s), &r);
    if (r.rc) fail_msg("rc %d: %s", r.rc, r.err);
    assert_true(r.sum == 1e16);
    assert_int_equal(r.bcast[5], 5 * 7 + 3);
    assert_int_equal(r.local_rank, 0);
    assert_int_equal(r.local_size, 1);
}

static void test_peer_never_arrives(void **st) {
    (void)st;
    const int port = free_port();
    // world 3: rank 2 arrives, rank 1 never does
    Spec s0 = spec(0, 3, port, DO_NOTHING), s2 = spec(2, 3, port, DO_NOTHING);
    s0.timeout = 1.5;
    s2.timeout = 5;
    Kid k0 = spawn(&s0);
    nap_ms(100);
    Kid k2 = spawn(&s2);
    Result r0, r2;
    collect(k0, &r0);
    collect(k2, &r2);
    assert_int_equal(r0.rc, 4);
    assert_non_null(strstr(r0.err, "[COMM-TIMEOUT] rank 0: rendezvous at 127.0.0.1:"));
    assert_non_null(strstr(r0.err, "1 of 3 ranks never arrived within 1.5 s (missing: rank 1)"));
    if (r0.join_s < 1.5 || r0.join_s > 1.5 + 2) fail_msg("rank 0 gave up after %.2f s (timeout 1.5 s)", r0.join_s);
    // rank 2 is told by rank 0, before its own timeout
    assert_int_equal(r2.rc, 4);
    assert_non_null(strstr(r2.err, "rank 0 ended the rendezvous: 1 of 3 ranks never arrived"));
    assert_non_null(strstr(r2.err, "missing: rank 1"));
    assert_true(r2.join_s < 1.5 + 2);
}

static void test_rank0_unreachable(void **st) {
    (void)st;
    const int port = free_port();
    Spec s = spec(1, 2, port, DO_NOTHING);
    s.timeout = 1.2;
    Result r;
    collect(spawn(&s), &r);
    assert_int_equal(r.rc, 4);
    char want[128];
    snprintf(want, sizeof want, "rendezvous at 127.0.0.1:%d: rank 0 not reachable within 1.2 s", port);
    if (!strstr(r.err, want)) fail_msg("'%s' lacks '%s'", r.err, want);
    assert_non_null(strstr(r.err, "Connection refused"));
    if (r.join_s < 1.2 || r.join_s > 1.2 + 2) fail_msg("gave up after %.2f s (timeout 1.2 s)", r.join_s);
}

static void test_port_in_use(void **st) {
    (void)st;
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    const int port = ntohs(a.sin_port);
    Spec s = spec(0, 2, port, DO_NOTHING);
    s.timeout = 5;
    Result r;
    collect(spawn(&s), &r);
    close(fd);
    assert_int_equal(r.rc, 1);
    char want[96];
    snprintf(want, sizeof want, "cannot listen on port %d", port);
    if (!strstr(r.err, want) || !strstr(r.err, "Address already in use")) fail_msg("'%s'", r.err);
    assert_true(r.join_s < 1.0);   // at once, not after the timeout
}

// rank 0 and a second process that presents `bad`; both end with `code` naming `needle`
static void two_disagree(Spec bad, int code0, int code1, const char *needle) {
    const int port = free_port();
    Spec s0 = spec(0, 2, port, DO_NOTHING);
    s0.timeout = 1.5;
    bad.port = port;
    bad.timeout = 1.5;
    Kid k0 = spawn(&s0);
    nap_ms(100);
    Kid k1 = spawn(&bad);
    Result r0, r1;
    collect(k0, &r0);
    collect(k1, &r1);
    if (r0.rc != code0 || !strstr(r0.err, needle)) fail_msg("rank 0: rc %d '%s' (want %d, '%s')", r0.rc, r0.err, code0, needle);
    if (r1.rc != code1 || !strstr(r1.err, needle)) fail_msg("other: rc %d '%s' (want %d, '%s')", r1.rc, r1.err, code1, needle);
}

static void test_disagreements(void **st) {
    (void)st;
    Spec w3 = spec(1, 3, 0, DO_NOTHING);
    two_disagree(w3, 2, 2, "rank 1 (from 127.0.0.1, host testhost) has WORLD_SIZE 3, rank 0 has 2");
    Spec other_mode = spec(1, 2, 0, DO_NOTHING);
    other_mode.mode = RDZV_MODE_TRAIN;
    two_disagree(other_mode, 2, 2, "runs training with --transport none, rank 0 --check-world");
    // another job's token: that process is rejected; rank 0 waits on and names it when it gives up
    Spec tok = spec(1, 2, 0, DO_NOTHING);
    tok.token = "otherjob";
    two_disagree(tok, 4, 2, "job token 'otherjob'");
}

static void test_duplicate_rank(void **st) {
    (void)st;
    const int port = free_port();
    Spec s0 = spec(0, 3, port, DO_NOTHING), s1 = spec(1, 3, port, DO_NOTHING);
    s0.timeout = s1.timeout = 5;
    Kid k0 = spawn(&s0);
    nap_ms(100);
    Kid a = spawn(&s1);
    nap_ms(200);
    Kid b = spawn(&s1);
    Result r0, ra, rb;
    collect(k0, &r0);
    collect(a, &ra);
    collect(b, &rb);
    const char *needle = "rank 1 arrived twice";
    if (r0.rc != 2 || !strstr(r0.err, needle)) fail_msg("rank 0: %d '%s'", r0.rc, r0.err);
    if (ra.rc != 2 || !strstr(ra.err, needle)) fail_msg("first rank 1: %d '%s'", ra.rc, ra.err);
    if (rb.rc != 2 || !strstr(rb.err, needle)) fail_msg("second rank 1: %d '%s'", rb.rc, rb.err);
    assert_true(r0.join_s < 3);   // at once, not at the timeout
}

static void test_foreign_connection_ignored(void **st) {
    (void)st;
    const int port = free_port();
    Spec s0 = spec(0, 2, port, DO_CTRL), s1 = spec(1, 2, port, DO_CTRL);
    Kid k0 = spawn(&s0);
    nap_ms(150);
    // something that is not a rank: an HTTP request (a health probe, a port scanner)
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(write(fd, "GET / HTTP/1.0\r\n\r\n", 18), 18);
    Kid k1 = spawn(&s1);
    Result r0, r1;
    collect(k0, &r0);
    collect(k1, &r1);
    close(fd);
    if (r0.rc || r1.rc) fail_msg("rank 0: %d '%s'; rank 1: %d '%s'", r0.rc, r0.err, r1.rc, r1.err);
    assert_int_equal(r1.bcast[1], 10);
}

static void test_lost_and_mismatched_ops(void **st) {
    (void)st;
    // rank 1 exits after the join: rank 0's next operation fails naming it (not a timeout)
    int port = free_port();
    Spec s0 = spec(0, 2, port, DO_SUM_ONLY), s1 = spec(1, 2, port, DO_EXIT);
    Kid k0 = spawn(&s0);
    nap_ms(100);
    Kid k1 = spawn(&s1);
    Result r0, r1;
    collect(k0, &r0);
    collect(k1, &r1);
    if (r0.rc != 101 || !strstr(r0.err, "rank 1 (127.0.0.1) closed its connection during control operation 1"))
        fail_msg("rank 0: %d '%s'", r0.rc, r0.err);
    // rank 0 exits after the join: rank 1's operation fails naming rank 0
    port = free_port();
    s0 = spec(0, 2, port, DO_EXIT);
    s1 = spec(1, 2, port, DO_SUM_ONLY);
    k0 = spawn(&s0);
    nap_ms(100);
    k1 = spawn(&s1);
    collect(k0, &r0);
    collect(k1, &r1);
    if (r1.rc != 101 || !strstr(r1.err, "rank 0 (127.0.0.1) closed its connection"))
        fail_msg("rank 1: %d '%s'", r1.rc, r1.err);
    // different operations: an error naming the rank and both operations
    port = free_port();
    s0 = spec(0, 2, port, DO_SUM_ONLY);
    s1 = spec(1, 2, port, DO_WRONG_OP);
    k0 = spawn(&s0);
    nap_ms(100);
    k1 = spawn(&s1);
    collect(k0, &r0);
    collect(k1, &r1);
    if (r0.rc != 101 || !strstr(r0.err, "rank 1 (127.0.0.1) sent control operation 1 (allgather, count 3"))
        fail_msg("rank 0: %d '%s'", r0.rc, r0.err);
    assert_non_null(strstr(r0.err, "rank 0 is in operation 1 (sum f64, count 1)"));
    assert_int_equal(r1.rc, 101);   // rank 0 went away: rank 1 fails too, naming rank 0
    assert_non_null(strstr(r1.err, "rank 0"));
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_host),
        cmocka_unit_test(test_rank_list),
        cmocka_unit_test_setup(test_env_vars, setup_vars),
        cmocka_unit_test_setup(test_env_errors, setup_vars),
        cmocka_unit_test_setup(test_slurm_vars, setup_vars),
        cmocka_unit_test(test_three_ranks),
        cmocka_unit_test(test_world_of_one),
        cmocka_unit_test(test_peer_never_arrives),
        cmocka_unit_test(test_rank0_unreachable),
        cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_disagreements),
        cmocka_unit_test(test_duplicate_rank),
        cmocka_unit_test(test_foreign_connection_ignored),
        cmocka_unit_test(test_lost_and_mismatched_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
