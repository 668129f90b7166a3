// tests/gpu/test_seq_graph.c — sequential prefill recorded as graphs (trainer/model.c,
// "Sequential prefill as a graph"; docs/cuda.md): a recorded forward is bitwise the eager one.
//
// Part 1, any machine (no device used): a recording backend made of the CPU backend's ops —
// graph_begin .. graph_end keep a tape of the forward's op calls (arguments copied, as a CUDA
// graph copies kernel arguments), graph_launch replays the tape, a memory hook called while
// recording spoils the tape (as the CUDA backend's pause does) — drives the model's logic:
//   - the first forward of a key eager, the second recorded and launched, later ones replayed;
//     every one bitwise equal (loss, logits, activations) to the plain CPU backend's forward;
//     new tokens through a held recording equal their eager forward; the recording's segments
//   - a new key (dscale, targets or not, the backend's generation, re-allocated activations):
//     eager first again, then a new recording
//   - a recording that fails: the forward is still right (eager), the model stays eager
//   - the backend refusing to record: eager, quietly; check_finite: never recorded
//   - the events a replayed forward fires (layer_fwd of layer 0, every layer's fwd_done, head)
//   - lanes (the backend offering 3): the recording is layer-major, one per layer, every
//     lane_use between lanes_fork and lanes_join and below the lanes opened, lanes opened
//     never while recording, every fork joined before graph_end; offering none (1): token-major,
//     one recording per MODEL_SEQ_GRAPH_TOKENS tokens; both bitwise the CPU's forward
//   - the initial weights (one pass, the parameter type written directly) bitwise those of the
//     per-element double -> parameter-type path, fp32 and fp64
// Part 2, where a CUDA device is usable (else a SKIP line): the CUDA backend's graphs on the
//   tiny model in bf16, sequential prefill at T = 300 (several recordings), B = 2: forwards and
//   backwards eager, recorded (on lanes: NSA_CUDA_LANES, default 8), replayed, replayed with
//   other tokens, after a generation change — logits, losses, activations and gradients bitwise
//   equal to the eager ones; a device allocation while recording makes graph_end return NULL and
//   leaves the stream usable, also with the lanes forked (the pause joins them).
// Exit 0 pass (part 2 may SKIP), 1 failure.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "kernels/cuda/cuda_launch.h"
#include "trainer/model.h"
#include "trainer/rng.h"

static int g_fail = 0;
#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (cond) {                                                                              \
            printf("PASS: ");                                                                    \
        } else {                                                                                 \
            printf("FAIL: ");                                                                    \
            g_fail++;                                                                            \
        }                                                                                        \
        printf(__VA_ARGS__);                                                                     \
        printf("\n");                                                                            \
        fflush(stdout);                                                                          \
    } while (0)

static int load_cfg(NsaConfig *cfg, const char **sets, int n) {
    char err[4096];
    if (config_load(cfg, "configs/tiny.json", sets, n, err, sizeof err)) {
        fprintf(stderr, "%s", err);
        return -1;
    }
    return 0;
}

static void random_batch(int32_t *in, int32_t *tg, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)rng_below(seed, 11, (uint64_t)i, (uint64_t)V);
        tg[i] = (int32_t)rng_below(seed, 12, (uint64_t)i, (uint64_t)V);
    }
}

// ---- what a forward leaves: loss, logits, losses, every layer's saved activations -------------
typedef struct {
    double loss;
    size_t bytes;
    unsigned char *data;
} Snap;

static void snap_add(Snap *s, const Backend *be, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    s->data = realloc(s->data, s->bytes + bytes);
    be->to_host(s->data + s->bytes, p, bytes);
    s->bytes += bytes;
}
static Snap snap(const Model *m, double loss) {
    Snap s = {loss, 0, NULL};
    const Backend *be = m->be;
    const size_t N = (size_t)m->B * m->T, AB = (size_t)be->act_bytes;
    const size_t HD = (size_t)m->H * m->D, GD = (size_t)m->G * m->D;
    snap_add(&s, be, m->logits, N * m->V * AB);
    snap_add(&s, be, m->losses, N * AB);
    for (int L = 0; L <= m->L; L++) snap_add(&s, be, m->res[L], N * m->C * AB);
    snap_add(&s, be, m->xf, N * m->C * AB);
    for (int L = 0; L < m->L; L++) {
        const LayerActs *a = &m->acts[L];
        snap_add(&s, be, a->xn1, N * m->C * AB);
        snap_add(&s, be, a->q, N * HD * AB);
        for (int b = 0; b < 3; b++) {
            snap_add(&s, be, a->k[b], N * GD * AB);
            snap_add(&s, be, a->v[b], N * GD * AB);
            snap_add(&s, be, a->o[b], N * HD * AB);
            snap_add(&s, be, a->lse[b], N * m->H * AB);
        }
        snap_add(&s, be, a->Kc, (size_t)m->B * m->geom.NC * GD * AB);
        snap_add(&s, be, a->sel_idx, N * m->G * m->cfg.n * sizeof(int32_t));
        snap_add(&s, be, a->gate, N * m->G * 3 * AB);
        snap_add(&s, be, a->attn_o, N * HD * AB);
        snap_add(&s, be, a->ffh, N * m->F * AB);
    }
    return s;
}
static int snap_eq(const Snap *a, const Snap *b) {
    double la = a->loss, lb = b->loss;
    return a->bytes == b->bytes && !memcmp(&la, &lb, sizeof la) && !memcmp(a->data, b->data, a->bytes);
}
static void snap_free(Snap *s) { free(s->data); s->data = NULL; s->bytes = 0; }

