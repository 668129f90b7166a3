// trainer/train.c — the training loop: data -> forward/backward (gradient
// accumulation) -> global-norm clip -> AdamW, with metrics, checkpoints, the
// step-1 dump and anomaly localisation.
//
// Anomaly localisation costs nothing while training is healthy: only the loss and
// the gradient norm (computed anyway) are checked. When either is non-finite the
// step is replayed with every op's output checked (model.check_finite); training
// is deterministic, so the replay meets the same values and names the first
// non-finite tensor (layer, branch, op, position).
//
// Diagnostics (docs/diagnostics.md), each off by default and a pointer test when
// off: the flight recorder (phase events here, per-layer events through the
// model's diagnostics hook), the gradient-arrival trace (the model's grad_ready
// hook), gate statistics (the same diagnostics hook), and fault injection
// (faults_on_phase on entering each phase, model hooks in model.c).
//
// Data parallel (docs/ddp.md, trainer/ddp.c) when opts->world has a transport: the
// loss scale holds 1/world and the bucket allreduces SUM, so every rank ends the
// backward with the mean gradient over all ranks' tokens; the reported loss is the
// mean over ranks; rank 0 alone writes metrics.jsonl, anomaly.json, the --dump-step
// file and checkpoints; every rank writes its traces (grad_trace.jsonl,
// buckets.jsonl, rank_times.jsonl). The weights stay bitwise identical on every
// rank, which the run checks at its end.
//
// Artifacts: a file that cannot be written is io_error (trainer/ioerr.h:
// one [IO-ERROR] line) and the run ends with exit 6 at the end of that step;
// --save/--dump-step paths that can never be written and a --resume checkpoint of
// another config are exit 2 before any step (check_output_file, check_resume_config;
// docs/diagnostics.md, "Checkpoints").
#define _POSIX_C_SOURCE 200809L   // clock_gettime, mkdir
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "trainer/actdump.h"
#include "trainer/checkpoint.h"
#include "trainer/data.h"
#include "trainer/ddp.h"
#include "common/digest.h"
#include "trainer/faults.h"
#include "trainer/flightrec.h"
#include "trainer/flops.h"
#include "trainer/gatestats.h"
#include "trainer/ioerr.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "common/log.h"
#include "common/safetensors.h"
#include "trainer/timing.h"
#include "trainer/trace.h"
#include "trainer/train.h"
#include "common/util.h"

#ifdef NSA_HAVE_CUDA
int nsa_cuda_ddp_device_count(void);   // kernels/cuda/cuda_ddp_support.cu
#endif

// Resident set size from /proc/self/statm (0 if unreadable).
static int64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long long size = 0, res = 0;
    int n = fscanf(f, "%lld %lld", &size, &res);
    fclose(f);
    return n == 2 ? (int64_t)res * 4096 : 0;   // statm counts 4 KiB pages on Linux
}

// ---- diagnostics wiring ------------------------------------------------------------------

typedef struct {
    int64_t step;          // current optimizer step
    GateStats *gs;         // --gate-stats, or NULL
    ActDump *acts;         // --dump-acts, during the step-1 dump's forward only, else NULL
    const Faults *faults;  // --fault, or NULL
} TrainDiag;

// The model's diagnostics hook: flight-recorder events per layer, gate statistics.
// In sequential prefill the per-token calls only refresh the state and heartbeat,
// so the ring keeps whole steps rather than 128 copies of one layer.
static void on_model_event(void *ctx, Model *m, int ev, int L, int t) {
    TrainDiag *d = ctx;
    switch (ev) {
    case MODEL_EV_LAYER_FWD:
        if (t == 0) flightrec_event(FR_PHASE_FORWARD, FR_KIND_BEGIN, d->step, L, "layer_fwd");
        else flightrec_state(FR_PHASE_FORWARD, d->step, L, "layer_fwd");
        break;
    case MODEL_EV_LAYER_FWD_DONE:
        if (d->gs) gatestats_layer(d->gs, m, L);
        if (d->acts) actdump_layer(d->acts, m, L);
        break;
    case MODEL_EV_HEAD:
        if (t == 0) flightrec_event(FR_PHASE_FORWARD, FR_KIND_BEGIN, d->step, -1, "head");
        else flightrec_state(FR_PHASE_FORWARD, d->step, -1, "head");
        break;
    case MODEL_EV_BWD_HEAD: flightrec_event(FR_PHASE_BACKWARD, FR_KIND_BEGIN, d->step, -1, "head_bwd"); break;
    case MODEL_EV_LAYER_RECOMPUTE: flightrec_event(FR_PHASE_BACKWARD, FR_KIND_BEGIN, d->step, L, "recompute"); break;
    case MODEL_EV_LAYER_BWD: flightrec_event(FR_PHASE_BACKWARD, FR_KIND_BEGIN, d->step, L, "layer_bwd"); break;
    case MODEL_EV_EMBED_BWD: flightrec_event(FR_PHASE_BACKWARD, FR_KIND_BEGIN, d->step, -1, "embedding_bwd"); break;
    default: break;
    }
}

// The model's grad_ready hook: the gradient-arrival trace, then the DDP buckets.
typedef struct {
    GradTrace *trace;
    Ddp *ddp;
} ReadyHooks;

static void on_grad_ready(void *ctx, int id) {
    ReadyHooks *h = ctx;
    if (h->trace) gradtrace_ready(h->trace, id);
    if (h->ddp) ddp_grad_ready(h->ddp, id);
}

// Entering a phase of the step: record it, then let the hang/crash faults act
// (a hung rank's recorder therefore shows the phase it hung in).
static void enter_phase(const TrainDiag *d, int phase, const char *op) {
    flightrec_event(phase, FR_KIND_BEGIN, d->step, -1, op);
    if (d->faults) faults_on_phase(d->faults, phase, d->step);
}

