// kernels/cuda/cuda_common.cuh — shared by the CUDA backend's translation units:
// error checking, element-type helpers, the backend context (one stream), scratch
// buffers and the fp32 "shadows" of per-row statistics.
//
// fp32 shadows. ops.h stores lse, rstd and the RoPE table in the activation type.
// In bf16 an lse of ~10 keeps 3 significant digits: exp(s - lse) in a backward
// would be off by up to ~4 %. So every kernel that writes such a statistic also
// writes an fp32 copy into a shadow buffer that the backend keeps per allocation,
// and the kernels that read the statistic back use the shadow. A shadow is valid
// only while nothing but our kernels wrote the buffer: the memory hooks (zero,
// from_host, copy, act_from_f64) invalidate it, and readers then convert the
// activation-typed values instead. With fp32 activations no shadow exists: the
// buffer is already fp32.
#ifndef NSA_KERNELS_CUDA_COMMON_CUH
#define NSA_KERNELS_CUDA_COMMON_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kernels/cuda/cuda_launch.h"
#include "kernels/ops.h"

// ---- errors ---------------------------------------------------------------------------
void nsa_cuda_fail(const char *what, const char *detail, const char *file, int line);
// An error that says the stream capture of a recording went wrong (cudaErrorStreamCapture*):
// while recording, the recording is marked unusable (graph_end returns NULL naming `what`) and
// 1 is returned, so the caller goes on (nothing recorded runs); else 0 (a real failure).
int nsa_cuda_capture_error(cudaError_t e, const char *what);
#define cudaCheck(call)                                                                      \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess && !nsa_cuda_capture_error(e_, #call))                         \
            nsa_cuda_fail(#call, cudaGetErrorString(e_), __FILE__, __LINE__);                \
    } while (0)
// After every kernel launch: the launch error, and with NSA_CUDA_SYNC_CHECK=1 in the
// environment a stream synchronisation, so an asynchronous fault names its kernel.
void nsa_cuda_after_launch(const char *file, int line);
#define CUDA_LAUNCHED() nsa_cuda_after_launch(__FILE__, __LINE__)

