// trainer/model.c — the NSA decoder's graph on top of the op table.
//
// One block (DESIGN 2-3), N = B*T rows, shapes in model.h:
//   xn1 = RMSNorm(x)                       q = RoPE(xn1 Wq^T)
//   k_b = RoPE(xn1 Wk_b^T), v_b = xn1 Wv_b^T   for b in {cmp, sel, win}
//     (all three branches in use: ONE GEMM xn1 [Wk_cmp; Wv_cmp; ...; Wv_win]^T into
//      kv_scratch, then kv_split_rope_fwd; its backward kv_gather_rope_bwd + ONE
//      matmul_bwd: see "The fused K/V projection" below)
//   Kc, Vc = phi(k_cmp), phi(v_cmp)        o_cmp, lse_cmp = CmpAttn(q, Kc, Vc)
//   sel_idx = TopN(q, Kc, lse_cmp)         o_sel = SelAttn(q, k_sel, v_sel, sel_idx)
//   o_win = WinAttn(q, k_win, v_win)       gate = act(fc2(SiLU(fc1(xn1))))
//   x_mid = x + Wo · sum_b gate_b o_b      x_out = x_mid + Wd · SwiGLU(Wg xn2, Wu xn2)
//
// Forward is written once over a row range [t0, t0+Tn) of every sequence:
// batched prefill calls it with the whole sequence, sequential prefill (the
// decode algorithm: token by token, each block's caches of keys, compressed
// blocks and selections growing as tokens arrive) with one token at a time.
// Every op is row-independent (kernels/ops.h), so the two agree bit for bit and
// share one backward.
//
// Gradient checkpointing over layers [a, b): those layers keep only their input
// (the residual stream) and run their forward again inside backward, into one
// shared scratch; the recomputation is the same deterministic code on the same
// inputs, so gradients are bitwise equal to no checkpointing.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"
#include "common/util.h"
#include "common/envparse.h"
#include "trainer/model.h"
#include "trainer/rng.h"

// ---- small helpers ----------------------------------------------------------------

static void *eoff(const void *base, int64_t elems, int bytes) {
    return base ? (char *)base + elems * bytes : NULL;
}
#define AOFF(m, p, e) eoff((p), (e), (m)->be->act_bytes)

void *model_param_ptr(const Model *m, int id) {
    return id < 0 ? NULL : eoff(m->param_mem, m->params[id].offset, m->be->param_bytes);
}
void *model_grad_ptr(const Model *m, int id) {
    return id < 0 ? NULL : eoff(m->grad_mem, m->params[id].offset, m->be->param_bytes);
}
#define W(m, L, slot) model_param_ptr((m), (m)->lid[L][slot])
#define DW(m, L, slot) model_grad_ptr((m), (m)->lid[L][slot])

int model_find_param(const Model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

static void grad_ready(Model *m, int id) {
    if (id >= 0 && m->grad_ready && !(m->faults && m->fault_hooks->grad_dropped(m, id)))
        m->grad_ready(m->grad_ready_ctx, id);
}
// diagnostics hook (trainer/train.c); a pointer test when off
#define EVENT(m, ev, L, t) do { if ((m)->event) (m)->event((m)->event_ctx, (m), (ev), (L), (t)); } while (0)

// ---- parameter table ----------------------------------------------------------

enum { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_XAVIER };
typedef struct { int kind; double a; } InitSpec;

static int add_param(Model *m, int layer, int decay, int ndim, int64_t s0, int64_t s1,
                     InitSpec init, const char *fmt, ...) __attribute__((format(printf, 8, 9)));

static int add_param(Model *m, int layer, int decay, int ndim, int64_t s0, int64_t s1,
                     InitSpec init, const char *fmt, ...) {
    ParamInfo *p = &m->params[m->n_params];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->name, sizeof p->name, fmt, ap);
    va_end(ap);
    p->ndim = ndim;
    p->shape[0] = s0;
    p->shape[1] = ndim > 1 ? s1 : 1;
    p->numel = s0 * (ndim > 1 ? s1 : 1);
    p->offset = m->n_elems;
    p->layer = layer;
    p->decay = decay;
    p->init_kind = init.kind;
    p->init_a = init.a;
    m->n_elems += p->numel;
    return m->n_params++;
}

static void build_params(Model *m) {
    const NsaConfig *c = &m->cfg;
    int maxp = 3 + c->n_layers * LP_COUNT;
    m->params = xcalloc((size_t)maxp, sizeof(ParamInfo));
    m->lid = xmalloc(sizeof(*m->lid) * (size_t)c->n_layers);
    const int C = m->C, H = m->H, G = m->G, D = m->D, F = m->F, V = m->V, gh = m->gh;
    const InitSpec nrm = {INIT_NORMAL, 0.02}, one = {INIT_ONE, 0}, zero = {INIT_ZERO, 0};
    const InitSpec proj_out = {INIT_NORMAL, 0.02 / sqrt(2.0 * c->n_layers)};  // GPT-2 residual scaling
    const InitSpec xav = {INIT_XAVIER, 1.0}, gate_fc2 = {INIT_XAVIER, 0.1};   // DESIGN: fc2 gain 0.1, bias 0
    m->id_tok_emb = add_param(m, -1, 1, 2, V, C, nrm, "tok_emb.weight");
    for (int L = 0; L < c->n_layers; L++) {
        int *id = m->lid[L];
        for (int s = 0; s < LP_COUNT; s++) id[s] = -1;
        id[LP_ATTN_NORM] = add_param(m, L, 0, 1, C, 1, one, "blocks.%d.attn_norm.weight", L);
        id[LP_WQ] = add_param(m, L, 1, 2, H * D, C, nrm, "blocks.%d.attn.q_proj.weight", L);
        for (int b = 0; b < 3; b++) {
            id[LP_WK_CMP + 2 * b] = add_param(m, L, 1, 2, G * D, C, nrm, "blocks.%d.attn.k_proj_%s.weight", L, nsa_branch_name(b));
            id[LP_WV_CMP + 2 * b] = add_param(m, L, 1, 2, G * D, C, nrm, "blocks.%d.attn.v_proj_%s.weight", L, nsa_branch_name(b));
        }
        if (c->phi == NSA_PHI_MLP) {
            static const char *kv[2] = {"k", "v"};
            for (int j = 0; j < 2; j++) {
                int base = j == 0 ? LP_CK_PE : LP_CV_PE;
                id[base + 0] = add_param(m, L, 0, 2, c->l, D, nrm, "blocks.%d.attn.cmp_%s.pos_emb", L, kv[j]);
                id[base + 1] = add_param(m, L, 1, 2, D, (int64_t)c->l * D, xav, "blocks.%d.attn.cmp_%s.fc1.weight", L, kv[j]);
                id[base + 2] = add_param(m, L, 0, 1, D, 1, zero, "blocks.%d.attn.cmp_%s.fc1.bias", L, kv[j]);
                id[base + 3] = add_param(m, L, 1, 2, D, D, xav, "blocks.%d.attn.cmp_%s.fc2.weight", L, kv[j]);
                id[base + 4] = add_param(m, L, 0, 1, D, 1, zero, "blocks.%d.attn.cmp_%s.fc2.bias", L, kv[j]);
            }
        }
        id[LP_GATE_FC1_W] = add_param(m, L, 1, 2, gh, C, nrm, "blocks.%d.attn.gate.fc1.weight", L);
        id[LP_GATE_FC1_B] = add_param(m, L, 0, 1, gh, 1, zero, "blocks.%d.attn.gate.fc1.bias", L);
        id[LP_GATE_FC2_W] = add_param(m, L, 1, 2, 3 * G, gh, gate_fc2, "blocks.%d.attn.gate.fc2.weight", L);
        id[LP_GATE_FC2_B] = add_param(m, L, 0, 1, 3 * G, 1, zero, "blocks.%d.attn.gate.fc2.bias", L);
        id[LP_WO] = add_param(m, L, 1, 2, C, H * D, proj_out, "blocks.%d.attn.o_proj.weight", L);
        id[LP_MLP_NORM] = add_param(m, L, 0, 1, C, 1, one, "blocks.%d.mlp_norm.weight", L);
        id[LP_W_GATE] = add_param(m, L, 1, 2, F, C, nrm, "blocks.%d.mlp.gate_proj.weight", L);
        id[LP_W_UP] = add_param(m, L, 1, 2, F, C, nrm, "blocks.%d.mlp.up_proj.weight", L);
        id[LP_W_DOWN] = add_param(m, L, 1, 2, C, F, proj_out, "blocks.%d.mlp.down_proj.weight", L);
    }
    // The fused K/V projection needs the six K/V weights of a layer to be one [6*G*D, C]
    // weight (and so their gradients one [6*G*D, C] gradient): consecutive, unpadded.
    for (int L = 0; L < c->n_layers; L++)
        for (int s = LP_WK_CMP + 1; s <= LP_WV_WIN; s++) {
            const ParamInfo *p = &m->params[m->lid[L][s]], *q = &m->params[m->lid[L][s - 1]];
            if (p->offset != q->offset + q->numel || p->numel != (int64_t)G * D * C) {
                fprintf(stderr, "model.c: %s does not follow %s in the parameter buffer: the fused K/V "
                        "projection needs the six K/V weights of a layer consecutive\n", p->name, q->name);
                abort();
            }
        }
    m->id_norm_f = add_param(m, -1, 0, 1, C, 1, one, "norm_f.weight");
    m->id_lm_head = c->tie_embeddings ? m->id_tok_emb
                                      : add_param(m, -1, 1, 2, V, C, nrm, "lm_head.weight");
}