// One metrics.jsonl record, written with write(2) on the file's descriptor (no
// stdio buffer in between: the error is the write's own). A record that cannot be
// written whole is cut off again (ftruncate to the previous end; rank 0 is the
// file's only writer), so the file always ends with a whole line; the failure is
// io_error (the [IO-ERROR] line; the run ends with exit 6). Returns 0 or -1.
__attribute__((format(printf, 3, 4)))
static int metrics_record(int fd, const char *path, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) { io_error(path, EOVERFLOW); return -1; }
    struct stat sb;
    off_t end = fstat(fd, &sb) == 0 ? sb.st_size : -1;
    size_t done = 0;
    while (done < (size_t)n) {
        ssize_t k = write(fd, line + done, (size_t)n - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            int e = k < 0 ? errno : EIO;
            if (end >= 0 && S_ISREG(sb.st_mode) && ftruncate(fd, end)) { /* best effort */ }
            io_error(path, e);
            return -1;
        }
        done += (size_t)k;
    }
    return 0;
}

static int g_rank = 0;   // for the anomaly file name (rank 0: anomaly.json)

static void write_anomaly(const char *out_dir, int64_t step, int micro, const Anomaly *a) {
    fprintf(stderr,
            "[ANOMALY] step=%" PRId64 " micro=%d phase=%s tensor=%s layer=%d branch=%s op=%s b=%d t=%d col=%d value=%g\n",
            step, micro, a->phase, a->tensor, a->layer, a->branch[0] ? a->branch : "-", a->op, a->b, a->t,
            a->col, a->value);
    char path[1100];
    if (g_rank == 0) snprintf(path, sizeof path, "%s/anomaly.json", out_dir);
    else snprintf(path, sizeof path, "%s/anomaly.rank%d.json", out_dir, g_rank);
    // an artifact: a failure is [IO-ERROR] and exit 6 (trainer/ioerr.h)
    FILE *f = fopen(path, "w");
    if (!f) { io_error(path, errno); return; }
    int bad = fprintf(f,
            "{\"step\": %" PRId64 ", \"micro_batch\": %d, \"phase\": \"%s\", \"tensor\": \"%s\", \"layer\": %d, "
            "\"branch\": \"%s\", \"op\": \"%s\", \"position\": {\"b\": %d, \"t\": %d, \"col\": %d}, "
            "\"value\": \"%g\"}\n",
            step, micro, a->phase, a->tensor, a->layer, a->branch, a->op, a->b, a->t, a->col, a->value) < 0;
    bad |= fflush(f) != 0;
    int e = errno;
    if (fclose(f) != 0 && !bad) { bad = 1; e = errno; }
    if (bad) io_error(path, e);
}

// Replay the step (same data position, unchanged weights) with every op checked.
static void localise_anomaly(Model *m, DataSource *ds, DataPos pos, int32_t *in, int32_t *tg,
                             double dscale, int64_t step, const char *out_dir) {
    data_set_pos(ds, pos);
    m->check_finite = 1;
    model_zero_grad(m);
    for (int k = 0; k < m->cfg.grad_accum; k++) {
        data_next(ds, in, tg);
        model_forward(m, in, tg, dscale);
        if (!m->anomaly.found) model_backward(m);
        if (m->anomaly.found) { write_anomaly(out_dir, step, k, &m->anomaly); return; }
    }
    Anomaly a = {0};
    a.layer = -1;
    snprintf(a.tensor, sizeof a.tensor, "unlocalised (replay stayed finite)");
    snprintf(a.phase, sizeof a.phase, "unknown");
    write_anomaly(out_dir, step, -1, &a);
}

// The step-1 dump. logits_host holds the logits as the model's own view (F64 on the fp64
// backend, else F32: 16-bit activations widened exactly, actdump_to_host), or NULL when
// --dump-tensors leaves them out. acts: the forward's activations (--dump-acts) or NULL.
// The logits of the last forward as the dump stores them (see dump_step); free().
static void *logits_to_host(const Model *m, int64_t n) {
    if (m->be->act_bytes == 4 || m->be->act_bytes == 8) {
        void *h = xmalloc((size_t)n * (size_t)m->be->act_bytes);
        m->be->to_host(h, m->logits, (size_t)n * (size_t)m->be->act_bytes);
        return h;
    }
    return actdump_to_host(m, m->logits, n);
}

// select: --dump-tensors (comma-separated globs; NULL: every tensor). inputs, targets and loss
// are always written, the metadata too; a gradient not selected is not written, and none is
// copied from the device when no gradient is selected (the weights are, for their digests).
static int dump_step(const char *path, Model *m, const int32_t *in, const int32_t *tg, double loss,
                     const double *loss_store, const void *logits_host, const ActDump *acts, const char *select) {
    StFile f;
    st_init(&f);
    int64_t bt[2] = {m->B, m->T}, btv[3] = {m->B, m->T, m->V};
    StDtype adt = m->be->act_bytes == 8 ? ST_F64 : ST_F32;
    StDtype pdt = m->be->param_bytes == 8 ? ST_F64 : ST_F32;
    st_add(&f, "inputs", ST_I32, 2, bt, in);
    st_add(&f, "targets", ST_I32, 2, bt, tg);
    if (logits_host) st_add(&f, "logits", adt, 3, btv, logits_host);
    st_add(&f, "loss", ST_F64, 0, NULL, loss_store);
    if (acts) actdump_add(acts, &f);
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    char (*names)[96] = xmalloc(sizeof(*names) * (size_t)m->n_params);
    int any_grad = 0;
    for (int i = 0; i < m->n_params; i++) {
        snprintf(names[i], sizeof names[i], "grads.%s", m->params[i].name);
        any_grad |= glob_list_match(select, names[i]);
    }
    char *hg = NULL;
    if (any_grad) {
        hg = xmalloc(bytes);
        m->be->to_host(hg, m->grad_mem, bytes);
    }
    for (int i = 0; i < m->n_params && hg; i++)
        if (glob_list_match(select, names[i]))
            st_add(&f, names[i], pdt, m->params[i].ndim, m->params[i].shape, hg + m->params[i].offset * m->be->param_bytes);
    // the weights the step was computed from, per parameter (digest64 of the raw
    // bytes): a regression report tells a changed initialisation from a changed forward
    char *hp = xmalloc(bytes);
    m->be->to_host(hp, m->param_mem, bytes);
    size_t plen = 16 + (size_t)m->n_params * (96 + 24);
    char *pdig = xmalloc(plen), *pp = pdig;
    pp += snprintf(pp, plen, "{");
    for (int i = 0; i < m->n_params; i++) {
        char hex[17];
        digest64_hex(digest64(hp + m->params[i].offset * m->be->param_bytes,
                              (size_t)m->params[i].numel * m->be->param_bytes, 0), hex);
        pp += snprintf(pp, plen - (size_t)(pp - pdig), "%s\"%s\": \"%s\"", i ? ", " : "", m->params[i].name, hex);
    }
    snprintf(pp, plen - (size_t)(pp - pdig), "}");
    st_add_meta(&f, "param_digests", pdig);
    char *cfg = config_to_json(&m->cfg), lbuf[64];
    st_add_meta(&f, "config", cfg);
    st_add_meta(&f, "backend", m->be->name);
    st_add_meta(&f, "precision", m->cfg.precision);
    snprintf(lbuf, sizeof lbuf, "%.17g", loss);
    st_add_meta(&f, "loss", lbuf);
    char err[512];
    int rc = st_write(&f, path, err, sizeof err);
    if (rc) {   // errno != 0: the file could not be written: [IO-ERROR], exit 6
        int e = errno;
        nsa_log(LOG_ERROR, "--dump-step: %s", err);
        if (e) io_error(path, e);
    }
    st_free(&f);
    free(cfg); free(hg); free(names); free(hp); free(pdig);
    return rc;
}

