// harness/exec/proc.c — see proc.h.
#define _GNU_SOURCE   // prctl constants, execvpe
#include "harness/exec/proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/exit_codes.h"
#include "common/util.h"

extern char **environ;

// ---- children of cases side by side --------------------------------------------------------
// While cases run side by side (proc_share_children), every child this process starts is
// registered from its fork until it is reaped, and what cleans up after one case (reaping
// orphans, killing the strays a case left) leaves the registered children and their process
// groups alone: they are other cases' trainers. The fork happens under the registry's lock,
// so no cleanup sees a child before it is registered.
enum { REG_MAX = 4096 };
static pthread_mutex_t g_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_shared;
static pid_t g_reg[REG_MAX];
static int g_nreg;

void proc_share_children(int on) {
    pthread_mutex_lock(&g_reg_lock);
    g_shared = on;
    if (!on) g_nreg = 0;
    pthread_mutex_unlock(&g_reg_lock);
}

static void reg_add_locked(pid_t p) {
    if (g_shared && p > 0 && g_nreg < REG_MAX) g_reg[g_nreg++] = p;
}

static int reg_has_locked(pid_t p) {
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i] == p) return 1;
    return 0;
}

void proc_forget(pid_t p) {
    pthread_mutex_lock(&g_reg_lock);
    for (int i = 0; i < g_nreg; i++)
        if (g_reg[i] == p) {
            g_reg[i] = g_reg[--g_nreg];
            break;
        }
    pthread_mutex_unlock(&g_reg_lock);
}

// fork, the child registered (in the parent) before anyone can see it
static pid_t fork_registered(void) {
    pthread_mutex_lock(&g_reg_lock);
    pid_t pid = fork();
    if (pid == 0) return 0;   // (the child never touches the lock: it execs or _exits)
    reg_add_locked(pid);
    pthread_mutex_unlock(&g_reg_lock);
    return pid;
}

// The child's environment: ours plus the extra entries (which replace ours).
static char **child_env(char *const *env, int n_env) {
    int n = 0;
    while (environ[n]) n++;
    char **e = xcalloc((size_t)n + (size_t)n_env + 1, sizeof(char *));
    int k = 0;
    for (int i = 0; i < n; i++) {
        int replaced = 0;
        const char *eq = strchr(environ[i], '=');
        size_t nl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        for (int j = 0; j < n_env && !replaced; j++) replaced = !strncmp(env[j], environ[i], nl) && env[j][nl] == '=';
        if (!replaced) e[k++] = environ[i];
    }
    for (int j = 0; j < n_env; j++) e[k++] = env[j];
    e[k] = NULL;
    return e;
}

pid_t proc_spawn(char *const argv[], const char *log_path, char *const *env, int n_env) {
    char **e = child_env(env, n_env);   // built before fork: no allocation in the child
    pid_t parent = getpid();
    pid_t pid = fork_registered();
    if (pid < 0) {
        free(e);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(CHILD_EXIT_CANNOT_EXEC);   // the runner died before prctl took effect
        // default dispositions and an empty mask for the trainer
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        int in = open("/dev/null", O_RDONLY);
        if (in >= 0) dup2(in, 0);
        if (log_path) {
            int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0664);
            if (fd < 0) _exit(CHILD_EXIT_CANNOT_OPEN);
            // blocks for the first 4-64 KiB of the log, set aside without growing it: on a
            // disk that fills during the case, the trainer's last words (its [IO-ERROR]
            // line naming the file it could not write) still land (best effort)
            for (off_t sz = 64 * 1024; sz >= 4096; sz /= 4)   // as much of it as the disk holds
                if (fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, sz) == 0 || errno == EOPNOTSUPP) break;
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execvpe(argv[0], argv, e);   // a command word without "/" (python3) is looked up on PATH
        dprintf(2, "nsa-harness: cannot execute %s: %s\n", argv[0], strerror(errno));
        _exit(CHILD_EXIT_CANNOT_EXEC);
    }
    setpgid(pid, pid);   // also in the parent: no race with the first signal
    free(e);
    return pid;
}

void proc_kill_group(pid_t pgid, int sig) {
    if (pgid > 1) kill(-pgid, sig);
}

int proc_wait(pid_t pid, double timeout_s, int *status) {
    double end = mono_s() + timeout_s;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG);
        if (w == pid) {
            proc_forget(pid);
            return 1;
        }
        if (w < 0 && errno != EINTR) return 1;   // not our child any more (already reaped)
        if (mono_s() >= end) return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void proc_reap_orphans_now(void) {
    int st;
    while (waitpid(-1, &st, WNOHANG) > 0) {
    }
}

void proc_reap_orphans(void) {
    pthread_mutex_lock(&g_reg_lock);
    const int shared = g_shared;
    pthread_mutex_unlock(&g_reg_lock);
    if (!shared) proc_reap_orphans_now();   // side by side: the runner reaps when no case runs
}

