// harness/exec/launch.c — see launch.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/exec/launch.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/exit_codes.h"
#include "harness/exec/proc.h"

// Passed to every rank whatever the launcher (mpirun: by -x; the others inherit them).
static const char *const PASS_THROUGH[] = {"NCCL_DEBUG",       "NCCL_DEBUG_SUBSYS", "NCCL_SOCKET_IFNAME",
                                           "NCCL_NVLS_ENABLE", "OMP_NUM_THREADS",   "NSA_COMM_TIMEOUT",
                                           NULL};

LaunchKind launch_kind(const RunSpec *run) {
    // gloo (torch.distributed) joins its world from the env launcher's variables, never MPI's
    if (!strcmp(run->launcher, "env") || !strcmp(run->transport, "gloo")) return LAUNCH_ENV;
    if (!strcmp(run->launcher, "srun")) return LAUNCH_SRUN;
    if (!strcmp(run->launcher, "mpirun")) return LAUNCH_MPIRUN;
    return run->world_size > 1 || strcmp(run->transport, "none") ? LAUNCH_MPIRUN : LAUNCH_TRAINER;
}

const char *launch_kind_name(LaunchKind k) {
    static const char *const names[] = {"trainer", "mpirun", "srun", "env"};   // "trainer": it alone, no launcher
    return names[k];
}

int launch_is_multi(LaunchKind k) { return k != LAUNCH_TRAINER; }

int launch_may_be_remote(LaunchKind k) { return k == LAUNCH_SRUN || k == LAUNCH_MPIRUN; }

int launch_available(const RunSpec *run, char *why, size_t n) {
    char path[4096];
    switch (launch_kind(run)) {
    case LAUNCH_MPIRUN:
        if (proc_which("mpirun", path, sizeof path)) {
            snprintf(why, n, "needs mpirun (Open MPI) to launch %d rank%s over %s: apt-get install openmpi-bin",
                     run->world_size, run->world_size == 1 ? "" : "s", run->transport);
            return -1;
        }
        return 0;
    case LAUNCH_SRUN:
        if (proc_which("srun", path, sizeof path)) {
            snprintf(why, n, "launcher srun: srun is not on PATH (run inside a Slurm allocation)");
            return -1;
        }
        if (!getenv("SLURM_JOB_ID") || !getenv("SLURM_JOB_ID")[0]) {
            snprintf(why, n, "launcher srun: not inside a Slurm allocation (SLURM_JOB_ID is not set: run the "
                             "harness under salloc or sbatch)");
            return -1;
        }
        return 0;
    default:
        return 0;
    }
}

int launch_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);   // rank 0 listens on every address
    a.sin_port = 0;
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void add_num(StrList *l, int v) {
    char b[24];
    snprintf(b, sizeof b, "%d", v);
    strlist_add(l, b);
}

// -x NAME for the scenario's variables and the pass-through list
static void mpirun_exports(StrList *a, char *const *env, int n_env) {
    for (int i = 0; i < n_env; i++) {
        const char *eq = strchr(env[i], '=');
        if (!eq || !strncmp(env[i], "OMPI_", 5)) continue;   // Open MPI's own settings stay with mpirun
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - env[i]), env[i]);
        strlist_add(a, "-x");
        strlist_add(a, name);
    }
    for (int i = 0; PASS_THROUGH[i]; i++) {
        int dup = 0;   // the scenario set it: already exported
        for (int j = 0; j < n_env && !dup; j++)
            dup = !strncmp(env[j], PASS_THROUGH[i], strlen(PASS_THROUGH[i])) && env[j][strlen(PASS_THROUGH[i])] == '=';
        if (dup) continue;
        strlist_add(a, "-x");
        strlist_add(a, PASS_THROUGH[i]);
    }
}

// run.hosts ("host" or "host:slots") as an Open MPI hostfile in the case folder
static int write_hostfile(Launch *L, const RunSpec *run, const char *case_dir, char *err, size_t errlen) {
    snprintf(L->hostfile, sizeof L->hostfile, "%s/hostfile", case_dir);
    Str s = {0};
    str_add(&s, "# written by nsa-harness from the scenario's run.hosts\n");
    for (int i = 0; i < run->n_hosts; i++) {
        const char *h = run->hosts[i], *colon = strrchr(h, ':');
        if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
            str_printf(&s, "%.*s slots=%s\n", (int)(colon - h), h, colon + 1);
        else str_printf(&s, "%s\n", h);
    }
    int rc = write_file_atomic(L->hostfile, str_c(&s), strlen(str_c(&s)));
    str_free(&s);
    if (rc) snprintf(err, errlen, "cannot write %s: %s", L->hostfile, strerror(errno));
    return rc;
}

