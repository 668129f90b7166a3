// kernels/cpu/dense.c — the dense ops of the CPU backend (everything in ops.h that is
// not NSA attention): linear layers, embedding, RMSNorm, RoPE, SwiGLU/SiLU, adds,
// the fused softmax cross-entropy, and the parameter-buffer reductions and AdamW.
// Compiled twice (real = float / double, see real.h); semantics are in ops.h.
//
// Determinism (the ops.h conventions): every result is a fixed function of its
// inputs. Threads split work only along dimensions whose elements are computed
// independently (rows, or columns of a column reduction); every reduction runs in a
// fixed order that depends on the data sizes only, never on the thread count or on
// how many rows share the call. Reductions of float data accumulate in double.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#define OMP_PRAGMA(x) _Pragma(#x)
#define OMP(x) OMP_PRAGMA(omp x)
#else
#define OMP(x)
#endif
#include "cpu_ops.h"

// Below this many elements of work a parallel region costs more than it saves.
#define PAR_MIN 32768
// Columns per task in column reductions (dbias, dW of RMSNorm, embedding scatter):
// 64 accumulators stay in registers / L1 while the rows stream past.
#define COL_CHUNK 64

// Sum of squares of x[0..n) in double, in a fixed order: 8 interleaved partial sums
// (element i goes to partial i % 8; the compiler turns the 8 into one vector of
// independent accumulators instead of one serial chain), then combined pairwise.
// Depends only on n and the values.
static double sumsq_d(const real *x, int64_t n) {
    double p[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) p[j] += (double)x[i + j] * (double)x[i + j];
    for (; i < n; i++) p[i & 7] += (double)x[i] * (double)x[i];
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// ---- linear layer ---------------------------------------------------------------------

void CPU_FN(matmul_fwd)(void *out_, int64_t ldo, const void *inp_, int64_t ldi,
                        const void *w_, const void *bias_, int M, int N, int K) {
    real *out = out_;
    const real *inp = inp_, *w = w_, *bias = bias_;
    // w is [N,K] (nn.Linear), i.e. op(B) = w^T: transB. Each row of out depends on
    // its row of inp only (gemm contract), so the bias pass keeps that too.
    CPU_FN(gemm)(0, 1, M, N, K, 1, inp, ldi, w, K, 0, out, ldo);
    if (!bias) return;
    OMP(parallel for schedule(static) if ((int64_t)M * N >= PAR_MIN))
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) out[m * ldo + n] += bias[n];
}

void CPU_FN(matmul_bwd)(void *dinp_, void *dw_, void *dbias_, const void *dout_,
                        const void *inp_, const void *w_, int M, int N, int K,
                        int dinp_accumulate) {
    real *dinp = dinp_, *dw = dw_, *dbias = dbias_;
    const real *dout = dout_, *inp = inp_, *w = w_;
    // dinp[M,K] = dout[M,N] . w[N,K]; beta = 1 accumulates, beta = 0 never reads dinp.
    if (dinp) CPU_FN(gemm)(0, 0, M, K, N, 1, dout, N, w, K, dinp_accumulate ? 1 : 0, dinp, K);
    // dw[N,K] += dout^T . inp: op(A) = dout^T (transA on the stored [M,N]), inner
    // dimension m, summed in ascending K blocks of m by the gemm.
    if (dw) CPU_FN(gemm)(1, 0, N, K, M, 1, dout, N, inp, K, 1, dw, K);
    if (!dbias) return;
    // Column sums, rows in ascending order, in double; parallel over column chunks.
    int nchunk = (N + COL_CHUNK - 1) / COL_CHUNK;
    OMP(parallel for schedule(static) if ((int64_t)M * N >= PAR_MIN))
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * COL_CHUNK, nc = N - c0 < COL_CHUNK ? N - c0 : COL_CHUNK;
        double s[COL_CHUNK] = {0};
        for (int m = 0; m < M; m++)
            for (int j = 0; j < nc; j++) s[j] += dout[(int64_t)m * N + c0 + j];
        for (int j = 0; j < nc; j++) dbias[c0 + j] = (real)(dbias[c0 + j] + s[j]);
    }
}

// ---- embedding -------------------------------------------------------------------------

void CPU_FN(embedding_fwd)(void *out_, const int32_t *tokens, const void *wte_, int N, int C) {
    real *out = out_;
    const real *wte = wte_;
    OMP(parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN))
    for (int n = 0; n < N; n++)
        memcpy(out + (int64_t)n * C, wte + (int64_t)tokens[n] * C, (size_t)C * sizeof(real));
}

