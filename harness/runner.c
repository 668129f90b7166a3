// harness/runner.c — see runner.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness/checks.h"
#include "harness/hang.h"
#include "harness/proc.h"
#include "trainer/flightrec.h"

#define POLL_NS (50 * 1000 * 1000)
// When one rank stalls (or its collective times out), EVERY live rank gets SIGUSR1 — the
// waiting ones show the collective they are in — and DUMP_GRACE_S x timeout scale
// (clamped to [DUMP_GRACE_MIN_S, DUMP_GRACE_S]) to write its stack and exit; then SIGTERM,
// TERM_GRACE_S later SIGKILL, both to the whole process group: the verdict comes at most
// ~5 s after the stall was seen (symbolizing a stack takes ~1 s), stall_s + 5 s after the
// last heartbeat (docs/ddp.md gives the measured latency).
#define DUMP_GRACE_S 3.0
#define DUMP_GRACE_MIN_S 2.0
#define TERM_GRACE_S 1.5
#define LOG_TAIL_BYTES 3000

// ---- the case log (output.log): the runner's own timeline of the case -------------------

typedef struct {
    FILE *f;
    double t0;
} CaseLog;

static void case_log(CaseLog *cl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void case_log(CaseLog *cl, const char *fmt, ...) {
    if (!cl->f) return;
    char ts[32];
    utc_iso(ts, sizeof ts);
    fprintf(cl->f, "[harness %s +%.2fs] ", ts, mono_s() - cl->t0);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(cl->f, fmt, ap);
    va_end(ap);
    fputc('\n', cl->f);
    fflush(cl->f);   // flushed as written: a killed runner leaves a readable log
}

// ---- a mapped flight recorder --------------------------------------------------------------

typedef struct {
    const volatile FrHeader *h;
    size_t bytes;
} FrMap;

// Mapped only once every block of the file is allocated: on a full tmpfs, touching a
// page of a sparse file allocates it, and a failed allocation is SIGBUS — in the
// reader too. The trainer reserves every block before it writes the magic
// (trainer/flightrec.h); until then, or if it could not, the recorder stays unread.
static void fr_try_map(FrMap *m, const char *path) {
    if (m->h) return;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)FR_FILE_BYTES && (off_t)st.st_blocks * 512 >= st.st_size) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            if (fr_check_header(p, (size_t)st.st_size) == 0) {
                m->h = p;
                m->bytes = (size_t)st.st_size;
            } else munmap(p, (size_t)st.st_size);   // magic not written yet: try again later
        }
    }
    close(fd);
}

static void fr_unmap(FrMap *m) {
    if (m->h) munmap((void *)m->h, m->bytes);
    m->h = NULL;
}

// Copy the recorder's state into the rank result.
static void fr_snapshot(const FrMap *m, RankResult *rk, uint64_t now_ns) {
    if (!m->h) return;
    FrState st;
    fr_read_state(m->h, &st);
    rk->have_state = 1;
    snprintf(rk->phase, sizeof rk->phase, "%s", fr_phase_name(st.phase));
    rk->step = (int)st.step;
    rk->layer = st.layer;
    snprintf(rk->op, sizeof rk->op, "%.*s", FR_OP_LEN, st.op);
    rk->coll_enqueued = st.coll_enqueued;
    rk->coll_started = st.coll_started;
    rk->coll_completed = st.coll_completed;
    snprintf(rk->coll_name, sizeof rk->coll_name, "%.*s", FR_OP_LEN, st.coll_name);
    rk->heartbeat_age_s = st.heartbeat_ns > 0 ? ((double)now_ns - (double)st.heartbeat_ns) * 1e-9 : -1;
    if (st.exited) {
        rk->exited = 1;
        rk->exit_code = st.exit_code;
    }
    if (st.fatal_signal) rk->term_signal = st.fatal_signal;
}

// ---- progress ----------------------------------------------------------------------------------

static void progress(const RunCtx *ctx, const CaseResult *r, double elapsed, const RankResult *rk) {
    if (!ctx->console || !ctx->tty) return;
    char where[160] = "starting";
    if (rk->have_state) {
        if (rk->layer >= 0)
            snprintf(where, sizeof where, "step %d %s layer %d %s", rk->step, rk->phase, rk->layer, rk->op);
        else snprintf(where, sizeof where, "step %d %s %s", rk->step, rk->phase, rk->op);
    }
    char at[48];
    if (ctx->sub) snprintf(at, sizeof at, "[%d/%d·%d]", ctx->index, ctx->total, ctx->sub);
    else snprintf(at, sizeof at, "[%d/%d]", ctx->index, ctx->total);
    fprintf(ctx->console, "\r\033[K%s %s/%s  %5.1f s  %s", at, r->s->name, r->c->name, elapsed, where);
    fflush(ctx->console);
}

// ---- argv ----------------------------------------------------------------------------------------

typedef struct {
    char **v;
    int n, cap;
} Argv;