// The dimensions and the parameter table of a config (no backend, nothing allocated).
static void model_shape(Model *m, const NsaConfig *cfg) {
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->C = cfg->dim; m->L = cfg->n_layers; m->H = cfg->n_heads; m->G = cfg->n_kv_heads;
    m->D = cfg->head_dim; m->F = cfg->ffn_dim; m->V = cfg->vocab_size;
    m->gh = cfg->gate_hidden > 0 ? cfg->gate_hidden : (cfg->dim / 4 > 0 ? cfg->dim / 4 : 1);
    int fb = cfg->force_branch;
    for (int b = 0; b < 3; b++) m->used[b] = nsa_gated(fb) || fb == b;
    m->cmp_needed = m->used[NSA_BR_CMP] || m->used[NSA_BR_SEL];  // selection scores need p_cmp
    build_params(m);
}

int model_init(Model *m, const NsaConfig *cfg, const Backend *be, char *err, size_t errlen) {
    // the fused K/V projection when every branch's keys and values are computed
    int kvf = 1;   // NSA_KV_FUSED=0: one K/V projection per branch (the comparison path)
    if (nsa_env_int("NSA_KV_FUSED", 0, 1, &kvf, err, errlen) < 0) {
        memset(m, 0, sizeof *m);
        return -2;
    }
    model_shape(m, cfg);
    m->be = be;
    m->kv_fused = m->used[0] && m->used[1] && m->used[2] && kvf;
    m->param_bytes_total = (size_t)m->n_elems * be->param_bytes * 2;
    m->param_mem = be->alloc((size_t)m->n_elems * be->param_bytes);
    m->grad_mem = be->alloc((size_t)m->n_elems * be->param_bytes);
    if (!m->param_mem || !m->grad_mem) {
        snprintf(err, errlen, "cannot allocate %lld parameters on backend %s",
                 (long long)m->n_elems, be->name);
        return -1;
    }
    return 0;
}

void model_params_changed(Model *m) {
    if (m->be->params_changed) m->be->params_changed(m->param_mem, m->n_elems);
}

// ---- initial weights ------------------------------------------------------------------
// Every element is a pure function of (seed, parameter index, element) (DESIGN 2), computed in
// double and rounded once to the parameter type: the same value whatever computes it, in any
// order, on any number of threads. The host writes the parameter type directly (float, or
// double for cpu64) into a buffer uploaded in a few large copies — not a double per element
// converted again one by one and one synchronous copy per tensor.

// Elements [c0, c1) of the parameter buffer into dst (element c0 at dst[0]), as pbytes-wide
// values (4: float, 8: double).
static void init_values(const ParamInfo *params, int n_params, uint64_t seed, int64_t c0, int64_t c1, void *dst,
                        int pbytes) {
    for (int i = 0; i < n_params; i++) {
        const ParamInfo *p = &params[i];
        const int64_t e0 = c0 > p->offset ? c0 - p->offset : 0;
        const int64_t e1 = c1 < p->offset + p->numel ? c1 - p->offset : p->numel;
        if (e0 >= e1) continue;
        InitSpec s = {p->init_kind, p->init_a};
        // The stream is the parameter's index in the stable order, so a tensor's
        // values do not depend on the backend, the precision or the build.
        uint64_t stream = 0x1A17000ull + (uint64_t)i;
        double bound = s.kind == INIT_XAVIER
                           ? s.a * sqrt(6.0 / (double)(p->shape[0] + (p->ndim > 1 ? p->shape[1] : 1)))
                           : 0;
        float *df = (float *)dst + (p->offset + e0 - c0);
        double *dd = (double *)dst + (p->offset + e0 - c0);
        // every element is a pure function of (seed, stream, e): threads change
        // nothing but the time (157 M draws for m7c_125m took ~5 s on one core)
#pragma omp parallel for schedule(static) if (e1 - e0 > 65536)
        for (int64_t e = e0; e < e1; e++) {
            double h;
            switch (s.kind) {
            case INIT_ZERO: h = 0; break;
            case INIT_ONE: h = 1; break;
            case INIT_NORMAL: h = s.a * rng_normal(seed, stream, (uint64_t)e); break;
            default: h = bound * (2.0 * rng_uniform(seed, stream, (uint64_t)e) - 1.0); break;
            }
            if (pbytes == 4) df[e - e0] = (float)h;   // the rounding param_from_f64 does
            else dd[e - e0] = h;
        }
    }
}

// chunks of the parameter buffer computed and uploaded at a time (host memory bounded)
#define INIT_CHUNK_ELEMS ((int64_t)16 << 20)

void model_init_weights(Model *m, uint64_t seed) {
    const int pb = m->be->param_bytes;
    if (pb == 4 || pb == 8) {
        const int64_t chunk = m->n_elems < INIT_CHUNK_ELEMS ? m->n_elems : INIT_CHUNK_ELEMS;
        void *h = xmalloc((size_t)(chunk > 0 ? chunk : 1) * (size_t)pb);
        for (int64_t c0 = 0; c0 < m->n_elems; c0 += chunk) {
            const int64_t c1 = c0 + chunk < m->n_elems ? c0 + chunk : m->n_elems;
            init_values(m->params, m->n_params, seed, c0, c1, h, pb);
            m->be->from_host((char *)m->param_mem + c0 * pb, h, (size_t)(c1 - c0) * (size_t)pb);
        }
        free(h);
    } else {   // a parameter type of another width: through the backend's conversion, per tensor
        int64_t maxn = 0;
        for (int i = 0; i < m->n_params; i++) if (m->params[i].numel > maxn) maxn = m->params[i].numel;
        double *h = xmalloc(sizeof(double) * (size_t)(maxn > 0 ? maxn : 1));
        for (int i = 0; i < m->n_params; i++) {
            const ParamInfo *p = &m->params[i];
            init_values(m->params, m->n_params, seed, p->offset, p->offset + p->numel, h, 8);
            m->be->param_from_f64(model_param_ptr(m, i), h, p->numel);
        }
        free(h);
    }
    model_params_changed(m);
}

void model_expected_unused(const Model *m, uint8_t *out) {
    memset(out, 0, (size_t)m->n_params);
    if (nsa_gated(m->cfg.force_branch)) return;
    for (int L = 0; L < m->L; L++) {
        const int *id = m->lid[L];
        for (int s = LP_GATE_FC1_W; s <= LP_GATE_FC2_B; s++) out[id[s]] = 1;   // gate bypassed
        for (int b = 0; b < 3; b++) {
            if (m->used[b]) continue;
            out[id[LP_WK_CMP + 2 * b]] = 1;
            out[id[LP_WV_CMP + 2 * b]] = 1;
            if (b == NSA_BR_CMP)   // the compressor only reaches the loss through o_cmp
                for (int s = LP_CK_PE; s <= LP_CV_FC2_B; s++) if (id[s] >= 0) out[id[s]] = 1;
        }
    }
}

// ---- activations ------------------------------------------------------------------

// Every activation buffer goes on the model's list so that a resize frees all.
static void *act_alloc(Model *m, int64_t elems, int bytes) {
    size_t sz = (size_t)(elems > 0 ? elems : 1) * (size_t)bytes;
    void *p = m->be->alloc(sz);
    if (m->n_allocs == m->cap_allocs) {
        m->cap_allocs = m->cap_allocs ? 2 * m->cap_allocs : 64;
        m->allocs = xrealloc(m->allocs, sizeof(void *) * (size_t)m->cap_allocs);
    }
    m->allocs[m->n_allocs++] = p;
    m->act_bytes += sz;
    return p;
}

void *model_alloc_tracked(Model *m, size_t bytes) { return act_alloc(m, (int64_t)bytes, 1); }

static void seq_graph_drop(Model *m);

static void free_acts(Model *m) {
    seq_graph_drop(m);   // a recording holds the buffers' addresses
    m->seq_graph.have_last = 0;
    m->acts_gen++;
    for (int i = 0; i < m->n_allocs; i++) m->be->free(m->allocs[i]);
    m->n_allocs = 0;
    free(m->res); m->res = NULL;
    free(m->acts); m->acts = NULL;
    m->act_bytes = 0;
    m->kv_scratch = NULL;
    m->B = m->T = 0;
}