void CPU_FN(embedding_bwd)(void *dwte_, const void *dout_, const int32_t *tokens, int N, int C) {
    real *dwte = dwte_;
    const real *dout = dout_;
    // A token repeated in the batch receives its rows' gradients in ascending n. Threads
    // take disjoint column ranges (never ranges of n), so no two threads touch one
    // element and each element's additions keep that order.
    int nchunk = (C + COL_CHUNK - 1) / COL_CHUNK;
    OMP(parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN))
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * COL_CHUNK, nc = C - c0 < COL_CHUNK ? C - c0 : COL_CHUNK;
        for (int n = 0; n < N; n++) {
            real *d = dwte + (int64_t)tokens[n] * C + c0;
            const real *g = dout + (int64_t)n * C + c0;
            for (int j = 0; j < nc; j++) d[j] += g[j];
        }
    }
}

// ---- RMSNorm ---------------------------------------------------------------------------
// rstd = 1/sqrt(mean(x^2) + eps): the sum of squares is accumulated in double (for
// float too: C up to thousands of terms), the mean, eps and the square root are done
// in double, and the result is rounded once to real and stored. out = (x * rstd) * w
// in real arithmetic, using the stored (rounded) rstd, the same value backward uses.

void CPU_FN(rmsnorm_fwd)(void *out_, void *rstd_, const void *inp_, const void *w_,
                         int N, int C, double eps) {
    real *out = out_, *rstd = rstd_;
    const real *inp = inp_, *w = w_;
    OMP(parallel for schedule(static) if ((int64_t)N * C >= PAR_MIN))
    for (int n = 0; n < N; n++) {
        const real *x = inp + (int64_t)n * C;
        real *o = out + (int64_t)n * C;
        real r = (real)(1.0 / sqrt(sumsq_d(x, C) / C + eps));
        rstd[n] = r;
        for (int i = 0; i < C; i++) o[i] = x[i] * r * w[i];
    }
}

// With xhat = x * r and g = dout * w:
//   dx_i = r * (g_i - xhat_i * mean_j(g_j xhat_j))   (r depends on x through mean(x^2))
//   dw_i = sum_n dout_{n,i} xhat_{n,i}
void CPU_FN(rmsnorm_bwd)(void *dinp_, void *dw_, const void *dout_, const void *inp_,
                         const void *w_, const void *rstd_, int N, int C) {
    real *dinp = dinp_, *dw = dw_;
    const real *dout = dout_, *inp = inp_, *w = w_, *rstd = rstd_;
    int par = (int64_t)N * C >= PAR_MIN;
    (void)par;
    // dinp: rows are independent; the row's dot product runs in double, fixed order.
    OMP(parallel for schedule(static) if (par))
    for (int n = 0; n < N; n++) {
        const real *x = inp + (int64_t)n * C, *dy = dout + (int64_t)n * C;
        real *dx = dinp + (int64_t)n * C;
        real r = rstd[n];
        double p[8] = {0};       // sum_i g_i * xhat_i, in sumsq_d's 8-way order
        int i = 0;
        for (; i + 8 <= C; i += 8)
            for (int j = 0; j < 8; j++)
                p[j] += (double)(dy[i + j] * w[i + j]) * (double)(x[i + j] * r);
        for (; i < C; i++) p[i & 7] += (double)(dy[i] * w[i]) * (double)(x[i] * r);
        double dot = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
        real mean = (real)(dot / C);
        for (i = 0; i < C; i++) dx[i] += r * (dy[i] * w[i] - (x[i] * r) * mean);
    }
    // dw: a column reduction over rows; threads split columns, rows run in order.
    int nchunk = (C + COL_CHUNK - 1) / COL_CHUNK;
    OMP(parallel for schedule(static) if (par))
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * COL_CHUNK, nc = C - c0 < COL_CHUNK ? C - c0 : COL_CHUNK;
        double s[COL_CHUNK] = {0};
        for (int n = 0; n < N; n++) {
            const real *x = inp + (int64_t)n * C + c0, *dy = dout + (int64_t)n * C + c0;
            real r = rstd[n];
            for (int j = 0; j < nc; j++) s[j] += (double)dy[j] * (double)(x[j] * r);
        }
        for (int j = 0; j < nc; j++) dw[c0 + j] = (real)(dw[c0 + j] + s[j]);
    }
}