static void av_add(Argv *a, const char *s) {
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->v = xrealloc(a->v, sizeof(char *) * (size_t)a->cap);
    }
    a->v[a->n++] = xstrdup(s);
    a->v[a->n] = NULL;
}
static void av_free(Argv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

// Is this case launched through MPI (several ranks, or a transport named)?
static int uses_mpi(const Case *c) { return c->run.world_size > 1 || strcmp(c->run.transport, "none") != 0; }


// The command line of the case: nsa-train itself (one rank), or
//   mpirun -np W --oversubscribe --bind-to none -x VAR... nsa-train ... --transport T
// with every per-rank path written with %r, which each rank replaces by its rank.
// rank: the rank of a single-process case (ignored under MPI).
static void trainer_argv(const RunCtx *ctx, const CaseResult *r, int rank, int for_env, Argv *a) {
    const Scenario *s = r->s;
    const Case *c = r->c;
    char buf[4600], rk[16];
    const int mpi = !for_env && uses_mpi(c);
    if (mpi) {
        char mpirun[4096];
        if (proc_which("mpirun", mpirun, sizeof mpirun)) snprintf(mpirun, sizeof mpirun, "mpirun");
        av_add(a, mpirun);
        av_add(a, "-np");
        snprintf(buf, sizeof buf, "%d", c->run.world_size);
        av_add(a, buf);
        // one host, ranks as processes: no binding (the container may have fewer
        // cores than ranks want), shared memory between them
        av_add(a, "--oversubscribe");
        av_add(a, "--bind-to");
        av_add(a, "none");
        // the scenario's variables and the harness's own for every rank
        for (int i = 0; i < c->run.n_env; i++) {
            const char *eq = strchr(c->run.env[i], '=');
            snprintf(buf, sizeof buf, "%.*s", (int)(eq - c->run.env[i]), c->run.env[i]);
            av_add(a, "-x");
            av_add(a, buf);
        }
        static const char *const pass[] = {"NCCL_NVLS_ENABLE", "OMP_NUM_THREADS", "NSA_COMM_TIMEOUT", NULL};
        for (int i = 0; pass[i]; i++) {
            av_add(a, "-x");
            av_add(a, pass[i]);
        }
    }
    snprintf(rk, sizeof rk, mpi ? "%%r" : "%d", rank);
    av_add(a, ctx->trainer);
    if (for_env) av_add(a, "--print-env");
    av_add(a, "--config");
    av_add(a, s->config_path);
    for (int i = 0; i < c->n_ov; i++) {
        av_add(a, "--set");
        snprintf(buf, sizeof buf, "%s=%s", c->ov[i].key, c->ov[i].value);
        av_add(a, buf);
    }
    if (for_env) return;
    av_add(a, "--out");
    av_add(a, r->dir);
    if (mpi) {
        av_add(a, "--transport");
        av_add(a, c->run.transport[0] && strcmp(c->run.transport, "none") ? c->run.transport : "mpi");
        av_add(a, "--log-file");
        snprintf(buf, sizeof buf, "%s/ranks/rank_%s.log", r->dir, rk);
        av_add(a, buf);
    } else {
        av_add(a, "--rank");
        av_add(a, rk);
    }
    av_add(a, "--flight-recorder");
    snprintf(buf, sizeof buf, "%s/ranks/rank_%s.fr", r->dir, rk);
    av_add(a, buf);
    av_add(a, "--stack-file");
    snprintf(buf, sizeof buf, "%s/stacks/rank_%s.txt", r->dir, rk);
    av_add(a, buf);
    unsigned needs = checks_needs(s);
    if (needs & NEED_GRAD_TRACE) av_add(a, "--trace-grads");
    if (needs & NEED_GATE_STATS) av_add(a, "--gate-stats");
    if (needs & (NEED_DUMP | NEED_DUMP_ACTS)) {
        av_add(a, "--dump-step");
        snprintf(buf, sizeof buf, "%s/step1.safetensors", r->dir);
        av_add(a, buf);
    }
    if (needs & NEED_DUMP_ACTS) av_add(a, "--dump-acts");
    for (int i = 0; i < ctx->n_faults; i++) {
        av_add(a, "--fault");
        av_add(a, ctx->faults[i]);
    }
}

// The per-case env.json: the trainer's view of the environment for this case's
// config (digest, seed, devices, versions) plus the exact command and env.
static void write_case_env(const RunCtx *ctx, CaseResult *r, char *const *train_argv) {
    Argv a = {0};
    trainer_argv(ctx, r, 0, 1, &a);
    char *out = NULL;
    int rc = proc_capture(a.v, 60, &out);
    json_t *env = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    if (!env || !json_is_object(env)) {
        json_decref(env);
        env = json_object();
        json_object_set_new(env, "error", json_sprintf("nsa-train --print-env failed (status %d)", rc));
    }
    json_t *cmd = json_array();
    for (int i = 0; train_argv[i]; i++) json_array_append_new(cmd, json_string(train_argv[i]));
    json_object_set_new(env, "command", cmd);
    json_t *extra = json_object();
    for (int i = 0; i < r->c->run.n_env; i++) {
        const char *e = r->c->run.env[i], *eq = strchr(e, '=');
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(eq - e), e);
        json_object_set_new(extra, name, json_string(eq + 1));
    }
    json_object_set_new(env, "scenario_env", extra);
    json_object_set_new(env, "scenario", json_string(r->s->name));
    json_object_set_new(env, "scenario_file", json_string(r->s->path));
    json_object_set_new(env, "case", json_string(r->c->name));
    json_object_set_new(env, "profile", json_string(ctx->profile));
    char path[2200];
    snprintf(path, sizeof path, "%s/env.json", r->dir);
    char *js = json_dumps(env, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (js) {
        Str s = {0};
        str_add(&s, js);
        str_add(&s, "\n");
        write_file_atomic(path, str_c(&s), s.len);
        str_free(&s);
    }
    free(js);
    r->env = env;   // the checks read the build fingerprint and devices from it
    free(out);
    av_free(&a);
}

// ---- evidence helpers --------------------------------------------------------------------------------

static void add_code_block(Str *ev, const char *title, const char *text, int max_lines) {
    if (!text || !text[0]) return;
    // the last max_lines lines
    int lines = 0;
    const char *start = text + strlen(text);
    while (start > text) {
        start--;
        if (*start == '\n' && start[1] && ++lines > max_lines) {
            start++;
            break;
        }
    }
    str_printf(ev, "- %s:\n\n```\n", title);
    str_add(ev, start);
    if (ev->len && ev->p[ev->len - 1] != '\n') str_add(ev, "\n");
    str_add(ev, "```\n");
}

static void rank_table(Str *ev, const CaseResult *r) {
    str_add(ev, "\n```\n");
    for (int k = 0; k < r->n_ranks; k++) {
        const RankResult *rk = &r->ranks[k];
        str_printf(ev, "rank %d  ", rk->rank);
        if (rk->have_state) {
            str_printf(ev, "step %d %-9s ", rk->step, rk->phase);
            if (rk->layer >= 0) str_printf(ev, "layer %-3d ", rk->layer);
            else str_add(ev, "          ");
            str_printf(ev, "op %-16s ", rk->op[0] ? rk->op : "-");
            if (rk->coll_enqueued || rk->coll_started || rk->coll_completed)
                str_printf(ev, "coll enq %lld start %lld done %lld (%s)  ", rk->coll_enqueued, rk->coll_started,
                           rk->coll_completed, rk->coll_name);
            str_printf(ev, "heartbeat %.1f s ago", rk->heartbeat_age_s);
        } else {
            str_add(ev, "no flight recorder (never started recording)");
        }
        if (rk->exited) {
            if (rk->term_signal) str_printf(ev, "  killed by %s", proc_signal_name(rk->term_signal));
            else str_printf(ev, "  exit %d", rk->exit_code);
        }
        str_add(ev, "\n");
    }
    str_add(ev, "```\n");
}

static void read_artifacts(CaseResult *r) {
    char p[2300];
    snprintf(p, sizeof p, "%s/metrics.jsonl", r->dir);
    r->metrics = read_jsonl(p, NULL);
    snprintf(p, sizeof p, "%s/grad_trace.jsonl", r->dir);
    r->grad_trace = read_jsonl(p, NULL);
    snprintf(p, sizeof p, "%s/gate_stats.jsonl", r->dir);
    r->gate_stats = read_jsonl(p, NULL);
    snprintf(p, sizeof p, "%s/anomaly.json", r->dir);
    r->anomaly = json_load_file(p, 0, NULL);
    snprintf(p, sizeof p, "%s/buckets.jsonl", r->dir);
    r->buckets = read_jsonl(p, NULL);
    snprintf(p, sizeof p, "%s/rank_times.jsonl", r->dir);
    r->rank_times = read_jsonl(p, NULL);
}

static void set_summary(CaseResult *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void io_error_summary(CaseResult *r, const RankResult *q);
static void set_summary(CaseResult *r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->summary, sizeof r->summary, fmt, ap);
    va_end(ap);
}

// The summary of a rank that exited 6: its `[IO-ERROR] file=PATH errno=N TEXT` line
// (trainer/train.h) names the file; when the log itself could not be written (the
// same full disk), the free space of the case folder says what happened.
static void io_error_summary(CaseResult *r, const RankResult *q) {
    char *tail = read_tail(q->log_path, LOG_TAIL_BYTES);
    char *line = tail ? strstr(tail, "[IO-ERROR] file=") : NULL;
    if (line) {
        line[strcspn(line, "\n")] = '\0';
        char *file = line + 16, *sp = strstr(file, " errno=");
        int err = sp ? atoi(sp + 7) : 0;
        if (sp) *sp = '\0';
        const char *text = sp ? strchr(sp + 7, ' ') : NULL;
        if (err == ENOSPC || err == EDQUOT) set_summary(r, "disk full writing %s (rank %d, exit 6)", file, q->rank);
        else set_summary(r, "I/O error writing %s: %s (rank %d, exit 6)", file, text ? text + 1 : "?", q->rank);
    } else {
        struct statvfs fs;
        int full = statvfs(r->dir, &fs) == 0 && fs.f_bavail == 0;
        set_summary(r, "rank %d could not write an artifact (exit 6)%s", q->rank,
                    full ? ": disk full (its log could not be written either)" : "; see its log");
    }
    free(tail);
}

// A hang of several ranks whose evidence names the rank that never joined the
// collective the others wait in: that is the summary (who, where), not just the rank
// the watchdog happened to see first.
static void name_who_never_joined(CaseResult *r) {
    const json_t *absent = json_object_get(r->facts, "hang_never_joined");
    if (!json_array_size(absent)) return;
    const RankResult *q = &r->ranks[json_integer_value(json_array_get(absent, 0))];
    Str sm = {0};
    str_printf(&sm, "rank %d never joined collective seq %lld (%s): it is in %s of step %d", q->rank,
               (long long)json_integer_value(json_object_get(r->facts, "hang_wait_seq")),
               json_string_value(json_object_get(r->facts, "hang_wait_collective")), q->phase, q->step);
    if (q->layer >= 0) str_printf(&sm, ", layer %d", q->layer);
    if (q->stack_top[0]) str_printf(&sm, ", at %s", q->stack_top);
    const json_t *waiting = json_object_get(r->facts, "hang_waiting_ranks");
    str_printf(&sm, "; %zu rank%s wait%s in it", json_array_size(waiting), json_array_size(waiting) == 1 ? "" : "s",
               json_array_size(waiting) == 1 ? "s" : "");
    set_summary(r, "%s", str_c(&sm));
    str_free(&sm);
}

// ---- run one case ---------------------------------------------------------------------------------------

void run_case(const RunCtx *ctx, CaseResult *r, const ScenarioRun *sr) {
    const Scenario *s = r->s;
    const Case *c = r->c;
    r->ctx = ctx;
    snprintf(r->dir, sizeof r->dir, "%s/%s/%s", ctx->report_dir, s->name, c->dir);
    snprintf(r->rel_dir, sizeof r->rel_dir, "%s/%s", s->name, c->dir);
    if (checks_needs(s) & (NEED_DUMP | NEED_DUMP_ACTS)) snprintf(r->dump_path, sizeof r->dump_path, "%s/step1.safetensors", r->dir);
    {
        // every option that shaped the case, so the command reproduces it exactly
        Str rep = {0};
        char sel[600];
        snprintf(sel, sizeof sel, "%s/%s", s->name, c->name);
        char *const av[] = {(char *)ctx->harness, "run", (char *)s->path, "--profile", (char *)ctx->profile, "--case",
                            sel, NULL};
        shell_join(&rep, av);
        if (ctx->replay_args && ctx->replay_args[0]) str_printf(&rep, " %s", ctx->replay_args);
        snprintf(r->repro, sizeof r->repro, "%s", str_c(&rep));
        str_free(&rep);
    }
    // requirements
    if (s->requires_gpus > ctx->gpus) {
        r->verdict = V_SKIP;
        set_summary(r, "needs %d GPU%s, found %d", s->requires_gpus, s->requires_gpus == 1 ? "" : "s", ctx->gpus);
        return;
    }
    const int W = c->run.world_size, mpi = uses_mpi(c);
    char mpirun[4096] = "";
    if (mpi && proc_which("mpirun", mpirun, sizeof mpirun)) {
        r->verdict = V_SKIP;
        set_summary(r, "needs mpirun (Open MPI) to launch %d rank%s over %s: apt-get install openmpi-bin", W,
                    W == 1 ? "" : "s", c->run.transport);
        return;
    }
    char sub[2300];
    snprintf(sub, sizeof sub, "%s/ranks", r->dir);
    int mk = mkdir_p(sub);
    snprintf(sub, sizeof sub, "%s/stacks", r->dir);
    mk |= mkdir_p(sub);
    if (mk) {
        r->verdict = V_ERROR;
        set_summary(r, "cannot create the case folder: %s", strerror(errno));
        return;
    }
    CaseLog cl = {0};
    snprintf(sub, sizeof sub, "%s/output.log", r->dir);
    cl.f = fopen(sub, "w");
    cl.t0 = mono_s();

    r->n_ranks = W;
    r->ranks = xcalloc((size_t)W, sizeof(RankResult));
    for (int k = 0; k < W; k++) {
        RankResult *rk = &r->ranks[k];
        rk->rank = k;
        rk->layer = -1;
        snprintf(rk->log_path, sizeof rk->log_path, "%s/ranks/rank_%d.log", r->dir, k);
        snprintf(rk->stack_path, sizeof rk->stack_path, "%s/stacks/rank_%d.txt", r->dir, k);
        snprintf(rk->fr_path, sizeof rk->fr_path, "%s/ranks/rank_%d.fr", r->dir, k);
    }
    Argv av = {0};
    trainer_argv(ctx, r, 0, 0, &av);
    write_case_env(ctx, r, av.v);
    Str cmd = {0};
    shell_join(&cmd, av.v);
    case_log(&cl, "case %s/%s (profile %s), %d rank%s%s%s, timeout %.0f s, stall %.0f s (scale %g)", s->name, c->name,
             ctx->profile, W, W == 1 ? "" : "s", mpi ? " over " : "", mpi ? c->run.transport : "", c->run.timeout_s,
             c->run.stall_s, ctx->timeout_scale);
    for (int i = 0; i < c->run.n_env; i++) case_log(&cl, "env %s", c->run.env[i]);

    // the environment: the scenario's, what Open MPI needs as root, and NVLink
    // multicast off (it can take a shared host's GPUs down; see the device docs)
    char **env = xcalloc((size_t)c->run.n_env + 4, sizeof(char *));
    int n_env = 0;
    for (int i = 0; i < c->run.n_env; i++) env[n_env++] = c->run.env[i];
    if (mpi && geteuid() == 0) {
        env[n_env++] = "OMPI_ALLOW_RUN_AS_ROOT=1";
        env[n_env++] = "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
    }
    if (!getenv("NCCL_NVLS_ENABLE")) env[n_env++] = "NCCL_NVLS_ENABLE=0";

    // launch: the trainer itself (one rank), or mpirun (its own output goes to
    // launcher.log; every rank writes ranks/rank_R.log itself)
    char launcher_log[2300];
    if (mpi) snprintf(launcher_log, sizeof launcher_log, "%s/launcher.log", r->dir);
    else snprintf(launcher_log, sizeof launcher_log, "%s", r->ranks[0].log_path);
    pid_t lp = proc_spawn(av.v, launcher_log, env, n_env);
    free(env);
    case_log(&cl, "%s pid %d: %s", mpi ? "mpirun" : "rank 0", (int)lp, str_c(&cmd));
    if (lp < 0) {
        r->verdict = V_ERROR;
        set_summary(r, "cannot start %s: %s", av.v[0], strerror(errno));
    }
    if (!mpi) r->ranks[0].pid = (int)lp;
    FrMap *frs = xcalloc((size_t)W, sizeof(FrMap));
    const double timeout = c->run.timeout_s * ctx->timeout_scale, stall = c->run.stall_s * ctx->timeout_scale;
    const double t0 = mono_s();
    int stalled = 0, interrupted = 0, launcher_done = lp < 0, lstatus = 0;
    double stall_age = 0;   // the stalled rank's heartbeat age when the watchdog saw it
    double last_progress = 0;
    char why[256] = "";
    // supervise until the launcher has exited, or a stall/interrupt
    while (!launcher_done && !stalled && !interrupted) {
        struct timespec ts = {0, POLL_NS};
        nanosleep(&ts, NULL);
        const double el = mono_s() - t0;
        const uint64_t now = mono_ns();
        if (waitpid(lp, &lstatus, WNOHANG) == lp) {
            launcher_done = 1;
            case_log(&cl, "%s exited: %s %d", mpi ? "mpirun" : "rank 0", WIFSIGNALED(lstatus) ? "signal" : "code",
                     WIFSIGNALED(lstatus) ? WTERMSIG(lstatus) : WEXITSTATUS(lstatus));
        }
        for (int k = 0; k < W; k++) {
            RankResult *rk = &r->ranks[k];
            fr_try_map(&frs[k], rk->fr_path);
            fr_snapshot(&frs[k], rk, now);
            if (mpi && frs[k].h && !rk->pid) rk->pid = frs[k].h->pid;
            if (launcher_done || rk->exited) continue;
            // a rank of an MPI job has ended when its recorder says so or its process is gone
            if (mpi && ((frs[k].h && (rk->exited || rk->term_signal)) || (rk->pid > 0 && !proc_alive(rk->pid)))) {
                rk->exited = 1;
                continue;
            }
            // a rank whose own collective watchdog fired (exit 4) while others still run:
            // the others hang with it; ask them all now rather than at their stall_s
            if (mpi && rk->exited && rk->exit_code == 4 && !stalled) {
                snprintf(why, sizeof why, "rank %d's collective did not complete within its --comm-timeout (exit 4)", k);
                stalled = 1;
                continue;
            }
            double age = frs[k].h ? rk->heartbeat_age_s : el;
            if (age > stall) {
                rk->stalled = 1;
                if (!stalled) {
                    snprintf(why, sizeof why, "no heartbeat from rank %d for %.1f s (stall_s %.0f)", k, age, stall);
                    stall_age = age;
                }
                stalled = 1;
            }
        }
        if (!stalled && !launcher_done && el > timeout) {
            stalled = 1;
            snprintf(why, sizeof why, "case still running after %.1f s (timeout_s %.0f)", el, timeout);
            for (int k = 0; k < W; k++) r->ranks[k].stalled = !r->ranks[k].exited;
        }
        if (ctx->interrupted && *ctx->interrupted) interrupted = 1;
        if (el - last_progress > 0.25) {
            progress(ctx, r, el, &r->ranks[0]);
            last_progress = el;
        }
    }
    // stalled: ask EVERY live rank for its stack (SIGUSR1) — the stalled ones and the
    // ones waiting for them in a collective — then escalate on the launcher
    double seen_at = 0;
    if (stalled && !launcher_done) {
        seen_at = mono_s();
        case_log(&cl, "watchdog: %s", why);
        for (int k = 0; k < W; k++) {
            RankResult *rk = &r->ranks[k];
            if (rk->exited || rk->pid <= 0) continue;
            case_log(&cl, "rank %d %s in phase %s step %d layer %d op %s; sending SIGUSR1 to pid %d", k,
                     rk->stalled ? "stalled" : "still beating", rk->have_state ? rk->phase : "?", rk->step, rk->layer,
                     rk->op, rk->pid);
            kill(rk->pid, SIGUSR1);
            rk->signalled = 1;
        }
        double grace = DUMP_GRACE_S * ctx->timeout_scale;
        grace = grace < DUMP_GRACE_MIN_S ? DUMP_GRACE_MIN_S : grace > DUMP_GRACE_S ? DUMP_GRACE_S : grace;
        if (proc_wait(lp, grace, &lstatus)) launcher_done = 1;
        else {
            case_log(&cl, "still running %.1f s after SIGUSR1; SIGTERM to the process group", grace);
            proc_kill_group(lp, SIGTERM);
            if (proc_wait(lp, TERM_GRACE_S, &lstatus)) launcher_done = 1;
            else {
                case_log(&cl, "SIGKILL to the process group and every rank");
                proc_kill_group(lp, SIGKILL);
                for (int k = 0; k < W; k++)
                    if (mpi && r->ranks[k].pid > 0) kill(r->ranks[k].pid, SIGKILL);
                proc_wait(lp, 30, &lstatus);
                launcher_done = 1;
            }
        }
        for (int k = 0; k < W; k++) {
            RankResult *rk = &r->ranks[k];
            struct stat sst;
            rk->dumped = (rk->stalled || rk->signalled) && stat(rk->stack_path, &sst) == 0 && sst.st_size > 0;
            if (rk->signalled) case_log(&cl, "rank %d: stack %s", k, rk->dumped ? "written" : "not written");
        }
    }
    if (interrupted && !launcher_done) {
        case_log(&cl, "interrupted: stopping every rank");
        proc_kill_group(lp, SIGTERM);
        if (!proc_wait(lp, TERM_GRACE_S, &lstatus)) {
            proc_kill_group(lp, SIGKILL);
            proc_wait(lp, 30, &lstatus);
        }
        launcher_done = 1;
    }
    // nothing of the case survives it: the launcher's group, every rank, orphans
    if (lp > 0) proc_kill_group(lp, SIGKILL);
    for (int k = 0; k < W; k++)
        if (mpi && r->ranks[k].pid > 0 && proc_alive(r->ranks[k].pid)) kill(r->ranks[k].pid, SIGKILL);
    proc_reap_orphans();
    int stray = proc_kill_children();   // orphans that left the group (setsid), now ours as subreaper
    if (stray) case_log(&cl, "killed %d process%s the case left behind outside its process group", stray, stray == 1 ? "" : "es");
    // how each rank ended: the launcher's status (one rank), or its flight recorder (MPI)
    for (int k = 0; k < W; k++) {
        RankResult *rk = &r->ranks[k];
        fr_snapshot(&frs[k], rk, mono_ns());
        if (stalled) hang_read_wait(frs[k].h, rk);   // the collective it waits in, if any
        fr_unmap(&frs[k]);
        if (!mpi && lp > 0) {
            rk->exited = 1;
            rk->term_signal = WIFSIGNALED(lstatus) ? WTERMSIG(lstatus) : 0;
            rk->exit_code = WIFEXITED(lstatus) ? WEXITSTATUS(lstatus) : 0;
        } else if (mpi) {
            rk->exited = 1;   // the job is over
        }
        if (rk->term_signal == SIGUSR1 && (rk->stalled || rk->signalled)) {   // its stall dump, not a crash
            rk->term_signal = 0;
            rk->exit_code = 138;
        }
    }
    r->launcher_exit = WIFEXITED(lstatus) ? WEXITSTATUS(lstatus) : 128 + (WIFSIGNALED(lstatus) ? WTERMSIG(lstatus) : 0);
    r->wall_s = mono_s() - t0;
    if (ctx->console && ctx->tty) fprintf(ctx->console, "\r\033[K");
    read_artifacts(r);

    // ---- verdict ----
    const RankResult *bad = NULL, *comm_timeout = NULL;
    int any_recorder = 0;
    for (int k = 0; k < W; k++) {
        const RankResult *q = &r->ranks[k];
        any_recorder |= q->have_state;
        if (q->exit_code == 4 && !comm_timeout) comm_timeout = q;
        if (!bad && (q->term_signal ||
                     (q->exit_code != 0 && q->exit_code != 3 && q->exit_code != 4 && q->exit_code != 5 && !q->stalled)))
            bad = q;
    }
    if (r->verdict == V_ERROR) {
        // could not start
    } else if (mpi && !any_recorder && !stalled && !interrupted && r->launcher_exit != 0) {
        r->verdict = V_ERROR;
        set_summary(r, "mpirun exited %d before any rank started: see launcher.log", r->launcher_exit);
        char *tail = read_tail(launcher_log, LOG_TAIL_BYTES);
        if (tail && tail[0]) add_code_block(&r->evidence, "launcher.log, last lines", tail, 20);
        free(tail);
    } else if (!stalled && !interrupted && comm_timeout && !bad) {
        // the trainer's own watchdog: a collective did not complete within --comm-timeout
        r->verdict = V_HANG;
        const RankResult *q = comm_timeout;
        set_summary(r, "rank %d: collective seq %lld did not complete (collective timeout, exit 4)", q->rank,
                    q->coll_started ? q->coll_started : q->coll_enqueued);
        str_add(&r->evidence, "- the trainer's collective watchdog fired (exit 4) before the runner's\n");
        rank_table(&r->evidence, r);
    } else if (interrupted) {
        r->verdict = V_ERROR;
        set_summary(r, "interrupted by the user after %.1f s", r->wall_s);
        str_printf(&r->evidence, "- the run was interrupted (SIGINT/SIGTERM) while this case ran; its ranks were stopped\n");
    } else if (stalled) {
        r->verdict = V_HANG;
        const RankResult *rk = NULL;
        for (int k = 0; k < W && !rk; k++)
            if (r->ranks[k].stalled) rk = &r->ranks[k];
        if (rk && rk->have_state) {
            Str sm = {0};
            str_printf(&sm, "rank %d stalled at step %d, phase %s", rk->rank, rk->step, rk->phase);
            if (rk->layer >= 0) str_printf(&sm, ", layer %d", rk->layer);
            if (rk->op[0] && strcmp(rk->op, rk->phase)) str_printf(&sm, ", op %s", rk->op);
            if (rk->coll_enqueued || rk->coll_completed)
                str_printf(&sm, ", collective seq %lld started / %lld completed", rk->coll_started, rk->coll_completed);
            str_printf(&sm, "; no heartbeat for %.0f s", rk->heartbeat_age_s);
            set_summary(r, "%s", str_c(&sm));
            str_free(&sm);
        } else set_summary(r, "%s", why);
        // how long from the stall (the last heartbeat) and from the watchdog seeing it
        // to this verdict: the promise is stall_s + 5 s
        const double seen_to_verdict = seen_at > 0 ? mono_s() - seen_at : 0;
        json_object_set_new(r->facts, "hang_seen_to_verdict_s", json_real(seen_to_verdict));
        json_object_set_new(r->facts, "hang_stall_to_verdict_s", json_real(stall_age + seen_to_verdict));
        str_printf(&r->evidence, "- watchdog: %s; every live rank got SIGUSR1 (stack and flight recorder), then "
                                 "SIGTERM/SIGKILL; verdict %.1f s after the watchdog saw the stall, %.1f s after the last "
                                 "heartbeat\n", why, seen_to_verdict, stall_age + seen_to_verdict);
        rank_table(&r->evidence, r);
        for (int k = 0; k < W; k++) hang_read_stack_top(&r->ranks[k]);
        hang_forensics(r, &r->evidence);
        name_who_never_joined(r);
        for (int k = 0; k < W; k++) {
            const RankResult *q = &r->ranks[k];
            char *stack = q->dumped ? read_file(q->stack_path, NULL) : NULL;
            char title[1400];
            snprintf(title, sizeof title, "rank %d stack and flight recorder (`%s/stacks/rank_%d.txt`)", k, r->rel_dir, k);
            if (stack) add_code_block(&r->evidence, title, stack, 60);
            else if (q->signalled) str_printf(&r->evidence, "- rank %d wrote no stack (it did not answer SIGUSR1)\n", k);
            free(stack);
        }
    } else if (bad) {
        r->verdict = V_CRASH;
        if (bad->term_signal)
            set_summary(r, "rank %d killed by %s (signal %d)", bad->rank, proc_signal_name(bad->term_signal),
                        bad->term_signal);
        else if (bad->exit_code == 2) {
            r->verdict = V_ERROR;
            set_summary(r, "the trainer rejected its arguments (exit 2): see ranks/rank_%d.log", bad->rank);
        } else if (bad->exit_code == 6) {   // an artifact could not be written: not a defect of the model
            r->verdict = V_ERROR;
            io_error_summary(r, bad);
        } else
            set_summary(r, "rank %d exited with code %d%s", bad->rank, bad->exit_code,
                        bad->exit_code == 1 ? " (runtime failure)" : "");
        rank_table(&r->evidence, r);
        char *stack = read_file(bad->stack_path, NULL);
        char title[1400];
        snprintf(title, sizeof title, "rank %d stack (`%s/stacks/rank_%d.txt`)", bad->rank, r->rel_dir, bad->rank);
        if (stack && stack[0]) add_code_block(&r->evidence, title, stack, 60);
        free(stack);
    }
    if (r->verdict == V_PASS) {
        // the ranks finished (exit 0, or 3: a non-finite value was localised): evaluate the checks
        int any_anomaly = 0;
        for (int k = 0; k < W; k++) any_anomaly |= r->ranks[k].exit_code == 3;
        // exit 5: the data-parallel layer found its contract broken (static_graph:
        // the used parameters differ across ranks or steps): a failed check
        int ddp_stop = 0;
        for (int k = 0; k < W; k++) {
            if (r->ranks[k].exit_code != 5) continue;
            ddp_stop = 1;
            char *tail = read_tail(r->ranks[k].log_path, LOG_TAIL_BYTES);
            Str lines = {0};
            char *save = NULL;
            for (char *ln = tail ? strtok_r(tail, "\n", &save) : NULL; ln; ln = strtok_r(NULL, "\n", &save))
                if (strstr(ln, "[DDP]") && !strstr(ln, "[DDP] world")) str_printf(&lines, "%s%s", lines.len ? "\n" : "", ln);
            const char *first = lines.len ? str_c(&lines) : "the data-parallel layer stopped the run (exit 5)";
            const char *nl = strchr(first, '\n');
            Finding *f = result_finding(r, "ddp", 0, "rank %d: %.*s", k, nl ? (int)(nl - first) : (int)strlen(first), first);
            if (lines.len) add_code_block(&f->details, "its [DDP] lines", str_c(&lines), 20);
            str_free(&lines);
            free(tail);
            break;
        }
        int has_finite = 0;
        for (int i = 0; i < s->n_checks; i++) {
            const CheckDef *def = check_find(s->checks[i].kind);
            has_finite |= !strcmp(def->name, "finite");
            if ((any_anomaly || ddp_stop) && strcmp(def->name, "finite")) continue;   // the run stopped early: partial artifacts
            def->evaluate(s->checks[i].params, r, sr);
        }
        if (any_anomaly && !has_finite) {
            Finding *f = result_finding(r, "anomaly", 0, "the trainer stopped on a non-finite value (exit 3)");
            if (r->anomaly) {
                char *js = json_dumps(r->anomaly, JSON_COMPACT);
                str_printf(&f->details, "- anomaly.json: `%s`\n", js ? js : "?");
                free(js);
            }
        }
        // the verdict: FAIL if a check failed, else ERROR / SKIP if a check could not
        // judge (golden without a baseline, or with one of another config), else PASS;
        // the summary shows the findings that decided it
        r->verdict = result_verdict_of_findings(r);
        Str sum = {0};
        for (int i = 0; i < r->n_findings; i++) {
            const Finding *f = &r->findings[i];
            int decides = r->verdict == V_PASS || (r->verdict == V_FAIL ? !f->ok : f->verdict == r->verdict);
            if (!decides) continue;
            if (sum.len) str_add(&sum, "; ");
            str_add(&sum, f->summary);
        }
        snprintf(r->summary, sizeof r->summary, "%s", str_c(&sum));
        str_free(&sum);
        for (int i = 0; i < r->n_findings; i++) {
            const Finding *f = &r->findings[i];
            if (f->ok && f->verdict == V_PASS) continue;
            str_printf(&r->evidence, "- **%s**: %s\n", f->check, f->summary);
            if (f->details.len) str_add(&r->evidence, str_c(&f->details));
        }
    }
    if (r->verdict != V_PASS && r->verdict != V_SKIP) {
        int lead = -1;
        for (int k = 0; k < W && lead < 0; k++)
            if (r->ranks[k].stalled || r->ranks[k].term_signal || r->ranks[k].exit_code) lead = k;
        if (lead < 0) lead = 0;
        char *tail = read_tail(r->ranks[lead].log_path, LOG_TAIL_BYTES);
        char title[1400];
        snprintf(title, sizeof title, "rank %d log, last lines (`%s/ranks/rank_%d.log`)", lead, r->rel_dir, lead);
        if (tail && tail[0]) add_code_block(&r->evidence, title, tail, 15);
        free(tail);
    }
    case_log(&cl, "verdict %s: %s", VERDICT_NAMES[r->verdict], r->summary);
    if (cl.f) fclose(cl.f);
    str_free(&cmd);
    av_free(&av);
    free(frs);
}
