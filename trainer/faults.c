// trainer/faults.c — the fault table and the fault hooks (see faults.h and
// docs/diagnostics.md "Faults").
//
// A fault is a row of FAULTS: its name, its argument syntax, the parser that
// switches it on, the hook points it acts at, whether it may be given more than
// once, what it breaks, which harness family is meant to catch it and when it has
// no effect. Adding one: its state (faults.h), its row and parser here, its effect
// in the hooks its row names. The hooks below are called from model.c / train.c
// only when a Faults object is attached, so a run without --fault never enters here.
#define _POSIX_C_SOURCE 200809L   // pause
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/nsa_names.h"
#include "common/util.h"
#include "trainer/faults.h"
#include "trainer/flightrec.h"

// ---- argument parsing helpers -------------------------------------------------------

// strict decimal integer in [lo, hi]; the whole string must be the number
static const ModelFaultHooks FAULT_HOOKS;   // where the faults act in the model (at the end)

static int parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    if (!s || !*s) return -1;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static const char *PHASES[] = {"data", "forward", "backward", "optimizer", "comm"};
static const int PHASE_IDS[] = {FR_PHASE_DATA, FR_PHASE_FORWARD, FR_PHASE_BACKWARD, FR_PHASE_OPTIMIZER, FR_PHASE_COMM};

typedef int (*FaultParse)(Faults *f, const char *arg, char *err, size_t errlen);

#define NEED_NO_ARG(name)                                                                  \
    if (arg) { snprintf(err, errlen, "%s takes no argument", name); return -1; }
#define NEED_ARG(syntax)                                                                   \
    if (!arg || !*arg) { snprintf(err, errlen, "needs an argument: %s", syntax); return -1; }

static int p_gate_zero_init(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_NO_ARG("gate_zero_init");
    f->gate_zero_init = 1;
    return 0;
}

static int p_hang(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_ARG("hang=RANK:STEP:PHASE");
    char buf[128];
    snprintf(buf, sizeof buf, "%s", arg);
    char *c1 = strchr(buf, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c1 || !c2) { snprintf(err, errlen, "expected RANK:STEP:PHASE"); return -1; }
    *c1 = *c2 = 0;
    int64_t r, s;
    if (parse_i64(buf, 0, 1 << 20, &r)) { snprintf(err, errlen, "RANK '%s' is not a non-negative integer", buf); return -1; }
    if (parse_i64(c1 + 1, 1, INT64_MAX / 2, &s)) { snprintf(err, errlen, "STEP '%s' is not a positive integer", c1 + 1); return -1; }
    int ph = -1;
    for (int i = 0; i < 5; i++) if (!strcmp(c2 + 1, PHASES[i])) ph = PHASE_IDS[i];
    if (ph < 0) { snprintf(err, errlen, "PHASE '%s' is not one of data, forward, backward, optimizer, comm", c2 + 1); return -1; }
    f->hang = 1; f->hang_rank = (int)r; f->hang_step = s; f->hang_phase = ph;
    return 0;
}

static int p_crash(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_ARG("crash=RANK:STEP");
    char buf[128];
    snprintf(buf, sizeof buf, "%s", arg);
    char *c1 = strchr(buf, ':');
    if (!c1) { snprintf(err, errlen, "expected RANK:STEP"); return -1; }
    *c1 = 0;
    int64_t r, s;
    if (parse_i64(buf, 0, 1 << 20, &r)) { snprintf(err, errlen, "RANK '%s' is not a non-negative integer", buf); return -1; }
    if (parse_i64(c1 + 1, 1, INT64_MAX / 2, &s)) { snprintf(err, errlen, "STEP '%s' is not a positive integer", c1 + 1); return -1; }
    f->crash = 1; f->crash_rank = (int)r; f->crash_step = s;
    return 0;
}

static int p_drop_grad(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_ARG("drop_grad=PARAM");
    if (strlen(arg) >= sizeof f->drop_names[0]) { snprintf(err, errlen, "parameter name too long"); return -1; }
    if (f->n_drop == FAULT_MAX_DROP) { snprintf(err, errlen, "at most %d drop_grad faults", FAULT_MAX_DROP); return -1; }
    for (int i = 0; i < f->n_drop; i++)
        if (!strcmp(f->drop_names[i], arg)) { snprintf(err, errlen, "given twice"); return -1; }
    snprintf(f->drop_names[f->n_drop++], sizeof f->drop_names[0], "%s", arg);
    return 0;
}