// ---- RoPE ------------------------------------------------------------------------------
// Rotate-half pairs (i, i + D/2) of every head of rows t0 .. t0+Tn-1 of each sequence
// by the angle of position t; inverse: rotate by minus that angle (the transpose of
// the rotation, which is what the gradient goes through).
// One head of D values, src -> dst (dst may be src): the arithmetic every RoPE op
// shares (rope_fwd/bwd and the fused K/V split/gather below), so that they agree bit
// for bit. c = rope_cs row of the position.
static inline void rope_head(real *dst, const real *src, const real *c, int half, int inverse) {
    for (int i = 0; i < half; i++) {
        real co = c[2 * i], si = inverse ? -c[2 * i + 1] : c[2 * i + 1];
        real x1 = src[i], x2 = src[i + half];
        dst[i] = x1 * co - x2 * si;
        dst[i + half] = x2 * co + x1 * si;
    }
}

static void rope_apply(real *x, const real *cs, int B, int T, int t0, int Tn, int nh, int D,
                       int inverse) {
    int half = D / 2;
    int64_t rows = (int64_t)B * Tn;
    OMP(parallel for schedule(static) if (rows * nh * D >= PAR_MIN))
    for (int64_t r = 0; r < rows; r++) {
        int b = (int)(r / Tn), t = t0 + (int)(r % Tn);
        const real *c = cs + (int64_t)t * half * 2;
        for (int h = 0; h < nh; h++) {
            real *p = x + (((int64_t)b * T + t) * nh + h) * D;
            rope_head(p, p, c, half, inverse);
        }
    }
}

void CPU_FN(rope_fwd)(void *x, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D) {
    rope_apply(x, rope_cs, B, T, t0, Tn, nh, D, 0);
}

// Forward is y = R x with R = [[c, -s], [s, c]] per pair; the gradient is R^T dy,
// i.e. the rotation by -angle: the same code with s negated (exact in floating point).
void CPU_FN(rope_bwd)(void *dx, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D) {
    rope_apply(dx, rope_cs, B, T, t0, Tn, nh, D, 1);
}

// The fused K/V projection's split (forward) and gather (backward): kv[nr, 6, G*D] <->
// the six [B*T, G*D] buffers k_cmp, v_cmp, k_sel, v_sel, k_win, v_win, RoPE on the
// keys (parts 0, 2, 4) at position r mod T. Copies and rope_head only: the values are
// exact, the keys get rope_fwd's / rope_bwd's bits. Rows are independent.
// bwd = 0: bufs[j][r] = RoPE(kv[i, j]) (keys) or kv[i, j] (values), r = r0 + i;
// bwd = 1: kv[i, j] = RoPE^-1(bufs[j][r]) (key gradients) or bufs[j][r] (value gradients).
static void kv_move(real *kv, real *const *bufs, const real *cs, int64_t r0, int64_t nr, int T, int G, int D,
                    int bwd) {
    const int GD = G * D, half = D / 2;
    OMP(parallel for schedule(static) if (nr * 6 * GD >= PAR_MIN))
    for (int64_t i = 0; i < nr; i++) {
        const int64_t r = r0 + i;
        const real *c = cs + (int64_t)(r % T) * half * 2;
        for (int j = 0; j < 6; j++) {
            real *part = kv + (i * 6 + j) * GD, *buf = bufs[j] + r * GD;
            real *dst = bwd ? part : buf;
            const real *src = bwd ? buf : part;
            if (j & 1) memcpy(dst, src, (size_t)GD * sizeof(real));   // a value (or its gradient)
            else
                for (int h = 0; h < G; h++) rope_head(dst + h * D, src + h * D, c, half, bwd);
        }
    }
}

void CPU_FN(kv_split_rope_fwd)(void *const *dst, const void *kv, const void *rope_cs, int64_t r0,
                               int64_t nr, int T, int G, int D) {
    kv_move((real *)kv, (real *const *)dst, rope_cs, r0, nr, T, G, D, 0);   // kv only read
}

void CPU_FN(kv_gather_rope_bwd)(void *dkv, const void *const *src, const void *rope_cs, int64_t r0,
                                int64_t nr, int T, int G, int D) {
    kv_move(dkv, (real *const *)src, rope_cs, r0, nr, T, G, D, 1);   // src only read
}

