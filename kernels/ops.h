// kernels/ops.h — the op API between the trainer and its compute backends.
//
// The trainer (trainer/model.c) is written once against this table of function
// pointers; each backend (kernels/cpu: fp32 and fp64 builds of the same C source;
// kernels/cuda later) fills one. Same signatures, same semantics on every backend.
//
// Conventions (read these before adding an op):
//  * Buffers are `void *` in the backend's memory. Activations and their gradients
//    have the backend's activation element type (be->act_bytes wide); parameters,
//    parameter gradients and optimizer state have its parameter element type
//    (be->param_bytes). On the CPU backends both types are the same `real`
//    (float for "cpu", double for "cpu64").
//  * All tensors are dense row-major; shapes are given in the comment of each op,
//    outer dimension first. Element counts are int64_t, dimensions int.
//  * Output naming: `out`/`o` is overwritten. A gradient argument documented as
//    "+=" is accumulated into (the caller zeroes it when it needs a fresh value).
//    This is what lets several consumers of one tensor (q feeds three branches,
//    the normed input feeds nine projections) sum their gradients in place, and
//    what makes gradient accumulation over micro-batches free.
//  * Determinism: every op must give bitwise-identical results for identical
//    inputs, whatever the thread count. No floating-point atomics, no reductions
//    whose order depends on scheduling. A row's result must not depend on how many
//    other rows are in the call (this is what makes batched prefill bitwise equal to
//    token-by-token sequential prefill on the CPU).
//  * Optional pointers (NULL allowed) are marked "or NULL".
#ifndef NSA_KERNELS_OPS_H
#define NSA_KERNELS_OPS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "common/nsa_names.h"   // NSA_BR_*, NSA_NBRANCH, NSA_GATE_*