// divergent_unused=RANK[:PARAM]: the parameter is resolved (and checked) in faults_bind
static int p_divergent_unused(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_ARG("divergent_unused=RANK[:PARAM]");
    char buf[128];
    snprintf(buf, sizeof buf, "%s", arg);
    char *c1 = strchr(buf, ':');
    if (c1) *c1 = 0;
    int64_t r;
    if (parse_i64(buf, 0, 1 << 20, &r)) { snprintf(err, errlen, "RANK '%s' is not a non-negative integer", buf); return -1; }
    if (c1 && !c1[1]) { snprintf(err, errlen, "PARAM after ':' is empty"); return -1; }
    if (c1 && strlen(c1 + 1) >= sizeof f->divergent_name) { snprintf(err, errlen, "parameter name too long"); return -1; }
    f->divergent = 1;
    f->divergent_rank = (int)r;
    snprintf(f->divergent_name, sizeof f->divergent_name, "%s", c1 ? c1 + 1 : "");
    return 0;
}

static int p_nan_at_seqlen(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_ARG("nan_at_seqlen=K");
    int64_t k;
    if (parse_i64(arg, 1, 1 << 30, &k)) { snprintf(err, errlen, "K '%s' is not a positive integer", arg); return -1; }
    f->nan_seqlen = (int)k;
    return 0;
}

static int p_prefill_state_leak(Faults *f, const char *arg, char *err, size_t errlen) {
    NEED_NO_ARG("prefill_state_leak");
    f->prefill_leak = 1;
    return 0;
}

static int parse_layer(const char *arg, const char *syntax, int *out, char *err, size_t errlen) {
    NEED_ARG(syntax);
    int64_t l;
    if (parse_i64(arg, 0, 1 << 20, &l)) { snprintf(err, errlen, "LAYER '%s' is not a non-negative integer", arg); return -1; }
    *out = (int)l;
    return 0;
}
static int p_gc_recompute_mismatch(Faults *f, const char *arg, char *err, size_t errlen) {
    return parse_layer(arg, "gc_recompute_mismatch=LAYER", &f->gc_mismatch_layer, err, errlen);
}
static int p_clobber_activation(Faults *f, const char *arg, char *err, size_t errlen) {
    return parse_layer(arg, "clobber_activation=LAYER", &f->clobber_layer, err, errlen);
}

enum { ONCE = 1, REPEATABLE = 0 };

typedef struct {
    const char *name;
    const char *syntax;
    FaultParse parse;
    unsigned hooks;          // FAULT_AT_*: where it acts
    int once;                // ONCE: given twice is a usage error; REPEATABLE: each adds one
    const char *breaks;      // what it breaks
    const char *family;      // the harness family meant to catch it
    const char *no_effect;   // when it does nothing
} FaultSpec;

