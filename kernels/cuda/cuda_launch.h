// kernels/cuda/cuda_launch.h — the extern "C" launchers of the CUDA backend.
//
// Every op of kernels/ops.h exists here once, with the activation element type as
// its first argument (NSA_DT_*); cuda_backend.cu binds them into three Backend
// tables ("cuda" bf16 / fp32 / fp16). Kernels live in the .cu files next to their
// launchers; this header is plain C so tests and benchmarks can call the
// launchers directly. All launchers are asynchronous on the backend's one stream
// unless documented otherwise.
#ifndef NSA_KERNELS_CUDA_LAUNCH_H
#define NSA_KERNELS_CUDA_LAUNCH_H
#include <stddef.h>
#include <stdint.h>
#include "kernels/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

// activation element types (parameters, gradients, optimizer state are always fp32)
enum { NSA_DT_F32 = 0, NSA_DT_BF16 = 1, NSA_DT_F16 = 2 };

// ---- backend state and memory (cuda_backend.cu) -------------------------------------
// 1 when a device is usable (initialises stream and cuBLASLt on the first call);
// otherwise 0 and *why explains.
int nsa_cuda_init(const char **why);
const Backend *cuda_backend_get(const char *precision, const char **why);
// Attention implementation: 0 = auto (tensor-core kernels where dtype and shape
// allow), 1 = simple kernels everywhere (the reference-style CUDA path). Tests and
// benchmarks flip it; NSA_CUDA_ATTN=simple in the environment sets 1 at start.
void nsa_cuda_set_attn_impl(int impl);
// selection-branch tiles of two query positions when heads per group <= 8 (default on;
// NSA_CUDA_SEL_PACK=0 in the environment turns it off)
void nsa_cuda_set_sel_pack(int on);
// selection-branch forward and dQ on the 64-row tiles of the compressed / window kernels,
// walking the union of the blocks their positions selected: -1 by shape (default), 0 never,
// 1 wherever they can (l' a multiple of 64); NSA_CUDA_SEL_ROWS=-1/0/1 in the environment
void nsa_cuda_set_sel_rows(int mode);
// dK/dV of the window and compressed branches on the warp-specialised kernel (128 keys a CTA,
// a producer warpgroup feeding two consumers): -1 by head size (default: D 128), 0 never, 1
// wherever it can (warpgroup MMA on, D 64 or 128); NSA_CUDA_DKDV_WS=-1/0/1 in the environment
void nsa_cuda_set_dkdv_ws(int mode);
// dQ of the window and compressed branches on the warp-specialised rows kernel (two 64-row tiles
// a CTA, a producer warpgroup streaming their keys): -1 by head size (D 128, the default), 0 never,
// 1 wherever it can (warpgroup MMA on, D 64 or 128); NSA_CUDA_DQ_WS=-1/0/1 in the environment
void nsa_cuda_set_dq_ws(int mode);
// the forward of the compressed and window branches (and the selection on the rows kernels) on
// the warp-specialised rows kernel (two 64-row tiles a CTA, a producer warpgroup streaming their
// keys): -1 by branch and head size (the default: window at D 64 and 128, compressed at D 128), 0
// never, 1 wherever it can (warpgroup MMA on, D 64 or 128); NSA_CUDA_FWD_WS=-1/0/1 in the environment
void nsa_cuda_set_fwd_ws(int mode);
// the selection's top-n kept as the scoring walks its chunks (a ring of block scores and a sorted
// list a position in shared memory) instead of chosen from every block's score at the end, where
// a chunk overlaps at most 62 selection blocks: 1 (default) wherever it fits, 0 never;
// NSA_CUDA_SELECT_STREAM=0/1
void nsa_cuda_set_select_stream(int on);
// the selection scoring on tiles of 64 positions of one head, the group's heads in turn (their
// Q tiles resident), where the streaming top-n runs with warpgroup MMA and two CTAs fit an SM:
// -1 (default) there when its 64-position tiles number at least 3 an SM, 1 wherever it can, 0 never;
// the same blocks either way where the scoring adds a position's heads in ascending order
// (NSA_CUDA_SELECT_PAD 0 or 2); NSA_CUDA_SELECT_POS=-1/0/1
void nsa_cuda_set_select_pos(int mode);
// the selection scoring at 5..15 heads a group with each position's heads padded to 8 rows (two
// positions a warp) or 16 (one), summed without the shared P tile's block barriers: 0 never; 1
// the head sums as butterflies in registers (other low bits than 0: a near tie may pick another
// block); 2 (default) the heads added in the P tile's order through a warp's own staging tile
// (the bits of 0); NSA_CUDA_SELECT_PAD=0/1/2
void nsa_cuda_set_select_pad(int mode);
// the warp-specialised dK/dV's row chunks at the group's multiples of the chunk length where the
// key chunks' rows are long runs of positions (compressed branch, dense causal), launched chunk
// by chunk so that the CTAs in flight read the same Q and dO rows: 1 (default) or 0 (each key
// chunk's rows chunked from its first row; 2: on the 64-key kernel too); NSA_CUDA_DKDV_ALIGN=0/1/2
void nsa_cuda_set_dkdv_align(int mode);
// the selection's dQ on its TMA kernel (k_sel_dq_tma) with nw warps a CTA (1 or 2; 0 never;
// -1, the default: 1 at D 128 where a rows tile's positions share few blocks, else 0), wherever
// it can run (even where the forward takes the rows kernels); NSA_CUDA_SEL_DQ_TMA=-1/0/1/2
void nsa_cuda_set_sel_dq_tma(int nw);
// the warp-specialised dK/dV's row tiles of whole positions by TMA where the group's heads divide
// 64 (1, the default; 0: cp.async); the same bits either way; NSA_CUDA_DKDV_TMA=0/1
void nsa_cuda_set_dkdv_tma(int on);
// the warp-specialised rows kernels' (forward and dQ) K/V chunks by TMA where the whole chunk is
// before the tiles' key end, and the selection scoring's K chunks (1, the default; 0: cp.async);
// the same bits either way; NSA_CUDA_ROWS_TMA=0/1
void nsa_cuda_set_rows_tma(int on);
// the warp-specialised rows forward's key chunks at D 128, window and compressed branches: 128
// keys (1), 64 (0) or by shape (-1, the default: 128 where the window covers every row's keys,
// the dense causal attention); other bits (the softmax's running maxima move at other keys);
// NSA_CUDA_FWD_KC128=-1/0/1
void nsa_cuda_set_fwd_kc128(int mode);
// the warp-specialised rows forward's two consumers issuing their products in turns where they
// overlap them (D 128, window and compressed): 1 on, 0 off, -1 (the default) on its 128-key chunks
// only (nsa_fwd_pingpong); the same bits; NSA_CUDA_FWD_PINGPONG=-1/0/1
void nsa_cuda_set_fwd_pingpong(int mode);
// the 64-key dK/dV kernel's row tiles at D 128 with warpgroup MMA (the selection's dK/dV): 64 rows
// (1, the default) or 32 (0); the same bits either way; NSA_CUDA_DKDV_RT64=0/1
void nsa_cuda_set_dkdv_rt64(int on);
// stages of the selection's TMA feed (forward and dQ), 2 (default) to 4; NSA_CUDA_SEL_TMA_NST
void nsa_cuda_set_sel_tma_nst(int nst);
// positions whose rows share a tile of the selection forward at this geometry under the
// current settings (dt, 16-byte aligned buffers): a non-finite key any of them selected
// reaches all of their rows (docs/cuda.md, Limits)
int nsa_cuda_sel_tile_positions(int dt, const NsaGeom *g);
// Hopper warpgroup-MMA (wgmma) kernels where built (sm_90a) and the device runs them
// (default on; NSA_CUDA_WGMMA=0 in the environment turns them off). Returns whether they
// are on after the call (0 when this build or device has none).
int nsa_cuda_set_wgmma(int on);
int nsa_cuda_get_attn_impl(void);
// bytes currently allocated through Backend.alloc + backend scratch, and the peak
size_t nsa_cuda_bytes_in_use(void);
size_t nsa_cuda_peak_bytes(void);
void nsa_cuda_sync(void);