void CPU_FN(rope_table)(void *rope_cs_, int Tmax, int D, double theta) {
    real *cs = rope_cs_;
    int half = D / 2;
    OMP(parallel for schedule(static) if ((int64_t)Tmax * D >= PAR_MIN))
    for (int p = 0; p < Tmax; p++)
        for (int i = 0; i < half; i++) {
            double ang = (double)p * pow(theta, -2.0 * i / D);
            cs[((int64_t)p * half + i) * 2] = (real)cos(ang);
            cs[((int64_t)p * half + i) * 2 + 1] = (real)sin(ang);
        }
}

// ---- SwiGLU / SiLU ---------------------------------------------------------------------
// sigmoid(a) = 1 / (1 + exp(-a)): for a -> -inf exp overflows to inf and the result
// is 0, for a -> +inf it is 1; no NaN for any finite a.
static inline real sigmoid_r(real a) { return 1 / (1 + R_EXP(-a)); }

void CPU_FN(swiglu_fwd)(void *h_, const void *a_, const void *b_, int64_t n) {
    real *h = h_;
    const real *a = a_, *b = b_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) h[i] = a[i] * sigmoid_r(a[i]) * b[i];
}

// silu'(a) = s + a s (1 - s) = s (1 + a (1 - s)), s = sigmoid(a).
void CPU_FN(swiglu_bwd)(void *da_, void *db_, const void *dh_, const void *a_, const void *b_,
                        int64_t n) {
    real *da = da_, *db = db_;
    const real *dh = dh_, *a = a_, *b = b_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) {
        real ai = a[i], dhi = dh[i], bi = b[i];   // all read first: da/db may alias inputs
        real s = sigmoid_r(ai);
        db[i] = dhi * (ai * s);
        da[i] = dhi * bi * (s * (1 + ai * (1 - s)));
    }
}

void CPU_FN(silu_fwd)(void *out_, const void *inp_, int64_t n) {
    real *out = out_;
    const real *inp = inp_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) out[i] = inp[i] * sigmoid_r(inp[i]);
}

void CPU_FN(silu_bwd)(void *dinp_, const void *dout_, const void *inp_, int64_t n) {
    real *dinp = dinp_;
    const real *dout = dout_, *inp = inp_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) {
        real s = sigmoid_r(inp[i]);
        dinp[i] = dout[i] * (s * (1 + inp[i] * (1 - s)));
    }
}

void CPU_FN(add)(void *out_, const void *a_, const void *b_, int64_t n) {
    real *out = out_;
    const real *a = a_, *b = b_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void CPU_FN(add_inplace)(void *y_, const void *x_, int64_t n) {
    real *y = y_;
    const real *x = x_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

// ---- fused softmax cross-entropy -----------------------------------------------------------
// Per row, max-subtracted: e_i = exp(x_i - max) (each <= 1, no overflow for any finite
// logits), s = sum e_i in double (ascending i), lse = max + log(s) in double.
// With dlogits the e_i are stored there on the way (one exp per element), then scaled:
// d_i = (e_i / s - [i == target]) * dscale. Every read of a logit in a row happens
// before the write of the same element, and the target logit is read first, so
// dlogits == logits works.
void CPU_FN(xent_fwd_bwd)(void *losses_, void *dlogits_, const void *logits_,
                          const int32_t *targets, int N, int V, double dscale) {
    real *losses = losses_, *dlogits = dlogits_;
    const real *logits = logits_;
    OMP(parallel for schedule(static) if ((int64_t)N * V >= PAR_MIN))
    for (int n = 0; n < N; n++) {
        const real *x = logits + (int64_t)n * V;
        real *d = dlogits ? dlogits + (int64_t)n * V : NULL;
        int t = targets[n];
        if (t < 0) {             // ignored row
            losses[n] = 0;
            if (d) memset(d, 0, (size_t)V * sizeof(real));
            continue;
        }
        real xt = x[t], mx = x[0];
        for (int i = 1; i < V; i++) mx = x[i] > mx ? x[i] : mx;
        double s = 0;
        if (d) {
            for (int i = 0; i < V; i++) {
                real e = R_EXP(x[i] - mx);
                d[i] = e;
                s += e;
            }
        } else {
            for (int i = 0; i < V; i++) s += R_EXP(x[i] - mx);
        }
        losses[n] = (real)((double)mx + log(s) - (double)xt);
        if (d) {
            real inv = (real)(1.0 / s), ds = (real)dscale, et = d[t];
            for (int i = 0; i < V; i++) d[i] = d[i] * inv * ds;
            d[t] = (et * inv - 1) * ds;
        }
    }
}

// ---- parameter-buffer reductions and the optimizer ---------------------------------------
// Fixed-size chunks: the partition of a buffer, and so the order of every addition,
// depends only on n.
#define RED_CHUNK 16384

double CPU_FN(sumsq_param)(const void *x_, int64_t n) {
    const real *x = x_;
    int64_t nchunk = (n + RED_CHUNK - 1) / RED_CHUNK;
    if (nchunk <= 1) return sumsq_d(x, n);
    double *part = malloc((size_t)nchunk * sizeof(double));
    if (!part) {
        fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
        exit(1);
    }
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t c = 0; c < nchunk; c++) {
        int64_t i0 = c * RED_CHUNK;
        part[c] = sumsq_d(x + i0, n - i0 < RED_CHUNK ? n - i0 : RED_CHUNK);
    }
    double s = 0;
    for (int64_t c = 0; c < nchunk; c++) s += part[c];
    free(part);
    return s;
}

void CPU_FN(sumsq_params)(const void *base, const int64_t *off, const int64_t *len, int n, double *out) {
    for (int i = 0; i < n; i++) out[i] = CPU_FN(sumsq_param)((const real *)base + off[i], len[i]);
}

// x = x * s, the product formed in double and rounded once.
void CPU_FN(scale_param)(void *x_, double s, int64_t n) {
    real *x = x_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) x[i] = (real)((double)x[i] * s);
}