static const FaultSpec FAULTS[] = {
    {"gate_zero_init", "gate_zero_init", p_gate_zero_init, FAULT_AT_INIT_WEIGHTS, ONCE,
     "every layer's gate.fc2 weight and bias start at exactly 0, so at step 1 every gate output is exactly "
     "1/3 (softmax) or 0.5 (sigmoid): the branches are mixed uniformly whatever the token",
     "gate-init checks (--gate-stats at step 1: fc2 std vs Xavier gain 0.1, outputs not uniform)",
     "force_branch set (the gate is bypassed); --resume or --init-weights (the file's weights replace the init)"},
    {"hang", "hang=RANK:STEP:PHASE", p_hang, FAULT_AT_PHASE, ONCE,
     "rank RANK, on entering PHASE (data|forward|backward|optimizer|comm) of step STEP, records the phase in "
     "the flight recorder, then sleeps forever in fault_hang(): the heartbeat stops (comm: the data-parallel "
     "wait for the step's collectives at the end of backward, after this rank launched its buckets)",
     "watchdog -> HANG verdict (flight recorder phase/heartbeat, SIGUSR1 stack dump naming fault_hang)",
     "RANK is not this process's rank; STEP beyond the run; PHASE comm without data parallel "
     "(--transport none)"},
    {"crash", "crash=RANK:STEP", p_crash, FAULT_AT_PHASE, ONCE,
     "rank RANK dies by SIGSEGV (a NULL write in fault_crash()) at the start of step STEP's forward",
     "CRASH verdict (exit by signal 11, crash stack dump naming fault_crash)",
     "RANK is not this process's --rank; STEP beyond the run"},
    {"drop_grad", "drop_grad=PARAM", p_drop_grad, FAULT_AT_GRAD, REPEATABLE,
     "PARAM's gradient is never produced: its grad_ready notification is suppressed and its gradient stays "
     "exactly zero (so it is never updated; a data-parallel bucket holding it would never launch)",
     "DDP one-step gradient-arrival trace (--trace-grads: missing != expected_missing)",
     "never (an unknown PARAM is a usage error); repeatable, one parameter each"},
    {"divergent_unused", "divergent_unused=RANK[:PARAM]", p_divergent_unused, FAULT_AT_GRAD, ONCE,
     "on rank RANK only, PARAM is unused in backward: drop_grad's mechanism on that rank alone (no grad_ready, "
     "gradient stays 0). PARAM defaults to blocks.<n_layers/2>.attn.gate.fc2.weight (with force_branch, whose "
     "gate is bypassed: blocks.<n_layers/2>.attn.o_proj.weight)",
     "DDP one-step: default mode -> HANG (exit 4 / watchdog) naming the rank, the bucket and the parameter "
     "([DDP] line, buckets.jsonl); find_unused -> runs to the end, its numbers FAIL against one rank naming PARAM as "
     "the only differing gradient (a zero averaged in); static_graph -> exit 5 naming rank and parameter",
     "RANK is not a rank of the run (e.g. without data parallel and --rank != RANK); an unknown PARAM is a "
     "usage error"},
    {"nan_at_seqlen", "nan_at_seqlen=K", p_nan_at_seqlen, FAULT_AT_BRANCH_FWD, ONCE,
     "when train.seq_len T is a multiple of K, layer 0's selection-branch output becomes NaN at position "
     "T-1 of sequence 0 (stand-in for non-finite selection scores): anomaly exit 3 naming "
     "blocks.0.attn.sel.o, op sel_attn_fwd, t = T-1",
     "sequence-length NaN sweep (exit 3 + anomaly.json at lengths that are multiples of K only)",
     "T not a multiple of K. With force_branch = cmp or win the forced branch's output is poisoned instead "
     "(blocks.0.attn.cmp.o / cmp_attn_fwd, blocks.0.attn.win.o / win_attn_fwd)"},
    {"prefill_state_leak", "prefill_state_leak", p_prefill_state_leak, FAULT_AT_BEGIN_STEP | FAULT_AT_PREFILL_CMP, ONCE,
     "sequential prefill: from the second step this process runs, the compressed K/V caches are not reset "
     "between steps (blocks that exist from the previous step are not recomputed: stale keys and values), "
     "and every such step leaks one more allocation of the caches' size (memory grows per step)",
     "step-5 prefill (sequential vs batched loss parity from step 2, no per-step memory growth)",
     "train.prefill = batched"},
    {"gc_recompute_mismatch", "gc_recompute_mismatch=LAYER", p_gc_recompute_mismatch, FAULT_AT_RECOMPUTE, ONCE,
     "when LAYER is checkpointed, its recomputation in backward runs on its input perturbed by a relative "
     "+-1e-3 (+-2^-6 with 16-bit activations, so that it survives rounding; alternating sign per element), so "
     "the recomputed activations differ from the forward's: "
     "gradients change but stay finite",
     "GC bisection (gradients with checkpointing vs without; bisects down to LAYER)",
     "LAYER not in train.checkpoint_layers"},
    {"clobber_activation", "clobber_activation=LAYER", p_clobber_activation, FAULT_AT_FORWARD_END, ONCE,
     "after the forward and before its backward, LAYER's saved SwiGLU hidden (ffh) is overwritten with its "
     "gate pre-activation (ffa): finite but wrong gradients (blocks.LAYER.mlp.down_proj at once, the rest "
     "through the updated weights)",
     "GC bisection (checkpointing LAYER heals it: the recompute rewrites ffh, which localises the layer)",
     "LAYER in train.checkpoint_layers (its backward recomputes the activation)"},
};
#define N_FAULTS ((int)(sizeof FAULTS / sizeof FAULTS[0]))
_Static_assert(N_FAULTS <= 32, "Faults.given has a bit per fault");