// ---- context ------------------------------------------------------------------------------
struct NsaCudaCtx {
    cudaStream_t stream;
    int device;
    int sms;
    int sync_check;
    int attn_impl;       // 0 auto, 1 simple
    int sel_pack;        // selection tiles hold 2 positions when heads per group <= 8 (NSA_CUDA_SEL_PACK=0: off)
    int sel_rows;        // selection forward / dQ on the rows kernels: -1 by shape, 0 never, 1 wherever they can
                         // (NSA_CUDA_SEL_ROWS)
    int wgmma;           // Hopper warpgroup-MMA kernels: this build has sm_90a code the device runs
                         // (probed at init) and NSA_CUDA_WGMMA is not 0
    int dkdv_ws;         // window / compressed dK/dV on the warp-specialised kernel: -1 by head size,
                         // 0 never, 1 wherever it can (NSA_CUDA_DKDV_WS)
    int dq_ws;           // window / compressed dQ on the warp-specialised rows kernel: -1 by head size,
                         // 0 never, 1 wherever it can (NSA_CUDA_DQ_WS)
    int fwd_ws;          // the rows kernels' forward on the warp-specialised kernel: -1 by branch and
                         // head size, 0 never, 1 wherever it can (NSA_CUDA_FWD_WS)
    int fwd_pingpong;    // that kernel's consumers issuing their products in turns where they overlap
                         // (D 128, window and compressed): -1 (default) by chunk size
                         // (nsa_fwd_pingpong), 0 no, 1 yes (NSA_CUDA_FWD_PINGPONG)
    int fwd_kc128;       // that kernel's key chunks at D 128, window and compressed: -1 (default) by
                         // shape (nsa_fwd_kc), 0 64 keys, 1 128 keys (NSA_CUDA_FWD_KC128)
    int select_stream;   // the selection's top-n kept as the scoring's chunks go (k_select_mma STREAM):
                         // 1 (default) wherever a chunk's blocks fit its ring, 0 never
                         // (NSA_CUDA_SELECT_STREAM)
    int select_pos;      // the selection scoring on tiles of 64 positions of one head, heads looped
                         // (k_select_mma POS): -1 (default) by shape, 1 wherever it can, 0 never
                         // (NSA_CUDA_SELECT_POS)
    int select_pad;      // the selection scoring with each position's heads padded to 8 or 16 rows
                         // where 5..15 heads a group (selscore_geom): 0 never, 1 with butterfly
                         // head sums, 2 (default) with the P tile's order (NSA_CUDA_SELECT_PAD)
    int sel_dq_tma;      // the selection dQ on k_sel_dq_tma: -1 (default) by shape
                         // (nsa_sel_dq_tma_warps), 0 never, 1 or 2 its warps a CTA wherever it
                         // can (NSA_CUDA_SEL_DQ_TMA)
    int dkdv_tma;        // k_dkdv_ws's whole-position row tiles by TMA where the group's heads divide
                         // 64: 1 (default), 0 never (NSA_CUDA_DKDV_TMA)
    int rows_tma;        // the warp-specialised rows kernels' K/V chunks by TMA where no key of the
                         // chunk is past the tiles' last, and the selection scoring's K chunks:
                         // 1 (default), 0 never (NSA_CUDA_ROWS_TMA)
    int dkdv_rt64;       // the 64-key dK/dV kernel's row tiles at D 128 with warpgroup MMA: 64 rows (1),
                         // 32 (0); default 1 (NSA_CUDA_DKDV_RT64)
    int sel_tma_nst;     // stages of the selection's TMA feed, 2 (default) to 4 (NSA_CUDA_SEL_TMA_NST)
    int dkdv_align;      // the dK/dV's row chunks at the group's multiples where the entries'
                         // rows are long (AttnArgs.rows_abs): 1 (default) on the warp-specialised
                         // kernel, 2 on the 64-key kernel too, 0 never (NSA_CUDA_DKDV_ALIGN)
    int lane;            // the lane the ops go to (Backend.lane_use; 0: the backend's own stream, whose
                         // handle `stream` then is): its stream, scratch and GEMM workspace
};
// Lanes (Backend.lanes_open .. lanes_join; cuda_backend.cu): independent streams with their own
// scratch and GEMM workspace, so that ops issued to different lanes may run side by side.
#define NSA_CUDA_MAX_LANES 16
// GEMM workspaces for lanes 1..n-1 (cuda_gemm.cu; lane 0 has the backend's own); 1 if it allocated.
int nsa_cuda_gemm_lanes(int n);
extern NsaCudaCtx g_nsa_cuda;
#define NSA_STREAM (g_nsa_cuda.stream)

// ---- recorded op sequences (CUDA graphs, Backend.graph_begin .. graph_end; cuda_backend.cu) ----
// While the backend records, a call that cannot be recorded (a device allocation or free, a copy
// or a reduction that waits for the device, a first-time setup such as a new cuBLASLt plan)
// brackets itself with an NsaCapturePause: the recording is abandoned (graph_end returns NULL
// naming `what`; the model then runs the stretch eagerly), the stream stops capturing so the call
// runs as usual, and a throw-away recording starts again after it, so that nothing of the
// abandoned stretch runs either. Outside a recording the pause is one load and a branch.
int nsa_cuda_capture_pause(const char *what);
void nsa_cuda_capture_resume(int paused);
struct NsaCapturePause {
    int paused;
    explicit NsaCapturePause(const char *what) : paused(nsa_cuda_capture_pause(what)) {}
    ~NsaCapturePause() { nsa_cuda_capture_resume(paused); }
    NsaCapturePause(const NsaCapturePause &) = delete;
    NsaCapturePause &operator=(const NsaCapturePause &) = delete;
};
// Advance the backend's generation (Backend.generation): every (re)allocation, every change of a
// setting or cached state the ops consult. A recording is only run at the generation it was made.
void nsa_cuda_generation_bump(void);