static int train_run_inner(const TrainOpts *opts);


int train_run(const TrainOpts *opts) {
    io_error_reset();
    if (opts->flight_recorder) {
        // the recorder is an artifact (the runner's watchdog reads it): a failure to
        // create or reserve it is [IO-ERROR] and exit 6, before anything runs
        char err[1200];
        if (mkdir_p_parent(opts->flight_recorder)) {
            int e = errno;
            nsa_log(LOG_ERROR, "--flight-recorder %s: cannot create its directory: %s", opts->flight_recorder,
                    strerror(e));
            io_error(opts->flight_recorder, e);
            return NSA_EXIT_IO;
        }
        if (flightrec_open(opts->flight_recorder, opts->rank, err, sizeof err)) {
            int e = errno;
            nsa_log(LOG_ERROR, "--flight-recorder %s", err);
            io_error(opts->flight_recorder, e);
            return NSA_EXIT_IO;
        }
    }
    int rc = train_run_inner(opts);
    // NSA_TRAIN_TIMING=1: the line on stderr, OUT/timing.json (not for --write-init, which has no
    // run folder, nor where the folder was never made)
    const char *tdir = opts->out_dir ? opts->out_dir : ".";
    timing_report(opts->write_init || !is_dir(tdir) ? NULL : tdir, opts->rank);
    // an artifact that could not be written ends the run with exit 6, whatever else
    // happened: its [IO-ERROR] line is already on stderr (trainer/ioerr.h)
    if (io_error_seen()) rc = NSA_EXIT_IO;
    flightrec_finish(rc);   // exited = 1 + the code; no-op without a recorder
    return rc;
}