// the launcher's words before the trainer's
static int launcher_prefix(Launch *L, const RunSpec *run, const char *case_dir, char *const *env, int n_env,
                           char *err, size_t errlen) {
    char path[4096];
    if (L->kind == LAUNCH_MPIRUN) {
        if (proc_which("mpirun", path, sizeof path)) snprintf(path, sizeof path, "mpirun");
        strlist_add(&L->argv, path);
        strlist_add(&L->argv, "-np");
        add_num(&L->argv, run->world_size);
        if (run->n_hosts) {
            if (write_hostfile(L, run, case_dir, err, errlen)) return -1;
            strlist_add(&L->argv, "--hostfile");
            strlist_add(&L->argv, L->hostfile);
        } else {
            // one host, ranks as processes: no binding (the container may have fewer
            // cores than ranks want), shared memory between them
            strlist_add(&L->argv, "--oversubscribe");
        }
        strlist_add(&L->argv, "--bind-to");
        strlist_add(&L->argv, "none");
        mpirun_exports(&L->argv, env, n_env);
    } else if (L->kind == LAUNCH_SRUN) {
        if (proc_which("srun", path, sizeof path)) snprintf(path, sizeof path, "srun");
        strlist_add(&L->argv, path);
        char b[64];
        snprintf(b, sizeof b, "--ntasks=%d", run->world_size);
        strlist_add(&L->argv, b);
        strlist_add(&L->argv, "--kill-on-bad-exit=1");
        strlist_add(&L->argv, "--export=ALL");
    }
    if (L->kind == LAUNCH_MPIRUN || L->kind == LAUNCH_SRUN)
        for (int i = 0; i < run->n_launcher_args; i++) strlist_add(&L->argv, run->launcher_args[i]);
    return 0;
}