// Lowest index whose element is NaN or +-inf, or -1. Chunks are scanned in parallel;
// the minimum over chunks is the first index whatever the schedule.
int64_t CPU_FN(first_nonfinite)(const void *x_, int64_t n) {
    const real *x = x_;
    int64_t nchunk = (n + RED_CHUNK - 1) / RED_CHUNK;
    int64_t first = INT64_MAX;
    OMP(parallel for schedule(static) reduction(min : first) if (n >= PAR_MIN))
    for (int64_t c = 0; c < nchunk; c++) {
        int64_t i0 = c * RED_CHUNK, i1 = n - i0 < RED_CHUNK ? n : i0 + RED_CHUNK;
        // x - x is 0 for finite x and NaN for NaN/inf: a branch-free test the compiler
        // vectorises; the exact index is searched only in a chunk that has one.
        int bad = 0;
        for (int64_t i = i0; i < i1; i++) bad |= !(x[i] - x[i] == 0);
        if (!bad) continue;
        for (int64_t i = i0; i < i1; i++)
            if (!isfinite(x[i])) {
                if (i < first) first = i;
                break;
            }
    }
    return first == INT64_MAX ? -1 : first;
}

// AdamW, per element in double, state and parameter rounded once when stored:
//   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   p -= lr * ( (m / bc1) / (sqrt(v / bc2) + eps) + wd * p )
// (bc1, bc2 are the bias corrections 1 - b^t, passed by the caller.)
void CPU_FN(adamw)(void *p_, const void *g_, void *m_, void *v_, int64_t n, double lr,
                   double b1, double b2, double bc1, double bc2, double eps, double wd) {
    real *p = p_, *m = m_, *v = v_;
    const real *g = g_;
    OMP(parallel for schedule(static) if (n >= PAR_MIN))
    for (int64_t i = 0; i < n; i++) {
        double gi = g[i], pi = p[i];
        double mi = b1 * (double)m[i] + (1 - b1) * gi;
        double vi = b2 * (double)v[i] + (1 - b2) * gi * gi;
        m[i] = (real)mi;
        v[i] = (real)vi;
        p[i] = (real)(pi - lr * ((mi / bc1) / (sqrt(vi / bc2) + eps) + wd * pi));
    }
}
void CPU_FN(adamw_runs)(void *p, const void *g, void *m, void *v, const int64_t *off, const int64_t *len,
                        const double *wd, int n, double lr, double b1, double b2, double bc1, double bc2, double eps) {
    for (int r = 0; r < n; r++)
        CPU_FN(adamw)((real *)p + off[r], (const real *)g + off[r], (real *)m + off[r], (real *)v + off[r], len[r], lr, b1, b2,
                      bc1, bc2, eps, wd[r]);
}