int proc_which(const char *name, char *out, size_t n) {
    if (!name[0]) return -1;
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK) == 0 ? 0 : -1;
    }
    const char *path = getenv("PATH");
    if (!path) path = "/usr/local/bin:/usr/bin:/bin";
    char *copy = xstrdup(path), *save = NULL;
    int rc = -1;
    for (char *d = strtok_r(copy, ":", &save); d && rc; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d[0] ? d : ".", name);
        struct stat st;
        if (access(out, X_OK) == 0 && stat(out, &st) == 0 && S_ISREG(st.st_mode)) rc = 0;
    }
    free(copy);
    return rc;
}

int proc_alive(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && rp[2] != 'Z' && rp[2] != 'X';
}

int proc_kill_children(void) {
    int killed = 0;
    for (int round = 0; round < 5; round++) {   // a dying child may reparent its own children to us
        DIR *d = opendir("/proc");
        if (!d) return killed;
        struct dirent *e;
        int n = 0;
        pid_t self = getpid();
        while ((e = readdir(d))) {
            if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
            char path[300], buf[1024];
            snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0) continue;
            ssize_t r = read(fd, buf, sizeof buf - 1);
            close(fd);
            if (r <= 0) continue;
            buf[r] = '\0';
            // "pid (comm) state ppid ...": comm may hold spaces and parentheses
            char *rp = strrchr(buf, ')');
            char state = 0;
            int ppid = 0, pgrp = 0;
            if (!rp || sscanf(rp + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) continue;
            if (ppid != self || state == 'Z') continue;
            const pid_t pid = (pid_t)atoi(e->d_name);
            pthread_mutex_lock(&g_reg_lock);   // another case's child, or in its process group: not ours
            const int theirs = reg_has_locked(pid) || reg_has_locked((pid_t)pgrp);
            if (!theirs) kill(pid, SIGKILL);
            pthread_mutex_unlock(&g_reg_lock);
            if (theirs) continue;
            n++;
        }
        closedir(d);
        struct timespec ts = {0, 20 * 1000 * 1000};
        if (n) nanosleep(&ts, NULL);
        proc_reap_orphans();
        killed += n;
        if (!n) break;
    }
    return killed;
}

void proc_become_subreaper(void) {
#ifdef PR_SET_CHILD_SUBREAPER
    prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
}

static int capture(char *const argv[], double timeout_s, char **out, int with_stderr) {
    *out = xstrdup("");
    int pfd[2];
    if (pipe2(pfd, O_CLOEXEC)) return -1;   // (a case's child started meanwhile must not hold it open)
    pid_t pid = fork_registered();
    if (pid < 0) {
        close(pfd[0]);
        close(pfd[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(pfd[0]);
        dup2(pfd[1], 1);
        if (with_stderr) dup2(pfd[1], 2);
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            if (!with_stderr) dup2(nul, 2);
        }
        execvp(argv[0], argv);
        _exit(CHILD_EXIT_CANNOT_EXEC);
    }
    setpgid(pid, pid);
    close(pfd[1]);
    Str s = {0};
    double end = mono_s() + timeout_s;
    int timed_out = 0;
    for (;;) {
        double left = end - mono_s();
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        struct pollfd p = {pfd[0], POLLIN, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;
        char buf[4096];
        ssize_t n = read(pfd[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (s.len < (1u << 22)) str_addn(&s, buf, (size_t)n);
    }
    close(pfd[0]);
    int status = 0;
    if (timed_out) {
        proc_kill_group(pid, SIGKILL);
        waitpid(pid, &status, 0);
        proc_forget(pid);
        free(*out);
        *out = str_take(&s);
        return -2;
    }
    if (!proc_wait(pid, end - mono_s() > 1 ? end - mono_s() : 1, &status)) {
        proc_kill_group(pid, SIGKILL);
        waitpid(pid, &status, 0);
        proc_forget(pid);
        free(*out);
        *out = str_take(&s);
        return -2;
    }
    proc_kill_group(pid, SIGKILL);   // anything it left behind
    free(*out);
    *out = str_take(&s);
    if (WIFEXITED(status) && WEXITSTATUS(status) == CHILD_EXIT_CANNOT_EXEC) return -1;
    return status;
}

int proc_capture(char *const argv[], double timeout_s, char **out) { return capture(argv, timeout_s, out, 0); }
int proc_capture_all(char *const argv[], double timeout_s, char **out) { return capture(argv, timeout_s, out, 1); }

const char *proc_signal_name(int sig) {
    switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return "signal";
    }
}

int proc_any_with_cmdline(const char *needle) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        char buf[8192];
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        for (ssize_t i = 0; i < n; i++)
            if (!buf[i]) buf[i] = ' ';
        buf[n] = '\0';
        // a zombie has an empty cmdline: it is not running
        if (strstr(buf, needle) && (pid_t)atoi(e->d_name) != getpid()) found = 1;
    }
    closedir(d);
    return found;
}

void proc_on_interrupt(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}