void faults_init(Faults *f) {
    memset(f, 0, sizeof *f);
    f->gc_mismatch_layer = -1;
    f->clobber_layer = -1;
}

int faults_parse(Faults *f, const char *spec, char *err, size_t errlen) {
    const char *eq = strchr(spec, '=');
    size_t nlen = eq ? (size_t)(eq - spec) : strlen(spec);
    const char *arg = eq ? eq + 1 : NULL;
    int k = -1;
    for (int i = 0; i < N_FAULTS; i++)
        if (strlen(FAULTS[i].name) == nlen && !strncmp(FAULTS[i].name, spec, nlen)) k = i;
    if (k < 0) {
        char known[512] = "";
        for (int i = 0; i < N_FAULTS; i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, FAULTS[i].syntax, sizeof known - strlen(known) - 1);
        }
        snprintf(err, errlen, "--fault %s: unknown fault (known: %s; see --list-faults)", spec, known);
        return -1;
    }
    const FaultSpec *fs = &FAULTS[k];
    if (fs->once && (f->given & (1u << k))) {
        snprintf(err, errlen, "--fault %s: fault %s given twice", spec, fs->name);
        return -1;
    }
    char why[256];
    if (fs->parse(f, arg, why, sizeof why)) {
        snprintf(err, errlen, "--fault %s: %s (syntax: %s)", spec, why, fs->syntax);
        return -1;
    }
    f->given |= 1u << k;
    f->hooks |= fs->hooks;
    f->n_active++;
    size_t used = strlen(f->desc);
    snprintf(f->desc + used, sizeof f->desc - used, "%s%s", used ? " " : "", spec);
    return 0;
}

int faults_check_config(const Faults *f, const NsaConfig *cfg, char *err, size_t errlen) {
    if (f->gc_mismatch_layer >= cfg->n_layers) {
        snprintf(err, errlen, "--fault gc_recompute_mismatch=%d: layer out of range (model.n_layers = %d)",
                 f->gc_mismatch_layer, cfg->n_layers);
        return -1;
    }
    if (f->clobber_layer >= cfg->n_layers) {
        snprintf(err, errlen, "--fault clobber_activation=%d: layer out of range (model.n_layers = %d)",
                 f->clobber_layer, cfg->n_layers);
        return -1;
    }
    return 0;
}

void faults_list(FILE *out) {
    fprintf(out, "# nsa-train faults (--fault NAME[=ARG], repeatable; never active unless asked)\n");
    for (int i = 0; i < N_FAULTS; i++) {
        const FaultSpec *s = &FAULTS[i];
        fprintf(out, "%-22s %s\n", s->name, s->syntax);
        fprintf(out, "    breaks:    %s\n", s->breaks);
        fprintf(out, "    caught by: %s\n", s->family);
        fprintf(out, "    no effect: %s\n", s->no_effect);
    }
}

const char *faults_name(int i) { return i >= 0 && i < N_FAULTS ? FAULTS[i].name : NULL; }

void faults_describe(const Faults *f, char *buf, size_t n) { snprintf(buf, n, "%s", f->desc); }

int faults_bind(Faults *f, Model *m, int rank, char *err, size_t errlen) {
    f->rank = rank;
    f->n_params = m->n_params;
    f->divergent_id = -1;
    if (f->divergent) {
        // resolved on every rank (an unknown name is a usage error everywhere), applied on one
        char def[80];
        const char *name = f->divergent_name;
        if (!name[0]) {
            int L = m->L / 2, id = m->lid[L][nsa_gated(m->cfg.force_branch) ? LP_GATE_FC2_W : LP_WO];
            snprintf(def, sizeof def, "%s", m->params[id].name);
            name = def;
        }
        int id = model_find_param(m, name);
        if (id < 0) {
            int L = m->L - 1;
            snprintf(err, errlen,
                     "--fault divergent_unused=%d:%s: no parameter '%s' in this model (valid names are like %s, %s, "
                     "%s; %d parameters in all)",
                     f->divergent_rank, name, name, m->params[0].name, m->params[m->lid[0][LP_WQ]].name,
                     m->params[m->lid[L][LP_WO]].name, m->n_params);
            return -1;
        }
        snprintf(f->divergent_param, sizeof f->divergent_param, "%s", m->params[id].name);
        f->divergent_id = id;
    }
    if (f->n_drop || (f->divergent && rank == f->divergent_rank)) {
        f->drop = xcalloc((size_t)m->n_params, 1);
        if (f->divergent && rank == f->divergent_rank) f->drop[f->divergent_id] = 1;
        for (int i = 0; i < f->n_drop; i++) {
            int id = model_find_param(m, f->drop_names[i]);
            if (id < 0) {
                int L = m->L - 1;
                snprintf(err, errlen,
                         "--fault drop_grad=%s: no parameter '%s' in this model (valid names are like %s, %s, %s, %s; "
                         "%d parameters in all)",
                         f->drop_names[i], f->drop_names[i], m->params[0].name,
                         m->params[m->lid[0][LP_WQ]].name, m->params[m->lid[L][LP_WO]].name,
                         m->params[m->n_params - 1].name, m->n_params);
                free(f->drop); f->drop = NULL;
                return -1;
            }
            f->drop[id] = 1;
        }
    }
    m->faults = f;
    m->fault_hooks = &FAULT_HOOKS;
    return 0;
}