static int in_ckpt(const Model *m, int L) { return L >= m->cfg.ckpt_begin && L < m->cfg.ckpt_end; }

static void alloc_layer_acts(Model *m, LayerActs *a) {
    const int64_t N = (int64_t)m->B * m->T;
    const int H = m->H, G = m->G, D = m->D, C = m->C, F = m->F, n = m->cfg.n;
    const int AB = m->be->act_bytes;
    const int64_t ncg = (int64_t)m->B * m->geom.NC * G;   // compressed rows
    memset(a, 0, sizeof *a);
    a->xn1 = act_alloc(m, N * C, AB);
    a->rstd1 = act_alloc(m, N, AB);
    a->q = act_alloc(m, N * H * D, AB);
    for (int b = 0; b < 3; b++) {
        int computed = b == NSA_BR_CMP ? m->cmp_needed : m->used[b];
        if (!computed) continue;
        a->k[b] = act_alloc(m, N * G * D, AB);
        a->v[b] = act_alloc(m, N * G * D, AB);
        a->o[b] = act_alloc(m, N * H * D, AB);
        a->lse[b] = act_alloc(m, N * H, AB);
    }
    if (m->cmp_needed) {
        a->Kc = act_alloc(m, ncg * D, AB);
        a->Vc = act_alloc(m, ncg * D, AB);
        if (m->cfg.phi == NSA_PHI_MLP) {
            a->Xk = act_alloc(m, ncg * m->cfg.l * D, AB);
            a->Xv = act_alloc(m, ncg * m->cfg.l * D, AB);
            a->Hk_pre = act_alloc(m, ncg * D, AB);
            a->Hv_pre = act_alloc(m, ncg * D, AB);
            a->Hk = act_alloc(m, ncg * D, AB);
            a->Hv = act_alloc(m, ncg * D, AB);
        }
    }
    if (m->used[NSA_BR_SEL]) a->sel_idx = act_alloc(m, N * G * n, (int)sizeof(int32_t));
    if (nsa_gated(m->cfg.force_branch)) {
        a->gh_pre = act_alloc(m, N * m->gh, AB);
        a->gh = act_alloc(m, N * m->gh, AB);
        a->glogits = act_alloc(m, N * G * 3, AB);
        a->gate = act_alloc(m, N * G * 3, AB);
    }
    a->attn_o = act_alloc(m, N * H * D, AB);
    a->x_mid = act_alloc(m, N * C, AB);
    a->xn2 = act_alloc(m, N * C, AB);
    a->rstd2 = act_alloc(m, N, AB);
    a->ffa = act_alloc(m, N * F, AB);
    a->ffb = act_alloc(m, N * F, AB);
    a->ffh = act_alloc(m, N * F, AB);
}

int model_alloc_acts(Model *m, int B, int T, char *err, size_t errlen) {
    if (m->B == B && m->T == T && m->acts && (m->dlogits != m->logits) == (m->keep_logits != 0)) return 0;
    free_acts(m);
    if (T > m->cfg.max_seq_len) {
        snprintf(err, errlen, "sequence length %d exceeds model.max_seq_len %d", T, m->cfg.max_seq_len);
        return -1;
    }
    m->B = B; m->T = T;
    const NsaConfig *c = &m->cfg;
    nsa_geom_init(&m->geom, B, T, m->H, m->G, m->D, c->l, c->d, c->l_sel, c->n, c->w);
    const int64_t N = (int64_t)B * T;
    const int C = m->C, H = m->H, G = m->G, D = m->D, F = m->F, V = m->V;
    const int AB = m->be->act_bytes;
    m->d_inputs = act_alloc(m, N, (int)sizeof(int32_t));
    m->d_targets = act_alloc(m, N, (int)sizeof(int32_t));
    m->res = xcalloc((size_t)m->L + 1, sizeof(void *));
    for (int L = 0; L <= m->L; L++) m->res[L] = act_alloc(m, N * C, AB);
    m->acts = xcalloc((size_t)m->L, sizeof(LayerActs));
    // Sequential prefill runs every layer's decode caches side by side, so there
    // checkpointed layers keep their activations during the forward (backward
    // still recomputes them, as with batched prefill).
    int share = c->prefill == NSA_PREFILL_BATCHED;
    m->acts_ckpt_used = 0;
    for (int L = 0; L < m->L; L++) {
        if (in_ckpt(m, L) && share) {
            if (!m->acts_ckpt_used) { alloc_layer_acts(m, &m->acts_ckpt); m->acts_ckpt_used = 1; }
            m->acts[L] = m->acts_ckpt;
        } else {
            alloc_layer_acts(m, &m->acts[L]);
        }
    }
    m->xf = act_alloc(m, N * C, AB);
    m->rstdf = act_alloc(m, N, AB);
    m->logits = act_alloc(m, N * V, AB);
    m->dlogits = m->keep_logits ? act_alloc(m, N * V, AB) : m->logits;
    m->losses = act_alloc(m, N, AB);
    m->rope_cs = act_alloc(m, (int64_t)T * D, AB);
    m->be->rope_table(m->rope_cs, T, D, c->rope_theta);
    // backward scratch, shared by all layers
    const int64_t ncg = (int64_t)B * m->geom.NC * G;
    m->dres = act_alloc(m, N * C, AB);
    m->dxn = act_alloc(m, N * C, AB);
    m->dxf = act_alloc(m, N * C, AB);
    m->dq = act_alloc(m, N * H * D, AB);
    for (int b = 0; b < 3; b++) {
        m->dk[b] = act_alloc(m, N * G * D, AB);
        m->dv[b] = act_alloc(m, N * G * D, AB);
        m->dob[b] = act_alloc(m, N * H * D, AB);
    }
    m->dKc = act_alloc(m, ncg * D, AB);
    m->dVc = act_alloc(m, ncg * D, AB);
    if (c->phi == NSA_PHI_MLP) {
        m->dXk = act_alloc(m, ncg * c->l * D, AB);
        m->dXv = act_alloc(m, ncg * c->l * D, AB);
        m->dHk = act_alloc(m, ncg * D, AB);
        m->dHv = act_alloc(m, ncg * D, AB);
    }
    m->dattn_o = act_alloc(m, N * H * D, AB);
    m->dgate = act_alloc(m, N * G * 3, AB);
    m->dglogits = act_alloc(m, N * G * 3, AB);
    m->dgh = act_alloc(m, N * m->gh, AB);
    m->dffa = act_alloc(m, N * F, AB);
    m->dffb = act_alloc(m, N * F, AB);
    m->dffh = act_alloc(m, N * F, AB);
    // The fused K/V projection's [N, 6*G*D] scratch: dffa where it is large enough
    // (m7c_125m: F = 2048 >= 6*G*D = 768). dffa is dead wherever the scratch is live:
    // written by swiglu_bwd and read by the gate/up matmul_bwd at the start of a
    // layer's backward, while the scratch lives inside one layer_forward (also the
    // recomputation of a checkpointed layer, before its backward) or at the end of a
    // layer_backward.
    if (m->kv_fused) m->kv_scratch = F >= 6 * G * D ? m->dffa : act_alloc(m, N * 6 * G * D, AB);
    m->acts_gen++;
    return 0;
}

void model_free(Model *m) {
    free_acts(m);
    free(m->seq_graph.graphs);
    m->seq_graph.graphs = NULL;
    free(m->allocs);
    m->be->free(m->param_mem);
    m->be->free(m->grad_mem);
    free(m->params);
    free(m->lid);
}

void model_zero_grad(Model *m) {
    m->be->zero(m->grad_mem, (size_t)m->n_elems * m->be->param_bytes);
}

// ---- anomaly checks -----------------------------------------------------------------

// Check `rows` rows of `width` activation elements; on the first non-finite value
// record where it is (tensor named printf-style). Only active with
// m->check_finite, which always runs the batched path.
static int check(Model *m, const void *x, int64_t rows, int64_t width, int layer, const char *branch,
                 const char *op, const char *phase, const char *fmt, ...)
    __attribute__((format(printf, 9, 10)));
static int check(Model *m, const void *x, int64_t rows, int64_t width, int layer, const char *branch,
                 const char *op, const char *phase, const char *fmt, ...) {
    if (!m->check_finite || m->anomaly.found || !x || rows * width == 0) return 0;
    int64_t i = m->be->first_nonfinite_act(x, rows * width);
    if (i < 0) return 0;
    Anomaly *a = &m->anomaly;
    a->found = 1;
    a->layer = layer;
    snprintf(a->branch, sizeof a->branch, "%s", branch);
    snprintf(a->op, sizeof a->op, "%s", op);
    snprintf(a->phase, sizeof a->phase, "%s", phase);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->tensor, sizeof a->tensor, fmt, ap);
    va_end(ap);
    int64_t row = i / width;
    a->b = (int)(row / m->T);
    a->t = (int)(row % m->T);
    a->col = (int)(i % width);
    m->be->act_to_f64(&a->value, AOFF(m, x, i), 1);
    return 1;
}

