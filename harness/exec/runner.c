// harness/exec/runner.c — see runner.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/exec/runner.h"

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

#include "common/exit_codes.h"
#include "harness/core/check.h"
#include "harness/exec/hang.h"
#include "harness/exec/launch.h"
#include "harness/exec/proc.h"
#include "harness/artifacts/pystack.h"
#include "harness/exec/trainer_caps.h"
#include "common/flightrec_layout.h"
#include "common/jsonutil.h"

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
// how much of a rank's log is searched for a Python traceback or the probe's [nsa_probe] lines
#define LOG_SEARCH_BYTES (256 * 1024)
#define TRACEBACK_MAX_LINES 40

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
    int64_t hb_last;       // a remote rank's heartbeat_ns as last read, and when (this host's
    uint64_t hb_seen_ns;   // CLOCK_MONOTONIC) it last changed: another host's clock is not ours
} FrMap;

// Mapped only once every block of the file is allocated: on a full tmpfs, touching a
// page of a sparse file allocates it, and a failed allocation is SIGBUS — in the
// reader too. The trainer reserves every block before it writes the magic
// (trainer/flightrec.h); until then, or if it could not, the recorder stays unread.
// Returns 1 when this call mapped it.
static int fr_try_map(FrMap *m, const char *path) {
    if (m->h) return 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
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
    return m->h != NULL;
}

static void fr_unmap(FrMap *m) {
    if (m->h) munmap((void *)m->h, m->bytes);
    m->h = NULL;
}

// Copy the recorder's state into the rank result. The heartbeat's age: against this host's
// clock (CLOCK_MONOTONIC is system-wide), or for a rank on another host, since the runner
// last saw the heartbeat change.
static void fr_snapshot(FrMap *m, RankResult *rk, uint64_t now_ns) {
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
    if (rk->remote) {
        if (!m->hb_seen_ns || st.heartbeat_ns != m->hb_last) {
            m->hb_last = st.heartbeat_ns;
            m->hb_seen_ns = now_ns;
        }
        rk->heartbeat_age_s = ((double)now_ns - (double)m->hb_seen_ns) * 1e-9;
    } else {
        rk->heartbeat_age_s = st.heartbeat_ns > 0 ? ((double)now_ns - (double)st.heartbeat_ns) * 1e-9 : -1;
    }
    if (st.exited) {
        rk->exited = 1;
        rk->exit_code = st.exit_code;
    }
    if (st.fatal_signal) rk->term_signal = st.fatal_signal;
}

// ---- a heartbeat file (protocol 2, diagnostic `heartbeat`) -----------------------------------------

typedef struct {
    long long seq;       // the last seq read (-1: none yet)
    uint64_t seen_ns;    // when (this host's CLOCK_MONOTONIC) the runner saw seq change; the case's
                         // start before the first beat
} HbWatch;

// Read the rank's heartbeat file (one JSON object, replaced atomically by the trainer) into
// rk: its place (step, phase, layer, op), host, and how it ended (exited, exit_code). Its
// age: since the runner last saw seq change. A missing or unparsable file is no new beat.
static void hb_snapshot(HbWatch *h, RankResult *rk, uint64_t now_ns) {
    char *text = read_file(rk->hb_path, NULL);
    json_t *j = text ? json_loads(text, JSON_DISABLE_EOF_CHECK, NULL) : NULL;
    free(text);
    const json_t *seq = json_object_get(j, "seq");
    if (json_is_object(j) && json_is_integer(seq)) {
        if (json_integer_value(seq) != h->seq) {
            h->seq = json_integer_value(seq);
            h->seen_ns = now_ns;
        }
        rk->have_state = 1;
        const char *phase = json_string_value(json_object_get(j, "phase"));
        const char *op = json_string_value(json_object_get(j, "op"));
        const char *host = json_string_value(json_object_get(j, "host"));
        snprintf(rk->phase, sizeof rk->phase, "%s", phase ? phase : "?");
        snprintf(rk->op, sizeof rk->op, "%s", op ? op : "");
        if (host && !rk->host[0]) snprintf(rk->host, sizeof rk->host, "%s", host);
        rk->step = (int)json_number_or(j, "step", 0);
        rk->layer = (int)json_number_or(j, "layer", -1);
        if (json_is_true(json_object_get(j, "exited"))) {
            rk->exited = 1;
            rk->exit_code = (int)json_number_or(j, "exit_code", 0);
        }
    }
    json_decref(j);
    rk->heartbeat_age_s = ((double)now_ns - (double)h->seen_ns) * 1e-9;
}

// ---- progress ----------------------------------------------------------------------------------

// What a running case is doing, for progress: a terminal gets a live line (rewritten every
// 0.25 s); any other console a line every RUNNER_STILL_RUNNING_S seconds, so a log shows
// what a long case is doing (its step of train.steps, phase, layer and op from rank 0's
// flight recorder or heartbeat file). *last_line: when the last such line was printed.
static double still_running_s(void) {
    const char *e = getenv("NSA_HARNESS_PROGRESS_S");
    char *end = NULL;
    double v = e && e[0] ? strtod(e, &end) : 0;
    return e && e[0] && end && !*end && v >= 0.1 && v <= 3600 ? v : RUNNER_STILL_RUNNING_S;
}

static void progress(const RunCtx *ctx, const CaseResult *r, double elapsed, const RankResult *rk, double *last_line) {
    if (!ctx->console) return;
    if (!ctx->tty && elapsed - *last_line < still_running_s()) return;
    char where[200] = "starting";
    if (rk->have_state) {
        int n = snprintf(where, sizeof where, "step %d/%d %s", rk->step, r->c->cfg.steps, rk->phase);
        if (rk->layer >= 0 && n > 0 && (size_t)n < sizeof where)
            n += snprintf(where + n, sizeof where - (size_t)n, " layer %d", rk->layer);
        if (rk->op[0] && strcmp(rk->op, rk->phase) && n > 0 && (size_t)n < sizeof where)
            snprintf(where + n, sizeof where - (size_t)n, " %s", rk->op);
    }
    char at[48];
    if (ctx->sub) snprintf(at, sizeof at, "[%d/%d·%d]", ctx->index, ctx->total, ctx->sub);
    else snprintf(at, sizeof at, "[%d/%d]", ctx->index, ctx->total);
    if (ctx->tty) {
        fprintf(ctx->console, "\r\033[K%s %s/%s  %5.1f s  %s%s%s", at, r->s->name, r->c->name, elapsed, where,
                ctx->tally ? "  · " : "", ctx->tally ? ctx->tally : "");
    } else {
        char t[32];
        fmt_duration(t, sizeof t, elapsed);
        fprintf(ctx->console, "%s ...   %s/%s: still running after %s: %s%s\n", at, r->s->name, r->c->name, t,
                rk->have_state ? "rank 0 at " : "", where);
        *last_line = elapsed;
    }
    fflush(ctx->console);
}