static unsigned char *grads(const Model *m) {
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    unsigned char *g = malloc(bytes);
    m->be->to_host(g, m->grad_mem, bytes);
    return g;
}

// ---- events -------------------------------------------------------------------------------------
static int g_ev[8];
static int g_ev_fwd_layer0_t0;
static void on_event(void *ctx, Model *m, int ev, int layer, int t) {
    (void)ctx; (void)m;
    if (ev >= 0 && ev < 8) g_ev[ev]++;
    if (ev == MODEL_EV_LAYER_FWD && layer == 0 && t == 0) g_ev_fwd_layer0_t0++;
}
static void ev_reset(void) { memset(g_ev, 0, sizeof g_ev); g_ev_fwd_layer0_t0 = 0; }

// =================================================================================================
// Part 1: the recording CPU backend
// =================================================================================================
enum { OP_EMB, OP_RMS, OP_MM, OP_KVSPLIT, OP_ROPE, OP_CAVG, OP_BGATH, OP_CMP, OP_SELBLK, OP_SEL, OP_WIN, OP_SILU,
       OP_GATE, OP_COMB, OP_ADDI, OP_SWIGLU, OP_XENT };
typedef struct {
    int op;
    const void *p[8];
    int64_t i[8];
    double d;
    NsaGeom g;
} Call;
typedef struct {
    Call *c;
    int n, cap;
    uint64_t gen;
} Tape;

static const Backend *R;   // the CPU backend
static Backend M;           // the recording one
static struct {
    int rec, broken, refuse, fail_next, launches, stale;
    uint64_t gen;
    Tape *cur;
    int lanes;   // lanes offered (lanes_open returns at most this many; 1: none)
} S;
// the model's use of the lanes: misuse counted in `bad`
static struct { int n, forked, uses, forks, opens, bad; } LN;

static void push(Call c) {
    Tape *t = S.cur;
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 1024;
        t->c = realloc(t->c, sizeof(Call) * (size_t)t->cap);
    }
    t->c[t->n++] = c;
}
#define REC(...)                                                                                   \
    do {                                                                                           \
        Call c_ = {__VA_ARGS__};                                                                   \
        push(c_);                                                                                  \
    } while (0)