void faults_unbind(Faults *f, Model *m) {
    if (m && m->faults == f) {
        m->faults = NULL;
        m->fault_hooks = NULL;
    }
    free(f->drop);
    f->drop = NULL;
    if (f->gc_saved && m) m->be->free(f->gc_saved);
    f->gc_saved = NULL;
}

// ---- training-loop hooks ---------------------------------------------------------------

void faults_after_init_weights(Faults *f, Model *m) {
    if (!(f->hooks & FAULT_AT_INIT_WEIGHTS) || !f->gate_zero_init) return;
    for (int L = 0; L < m->L; L++)
        for (int s = LP_GATE_FC2_W; s <= LP_GATE_FC2_B; s++) {
            int id = m->lid[L][s];
            m->be->zero(model_param_ptr(m, id), (size_t)m->params[id].numel * m->be->param_bytes);
        }
    model_params_changed(m);
}

void faults_begin_step(Faults *f, Model *m, int64_t step) {
    f->step = step;
    if ((f->hooks & FAULT_AT_BEGIN_STEP) && f->prefill_leak && m->cfg.prefill == NSA_PREFILL_SEQUENTIAL) {
        // "from step 2": from the second step this process runs (a resumed run has
        // no caches from before it started)
        f->stale_cmp = f->steps_begun >= 1;
        if (f->stale_cmp && m->cmp_needed) {
            // one allocation of the caches' size per step, never freed before exit;
            // zero-filled by the backend, so the pages are really touched
            size_t bytes = (size_t)m->L * 2 * (size_t)m->B * m->geom.NC * m->G * m->D * m->be->act_bytes;
            if (bytes) model_alloc_tracked(m, bytes);
            f->leaked_bytes += bytes;
        }
    }
    f->steps_begun++;
}

// Never inlined, so that a stack dump of a hung rank names it.
void fault_hang(void) {
    for (;;) pause();
}

// Never inlined; the pointer is volatile so that the compiler cannot see the NULL
// and turn the store into a trap instruction (SIGILL): this must be SIGSEGV.
static volatile int *volatile fault_null_ptr;
void fault_crash(void) { *fault_null_ptr = 0x5e6f; }

void faults_on_phase(const Faults *f, int phase, int64_t step) {
    if (!(f->hooks & FAULT_AT_PHASE)) return;
    if (f->crash && phase == FR_PHASE_FORWARD && step == f->crash_step && f->rank == f->crash_rank) {
        fprintf(stderr, "nsa-train: [FAULT] crash: rank %d step %" PRId64 ": SIGSEGV now\n", f->rank, step);
        fflush(stderr);
        fault_crash();
    }
    if (f->hang && phase == f->hang_phase && step == f->hang_step && f->rank == f->hang_rank) {
        fprintf(stderr, "nsa-train: [FAULT] hang: rank %d step %" PRId64 " phase %s: sleeping forever\n", f->rank,
                step, fr_phase_name(phase));
        fflush(stderr);
        fault_hang();
    }
}

// ---- model hooks ----------------------------------------------------------------------

int faults_grad_dropped(const Faults *f, int id) {
    return (f->hooks & FAULT_AT_GRAD) && f->drop && id >= 0 && id < f->n_params && f->drop[id];
}