#ifdef __cplusplus
extern "C" {
#endif

// Geometry of one NSA attention call. Filled by nsa_geom_init (below).
typedef struct {
    int B;      // sequences in the micro-batch
    int T;      // tokens per sequence
    int H;      // query heads
    int G;      // KV groups (heads of K/V per branch); H % G == 0
    int D;      // head dimension
    int l;      // compression block length
    int d;      // compression stride (d divides l and lsel)
    int lsel;   // selection block length l'
    int n;      // selected blocks per query (incl. the forced ones), n >= 3
    int w;      // sliding window (keys t-w+1 .. t)
    int NC;     // compressed blocks: T >= l ? (T - l) / d + 1 : 0
    int NS;     // selection blocks: ceil(T / lsel)
    double scale; // softmax scale, 1/sqrt(D)
} NsaGeom;

static inline void nsa_geom_init(NsaGeom *g, int B, int T, int H, int G, int D,
                                 int l, int d, int lsel, int n, int w) {
    g->B = B; g->T = T; g->H = H; g->G = G; g->D = D;
    g->l = l; g->d = d; g->lsel = lsel; g->n = n; g->w = w;
    g->NC = T >= l ? (T - l) / d + 1 : 0;
    g->NS = (T + lsel - 1) / lsel;
    g->scale = 1.0 / sqrt((double)D);
}

// Number of compressed blocks visible to query t: blocks i with i*d + l - 1 <= t.
static inline int nsa_cmp_visible(const NsaGeom *g, int t) {
    if (t < g->l - 1) return 0;
    int v = (t - g->l + 1) / g->d + 1;
    return v < g->NC ? v : g->NC;
}

// Eq. 9 overlap weight w(i,j) = |[i*d, i*d+l) ∩ [j*lsel, (j+1)*lsel)| / d.
static inline int nsa_overlap_num(const NsaGeom *g, int i, int j) {
    int a0 = i * g->d, a1 = i * g->d + g->l, b0 = j * g->lsel, b1 = (j + 1) * g->lsel;
    int lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;   // divide by d for the weight
}

typedef struct Backend Backend;

struct Backend {
    const char *name;       // "cpu", "cpu64", "cuda"
    int act_bytes;          // bytes per activation element
    int param_bytes;        // bytes per parameter / gradient / optimizer element
    int threads;            // worker threads the backend uses (informational)

    // ---- memory -----------------------------------------------------------
    void *(*alloc)(size_t bytes);                  // zero-filled; aborts on OOM
    void (*free)(void *p);
    void (*zero)(void *p, size_t bytes);
    // host <-> backend copies of raw bytes
    void (*to_host)(void *host, const void *dev, size_t bytes);
    void (*from_host)(void *dev, const void *host, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);  // backend -> backend
    void (*sync)(void);
    // the most bytes the backend held allocated at once since the process started
    // (every alloc counted at its requested size, exactly; NULL: not tracked)
    size_t (*mem_peak)(void);
    // convert n elements of the backend's activation type to/from double (host side)
    void (*act_to_f64)(double *host_out, const void *dev, int64_t n);
    void (*act_from_f64)(void *dev, const double *host_in, int64_t n);
    void (*param_to_f64)(double *host_out, const void *dev, int64_t n);
    void (*param_from_f64)(void *dev, const double *host_in, int64_t n);

    // ---- dense ops ---------------------------------------------------------
    // out[M,N] = inp[M,K] · w[N,K]^T (+ bias[N]); w is a parameter (nn.Linear
    // layout). Rows of inp and out may be strided: row m of inp starts at
    // inp + m*ldi, row m of out at out + m*ldo (elements). bias or NULL.
    void (*matmul_fwd)(void *out, int64_t ldo, const void *inp, int64_t ldi,
                       const void *w, const void *bias, int M, int N, int K);
    // Backward of matmul_fwd (dense rows, ld = K for inp, N for dout):
    //   dinp[M,K]  (+= if dinp_accumulate else =)  dout[M,N] · w[N,K]   (or NULL)
    //   dw[N,K]   += dout^T · inp                                       (or NULL)
    //   dbias[N]  += sum over rows of dout                              (or NULL)
    // dw's inner sum runs over m = 0..M-1 in order.
    void (*matmul_bwd)(void *dinp, void *dw, void *dbias, const void *dout,
                       const void *inp, const void *w, int M, int N, int K,
                       int dinp_accumulate);
    // out[N,C] = wte[tokens[n], :]
    void (*embedding_fwd)(void *out, const int32_t *tokens, const void *wte, int N, int C);
    // dwte[tokens[n], :] += dout[n, :], n ascending (deterministic scatter)
    void (*embedding_bwd)(void *dwte, const void *dout, const int32_t *tokens, int N, int C);
    // RMSNorm: rstd[n] = 1/sqrt(mean(inp[n,:]^2) + eps); out = inp * rstd * w
    void (*rmsnorm_fwd)(void *out, void *rstd, const void *inp, const void *w,
                        int N, int C, double eps);
    // dinp[N,C] += ..., dw[C] += ... (sum over n in order)
    void (*rmsnorm_bwd)(void *dinp, void *dw, const void *dout, const void *inp,
                        const void *w, const void *rstd, int N, int C);
    // RoPE, rotate-half convention (as HF Llama): for i < D/2, with
    // (c, s) = rope_cs[pos][i] and pos = t (token index within its sequence),
    //   x[i]     <- x[i] * c - x[i + D/2] * s
    //   x[i+D/2] <- x[i+D/2] * c + x[i] * s
    // x is [B, T, nh, D] in place; rows t0 .. t0+Tn-1 of each sequence are
    // touched (x points at the start of the full [B,T,nh,D] buffer).
    // rope_cs is [Tmax, D/2, 2] (activation type), built by rope_table.
    void (*rope_fwd)(void *x, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D);
    // inverse rotation, in place, applied to a gradient
    void (*rope_bwd)(void *dx, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D);
    // fill rope_cs[Tmax, D/2, 2] with cos/sin(p * theta^(-2i/D)) computed in fp64
    void (*rope_table)(void *rope_cs, int Tmax, int D, double theta);
    // The K/V projections of the three NSA branches as one GEMM (trainer/model.c): the
    // six weights k_cmp, v_cmp, k_sel, v_sel, k_win, v_win are consecutive in the
    // parameter buffer, i.e. one [6*G*D, C] weight, and one matmul_fwd writes
    // kv[nr, 6, G*D]: row i holds the six projections of row r0+i of the B*T rows, in
    // that order. This op scatters it into the six [B,T,G,D] buffers dst[0..5] (same
    // order) at rows r0 .. r0+nr-1 (other rows untouched) and applies RoPE to the three
    // keys dst[0], dst[2], dst[4] on the way, with rope_fwd's arithmetic at position
    // t = r mod T (rope_cs as for rope_fwd, >= T positions). The values are copied.
    void (*kv_split_rope_fwd)(void *const *dst, const void *kv, const void *rope_cs,
                              int64_t r0, int64_t nr, int T, int G, int D);
    // Its backward, the input of one matmul_bwd with N = 6*G*D: dkv[nr, 6, G*D]
    // (overwrite), row i part j = row r0+i of src[j] ([B,T,G,D] each, order as above),
    // the inverse RoPE (rope_bwd's arithmetic) applied to the key gradients src[0],
    // src[2], src[4]; src is read only.
    void (*kv_gather_rope_bwd)(void *dkv, const void *const *src, const void *rope_cs,
                               int64_t r0, int64_t nr, int T, int G, int D);
    // h = silu(a) * b, elementwise over n
    void (*swiglu_fwd)(void *h, const void *a, const void *b, int64_t n);
    // da = dh * b * silu'(a), db = dh * silu(a)   (overwrite)
    void (*swiglu_bwd)(void *da, void *db, const void *dh, const void *a, const void *b, int64_t n);
    void (*silu_fwd)(void *out, const void *inp, int64_t n);
    void (*silu_bwd)(void *dinp, const void *dout, const void *inp, int64_t n);   // overwrite
    void (*add)(void *out, const void *a, const void *b, int64_t n);              // out = a + b
    void (*add_inplace)(void *y, const void *x, int64_t n);                       // y += x
    // Fused softmax cross-entropy (like llm.c's fused classifier):
    //   losses[n] = logsumexp(logits[n,:]) - logits[n, targets[n]]
    //   dlogits[n,:] = (softmax(logits[n,:]) - onehot(targets[n])) * dscale
    // dlogits may alias logits (in-place). targets[n] < 0: ignored row (loss 0,
    // gradient 0). dlogits or NULL (forward only).
    void (*xent_fwd_bwd)(void *losses, void *dlogits, const void *logits,
                         const int32_t *targets, int N, int V, double dscale);

    // ---- reductions / checks on parameter-type buffers (host results) ------
    double (*sumsq_param)(const void *x, int64_t n);   // fixed-order, deterministic
    // sumsq_param of n tensors of one parameter-precision buffer, tensor i at element
    // offset off[i] with len[i] elements: out[i] is bit for bit what sumsq_param gives it,
    // with one host synchronisation for all n (the grad norm of a step: one wait, not one
    // per parameter tensor)
    void (*sumsq_params)(const void *base, const int64_t *off, const int64_t *len, int n, double *out);
    void (*scale_param)(void *x, double s, int64_t n);
    // index of the first non-finite element, or -1
    int64_t (*first_nonfinite_act)(const void *x, int64_t n);
    int64_t (*first_nonfinite_param)(const void *x, int64_t n);
    // AdamW on one tensor (decoupled weight decay):
    //   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
    //   p -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p )
    void (*adamw)(void *p, const void *g, void *m, void *v, int64_t n, double lr,
                  double b1, double b2, double bc1, double bc2, double eps, double wd);
    // AdamW over n runs of one parameter buffer, each as adamw on its elements [off[r], off[r] +
    // len[r]) of p, g, m, v (the buffers' element 0) with weight decay wd[r]: the same bits as
    // n adamw calls, in fewer launches where the backend can
    void (*adamw_runs)(void *p, const void *g, void *m, void *v, const int64_t *off, const int64_t *len,
                       const double *wd, int n, double lr, double b1, double b2, double bc1, double bc2, double eps);
    // The parameter buffer [param_mem, param_mem + n elements) was written by
    // something other than adamw (initialisation, a checkpoint load, a test).
    // Backends that compute from a low-precision copy of the weights refresh it
    // here (and register param_mem as the buffer whose copy they keep); the
    // trainer calls it before the first forward and after every such write.
    // NULL when the backend computes from the parameters themselves (CPU).
    void (*params_changed)(void *param_mem, int64_t n);

    // ---- NSA ----------------------------------------------------------------
    // Layouts: q, dq, o_b, do_b: [B,T,H,D]; k_b, v_b: [B,T,G,D];
    // Kc, Vc: [B,NC,G,D]; lse: [B,T,H] (-inf where a row sees no key);
    // sel_idx: [B,T,G,n] int32, ascending, -1 padded.
    // Every forward computes query rows t0 .. t0+Tn-1 only (all of [0,T) in batched
    // prefill, one row in sequential prefill) and reads only keys at positions
    // <= its row, so calling it row by row gives the batched result bit for bit.
    //
    // Compression phi=avg: Kc[b,i,g,:] = (sum_{r<l} k[b,i*d+r,g,:]) / l for
    // blocks i0 .. i0+Ni-1.
    void (*compress_avg_fwd)(void *Kc, const void *k, const NsaGeom *g, int i0, int Ni);
    // dk += scatter of dKc / l  (all blocks)
    void (*compress_avg_bwd)(void *dk, const void *dKc, const NsaGeom *g);
    // phi=mlp input: X[(b*NC+i)*G+g, r*D+e] = k[b,i*d+r,g,e] + pe[r,e] for blocks
    // i0 .. i0+Ni-1. X is [B*NC*G, l*D] (activation), pe is [l,D] (parameter).
    void (*block_gather_fwd)(void *X, const void *k, const void *pe, const NsaGeom *g, int i0, int Ni);
    // dk += gather^T(dX); dpe += sum over rows of dX (rows in order)
    void (*block_gather_bwd)(void *dk, void *dpe, const void *dX, const NsaGeom *g);

    // Compressed attention over blocks visible to each row (nsa_cmp_visible).
    void (*cmp_attn_fwd)(void *o, void *lse, const void *q, const void *Kc, const void *Vc,
                         const NsaGeom *g, int t0, int Tn);
    // dq += , dKc += , dVc +=  (all rows)
    void (*cmp_attn_bwd)(void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                         const void *Kc, const void *Vc, const void *o, const void *lse,
                         const NsaGeom *g);
    // Selection: p_cmp[t,h,i] = exp(scale q·Kc_i - lse[t,h]) (i visible),
    // score[j] = sum_{h in group} sum_i w(i,j) p_cmp[t,h,i]; forced blocks 0,
    // cur = t/lsel and cur-1; the rest of the n: top scores among j < cur (not
    // forced), ties to the lower index. Output ascending, -1 padded.
    void (*select_blocks)(int32_t *sel_idx, const void *q, const void *Kc, const void *lse,
                          const NsaGeom *g, int t0, int Tn);
    // Attention over the selected blocks' keys s <= t (ascending key order).
    void (*sel_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                         const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn);
    void (*sel_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                         const void *k, const void *v, const void *o, const void *lse,
                         const int32_t *sel_idx, const NsaGeom *g);
    // Sliding window: keys max(0,t-w+1) .. t.
    void (*win_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                         const NsaGeom *g, int t0, int Tn);
    void (*win_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                         const void *k, const void *v, const void *o, const void *lse,
                         const NsaGeom *g);
    // Gate activation over [N, G, 3] logits (N = rows): softmax over the 3
    // branches of each group, or elementwise sigmoid.
    void (*gate_act_fwd)(void *gate, const void *logits, int64_t NG, int act);
    void (*gate_act_bwd)(void *dlogits, const void *dgate, const void *gate, int64_t NG, int act); // overwrite
    // Combine: o[r,h,:] = sum_b gate[r,grp(h),b] * o_b[r,h,:] over the branches b
    // whose pointer is non-NULL, in order cmp, sel, win. rows r in [0, N).
    // gate == NULL means one-hot: exactly one o_b is non-NULL and o = o_b.
    void (*combine_fwd)(void *o, const void *gate, const void *o_cmp, const void *o_sel,
                        const void *o_win, int64_t N, int H, int G, int D);
    // do_b = gate_b * dout (overwrite; NULL branches skipped; gate NULL: do_b = dout);
    // dgate[r,g,b] = sum_{h in g} <dout[r,h,:], o_b[r,h,:]> (overwrite; or NULL)
    void (*combine_bwd)(void *do_cmp, void *do_sel, void *do_win, void *dgate,
                        const void *dout, const void *gate, const void *o_cmp,
                        const void *o_sel, const void *o_win, int64_t N, int H, int G, int D);

    // ---- recorded op sequences (optional: NULL where the backend has none, the CPU) ----
    // A stretch of op calls recorded once and run again later as one unit (CUDA graphs):
    // the run executes exactly the recorded kernels with the recorded arguments (pointers,
    // sizes, scalars), so its results are bitwise those of calling the ops again, as long as
    // nothing the recording baked in has changed since (see generation).
    //  graph_begin: from here on the ops are recorded, not run. Returns 1, or 0 when the
    //    backend does not record now (switched off, or a debugging mode that waits for or
    //    times every op): then nothing changed and the caller runs the ops itself.
    //  graph_end: ends the recording. Returns the executable recording, or NULL when it
    //    cannot be used (something that cannot be recorded was asked for in between: a
    //    memory allocation, a wait for the device, a first-time setup; *why names it).
    //    Nothing recorded has run either way. *nodes (or NULL): the recorded operations.
    //  graph_launch: runs a recording, asynchronously like any op; graph_free releases one
    //    (waiting for a run in flight).
    //  generation: advanced by every (re)allocation of backend memory and every change of a
    //    setting or cached state the ops consult; a recording made at generation g may be
    //    run while generation() is still g.
    int (*graph_begin)(void);
    void *(*graph_end)(size_t *nodes, const char **why);
    void (*graph_launch)(void *graph);
    void (*graph_free)(void *graph);
    uint64_t (*generation)(void);

    // ---- lanes (optional: NULL where the backend has none, the CPU) --------------------
    // Independent streams of ops: ops given to different lanes may run side by side (inside
    // a recording: branches of the graph), each lane with its own scratch and GEMM workspace,
    // so an op computes the same bits on any lane. Ops on one lane run in the order given.
    //  lanes_track: from here on, note the scratch lane 0's ops ask for (the run that is to
    //    be recorded with lanes next).
    //  lanes_open(n): makes up to n lanes (lane 0: the backend's own stream), each given the
    //    scratch noted since lanes_track; returns how many there are (1: no lanes). Never
    //    while recording; allocates (and so advances generation) only when something grew.
    //  lanes_fork: every lane waits for the ops lane 0 was given so far.
    //  lane_use(i): the following ops go to lane i (only between lanes_fork and lanes_join).
    //  lanes_join: lane 0 waits for every lane; the following ops go to lane 0.
    void (*lanes_track)(void);
    int (*lanes_open)(int n);
    void (*lanes_fork)(void);
    void (*lane_use)(int lane);
    void (*lanes_join)(void);

    // ---- start-up accounting (optional; nsa-train's NSA_TRAIN_TIMING) ----------------
    // Up to max named durations (seconds) the backend measured of its own start and first
    // use (device context, libraries, first kernel launch, GEMM plans), in order; names are
    // static or live as long as the process. Returns how many were filled.
    int (*startup_times)(const char **names, double *secs, int max);
};

// Backends available in this build, by name and compute precision ("fp32",
// "fp64", "bf16", "fp16"; NULL = the backend's default: cpu fp32, cpu64 fp64,
// cuda bf16). Returns NULL for an unknown or unavailable combination; `why` (if
// non-NULL) then points at a static explanation.
const Backend *backend_get(const char *name, const char *precision, const char **why);
// The instruction-set extensions the CPU kernels were compiled for (their
// -march), e.g. "x86_64 sse4.2 avx avx2 fma avx512f": part of the build
// fingerprint that decides whether two runs can be bitwise equal.
const char *nsa_cpu_kernel_isa(void);

#ifdef __cplusplus
}
#endif
#endif