// ---- the trainer's command line ----------------------------------------------------------------------

const TrainerSpec *runner_case_trainer(const RunCtx *ctx, const Scenario *s, const Case *c) {
    if (c->run.trainer[0] && strcmp(c->run.trainer, "nsa-train")) {
        const TrainerSpec *t = scenario_trainer(s, c->run.trainer);
        if (t) return t;   // (the loader checked the name)
    }
    if (ctx->trainer_default) return ctx->trainer_default;
    static TrainerSpec fallback;   // a caller that named only ctx->trainer
    if (!fallback.display || strcmp(fallback.words.v[0], ctx->trainer)) {
        if (fallback.display) trainer_spec_free(&fallback);
        char *const w[] = {(char *)ctx->trainer, NULL};
        trainer_spec_init(&fallback, "nsa-train", w, 0);
    }
    return &fallback;
}

// The trainer and its arguments for the case (the launcher's words come before them,
// harness/exec/launch.c). A trainer given as a command gets the resolved config file
// CASE/config.json and no --set; one given by path the scenario's config and --set.
// Several ranks (any launcher but the trainer alone): every per-rank path written with %r,
// which each rank replaces by its rank, and the transport; the env and srun launchers name
// the bootstrap (the trainer would find it, but a harness itself started under mpirun or
// srun must not lend its ranks' variables to the case). The liveness flag and --stack-file
// as the trainer's handshake lists them (docs/trainer-protocol.md "Liveness").
// for_env: the --print-env form (the config only).
static void trainer_argv(const RunCtx *ctx, const CaseResult *r, LaunchKind kind, int for_env, StrList *a) {
    const Scenario *s = r->s;
    const Case *c = r->c;
    const TrainerSpec *t = runner_case_trainer(ctx, s, c);
    const TrainerCaps *tc = trainer_caps_of(t);
    char buf[4600];
    const int multi = !for_env && launch_is_multi(kind);
    const char *rk = multi ? "%r" : "0";
    trainer_spec_argv(t, a);
    if (for_env) strlist_add(a, "--print-env");
    strlist_add(a, "--config");
    if (t->is_cmd) {
        snprintf(buf, sizeof buf, "%s/config.json", r->dir);
        strlist_add(a, buf);
    } else {
        strlist_add(a, s->config_path);
        for (int i = 0; i < c->n_ov; i++) {
            strlist_add(a, "--set");
            snprintf(buf, sizeof buf, "%s=%s", c->ov[i].key, c->ov[i].value);
            strlist_add(a, buf);
        }
    }
    if (for_env) return;
    strlist_add(a, "--out");
    strlist_add(a, r->dir);
    if (multi) {
        strlist_add(a, "--transport");
        strlist_add(a, strcmp(c->run.transport, "none") ? c->run.transport : "mpi");
        const char *boot = kind == LAUNCH_ENV                                            ? "env"
                           : kind == LAUNCH_SRUN && !strcmp(c->run.transport, "nccl") ? "slurm"
                                                                                        : NULL;
        if (boot) {
            strlist_add(a, "--bootstrap");
            strlist_add(a, boot);
        }
        strlist_add(a, "--log-file");
        snprintf(buf, sizeof buf, "%s/ranks/rank_%s.log", r->dir, rk);
        strlist_add(a, buf);
    } else {
        strlist_add(a, "--rank");
        strlist_add(a, rk);
    }
    const Liveness live = trainer_caps_liveness(tc);
    if (live == LIVE_FLIGHT_RECORDER) {
        strlist_add(a, "--flight-recorder");
        snprintf(buf, sizeof buf, "%s/ranks/rank_%s.fr", r->dir, rk);
        strlist_add(a, buf);
    } else if (live == LIVE_HEARTBEAT) {
        strlist_add(a, "--heartbeat");
        snprintf(buf, sizeof buf, "%s/ranks/rank_%s.hb", r->dir, rk);
        strlist_add(a, buf);
    }
    if (trainer_caps_stack_dump(tc)) {
        strlist_add(a, "--stack-file");
        snprintf(buf, sizeof buf, "%s/stacks/rank_%s.txt", r->dir, rk);
        strlist_add(a, buf);
    }
    unsigned needs = checks_needs(s);
    if (needs & NEED_GRAD_TRACE) strlist_add(a, "--trace-grads");
    if (needs & NEED_GATE_STATS) strlist_add(a, "--gate-stats");
    if (needs & (NEED_DUMP | NEED_DUMP_ACTS)) {
        strlist_add(a, "--dump-step");
        snprintf(buf, sizeof buf, "%s/step1.safetensors", r->dir);
        strlist_add(a, buf);
    }
    if (needs & NEED_DUMP_ACTS) strlist_add(a, "--dump-acts");
    Str select = {0};   // only the tensors the scenario reads, where the trainer can leave the rest out
    if ((needs & (NEED_DUMP | NEED_DUMP_ACTS)) && trainer_caps_dump_tensors(tc) && checks_dump_select(s, &select)) {
        strlist_add(a, "--dump-tensors");
        strlist_add(a, str_c(&select));
    }
    str_free(&select);
    for (int i = 0; i < ctx->n_faults; i++) {
        strlist_add(a, "--fault");
        strlist_add(a, ctx->faults[i]);
    }
    if (c->run.init_shared) {
        strlist_add(a, "--init-weights");
        snprintf(buf, sizeof buf, "%s/init_weights.safetensors", r->dir);
        strlist_add(a, buf);
    }
}