static void w_emb(void *out, const int32_t *tok, const void *wte, int N, int C) {
    if (S.rec) REC(.op = OP_EMB, .p = {out, tok, wte}, .i = {N, C});
    else R->embedding_fwd(out, tok, wte, N, C);
}
static void w_rms(void *out, void *rstd, const void *inp, const void *w, int N, int C, double eps) {
    if (S.rec) REC(.op = OP_RMS, .p = {out, rstd, inp, w}, .i = {N, C}, .d = eps);
    else R->rmsnorm_fwd(out, rstd, inp, w, N, C, eps);
}
static void w_mm(void *out, int64_t ldo, const void *inp, int64_t ldi, const void *w, const void *bias, int Mr, int N, int K) {
    if (S.rec) REC(.op = OP_MM, .p = {out, inp, w, bias}, .i = {ldo, ldi, Mr, N, K});
    else R->matmul_fwd(out, ldo, inp, ldi, w, bias, Mr, N, K);
}
static void w_kvsplit(void *const *dst, const void *kv, const void *cs, int64_t r0, int64_t nr, int T, int G, int D) {
    if (S.rec) REC(.op = OP_KVSPLIT, .p = {dst[0], dst[1], dst[2], dst[3], dst[4], dst[5], kv, cs}, .i = {r0, nr, T, G, D});
    else R->kv_split_rope_fwd(dst, kv, cs, r0, nr, T, G, D);
}
static void w_rope(void *x, const void *cs, int B, int T, int t0, int Tn, int nh, int D) {
    if (S.rec) REC(.op = OP_ROPE, .p = {x, cs}, .i = {B, T, t0, Tn, nh, D});
    else R->rope_fwd(x, cs, B, T, t0, Tn, nh, D);
}
static void w_cavg(void *Kc, const void *k, const NsaGeom *g, int i0, int Ni) {
    if (S.rec) REC(.op = OP_CAVG, .p = {Kc, k}, .i = {i0, Ni}, .g = *g);
    else R->compress_avg_fwd(Kc, k, g, i0, Ni);
}
static void w_bgath(void *X, const void *k, const void *pe, const NsaGeom *g, int i0, int Ni) {
    if (S.rec) REC(.op = OP_BGATH, .p = {X, k, pe}, .i = {i0, Ni}, .g = *g);
    else R->block_gather_fwd(X, k, pe, g, i0, Ni);
}
static void w_cmp(void *o, void *lse, const void *q, const void *Kc, const void *Vc, const NsaGeom *g, int t0, int Tn) {
    if (S.rec) REC(.op = OP_CMP, .p = {o, lse, q, Kc, Vc}, .i = {t0, Tn}, .g = *g);
    else R->cmp_attn_fwd(o, lse, q, Kc, Vc, g, t0, Tn);
}
static void w_selblk(int32_t *idx, const void *q, const void *Kc, const void *lse, const NsaGeom *g, int t0, int Tn) {
    if (S.rec) REC(.op = OP_SELBLK, .p = {idx, q, Kc, lse}, .i = {t0, Tn}, .g = *g);
    else R->select_blocks(idx, q, Kc, lse, g, t0, Tn);
}
static void w_sel(void *o, void *lse, const void *q, const void *k, const void *v, const int32_t *idx, const NsaGeom *g,
                  int t0, int Tn) {
    if (S.rec) REC(.op = OP_SEL, .p = {o, lse, q, k, v, idx}, .i = {t0, Tn}, .g = *g);
    else R->sel_attn_fwd(o, lse, q, k, v, idx, g, t0, Tn);
}
static void w_win(void *o, void *lse, const void *q, const void *k, const void *v, const NsaGeom *g, int t0, int Tn) {
    if (S.rec) REC(.op = OP_WIN, .p = {o, lse, q, k, v}, .i = {t0, Tn}, .g = *g);
    else R->win_attn_fwd(o, lse, q, k, v, g, t0, Tn);
}
static void w_silu(void *out, const void *inp, int64_t n) {
    if (S.rec) REC(.op = OP_SILU, .p = {out, inp}, .i = {n});
    else R->silu_fwd(out, inp, n);
}
static void w_gate(void *gate, const void *lg, int64_t NG, int act) {
    if (S.rec) REC(.op = OP_GATE, .p = {gate, lg}, .i = {NG, act});
    else R->gate_act_fwd(gate, lg, NG, act);
}
static void w_comb(void *o, const void *gate, const void *a, const void *b, const void *c, int64_t N, int H, int G, int D) {
    if (S.rec) REC(.op = OP_COMB, .p = {o, gate, a, b, c}, .i = {N, H, G, D});
    else R->combine_fwd(o, gate, a, b, c, N, H, G, D);
}
static void w_addi(void *y, const void *x, int64_t n) {
    if (S.rec) REC(.op = OP_ADDI, .p = {y, x}, .i = {n});
    else R->add_inplace(y, x, n);
}
static void w_swiglu(void *h, const void *a, const void *b, int64_t n) {
    if (S.rec) REC(.op = OP_SWIGLU, .p = {h, a, b}, .i = {n});
    else R->swiglu_fwd(h, a, b, n);
}
static void w_xent(void *losses, void *dl, const void *logits, const int32_t *tg, int N, int V, double ds) {
    if (S.rec) REC(.op = OP_XENT, .p = {losses, dl, logits, tg}, .i = {N, V}, .d = ds);
    else R->xent_fwd_bwd(losses, dl, logits, tg, N, V, ds);
}