// Start-up accounting (Backend.startup_times): seconds spent in a named part of the backend's
// start; cuda_gemm.cu adds its library load, and counts its plans (nsa_cuda_gemm_plan_stats).
void nsa_cuda_startup_add(const char *name, double secs);
void nsa_cuda_gemm_plan_stats(int *plans, double *secs);
static inline double nsa_cuda_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// Grow-only device scratch, one buffer per slot (ops use distinct slots for buffers
// that must coexist). Growing frees the old buffer (cudaFree synchronises).
enum {
    SCR_STAT0 = 0, SCR_STAT1, SCR_DROW, SCR_IDX_CNT, SCR_IDX_OFF, SCR_IDX_LIST, SCR_CHUNKS,
    SCR_PART, SCR_RED0, SCR_RED1, SCR_WCOPY, SCR_BCOPY, SCR_SORT0, SCR_SORT1, SCR_SORT2, SCR_SORT3,
    SCR_SORTTMP, SCR_MISC, SCR_DW, SCR_IDX_BITS, SCR_NSLOTS
};
void *nsa_cuda_scratch(int slot, size_t bytes);

// fp32 view of a per-row statistic (lse, rstd, rope table) of n elements at p:
// the buffer itself for fp32 activations, else the valid shadow, else a converted
// copy in scratch slot `slot`.
const float *nsa_cuda_stat_read(int dt, const void *p, int64_t n, int slot);
// where a kernel that writes the statistic at p also writes its fp32 value (marks
// the shadow valid); NULL with fp32 activations (the kernel writes p itself).
float *nsa_cuda_stat_write(int dt, const void *p);
// The low-precision weight copy for a parameter pointer (bf16/fp16 activations):
// the copy kept by params_changed/adamw, or n elements converted into `slot`.
// With fp32 activations returns w.
const void *nsa_cuda_weight(int dt, const void *w, int64_t n, int slot);

// ---- element types -----------------------------------------------------------------------
typedef __nv_bfloat16 bf16;
typedef __half f16;