// --save / --dump-step FILE: checked before training, so that a path that can
// never be written fails in a second, not after the run (exit 2 naming the flag):
// FILE must not be a directory, and its directory must exist and be writable
// (safetensors files are written as FILE.tmp there, then renamed over FILE).
static int check_output_file(const char *flag, const char *path) {
    struct stat sb;
    if (!path[0]) {
        nsa_log(LOG_ERROR, "%s: the path is empty", flag);
        return -1;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        nsa_log(LOG_ERROR, "%s %s: is a directory (give a file name)", flag, path);
        return -1;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    if (stat(dir, &sb) != 0) {
        nsa_log(LOG_ERROR, "%s %s: directory %s %s", flag, path, dir,
                errno == ENOENT ? "does not exist (create it first)" : strerror(errno));
        return -1;
    }
    if (!S_ISDIR(sb.st_mode)) {
        nsa_log(LOG_ERROR, "%s %s: %s is not a directory", flag, path, dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        nsa_log(LOG_ERROR, "%s %s: directory %s is not writable: %s", flag, path, dir, strerror(errno));
        return -1;
    }
    return 0;
}

// --resume: the checkpoint's config against this run's, key by key. Keys that
// differ are exit 2 unless --allow-config-change (then a warning); "train.steps"
// and "name" may differ (checkpoint_config_diff) and get a note.
static int check_resume_config(const TrainOpts *opts, const CkptInfo *ck) {
    const NsaConfig *cfg = &opts->cfg;
    if (!strcmp(ck->digest, cfg->digest)) return 0;
    const char *path = opts->resume;
    char *run = config_to_json(cfg);
    enum { MAXD = 64 };
    CkptConfigDiff d[MAXD];
    int nd = ck->config ? checkpoint_config_diff(ck->config, run, d, MAXD) : -1;
    free(run);
    if (nd < 0) {   // nothing to compare key by key: the digests are all there is
        if (!ck->digest[0]) {
            nsa_log(LOG_NOTE, "--resume %s: the checkpoint records no config; not compared", path);
            return 0;
        }
        nsa_log(opts->allow_config_change ? LOG_WARN : LOG_ERROR, "--resume %s: the checkpoint was written with "
                "config digest %s, this run's is %s (it holds no config to compare key by key)", path, ck->digest,
                cfg->digest);
        if (opts->allow_config_change) return 0;
        nsa_log(LOG_ERROR, "resume it with the config it was written with, or pass --allow-config-change");
        return -1;
    }
    int shown = nd < MAXD ? nd : MAXD, strict = 0;
    for (int i = 0; i < shown; i++) strict += !d[i].allowed;
    strict += nd - shown;   // beyond the table: counted as strict
    for (int i = 0; i < shown; i++) {
        if (!d[i].allowed) continue;
        if (!strcmp(d[i].key, "train.steps"))
            nsa_log(LOG_NOTE, "--resume %s: train.steps: checkpoint %s, this run %s (allowed: the LR "
                    "schedule now spans %s steps)", path, d[i].ckpt, d[i].run, d[i].run);
        else
            nsa_log(LOG_NOTE, "--resume %s: %s: checkpoint %s, this run %s (allowed: it changes nothing "
                    "that is computed)", path, d[i].key, d[i].ckpt, d[i].run);
    }
    if (!strict) return 0;
    nsa_log(opts->allow_config_change ? LOG_WARN : LOG_ERROR, "--resume %s: the checkpoint was written with another "
            "config (digest %s, this run's %s)%s; %d key%s differ%s:", path, ck->digest,
            cfg->digest, opts->allow_config_change ? ", resumed anyway (--allow-config-change)" : "", strict,
            strict == 1 ? "" : "s", strict == 1 ? "s" : "");
    for (int i = 0; i < shown; i++)
        if (!d[i].allowed) fprintf(stderr, "  %s: checkpoint %s, this run %s\n", d[i].key, d[i].ckpt, d[i].run);
    if (nd > shown) fprintf(stderr, "  ... and %d more\n", nd - shown);
    if (opts->allow_config_change) return 0;
    nsa_log(LOG_ERROR, "resume it with the config it was written with, or pass --allow-config-change to "
            "resume it with this one");
    return -1;
}

// ---- the run: setup, the step loop's stages, finish ---------------------------------------------------

// One run's state, as its stages pass it on.
typedef struct {
    const TrainOpts *opts;
    const NsaConfig *cfg;
    const char *out_dir;
    const CommWorld *cw;       // data parallel: a transport, any world size (1 included); else NULL
    int world, rank, data_rank;
    int B, T;
    const Backend *be;
    Faults *faults;            // the active faults, or NULL
    Model m;
    Optim opt;
    TrainDiag diag;
    GradTrace trace;
    GateStats gstats;
    ReadyHooks hooks;
    Ddp *ddp;
    int tracing;
    DataSource *ds;
    int32_t *in, *tg;          // [B*T] one micro-batch's inputs and targets
    int metrics;               // OUT/metrics.jsonl (rank 0), written by metrics_record; -1 none
    char path[1100];           // its path
    double dscale;             // the mean over every token of the optimizer step on every rank
    double flops_step;         // one rank's model FLOPs per step
    int64_t step0, last;       // steps (step0, last] are trained
    double t_fwd, t_bwd;       // this step's host time in forward and backward (NSA_TRAIN_TIMING)
    char err[1024];
} Run;

enum { GO_ON = -1 };   // a stage's "not done yet": the run continues; any other value is the exit code

// Before the model: the output folder, the output files, the GPU of this rank, the
// backend, the faults against the config. Returns GO_ON or the exit code.
static int run_prepare(Run *R) {
    const NsaConfig *cfg = R->cfg;
    if (R->opts->write_init) {   // writes one file, no run folder
        if (check_output_file("--write-init", R->opts->write_init)) return NSA_EXIT_USAGE;
    } else if (mkdir_p(R->out_dir)) {   // where the artifacts go: [IO-ERROR], exit 6
        int e = errno;
        nsa_log(LOG_ERROR, "cannot create %s: %s", R->out_dir, strerror(e));
        io_error(R->out_dir, e);
        return NSA_EXIT_IO;
    }
    if ((R->opts->save && check_output_file("--save", R->opts->save)) ||
        (R->opts->dump_step && check_output_file("--dump-step", R->opts->dump_step)))
        return NSA_EXIT_USAGE;
#ifdef NSA_HAVE_CUDA
    // one GPU per rank: device = local rank (modulo the visible devices), unless
    // NSA_CUDA_DEVICE says otherwise; must happen before the backend initialises
    const CommWorld *cw = R->cw;
    if (cw && !strcmp(cfg->backend, "cuda") && !getenv("NSA_CUDA_DEVICE")) {
        int ndev = nsa_cuda_ddp_device_count();
        if (ndev > 0) {
            char dv[16];
            snprintf(dv, sizeof dv, "%d", cw->local_rank % ndev);
            setenv("NSA_CUDA_DEVICE", dv, 1);
            if (cw->local_size > ndev)
                nsa_log(LOG_WARN, "rank %d: %d ranks on this node share %d visible GPU%s (NCCL needs "
                        "one GPU per rank)", R->rank, cw->local_size, ndev, ndev == 1 ? "" : "s");
        }
    }
#endif
    const char *why = NULL;
    timing_mark(TM_CONFIG);
    R->be = backend_get(cfg->backend, cfg->precision, &why);
    timing_mark(TM_BACKEND);
    if (!R->be) { nsa_log(LOG_ERROR, "backend '%s': %s", cfg->backend, why); return NSA_EXIT_USAGE; }
    timing_backend(R->be);
    R->faults = R->opts->faults && R->opts->faults->n_active ? R->opts->faults : NULL;
    if (R->faults && faults_check_config(R->faults, cfg, R->err, sizeof R->err)) {
        nsa_log(LOG_ERROR, "%s", R->err);
        return NSA_EXIT_USAGE;
    }
    return GO_ON;
}

// The model (weights initialised, faults bound) and its optimizer. Returns GO_ON or
// the exit code (with whatever was built freed).
static int run_build_model(Run *R) {
    Model *m = &R->m;
    int mrc = model_init(m, R->cfg, R->be, R->err, sizeof R->err);
    if (mrc) {
        nsa_log(LOG_ERROR, "%s", R->err);
        return mrc == -2 ? NSA_EXIT_USAGE : NSA_EXIT_RUNTIME;
    }
    m->keep_logits = R->opts->dump_step != NULL;
    if (model_alloc_acts(m, R->B, R->T, R->err, sizeof R->err)) {
        nsa_log(LOG_ERROR, "%s", R->err);
        model_free(m);
        return NSA_EXIT_RUNTIME;
    }
    Faults *faults = R->faults;
    if (faults) {
        if (faults_bind(faults, m, R->rank, R->err, sizeof R->err)) {
            nsa_log(LOG_ERROR, "%s", R->err);
            model_free(m);
            return NSA_EXIT_USAGE;
        }
        nsa_log(LOG_STATUS, "rank %d: FAULT INJECTION ACTIVE: %s", R->rank, faults->desc);
        if (faults->divergent && faults->divergent_rank == R->rank)
            nsa_log(LOG_STATUS, "rank %d: [FAULT] divergent_unused: %s gets no gradient on this rank", R->rank,
                    faults->divergent_param);
    }
    timing_mark(TM_MODEL);
    model_init_weights(m, R->cfg->seed);
    if (faults) faults_after_init_weights(faults, m);   // gate_zero_init
    // --init-weights: every parameter from the file instead, exactly (a fault on the seeded
    // init, gate_zero_init, has no effect, as under --resume); a file that does not fit this
    // config is a usage error: exit 2 naming the tensor
    if (R->opts->init_weights && checkpoint_load_weights(R->opts->init_weights, m, R->err, sizeof R->err)) {
        nsa_log(LOG_ERROR, "--init-weights: %s", R->err);
        if (faults) faults_unbind(faults, m);
        model_free(m);
        return NSA_EXIT_USAGE;
    }
    timing_mark(TM_WEIGHTS);
    optim_init(&R->opt, m);
    timing_mark(TM_OPTIM);
    return GO_ON;
}

// The diagnostics (gradient trace, gate statistics, the model's event hook), the data,
// the data-parallel layer and the gradient-ready hooks. Returns GO_ON or the exit code
// (run_finish frees what was opened).
static int run_open(Run *R) {
    const NsaConfig *cfg = R->cfg;
    const TrainOpts *opts = R->opts;
    Model *m = &R->m;
    R->diag = (TrainDiag){0, NULL, NULL, R->faults};
    if (opts->trace_grads) {
        if (gradtrace_open(&R->trace, m, R->out_dir, R->rank, 1, R->err, sizeof R->err)) {
            nsa_log(LOG_ERROR, "%s", R->err);
            return NSA_EXIT_RUNTIME;
        }
        R->tracing = 1;
        R->hooks.trace = &R->trace;
    }
    if (opts->gate_stats) {
        if (gatestats_open(&R->gstats, R->out_dir, R->rank, m->L, R->err, sizeof R->err)) {
            nsa_log(LOG_ERROR, "%s", R->err);
            return NSA_EXIT_RUNTIME;
        }
        R->diag.gs = &R->gstats;
    }
    if (R->diag.gs || flightrec_header() || (opts->dump_step && opts->dump_acts)) {
        m->event = on_model_event;
        m->event_ctx = &R->diag;
    }
    // rank r reads sequences [r*B, (r+1)*B) of each global micro-batch of world*B
    R->ds = data_open(cfg->data_kind, cfg->data_path, cfg->vocab_size, R->B, R->T, cfg->seed, R->data_rank, R->world,
                      R->err, sizeof R->err);
    R->in = xmalloc(sizeof(int32_t) * (size_t)R->B * R->T);
    R->tg = xmalloc(sizeof(int32_t) * (size_t)R->B * R->T);
    snprintf(R->path, sizeof R->path, "%s/metrics.jsonl", R->out_dir);
    if (!R->ds) { nsa_log(LOG_ERROR, "data: %s", R->err); return NSA_EXIT_USAGE; }
    if (R->cw) {
        const double comm_timeout = opts->comm_timeout_s > 0 ? opts->comm_timeout_s : 300.0;
        DdpOpts dop = {cfg->ddp_mode, cfg->bucket_mb, comm_timeout, R->out_dir, R->faults};
        int drc = NSA_EXIT_RUNTIME;
        flightrec_event(FR_PHASE_INIT, FR_KIND_BEGIN, 0, -1, "ddp_open");
        R->ddp = ddp_open(m, R->cw, &dop, &drc, R->err, sizeof R->err);
        if (!R->ddp) { nsa_log(LOG_ERROR, "rank %d: %s", R->rank, R->err); return drc; }
        R->hooks.ddp = R->ddp;
    }
    if (R->hooks.trace || R->hooks.ddp) {
        m->grad_ready = on_grad_ready;
        m->grad_ready_ctx = &R->hooks;
    }
    return GO_ON;
}

// --resume: the weights, the optimizer and the data position from the checkpoint, its
// config against this run's. Returns GO_ON or the exit code (0 when nothing is left).
static int run_resume(Run *R) {
    const TrainOpts *opts = R->opts;
    flightrec_event(FR_PHASE_CHECKPOINT, FR_KIND_BEGIN, 0, -1, "resume_load");
    CkptInfo ck;
    // unreadable, corrupt (a tensor's or a metadata entry's checksum), tensors that do
    // not fit this model, metadata values that make no sense: exit 1 (docs/diagnostics.md,
    // "Checkpoints")
    if (checkpoint_load(opts->resume, &R->m, &R->opt, R->ds, &ck, R->err, sizeof R->err)) {
        nsa_log(LOG_ERROR, "--resume: %s", R->err);
        return NSA_EXIT_RUNTIME;
    }
    if (!ck.checksums)
        nsa_log(LOG_NOTE, "--resume %s: the checkpoint has no tensor checksums (written before they "
                "existed): its tensor data is not verified", opts->resume);
    if (!ck.meta_checksums)
        nsa_log(LOG_NOTE, "--resume %s: the checkpoint has no metadata checksums (written before they "
                "existed): its metadata is validated, not verified", opts->resume);
    int cfg_bad = check_resume_config(opts, &ck);   // another config: exit 2 unless --allow-config-change
    R->step0 = ck.step;
    data_set_pos(R->ds, ck.pos);
    checkpoint_info_free(&ck);
    if (cfg_bad) return NSA_EXIT_USAGE;
    if (R->step0 >= R->last) {   // nothing left to train: say so, exit 0
        if (R->last < R->cfg->steps)
            nsa_log(LOG_STATUS, "nothing to do: the checkpoint %s is at step %" PRId64 ", and --stop-after "
                    "is %d", opts->resume, R->step0, opts->stop_after);
        else
            nsa_log(LOG_STATUS, "nothing to do: the checkpoint %s is at step %" PRId64 " of %d (train.steps); "
                    "raise --steps to train further", opts->resume, R->step0, R->cfg->steps);
        return NSA_EXIT_OK;
    }
    return GO_ON;
}

// --write-init: the step-0 parameters (rank 0 alone under data parallel: every rank has
// the same), then the run ends without data or training. Returns the exit code.
static int run_write_init(Run *R) {
    const char *path = R->opts->write_init;
    if (R->rank != 0) return NSA_EXIT_OK;
    if (checkpoint_write_weights(path, &R->m, R->err, sizeof R->err)) {
        int e = errno;
        nsa_log(LOG_ERROR, "--write-init: %s", R->err);
        if (e) io_error(path, e);
        return e ? NSA_EXIT_IO : NSA_EXIT_RUNTIME;
    }
    if (!R->opts->quiet)
        printf("nsa-train: wrote the step-0 parameters of config %s (digest %s, seed %llu, %d tensors, %lld values, "
               "%s) to %s\n", R->cfg->name, R->cfg->digest, (unsigned long long)R->cfg->seed, R->m.n_params,
               (long long)R->m.n_elems, R->be->param_bytes == 8 ? "F64" : "F32", path);
    return NSA_EXIT_OK;
}

// metrics.jsonl (rank 0 alone writes it under data parallel; appended to on --resume)
// and the run's header lines. Returns GO_ON or the exit code.
static int run_open_metrics(Run *R) {
    const NsaConfig *cfg = R->cfg;
    if (R->rank == 0) {
        R->metrics = open(R->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (R->opts->resume ? 0 : O_TRUNC), 0644);
        if (R->metrics < 0) {   // an artifact: [IO-ERROR], exit 6
            int e = errno;
            nsa_log(LOG_ERROR, "cannot write %s: %s", R->path, strerror(e));
            io_error(R->path, e);
            return NSA_EXIT_RUNTIME;
        }
    }
    if (!R->opts->quiet) {
        printf("nsa-train: config %s (digest %s) | backend %s | %lld parameters | %s\n", cfg->name, cfg->digest,
               R->be->name, (long long)R->m.n_elems, data_describe(R->ds));
        printf("nsa-train: B=%d T=%d grad_accum=%d steps=%d | NSA l=%d d=%d l'=%d n=%d w=%d phi=%s gate=%s "
               "force_branch=%s | prefill=%s | checkpoint layers [%d,%d) | activations %.1f MiB\n",
               R->B, R->T, cfg->grad_accum, cfg->steps, cfg->l, cfg->d, cfg->l_sel, cfg->n, cfg->w,
               config_phi_name(cfg->phi), config_gate_act_name(cfg->gate_act), config_branch_name(cfg->force_branch),
               cfg->prefill == NSA_PREFILL_SEQUENTIAL ? "sequential" : "batched", cfg->ckpt_begin, cfg->ckpt_end,
               (double)R->m.act_bytes / (1 << 20));
        fflush(stdout);
    }
    return GO_ON;
}

// The step's micro-batches: data, forward, backward (the last one reduces under data
// parallel). *loss: the sum of their losses; *data_digest: this rank's tokens of the
// step, in order (the data order). Returns 0, or -1 when the data source failed.
static int step_micro_batches(Run *R, int64_t step, double *loss, uint64_t *data_digest) {
    const size_t BT = (size_t)R->B * R->T;
    R->t_fwd = R->t_bwd = 0;
    for (int k = 0; k < R->cfg->grad_accum; k++) {
        enter_phase(&R->diag, FR_PHASE_DATA, "data_next");
        if (data_next(R->ds, R->in, R->tg)) {
            nsa_log(LOG_ERROR, "data source failed at step %" PRId64, step);
            return -1;
        }
        *data_digest = digest64(R->in, sizeof(int32_t) * BT, *data_digest);
        *data_digest = digest64(R->tg, sizeof(int32_t) * BT, *data_digest);
        enter_phase(&R->diag, FR_PHASE_FORWARD, "forward");
        double t0 = mono_s();
        *loss += model_forward(&R->m, R->in, R->tg, R->dscale * R->opt.loss_scale);
        double t1 = mono_s();
        R->t_fwd += t1 - t0;
        if (k == 0 && R->diag.gs) free(gatestats_finish_step(R->diag.gs, &R->m, step));
        enter_phase(&R->diag, FR_PHASE_BACKWARD, "backward");
        if (R->tracing) gradtrace_begin_micro(&R->trace, k);
        if (R->ddp) ddp_begin_backward(R->ddp, k == R->cfg->grad_accum - 1);   // only the last micro-batch reduces
        t0 = mono_s();
        model_backward(&R->m);
        R->t_bwd += mono_s() - t0;
    }
    return 0;
}

// fp16: the scaled gradients overflowed. Skip the update, halve the scale. Returns GO_ON
// or the exit code.
static int step_skip_overflow(Run *R, int64_t step, double loss, double *gnorm, double t0) {
    double was = R->opt.loss_scale;
    optim_unscale(&R->opt, &R->m, gnorm);
    nsa_log(LOG_STATUS, "step %" PRId64 ": fp16 gradient overflow at loss scale %g: step skipped, scale now %g",
            step, was, R->opt.loss_scale);
    if (R->metrics >= 0 &&
        metrics_record(R->metrics, R->path, "{\"step\": %" PRId64 ", \"loss\": %.17g, \"skipped\": true, \"loss_scale\": %g}\n",
                       step, loss, R->opt.loss_scale))
        return NSA_EXIT_RUNTIME;
    if (R->ddp) ddp_write_rank_times(R->ddp, step, (mono_s() - t0) * 1e3);
    if (io_error_seen()) return NSA_EXIT_RUNTIME;
    return GO_ON;
}

// --dump-step: the dump describes the first micro-batch of step 1: replay its forward alone
// so that inputs, targets, logits, the loss and (--dump-acts) the activations belong to one
// batch. The gradients:
//   - a single process: the replay's backward (that micro-batch's gradient, scaled
//     1/(B*T)), as every golden baseline holds it;
//   - data parallel: the gradients this step's optimizer consumes — every micro-batch of
//     every rank, after the bucket all-reduces (the mean over world*B*grad_accum
//     sequences) and the fp16 unscale, before clipping (the optimizer's first operation,
//     a factor grad_clip/grad_norm of the logged grad_norm) — not a replay with a scale of
//     its own: a wrong scale or a wrong reduction in training shows here, so the dump of W
//     ranks at batch B compares with one rank's at batch W*B (ddp_onestep's dump_match).
// Rank 0 writes it with its own slice's inputs and logits and the replay's loss, the mean
// over ranks. The step's gradients are left as they were. Returns 0 or the exit code.
static int step_dump(Run *R, DataPos pos) {
    const NsaConfig *cfg = R->cfg;
    const Backend *be = R->be;
    Model *m = &R->m;
    const int B = R->B, T = R->T;
    const int replay_grads = R->ddp == NULL;
    DataSource *ds1 = data_open(cfg->data_kind, cfg->data_path, cfg->vocab_size, B, T, cfg->seed, R->data_rank, R->world,
                                R->err, sizeof R->err);
    int32_t *in1 = xmalloc(sizeof(int32_t) * (size_t)B * T), *tg1 = xmalloc(sizeof(int32_t) * (size_t)B * T);
    data_set_pos(ds1, pos);
    data_next(ds1, in1, tg1);
    data_close(ds1);
    void *saved = xmalloc((size_t)m->n_elems * be->param_bytes);
    be->to_host(saved, m->grad_mem, (size_t)m->n_elems * be->param_bytes);
    if (replay_grads) model_zero_grad(m);
    if (R->opts->dump_acts) R->diag.acts = actdump_new(R->opts->dump_tensors);
    double l1 = model_forward(m, in1, tg1, 1.0 / ((double)B * T * R->world));
    const int64_t nlog = (int64_t)B * T * m->V;
    void *lh = R->rank == 0 && glob_list_match(R->opts->dump_tensors, "logits") ? logits_to_host(m, nlog) : NULL;
    if (replay_grads) model_backward(m);
    int drc = NSA_EXIT_OK;
    if (R->ddp) drc = ddp_mean(R->ddp, &l1, "allreduce dump loss");
    if (!drc && R->rank == 0)
        drc = dump_step(R->opts->dump_step, m, in1, tg1, l1, &l1, lh, R->diag.acts, R->opts->dump_tensors) ? NSA_EXIT_RUNTIME : NSA_EXIT_OK;
    be->from_host(m->grad_mem, saved, (size_t)m->n_elems * be->param_bytes);
    actdump_free(R->diag.acts);
    R->diag.acts = NULL;
    free(lh); free(saved); free(in1); free(tg1);
    return drc;
}

// After the update: the step's line on stdout, its metrics.jsonl record, the rank's
// times, the checkpoint when due. Returns GO_ON or the exit code.
static int step_record(Run *R, int64_t step, double loss, double gnorm, double lr, double dt, uint64_t data_digest) {
    const NsaConfig *cfg = R->cfg;
    const TrainOpts *opts = R->opts;
    const Backend *be = R->be;
    const int world = R->world;
    double toks = (double)R->B * R->T * cfg->grad_accum;
    if (!opts->quiet) {
        if (R->ddp)   // the loss is the mean over ranks; tok/s the world's
            printf("step %5" PRId64 "/%d | loss %.6f | grad_norm %.4f | lr %.3e | %8.1f ms | %9.0f tok/s | rank %d "
                   "comm wait %.1f ms\n", step, cfg->steps, loss, gnorm, lr, dt * 1e3, toks * world / dt, R->rank,
                   ddp_comm_wait_ms(R->ddp));
        else
            printf("step %5" PRId64 "/%d | loss %.6f | grad_norm %.4f | lr %.3e | %8.1f ms | %9.0f tok/s\n", step,
                   cfg->steps, loss, gnorm, lr, dt * 1e3, toks / dt);
        fflush(stdout);
    }
    // mem_bytes: what the model holds on its backend (parameters, gradients,
    // AdamW moments, activations and scratch); rss_bytes: the process's RSS
    const int64_t mem = (int64_t)R->m.param_bytes_total + (int64_t)R->m.act_bytes + 2 * R->m.n_elems * be->param_bytes;
    // peak_mem_bytes: the most the backend held allocated at once so far (its
    // allocator's exact count); flops: model FLOPs of the step (trainer/flops.h);
    // data_digest: digest64 of this rank's inputs and targets of the step
    const int64_t peak = be->mem_peak ? (int64_t)be->mem_peak() : -1;
    char dd[17];
    digest64_hex(data_digest, dd);
    // tokens and tok/s: the whole world's (every rank processes B*T*grad_accum)
    // metrics.jsonl gets its record every step: a full disk shows here,
    // [IO-ERROR] naming it, exit 6
    if (R->metrics >= 0 &&
        metrics_record(R->metrics, R->path,
                "{\"step\": %" PRId64 ", \"loss\": %.17g, \"grad_norm\": %.17g, \"lr\": %.17g, \"ms\": %.3f, "
                "\"tok_per_s\": %.1f, \"tokens\": %.0f, \"mem_bytes\": %" PRId64 ", \"rss_bytes\": %" PRId64 ", "
                "\"peak_mem_bytes\": %" PRId64 ", \"flops\": %.17g, \"data_digest\": \"%s\", "
                "\"world_size\": %d, \"comm_wait_ms\": %.3f}\n",
                step, loss, gnorm, lr, dt * 1e3, toks * world / dt, toks * world, mem, rss_bytes(), peak,
                R->flops_step * world, dd, world, R->ddp ? ddp_comm_wait_ms(R->ddp) : 0.0))
        return NSA_EXIT_RUNTIME;
    if (R->ddp) ddp_write_rank_times(R->ddp, step, dt * 1e3);
    int save_now = R->rank == 0 && opts->save && ((opts->save_every > 0 && step % opts->save_every == 0) || step == R->last);
    if (save_now) {
        flightrec_event(FR_PHASE_CHECKPOINT, FR_KIND_BEGIN, step, -1, "checkpoint_save");
        if (checkpoint_save(opts->save, &R->m, &R->opt, step, data_get_pos(R->ds), R->err, sizeof R->err)) {
            int e = errno;   // != 0: the file could not be written: [IO-ERROR], exit 6
            nsa_log(LOG_ERROR, "--save: %s", R->err);
            if (e) io_error(opts->save, e);
            return NSA_EXIT_RUNTIME;
        }
    }
    // a trace record (grad_trace, gate_stats, buckets, rank_times) that could not
    // be written this step: stop here, exit 6 (train_run)
    if (io_error_seen()) return NSA_EXIT_RUNTIME;
    flightrec_event(save_now ? FR_PHASE_CHECKPOINT : FR_PHASE_OPTIMIZER, FR_KIND_END, step, -1, "step");
    return GO_ON;
}

// One optimizer step: micro-batches, the collectives, the gradient norm (fp16 overflow:
// skipped), the anomaly check, the step-1 dump, the update, the record. Returns GO_ON or
// the exit code.
static int train_step(Run *R, int64_t step) {
    const NsaConfig *cfg = R->cfg;
    double t0 = mono_s();
    R->diag.step = step;
    flightrec_event(FR_PHASE_DATA, FR_KIND_BEGIN, step, -1, "step");
    if (R->ddp) ddp_begin_step(R->ddp, step);
    if (R->faults) faults_begin_step(R->faults, &R->m, step);
    if (R->tracing) gradtrace_begin_step(&R->trace, step);
    if (R->diag.gs) gatestats_arm(R->diag.gs);
    DataPos pos = data_get_pos(R->ds);
    model_zero_grad(&R->m);
    double loss = 0;
    uint64_t data_digest = 0;
    if (step_micro_batches(R, step, &loss, &data_digest)) return NSA_EXIT_RUNTIME;
    // the trace goes out before any anomaly handling, so a non-finite
    // gradient is on record even when the run halts below; under data parallel
    // also before the wait for the collectives, so a rank that hangs there has
    // its arrival record out
    if (R->tracing) free(gradtrace_end_step(&R->trace));
    loss /= cfg->grad_accum;
    if (R->ddp) {
        // wait for every bucket (bounded by --comm-timeout), then the mean loss over ranks
        int drc = ddp_finish_backward(R->ddp);
        if (!drc) drc = ddp_mean(R->ddp, &loss, "allreduce loss");
        if (drc) return drc;
    }
    enter_phase(&R->diag, FR_PHASE_OPTIMIZER, "grad_norm");
    double gnorm = optim_grad_norm(&R->m);
    if (isfinite(loss) && !isfinite(gnorm) && R->opt.loss_scale > 1.0) return step_skip_overflow(R, step, loss, &gnorm, t0);
    optim_unscale(&R->opt, &R->m, &gnorm);
    if (!isfinite(loss) || !isfinite(gnorm)) {
        nsa_log(LOG_ERROR, "step %" PRId64 ": non-finite %s (loss %g, grad norm %g); replaying the step to localise",
                step, !isfinite(loss) ? "loss" : "gradient", loss, gnorm);
        if (R->metrics >= 0)   // a failure: the anomaly is still localised; the run ends with 6
            metrics_record(R->metrics, R->path, "{\"step\": %" PRId64 ", \"loss\": \"%g\", \"grad_norm\": \"%g\", \"anomaly\": true}\n",
                           step, loss, gnorm);
        // every rank replays its own micro-batches (no collectives): the rank whose
        // data produced the value names the tensor
        localise_anomaly(&R->m, R->ds, pos, R->in, R->tg, R->dscale, step, R->out_dir);
        return NSA_EXIT_ANOMALY;
    }
    if (step == 1 && R->opts->dump_step) {
        int drc = step_dump(R, pos);
        if (drc) return drc;
    }
    double lr = optim_lr(cfg, step);
    flightrec_event(FR_PHASE_OPTIMIZER, FR_KIND_BEGIN, step, -1, "adamw");
    optim_step(&R->opt, &R->m, lr, gnorm);
    R->be->sync();
    const double dt = mono_s() - t0;
    timing_step(dt, R->t_fwd, R->t_bwd);
    return step_record(R, step, loss, gnorm, lr, dt, data_digest);
}

// Close and free everything the run opened; a metrics.jsonl that fails at close is an
// I/O error (NFS reports write errors there). Returns rc.
static int run_finish(Run *R, int rc) {
    timing_model(&R->m);   // the graph counters, before the model goes
    if (R->metrics >= 0 && close(R->metrics) != 0) io_error(R->path, errno);
    if (R->ds) data_close(R->ds);
    free(R->in); free(R->tg);
    if (R->tracing) gradtrace_close(&R->trace);
    if (R->diag.gs) gatestats_close(R->diag.gs);
    ddp_close(R->ddp, rc == NSA_EXIT_OK);
    R->m.grad_ready = NULL;
    R->m.event = NULL;
    optim_free(&R->opt, &R->m);
    if (R->faults) faults_unbind(R->faults, &R->m);
    model_free(&R->m);
    timing_mark(TM_FINISH);
    return rc;
}

static int train_run_inner(const TrainOpts *opts) {
    Run R;
    memset(&R, 0, sizeof R);
    R.opts = opts;
    R.cfg = &opts->cfg;
    R.out_dir = opts->out_dir ? opts->out_dir : ".";
    R.cw = opts->world && opts->world->transport != COMM_NONE ? opts->world : NULL;
    R.world = R.cw ? R.cw->world : 1;
    R.rank = R.cw ? R.cw->rank : opts->rank;
    R.data_rank = R.cw ? R.cw->rank : 0;   // a single process (--rank R) reads the whole batch
    R.B = R.cfg->batch_size;
    R.T = R.cfg->seq_len;
    R.metrics = -1;
    g_rank = R.rank;
    flightrec_event(FR_PHASE_INIT, FR_KIND_BEGIN, 0, -1, "init");
    int rc;
    if ((rc = run_prepare(&R)) != GO_ON) return rc;
    if ((rc = run_build_model(&R)) != GO_ON) return rc;
    if (opts->write_init) return run_finish(&R, run_write_init(&R));
    if ((rc = run_open(&R)) != GO_ON) return run_finish(&R, rc);
    R.last = opts->stop_after > 0 && opts->stop_after < R.cfg->steps ? opts->stop_after : R.cfg->steps;
    if (opts->resume && (rc = run_resume(&R)) != GO_ON) return run_finish(&R, rc);
    if ((rc = run_open_metrics(&R)) != GO_ON) return run_finish(&R, rc);
    R.dscale = 1.0 / ((double)R.B * R.T * R.cfg->grad_accum * R.world);
    R.flops_step = model_flops_per_step(&R.m, R.B, R.T, R.cfg->grad_accum);
    timing_mark(TM_DATA);
    for (int64_t step = R.step0 + 1; step <= R.last; step++)
        if ((rc = train_step(&R, step)) != GO_ON) {
            timing_mark(TM_LOOP);
            return run_finish(&R, rc);
        }
    timing_mark(TM_LOOP);
    rc = NSA_EXIT_OK;
    if (R.ddp && R.last > R.step0) rc = ddp_check_weights(R.ddp, R.last);
    return run_finish(&R, rc);
}