static void replay(const Tape *t) {
    for (int j = 0; j < t->n; j++) {
        const Call *c = &t->c[j];
        void *p[8];
        for (int k = 0; k < 8; k++) p[k] = (void *)c->p[k];
        const int64_t *i = c->i;
        switch (c->op) {
        case OP_EMB: R->embedding_fwd(p[0], p[1], p[2], (int)i[0], (int)i[1]); break;
        case OP_RMS: R->rmsnorm_fwd(p[0], p[1], p[2], p[3], (int)i[0], (int)i[1], c->d); break;
        case OP_MM: R->matmul_fwd(p[0], i[0], p[1], i[1], p[2], p[3], (int)i[2], (int)i[3], (int)i[4]); break;
        case OP_KVSPLIT: R->kv_split_rope_fwd(p, p[6], p[7], i[0], i[1], (int)i[2], (int)i[3], (int)i[4]); break;
        case OP_ROPE: R->rope_fwd(p[0], p[1], (int)i[0], (int)i[1], (int)i[2], (int)i[3], (int)i[4], (int)i[5]); break;
        case OP_CAVG: R->compress_avg_fwd(p[0], p[1], &c->g, (int)i[0], (int)i[1]); break;
        case OP_BGATH: R->block_gather_fwd(p[0], p[1], p[2], &c->g, (int)i[0], (int)i[1]); break;
        case OP_CMP: R->cmp_attn_fwd(p[0], p[1], p[2], p[3], p[4], &c->g, (int)i[0], (int)i[1]); break;
        case OP_SELBLK: R->select_blocks(p[0], p[1], p[2], p[3], &c->g, (int)i[0], (int)i[1]); break;
        case OP_SEL: R->sel_attn_fwd(p[0], p[1], p[2], p[3], p[4], p[5], &c->g, (int)i[0], (int)i[1]); break;
        case OP_WIN: R->win_attn_fwd(p[0], p[1], p[2], p[3], p[4], &c->g, (int)i[0], (int)i[1]); break;
        case OP_SILU: R->silu_fwd(p[0], p[1], i[0]); break;
        case OP_GATE: R->gate_act_fwd(p[0], p[1], i[0], (int)i[1]); break;
        case OP_COMB: R->combine_fwd(p[0], p[1], p[2], p[3], p[4], i[0], (int)i[1], (int)i[2], (int)i[3]); break;
        case OP_ADDI: R->add_inplace(p[0], p[1], i[0]); break;
        case OP_SWIGLU: R->swiglu_fwd(p[0], p[1], p[2], i[0]); break;
        case OP_XENT: R->xent_fwd_bwd(p[0], p[1], p[2], p[3], (int)i[0], (int)i[1], c->d); break;
        }
    }
}

// memory hooks: while recording they spoil the tape (the CUDA backend pauses the capture)
static void spoil(void) { if (S.rec) S.broken = 1; }
static void *m_alloc(size_t b) { spoil(); S.gen++; return R->alloc(b); }
static void m_free(void *p) { spoil(); S.gen++; R->free(p); }
static void m_zero(void *p, size_t b) { spoil(); R->zero(p, b); }
static void m_to_host(void *h, const void *d, size_t b) { spoil(); R->to_host(h, d, b); }
static void m_from_host(void *d, const void *h, size_t b) { spoil(); R->from_host(d, h, b); }
static void m_copy(void *d, const void *s, size_t b) { spoil(); R->copy(d, s, b); }
static void m_sync(void) { spoil(); R->sync(); }

static int g_begin(void) {
    if (S.refuse || S.rec) return 0;
    S.rec = 1;
    S.broken = 0;
    S.cur = calloc(1, sizeof(Tape));
    return 1;
}
static void *g_end(size_t *nodes, const char **why) {
    Tape *t = S.cur;
    if (LN.forked) LN.bad++;
    S.rec = 0;
    S.cur = NULL;
    if (nodes) *nodes = 0;
    if (S.broken || S.fail_next) {
        if (why) *why = S.fail_next ? "injected failure" : "a memory hook while recording";
        S.fail_next = 0;
        free(t->c);
        free(t);
        return NULL;
    }
    t->gen = S.gen;
    if (nodes) *nodes = (size_t)t->n;
    return t;
}
static void g_launch(void *h) {
    Tape *t = h;
    if (t->gen != S.gen) S.stale++;
    S.launches++;
    replay(t);
}
static void g_free(void *h) {
    Tape *t = h;
    if (!t) return;
    free(t->c);
    free(t);
}
static uint64_t g_generation(void) { return S.gen; }
static void l_track(void) {}
static int l_open(int n) {
    if (S.rec || LN.forked) LN.bad++;
    LN.opens++;
    LN.n = n < S.lanes ? n : S.lanes;
    if (LN.n < 1) LN.n = 1;
    return LN.n;
}
static void l_fork(void) {
    if (LN.forked || LN.n < 2) LN.bad++;
    LN.forked = 1;
    LN.forks++;
}
static void l_use(int l) {
    if (!LN.forked || l < 0 || l >= LN.n) LN.bad++;
    LN.uses++;
}
static void l_join(void) {
    if (!LN.forked) LN.bad++;
    LN.forked = 0;
}