// ---- forward ------------------------------------------------------------------------

// Row-range iteration: with the whole sequence the B sequences are one dense
// block of N rows; with a sub-range each sequence's rows are a separate block.
#define FOR_ROW_BLOCKS(m, t0, Tn, r0, nr)                                                  \
    for (int _b = 0, _nb = ((Tn) == (m)->T ? 1 : (m)->B); _b < _nb; _b++)                  \
        for (int64_t r0 = ((Tn) == (m)->T ? 0 : (int64_t)_b * (m)->T + (t0)),              \
                     nr = ((Tn) == (m)->T ? (int64_t)(m)->B * (m)->T : (Tn)), _once = 1;   \
             _once; _once = 0)

// phi over compressed blocks [i0, i0+Ni) for keys (j=0) or values (j=1).
static void compress_fwd(Model *m, int L, LayerActs *a, int j, int i0, int Ni) {
    const Backend *be = m->be;
    const NsaGeom *g = &m->geom;
    void *src = j == 0 ? a->k[NSA_BR_CMP] : a->v[NSA_BR_CMP];
    void *dst = j == 0 ? a->Kc : a->Vc;
    if (Ni <= 0) return;
    if (m->cfg.phi == NSA_PHI_AVG) {
        be->compress_avg_fwd(dst, src, g, i0, Ni);
        return;
    }
    int base = j == 0 ? LP_CK_PE : LP_CV_PE;
    void *X = j == 0 ? a->Xk : a->Xv, *Hp = j == 0 ? a->Hk_pre : a->Hv_pre, *Hs = j == 0 ? a->Hk : a->Hv;
    const int G = m->G, D = m->D, lD = m->cfg.l * D;
    be->block_gather_fwd(X, src, W(m, L, base), g, i0, Ni);
    for (int b = 0; b < m->B; b++) {
        int64_t r = ((int64_t)b * g->NC + i0) * G, nr = (int64_t)Ni * G;
        be->matmul_fwd(AOFF(m, Hp, r * D), D, AOFF(m, X, r * lD), lD, W(m, L, base + 1),
                       W(m, L, base + 2), (int)nr, D, lD);
        be->silu_fwd(AOFF(m, Hs, r * D), AOFF(m, Hp, r * D), nr * D);
        be->matmul_fwd(AOFF(m, dst, r * D), D, AOFF(m, Hs, r * D), D, W(m, L, base + 3),
                       W(m, L, base + 4), (int)nr, D, D);
    }
}


// ---- The fused K/V projection -----------------------------------------------------------
// Each branch's K and V projection is [G*D, C] (m7c_125m: 128 x 768): six GEMMs too
// narrow to run near a GPU's peak, each reading xn1 again, and in backward six dX GEMMs
// accumulating into dxn. The six weights are consecutive in the parameter buffer
// (build_params checks it), so they are one [6*G*D, C] nn.Linear weight, and their
// gradients one [6*G*D, C] gradient: forward is one matmul_fwd into kv_scratch
// [rows, 6*G*D] and kv_split_rope_fwd (split + RoPE on the keys), backward is
// kv_gather_rope_bwd (gather + inverse RoPE) and one matmul_bwd computing dxn (+=) and
// the six dW at once. q stays its own GEMM: its N = H*D (768) is already wide, and
// fusing it would add a copy of q through the scratch each way that costs about what
// it saves (one read of xn1), and two head counts in the split op.
// Numerics (CPU): forward and dW are bitwise the per-branch path's (the GEMM's element
// [m,n] depends on row m, column n and K only; RoPE is the same arithmetic); dX is one
// sum over 6*G*D terms instead of six partial sums added into dxn, so its bits differ.
// Used when every branch's K/V is computed (no force_branch) and m->kv_fused.
static int kv_fused_here(const Model *m, const LayerActs *a) {
    return m->kv_fused && m->kv_scratch && a->k[0] && a->k[1] && a->k[2];
}

// Forward of block L over rows [t0, t0+Tn) of every sequence: reads res[L], writes res[L+1],
// in four stages (the layer-major sequential forward runs each stage for every token before the
// next; the op sequence of one call is the same either way). Each returns 1 if an anomaly was
// recorded (check_finite).
#define CK(ptr, width, br, op, ...)                                                                 \
    do {                                                                                            \
        if (check(m, ptr, (int64_t)m->B * m->T, width, L, br, op, "forward", __VA_ARGS__)) return 1; \
    } while (0)

// Stage 1: attention input norm and projections. The K/V projections: fused (one GEMM with
// N = 6*G*D over the six consecutive weights into `kv` — kv_scratch, or a lane's own stretch
// of it —, which holds one row block, then one op that splits it into k_b, v_b and ropes the
// keys), or the per-branch fallback (force_branch computes only some branches).
static int layer_fwd_proj(Model *m, int L, LayerActs *a, int t0, int Tn, void *kv) {
    const Backend *be = m->be;
    const int C = m->C, H = m->H, G = m->G, D = m->D, HD = H * D, GD = G * D;
    void *x = m->res[L];
    const int kv_fused = kv_fused_here(m, a);
    FOR_ROW_BLOCKS(m, t0, Tn, r0, nr) {
        be->rmsnorm_fwd(AOFF(m, a->xn1, r0 * C), AOFF(m, a->rstd1, r0), AOFF(m, x, r0 * C),
                        W(m, L, LP_ATTN_NORM), (int)nr, C, m->cfg.norm_eps);
        be->matmul_fwd(AOFF(m, a->q, r0 * HD), HD, AOFF(m, a->xn1, r0 * C), C, W(m, L, LP_WQ), NULL, (int)nr, HD, C);
        if (kv_fused) {
            void *const kvb[6] = {a->k[0], a->v[0], a->k[1], a->v[1], a->k[2], a->v[2]};
            be->matmul_fwd(kv, 6 * GD, AOFF(m, a->xn1, r0 * C), C, W(m, L, LP_WK_CMP), NULL, (int)nr, 6 * GD, C);
            be->kv_split_rope_fwd(kvb, kv, m->rope_cs, r0, nr, m->T, G, D);
            continue;
        }
        for (int b = 0; b < 3; b++) {
            if (!a->k[b]) continue;
            be->matmul_fwd(AOFF(m, a->k[b], r0 * GD), GD, AOFF(m, a->xn1, r0 * C), C,
                           W(m, L, LP_WK_CMP + 2 * b), NULL, (int)nr, GD, C);
            be->matmul_fwd(AOFF(m, a->v[b], r0 * GD), GD, AOFF(m, a->xn1, r0 * C), C,
                           W(m, L, LP_WV_CMP + 2 * b), NULL, (int)nr, GD, C);
        }
    }
    be->rope_fwd(a->q, m->rope_cs, m->B, m->T, t0, Tn, H, D);
    for (int b = 0; b < 3 && !kv_fused; b++)
        if (a->k[b]) be->rope_fwd(a->k[b], m->rope_cs, m->B, m->T, t0, Tn, G, D);
    CK(a->xn1, C, "", "rmsnorm_fwd", "blocks.%d.attn_norm.out", L);
    CK(a->q, HD, "", "matmul_fwd+rope", "blocks.%d.attn.q", L);
    for (int b = 0; b < 3; b++) {
        if (!a->k[b]) continue;
        CK(a->k[b], GD, nsa_branch_name(b), kv_fused ? "matmul_fwd+kv_split_rope" : "matmul_fwd+rope",
           "blocks.%d.attn.%s.k", L, nsa_branch_name(b));
        CK(a->v[b], GD, nsa_branch_name(b), kv_fused ? "matmul_fwd+kv_split_rope" : "matmul_fwd",
           "blocks.%d.attn.%s.v", L, nsa_branch_name(b));
    }
    return 0;
}

// Stage 2: the compressed blocks completed by these rows (reads the keys and values of every
// row up to the last one).
static int layer_fwd_compress(Model *m, int L, LayerActs *a, int t0, int Tn) {
    const NsaGeom *g = &m->geom;
    if (!m->cmp_needed) return 0;
    int i0 = t0 - g->l + 1 <= 0 ? 0 : (t0 - g->l + 1 + g->d - 1) / g->d;
    int i1 = nsa_cmp_visible(g, t0 + Tn - 1);   // blocks [0, i1) complete after the last row
    if (i0 < i1 && !(m->faults && m->fault_hooks->keep_stale_cmp(m, L, t0, Tn))) {
        compress_fwd(m, L, a, 0, i0, i1 - i0);
        compress_fwd(m, L, a, 1, i0, i1 - i0);
    }
    const int64_t ncg = (int64_t)m->B * g->NC * m->G;
    if (check(m, a->Kc, ncg, m->D, L, "cmp", "compress_fwd", "forward", "blocks.%d.attn.cmp.Kc", L)) return 1;
    if (check(m, a->Vc, ncg, m->D, L, "cmp", "compress_fwd", "forward", "blocks.%d.attn.cmp.Vc", L)) return 1;
    return 0;
}