void faults_after_backward(Model *m) {
    const Faults *f = m->faults;
    if (!(f->hooks & FAULT_AT_GRAD) || !f->drop) return;
    for (int i = 0; i < m->n_params; i++)
        if (f->drop[i]) m->be->zero(model_grad_ptr(m, i), (size_t)m->params[i].numel * m->be->param_bytes);
}

void faults_after_branch_fwd(Model *m, int L, int b, void *o, int t0, int Tn) {
    const Faults *f = m->faults;
    if (!(f->hooks & FAULT_AT_BRANCH_FWD) || f->nan_seqlen <= 0 || L != 0 || m->T % f->nan_seqlen) return;
    int target = m->used[NSA_BR_SEL] ? NSA_BR_SEL : m->cfg.force_branch;
    int t = m->T - 1;   // last position of sequence 0 = row T-1
    if (b != target || t < t0 || t >= t0 + Tn) return;
    const int HD = m->H * m->D;
    double *nan_row = xmalloc(sizeof(double) * (size_t)HD);
    for (int i = 0; i < HD; i++) nan_row[i] = NAN;
    m->be->act_from_f64((char *)o + (size_t)t * HD * m->be->act_bytes, nan_row, HD);
    free(nan_row);
}

int faults_keep_stale_cmp(Model *m, int L, int t0, int Tn) {
    // only the decode algorithm's per-token calls; the anomaly replay and the
    // recompute of checkpointed layers run batched and compute every block
    const Faults *f = m->faults;
    return (f->hooks & FAULT_AT_PREFILL_CMP) && f->stale_cmp && m->cfg.prefill == NSA_PREFILL_SEQUENTIAL &&
           !m->check_finite && Tn < m->T;
}

void faults_before_recompute(Model *m, int L) {
    Faults *f = m->faults;
    if (!(f->hooks & FAULT_AT_RECOMPUTE) || L != f->gc_mismatch_layer) return;
    const Backend *be = m->be;
    const int64_t n = (int64_t)m->B * m->T * m->C;
    const size_t bytes = (size_t)n * be->act_bytes;
    if (!f->gc_saved) f->gc_saved = be->alloc(bytes);
    be->copy(f->gc_saved, m->res[L], bytes);
    double *h = xmalloc(sizeof(double) * (size_t)n);
    be->act_to_f64(h, m->res[L], n);
    // the relative change must survive rounding to the activation type: bf16 and
    // fp16 (2 bytes) keep 8 and 11 bits, so 1e-3 would round back to the same
    // value (seen on the CUDA bf16 backend: the fault had no effect); 2^-6 does not
    const double eps = be->act_bytes == 2 ? 1.0 / 64 : 1e-3;
    for (int64_t i = 0; i < n; i++) h[i] *= (i & 1) ? 1.0 - eps : 1.0 + eps;
    be->act_from_f64(m->res[L], h, n);
    free(h);
}

void faults_after_recompute(Model *m, int L) {
    Faults *f = m->faults;
    if (!(f->hooks & FAULT_AT_RECOMPUTE) || L != f->gc_mismatch_layer || !f->gc_saved) return;
    m->be->copy(m->res[L], f->gc_saved, (size_t)m->B * m->T * m->C * m->be->act_bytes);
    m->be->free(f->gc_saved);
    f->gc_saved = NULL;
}

void faults_after_forward(Model *m) {
    const Faults *f = m->faults;
    if (!(f->hooks & FAULT_AT_FORWARD_END) || f->clobber_layer < 0 || f->clobber_layer >= m->L) return;
    // A checkpointed layer's acts are rewritten by its recompute in backward:
    // clobbering them here is healed, which is the point (see the fault table).
    LayerActs *a = &m->acts[f->clobber_layer];
    m->be->copy(a->ffh, a->ffa, (size_t)m->B * m->T * m->F * m->be->act_bytes);
}

// The table the model calls through (ModelFaultHooks, trainer/model.h), bound by faults_bind.
static int hook_grad_dropped(const Model *m, int id) { return faults_grad_dropped(m->faults, id); }
static const ModelFaultHooks FAULT_HOOKS = {
    .grad_dropped = hook_grad_dropped,
    .after_branch_fwd = faults_after_branch_fwd,
    .keep_stale_cmp = faults_keep_stale_cmp,
    .before_recompute = faults_before_recompute,
    .after_recompute = faults_after_recompute,
    .after_forward = faults_after_forward,
    .after_backward = faults_after_backward,
};