static void make_mock(const Backend *cpu) {
    R = cpu;
    M = *cpu;
    M.name = "cpu-recording";
    M.embedding_fwd = w_emb; M.rmsnorm_fwd = w_rms; M.matmul_fwd = w_mm; M.kv_split_rope_fwd = w_kvsplit;
    M.rope_fwd = w_rope; M.compress_avg_fwd = w_cavg; M.block_gather_fwd = w_bgath; M.cmp_attn_fwd = w_cmp;
    M.select_blocks = w_selblk; M.sel_attn_fwd = w_sel; M.win_attn_fwd = w_win; M.silu_fwd = w_silu;
    M.gate_act_fwd = w_gate; M.combine_fwd = w_comb; M.add_inplace = w_addi; M.swiglu_fwd = w_swiglu;
    M.xent_fwd_bwd = w_xent;
    M.alloc = m_alloc; M.free = m_free; M.zero = m_zero; M.to_host = m_to_host; M.from_host = m_from_host;
    M.copy = m_copy; M.sync = m_sync;
    M.graph_begin = g_begin; M.graph_end = g_end; M.graph_launch = g_launch; M.graph_free = g_free;
    M.generation = g_generation;
    M.lanes_track = l_track; M.lanes_open = l_open; M.lanes_fork = l_fork; M.lane_use = l_use; M.lanes_join = l_join;
    S.gen = 1;
    S.lanes = 3;
}

static int new_model(Model *m, const NsaConfig *c, const Backend *be) {
    char err[512];
    if (model_init(m, c, be, err, sizeof err)) { fprintf(stderr, "model_init: %s\n", err); return -1; }
    m->keep_logits = 1;
    if (model_alloc_acts(m, c->batch_size, c->seq_len, err, sizeof err)) { fprintf(stderr, "%s\n", err); return -1; }
    model_init_weights(m, c->seed);
    return 0;
}

static Snap fwd(Model *m, const int32_t *in, const int32_t *tg, double ds) {
    double l = model_forward(m, in, tg, ds);
    return snap(m, l);
}

// the old initial-weights path, element by element: double, then rounded to the parameter type
static int init_matches_old(const Model *m, uint64_t seed) {
    const int pb = m->be->param_bytes;
    int bad = 0;
    for (int i = 0; i < m->n_params && !bad; i++) {
        const ParamInfo *p = &m->params[i];
        uint64_t stream = 0x1A17000ull + (uint64_t)i;
        double bound = p->init_kind == 3 ? p->init_a * sqrt(6.0 / (double)(p->shape[0] + (p->ndim > 1 ? p->shape[1] : 1))) : 0;
        for (int64_t e = 0; e < p->numel && !bad; e++) {
            double h;
            switch (p->init_kind) {
            case 0: h = 0; break;
            case 1: h = 1; break;
            case 2: h = p->init_a * rng_normal(seed, stream, (uint64_t)e); break;
            default: h = bound * (2.0 * rng_uniform(seed, stream, (uint64_t)e) - 1.0); break;
            }
            if (pb == 4) {
                float want = (float)h, got = ((const float *)m->param_mem)[p->offset + e];
                bad = memcmp(&want, &got, 4) != 0;
            } else {
                double got = ((const double *)m->param_mem)[p->offset + e];
                bad = memcmp(&h, &got, 8) != 0;
            }
            if (bad) printf("  %s[%lld] differs\n", p->name, (long long)e);
        }
    }
    return !bad;
}