// Stage 3: the three branches' attention for these rows (over the keys, values and compressed
// blocks of every row up to each one).
static int layer_fwd_attn(Model *m, int L, LayerActs *a, int t0, int Tn) {
    const Backend *be = m->be;
    const NsaGeom *g = &m->geom;
    const int HD = m->H * m->D;
    if (m->cmp_needed) {
        be->cmp_attn_fwd(a->o[0], a->lse[0], a->q, a->Kc, a->Vc, g, t0, Tn);
        if (m->faults) m->fault_hooks->after_branch_fwd(m, L, NSA_BR_CMP, a->o[0], t0, Tn);
        CK(a->o[0], HD, "cmp", "cmp_attn_fwd", "blocks.%d.attn.cmp.o", L);
    }
    if (m->used[NSA_BR_SEL]) {
        be->select_blocks(a->sel_idx, a->q, a->Kc, a->lse[0], g, t0, Tn);
        be->sel_attn_fwd(a->o[1], a->lse[1], a->q, a->k[1], a->v[1], a->sel_idx, g, t0, Tn);
        if (m->faults) m->fault_hooks->after_branch_fwd(m, L, NSA_BR_SEL, a->o[1], t0, Tn);
        CK(a->o[1], HD, "sel", "sel_attn_fwd", "blocks.%d.attn.sel.o", L);
    }
    if (m->used[NSA_BR_WIN]) {
        be->win_attn_fwd(a->o[2], a->lse[2], a->q, a->k[2], a->v[2], g, t0, Tn);
        if (m->faults) m->fault_hooks->after_branch_fwd(m, L, NSA_BR_WIN, a->o[2], t0, Tn);
        CK(a->o[2], HD, "win", "win_attn_fwd", "blocks.%d.attn.win.o", L);
    }
    return 0;
}

// Stage 4: gate, combine, output projection, residual, feed-forward (row by row).
static int layer_fwd_out(Model *m, int L, LayerActs *a, int t0, int Tn) {
    const Backend *be = m->be;
    const int C = m->C, H = m->H, G = m->G, D = m->D, F = m->F, HD = H * D;
    void *x = m->res[L], *y = m->res[L + 1];
    const int gated = nsa_gated(m->cfg.force_branch);
    FOR_ROW_BLOCKS(m, t0, Tn, r0, nr) {
        if (gated) {
            be->matmul_fwd(AOFF(m, a->gh_pre, r0 * m->gh), m->gh, AOFF(m, a->xn1, r0 * C), C,
                           W(m, L, LP_GATE_FC1_W), W(m, L, LP_GATE_FC1_B), (int)nr, m->gh, C);
            be->silu_fwd(AOFF(m, a->gh, r0 * m->gh), AOFF(m, a->gh_pre, r0 * m->gh), nr * m->gh);
            be->matmul_fwd(AOFF(m, a->glogits, r0 * 3 * G), 3 * G, AOFF(m, a->gh, r0 * m->gh), m->gh,
                           W(m, L, LP_GATE_FC2_W), W(m, L, LP_GATE_FC2_B), (int)nr, 3 * G, m->gh);
            be->gate_act_fwd(AOFF(m, a->gate, r0 * 3 * G), AOFF(m, a->glogits, r0 * 3 * G), nr * G,
                             m->cfg.gate_act);
        }
        be->combine_fwd(AOFF(m, a->attn_o, r0 * HD), gated ? AOFF(m, a->gate, r0 * 3 * G) : NULL,
                        m->used[0] ? AOFF(m, a->o[0], r0 * HD) : NULL,
                        m->used[1] ? AOFF(m, a->o[1], r0 * HD) : NULL,
                        m->used[2] ? AOFF(m, a->o[2], r0 * HD) : NULL, nr, H, G, D);
        be->matmul_fwd(AOFF(m, a->x_mid, r0 * C), C, AOFF(m, a->attn_o, r0 * HD), HD, W(m, L, LP_WO), NULL, (int)nr, C, HD);
        be->add_inplace(AOFF(m, a->x_mid, r0 * C), AOFF(m, x, r0 * C), nr * C);
        // feed-forward
        be->rmsnorm_fwd(AOFF(m, a->xn2, r0 * C), AOFF(m, a->rstd2, r0), AOFF(m, a->x_mid, r0 * C),
                        W(m, L, LP_MLP_NORM), (int)nr, C, m->cfg.norm_eps);
        be->matmul_fwd(AOFF(m, a->ffa, r0 * F), F, AOFF(m, a->xn2, r0 * C), C, W(m, L, LP_W_GATE), NULL, (int)nr, F, C);
        be->matmul_fwd(AOFF(m, a->ffb, r0 * F), F, AOFF(m, a->xn2, r0 * C), C, W(m, L, LP_W_UP), NULL, (int)nr, F, C);
        be->swiglu_fwd(AOFF(m, a->ffh, r0 * F), AOFF(m, a->ffa, r0 * F), AOFF(m, a->ffb, r0 * F), nr * F);
        be->matmul_fwd(AOFF(m, y, r0 * C), C, AOFF(m, a->ffh, r0 * F), F, W(m, L, LP_W_DOWN), NULL, (int)nr, C, F);
        be->add_inplace(AOFF(m, y, r0 * C), AOFF(m, a->x_mid, r0 * C), nr * C);
    }
    if (gated) CK(a->gate, 3 * G, "gate", "gate_act_fwd", "blocks.%d.attn.gate.out", L);
    CK(a->attn_o, HD, "", "combine_fwd", "blocks.%d.attn.out", L);
    CK(a->x_mid, C, "", "matmul_fwd(o_proj)+residual", "blocks.%d.attn.residual", L);
    CK(a->ffh, F, "", "swiglu_fwd", "blocks.%d.mlp.hidden", L);
    CK(y, C, "", "matmul_fwd(down_proj)+residual", "blocks.%d.out", L);
    return 0;
}
#undef CK

static int layer_forward(Model *m, int L, LayerActs *a, int t0, int Tn) {
    return layer_fwd_proj(m, L, a, t0, Tn, m->kv_scratch) || layer_fwd_compress(m, L, a, t0, Tn) ||
           layer_fwd_attn(m, L, a, t0, Tn) || layer_fwd_out(m, L, a, t0, Tn);
}

// Embedding rows, final norm, LM head and loss over rows [t0, t0+Tn).
static void embed_rows(Model *m, int t0, int Tn) {
    FOR_ROW_BLOCKS(m, t0, Tn, r0, nr)
        m->be->embedding_fwd(AOFF(m, m->res[0], r0 * m->C), m->d_inputs + r0,
                             model_param_ptr(m, m->id_tok_emb), (int)nr, m->C);
}
static void head_rows(Model *m, int t0, int Tn, int with_loss, double dscale) {
    const Backend *be = m->be;
    const int C = m->C, V = m->V;
    FOR_ROW_BLOCKS(m, t0, Tn, r0, nr) {
        be->rmsnorm_fwd(AOFF(m, m->xf, r0 * C), AOFF(m, m->rstdf, r0), AOFF(m, m->res[m->L], r0 * C),
                        model_param_ptr(m, m->id_norm_f), (int)nr, C, m->cfg.norm_eps);
        be->matmul_fwd(AOFF(m, m->logits, r0 * V), V, AOFF(m, m->xf, r0 * C), C,
                       model_param_ptr(m, m->id_lm_head), NULL, (int)nr, V, C);
        if (with_loss)
            be->xent_fwd_bwd(AOFF(m, m->losses, r0), AOFF(m, m->dlogits, r0 * V), AOFF(m, m->logits, r0 * V),
                             m->d_targets + r0, (int)nr, V, dscale);
    }
}

