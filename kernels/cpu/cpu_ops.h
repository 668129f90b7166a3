// kernels/cpu/cpu_ops.h — prototypes of the CPU backend's ops (see kernels/ops.h for
// the contract of each). Every function exists twice, CPU_FN(x) = x_f32 / x_f64.
#ifndef NSA_CPU_OPS_H
#define NSA_CPU_OPS_H
#include <stdint.h>
#include "../ops.h"
#include "real.h"

// ---- general matrix product (kernels/cpu/gemm.c) ------------------------------
// Row-major C[M,N] = alpha * op(A)[M,K] · op(B)[K,N] + beta * C, op(X) = X or X^T.
//   transA == 0: A is [M,K] with row stride lda;  transA == 1: A is [K,M] (lda).
//   transB == 0: B is [K,N] with row stride ldb;  transB == 1: B is [N,K] (ldb).
// Determinism contract: the value of C[m,n] depends only on row m of op(A),
// column n of op(B), C[m,n], alpha, beta and K: never on M, N, the position of
// the element in its tile, or the thread count. (The K loop is blocked by a fixed
// constant; every element goes through the same micro-kernel arithmetic.)
// beta == 0 means C is not read (NaN in C does not propagate).
void CPU_FN(gemm)(int transA, int transB, int M, int N, int K, real alpha,
                  const real *A, int64_t lda, const real *B, int64_t ldb,
                  real beta, real *C, int64_t ldc);

// ---- memory (cpu_backend.c) --------------------------------------------------
void CPU_FN(act_to_f64)(double *h, const void *d, int64_t n);
void CPU_FN(act_from_f64)(void *d, const double *h, int64_t n);

// ---- dense ops (kernels/cpu/dense.c) -------------------------------------------
void CPU_FN(matmul_fwd)(void *out, int64_t ldo, const void *inp, int64_t ldi,
                        const void *w, const void *bias, int M, int N, int K);
void CPU_FN(matmul_bwd)(void *dinp, void *dw, void *dbias, const void *dout,
                        const void *inp, const void *w, int M, int N, int K, int dinp_accumulate);
void CPU_FN(embedding_fwd)(void *out, const int32_t *tokens, const void *wte, int N, int C);
void CPU_FN(embedding_bwd)(void *dwte, const void *dout, const int32_t *tokens, int N, int C);
void CPU_FN(rmsnorm_fwd)(void *out, void *rstd, const void *inp, const void *w, int N, int C, double eps);
void CPU_FN(rmsnorm_bwd)(void *dinp, void *dw, const void *dout, const void *inp,
                         const void *w, const void *rstd, int N, int C);
void CPU_FN(rope_fwd)(void *x, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D);
void CPU_FN(rope_bwd)(void *dx, const void *rope_cs, int B, int T, int t0, int Tn, int nh, int D);
void CPU_FN(rope_table)(void *rope_cs, int Tmax, int D, double theta);
void CPU_FN(kv_split_rope_fwd)(void *const *dst, const void *kv, const void *rope_cs, int64_t r0,
                               int64_t nr, int T, int G, int D);
void CPU_FN(kv_gather_rope_bwd)(void *dkv, const void *const *src, const void *rope_cs, int64_t r0,
                                int64_t nr, int T, int G, int D);
void CPU_FN(swiglu_fwd)(void *h, const void *a, const void *b, int64_t n);
void CPU_FN(swiglu_bwd)(void *da, void *db, const void *dh, const void *a, const void *b, int64_t n);
void CPU_FN(silu_fwd)(void *out, const void *inp, int64_t n);
void CPU_FN(silu_bwd)(void *dinp, const void *dout, const void *inp, int64_t n);
void CPU_FN(add)(void *out, const void *a, const void *b, int64_t n);
void CPU_FN(add_inplace)(void *y, const void *x, int64_t n);
void CPU_FN(xent_fwd_bwd)(void *losses, void *dlogits, const void *logits,
                          const int32_t *targets, int N, int V, double dscale);
double CPU_FN(sumsq_param)(const void *x, int64_t n);
void CPU_FN(sumsq_params)(const void *base, const int64_t *off, const int64_t *len, int n, double *out);
void CPU_FN(scale_param)(void *x, double s, int64_t n);
int64_t CPU_FN(first_nonfinite)(const void *x, int64_t n);
void CPU_FN(adamw)(void *p, const void *g, void *m, void *v, int64_t n, double lr,
                   double b1, double b2, double bc1, double bc2, double eps, double wd);
void CPU_FN(adamw_runs)(void *p, const void *g, void *m, void *v, const int64_t *off, const int64_t *len,
                        const double *wd, int n, double lr, double b1, double b2, double bc1, double bc2, double eps);

// ---- NSA (kernels/cpu/nsa_*.c) ---------------------------------------------------
void CPU_FN(compress_avg_fwd)(void *Kc, const void *k, const NsaGeom *g, int i0, int Ni);
void CPU_FN(compress_avg_bwd)(void *dk, const void *dKc, const NsaGeom *g);
void CPU_FN(block_gather_fwd)(void *X, const void *k, const void *pe, const NsaGeom *g, int i0, int Ni);
void CPU_FN(block_gather_bwd)(void *dk, void *dpe, const void *dX, const NsaGeom *g);
void CPU_FN(cmp_attn_fwd)(void *o, void *lse, const void *q, const void *Kc, const void *Vc,
                          const NsaGeom *g, int t0, int Tn);
void CPU_FN(cmp_attn_bwd)(void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                          const void *Kc, const void *Vc, const void *o, const void *lse,
                          const NsaGeom *g);
void CPU_FN(select_blocks)(int32_t *sel_idx, const void *q, const void *Kc, const void *lse,
                           const NsaGeom *g, int t0, int Tn);
void CPU_FN(sel_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn);
void CPU_FN(sel_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const int32_t *sel_idx, const NsaGeom *g);
void CPU_FN(win_attn_fwd)(void *o, void *lse, const void *q, const void *k, const void *v,
                          const NsaGeom *g, int t0, int Tn);
void CPU_FN(win_attn_bwd)(void *dq, void *dk, void *dv, const void *dout, const void *q,
                          const void *k, const void *v, const void *o, const void *lse,
                          const NsaGeom *g);
void CPU_FN(gate_act_fwd)(void *gate, const void *logits, int64_t NG, int act);
void CPU_FN(gate_act_bwd)(void *dlogits, const void *dgate, const void *gate, int64_t NG, int act);
void CPU_FN(combine_fwd)(void *o, const void *gate, const void *o_cmp, const void *o_sel,
                         const void *o_win, int64_t N, int H, int G, int D);
void CPU_FN(combine_bwd)(void *do_cmp, void *do_sel, void *do_win, void *dgate,
                         const void *dout, const void *gate, const void *o_cmp,
                         const void *o_sel, const void *o_win, int64_t N, int H, int G, int D);

// The filled op table of this precision (cpu_backend.c).
extern const Backend CPU_FN(cpu_backend);
#endif