static void env_add(char **e, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void env_add(char **e, int *n, const char *fmt, ...) {
    char b[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    e[(*n)++] = xstrdup(b);
}

// env: the common variables, then rank k's torchrun-style ones (every entry malloc'd)
static char **env_for_rank(const Launch *L, int k, char *const *env, int n_env, int *n_out) {
    char **e = xcalloc((size_t)n_env + 8, sizeof(char *));
    int n = 0;
    for (int i = 0; i < n_env; i++) e[n++] = xstrdup(env[i]);
    env_add(e, &n, "RANK=%d", k);
    env_add(e, &n, "WORLD_SIZE=%d", L->world);
    env_add(e, &n, "LOCAL_RANK=%d", k);
    env_add(e, &n, "LOCAL_WORLD_SIZE=%d", L->world);
    env_add(e, &n, "MASTER_ADDR=127.0.0.1");
    env_add(e, &n, "MASTER_PORT=%d", L->port);
    env_add(e, &n, "NSA_RDZV_TOKEN=%s", L->token);
    *n_out = n;
    return e;
}

static void env_free(char **e, int n) {
    for (int i = 0; i < n; i++) free(e[i]);
    free(e);
}

int launch_prepare(Launch *L, const RunSpec *run, char *const *trainer_argv, const char *case_dir, char *const *env,
                   int n_env, char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->kind = launch_kind(run);
    L->world = run->world_size;
    snprintf(L->case_dir, sizeof L->case_dir, "%s", case_dir);
    for (int i = 0; i < n_env; i++) strlist_add(&L->env, env[i]);
    if (L->kind == LAUNCH_MPIRUN && geteuid() == 0) {   // Open MPI refuses root unless told; stays with mpirun
        strlist_add(&L->env, "OMPI_ALLOW_RUN_AS_ROOT=1");
        strlist_add(&L->env, "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    }
    if (launcher_prefix(L, run, case_dir, env, n_env, err, errlen)) return -1;
    for (int i = 0; trainer_argv[i]; i++) strlist_add(&L->argv, trainer_argv[i]);
    if (L->kind == LAUNCH_ENV) {
        L->port = launch_free_port();
        if (L->port < 0) {
            snprintf(err, errlen, "launcher env: no free TCP port for MASTER_PORT: %s", strerror(errno));
            return -1;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        snprintf(L->token, sizeof L->token, "nsa-harness-%d-%lld.%09ld", (int)getpid(), (long long)ts.tv_sec,
                 ts.tv_nsec);
        int n = 0;
        char **e = env_for_rank(L, 0, NULL, 0, &n);
        for (int i = 0; i < n; i++) str_printf(&L->command, "%s ", e[i]);
        env_free(e, n);
    }
    shell_join(&L->command, L->argv.v);
    if (L->kind == LAUNCH_TRAINER) snprintf(L->log, sizeof L->log, "%s/ranks/rank_0.log", case_dir);
    else if (L->kind != LAUNCH_ENV) snprintf(L->log, sizeof L->log, "%s/launcher.log", case_dir);
    return 0;
}

static void alloc_procs(Launch *L, int n) {
    L->n = n;
    L->pid = xcalloc((size_t)n, sizeof(pid_t));
    L->status = xcalloc((size_t)n, sizeof(int));
    L->done = xcalloc((size_t)n, sizeof(int));
    for (int i = 0; i < n; i++) L->pid[i] = -1;
}

int launch_exec(Launch *L, char *err, size_t errlen) {
    if (L->kind != LAUNCH_ENV) {
        alloc_procs(L, 1);
        L->pid[0] = proc_spawn(L->argv.v, L->log, L->env.v, L->env.n);
        if (L->pid[0] < 0) {
            snprintf(err, errlen, "cannot start %s: %s", L->argv.v[0], strerror(errno));
            return -1;
        }
        return 0;
    }
    alloc_procs(L, L->world);
    for (int k = 0; k < L->world; k++) {
        int n = 0;
        char **e = env_for_rank(L, k, L->env.v, L->env.n, &n);
        char log[2400];
        snprintf(log, sizeof log, "%s/ranks/rank_%d.log", L->case_dir, k);
        L->pid[k] = proc_spawn(L->argv.v, log, e, n);
        int saved = errno;
        env_free(e, n);
        if (L->pid[k] < 0) {
            snprintf(err, errlen, "cannot start rank %d (%s): %s", k, L->argv.v[0], strerror(saved));
            launch_signal(L, SIGKILL);
            launch_wait(L, 30);
            return -1;
        }
    }
    return 0;
}

int launch_poll(Launch *L) {
    int all = 1;
    for (int i = 0; i < L->n; i++) {
        if (L->done[i] || L->pid[i] <= 0) continue;
        if (waitpid(L->pid[i], &L->status[i], WNOHANG) == L->pid[i]) {
            L->done[i] = 1;
            proc_forget(L->pid[i]);
        } else all = 0;
    }
    return all;
}

int launch_wait(Launch *L, double timeout_s) {
    const double end = mono_s() + timeout_s;
    for (;;) {
        if (launch_poll(L)) return 1;
        if (mono_s() >= end) return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void launch_signal(const Launch *L, int sig) {
    for (int i = 0; i < L->n; i++)
        if (L->pid[i] > 0 && !L->done[i]) proc_kill_group(L->pid[i], sig);
}

static int shell_status(int st) {
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? EXIT_SIGNAL_BASE + WTERMSIG(st) : 0;
}

int launch_exit_status(const Launch *L) {
    for (int i = 0; i < L->n; i++)
        if (L->done[i] && shell_status(L->status[i])) return shell_status(L->status[i]);
    return 0;
}

int launch_rank_status(const Launch *L, int k, int *status) {
    if (L->kind != LAUNCH_ENV && !(L->kind == LAUNCH_TRAINER && k == 0)) return 0;
    if (k < 0 || k >= L->n || !L->done[k]) return 0;
    *status = L->status[k];
    return 1;
}

void launch_free(Launch *L) {
    strlist_free(&L->argv);
    strlist_free(&L->env);
    str_free(&L->command);
    free(L->pid);
    free(L->status);
    free(L->done);
    memset(L, 0, sizeof *L);
}