// ---- Sequential prefill as a graph ----------------------------------------------------------
// Token by token, the sequential forward issues ~300 small ops a token (m7c_125m: 12 layers x
// 2048 tokens, ~600k launches), bound by the host's launch overhead (3.2 s a forward on an H100
// where the batched one takes milliseconds). A backend that records op sequences
// (Backend.graph_begin: CUDA graphs) records the whole loop once and launches the recording on
// later forwards: the same kernels with the same arguments, so losses, logits and every saved
// activation are bitwise those of the eager loop.
//  - When: the first sequential forward of a key runs eagerly: it sizes the backend's scratch,
//    makes its GEMM plans, weight copies and statistic shadows, so that nothing is allocated
//    or set up while recording. The next forward with the same key is recorded (nothing runs
//    while recording) and the recording launched; later ones launch it again.
//  - The key (seq_key): B and T, whether targets are given (the loss kernels), keep_logits,
//    dscale (an argument of the loss kernel), the activation buffers (acts_gen, the logits),
//    the parameter buffer, the fused K/V projection, and the backend's generation, which every
//    device (re)allocation, setting change and change of the backend's cached state advances.
//    Any difference: the recording is dropped, the forward runs eagerly, the next one records.
//  - Never with faults bound (their hooks act on the host between ops), with check_finite (it
//    takes the batched path anyway), or where the backend refuses to record (graph_begin 0).
//  - A recording that fails (something that cannot be recorded was asked for: graph_end
//    returns NULL and why) is dropped — nothing of it ran —, the forward runs eagerly, and this
//    model stays eager from then on (one line on stderr).
//  - Lanes (Backend.lanes_open: CUDA streams with their own scratch and GEMM workspace): the
//    forward is recorded layer-major, and the ops of different tokens go to different lanes, so
//    the graph's branches run side by side instead of ~600k kernels one after another. In a
//    layer every op is row-independent except that a token's attention reads the keys, values
//    and compressed blocks of the tokens before it; so per layer: every token's norm and
//    projections on the lanes (token t on lane t mod n), joined; the compressed blocks on lane
//    0, in token order; then every token's attention, output projection and feed-forward (and
//    after the last layer its head) on the lanes, joined. Each token's ops are the eager loop's
//    calls with the same arguments (its kv projection into its lane's own row of kv_scratch),
//    so every value is bitwise the token-major loop's. One recording per layer.
//    Without lanes (NSA_CUDA_LANES=1): token-major, one recording per MODEL_SEQ_GRAPH_TOKENS
//    tokens (m7c_125m at S = 2048: 16 graphs of ~38k operations).
//  - seq_layer_major (tests): the eager forward in the layer-major order, on lane 0 — the CPU
//    backend checks that the order gives the token-major loop's bits.
//  - Events: none fire while recording (a handler may read device memory). A recorded forward
//    fires MODEL_EV_LAYER_FWD (layer 0, t = 0) before its launch, then every layer's
//    MODEL_EV_LAYER_FWD_DONE (gate statistics and --dump-acts read the activations through the
//    backend's synchronous copies, i.e. after the graph), then MODEL_EV_HEAD (t = 0): the
//    flight recorder shows layer_fwd of layer 0, then head, while the device runs the graph.
#define SEQ_GRAPH_TOKENS MODEL_SEQ_GRAPH_TOKENS

static void seq_graph_drop(Model *m) {
    for (int i = 0; i < m->seq_graph.n; i++)
        if (m->seq_graph.graphs[i]) m->be->graph_free(m->seq_graph.graphs[i]);
    free(m->seq_graph.graphs);
    m->seq_graph.graphs = NULL;
    m->seq_graph.n = 0;
    m->seq_graph.nodes = 0;
}

static void seq_key(const Model *m, int with_targets, double dscale, uint64_t key[12]) {
    uint64_t ds;
    memcpy(&ds, &dscale, sizeof ds);
    key[0] = (uint64_t)m->B;
    key[1] = (uint64_t)m->T;
    key[2] = (uint64_t)with_targets;
    key[3] = (uint64_t)m->keep_logits;
    key[4] = ds;
    key[5] = m->be->generation ? m->be->generation() : 0;
    key[6] = m->acts_gen;
    key[7] = (uint64_t)(uintptr_t)m->logits;
    key[8] = (uint64_t)(uintptr_t)m->dlogits;
    key[9] = (uint64_t)(uintptr_t)m->param_mem;
    key[10] = (uint64_t)m->kv_fused;
    key[11] = (uint64_t)(uintptr_t)m->acts;
}

// One token of the decode algorithm: token t through every block, then the head.
static void seq_token(Model *m, int t, int with_targets, double dscale, int events) {
    embed_rows(m, t, 1);
    for (int L = 0; L < m->L; L++) {
        if (events) EVENT(m, MODEL_EV_LAYER_FWD, L, t);
        layer_forward(m, L, &m->acts[L], t, 1);
        if (events && t == m->T - 1) EVENT(m, MODEL_EV_LAYER_FWD_DONE, L, t);
    }
    if (events) EVENT(m, MODEL_EV_HEAD, -1, t);
    head_rows(m, t, 1, with_targets, dscale);
}

// ---- the layer-major order (recordings on lanes; seq_layer_major) ----
// A lane's row of the fused K/V projection's scratch: lane l at l * stride bytes, the stride a
// multiple of 256 bytes so that every lane's GEMM output has the alignment of lane 0's (the same
// GEMM plan, hence the same algorithm and bits). kv_scratch holds B*T rows, so it bounds the lanes.
static size_t seq_lane_stride(const Model *m) {
    const size_t row = (size_t)6 * m->G * m->D * (size_t)m->be->act_bytes;
    return (row + 255) & ~(size_t)255;
}
static int seq_lanes_cap(const Model *m) {
    if (!m->kv_fused || !m->kv_scratch) return MODEL_SEQ_LANES;
    const size_t cap = (size_t)m->B * m->T * 6 * m->G * m->D * (size_t)m->be->act_bytes / seq_lane_stride(m);
    return cap < 1 ? 1 : cap > MODEL_SEQ_LANES ? MODEL_SEQ_LANES : (int)cap;
}
static void *seq_lane_kv(const Model *m, int lane) {
    return m->kv_scratch ? (char *)m->kv_scratch + (size_t)lane * seq_lane_stride(m) : NULL;
}
static void seq_fork(const Model *m, int nl) {
    if (nl > 1) m->be->lanes_fork();
}
static void seq_join(const Model *m, int nl) {
    if (nl > 1) m->be->lanes_join();
}

// Layers [La, Lb) layer-major over all tokens, token t on lane t % nl (nl 1: lane 0, no lane
// calls); layer 0 embeds each token first, the last layer ends each token with the head.
static void seq_layers(Model *m, int La, int Lb, int nl, int with_targets, double dscale, int events) {
    for (int L = La; L < Lb; L++) {
        LayerActs *a = &m->acts[L];
        if (events) EVENT(m, MODEL_EV_LAYER_FWD, L, 0);
        seq_fork(m, nl);
        for (int t = 0; t < m->T; t++) {
            if (nl > 1) m->be->lane_use(t % nl);
            if (L == 0) embed_rows(m, t, 1);
            layer_fwd_proj(m, L, a, t, 1, seq_lane_kv(m, nl > 1 ? t % nl : 0));
        }
        seq_join(m, nl);
        for (int t = 0; t < m->T; t++) layer_fwd_compress(m, L, a, t, 1);
        if (events && L == m->L - 1) EVENT(m, MODEL_EV_HEAD, -1, 0);
        seq_fork(m, nl);
        for (int t = 0; t < m->T; t++) {
            if (nl > 1) m->be->lane_use(t % nl);
            layer_fwd_attn(m, L, a, t, 1);
            layer_fwd_out(m, L, a, t, 1);
            if (L == m->L - 1) head_rows(m, t, 1, with_targets, dscale);
        }
        seq_join(m, nl);
        if (events) EVENT(m, MODEL_EV_LAYER_FWD_DONE, L, m->T - 1);
    }
}

// Launch the held recordings: the whole forward, with its events around it.
static void seq_graph_launch(Model *m) {
    EVENT(m, MODEL_EV_LAYER_FWD, 0, 0);
    for (int i = 0; i < m->seq_graph.n; i++) m->be->graph_launch(m->seq_graph.graphs[i]);
    if (m->event)
        for (int L = 0; L < m->L; L++) EVENT(m, MODEL_EV_LAYER_FWD_DONE, L, m->T - 1);
    EVENT(m, MODEL_EV_HEAD, -1, 0);
}

// Record the forward (on lanes: one recording per layer; else one per SEQ_GRAPH_TOKENS tokens).
// Returns 1 with the recordings held under `key`, or 0 (nothing ran: the caller runs the forward
// eagerly).
static int seq_graph_record(Model *m, int with_targets, double dscale, const uint64_t key[12]) {
    const Backend *be = m->be;
    const int nl = m->seq_graph.lanes;
    const int nseg = nl > 1 ? m->L : (m->T + SEQ_GRAPH_TOKENS - 1) / SEQ_GRAPH_TOKENS;
    const double t0 = mono_s();
    void **gs = xcalloc((size_t)(nseg > 0 ? nseg : 1), sizeof(void *));
    const char *why = NULL;
    size_t nodes = 0;
    int ok = 1, refused = 0;
    for (int sg = 0; sg < nseg && ok; sg++) {
        if (!be->graph_begin()) {
            ok = 0;
            refused = sg == 0;
            why = "the backend refused to record";
            break;
        }
        if (nl > 1) {
            seq_layers(m, sg, sg + 1, nl, with_targets, dscale, 0);
        } else {
            const int ta = sg * SEQ_GRAPH_TOKENS, tb = ta + SEQ_GRAPH_TOKENS < m->T ? ta + SEQ_GRAPH_TOKENS : m->T;
            for (int t = ta; t < tb; t++) seq_token(m, t, with_targets, dscale, 0);
        }
        size_t nn = 0;
        gs[sg] = be->graph_end(&nn, &why);
        if (!gs[sg]) ok = 0;
        nodes += nn;
    }
    uint64_t after[12];
    seq_key(m, with_targets, dscale, after);
    if (ok && memcmp(after, key, sizeof after)) {   // something changed while recording
        ok = 0;
        why = "the backend's state changed while recording";
    }
    if (!ok) {
        for (int i = 0; i < nseg; i++)
            if (gs[i]) be->graph_free(gs[i]);
        free(gs);
        if (refused) {   // switched off (NSA_CUDA_GRAPH=0, a debugging mode): quietly eager
            m->seq_graph.off = 2;
            return 0;
        }
        m->seq_graph.off = 1;
        m->seq_graph.failures++;
        fprintf(stderr, "nsa-train: note: sequential prefill runs eagerly from now on (recording it as a graph "
                "failed: %s)\n", why ? why : "unknown");
        return 0;
    }
    m->seq_graph.graphs = gs;
    m->seq_graph.n = nseg;
    m->seq_graph.nodes = nodes;
    memcpy(m->seq_graph.key, key, sizeof m->seq_graph.key);
    m->seq_graph.captures++;
    m->seq_graph.capture_s += mono_s() - t0;
    return 1;
}