// ---- dense ops (cuda_gemm.cu, cuda_dense.cu, cuda_embed.cu, cuda_kv.cu) --------------
void nsa_cuda_matmul_fwd(int dt, void *out, int64_t ldo, const void *inp, int64_t ldi,
                         const void *w, const void *bias, int M, int N, int K);
void nsa_cuda_matmul_bwd(int dt, void *dinp, void *dw, void *dbias, const void *dout,
                         const void *inp, const void *w, int M, int N, int K, int dinp_accumulate);
void nsa_cuda_embedding_fwd(int dt, void *out, const int32_t *tokens, const void *wte, int N, int C);
void nsa_cuda_embedding_bwd(int dt, void *dwte, const void *dout, const int32_t *tokens, int N, int C);
void nsa_cuda_rmsnorm_fwd(int dt, void *out, void *rstd, const void *inp, const void *w, int N, int C,
                          double eps);
void nsa_cuda_rmsnorm_bwd(int dt, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                          const void *rstd, int N, int C);
void nsa_cuda_rope_fwd(int dt, void *x, const void *cs, int B, int T, int t0, int Tn, int nh, int D);
void nsa_cuda_rope_bwd(int dt, void *x, const void *cs, int B, int T, int t0, int Tn, int nh, int D);
void nsa_cuda_rope_table(int dt, void *cs, int Tmax, int D, double theta);
// the fused K/V projection's split / gather with RoPE on the keys (cuda_kv.cu)
void nsa_cuda_kv_split_rope_fwd(int dt, void *const *dst, const void *kv, const void *rope_cs, int64_t r0,
                                int64_t nr, int T, int G, int D);
void nsa_cuda_kv_gather_rope_bwd(int dt, void *dkv, const void *const *src, const void *rope_cs, int64_t r0,
                                 int64_t nr, int T, int G, int D);