// The per-case env.json: the trainer's view of the environment for this case's
// config (digest, seed, devices, versions) plus the exact command and env.
static void write_case_env(const RunCtx *ctx, CaseResult *r, const Launch *L) {
    const TrainerSpec *t = runner_case_trainer(ctx, r->s, r->c);
    const TrainerCaps *tcaps = trainer_caps_of(t);
    json_t *env = NULL;
    char *out = NULL;
    int rc = 0;
    if (json_is_object(tcaps->env)) {
        // the trainer's environment (build, devices, host, variables) does not depend on the
        // case: its run-level answer stands, and the config's facts are filled in below from the
        // runner's own loader (the same canonical JSON, so the same digest). Asking again per
        // case cost a trainer start per case: a CUDA context on a GPU machine, an interpreter
        // start and a torch import for a Python trainer.
        env = json_deep_copy(tcaps->env);
        json_object_set_new(env, "print_env", json_string("the trainer's run-level --print-env (asked once per run; "
                                                          "the config's facts from the runner)"));
    } else {
        StrList a = {0};
        trainer_argv(ctx, r, L->kind, 1, &a);
        rc = proc_capture(a.v, 60, &out);
        strlist_free(&a);
        env = rc == 0 ? json_loads(out, 0, NULL) : NULL;
    }
    if (!env || !json_is_object(env)) {
        json_decref(env);
        env = json_object();
        json_object_set_new(env, "error", json_sprintf("the trainer's --print-env failed (status %d)", rc));
    }
    // the config's name, digest and seed as the runner resolved them, where the trainer's answer
    // lacks them (a trainer given as a command reads CASE/config.json: the same canonical JSON,
    // so the same digest nsa-train computes); golden and perf_floor match baselines by them
    json_t *cj = json_object_get(env, "config");
    if (!json_is_object(cj)) {
        cj = json_object();
        json_object_set_new(env, "config", cj);
    }
    const NsaConfig *cfg = &r->c->cfg;
    int filled = 0;
    if (!json_is_string(json_object_get(cj, "digest")) && cfg->digest[0])
        filled += json_object_set_new(cj, "digest", json_string(cfg->digest)) == 0;
    if (!json_is_string(json_object_get(cj, "name")) && cfg->name[0])
        filled += json_object_set_new(cj, "name", json_string(cfg->name)) == 0;
    if (!json_object_get(cj, "seed")) filled += json_object_set_new(cj, "seed", json_integer((json_int_t)cfg->seed)) == 0;
    if (!json_is_string(json_object_get(cj, "source")) && cfg->source[0])
        filled += json_object_set_new(cj, "source", json_string(cfg->source)) == 0;
    if (!json_is_string(json_object_get(cj, "backend")) && cfg->backend[0])
        filled += json_object_set_new(cj, "backend", json_string(cfg->backend)) == 0;
    if (!json_is_string(json_object_get(cj, "precision")) && cfg->precision[0])
        filled += json_object_set_new(cj, "precision", json_string(cfg->precision)) == 0;
    if (filled) json_object_set_new(cj, "filled_in_by", json_string("nsa-harness (the config's facts, from its loader)"));
    // which trainer ran the case: its name, command and handshake
    json_t *tj = json_object();
    json_object_set_new(tj, "name", json_string(t->name));
    json_t *words = json_array();
    for (int i = 0; i < t->words.n; i++) json_array_append_new(words, json_string(t->words.v[i]));
    json_object_set_new(tj, "command", words);
    json_object_set_new(tj, "form", json_string(t->is_cmd ? "command (--config CASE/config.json, no --set)"
                                                          : "path (--config FILE --set ...)"));
    if (t->map) json_object_set_new(tj, "map", json_string(t->map));
    json_object_set_new(tj, "trainer_protocol", trainer_caps_json(trainer_caps_of(t)));
    json_object_set_new(env, "trainer", tj);
    json_t *cmd = json_array();
    for (int i = 0; L->argv.v && L->argv.v[i]; i++) json_array_append_new(cmd, json_string(L->argv.v[i]));
    json_object_set_new(env, "command", cmd);
    json_object_set_new(env, "launcher", json_string(launch_kind_name(L->kind)));
    if (L->kind == LAUNCH_ENV) {   // what each rank got besides the command
        json_object_set_new(env, "rendezvous", json_pack("{s:s,s:i}", "master_addr", "127.0.0.1", "master_port", L->port));
    }
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
        str_printf(ev, "rank %d%s  ", rk->rank, result_rank_host(r, k));
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
            str_add(ev, "no flight recorder or heartbeat (never started recording)");
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
    r->anomaly = json_load_path(p, 0, NULL);
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

// The summary of a rank that exited 6 (NSA_EXIT_IO): its `[IO-ERROR] file=PATH errno=N TEXT`
// line names the file; when the log itself could not be written (the same full disk), the
// free space of the case folder says what happened.
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
    str_printf(&sm, "rank %d%s never joined collective seq %lld (%s): it is in %s of step %d", q->rank,
               result_rank_host(r, q->rank),
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

// ---- supervision: a case's ranks from the start to the last reaped process ---------------------------

typedef struct {
    const RunCtx *ctx;
    CaseResult *r;
    CaseLog *cl;
    Launch *L;
    FrMap *frs;            // [W] each rank's flight recorder
    Liveness live;         // how the ranks are watched: flight recorder, heartbeat file, or nothing
    HbWatch *hbs;          // [W] each rank's heartbeat file (live == LIVE_HEARTBEAT)
    char host[256];        // this host: a rank whose recorder names another is remote
    double t0;
    int all_done;          // every process the runner started has ended
    int stalled, interrupted;
    double stall_age;      // the stalled rank's heartbeat age when the watchdog saw it
    double seen_at;        // when the watchdog saw the stall (mono_s), 0 if it did not
    char why[256];         // what the watchdog saw
} Watch;

// How long rank k has been silent: its heartbeat's age, or the case's elapsed time before
// its recorder appeared.
static double rank_silence(const Watch *w, int k, double el) {
    const RankResult *rk = &w->r->ranks[k];
    return w->live == LIVE_HEARTBEAT || w->frs[k].h ? rk->heartbeat_age_s : el;
}

// One look at every rank: its recorder, whether it ended, whether it stalled. When the
// watchdog fires, a live rank silent for at least half of stall_s is stalled too: ranks
// stuck in one hang stop beating within moments of each other, and the poll that saw the
// first one past stall_s must not call the second "still beating" (the PyTorch matrix's
// divergent_unused lost "rank 0 stalled in phase backward" that way under load: 5.9 s of
// silence against stall_s 6). A healthy rank beats far more often than every stall_s / 2.
static void watch_ranks(Watch *w, double el) {
    CaseResult *r = w->r;
    const int multi = launch_is_multi(w->L->kind), W = r->n_ranks;
    const double stall = r->c->run.stall_s * w->ctx->timeout_scale;
    const uint64_t now = mono_ns();
    const int was_stalled = w->stalled;
    for (int k = 0; k < W; k++) {
        RankResult *rk = &r->ranks[k];
        FrMap *m = &w->frs[k];
        if (w->live == LIVE_HEARTBEAT) hb_snapshot(&w->hbs[k], rk, now);
        if (w->live == LIVE_FLIGHT_RECORDER && !m->h && fr_try_map(m, rk->fr_path)) {
            snprintf(rk->host, sizeof rk->host, "%.*s", FR_HOST_LEN, (const char *)m->h->host);
            rk->remote = rk->host[0] && strcmp(rk->host, w->host) != 0;
            if (rk->remote) case_log(w->cl, "rank %d runs on host %s (this is %s)", k, rk->host, w->host);
        }
        fr_snapshot(m, rk, now);
        if (multi && m->h && !rk->pid) rk->pid = m->h->pid;
        if (w->all_done || rk->exited) continue;
        // a rank of a multi-rank case has ended when its recorder says so or its process is
        // gone (a remote rank's pid means nothing here)
        const int record = m->h || (w->live == LIVE_HEARTBEAT && w->hbs[k].seq >= 0);
        if (multi && ((record && (rk->exited || rk->term_signal)) || (rk->pid > 0 && !rk->remote && !proc_alive(rk->pid)))) {
            rk->exited = 1;
            continue;
        }
        // a rank whose own collective watchdog fired (exit 4) while others still run:
        // the others hang with it; ask them all now rather than at their stall_s
        if (multi && rk->exited && rk->exit_code == NSA_EXIT_COMM_TIMEOUT && !w->stalled) {
            snprintf(w->why, sizeof w->why, "rank %d's collective did not complete within its --comm-timeout (exit 4)", k);
            w->stalled = 1;
            continue;
        }
        double age = rank_silence(w, k, el);
        if (age > stall) {
            rk->stalled = 1;
            if (!w->stalled) {
                snprintf(w->why, sizeof w->why, "no heartbeat from rank %d for %.1f s (stall_s %.0f)", k, age, stall);
                w->stall_age = age;
            }
            w->stalled = 1;
        }
    }
    if (w->stalled && !was_stalled && !w->all_done)
        for (int k = 0; k < W; k++) {
            RankResult *rk = &r->ranks[k];
            if (!rk->exited && !rk->stalled && rank_silence(w, k, el) >= 0.5 * stall) rk->stalled = 1;
        }
}

// Poll until every process ended, a rank stalled, the case ran out of time, or the user
// interrupted.
static void supervise(Watch *w) {
    CaseResult *r = w->r;
    const double timeout = r->c->run.timeout_s * w->ctx->timeout_scale;
    double last_progress = 0, last_line = 0;
    while (!w->all_done && !w->stalled && !w->interrupted) {
        struct timespec ts = {0, POLL_NS};
        nanosleep(&ts, NULL);
        const double el = mono_s() - w->t0;
        if (launch_poll(w->L)) {
            w->all_done = 1;
            case_log(w->cl, "%s ended: exit status %d", launch_kind_name(w->L->kind), launch_exit_status(w->L));
        }
        watch_ranks(w, el);
        if (!w->stalled && !w->all_done && el > timeout) {
            w->stalled = 1;
            snprintf(w->why, sizeof w->why, "case still running after %.1f s (timeout_s %.0f)", el, timeout);
            for (int k = 0; k < r->n_ranks; k++) r->ranks[k].stalled = !r->ranks[k].exited;
        }
        if (w->ctx->interrupted && *w->ctx->interrupted) w->interrupted = 1;
        if (el - last_progress > 0.25) {
            progress(w->ctx, r, el, &r->ranks[0], &last_line);
            last_progress = el;
        }
    }
}

// SIGKILL to every process of the case: the launchers' groups and every local rank
static void kill_everything(Watch *w) {
    launch_signal(w->L, SIGKILL);
    for (int k = 0; k < w->r->n_ranks; k++) {
        const RankResult *rk = &w->r->ranks[k];
        if (launch_is_multi(w->L->kind) && rk->pid > 0 && !rk->remote && proc_alive(rk->pid)) kill(rk->pid, SIGKILL);
    }
}

// Stalled: ask EVERY live rank for its stack (SIGUSR1) — the stalled ones and the ones
// waiting for them in a collective — then escalate on the launcher. A remote rank is
// asked through its launcher (mpirun and srun forward SIGUSR1 to every rank).
static void collect_stacks(Watch *w) {
    CaseResult *r = w->r;
    const int W = r->n_ranks;
    w->seen_at = mono_s();
    case_log(w->cl, "watchdog: %s", w->why);
    int remote = 0;
    for (int k = 0; k < W; k++) {
        RankResult *rk = &r->ranks[k];
        if (rk->exited || (rk->pid <= 0 && !rk->remote)) continue;
        case_log(w->cl, "rank %d %s in phase %s step %d layer %d op %s; SIGUSR1 to pid %d%s%s", k,
                 rk->stalled ? "stalled" : "still beating", rk->have_state ? rk->phase : "?", rk->step, rk->layer, rk->op,
                 rk->pid, rk->remote ? " on " : "", rk->remote ? rk->host : "");
        if (rk->remote) remote = 1;
        else kill(rk->pid, SIGUSR1);
        rk->signalled = 1;
    }
    if (remote && w->L->n == 1 && w->L->pid[0] > 0) {
        case_log(w->cl, "SIGUSR1 to %s (pid %d), which forwards it to the remote ranks", launch_kind_name(w->L->kind),
                 (int)w->L->pid[0]);
        kill(w->L->pid[0], SIGUSR1);
    }
    double grace = DUMP_GRACE_S * w->ctx->timeout_scale;
    grace = grace < DUMP_GRACE_MIN_S ? DUMP_GRACE_MIN_S : grace > DUMP_GRACE_S ? DUMP_GRACE_S : grace;
    if (launch_wait(w->L, grace)) w->all_done = 1;
    else {
        case_log(w->cl, "still running %.1f s after SIGUSR1; SIGTERM to %s", grace,
                 w->L->n == 1 ? "the process group" : "every rank's process group");
        launch_signal(w->L, SIGTERM);
        if (launch_wait(w->L, TERM_GRACE_S)) w->all_done = 1;
        else {
            case_log(w->cl, "SIGKILL to the process group%s and every rank", w->L->n == 1 ? "" : "s");
            kill_everything(w);
            launch_wait(w->L, 30);
            w->all_done = 1;
        }
    }
    for (int k = 0; k < W; k++) {
        RankResult *rk = &r->ranks[k];
        struct stat sst;
        rk->dumped = (rk->stalled || rk->signalled) && stat(rk->stack_path, &sst) == 0 && sst.st_size > 0;
        if (rk->signalled) case_log(w->cl, "rank %d: stack %s", k, rk->dumped ? "written" : "not written");
    }
}

// Nothing of the case survives it: the launchers' groups, every rank, orphans.
static void end_case(Watch *w) {
    if (w->interrupted && !w->all_done) {
        case_log(w->cl, "interrupted: stopping every rank");
        launch_signal(w->L, SIGTERM);
        if (!launch_wait(w->L, TERM_GRACE_S)) {
            launch_signal(w->L, SIGKILL);
            launch_wait(w->L, 30);
        }
        w->all_done = 1;
    }
    kill_everything(w);
    launch_wait(w->L, 30);
    proc_reap_orphans();
    int stray = proc_kill_children();   // orphans that left the group (setsid), now ours as subreaper
    if (stray)
        case_log(w->cl, "killed %d process%s the case left behind outside its process group", stray,
                 stray == 1 ? "" : "es");
}

// How each rank ended: its own wait status where the runner started it (the trainer
// alone, the env launcher's ranks), else its flight recorder.
static void harvest(Watch *w) {
    CaseResult *r = w->r;
    for (int k = 0; k < r->n_ranks; k++) {
        RankResult *rk = &r->ranks[k];
        fr_snapshot(&w->frs[k], rk, mono_ns());
        if (w->live == LIVE_HEARTBEAT) hb_snapshot(&w->hbs[k], rk, mono_ns());
        if (w->stalled) hang_read_wait(w->frs[k].h, rk);   // the collective it waits in, if any
        fr_unmap(&w->frs[k]);
        int st = 0;
        if (launch_rank_status(w->L, k, &st)) {
            rk->term_signal = WIFSIGNALED(st) ? WTERMSIG(st) : 0;
            rk->exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 0;
        }
        rk->exited = 1;   // the case is over
        if (rk->term_signal == SIGUSR1 && (rk->stalled || rk->signalled)) {   // its stall dump, not a crash
            rk->term_signal = 0;
            rk->exit_code = NSA_EXIT_STALL_DUMP;
        }
    }
    r->launcher_exit = launch_exit_status(w->L);
}

// ---- run one case: reproduce line, folders, launch, supervise, judge, checks, evidence ---------------------

typedef struct {
    const RunCtx *ctx;
    CaseResult *r;
    const ScenarioRun *sr;
    LaunchKind kind;
    int W;            // ranks
    const TrainerSpec *t;   // the trainer that runs it
    CaseLog cl;
    Launch L;
    Watch w;          // the supervision and what it saw (stalled, interrupted, why)
} CaseRun;

// The case's folder names, its step dump's path and the command that reproduces it:
// every option that shaped the case.
static void case_names(const RunCtx *ctx, CaseResult *r) {
    const Scenario *s = r->s;
    const Case *c = r->c;
    snprintf(r->dir, sizeof r->dir, "%s/%s/%s", ctx->report_dir, s->name, c->dir);
    if (!r->rel_dir[0])   // (set when planned: the report reads it while the case runs)
        snprintf(r->rel_dir, sizeof r->rel_dir, "%s/%s", s->name, c->dir);
    snprintf(r->trainer, sizeof r->trainer, "%s", runner_case_trainer(ctx, s, c)->name);
    if (checks_needs(s) & (NEED_DUMP | NEED_DUMP_ACTS)) snprintf(r->dump_path, sizeof r->dump_path, "%s/step1.safetensors", r->dir);
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

// SKIP when the case needs more GPUs than there are, a launcher that is missing, or a
// feature the trainer's --protocol-info does not list (harness/exec/trainer_caps.h).
// Returns 1 when skipped.
static int case_skipped(const RunCtx *ctx, CaseResult *r) {
    const Scenario *s = r->s;
    if (s->requires_gpus > ctx->gpus) {
        r->verdict = V_SKIP;
        set_summary(r, "needs %d GPU%s, found %d: runs where %d CUDA device%s usable", s->requires_gpus,
                    s->requires_gpus == 1 ? "" : "s", ctx->gpus, s->requires_gpus, s->requires_gpus == 1 ? " is" : "s are");
        return 1;
    }
    char why_not[512];
    if (launch_available(&r->c->run, why_not, sizeof why_not) ||
        trainer_caps_case_missing(trainer_caps_of(runner_case_trainer(ctx, s, r->c)), r->c, checks_needs(s),
                                  ctx->faults, ctx->n_faults, why_not, sizeof why_not)) {
        r->verdict = V_SKIP;
        set_summary(r, "%s", why_not);
        return 1;
    }
    return 0;
}

// ranks/ and stacks/, the case log, and each rank's paths. Returns 0, or -1 with ERROR.
static int case_folders(CaseRun *cr) {
    CaseResult *r = cr->r;
    char sub[2300];
    snprintf(sub, sizeof sub, "%s/ranks", r->dir);
    int mk = mkdir_p(sub);
    snprintf(sub, sizeof sub, "%s/stacks", r->dir);
    mk |= mkdir_p(sub);
    if (mk) {
        r->verdict = V_ERROR;
        set_summary(r, "cannot create the case folder: %s", strerror(errno));
        return -1;
    }
    snprintf(sub, sizeof sub, "%s/output.log", r->dir);
    cr->cl.f = fopen(sub, "w");
    cr->cl.t0 = mono_s();
    r->n_ranks = cr->W;
    r->ranks = xcalloc((size_t)cr->W, sizeof(RankResult));
    for (int k = 0; k < cr->W; k++) {
        RankResult *rk = &r->ranks[k];
        rk->rank = k;
        rk->layer = -1;
        snprintf(rk->log_path, sizeof rk->log_path, "%s/ranks/rank_%d.log", r->dir, k);
        snprintf(rk->stack_path, sizeof rk->stack_path, "%s/stacks/rank_%d.txt", r->dir, k);
        snprintf(rk->fr_path, sizeof rk->fr_path, "%s/ranks/rank_%d.fr", r->dir, k);
        snprintf(rk->hb_path, sizeof rk->hb_path, "%s/ranks/rank_%d.hb", r->dir, k);
    }
    return 0;
}

// What a case's trainer reads besides its arguments: CASE/config.json (the resolved config,
// common/config's canonical JSON) for a trainer given as a command or a case with shared
// start weights, and the shared start weights themselves (run.init_weights "shared"): the
// runner's own nsa-train writes its step-0 parameters with --write-init. 0, or -1 with ERROR.
static int case_inputs(CaseRun *cr) {
    CaseResult *r = cr->r;
    const Case *c = r->c;
    if (!cr->t->is_cmd && !c->run.init_shared) return 0;
    char path[2300];
    snprintf(path, sizeof path, "%s/config.json", r->dir);
    char *js = config_to_json(&c->cfg);
    Str body = {0};
    str_add(&body, js ? js : "");
    str_add(&body, "\n");
    const int wrote = js && write_file_atomic(path, str_c(&body), body.len) == 0;
    str_free(&body);
    free(js);
    if (!wrote) {
        r->verdict = V_ERROR;
        set_summary(r, "cannot write %s: %s", path, strerror(errno));
        return -1;
    }
    if (!c->run.init_shared) return 0;
    char init[2300];
    snprintf(init, sizeof init, "%s/init_weights.safetensors", r->dir);
    const char *own = cr->ctx->own_trainer ? cr->ctx->own_trainer : cr->ctx->trainer;
    char *const av[] = {(char *)own, "--config", path, "--write-init", init, NULL};
    Str cmd = {0};
    shell_join(&cmd, av);
    case_log(&cr->cl, "shared start weights: %s", str_c(&cmd));
    char *out = NULL;
    const int rc = proc_capture_all(av, 300 * cr->ctx->timeout_scale, &out);
    struct stat st;
    if (rc != 0 || stat(init, &st) != 0) {
        char first[300] = "";
        if (out) snprintf(first, sizeof first, "%.*s", (int)strcspn(out, "\n"), out);
        r->verdict = V_ERROR;
        set_summary(r, "run.init_weights \"shared\": `%s` failed (%s %d)%s%s", str_c(&cmd),
                    rc == -2 ? "timed out" : "status", rc, first[0] ? ": " : "", first);
        if (out && out[0]) add_code_block(&r->evidence, "its output", out, 15);
        free(out);
        str_free(&cmd);
        return -1;
    }
    free(out);
    str_free(&cmd);
    return 0;
}

// Cases side by side (harness/exec/run_cases.h): the case's GPUs and its ranks' share of the
// cores, unless the scenario's run.env sets them itself.
void runner_side_by_side_env(const RunCtx *ctx, const Case *c, StrList *env) {
    int has_dev = 0, has_omp = 0;
    for (int i = 0; i < c->run.n_env; i++) {
        has_dev |= !strncmp(c->run.env[i], "CUDA_VISIBLE_DEVICES=", 21);
        has_omp |= !strncmp(c->run.env[i], "OMP_NUM_THREADS=", 16);
    }
    char v[600];
    if (ctx->cuda_devices && ctx->cuda_devices[0] && !has_dev) {
        snprintf(v, sizeof v, "CUDA_VISIBLE_DEVICES=%s", ctx->cuda_devices);
        strlist_add(env, v);
    }
    if (ctx->threads > 0 && !has_omp) {
        snprintf(v, sizeof v, "OMP_NUM_THREADS=%d", ctx->threads);
        strlist_add(env, v);
    }
}

// Launch the ranks, supervise them to the end (or the stall, the timeout, the
// interrupt), stop what is left and harvest every rank's state.
static void case_launch_and_supervise(CaseRun *cr) {
    const RunCtx *ctx = cr->ctx;
    CaseResult *r = cr->r;
    const Case *c = r->c;
    CaseLog *cl = &cr->cl;
    Launch *L = &cr->L;
    // the environment: the scenario's, and NVLink multicast off (it can take a shared
    // host's GPUs down; see the device docs) unless the caller set it
    StrList env = {0};
    for (int i = 0; i < c->run.n_env; i++) strlist_add(&env, c->run.env[i]);
    if (!getenv("NCCL_NVLS_ENABLE")) strlist_add(&env, "NCCL_NVLS_ENABLE=0");
    runner_side_by_side_env(ctx, c, &env);
    StrList targv = {0};
    trainer_argv(ctx, r, cr->kind, 0, &targv);
    char err[600] = "";
    const int prepared = launch_prepare(L, &c->run, targv.v, r->dir, env.v, env.n, err, sizeof err) == 0;
    strlist_free(&targv);
    strlist_free(&env);
    write_case_env(ctx, r, L);
    const int W = cr->W;
    case_log(cl, "case %s/%s (profile %s), %d rank%s%s%s, launcher %s, timeout %.0f s, stall %.0f s (scale %g)",
             r->s->name, c->name, ctx->profile, W, W == 1 ? "" : "s", launch_is_multi(cr->kind) ? " over " : "",
             launch_is_multi(cr->kind) ? c->run.transport : "", launch_kind_name(cr->kind), c->run.timeout_s,
             c->run.stall_s, ctx->timeout_scale);
    for (int i = 0; i < c->run.n_env; i++) case_log(cl, "env %s", c->run.env[i]);
    {
        const TrainerCaps *tc = trainer_caps_of(cr->t);
        const Liveness lv = trainer_caps_liveness(tc);
        case_log(cl, "trainer %s: %s (protocol %d; liveness %s)", trainer_spec_label(cr->t), cr->t->display, tc->protocol,
                 lv == LIVE_FLIGHT_RECORDER ? "flight recorder" : lv == LIVE_HEARTBEAT ? "heartbeat file"
                                                                                        : "none: the case's age");
    }

    Watch *w = &cr->w;
    *w = (Watch){.ctx = ctx, .r = r, .cl = cl, .L = L, .frs = xcalloc((size_t)W, sizeof(FrMap)),
                 .live = trainer_caps_liveness(trainer_caps_of(cr->t)), .hbs = xcalloc((size_t)W, sizeof(HbWatch)),
                 .t0 = mono_s()};
    for (int k = 0; k < W; k++) {
        w->hbs[k] = (HbWatch){.seq = -1, .seen_ns = mono_ns()};
        r->ranks[k].heartbeat_file = w->live == LIVE_HEARTBEAT;
    }
    if (gethostname(w->host, sizeof w->host)) w->host[0] = 0;
    w->host[sizeof w->host - 1] = 0;
    if (!prepared || launch_exec(L, err, sizeof err)) {
        r->verdict = V_ERROR;
        set_summary(r, "%s", err);
        case_log(cl, "%s", err);
        w->all_done = 1;
    } else {
        for (int i = 0; i < L->n; i++)
            if (L->kind == LAUNCH_ENV) case_log(cl, "rank %d pid %d", i, (int)L->pid[i]);
            else case_log(cl, "%s pid %d", launch_kind_name(L->kind), (int)L->pid[i]);
        case_log(cl, "command: %s", str_c(&L->command));
        if (cr->kind == LAUNCH_TRAINER) r->ranks[0].pid = (int)L->pid[0];
        if (cr->kind == LAUNCH_ENV)
            for (int k = 0; k < W; k++) r->ranks[k].pid = (int)L->pid[k];
        supervise(w);
    }
    if (w->stalled && !w->all_done) collect_stacks(w);
    end_case(w);
    harvest(w);
    r->wall_s = mono_s() - w->t0;
    if (ctx->console && ctx->tty) fprintf(ctx->console, "\r\033[K");
}

// HANG: the stalled rank's place (or what the watchdog saw), the latency of the verdict,
// the rank table, the collective forensics and every rank's stack.
static void judge_hang(CaseRun *cr) {
    CaseResult *r = cr->r;
    const int W = cr->W;
    const Watch *w = &cr->w;
    r->verdict = V_HANG;
    const RankResult *rk = NULL;
    for (int k = 0; k < W && !rk; k++)
        if (r->ranks[k].stalled) rk = &r->ranks[k];
    if (rk && rk->have_state) {
        Str sm = {0};
        str_printf(&sm, "rank %d%s stalled at step %d, phase %s", rk->rank, result_rank_host(r, rk->rank), rk->step,
                   rk->phase);
        if (rk->layer >= 0) str_printf(&sm, ", layer %d", rk->layer);
        if (rk->op[0] && strcmp(rk->op, rk->phase)) str_printf(&sm, ", op %s", rk->op);
        if (rk->coll_enqueued || rk->coll_completed)
            str_printf(&sm, ", collective seq %lld started / %lld completed", rk->coll_started, rk->coll_completed);
        str_printf(&sm, "; no heartbeat for %.0f s", rk->heartbeat_age_s);
        set_summary(r, "%s", str_c(&sm));
        str_free(&sm);
    } else set_summary(r, "%s", w->why);
    // how long from the stall (the last heartbeat) and from the watchdog seeing it
    // to this verdict: the promise is stall_s + 5 s
    const double seen_to_verdict = w->seen_at > 0 ? mono_s() - w->seen_at : 0;
    json_object_set_new(r->facts, "hang_seen_to_verdict_s", json_real(seen_to_verdict));
    json_object_set_new(r->facts, "hang_stall_to_verdict_s", json_real(w->stall_age + seen_to_verdict));
    str_printf(&r->evidence, "- watchdog: %s; every live rank got SIGUSR1 (stack and flight recorder), then "
                             "SIGTERM/SIGKILL; verdict %.1f s after the watchdog saw the stall, %.1f s after the last "
                             "heartbeat\n", w->why, seen_to_verdict, w->stall_age + seen_to_verdict);
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
}

// A Python trainer that died of an exception (exit 1) or a signal: the last traceback of the
// rank's output into the evidence, its exception line after the summary.
static void python_traceback(CaseResult *r, const RankResult *bad) {
    if (bad->term_signal == 0 && bad->exit_code != NSA_EXIT_RUNTIME) return;
    char *tail = read_tail(bad->log_path, LOG_SEARCH_BYTES);
    Str block = {0};
    char exc[400];
    if (tail && pystack_traceback(tail, TRACEBACK_MAX_LINES, &block, exc, sizeof exc) == 0) {
        const size_t len = strlen(r->summary);
        snprintf(r->summary + len, sizeof r->summary - len, ": %s", exc);
        char title[1400];
        snprintf(title, sizeof title, "rank %d's last Python traceback (`%s/ranks/rank_%d.log`)", bad->rank, r->rel_dir,
                 bad->rank);
        add_code_block(&r->evidence, title, str_c(&block), TRACEBACK_MAX_LINES + 1);
    }
    str_free(&block);
    free(tail);
}

// CRASH (or ERROR for the trainer's usage and I/O exits): the first rank that died or
// exited with an unexpected code, its Python traceback if it printed one, its stack.
static void judge_crash(CaseResult *r, const RankResult *bad) {
    r->verdict = V_CRASH;
    if (bad->term_signal)
        set_summary(r, "rank %d killed by %s (signal %d)", bad->rank, proc_signal_name(bad->term_signal),
                    bad->term_signal);
    else if (bad->exit_code == NSA_EXIT_USAGE) {
        r->verdict = V_ERROR;
        set_summary(r, "the trainer rejected its arguments (exit 2): see ranks/rank_%d.log", bad->rank);
    } else if (bad->exit_code == NSA_EXIT_IO) {   // an artifact could not be written: not a defect of the model
        r->verdict = V_ERROR;
        io_error_summary(r, bad);
    } else
        set_summary(r, "rank %d exited with code %d%s", bad->rank, bad->exit_code,
                    bad->exit_code == NSA_EXIT_RUNTIME ? " (runtime failure)" : "");
    rank_table(&r->evidence, r);
    if (r->verdict == V_CRASH) python_traceback(r, bad);
    char *stack = read_file(bad->stack_path, NULL);
    char title[1400];
    snprintf(title, sizeof title, "rank %d stack (`%s/stacks/rank_%d.txt`)", bad->rank, r->rel_dir, bad->rank);
    if (stack && stack[0]) add_code_block(&r->evidence, title, stack, 60);
    free(stack);
}

// The verdict from how the ranks ended: ERROR (could not start, the launcher failed before
// any rank, interrupted), HANG (the trainer's collective watchdog, or the runner's), CRASH;
// otherwise it stays PASS and the checks decide.
static void judge_ranks(CaseRun *cr) {
    CaseResult *r = cr->r;
    const Watch *w = &cr->w;
    const RankResult *bad = NULL, *comm_timeout = NULL;
    int any_recorder = 0;
    for (int k = 0; k < cr->W; k++) {
        const RankResult *q = &r->ranks[k];
        any_recorder |= q->have_state;
        if (q->exit_code == NSA_EXIT_COMM_TIMEOUT && !comm_timeout) comm_timeout = q;
        if (!bad && (q->term_signal ||
                     (q->exit_code != NSA_EXIT_OK && q->exit_code != NSA_EXIT_ANOMALY && q->exit_code != NSA_EXIT_COMM_TIMEOUT &&
                      q->exit_code != NSA_EXIT_DDP_CONTRACT && !q->stalled)))
            bad = q;
    }
    if (r->verdict == V_ERROR) {
        // could not start
    } else if ((cr->kind == LAUNCH_MPIRUN || cr->kind == LAUNCH_SRUN) && !any_recorder && !w->stalled &&
               !w->interrupted && r->launcher_exit != 0) {
        r->verdict = V_ERROR;
        set_summary(r, "%s exited %d before any rank started: see launcher.log", launch_kind_name(cr->kind),
                    r->launcher_exit);
        char *tail = read_tail(cr->L.log, LOG_TAIL_BYTES);
        if (tail && tail[0]) add_code_block(&r->evidence, "launcher.log, last lines", tail, 20);
        free(tail);
    } else if (!w->stalled && !w->interrupted && comm_timeout && !bad) {
        // the trainer's own watchdog: a collective did not complete within --comm-timeout
        r->verdict = V_HANG;
        const RankResult *q = comm_timeout;
        set_summary(r, "rank %d: collective seq %lld did not complete (collective timeout, exit 4)", q->rank,
                    q->coll_started ? q->coll_started : q->coll_enqueued);
        str_add(&r->evidence, "- the trainer's collective watchdog fired (exit 4) before the runner's\n");
        rank_table(&r->evidence, r);
    } else if (w->interrupted) {
        r->verdict = V_ERROR;
        set_summary(r, "interrupted by the user after %.1f s", r->wall_s);
        str_printf(&r->evidence, "- the run was interrupted (SIGINT/SIGTERM) while this case ran; its ranks were stopped\n");
    } else if (w->stalled) {
        judge_hang(cr);
    } else if (bad) {
        judge_crash(r, bad);
    }
}

// Exit 5: the data-parallel layer found its contract broken (static_graph: the used
// parameters differ across ranks or steps): a failed check, from the first such rank's
// [DDP] lines. Returns 1 when a rank exited so.
static int ddp_stop_finding(CaseResult *r) {
    for (int k = 0; k < r->n_ranks; k++) {
        if (r->ranks[k].exit_code != NSA_EXIT_DDP_CONTRACT) continue;
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
        return 1;
    }
    return 0;
}

// Does text (lines ending in '\n') hold the line `line`?
static int has_line(const char *text, const char *line) {
    const size_t len = strlen(line);
    for (const char *p = strstr(text, line); p; p = strstr(p + 1, line))
        if ((p == text || p[-1] == '\n') && p[len] == '\n') return 1;
    return 0;
}

// The `[nsa_probe] ...` lines of the ranks' output, each once, into lines: a map trainer's
// probe says there what it could not do ("[nsa_probe] FAIL: the script never called
// backward() ..."). The first FAIL line (else the first line) into first. Returns how many.
static int probe_lines(const CaseResult *r, Str *lines, char *first, size_t n) {
    int count = 0;
    first[0] = '\0';
    for (int k = 0; k < r->n_ranks; k++) {
        char *tail = read_tail(r->ranks[k].log_path, LOG_SEARCH_BYTES);
        char *save = NULL;
        for (char *ln = tail ? strtok_r(tail, "\n", &save) : NULL; ln; ln = strtok_r(NULL, "\n", &save)) {
            char *tag = strstr(ln, "[nsa_probe]");
            if (!tag || has_line(str_c(lines), tag)) continue;
            str_printf(lines, "%s\n", tag);
            if (!first[0] || (strstr(tag, "FAIL") && !strstr(first, "FAIL"))) snprintf(first, n, "%s", tag);
            count++;
        }
        free(tail);
    }
    return count;
}

// A case whose trainer exited 0 without metrics.jsonl (the protocol's one required file): when
// the probe said why (its [nsa_probe] lines), a failed finding quotes it.
static void no_metrics_finding(CaseResult *r) {
    if (r->metrics && json_array_size(r->metrics)) return;
    Str lines = {0};
    char first[600];
    if (probe_lines(r, &lines, first, sizeof first)) {
        Finding *f = result_finding(r, "metrics", 0, "the trainer exited 0 and wrote no metrics: %s", first);
        add_code_block(&f->details, "the probe's lines", str_c(&lines), 20);
    }
    str_free(&lines);
}

// The ranks finished (exit 0, or 3: a non-finite value was localised, or 5): evaluate the
// checks, then the verdict and summary from the findings.
static void evaluate_checks(CaseRun *cr) {
    CaseResult *r = cr->r;
    const Scenario *s = r->s;
    int any_anomaly = 0;
    for (int k = 0; k < cr->W; k++) any_anomaly |= r->ranks[k].exit_code == NSA_EXIT_ANOMALY;
    const int ddp_stop = ddp_stop_finding(r);
    if (!any_anomaly && !ddp_stop) no_metrics_finding(r);
    int has_finite = 0;
    for (int i = 0; i < s->n_checks; i++) {
        const CheckDef *def = check_find(s->checks[i].kind);
        has_finite |= !strcmp(def->name, "finite");
        if ((any_anomaly || ddp_stop) && strcmp(def->name, "finite")) continue;   // the run stopped early: partial artifacts
        def->evaluate(s->checks[i].params, r, cr->sr);
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

// Evidence of a case that did not pass: the last lines of the log of the rank that
// stalled, died or failed first (rank 0 when none did).
static void add_lead_log(CaseResult *r) {
    int lead = -1;
    for (int k = 0; k < r->n_ranks && lead < 0; k++)
        if (r->ranks[k].stalled || r->ranks[k].term_signal || r->ranks[k].exit_code) lead = k;
    if (lead < 0) lead = 0;
    char *tail = read_tail(r->ranks[lead].log_path, LOG_TAIL_BYTES);
    char title[1400];
    snprintf(title, sizeof title, "rank %d log, last lines (`%s/ranks/rank_%d.log`)", lead, r->rel_dir, lead);
    if (tail && tail[0]) add_code_block(&r->evidence, title, tail, 15);
    free(tail);
}

void run_case(const RunCtx *ctx, CaseResult *r, const ScenarioRun *sr) {
    r->ctx = ctx;
    case_names(ctx, r);
    if (case_skipped(ctx, r)) return;
    CaseRun cr = {.ctx = ctx, .r = r, .sr = sr, .kind = launch_kind(&r->c->run), .W = r->c->run.world_size,
                  .t = runner_case_trainer(ctx, r->s, r->c)};
    if (case_folders(&cr)) return;
    if (case_inputs(&cr)) {
        case_log(&cr.cl, "verdict %s: %s", VERDICT_NAMES[r->verdict], r->summary);
        if (cr.cl.f) fclose(cr.cl.f);
        return;
    }
    case_launch_and_supervise(&cr);
    read_artifacts(r);
    judge_ranks(&cr);
    if (r->verdict == V_PASS) evaluate_checks(&cr);
    if (r->verdict != V_PASS && r->verdict != V_SKIP) add_lead_log(r);
    case_log(&cr.cl, "verdict %s: %s", VERDICT_NAMES[r->verdict], r->summary);
    if (cr.cl.f) fclose(cr.cl.f);
    launch_free(&cr.L);
    free(cr.w.frs);
    free(cr.w.hbs);
}