// The sequential forward: recorded (held recording, or a new one) or eager.
static void seq_forward(Model *m, int with_targets, double dscale) {
    const Backend *be = m->be;
    const int can = be->graph_begin && be->graph_end && be->graph_launch && be->graph_free && be->generation &&
                    !m->seq_graph.off && !m->faults && !m->check_finite;
    if (can) {
        uint64_t key[12];
        seq_key(m, with_targets, dscale, key);
        if (m->seq_graph.graphs && !memcmp(key, m->seq_graph.key, sizeof key)) {
            seq_graph_launch(m);
            m->seq_graph.replays++;
            return;
        }
        seq_graph_drop(m);
        if (m->seq_graph.have_last && !memcmp(key, m->seq_graph.last, sizeof key) &&
            seq_graph_record(m, with_targets, dscale, key)) {
            seq_graph_launch(m);
            return;
        }
    } else if (m->seq_graph.graphs) {
        seq_graph_drop(m);
    }
    // lanes: sized by what this eager forward asks of the backend's scratch, before its key
    const int lanes = can && be->lanes_track && be->lanes_open && be->lanes_fork && be->lane_use &&
                      be->lanes_join && m->L > 0;
    if (lanes) be->lanes_track();
    if (m->seq_layer_major) {
        seq_layers(m, 0, m->L, 1, with_targets, dscale, 1);
    } else {   // the decode algorithm: token t flows through every block before t+1 starts
        for (int t = 0; t < m->T; t++) seq_token(m, t, with_targets, dscale, 1);
    }
    m->seq_graph.lanes = lanes ? be->lanes_open(seq_lanes_cap(m)) : 1;
    m->seq_graph.eager++;
    seq_key(m, with_targets, dscale, m->seq_graph.last);   // the state the eager forward left
    m->seq_graph.have_last = 1;
}

double model_forward(Model *m, const int32_t *inputs, const int32_t *targets, double dscale) {
    const Backend *be = m->be;
    const int64_t N = (int64_t)m->B * m->T;
    memset(&m->anomaly, 0, sizeof m->anomaly);
    be->from_host(m->d_inputs, inputs, sizeof(int32_t) * (size_t)N);
    if (targets) be->from_host(m->d_targets, targets, sizeof(int32_t) * (size_t)N);
    // Anomaly localisation always takes the batched path (same bits, and every
    // tensor is complete when it is checked).
    int sequential = m->cfg.prefill == NSA_PREFILL_SEQUENTIAL && !m->check_finite;
    if (!sequential) {
        embed_rows(m, 0, m->T);
        if (check(m, m->res[0], N, m->C, -1, "", "embedding_fwd", "forward", "tok_emb.out")) return NAN;
        for (int L = 0; L < m->L; L++) {
            EVENT(m, MODEL_EV_LAYER_FWD, L, 0);
            if (layer_forward(m, L, &m->acts[L], 0, m->T)) return NAN;
            EVENT(m, MODEL_EV_LAYER_FWD_DONE, L, 0);
        }
        EVENT(m, MODEL_EV_HEAD, -1, 0);
        head_rows(m, 0, m->T, targets != NULL, dscale);
        // (logits overwritten in place by their gradient are checked through the loss)
        if (check(m, (m->logits == m->dlogits && targets) ? NULL : m->logits, N, m->V, -1, "",
                  "matmul_fwd(lm_head)", "forward", "logits")) return NAN;
    } else {
        seq_forward(m, targets != NULL, dscale);
    }
    if (m->faults) m->fault_hooks->after_forward(m);   // clobber_activation
    if (!targets) return 0.0;
    // mean loss, summed on the host in a fixed order
    double *h = xmalloc(sizeof(double) * (size_t)N), s = 0;
    be->act_to_f64(h, m->losses, N);
    for (int64_t i = 0; i < N; i++) s += h[i];
    free(h);
    m->last_loss = s / (double)N;
    if (m->check_finite && !isfinite(m->last_loss) && !m->anomaly.found) {
        Anomaly *a = &m->anomaly;
        a->found = 1; a->layer = -1;
        snprintf(a->op, sizeof a->op, "xent_fwd_bwd");
        snprintf(a->tensor, sizeof a->tensor, "loss");
        snprintf(a->phase, sizeof a->phase, "forward");
        a->value = m->last_loss;
    }
    return m->last_loss;
}

// ---- backward -----------------------------------------------------------------------