__device__ __forceinline__ float tof(float x) { return x; }
__device__ __forceinline__ float tof(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float tof(f16 x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T fromf(float x);
template <> __device__ __forceinline__ float fromf<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 fromf<bf16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ f16 fromf<f16>(float x) { return __float2half_rn(x); }

// ---- vector helpers: 8 elements through one 16-byte access (two for fp32) ---------------
// (pointers 16-byte aligned: nsa_aligned16; NULL counts as aligned)
__device__ __forceinline__ void ld8(const float *p, float *v) {
    float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
}
template <typename T> __device__ __forceinline__ void ld8(const T *p, float *v) {
    uint4 u = *(const uint4 *)p;
    const T *e = (const T *)&u;
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = tof(e[k]);
}
__device__ __forceinline__ void st8(float *p, const float *v) {
    ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <typename T> __device__ __forceinline__ void st8(T *p, const float *v) {
    uint4 u;
    T *e = (T *)&u;
#pragma unroll
    for (int k = 0; k < 8; k++) e[k] = fromf<T>(v[k]);
    *(uint4 *)p = u;
}

// RoPE's rotation of one pair: y1 = x1 c - x2 s, y2 = x2 c + x1 s (s negated for the inverse),
// its roundings written out. Left to the compiler (ptxas fuses one product of a b - c d into
// an fma, which one its choice per kernel), the scalar and the 16-byte kernels of rope and of
// the K/V split gave different bits; every RoPE kernel calls this.
__device__ __forceinline__ void rope_rotate(float x1, float x2, float c, float s, float &y1, float &y2) {
    y1 = __fmaf_rn(x1, c, -__fmul_rn(x2, s));
    y2 = __fmaf_rn(x2, c, __fmul_rn(x1, s));
}
// 8 elements as stored, for raw 16-byte copies (two for fp32)
template <typename T> struct alignas(16) Pack8 {
    T v[8];
};
static inline int nsa_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static inline size_t dt_bytes(int dt) { return dt == NSA_DT_F32 ? 4 : 2; }

#define DISPATCH_DT(dt, T, ...)                       \
    do {                                              \
        if ((dt) == NSA_DT_F32) {                     \
            typedef float T;                          \
            __VA_ARGS__;                              \
        } else if ((dt) == NSA_DT_BF16) {             \
            typedef bf16 T;                           \
            __VA_ARGS__;                              \
        } else {                                      \
            typedef f16 T;                            \
            __VA_ARGS__;                              \
        }                                             \
    } while (0)

static inline unsigned nsa_blocks(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 32) b = 65535LL * 32;   // grid-stride loops cover the rest
    return (unsigned)b;
}

// Fixed-order reductions. A warp reduces by an xor-shuffle tree; a block (blockDim.x a
// multiple of 32, <= 1024) reduces each warp so, then thread 0 folds the warp results in
// warp order starting from the identity. Deterministic: the same tree for every launch.
// The op is a functor: SumOp (float or double) or MaxOp (float).
struct SumOp {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
    template <typename V> __device__ __forceinline__ static V identity() { return 0; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
    template <typename V> __device__ __forceinline__ static V identity() { return -INFINITY; }
};
template <typename Op, typename V> __device__ __forceinline__ V warp_reduce(V v) {
    for (int o = 16; o > 0; o >>= 1) v = Op()(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce<SumOp>(v); }
// result valid in every thread; `sh` has >= 33 elements of V
template <typename Op, typename V> __device__ __forceinline__ V block_reduce(V v, V *sh) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_reduce<Op>(v);
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        V s = Op::template identity<V>();
        for (int i = 0; i < nw; i++) s = Op()(s, sh[i]);
        sh[32] = s;
    }
    __syncthreads();
    return sh[32];
}

// ---- NSA internals shared by cuda_nsa.cu and the tensor-core kernels ----------------------
enum { BR_CMP = 0, BR_SEL = 1, BR_WIN = 2 };

// compressed blocks position t sees: block i (keys i d .. i d + l - 1) once it is whole, at most NC
__device__ __forceinline__ int cmp_visible(int t, int l, int d, int NC) {
    if (t < l - 1) return 0;
    int v = (t - l + 1) / d + 1;
    return v < NC ? v : NC;
}
// keys compressed block i (i d .. i d + l) shares with selection block j (j l' .. (j + 1) l')
__device__ __forceinline__ int overlap_num(int i, int j, int l, int d, int lsel) {
    int a0 = i * d, a1 = i * d + l, b0 = j * lsel, b1 = (j + 1) * lsel;
    int lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}

// The 64 rows of a rows-kernel tile (attn_rows.cuh): BQ consecutive positions x HB heads
// of one KV group (HB = min(heads per group, 64)); nhb tiles cover a group's heads
struct RowsGeom {
    int HB, BQ, nhb;
};
__host__ __device__ __forceinline__ RowsGeom rows_geom(int hpg) {
    RowsGeom r;
    r.HB = hpg < 64 ? hpg : 64;
    r.BQ = 64 / r.HB;
    r.nhb = (hpg + r.HB - 1) / r.HB;
    return r;
}

// The selection branch's forward and dQ on tensor cores run one of two tilings:
//  - "rows": the 64-row tiles of the compressed / window kernels (BQ positions x the group's
//    heads), walking the union of the blocks their positions selected, 64 keys a chunk, a block
//    masked for the rows whose position did not select it. Needs l' a multiple of 64 and the
//    union's table in shared memory (12 bytes a selection block: NS <= SEL_ROWS_MAX_NS).
//  - "tiles": a tile per position (or 2 positions, sel_pack) walking that position's blocks.
// By shape (sel_rows -1): rows where the union a tile walks is at most 3 n blocks, estimated
// for positions that see NS / 2 blocks (the average) and choose their n independently:
// U = V (1 - (1 - n / V)^BQ), or V when n >= V. Measured (bench_cuda_attn, B 1, random
// inputs, H100): rows faster at m7c S = 2k (U/n 1.0) and the paper shape at 2k and 8k (1.0,
// 2.7); slower at m7c 8k (3.8) and paper 16k (3.3). Where neighbouring positions' selections
// overlap more than random ones (not measured in training), the rows kernels would also win
// past this bound. A function of the shape only, so the bits of a shape do not change with
// anything else.
#define SEL_ROWS_MAX_NS 2048
// U / n: the estimated union of a rows tile's blocks over the n blocks of one position
static inline double nsa_sel_union_ratio(int hpg, int NS, int n) {
    const double V = NS / 2.0, BQ = rows_geom(hpg).BQ;
    const double U = n >= V ? V : V * (1.0 - pow(1.0 - n / V, BQ));
    return U / n;
}
static inline int nsa_sel_rows_on(int hpg, int D, int lsel, int NS, int n) {
    if (lsel % 64 != 0 || NS > SEL_ROWS_MAX_NS || !(D == 16 || D == 64 || D == 128)) return 0;
    if (g_nsa_cuda.sel_rows >= 0) return g_nsa_cuda.sel_rows;
    return nsa_sel_union_ratio(hpg, NS, n) <= 3.0;
}
// The selection forward on the rows kernels: where nsa_sel_rows_on says so and, by default, the
// union is at most 1.5 n blocks wherever the forward's TMA kernel runs (k_sel_fwd_tma: sm_90a
// warpgroup-MMA builds, D 64 or 128, l' a multiple of its 32-key chunks). That kernel streams each
// position's n blocks once and computes no masked keys, where a rows tile computes U / n times
// the products: one H200, sel forward rows -> TMA at the paper shape 1.98 -> 1.55 ms at 8k (U/n
// 2.7), 0.273 -> 0.351 at 2k (1.0), m7c 2k 0.069 -> 0.082 (1.0). NSA_CUDA_SEL_ROWS=0/1 forces
// both passes. A function of the shape only.
static inline int nsa_sel_fwd_rows_on(int hpg, int D, int lsel, int NS, int n) {
    if (!nsa_sel_rows_on(hpg, D, lsel, NS, n)) return 0;
    if (g_nsa_cuda.sel_rows >= 0 || !g_nsa_cuda.wgmma || D % 64 != 0 || lsel % 32 != 0) return 1;
    return nsa_sel_union_ratio(hpg, NS, n) <= 1.5;
}
// warps a CTA of the selection's TMA dQ (k_sel_dq_tma; 0: not used): NSA_CUDA_SEL_DQ_TMA where set,
// else 1 where a rows tile's union is more than 1.5 n blocks (one H200: paper shape selected
// backward 6.33 -> 5.77 ms at 8k, U/n 2.7, and 52.3 -> 46.4 at 64k; 2 warps 5.85 / 47.0; m7c,
// D 64, against the 4-warp k_sel_dq: 0.813 -> 0.622 ms at 8k, U/n 3.8, and 6.76 -> 4.80 at 64k;
// 2 warps 0.645 / 4.96). At U/n 1.0 (2k) the rows kernel's dQ walks each block once for several
// positions: the paper shape's compressed + selected forward and backward 1.86 ms there against
// 2.08 with the TMA dQ, m7c's selected backward 0.168 against 0.186 (bench/RESULTS.md). A
// function of the shape only.
static inline int nsa_sel_dq_tma_warps(int D, int hpg, int NS, int n) {
    if (g_nsa_cuda.sel_dq_tma >= 0) return g_nsa_cuda.sel_dq_tma;
    return (D == 64 || D == 128) && nsa_sel_union_ratio(hpg, NS, n) > 1.5 ? 1 : 0;
}
static inline int nsa_sel_pack_on(int hpg, int n) { return hpg <= 8 && n <= 64 && g_nsa_cuda.sel_pack; }
// dK/dV of the window and compressed branches on the warp-specialised kernel (k_dkdv_ws, 128 keys
// a CTA) rather than the 64-key one: needs the warpgroup-MMA kernels and D 64 or 128; by default
// (NSA_CUDA_DKDV_WS unset or -1) at D 128, where it was measured faster (bench/RESULTS.md);
// NSA_CUDA_DKDV_WS=0/1 forces. A function of the head size only, so a shape's bits depend on
// nothing else.
static inline int nsa_dkdv_ws_on(int D) {
    if (!g_nsa_cuda.wgmma || !(D == 64 || D == 128)) return 0;
    if (g_nsa_cuda.dkdv_ws >= 0) return g_nsa_cuda.dkdv_ws;
    return D == 128;
}
// dQ of the window and compressed branches on the warp-specialised rows kernel (k_rows_dq_ws: two
// 64-row tiles a CTA sharing the key chunks a producer streams): needs the warpgroup-MMA kernels
// and D 64 or 128; by default (NSA_CUDA_DQ_WS unset or -1) at D 128, where it was measured faster
// (bench/RESULTS.md); NSA_CUDA_DQ_WS=0/1 forces. A function of the head size only, as above.
static inline int nsa_dq_ws_on(int D) {
    if (!g_nsa_cuda.wgmma || !(D == 64 || D == 128)) return 0;
    if (g_nsa_cuda.dq_ws >= 0) return g_nsa_cuda.dq_ws;
    return D == 128;
}
// The forward of the rows kernels' branch br (BR_CMP, BR_WIN, BR_SEL where the selection runs on
// them) on the warp-specialised kernel (k_rows_fwd_ws) rather than k_rows_fwd: needs the
// warpgroup-MMA kernels and D 64 or 128; by default (NSA_CUDA_FWD_WS unset or -1) where it was
// measured faster (bench/RESULTS.md): the window branch (and the dense causal attention, a window
// as long as the sequence) at D 64 and 128, the compressed branch at D 128, never the selection;
// NSA_CUDA_FWD_WS=0/1 forces. A function of the branch and head size only, as above.
static inline int nsa_fwd_ws_on(int D, int br) {
    if (!g_nsa_cuda.wgmma || !(D == 64 || D == 128)) return 0;
    if (g_nsa_cuda.fwd_ws >= 0) return g_nsa_cuda.fwd_ws;
    return br == BR_WIN || (br == BR_CMP && D == 128);
}

// Everything an attention kernel needs; pointers are device pointers.
struct AttnArgs {
    const void *q, *k, *v;      // q [B,T,H,D]; k, v [B,NK,G,D]
    void *o, *lse;              // forward outputs (act)
    float *lse32;               // forward: fp32 lse (shadow or NULL)
    const void *dout;           // backward: dO [B,T,H,D]
    const float *lse_in;        // backward / selection: fp32 lse
    const float *drow;          // backward: rowsum(dO * O) [B,T,H]
    float *drow_out;            // backward: where set, the dQ kernels work out each of their rows'
                                // rowsum(dO * O) from dout and o (row_drow), use it and write it here
                                // for dK/dV (drow = drow_out); o is then the forward's output
    void *dq, *dk, *dv;         // backward outputs (+=)
    const int32_t *sel;         // [B,T,G,n]
    // inverted selection index (sel backward): per (b,g,j) count and offset into list
    const int32_t *icnt, *ioff, *ilist;
    // key-chunk table and partial buffers of the dK/dV kernels
    const int4 *chunks;         // per entry: {key_base, nkeys, row_base (t0 or list offset), nrows}
    const int *chunk_part;      // per entry: first partial index
    float *part;                // partials [npart][2][KT][D]
    int nentries, kt, rch;      // entries, keys per entry, rows per partial
    int rows_abs;               // row chunks at multiples of rch of the group's flattened rows (all
                                // entries' chunk c the same rows), launched chunk by chunk
                                // (dkdv_row_chunks); 0: from each entry's first row
    int B, T, H, G, D, hpg, NK;
    int l, d, lsel, n, w, NC, NS;
    int t0, Tn;
    float scale, scale_log2;
};
// The keys of k_rows_fwd_ws's chunks for branch br at head size D: 128 at D 128 off the selection
// where NSA_CUDA_FWD_KC128=1, or by default where the rows see every key before them (the window
// as long as the call's rows: the dense causal attention; its runs start at key 0, so a 128-key
// chunk is cut at most once a tile: H200, bench/RESULTS.md), else 64
static inline int nsa_fwd_kc(const AttnArgs &a, int D, int br) {
    if (D != 128 || br == BR_SEL) return 64;
    const int on = g_nsa_cuda.fwd_kc128 >= 0 ? g_nsa_cuda.fwd_kc128 : br == BR_WIN && a.w >= a.t0 + a.Tn;
    return on ? 128 : 64;
}
// k_rows_fwd_ws's consumers in turns (its overlapped runs: D 128, window and compressed) on its
// chunks of kc keys: NSA_CUDA_FWD_PINGPONG=0/1 forces; unset or -1: on the 128-key chunks (the
// dense causal attention: forward 8-12 % faster at the paper shape, S 8k and 32k, H200), off on
// the 64-key ones (the compressed forward 7.4 % slower at S 32k: a turn a 64-key chunk costs
// more than it hides, bench/RESULTS.md). The same bits either way.
static inline int nsa_fwd_pingpong(int kc) { return g_nsa_cuda.fwd_pingpong >= 0 ? g_nsa_cuda.fwd_pingpong : kc == 128; }
// The dK/dV kernels' row chunks of an entry whose rows are the flattened rows rb * hpg ..
// rb * hpg + nrows - 1 of its group (rb: its first position; the window and compressed
// branches): chunk c holds the entry's rows r_lo .. r_hi - 1 and takes partial c of the entry.
// rows_abs 0: from the entry's first row, rch rows a chunk. rows_abs 1: at the group's multiples
// of rch, so that the entries of a key range that see a row chunk read the same Q and dO rows;
// launched with blockIdx.y the group's chunk (dkdv_work), the CTAs in flight (entries fastest)
// walk the same rows together and read them from L2, where chunks from each entry's first row
// read rows far apart (the compressed backward's dK/dV at the paper shape, S 64k: 3.6 % L2 hits).
// Returns the entry's number of chunks (0 where it has no rows).
struct DkdvChunk { int first, count; };
__host__ __device__ __forceinline__ DkdvChunk dkdv_row_chunks(const AttnArgs &a, int rb, int nrows) {
    DkdvChunk c;
    if (nrows <= 0) { c.first = 0; c.count = 0; return c; }
    if (!a.rows_abs) { c.first = 0; c.count = (nrows + a.rch - 1) / a.rch; return c; }
    const int r0 = rb * a.hpg;
    c.first = r0 / a.rch;
    c.count = (r0 + nrows - 1) / a.rch - c.first + 1;
    return c;
}

// Tensor-core kernels (attn_fwd.cu, attn_dq.cu, attn_dkdv.cu, attn_select.cu), instantiated for bf16/fp16 and D in
// {16, 64, 128}; br is BR_CMP / BR_SEL / BR_WIN.
template <typename T, int D> void mma_attn_fwd(const AttnArgs &a, int br);
template <typename T, int D> void mma_attn_dq(const AttnArgs &a, int br);
template <typename T, int D> void mma_attn_dkdv(const AttnArgs &a, int br);
template <typename T, int D> void mma_select(const AttnArgs &a, int32_t *sel_out);
#endif