void nsa_cuda_swiglu_fwd(int dt, void *h, const void *a, const void *b, int64_t n);
void nsa_cuda_swiglu_bwd(int dt, void *da, void *db, const void *dh, const void *a, const void *b, int64_t n);
void nsa_cuda_silu_fwd(int dt, void *out, const void *inp, int64_t n);
void nsa_cuda_silu_bwd(int dt, void *dinp, const void *dout, const void *inp, int64_t n);
void nsa_cuda_add(int dt, void *out, const void *a, const void *b, int64_t n);
void nsa_cuda_add_inplace(int dt, void *y, const void *x, int64_t n);
void nsa_cuda_xent_fwd_bwd(int dt, void *losses, void *dlogits, const void *logits, const int32_t *targets,
                           int N, int V, double dscale);
double nsa_cuda_sumsq_f32(const void *x, int64_t n);          // synchronous
void nsa_cuda_sumsq_many_f32(const void *base, const int64_t *off, const int64_t *len, int n, double *out);   // one sync
void nsa_cuda_scale_f32(void *x, double s, int64_t n);
int64_t nsa_cuda_first_nonfinite(int dt, const void *x, int64_t n);   // synchronous
// AdamW over runs of a parameter buffer in one launch (k_adamw_runs): run i updates elements
// [off, off + n) of p, g, m, v (fp32) with weight decay wd and writes the updated parameters,
// rounded to copy_dt, to wcopy and wcopy2 (element 0 = the run's first; NULL: none; ignored
// when copy_dt is fp32)
typedef struct {
    int64_t off, n;
    double wd;
    void *wcopy, *wcopy2;
} NsaAdamwRun;
void nsa_cuda_adamw_runs(void *p, const void *g, void *m, void *v, const NsaAdamwRun *runs, int nr, double lr, double b1,
                         double b2, double bc1, double bc2, double eps, int copy_dt);
// dst[n] (act type dt) = (act) src[n] (fp32)
void nsa_cuda_f32_to_act(int dt, void *dst, const float *src, int64_t n);
// dst[n] (fp32) = src[n] (act type dt)
void nsa_cuda_act_to_f32(int dt, float *dst, const void *src, int64_t n);
// fill n elements of type dt with uniform values in +-[0.05, 1] * scale from a
// counter-based hash of (seed, index): benchmark and test inputs made on the device
void nsa_cuda_fill_random(int dt, void *p, int64_t n, uint64_t seed, double scale);
// dst[c] += sum over rows r (ascending chunks, fixed tree) of src[r, c]; src act, dst fp32
void nsa_cuda_colsum_acc(int dt, float *dst, const void *src, int64_t rows, int cols);

// ---- NSA (cuda_nsa.cu, attn_*.cu) ------------------------------------------------------
void nsa_cuda_compress_avg_fwd(int dt, void *Kc, const void *k, const NsaGeom *g, int i0, int Ni);
void nsa_cuda_compress_avg_bwd(int dt, void *dk, const void *dKc, const NsaGeom *g);
void nsa_cuda_block_gather_fwd(int dt, void *X, const void *k, const void *pe, const NsaGeom *g, int i0, int Ni);
void nsa_cuda_block_gather_bwd(int dt, void *dk, void *dpe, const void *dX, const NsaGeom *g);
void nsa_cuda_cmp_attn_fwd(int dt, void *o, void *lse, const void *q, const void *Kc, const void *Vc,
                           const NsaGeom *g, int t0, int Tn);
void nsa_cuda_cmp_attn_bwd(int dt, void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                           const void *Kc, const void *Vc, const void *o, const void *lse, const NsaGeom *g);
void nsa_cuda_select_blocks(int dt, int32_t *sel_idx, const void *q, const void *Kc, const void *lse,
                            const NsaGeom *g, int t0, int Tn);
void nsa_cuda_sel_attn_fwd(int dt, void *o, void *lse, const void *q, const void *k, const void *v,
                           const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn);
void nsa_cuda_sel_attn_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                           const void *k, const void *v, const void *o, const void *lse,
                           const int32_t *sel_idx, const NsaGeom *g);
void nsa_cuda_win_attn_fwd(int dt, void *o, void *lse, const void *q, const void *k, const void *v,
                           const NsaGeom *g, int t0, int Tn);
void nsa_cuda_win_attn_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                           const void *k, const void *v, const void *o, const void *lse, const NsaGeom *g);
void nsa_cuda_gate_act_fwd(int dt, void *gate, const void *logits, int64_t NG, int act);
void nsa_cuda_gate_act_bwd(int dt, void *dlogits, const void *dgate, const void *gate, int64_t NG, int act);
void nsa_cuda_combine_fwd(int dt, void *o, const void *gate, const void *o_cmp, const void *o_sel,
                          const void *o_win, int64_t N, int H, int G, int D);
void nsa_cuda_combine_bwd(int dt, void *do_cmp, void *do_sel, void *do_win, void *dgate, const void *dout,
                          const void *gate, const void *o_cmp, const void *o_sel, const void *o_win,
                          int64_t N, int H, int G, int D);

#ifdef __cplusplus
}
#endif
#endif