static int layer_backward(Model *m, int L, LayerActs *a) {
    const Backend *be = m->be;
    const NsaGeom *g = &m->geom;
    const int C = m->C, H = m->H, G = m->G, D = m->D, F = m->F, HD = H * D, GD = G * D;
    const int N = m->B * m->T;
    const int AB = be->act_bytes;
    const int *id = m->lid[L];
    void *x = m->res[L];
#define CKB(ptr, rows, width, br, op, tname)                                                \
    do {                                                                                    \
        if (check(m, ptr, rows, width, L, br, op, "backward", "blocks.%d.%s", L, tname)) return 1; \
    } while (0)

    // feed-forward: dres holds dL/dx_out
    be->matmul_bwd(m->dffh, DW(m, L, LP_W_DOWN), NULL, m->dres, a->ffh, W(m, L, LP_W_DOWN), N, C, F, 0);
    grad_ready(m, id[LP_W_DOWN]);
    be->swiglu_bwd(m->dffa, m->dffb, m->dffh, a->ffa, a->ffb, (int64_t)N * F);
    be->matmul_bwd(m->dxn, DW(m, L, LP_W_GATE), NULL, m->dffa, a->xn2, W(m, L, LP_W_GATE), N, F, C, 0);
    grad_ready(m, id[LP_W_GATE]);
    be->matmul_bwd(m->dxn, DW(m, L, LP_W_UP), NULL, m->dffb, a->xn2, W(m, L, LP_W_UP), N, F, C, 1);
    grad_ready(m, id[LP_W_UP]);
    be->rmsnorm_bwd(m->dres, DW(m, L, LP_MLP_NORM), m->dxn, a->x_mid, W(m, L, LP_MLP_NORM), a->rstd2, N, C);
    grad_ready(m, id[LP_MLP_NORM]);
    CKB(m->dres, N, C, "", "rmsnorm_bwd(mlp_norm)", "attn.residual.grad");

    // attention output projection and combine
    be->matmul_bwd(m->dattn_o, DW(m, L, LP_WO), NULL, m->dres, a->attn_o, W(m, L, LP_WO), N, C, HD, 0);
    grad_ready(m, id[LP_WO]);
    const int gated = nsa_gated(m->cfg.force_branch);
    void *dob[3];
    for (int b = 0; b < 3; b++) dob[b] = m->used[b] ? m->dob[b] : NULL;
    be->combine_bwd(dob[0], dob[1], dob[2], gated ? m->dgate : NULL, m->dattn_o, gated ? a->gate : NULL,
                    m->used[0] ? a->o[0] : NULL, m->used[1] ? a->o[1] : NULL, m->used[2] ? a->o[2] : NULL,
                    N, H, G, D);
    int dxn_started = 0;   // first contribution to dxn overwrites, later ones accumulate
    if (gated) {
        be->gate_act_bwd(m->dglogits, m->dgate, a->gate, (int64_t)N * G, m->cfg.gate_act);
        be->matmul_bwd(m->dgh, DW(m, L, LP_GATE_FC2_W), DW(m, L, LP_GATE_FC2_B), m->dglogits, a->gh,
                       W(m, L, LP_GATE_FC2_W), N, 3 * G, m->gh, 0);
        grad_ready(m, id[LP_GATE_FC2_W]); grad_ready(m, id[LP_GATE_FC2_B]);
        be->silu_bwd(m->dgh, m->dgh, a->gh_pre, (int64_t)N * m->gh);
        be->matmul_bwd(m->dxn, DW(m, L, LP_GATE_FC1_W), DW(m, L, LP_GATE_FC1_B), m->dgh, a->xn1,
                       W(m, L, LP_GATE_FC1_W), N, m->gh, C, 0);
        grad_ready(m, id[LP_GATE_FC1_W]); grad_ready(m, id[LP_GATE_FC1_B]);
        dxn_started = 1;
        CKB(m->dglogits, N, 3 * G, "gate", "gate_act_bwd", "attn.gate.logits.grad");
    }

    // branch attention backward into dq and the branch's dk/dv
    be->zero(m->dq, (size_t)N * HD * AB);
    if (m->used[NSA_BR_WIN]) {
        be->zero(m->dk[2], (size_t)N * GD * AB);
        be->zero(m->dv[2], (size_t)N * GD * AB);
        be->win_attn_bwd(m->dq, m->dk[2], m->dv[2], m->dob[2], a->q, a->k[2], a->v[2], a->o[2], a->lse[2], g);
        CKB(m->dk[2], N, GD, "win", "win_attn_bwd", "attn.win.k.grad");
    }
    if (m->used[NSA_BR_SEL]) {
        be->zero(m->dk[1], (size_t)N * GD * AB);
        be->zero(m->dv[1], (size_t)N * GD * AB);
        be->sel_attn_bwd(m->dq, m->dk[1], m->dv[1], m->dob[1], a->q, a->k[1], a->v[1], a->o[1], a->lse[1],
                         a->sel_idx, g);
        CKB(m->dk[1], N, GD, "sel", "sel_attn_bwd", "attn.sel.k.grad");
    }
    if (m->used[NSA_BR_CMP]) {
        const int64_t ncg = (int64_t)m->B * g->NC * G;
        be->zero(m->dKc, (size_t)ncg * D * AB);
        be->zero(m->dVc, (size_t)ncg * D * AB);
        be->cmp_attn_bwd(m->dq, m->dKc, m->dVc, m->dob[0], a->q, a->Kc, a->Vc, a->o[0], a->lse[0], g);
        be->zero(m->dk[0], (size_t)N * GD * AB);
        be->zero(m->dv[0], (size_t)N * GD * AB);
        if (m->cfg.phi == NSA_PHI_AVG) {
            be->compress_avg_bwd(m->dk[0], m->dKc, g);
            be->compress_avg_bwd(m->dv[0], m->dVc, g);
        } else if (ncg > 0) {
            const int lD = m->cfg.l * D;
            for (int j = 0; j < 2; j++) {
                int base = j == 0 ? LP_CK_PE : LP_CV_PE;
                void *dKc = j == 0 ? m->dKc : m->dVc, *dH = j == 0 ? m->dHk : m->dHv;
                void *dX = j == 0 ? m->dXk : m->dXv;
                void *Hs = j == 0 ? a->Hk : a->Hv, *Hp = j == 0 ? a->Hk_pre : a->Hv_pre, *X = j == 0 ? a->Xk : a->Xv;
                be->matmul_bwd(dH, DW(m, L, base + 3), DW(m, L, base + 4), dKc, Hs, W(m, L, base + 3), (int)ncg, D, D, 0);
                be->silu_bwd(dH, dH, Hp, ncg * D);
                be->matmul_bwd(dX, DW(m, L, base + 1), DW(m, L, base + 2), dH, X, W(m, L, base + 1), (int)ncg, D, lD, 0);
                be->block_gather_bwd(j == 0 ? m->dk[0] : m->dv[0], DW(m, L, base), dX, g);
                for (int s = 0; s < 5; s++) grad_ready(m, id[base + s]);
            }
        } else {
            for (int s = LP_CK_PE; s <= LP_CV_FC2_B; s++) grad_ready(m, id[s]);   // T < l: nothing to add
        }
        CKB(m->dk[0], N, GD, "cmp", "cmp_attn_bwd+compress_bwd", "attn.cmp.k.grad");
    }

    // RoPE backward, projections, input norm
    be->rope_bwd(m->dq, m->rope_cs, m->B, m->T, 0, m->T, H, D);
    be->matmul_bwd(m->dxn, DW(m, L, LP_WQ), NULL, m->dq, a->xn1, W(m, L, LP_WQ), N, HD, C, dxn_started);
    grad_ready(m, id[LP_WQ]);
    const int kv_fused = kv_fused_here(m, a);
    if (kv_fused) {
        // the fused K/V projection: one [N, 6*G*D] gradient, one matmul_bwd for dxn and
        // the six weight gradients (consecutive in grad_mem); grad_ready in the order of
        // the per-branch path (DDP buckets and the gradient-arrival trace see no change)
        const void *dkv[6] = {m->dk[0], m->dv[0], m->dk[1], m->dv[1], m->dk[2], m->dv[2]};
        be->kv_gather_rope_bwd(m->kv_scratch, dkv, m->rope_cs, 0, N, m->T, G, D);
        be->matmul_bwd(m->dxn, DW(m, L, LP_WK_CMP), NULL, m->kv_scratch, a->xn1, W(m, L, LP_WK_CMP), N, 6 * GD, C, 1);
        for (int s = LP_WK_CMP; s <= LP_WV_WIN; s++) grad_ready(m, id[s]);
    }
    for (int b = 0; b < 3 && !kv_fused; b++) {
        if (!m->used[b]) continue;
        be->rope_bwd(m->dk[b], m->rope_cs, m->B, m->T, 0, m->T, G, D);
        be->matmul_bwd(m->dxn, DW(m, L, LP_WK_CMP + 2 * b), NULL, m->dk[b], a->xn1, W(m, L, LP_WK_CMP + 2 * b), N, GD, C, 1);
        grad_ready(m, id[LP_WK_CMP + 2 * b]);
        be->matmul_bwd(m->dxn, DW(m, L, LP_WV_CMP + 2 * b), NULL, m->dv[b], a->xn1, W(m, L, LP_WV_CMP + 2 * b), N, GD, C, 1);
        grad_ready(m, id[LP_WV_CMP + 2 * b]);
    }
    be->rmsnorm_bwd(m->dres, DW(m, L, LP_ATTN_NORM), m->dxn, x, W(m, L, LP_ATTN_NORM), a->rstd1, N, C);
    grad_ready(m, id[LP_ATTN_NORM]);
    CKB(m->dres, N, C, "", "rmsnorm_bwd(attn_norm)", "in.grad");
#undef CKB
    return 0;
}

int model_backward(Model *m) {
    const Backend *be = m->be;
    const int C = m->C, V = m->V, N = m->B * m->T;
    // LM head and final norm
    EVENT(m, MODEL_EV_BWD_HEAD, -1, 0);
    be->matmul_bwd(m->dxf, model_grad_ptr(m, m->id_lm_head), NULL, m->dlogits, m->xf,
                   model_param_ptr(m, m->id_lm_head), N, V, C, 0);
    if (!m->cfg.tie_embeddings) grad_ready(m, m->id_lm_head);
    be->zero(m->dres, (size_t)N * C * be->act_bytes);
    be->rmsnorm_bwd(m->dres, model_grad_ptr(m, m->id_norm_f), m->dxf, m->res[m->L],
                    model_param_ptr(m, m->id_norm_f), m->rstdf, N, C);
    grad_ready(m, m->id_norm_f);
    if (check(m, m->dres, N, C, -1, "", "rmsnorm_bwd(norm_f)", "backward", "norm_f.in.grad")) return -1;
    for (int L = m->L - 1; L >= 0; L--) {
        LayerActs *a = &m->acts[L];
        if (in_ckpt(m, L)) {   // recompute from res[L]
            EVENT(m, MODEL_EV_LAYER_RECOMPUTE, L, 0);
            if (m->faults) m->fault_hooks->before_recompute(m, L);   // gc_recompute_mismatch
            layer_forward(m, L, a, 0, m->T);
            if (m->faults) m->fault_hooks->after_recompute(m, L);
        }
        EVENT(m, MODEL_EV_LAYER_BWD, L, 0);
        if (layer_backward(m, L, a)) return -1;
    }
    EVENT(m, MODEL_EV_EMBED_BWD, -1, 0);
    be->embedding_bwd(model_grad_ptr(m, m->id_tok_emb), m->dres, m->d_inputs, N, C);
    grad_ready(m, m->id_tok_emb);
    if (m->faults) m->fault_hooks->after_backward(m);   // drop_grad: the dropped gradients stay zero
    if (m->check_finite) {
        for (int i = 0; i < m->n_params; i++) {
            int64_t j = be->first_nonfinite_param(model_grad_ptr(m, i), m->params[i].numel);
            if (j < 0) continue;
            Anomaly *an = &m->anomaly;
            an->found = 1;
            an->layer = m->params[i].layer;
            snprintf(an->op, sizeof an->op, "backward");
            snprintf(an->tensor, sizeof an->tensor, "grad:%s", m->params[i].name);
            snprintf(an->phase, sizeof an->phase, "backward");
            an->col = (int)j;
            return -1;
        }
    }
    return 0;
}