static void part1(void) {
    printf("== part 1: the model's recording logic on a recording CPU backend\n");
    const char *sets[] = {"model.max_seq_len=512", "train.seq_len=300", "train.batch_size=2", "train.prefill=\"sequential\""};
    NsaConfig c;
    if (load_cfg(&c, sets, 4)) { g_fail++; return; }
    const Backend *cpu = backend_get("cpu", NULL, NULL);
    make_mock(cpu);
    const int N = c.batch_size * c.seq_len;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    int32_t *in2 = malloc(sizeof(int32_t) * N), *tg2 = malloc(sizeof(int32_t) * N);
    random_batch(in, tg, N, c.vocab_size, 1);
    random_batch(in2, tg2, N, c.vocab_size, 2);
    const double ds = 1.0 / N;

    // the reference: the plain CPU backend (no recording at all)
    Model ref;
    if (new_model(&ref, &c, cpu)) { g_fail++; return; }
    Snap r1 = fwd(&ref, in, tg, ds), r2 = fwd(&ref, in2, tg2, ds), r3 = fwd(&ref, in, tg, 0.5 * ds);
    Snap r4 = fwd(&ref, in, NULL, ds);
    CHECK(ref.seq_graph.captures == 0 && ref.seq_graph.eager == 4, "cpu backend: every forward eager (%d eager, %d recorded)",
          ref.seq_graph.eager, ref.seq_graph.captures);
    CHECK(init_matches_old(&ref, c.seed), "initial weights (fp32): bitwise the per-element double -> float path");

    Model m;
    if (new_model(&m, &c, &M)) { g_fail++; return; }
    m.event = on_event;
    ev_reset();
    Snap a = fwd(&m, in, tg, ds);
    CHECK(snap_eq(&a, &r1) && m.seq_graph.eager == 1 && m.seq_graph.captures == 0 && g_ev[MODEL_EV_LAYER_FWD] == m.L * m.T,
          "forward 1: eager (%d layer_fwd events), bitwise the CPU's", g_ev[MODEL_EV_LAYER_FWD]);
    ev_reset();
    CHECK(m.seq_graph.lanes == 3 && LN.opens == 1 && LN.forks == 0, "forward 1 opened the lanes (%d), used none",
          m.seq_graph.lanes);
    Snap b = fwd(&m, in, tg, ds);
    const int nseg = (c.seq_len + MODEL_SEQ_GRAPH_TOKENS - 1) / MODEL_SEQ_GRAPH_TOKENS;
    CHECK(snap_eq(&b, &r1) && m.seq_graph.captures == 1 && m.seq_graph.n == m.L && m.L > 1 && S.launches == m.L,
          "forward 2: recorded on lanes, one recording per layer (%d recordings, %zu calls) and launched, bitwise the "
          "CPU's", m.seq_graph.n, m.seq_graph.nodes);
    // per layer: the projections forked and joined, the attention and the rest forked and joined; a
    // lane per token and stage (the embedding in layer 0's first stage, the head in the last's second)
    CHECK(LN.bad == 0 && LN.forks == 2 * m.L && LN.uses == 2 * m.L * m.T && !LN.forked,
          "lanes used as the backend requires (forks %d, lane_use %d, misuse %d)", LN.forks, LN.uses, LN.bad);
    CHECK(g_ev[MODEL_EV_LAYER_FWD] == 1 && g_ev_fwd_layer0_t0 == 1 && g_ev[MODEL_EV_LAYER_FWD_DONE] == m.L &&
          g_ev[MODEL_EV_HEAD] == 1, "recorded forward's events: layer_fwd %d (layer 0, t 0: %d), fwd_done %d, head %d",
          g_ev[MODEL_EV_LAYER_FWD], g_ev_fwd_layer0_t0, g_ev[MODEL_EV_LAYER_FWD_DONE], g_ev[MODEL_EV_HEAD]);
    Snap cc = fwd(&m, in, tg, ds);
    CHECK(snap_eq(&cc, &r1) && m.seq_graph.replays == 1 && m.seq_graph.captures == 1, "forward 3: replayed, bitwise the CPU's");
    Snap d = fwd(&m, in2, tg2, ds);
    CHECK(snap_eq(&d, &r2) && m.seq_graph.replays == 2, "forward 4: other tokens through the recording, bitwise their eager forward");
    CHECK(S.stale == 0, "no recording launched at another generation");
    // a new dscale: eager, then recorded again
    Snap e1 = fwd(&m, in, tg, 0.5 * ds), e2 = fwd(&m, in, tg, 0.5 * ds);
    CHECK(snap_eq(&e1, &r3) && snap_eq(&e2, &r3) && m.seq_graph.eager == 2 && m.seq_graph.captures == 2,
          "dscale changed: eager, then recorded again (eager %d, recorded %d)", m.seq_graph.eager, m.seq_graph.captures);
    // no targets: another key
    Snap f1 = fwd(&m, in, NULL, ds), f2 = fwd(&m, in, NULL, ds), f3 = fwd(&m, in, NULL, ds);
    CHECK(snap_eq(&f1, &r4) && snap_eq(&f2, &r4) && snap_eq(&f3, &r4) && m.seq_graph.eager == 3 && m.seq_graph.captures == 3,
          "without targets: eager, recorded, replayed, bitwise the CPU's");
    // the backend's generation moves (an allocation): eager again
    void *x = M.alloc(64);
    M.free(x);
    Snap g1 = fwd(&m, in, NULL, ds);
    CHECK(snap_eq(&g1, &r4) && m.seq_graph.eager == 4, "backend generation changed: eager again");
    // backward after a replayed forward: the gradients of the eager one
    model_zero_grad(&ref);
    fwd(&ref, in, tg, ds);
    model_backward(&ref);
    unsigned char *gr = grads(&ref);
    fwd(&m, in, tg, ds);   // eager (new key)
    fwd(&m, in, tg, ds);   // recorded
    model_zero_grad(&m);
    Snap h = fwd(&m, in, tg, ds);   // replayed
    model_backward(&m);
    unsigned char *gm = grads(&m);
    CHECK(snap_eq(&h, &r1) && !memcmp(gr, gm, (size_t)m.n_elems * 4) && m.seq_graph.replays >= 4,
          "backward after a replayed forward: bitwise the eager gradients");
    free(gr);
    free(gm);
    // re-allocated activations: the recordings dropped
    char err[256];
    model_alloc_acts(&m, c.batch_size, 64, err, sizeof err);
    CHECK(m.seq_graph.n == 0 && m.seq_graph.graphs == NULL, "activations re-allocated: the recordings dropped");
    model_alloc_acts(&m, c.batch_size, c.seq_len, err, sizeof err);
    // check_finite: batched path, never recorded
    const int caps = m.seq_graph.captures;
    m.check_finite = 1;
    for (int k = 0; k < 3; k++) fwd(&m, in, tg, ds);
    m.check_finite = 0;
    CHECK(m.seq_graph.captures == caps, "check_finite: never recorded");
    // a failed recording: eager result, eager from then on
    S.fail_next = 1;
    Snap k1 = fwd(&m, in, tg, ds), k2 = fwd(&m, in, tg, ds), k3 = fwd(&m, in, tg, ds), k4 = fwd(&m, in, tg, ds);
    CHECK(snap_eq(&k1, &r1) && snap_eq(&k2, &r1) && snap_eq(&k3, &r1) && snap_eq(&k4, &r1) && m.seq_graph.off == 1 &&
          m.seq_graph.failures == 1 && m.seq_graph.captures == caps,
          "failed recording: every forward right (eager), the model stays eager (failures %d)", m.seq_graph.failures);
    model_free(&m);
    // refused: quietly eager
    Model q;
    if (new_model(&q, &c, &M)) { g_fail++; return; }
    S.refuse = 1;
    for (int k = 0; k < 3; k++) fwd(&q, in, tg, ds);
    S.refuse = 0;
    CHECK(q.seq_graph.off == 2 && q.seq_graph.failures == 0 && q.seq_graph.eager == 3, "backend refuses to record: eager, no failure");
    model_free(&q);
    // no lanes offered: token-major, one recording per MODEL_SEQ_GRAPH_TOKENS tokens
    S.lanes = 1;
    Model t;
    if (new_model(&t, &c, &M)) { g_fail++; return; }
    const int launches = S.launches, forks = LN.forks;
    Snap t1 = fwd(&t, in, tg, ds), t2 = fwd(&t, in, tg, ds);
    CHECK(snap_eq(&t1, &r1) && snap_eq(&t2, &r1) && t.seq_graph.lanes == 1 && t.seq_graph.captures == 1 &&
          t.seq_graph.n == nseg && nseg > 1 && S.launches - launches == nseg && LN.forks == forks,
          "no lanes: recorded token-major (%d recordings of %d tokens), bitwise the CPU's", t.seq_graph.n,
          MODEL_SEQ_GRAPH_TOKENS);
    snap_free(&t1);
    snap_free(&t2);
    model_free(&t);
    S.lanes = 3;
    Snap *all[] = {&r1, &r2, &r3, &r4, &a, &b, &cc, &d, &e1, &e2, &f1, &f2, &f3, &g1, &h, &k1, &k2, &k3, &k4};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) snap_free(all[i]);

    // initial weights, fp32 and fp64
    for (int w = 0; w < 2; w++) {
        const Backend *be = backend_get(w ? "cpu64" : "cpu", NULL, NULL);
        Model a1;
        if (model_init(&a1, &c, be, err, sizeof err)) { g_fail++; return; }
        model_init_weights(&a1, c.seed);
        CHECK(init_matches_old(&a1, c.seed), "initial weights (%s): one pass and the per-element path bitwise equal",
              w ? "fp64" : "fp32");
        model_free(&a1);
    }
    model_free(&ref);
    free(in); free(tg); free(in2); free(tg2);
}

// =================================================================================================
// Part 2: the CUDA backend
// =================================================================================================
static void part2(void) {
    printf("== part 2: CUDA graphs of the sequential forward\n");
    const char *why = NULL;
    const Backend *be = backend_get("cuda", "bf16", &why);
    if (!be) {
        printf("SKIP: part 2 (CUDA): %s\n", why ? why : "no CUDA backend");
        return;
    }
    const char *sets[] = {"model.max_seq_len=512", "train.seq_len=300", "train.batch_size=2", "train.prefill=\"sequential\"",
                          "train.backend=\"cuda\""};
    NsaConfig c;
    if (load_cfg(&c, sets, 5)) { g_fail++; return; }
    const int N = c.batch_size * c.seq_len;
    int32_t *in = malloc(sizeof(int32_t) * N), *tg = malloc(sizeof(int32_t) * N);
    int32_t *in2 = malloc(sizeof(int32_t) * N), *tg2 = malloc(sizeof(int32_t) * N);
    random_batch(in, tg, N, c.vocab_size, 1);
    random_batch(in2, tg2, N, c.vocab_size, 2);
    const double ds = 1.0 / N;
    Model m;
    if (new_model(&m, &c, be)) { g_fail++; return; }
    const size_t gbytes = (size_t)m.n_elems * 4;
    // forward + backward, four times: eager (sizes the scratch), eager (the backward's first
    // allocations moved the generation), recorded, replayed
    Snap s[4];
    unsigned char *g[4];
    for (int k = 0; k < 4; k++) {
        model_zero_grad(&m);
        s[k] = fwd(&m, in, tg, ds);
        model_backward(&m);
        g[k] = grads(&m);
    }
    printf("  counters: eager %d, recorded %d (%d graphs, %zu nodes, %.3f s), replayed %d\n", m.seq_graph.eager,
           m.seq_graph.captures, m.seq_graph.n, m.seq_graph.nodes, m.seq_graph.capture_s, m.seq_graph.replays);
    const int nl = m.seq_graph.lanes;
    const int nseg = nl > 1 ? m.L : (c.seq_len + MODEL_SEQ_GRAPH_TOKENS - 1) / MODEL_SEQ_GRAPH_TOKENS;
    CHECK(m.seq_graph.captures == 1 && m.seq_graph.replays == 1 && m.seq_graph.n == nseg && m.seq_graph.failures == 0,
          "forwards 3 and 4 ran as graphs (%d recordings of T = %d, %d lanes: %s)", nseg, c.seq_len, nl,
          nl > 1 ? "layer-major" : "token-major");
    const char *lanes_env = getenv("NSA_CUDA_LANES");
    CHECK(lanes_env ? nl == atoi(lanes_env) : nl == 8, "lanes opened: %d (NSA_CUDA_LANES %s)", nl, lanes_env ? lanes_env : "unset: 8");
    for (int k = 1; k < 4; k++)
        CHECK(snap_eq(&s[k], &s[0]) && !memcmp(g[k], g[0], gbytes),
              "forward+backward %d (%s): loss, logits, activations, gradients bitwise the eager forward 1's", k + 1,
              k == 1 ? "eager" : k == 2 ? "recorded" : "replayed");
    // other tokens through the recording vs their eager forward (a generation change forces it)
    Snap o1 = fwd(&m, in2, tg2, ds);
    const int rep = m.seq_graph.replays;
    nsa_cuda_set_sel_pack(1);   // the default again, but a new generation: the next forward is eager
    Snap o2 = fwd(&m, in2, tg2, ds);
    CHECK(rep == 2 && m.seq_graph.eager == 3 && snap_eq(&o1, &o2),
          "other tokens: replayed == eager after a generation change, bitwise (replays %d, eager %d)", rep, m.seq_graph.eager);
    // the backend's pause: an allocation while recording spoils the recording, the stream stays usable
    if (be->graph_begin()) {
        void *p = be->alloc(1 << 20);
        const char *w = NULL;
        size_t nodes = 0;
        void *gr = be->graph_end(&nodes, &w);
        CHECK(gr == NULL && w && strstr(w, "allocation"), "an allocation while recording: graph_end NULL (%s)", w ? w : "-");
        if (gr) be->graph_free(gr);
        int32_t probe[4] = {1, 2, 3, 4}, back[4] = {0};
        be->from_host(p, probe, sizeof probe);
        be->to_host(back, p, sizeof back);
        CHECK(!memcmp(probe, back, sizeof probe), "the stream works after the abandoned recording");
        be->free(p);
    } else {
        CHECK(0, "graph_begin refused (NSA_CUDA_GRAPH=0 in the environment?)");
    }
    // the same with the lanes forked: the pause joins them, graph_end NULL, the stream usable
    if (nl > 1 && be->graph_begin()) {
        be->lanes_fork();
        be->lane_use(nl - 1);
        void *p = be->alloc(1 << 20);
        be->lanes_join();
        const char *w = NULL;
        void *gr = be->graph_end(NULL, &w);
        CHECK(gr == NULL && w && strstr(w, "allocation"), "an allocation on lane %d while recording: graph_end NULL (%s)",
              nl - 1, w ? w : "-");
        if (gr) be->graph_free(gr);
        int32_t probe[4] = {5, 6, 7, 8}, back[4] = {0};
        be->from_host(p, probe, sizeof probe);
        be->to_host(back, p, sizeof back);
        CHECK(!memcmp(probe, back, sizeof probe), "the stream works after the abandoned recording on lanes");
        be->free(p);
        // and the recorded forward still replays bitwise afterwards (a new generation: eager, record, replay)
        Snap z[3];
        for (int k = 0; k < 3; k++) z[k] = fwd(&m, in2, tg2, ds);
        CHECK(snap_eq(&z[0], &o2) && snap_eq(&z[1], &o2) && snap_eq(&z[2], &o2) && m.seq_graph.failures == 0,
              "after it: eager, recorded, replayed forwards bitwise equal");
        for (int k = 0; k < 3; k++) snap_free(&z[k]);
    }
    for (int k = 0; k < 4; k++) { snap_free(&s[k]); free(g[k]); }
    snap_free(&o1);
    snap_free(&o2);
    model_free(&m);
    free(in); free(tg); free(in2); free(tg2);
}

int main(void) {
    part1();
    part2();
    if (g_fail) printf("test_seq_graph: %d FAILED\n", g_fail);
    else printf("test_seq_graph: all checks passed\n");
    return g_fail ? 1 : 0;
}
