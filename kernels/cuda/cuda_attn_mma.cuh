// kernels/cuda/cuda_attn_mma.cuh — tensor-core (mma.sync m16n8k16, bf16/fp16 in,
// fp32 accumulate) attention kernels of the three NSA branches. Included by
// cuda_attn_mma_d{16,64,128}.cu, which instantiate them per head dimension.
//
// Three kernel shapes, all flash-style (scores live in registers, never a T x T
// matrix):
//
//  k_rows_fwd / k_rows_dq (compressed and window branches): a CTA of 4 warps owns
//    64 query rows, the flattened (t, head) pairs of BQ consecutive positions x the
//    HB heads of one KV group (HB = min(H/G, 64), BQ = 64 / HB), 16 rows per warp.
//    It walks the union of its rows' keys in chunks of 64 staged in shared memory
//    (cp.async, double-buffered) and shared by the 4 warps; a per-(row, key)
//    predicate masks what a row does not see. Forward: online softmax; dq: P and
//    dP recomputed from the saved lse, dq accumulated in registers. The selection
//    branch runs here too where nsa_sel_rows_on (cuda_common.cuh) says so: the
//    chunks are then the union of the blocks the tile's positions selected, each
//    masked for the positions that did not select it.
//
//  k_sel_fwd / k_sel_dq (selection branch): a CTA per (b, t, KV group, 16-head
//    tile). The group's heads are the 16 rows of the A operand (padded with zero
//    rows when H/G < 16: any group size works; H/G > 16 takes several tiles), so
//    each selected block is loaded once for all heads of the group. The 4 warps
//    split the selected blocks (chunks of KT keys) and keep their own softmax
//    state; a fixed-order merge of the 4 partial results ends the CTA.
//
//  k_dkdv (all branches): key-centric. A CTA owns KT keys of one (b, group) and a
//    chunk of the rows that see them: for the window and compressed branches a
//    contiguous range of positions, for the selection branch the inverted index
//    (the positions that selected the block, ascending). Rows are flattened
//    (t, head) pairs, so every MMA row is useful whatever the group size. Each warp
//    owns 16 keys and accumulates dK, dV over the CTA's rows in order; the CTA
//    writes fp32 partials that k_reduce_parts (cuda_nsa.cu) adds in row-chunk
//    order: deterministic without atomics.
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane/4, c = lane%4):
//   A (16x16, row): a0 (g, 2c..2c+1) a1 (g+8, 2c..) a2 (g, 2c+8..) a3 (g+8, 2c+8..)
//   B (16x8, col):  b0 (k = 2c..2c+1, n = g)  b1 (k = 2c+8.., n = g)
//   C (16x8):       c0,c1 (g, 2c..2c+1)  c2,c3 (g+8, 2c..2c+1)
// An accumulator pair of n-tiles (16 columns) is an A fragment of the next product
// after rounding to 16 bits (pack2), as in FlashAttention-2.
#ifndef NSA_KERNELS_CUDA_ATTN_MMA_CUH
#define NSA_KERNELS_CUDA_ATTN_MMA_CUH
#include "kernels/cuda/cuda_common.cuh"
#include <cuda.h>            // CUtensorMap (the map is encoded through the runtime's driver entry point)
#include <cudaTypedefs.h>    // PFN_cuTensorMapEncodeTiled
#include <type_traits>

#define MMA_LOG2E 1.4426950408889634f
#define MMA_LN2 0.6931471805599453f

// ---- primitives ------------------------------------------------------------------------
template <typename T> __device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<bf16>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<f16>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<bf16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<f16>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}
// The A fragment (16 x 16) of a product whose left operand is a previous product's
// accumulator: n-tiles c0 (columns 0-7) and c1 (8-15) rounded to 16 bits (FlashAttention-2's
// register reuse; also the register A operand of m64nNk16 warpgroup MMA, per warp)
template <typename T> __device__ __forceinline__ void acc_afrag(uint32_t (&a)[4], const float *c0, const float *c1) {
    a[0] = pack2<T>(c0[0], c0[1]);
    a[1] = pack2<T>(c0[2], c0[3]);
    a[2] = pack2<T>(c1[0], c1[1]);
    a[3] = pack2<T>(c1[2], c1[3]);
}
// p[0] += x0, p[1] += x1 (rounded once), p 4-byte aligned
template <typename T> __device__ __forceinline__ void add2(T *p, float x0, float x1) {
    uint32_t u = *reinterpret_cast<const uint32_t *>(p);
    const T *e = reinterpret_cast<const T *>(&u);
    *reinterpret_cast<uint32_t *>(p) = pack2<T>(tof(e[0]) + x0, tof(e[1]) + x1);
}

__device__ __forceinline__ void ldsm4(uint32_t *r, const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
__device__ __forceinline__ void ldsm4t(uint32_t *r, const void *p) {
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}
// 16-byte global -> shared copy; pred false zero-fills the destination
__device__ __forceinline__ void cp16(void *s, const void *g, bool pred) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

// Fragments from a shared tile S stored [rows][DP] (row-major, DP = D + 8 elements:
// the 16-byte pad makes the 8 row addresses of an ldmatrix hit distinct banks).
// A (16 x 16) at (row0, k0)
template <int DP, typename T> __device__ __forceinline__ void frag_a(uint32_t *r, const T *S, int row0, int k0, int lane) {
    ldsm4(r, S + (row0 + (lane & 7) + ((lane >> 3) & 1) * 8) * DP + k0 + (lane >> 4) * 8);
}
// Where element (r, c) of a shared tile is (c a multiple of 8 in an ldmatrix row address).
// PadTile<DP>: row-major [rows][DP]. SwzTile<ROWS>: 128-byte-swizzle atoms of ROWS rows x 64
// columns, as TMA (CU_TENSOR_MAP_SWIZZLE_128B) and the warpgroup tiles lay them out: column c in
// atom c / 64, 16-byte chunk (c % 64 / 8) ^ (r % 8) of the row's 128 bytes
template <int DP> struct PadTile {
    template <typename T> __device__ static const T *at(const T *S, int r, int c) { return S + r * DP + c; }
};
template <int ROWS> struct SwzTile {
    template <typename T> __device__ static const T *at(const T *S, int r, int c) {
        return reinterpret_cast<const T *>(reinterpret_cast<const unsigned char *>(S) + (c >> 6) * (ROWS * 128) + r * 128 +
                                           ((((c & 63) >> 3) ^ (r & 7)) << 4));
    }
};
// B of C = A · M^T with M stored [n][k] (layout L): n-tiles n0 (r[0], r[1]) and n0 + 8 (r[2],
// r[3]) at k0
template <typename L, typename T> __device__ __forceinline__ void frag_b_nk_l(uint32_t *r, const T *S, int n0, int k0, int lane) {
    ldsm4(r, L::at(S, n0 + (lane & 7) + (lane >> 4) * 8, k0 + ((lane >> 3) & 1) * 8));
}
template <int DP, typename T> __device__ __forceinline__ void frag_b_nk(uint32_t *r, const T *S, int n0, int k0, int lane) {
    frag_b_nk_l<PadTile<DP>>(r, S, n0, k0, lane);
}
// B of C = A · M with M stored [k][n] (layout L): n-tiles n0 (r[0], r[1]) and n0 + 8 (r[2],
// r[3]) at k0
template <typename L, typename T> __device__ __forceinline__ void frag_b_kn_l(uint32_t *r, const T *S, int k0, int n0, int lane) {
    ldsm4t(r, L::at(S, k0 + (lane & 7) + ((lane >> 3) & 1) * 8, n0 + (lane >> 4) * 8));
}
template <int DP, typename T> __device__ __forceinline__ void frag_b_kn(uint32_t *r, const T *S, int k0, int n0, int lane) {
    frag_b_kn_l<PadTile<DP>>(r, S, k0, n0, lane);
}

// acc[16 x D] += P[16 x K] . M[K x D] for one warp on mma.sync: P from the warp's K / 8
// accumulator n-tiles p (acc_afrag), M [K][D] rows k0 .. k0 + K - 1 of a tile of layout L
template <typename T, int D, int K, typename L>
__device__ __forceinline__ void mma_acc_kn_l(float (*acc)[4], const float (*p)[4], const T *M, int k0, int lane) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        uint32_t a[4];
        acc_afrag<T>(a, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
        for (int dd = 0; dd < D / 16; dd++) {
            uint32_t bf[4];
            frag_b_kn_l<L>(bf, M, k0 + kk * 16, dd * 16, lane);
            mma16816<T>(acc[2 * dd], a, bf[0], bf[1]);
            mma16816<T>(acc[2 * dd + 1], a, bf[2], bf[3]);
        }
    }
}
template <typename T, int D, int K, int DP>
__device__ __forceinline__ void mma_acc_kn(float (*acc)[4], const float (*p)[4], const T *M, int k0, int lane) {
    mma_acc_kn_l<T, D, K, PadTile<DP>>(acc, p, M, k0, lane);
}

// ---- Hopper warpgroup MMA (sm_90a: wgmma.mma_async) ------------------------------------
// Operands in shared memory, K-major, in 128-byte-swizzle "atoms": 64 rows x 64 16-bit
// elements (128 B a row, 8 KiB, 1024-byte aligned); element (r, k) of an operand with
// D = 64 * atoms is in atom k / 64 at byte r * 128 + ((k % 64 / 8) ^ (r % 8)) * 16 + k % 8 * 2.
// A descriptor addresses a 64 x 16 slice (one k-step): start = atom + 32 B per step,
// leading offset 16 B (unused by this mode), stride 1024 B (8 rows), swizzle 128 B.
// The accumulator of m64nNk16 is, per warp w of the warpgroup, the mma.sync m16n8 C
// fragment of rows 16w .. 16w + 15 repeated over the N / 8 column tiles: d[j][e] is
// element e of tile j, as the mma.sync kernels hold it.
// Second products (P V, dS K, P^T dO, dS^T Q) take A from registers: a first product's
// accumulator rounded to 16 bits (pack2) is, per warp, exactly the register A fragment of
// m64nNk16. Their B is the same swizzled tile read N-major ("transposed", wg_desc_mn): the
// [k][n] rows of V, K, dO or Q, so no operand is stored twice.
#define WG_ATOM_BYTES 8192
__device__ __forceinline__ uint32_t wg_swz(int r, int chunk) { return (uint32_t)(r * 128 + ((chunk ^ (r & 7)) << 4)); }
__device__ __forceinline__ uint64_t wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wg_fence_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NSA_WGMMA_COMPILED 1
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// d[64 x 64] += A[64 x 16] . B[64 x 16]^T (both K-major), fp32 accumulate
template <typename T> __device__ __forceinline__ void wgmma_64x64x16(float (&d)[8][4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wgmma_64x64x16<bf16>(float (&d)[8][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_64x64x16<f16>(float (&d)[8][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "l"(da), "l"(db), "r"(1));
}
// d[64 x 32] += A[64 x 16] . B[32 x 16]^T (both K-major), fp32 accumulate
template <typename T> __device__ __forceinline__ void wgmma_64x32x16(float (&d)[4][4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wgmma_64x32x16<bf16>(float (&d)[4][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_64x32x16<f16>(float (&d)[4][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3])
                 : "l"(da), "l"(db), "r"(1));
}
// d[64 x N] += A[64 x 16] . B[16 x N]: A from registers (per warp w its rows 16w .. 16w + 15
// as an mma.sync m16n8k16 A fragment), B in shared memory N-major ("transposed": the
// [k][n] tile of a row-major matrix, wg_desc_mn), fp32 accumulate
template <typename T> __device__ __forceinline__ void wgmma_rs_64x64x16_tb(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db);
template <> __device__ __forceinline__ void wgmma_rs_64x64x16_tb<bf16>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_rs_64x64x16_tb<f16>(float (&d)[8][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <typename T> __device__ __forceinline__ void wgmma_rs_64x128x16_tb(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db);
template <> __device__ __forceinline__ void wgmma_rs_64x128x16_tb<bf16>(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_rs_64x128x16_tb<f16>(float (&d)[16][4], const uint32_t (&a)[4], uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
}
#else
__device__ __forceinline__ void wg_fence() { __trap(); }
__device__ __forceinline__ void wg_commit() {}
__device__ __forceinline__ void wg_wait0() {}
template <typename T> __device__ __forceinline__ void wgmma_64x64x16(float (&)[8][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_64x32x16(float (&)[4][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_rs_64x64x16_tb(float (&)[8][4], const uint32_t (&)[4], uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_rs_64x128x16_tb(float (&)[16][4], const uint32_t (&)[4], uint64_t) { __trap(); }
#endif
// B of a transposed-B product: a [k][n] tile in swizzled atoms of 128-byte rows (n
// contiguous), k rows 128 B apart. Leading offset: the next 64 columns (the atom stride,
// lbo bytes); stride offset: the next 8 rows (1024 B); start: the k-step's first row.
__device__ __forceinline__ uint64_t wg_desc_mn(uint32_t saddr, uint32_t lbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
// acc[64 x D] += A[64 x K] . M[K x D], A as K / 16 k-steps of register fragments (a[kk]: rows
// 16kk .. 16kk + 15 of M), M's K rows at shared address sM in atoms lbo bytes apart.
// The caller's wg_fence orders the registers before; waits for completion.
template <typename T, int D, int K>
__device__ __forceinline__ void wg_rs(float (&acc)[D / 8][4], const uint32_t (&a)[K / 16][4], uint32_t sM, uint32_t lbo) {
#pragma unroll
    for (int kk = 0; kk < K / 16; kk++) {
        if constexpr (D == 128) wgmma_rs_64x128x16_tb<T>(acc, a[kk], wg_desc_mn(sM + kk * 16 * 128, lbo));
        else wgmma_rs_64x64x16_tb<T>(acc, a[kk], wg_desc_mn(sM + kk * 16 * 128, lbo));
    }
}
// S[64 x N] = A . B^T and P[64 x N] = C . E^T over D in one commit group (N 32 or 64). A and C
// are 64-row swizzled tiles; B and E N-row ones whose atoms are BSTR bytes apart: 8192 for
// 64-row tiles and 32-row slices of them (the dQ pass: Q K^T and dO V^T for a chunk's keys or
// half of them; the dK/dV pass at D 64: K Q^T and V dO^T for 64 rows), 4096 for tiles of 32
// rows (the dK/dV pass at D 128).
template <typename T, int D, int N, int BSTR>
__device__ __forceinline__ void wg_two(float (&s)[N / 8][4], float (&p)[N / 8][4], uint32_t sA, uint32_t sB, uint32_t sC,
                                       uint32_t sE) {
    static_assert(N == 32 || N == 64, "m64n32k16 or m64n64k16");
#pragma unroll
    for (int j = 0; j < N / 8; j++) s[j][0] = s[j][1] = s[j][2] = s[j][3] = p[j][0] = p[j][1] = p[j][2] = p[j][3] = 0.f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t off = (kk / 4) * WG_ATOM_BYTES + (kk % 4) * 32, offb = (kk / 4) * BSTR + (kk % 4) * 32;
        if constexpr (N == 64) {
            wgmma_64x64x16<T>(s, wg_desc(sA + off), wg_desc(sB + offb));
            wgmma_64x64x16<T>(p, wg_desc(sC + off), wg_desc(sE + offb));
        } else {
            wgmma_64x32x16<T>(s, wg_desc(sA + off), wg_desc(sB + offb));
            wgmma_64x32x16<T>(p, wg_desc(sC + off), wg_desc(sE + offb));
        }
    }
    wg_commit();
    wg_wait0();
}
// S[64 x 64] = A . B^T over D (atoms of A and B at sA, sB: shared addresses), one warpgroup
template <typename T, int D> __device__ __forceinline__ void wg_qkT(float (&d)[8][4], uint32_t sA, uint32_t sB) {
#pragma unroll
    for (int j = 0; j < 8; j++) d[j][0] = d[j][1] = d[j][2] = d[j][3] = 0.f;
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t off = (kk / 4) * WG_ATOM_BYTES + (kk % 4) * 32;
        wgmma_64x64x16<T>(d, wg_desc(sA + off), wg_desc(sB + off));
    }
    wg_commit();
    wg_wait0();
}

__device__ __forceinline__ int mma_cmp_visible(int t, int l, int d, int NC) {
    if (t < l - 1) return 0;
    int v = (t - l + 1) / d + 1;
    return v < NC ? v : NC;
}
__device__ __forceinline__ int overlap_num_d(int i, int j, int l, int d, int lsel) {
    int a0 = i * d, a1 = i * d + l, b0 = j * lsel, b1 = (j + 1) * lsel;
    int lo = a0 > b0 ? a0 : b0, hi = a1 < b1 ? a1 : b1;
    return hi > lo ? hi - lo : 0;
}
// does query t see key s (a key of the branch's K: token or compressed block)?
template <int BR> __device__ __forceinline__ bool sees(const AttnArgs &a, int t, int s) {
    if (BR == BR_WIN) return s <= t && s > t - a.w;
    if (BR == BR_CMP) return s * a.d + a.l - 1 <= t;
    return s <= t;
}

template <typename K> static void mma_smem_attr(K kernel, size_t bytes) {
    if (bytes > 48 * 1024) cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}

// One chunk's online-softmax step for a warp's 16 rows (rows gid and gid + 8 of the mma.sync
// fragments), after masking: s holds the chunk's scores in log2 units (-inf where masked) and
// mx this lane's maxima of them per row. The running max m and sum lsum are updated, oacc
// rescaled, and s replaced by the probabilities exp2(s - m) (a row that has seen no key yet
// keeps m = -inf and gets zeros).
template <int NT, int NDT>
__device__ __forceinline__ void online_softmax_step(float (&s)[NT][4], float (&oacc)[NDT][4], float (&m)[2], float (&lsum)[2],
                                                    float (&mx)[2]) {
    float muse[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mnew = fmaxf(m[r], mx[r]);
        muse[r] = mnew == -INFINITY ? 0.f : mnew;
        const float alpha = exp2f(m[r] - muse[r]);
        m[r] = mnew;
        lsum[r] *= alpha;
#pragma unroll
        for (int i = 0; i < NDT; i++) {
            oacc[i][2 * r] *= alpha;
            oacc[i][2 * r + 1] *= alpha;
        }
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[nt][e] = exp2f(s[nt][e] - muse[e >> 1]);
            lsum[e >> 1] += s[nt][e];
        }
}

// ============================================================================================
// rows kernels (cmp, win; sel where nsa_sel_rows_on)
// ============================================================================================
#define ROWS_KC 64

// key range [kstart, kend) of the CTA's rows (selection: keys past kend load as zeros; the
// chunks are the union's, below)
template <int BR>
__device__ __forceinline__ void rows_keys(const AttnArgs &a, int tbase, int t_last, int &kstart, int &kend) {
    if (BR == BR_WIN) {
        kstart = tbase - a.w + 1 > 0 ? tbase - a.w + 1 : 0;
        kend = t_last + 1;
    } else if (BR == BR_SEL) {
        kstart = 0;
        kend = t_last + 1;
    } else {
        kstart = 0;
        kend = mma_cmp_visible(t_last, a.l, a.d, a.NC);
    }
}

// Selection on the rows kernels: the blocks that any of the tile's nq positions (tbase ..)
// selected, ascending, in selj[0 .. *nu), and for each the mask of the positions that selected
// it in selm (bit q: position tbase + q; BQ <= 64). selm is NS words of shared memory: first
// one per block (integer atomicOr: the same mask whatever the order), then compacted in place
// by one warp. selj holds NS ints. Every thread of the CTA calls it (it synchronises).
__device__ __forceinline__ void sel_rows_union(const AttnArgs &a, int b, int g, int tbase, int nq, uint64_t *selm, int *selj,
                                               int *nu) {
    for (int j = threadIdx.x; j < a.NS; j += blockDim.x) selm[j] = 0;
    __syncthreads();
    const int32_t *sl = a.sel + (((int64_t)b * a.T + tbase) * a.G + g) * a.n;
    for (int i = threadIdx.x; i < nq * a.n; i += blockDim.x) {
        const int q = i / a.n, j = sl[(int64_t)q * a.G * a.n + i % a.n];
        if (j >= 0) atomicOr(reinterpret_cast<unsigned long long *>(selm + j), 1ull << q);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int m = 0;
        for (int j0 = 0; j0 < a.NS; j0 += 32) {
            const int j = j0 + lane;
            const uint64_t w = j < a.NS ? selm[j] : 0;
            const unsigned bal = __ballot_sync(0xffffffffu, w != 0);
            __syncwarp();   // every lane has read its word before any is overwritten
            if (w) {
                const int p = m + __popc(bal & ((1u << lane) - 1));
                selm[p] = w;
                selj[p] = j;
            }
            __syncwarp();
            m += __popc(bal);
        }
        if (lane == 0) *nu = m;
    }
    __syncthreads();
}
// shared memory of the union's table after a rows kernel's tiles
__host__ __device__ constexpr size_t sel_rows_table_bytes(int NS) { return (size_t)NS * 12 + 16; }

// Does the row at position t (-1: none) see key `key` of chunk c? pm is the chunk's mask of
// the tile's positions that selected its block (selection only), tbase the tile's first position.
template <int BR>
__device__ __forceinline__ bool rows_vis(const AttnArgs &a, int t, int key, int kend, uint64_t pm, int tbase) {
    if (t < 0 || key >= kend) return false;
    if (BR == BR_SEL) return key <= t && ((pm >> (t - tbase)) & 1);
    return sees<BR>(a, t, key);
}

template <typename T, int D> __device__ __forceinline__ void load_kv_chunk(T *Ks, T *Vs, const T *Kg, const T *Vg, int64_t ks,
                                                                             int kb, int kend, int tid, int nthreads) {
    constexpr int DP = D + 8, CH = D / 8;
    for (int i = tid; i < ROWS_KC * CH; i += nthreads) {
        int r = i / CH, cc = i % CH, s = kb + r;
        bool ok = s < kend;
        cp16(Ks + r * DP + cc * 8, ok ? Kg + s * ks + cc * 8 : Kg, ok);
        cp16(Vs + r * DP + cc * 8, ok ? Vg + s * ks + cc * 8 : Vg, ok);
    }
}

// WG: Q and K in swizzled atoms (after a 1024-byte alignment slack), V padded as before
template <int D, bool WG> __host__ __device__ constexpr size_t rows_fwd_smem() {
    return WG ? 1024 + (size_t)(64 + 2 * ROWS_KC) * D * 2 + (size_t)2 * ROWS_KC * (D + 8) * 2
              : (size_t)(64 + 4 * ROWS_KC) * (D + 8) * 2;
}
// 16-byte chunk cc of row r of a D-wide operand tile in swizzled atoms (byte offset)
__device__ __forceinline__ uint32_t wg_tile_off(int r, int cc) { return (cc / 8) * WG_ATOM_BYTES + wg_swz(r, cc % 8); }
// WG: Q, dO, K and V all in swizzled atoms after a 1024-byte alignment slack
template <int D, bool WG> __host__ __device__ constexpr size_t rows_dq_smem() {
    return WG ? 1024 + (size_t)(128 + 4 * ROWS_KC) * D * 2 : (size_t)(128 + 4 * ROWS_KC) * (D + 8) * 2;
}

// The chunks a rows kernel walks: n of them; kb(c) is the first key of chunk c and pm(c)
// (selection) the mask of the tile's positions that selected chunk c's block. Window and
// compressed: ROWS_KC-key chunks from kstart. Selection: the union of the tile's selected
// blocks (sel_rows_union, its table at `table` in shared memory), l' / ROWS_KC chunks a block.
template <int BR> struct RowsChunks {
    int n, per, kstart, lsel;
    const int *selj;
    const uint64_t *selm;
    __device__ __forceinline__ int kb(int c) const {
        return BR == BR_SEL ? selj[c / per] * lsel + (c % per) * ROWS_KC : kstart + c * ROWS_KC;
    }
    __device__ __forceinline__ uint64_t pm(int c) const { return BR == BR_SEL ? selm[c / per] : 0; }
};
// Every thread of the CTA calls it (selection: it synchronises)
template <int BR>
__device__ __forceinline__ RowsChunks<BR> rows_chunks(const AttnArgs &a, int b, int g, int tbase, int t_last, int kstart, int kend,
                                                      unsigned char *table) {
    RowsChunks<BR> rc;
    rc.kstart = kstart;
    rc.lsel = a.lsel;
    rc.per = BR == BR_SEL ? a.lsel / ROWS_KC : 1;
    uint64_t *selm = reinterpret_cast<uint64_t *>(table);
    int *selj = reinterpret_cast<int *>(selm + a.NS), *nu = selj + a.NS;
    rc.selm = selm;
    rc.selj = selj;
    if constexpr (BR == BR_SEL) {
        sel_rows_union(a, b, g, tbase, t_last - tbase + 1, selm, selj, nu);
        rc.n = *nu * rc.per;
    } else {
        rc.n = kend > kstart ? (kend - kstart + ROWS_KC - 1) / ROWS_KC : 0;
    }
    return rc;
}

// WG (sm_90a, D 64 or 128): both products by warpgroup MMA from swizzled Q, K and V tiles:
// S = Q K^T (wg_qkT), then O += P V with P from registers and V as a transposed B operand
// (wg_rs); the online-softmax rescale of O between chunks is ordered by wg_fence.
template <typename T, int D, int BR, bool WG> __global__ void __launch_bounds__(128) k_rows_fwd(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *qk = WG ? reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023) : smem_raw;
    constexpr int QP = WG ? D : DP;        // elements per Q/K row as stored
    T *Qs = reinterpret_cast<T *>(qk);
    T *Ks = Qs + 64 * QP;                  // [2][KC][QP]
    constexpr int VP = WG ? D : DP;        // elements per V row as stored
    T *Vs = Ks + 2 * ROWS_KC * QP;         // [2][KC][VP]
    // K and V chunk kb.. into buffer buf: K swizzled (WG) or padded, V padded
    auto load_chunk = [&](int buf, const T *Kg, const T *Vg, int64_t ks, int kb, int kend) {
        if constexpr (WG) {
            constexpr int CH = D / 8;
            unsigned char *kd = reinterpret_cast<unsigned char *>(Ks + buf * ROWS_KC * QP);
            T *vd = Vs + buf * ROWS_KC * VP;
            for (int i = threadIdx.x; i < ROWS_KC * CH; i += 128) {
                const int r = i / CH, cc = i % CH, s = kb + r;
                const bool ok = s < kend;
                cp16(kd + wg_tile_off(r, cc), ok ? Kg + s * ks + cc * 8 : Kg, ok);
                cp16(reinterpret_cast<unsigned char *>(vd) + wg_tile_off(r, cc), ok ? Vg + s * ks + cc * 8 : Vg, ok);
            }
        } else {
            load_kv_chunk<T, D>(Ks + buf * ROWS_KC * DP, Vs + buf * ROWS_KC * DP, Kg, Vg, ks, kb, kend, threadIdx.x, 128);
        }
    };
    __shared__ int trow[64];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int hpg = a.hpg;
    const RowsGeom rg = rows_geom(hpg);
    const int b = blockIdx.z, g = blockIdx.y / rg.nhb, hb = blockIdx.y % rg.nhb;
    const int tbase = a.t0 + blockIdx.x * rg.BQ, tend = a.t0 + a.Tn;
    if (tid < 64) {
        int tq = tid / rg.HB, h = hb * rg.HB + tid % rg.HB, t = tbase + tq;
        trow[tid] = (tq < rg.BQ && t < tend && h < hpg) ? t : -1;
    }
    for (int c = tid; c < 64 * (D / 8); c += 128) {
        int r = c / (D / 8), cc = c % (D / 8);
        int tq = r / rg.HB, h = hb * rg.HB + r % rg.HB, t = tbase + tq;
        bool ok = tq < rg.BQ && t < tend && h < hpg;
        const T *src = ok ? (const T *)a.q + (((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h) * D + cc * 8 : (const T *)a.q;
        if (WG) cp16(reinterpret_cast<unsigned char *>(Qs) + wg_tile_off(r, cc), src, ok);
        else cp16(Qs + r * DP + cc * 8, src, ok);
    }
    int t_last = tbase + rg.BQ - 1 < tend - 1 ? tbase + rg.BQ - 1 : tend - 1;
    int kstart, kend;
    rows_keys<BR>(a, tbase, t_last, kstart, kend);
    const RowsChunks<BR> ch = rows_chunks<BR>(a, b, g, tbase, t_last, kstart, kend, smem_raw + rows_fwd_smem<D, WG>());
    const int nchunks = ch.n;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    if (nchunks > 0) load_chunk(0, Kg, Vg, ks, ch.kb(0), kend);
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    uint32_t qf[NKS][4];

    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_chunk(buf ^ 1, Kg, Vg, ks, ch.kb(c + 1), kend);
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const T *Vb = Vs + buf * ROWS_KC * VP;
        const int kb = ch.kb(c);
        const uint64_t pm = ch.pm(c);
        float s[8][4];
        if constexpr (WG) {
            wg_qkT<T, D>(s, (uint32_t)__cvta_generic_to_shared(Qs),
                         (uint32_t)__cvta_generic_to_shared(Ks + buf * ROWS_KC * QP));
        } else {
            if (c == 0) {
#pragma unroll
                for (int kk = 0; kk < NKS; kk++) frag_a<DP>(qf[kk], Qs, warp * 16, kk * 16, lane);
            }
            const T *Kb = Ks + buf * ROWS_KC * DP;
#pragma unroll
            for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < NKS; kk++)
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bf[4];
                    frag_b_nk<DP>(bf, Kb, np * 16, kk * 16, lane);
                    mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                    mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                }
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                const bool vis = rows_vis<BR>(a, t, key, kend, pm, tbase);
                s[nt][e] = vis ? s[nt][e] * a.scale_log2 : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
            }
        online_softmax_step<8, NDT>(s, oacc, m, lsum, mx);
        if constexpr (WG) {
            // O += P V by warpgroup MMA: P from registers, V as a transposed B operand
            uint32_t pa[ROWS_KC / 16][4];
#pragma unroll
            for (int kk = 0; kk < ROWS_KC / 16; kk++) {
                acc_afrag<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
            }
            wg_fence();
            wg_rs<T, D, ROWS_KC>(oacc, pa, (uint32_t)__cvta_generic_to_shared(Vb), WG_ATOM_BYTES);
            wg_commit();
            wg_wait0();
        } else {
            mma_acc_kn<T, D, ROWS_KC, DP>(oacc, s, Vb, 0, lane);
        }
        __syncthreads();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 1);
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 2);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = r0 + 8 * r, t = tr[r];
        if (t < 0) continue;
        const int h = hb * rg.HB + row % rg.HB;
        const int64_t R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h;
        const bool any = lsum[r] > 0.f;
        const float inv = any ? 1.0f / lsum[r] : 0.f;
        T *o = (T *)a.o + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++)
            *reinterpret_cast<uint32_t *>(o + nt * 8 + 2 * tig) = pack2<T>(oacc[nt][2 * r] * inv, oacc[nt][2 * r + 1] * inv);
        if (tig == 0) {
            const float lse = any ? (m[r] + log2f(lsum[r])) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

// WG (sm_90a, D 64 or 128): every product by warpgroup MMA from swizzled tiles. S = Q K^T
// and dP = dO V^T over the chunk's 64 keys at D 64, 32 keys at a time at D 128 (wg_two),
// then dQ += dS K with dS from registers and the same keys of K as a transposed
// B operand (wg_rs). mma.sync: 32 keys a pass.
template <typename T, int D, int BR, bool WG> __global__ void __launch_bounds__(128) k_rows_dq(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8;
    // keys a pass: the whole chunk with warpgroup MMA at D 64, else halves (at D 128 the whole
    // chunk was faster for the selection and window dQ but slower for the compressed one:
    // paper shape 64k 70.6 -> 74.0 ms, bench/RESULTS.md)
    constexpr int KH = WG && D == 64 ? ROWS_KC : 32;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *qk = WG ? reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023) : smem_raw;
    constexpr int QP = WG ? D : DP;        // elements per row as stored
    T *Qs = reinterpret_cast<T *>(qk);
    T *Ys = Qs + 64 * QP;                  // dO
    T *Ks = Ys + 64 * QP;                  // [2][KC][QP]
    T *Vs = Ks + 2 * ROWS_KC * QP;
    auto load_chunk = [&](int buf, const T *Kg, const T *Vg, int64_t ks, int kb, int kend) {
        if constexpr (WG) {
            constexpr int CH = D / 8;
            unsigned char *kd = reinterpret_cast<unsigned char *>(Ks + buf * ROWS_KC * QP);
            unsigned char *vd = reinterpret_cast<unsigned char *>(Vs + buf * ROWS_KC * QP);
            for (int i = threadIdx.x; i < ROWS_KC * CH; i += 128) {
                const int r = i / CH, cc = i % CH, s = kb + r;
                const bool ok = s < kend;
                cp16(kd + wg_tile_off(r, cc), ok ? Kg + s * ks + cc * 8 : Kg, ok);
                cp16(vd + wg_tile_off(r, cc), ok ? Vg + s * ks + cc * 8 : Vg, ok);
            }
        } else {
            load_kv_chunk<T, D>(Ks + buf * ROWS_KC * DP, Vs + buf * ROWS_KC * DP, Kg, Vg, ks, kb, kend, threadIdx.x, 128);
        }
    };
    __shared__ int trow[64];
    __shared__ float lse2[64], drw[64];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int hpg = a.hpg;
    const RowsGeom rg = rows_geom(hpg);
    const int b = blockIdx.z, g = blockIdx.y / rg.nhb, hb = blockIdx.y % rg.nhb;
    const int tbase = a.t0 + blockIdx.x * rg.BQ, tend = a.t0 + a.Tn;
    if (tid < 64) {
        int tq = tid / rg.HB, h = hb * rg.HB + tid % rg.HB, t = tbase + tq;
        bool ok = tq < rg.BQ && t < tend && h < hpg;
        float l2 = -INFINITY, dr = 0.f;
        if (ok) {
            int64_t R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h;
            l2 = a.lse_in[R] * MMA_LOG2E;
            dr = a.drow[R];
        }
        trow[tid] = ok && l2 != -INFINITY ? t : -1;
        lse2[tid] = l2;
        drw[tid] = dr;
    }
    for (int c = tid; c < 64 * (D / 8); c += 128) {
        int r = c / (D / 8), cc = c % (D / 8);
        int tq = r / rg.HB, h = hb * rg.HB + r % rg.HB, t = tbase + tq;
        bool ok = tq < rg.BQ && t < tend && h < hpg;
        int64_t off = ok ? (((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h) * D + cc * 8 : 0;
        if (WG) {
            cp16(reinterpret_cast<unsigned char *>(Qs) + wg_tile_off(r, cc), (const T *)a.q + off, ok);
            cp16(reinterpret_cast<unsigned char *>(Ys) + wg_tile_off(r, cc), (const T *)a.dout + off, ok);
        } else {
            cp16(Qs + r * DP + cc * 8, (const T *)a.q + off, ok);
            cp16(Ys + r * DP + cc * 8, (const T *)a.dout + off, ok);
        }
    }
    int t_last = tbase + rg.BQ - 1 < tend - 1 ? tbase + rg.BQ - 1 : tend - 1;
    int kstart, kend;
    rows_keys<BR>(a, tbase, t_last, kstart, kend);
    const RowsChunks<BR> ch = rows_chunks<BR>(a, b, g, tbase, t_last, kstart, kend, smem_raw + rows_dq_smem<D, WG>());
    const int nchunks = ch.n;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    if (nchunks > 0) load_chunk(0, Kg, Vg, ks, ch.kb(0), kend);
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};
    const float l2r[2] = {lse2[r0], lse2[r0 + 8]}, drr[2] = {drw[r0], drw[r0 + 8]};

    float dqa[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;
    uint32_t qf[NKS][4], yf[NKS][4];

    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_chunk(buf ^ 1, Kg, Vg, ks, ch.kb(c + 1), kend);
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const uint64_t pm = ch.pm(c);
        if (!WG && c == 0) {
#pragma unroll
            for (int kk = 0; kk < NKS; kk++) {
                frag_a<DP>(qf[kk], Qs, warp * 16, kk * 16, lane);
                frag_a<DP>(yf[kk], Ys, warp * 16, kk * 16, lane);
            }
        }
        const T *Kb = Ks + buf * ROWS_KC * QP, *Vb = Vs + buf * ROWS_KC * QP;
#pragma unroll
        for (int half = 0; half < ROWS_KC / KH; half++) {
            const int kb = ch.kb(c) + half * KH;
            float s[KH / 8][4], dp[KH / 8][4];
            if constexpr (WG) {
                // S and dP over the pass's KH keys, KH rows of each atom (a half: 4096 bytes
                // further); the whole chunk gives the same bits as two halves: the same k-steps
                wg_two<T, D, KH, WG_ATOM_BYTES>(s, dp, (uint32_t)__cvta_generic_to_shared(Qs),
                                                (uint32_t)__cvta_generic_to_shared(Kb) + half * KH * 128,
                                                (uint32_t)__cvta_generic_to_shared(Ys),
                                                (uint32_t)__cvta_generic_to_shared(Vb) + half * KH * 128);
            } else {
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
                for (int kk = 0; kk < NKS; kk++)
#pragma unroll
                    for (int np = 0; np < 2; np++) {
                        uint32_t bf[4];
                        frag_b_nk<DP>(bf, Kb, half * 32 + np * 16, kk * 16, lane);
                        mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                        mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                        frag_b_nk<DP>(bf, Vb, half * 32 + np * 16, kk * 16, lane);
                        mma16816<T>(dp[2 * np], yf[kk], bf[0], bf[1]);
                        mma16816<T>(dp[2 * np + 1], yf[kk], bf[2], bf[3]);
                    }
            }
#pragma unroll
            for (int nt = 0; nt < KH / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                    const bool vis = rows_vis<BR>(a, t, key, kend, pm, tbase);
                    const float p = vis ? exp2f(s[nt][e] * a.scale_log2 - l2r[e >> 1]) : 0.f;
                    s[nt][e] = p * (dp[nt][e] - drr[e >> 1]);   // dS
                }
            if constexpr (WG) {
                // dQ += dS K by warpgroup MMA: dS from registers, the chunk's keys of K as a
                // transposed B operand
                uint32_t da[KH / 16][4];
#pragma unroll
                for (int kk = 0; kk < KH / 16; kk++) {
                    acc_afrag<T>(da[kk], s[2 * kk], s[2 * kk + 1]);
                }
                wg_fence();
                wg_rs<T, D, KH>(dqa, da, (uint32_t)__cvta_generic_to_shared(Kb) + half * KH * 128, WG_ATOM_BYTES);
                wg_commit();
                wg_wait0();
            } else {
                mma_acc_kn<T, D, 32, DP>(dqa, s, Kb, half * 32, lane);
            }
        }
        __syncthreads();
    }
    cp_wait<0>();
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = r0 + 8 * r, t = tr[r];
        if (t < 0) continue;
        const int h = hb * rg.HB + row % rg.HB;
        const int64_t R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h;
        T *dq = (T *)a.dq + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++)
            add2<T>(dq + nt * 8 + 2 * tig, a.scale * dqa[nt][2 * r], a.scale * dqa[nt][2 * r + 1]);
    }
}

// ============================================================================================
// selection kernels: a CTA per (b, t, group, 16-head tile), warps split the blocks
// ============================================================================================
template <int D, int KT> constexpr size_t sel_smem() {
    // Q and dO tiles [16][DP] + per warp K and V [KT][DP]; the merge area reuses the K/V space
    return (size_t)(2 * 16 + 4 * 2 * KT) * (D + 8) * 2;
}
template <int D, int KT> __host__ __device__ constexpr bool sel_merge_fits() {
    return (size_t)4 * 16 * D * 4 + 4 * 16 * 2 * 4 <= (size_t)4 * 2 * KT * (D + 8) * 2;
}

template <typename T, int D, int KT>
__device__ __forceinline__ void sel_load_block(T *Kw, T *Vw, const T *Kg, const T *Vg, int64_t ks, int kb, int t, int lane) {
    constexpr int DP = D + 8, CH = D / 8;
    for (int i = lane; i < KT * CH; i += 32) {
        int r = i / CH, cc = i % CH, s = kb + r;
        bool ok = s <= t;
        cp16(Kw + r * DP + cc * 8, ok ? Kg + s * ks + cc * 8 : Kg, ok);
        cp16(Vw + r * DP + cc * 8, ok ? Vg + s * ks + cc * 8 : Vg, ok);
    }
}

// Row layout of a selection tile. PACK 1: the 16 rows are heads rt*16 .. rt*16+15 of
// position t. PACK 2 (heads per group <= 8): rows 0-7 are the heads of position tA,
// rows 8-15 those of tB = tA + 1, and the CTA walks the union of the two positions'
// selected blocks (a block only one of them selected is masked for the other half):
// 12 of 16 MMA rows useful with m7c's 6 heads instead of 6.
struct SelTile {
    int t[2];        // position of rows 0-7 / 8-15 (PACK 1: both t); -1 invalid
    int h0[2];       // head of row 0 / row 8
    int nh[2];       // valid heads in rows 0-7 / 8-15
    int tmax;
};
template <int PACK> __device__ __forceinline__ SelTile sel_tile(const AttnArgs &a, int bx, int rt) {
    SelTile st;
    if (PACK == 1) {
        const int t = a.t0 + bx, hr = a.hpg - rt * 16 < 16 ? a.hpg - rt * 16 : 16;
        st.t[0] = st.t[1] = t;
        st.h0[0] = rt * 16;
        st.h0[1] = rt * 16 + 8;
        st.nh[0] = hr < 8 ? hr : 8;
        st.nh[1] = hr > 8 ? hr - 8 : 0;
        st.tmax = t;
    } else {
        const int tA = a.t0 + 2 * bx, tB = tA + 1 < a.t0 + a.Tn ? tA + 1 : -1;
        st.t[0] = tA;
        st.t[1] = tB;
        st.h0[0] = st.h0[1] = 0;
        st.nh[0] = a.hpg;
        st.nh[1] = tB >= 0 ? a.hpg : 0;
        st.tmax = tB >= 0 ? tB : tA;
    }
    return st;
}
// tile row (0..15) -> global row index (b, t, head), or -1 for padding
__device__ __forceinline__ int64_t sel_row(const AttnArgs &a, const SelTile &st, int b, int g, int row) {
    const int k = row & 7;
    const bool hi = row >= 8;
    const int t = hi ? st.t[1] : st.t[0], nh = hi ? st.nh[1] : st.nh[0], h0 = hi ? st.h0[1] : st.h0[0];
    if (k >= nh || t < 0) return -1;
    return ((int64_t)b * a.T + t) * a.H + (int64_t)g * a.hpg + h0 + k;
}
// the blocks to walk: PACK 1 the position's list, PACK 2 the sorted union with a mask
// (bit 0: selected by rows 0-7, bit 1: by rows 8-15). Written by thread 0.
template <int PACK>
__device__ __forceinline__ void sel_union(const AttnArgs &a, const SelTile &st, int b, int g, int *ul, int *uf, int *nu) {
    const int32_t *sa = a.sel + (((int64_t)b * a.T + st.t[0]) * a.G + g) * a.n;
    if (PACK == 1 || st.t[1] < 0) {
        int m = 0;
        for (int c = 0; c < a.n; c++)
            if (sa[c] >= 0) { ul[m] = sa[c]; uf[m] = 3; m++; }
        *nu = m;
        return;
    }
    const int32_t *sb = a.sel + (((int64_t)b * a.T + st.t[1]) * a.G + g) * a.n;
    int i = 0, j = 0, m = 0;
    while (true) {
        int x = i < a.n ? sa[i] : -1, y = j < a.n ? sb[j] : -1;
        if (x < 0 && y < 0) break;
        if (y < 0 || (x >= 0 && x < y)) { ul[m] = x; uf[m] = 1; i++; }
        else if (x < 0 || y < x) { ul[m] = y; uf[m] = 2; j++; }
        else { ul[m] = x; uf[m] = 3; i++; j++; }
        m++;
    }
    *nu = m;
}
#define SEL_MAXU 136   // 2 n + slack, n <= 64 (launcher)

// One chunk of keys kb .. kb + 8 NT - 1 of a selection tile's online softmax, per warp: scores
// s (accumulator n-tiles of Q.K^T) masked (row valid, block selected by the row's position,
// key <= that position) and scaled to log2 units, the running max m and sum lsum of rows gid,
// gid + 8 updated, oacc rescaled, s replaced by the probabilities exp2(s - m)
template <int NT, int NDT>
__device__ __forceinline__ void sel_online_softmax(float (&s)[NT][4], float (&oacc)[NDT][4], float (&m)[2], float (&lsum)[2], int kb,
                                                   const bool (&rv)[2], int fl, const int (&tr)[2], float scale_log2, int tig) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = kb + nt * 8 + 2 * tig + (e & 1), r = e >> 1;
            const bool vis = rv[r] && ((fl >> r) & 1) && key <= tr[r];
            s[nt][e] = vis ? s[nt][e] * scale_log2 : -INFINITY;
            mx[r] = fmaxf(mx[r], s[nt][e]);
        }
    online_softmax_step<NT, NDT>(s, oacc, m, lsum, mx);
}
// dS of one chunk for dQ: P recomputed from the saved lse (l2r, log2 units) under the same mask,
// s replaced by P (dP - rowsum(dO * O))
template <int NT>
__device__ __forceinline__ void sel_dscores(float (&s)[NT][4], const float (&dp)[NT][4], int kb, const bool (&rv)[2], int fl,
                                            const int (&tr)[2], const float (&l2r)[2], const float (&drr)[2], float scale_log2,
                                            int tig) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int key = kb + nt * 8 + 2 * tig + (e & 1), r = e >> 1;
            const bool vis = rv[r] && ((fl >> r) & 1) && key <= tr[r];
            const float p = vis ? exp2f(s[nt][e] * scale_log2 - l2r[r]) : 0.f;
            s[nt][e] = p * (dp[nt][e] - drr[r]);
        }
}

template <typename T, int D, int KT, int PACK> __global__ void __launch_bounds__(128) k_sel_fwd(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NT = KT / 8;
    static_assert(sel_merge_fits<D, KT>(), "merge area");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    T *Qs = reinterpret_cast<T *>(smem_raw);
    T *KV = Qs + 32 * DP;   // per warp: K [KT][DP], V [KT][DP]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    for (int c = tid; c < 16 * (D / 8); c += 128) {
        int r = c / (D / 8), cc = c % (D / 8);
        int64_t R = sel_row(a, st, b, g, r);
        cp16(Qs + r * DP + cc * 8, R >= 0 ? (const T *)a.q + R * D + cc * 8 : (const T *)a.q, R >= 0);
    }
    cp_commit();
    if (tid == 0) sel_union<PACK>(a, st, b, g, ul, uf, &nu_s);
    cp_wait<0>();
    __syncthreads();
    uint32_t qf[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) frag_a<DP>(qf[kk], Qs, 0, kk * 16, lane);
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    T *Kw = KV + warp * 2 * KT * DP, *Vw = Kw + KT * DP;
    const int per = a.lsel / KT, nch = nu_s * per;
    const bool rv[2] = {sel_row(a, st, b, g, gid) >= 0, sel_row(a, st, b, g, gid + 8) >= 0};
    const int tr[2] = {st.t[0], st.t[1]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;

    for (int c = warp; c < nch; c += 4) {
        const int j = ul[c / per], fl = uf[c / per];
        const int kb = j * a.lsel + (c % per) * KT;
        if (kb > st.tmax) continue;
        sel_load_block<T, D, KT>(Kw, Vw, Kg, Vg, ks, kb, st.tmax, lane);
        cp_commit();
        cp_wait<0>();
        __syncwarp();
        float s[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < NKS; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t bf[4];
                frag_b_nk<DP>(bf, Kw, np * 16, kk * 16, lane);
                mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
            }
        sel_online_softmax<NT, NDT>(s, oacc, m, lsum, kb, rv, fl, tr, a.scale_log2, tig);
        mma_acc_kn<T, D, KT, DP>(oacc, s, Vw, 0, lane);
        __syncwarp();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 1);
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 2);
    }
    // merge the 4 warps' partial softmax states in warp order
    __syncthreads();
    float *Om = reinterpret_cast<float *>(KV);   // [4][16][D]
    float *Mm = Om + 4 * 16 * D, *Lm = Mm + 4 * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = gid + 8 * r;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) {
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig] = oacc[nt][2 * r];
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig + 1] = oacc[nt][2 * r + 1];
        }
        if (tig == 0) {
            Mm[warp * 16 + row] = m[r];
            Lm[warp * 16 + row] = lsum[r];
        }
    }
    __syncthreads();
    for (int idx = tid; idx < 16 * D; idx += 128) {
        const int row = idx / D, dd = idx % D;
        const int64_t R = sel_row(a, st, b, g, row);
        if (R < 0) continue;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, Mm[w * 16 + row]);
        float L = 0.f, O = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float mw = Mm[w * 16 + row];
                if (mw == -INFINITY) continue;
                const float f = exp2f(mw - M);
                L += Lm[w * 16 + row] * f;
                O += Om[(w * 16 + row) * D + dd] * f;
            }
        }
        const bool any = L > 0.f;
        ((T *)a.o)[R * D + dd] = fromf<T>(any ? O / L : 0.f);
        if (dd == 0) {
            const float lse = any ? (M + log2f(L)) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

template <typename T, int D, int KT, int PACK> __global__ void __launch_bounds__(128) k_sel_dq(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NT = KT / 8;
    static_assert(sel_merge_fits<D, KT>(), "merge area");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    T *Qs = reinterpret_cast<T *>(smem_raw);
    T *Ys = Qs + 16 * DP;
    T *KV = Qs + 32 * DP;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    for (int c = tid; c < 16 * (D / 8); c += 128) {
        int r = c / (D / 8), cc = c % (D / 8);
        int64_t R = sel_row(a, st, b, g, r);
        int64_t off = R >= 0 ? R * D + cc * 8 : 0;
        cp16(Qs + r * DP + cc * 8, (const T *)a.q + off, R >= 0);
        cp16(Ys + r * DP + cc * 8, (const T *)a.dout + off, R >= 0);
    }
    cp_commit();
    if (tid == 0) sel_union<PACK>(a, st, b, g, ul, uf, &nu_s);
    cp_wait<0>();
    __syncthreads();
    uint32_t qf[NKS][4], yf[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) {
        frag_a<DP>(qf[kk], Qs, 0, kk * 16, lane);
        frag_a<DP>(yf[kk], Ys, 0, kk * 16, lane);
    }
    float l2r[2], drr[2];
    bool rv[2];
    const int tr[2] = {st.t[0], st.t[1]};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int64_t R = sel_row(a, st, b, g, gid + 8 * r);
        l2r[r] = R >= 0 ? a.lse_in[R] * MMA_LOG2E : -INFINITY;
        drr[r] = R >= 0 ? a.drow[R] : 0.f;
        rv[r] = R >= 0 && l2r[r] != -INFINITY;
    }
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    T *Kw = KV + warp * 2 * KT * DP, *Vw = Kw + KT * DP;
    const int per = a.lsel / KT, nch = nu_s * per;

    float dqa[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) dqa[i][0] = dqa[i][1] = dqa[i][2] = dqa[i][3] = 0.f;

    for (int c = warp; c < nch; c += 4) {
        const int j = ul[c / per], fl = uf[c / per];
        const int kb = j * a.lsel + (c % per) * KT;
        if (kb > st.tmax) continue;
        sel_load_block<T, D, KT>(Kw, Vw, Kg, Vg, ks, kb, st.tmax, lane);
        cp_commit();
        cp_wait<0>();
        __syncwarp();
        float s[NT][4], dp[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] = dp[i][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < NKS; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t bf[4];
                frag_b_nk<DP>(bf, Kw, np * 16, kk * 16, lane);
                mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                frag_b_nk<DP>(bf, Vw, np * 16, kk * 16, lane);
                mma16816<T>(dp[2 * np], yf[kk], bf[0], bf[1]);
                mma16816<T>(dp[2 * np + 1], yf[kk], bf[2], bf[3]);
            }
        sel_dscores<NT>(s, dp, kb, rv, fl, tr, l2r, drr, a.scale_log2, tig);
        mma_acc_kn<T, D, KT, DP>(dqa, s, Kw, 0, lane);
        __syncwarp();
    }
    __syncthreads();
    float *Om = reinterpret_cast<float *>(KV);   // [4][16][D]
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = gid + 8 * r;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) {
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig] = dqa[nt][2 * r];
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig + 1] = dqa[nt][2 * r + 1];
        }
    }
    __syncthreads();
    for (int idx = tid; idx < 16 * D; idx += 128) {
        const int row = idx / D, dd = idx % D;
        const int64_t R = sel_row(a, st, b, g, row);
        if (R < 0) continue;
        const float s = ((Om[row * D + dd] + Om[(16 + row) * D + dd]) + Om[(32 + row) * D + dd]) + Om[(48 + row) * D + dd];
        T *p = (T *)a.dq + R * D + dd;
        *p = fromf<T>(tof(*p) + a.scale * s);
    }
}

// ============================================================================================
// selection forward on the Hopper tensor memory accelerator (sm_90; D 64 or 128, blocks of a
// multiple of 64 keys): one warp a CTA, the same tile rows as k_sel_fwd
// ============================================================================================
// The warp walks every 64-key chunk of its tile's block list in order through NST stages of
// K and V [64][D] in 128-byte-swizzle atoms (SwzTile<64>), each stage filled by one TMA tile
// copy per atom (4-D tensor maps over k and v [B][NK][G][D], sel_tma_maps) completing on the
// stage's mbarrier. A stage is refilled with the chunk NST ahead as soon as the warp has used
// it, so NST - 1 chunks load while it computes (flash_nsa's selection kernels: 1-warp programs,
// a ring of TMA loads). No partial softmax states to merge. Keys past the tile's last position
// are zeroed after they land (masked, but 0 * NaN of a later position's bits would not be 0);
// keys past the sequence come in as zeros from the copy. The dQ pass stays on k_sel_dq (H100,
// bench/RESULTS.md): the same 1-warp design for dQ (three products a chunk, 253 registers at
// D 128) was slower (paper shape 64k, selected backward 57.8 -> 73.5 ms), and so was a
// warp-specialised one (a loader warp, 4 warps splitting each chunk's keys, 2-4 stages) at
// D 128 (57.1 -> 72.5-73.2 ms); at D 64 it gained 0-8 % on the op and nothing end to end.
#define SEL_TMA_KT 64
// mbarrier (sm_90): a phase completes when its one arrival (expect_tx) has come and the bytes
// it announced have landed
__device__ __forceinline__ void mbar_init(uint32_t bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(bar) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if __CUDA_ARCH__ >= 900
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
#endif
}
// the box of a 4-D tensor map at (c0, c1, c2, c3) -> shared dst, completing on bar
__device__ __forceinline__ void tma_load4(void *dst, const CUtensorMap *map, int c0, int c1, int c2, int c3, uint32_t bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(
                     (uint32_t)__cvta_generic_to_shared(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
                 : "memory");
#else
    __trap();
#endif
}

#define SEL_TMA_NST 2   // stages: 3 CTAs an SM at D 128 (70 KB each), 6 at D 64; 3 stages measured slower
template <int D> constexpr size_t sel_tma_smem() {
    // 1024-byte alignment slack, the stages of K and V [64][D], the Q tile [16][D + 8]
    return 1024 + (size_t)SEL_TMA_NST * 2 * SEL_TMA_KT * D * 2 + (size_t)16 * (D + 8) * 2;
}

#define SEL_TMA_STAGE(D) (2 * SEL_TMA_KT * (D) * 2)   // bytes of a stage: K then V [64][D]
// A tile's chunks: chunk c covers keys kb(c) .. kb(c) + 63 of block ul[c / per]; chunks that
// start after the tile's last position (tmax) are skipped
struct SelChunks {
    const int *ul;   // the tile's block list
    int lsel, per, nch, tmax;
    __device__ int kb(int c) const { return ul[c / per] * lsel + (c % per) * SEL_TMA_KT; }
    __device__ int next(int c) const {
        for (; c < nch; c++)
            if (kb(c) <= tmax) return c;
        return nch;
    }
};
// one thread: the chunk at key k0 into a stage, one TMA copy per 64-column atom of K and V,
// completing on bar
template <int D>
__device__ __forceinline__ void sel_tma_issue(unsigned char *stage, const CUtensorMap *mk, const CUtensorMap *mv, int g, int k0,
                                              int b, uint32_t bar) {
    mbar_expect_tx(bar, SEL_TMA_STAGE(D));
#pragma unroll
    for (int at = 0; at < D / 64; at++) {
        tma_load4(stage + at * SEL_TMA_KT * 128, mk, at * 64, g, k0, b, bar);
        tma_load4(stage + SEL_TMA_STAGE(D) / 2 + at * SEL_TMA_KT * 128, mv, at * 64, g, k0, b, bar);
    }
}
// one warp: zero the K and V rows [r0, r1) of a landed stage (a key row is 128 contiguous bytes
// in each atom, whatever the swizzle), then order those writes before a later TMA write to it
template <int D> __device__ __forceinline__ void sel_tma_zero(unsigned char *stage, int r0, int r1, int lane) {
    const int nz = r1 - r0;
    if (nz <= 0) return;
    for (int i = lane; i < nz * (D / 64) * 2 * 8; i += 32) {
        const int ch = i & 7, row = r0 + (i >> 3) % nz, at = (i >> 3) / nz;
        *reinterpret_cast<uint4 *>(stage + at * SEL_TMA_KT * 128 + row * 128 + ch * 16) = make_uint4(0, 0, 0, 0);
    }
    wg_fence_proxy();
}

// the forward's feed: one warp consumes and refills its own ring
template <typename T, int D> struct SelTmaFeed {
    static constexpr int NST = SEL_TMA_NST, STAGE = SEL_TMA_STAGE(D);
    unsigned char *ring;       // NST stages, 1024-byte aligned
    uint32_t bar;              // shared address of the NST mbarriers (8 bytes each)
    const CUtensorMap *mk, *mv;
    SelChunks ch;
    int g, b, lane;
    int pf;                    // the next chunk to load (nch: none)

    __device__ const T *kst(int s) const { return reinterpret_cast<const T *>(ring + s * STAGE); }
    __device__ const T *vst(int s) const { return reinterpret_cast<const T *>(ring + s * STAGE + STAGE / 2); }
    __device__ void issue(int s) {   // lane 0
        sel_tma_issue<D>(ring + s * STAGE, mk, mv, g, ch.kb(pf), b, bar + 8 * s);
        pf = ch.next(pf + 1);
    }
    __device__ int start() {
        pf = ch.next(0);
        const int c0 = pf;
        if (lane == 0)
            for (int s = 0; s < NST && pf < ch.nch; s++) issue(s);
        pf = __shfl_sync(0xffffffffu, pf, 0);
        return c0;
    }
    // the it-th chunk (starting at key k0) is in stage it % NST: wait for it, zero its keys
    // past tmax
    __device__ void wait(int it, int k0) {
        const int s = it % NST;
        mbar_wait(bar + 8 * s, (uint32_t)(it / NST) & 1);
        sel_tma_zero<D>(ring + s * STAGE, ch.tmax - k0 + 1, SEL_TMA_KT, lane);
        __syncwarp();
    }
    // the warp is done with the it-th chunk: its stage takes the next chunk to load
    __device__ void release(int it) {
        __syncwarp();
        if (lane == 0 && pf < ch.nch) issue(it % NST);
        pf = __shfl_sync(0xffffffffu, pf, 0);
    }
};

// the tile's 16 rows (padding rows zero) of q [B*T*H][D] into a [16][D + 8] shared tile (cp.async)
template <typename T, int D>
__device__ __forceinline__ void sel_rows_load(T *dst, const T *src, const AttnArgs &a, const SelTile &st, int b, int g, int lane) {
    for (int c = lane; c < 16 * (D / 8); c += 32) {
        const int r = c / (D / 8), cc = c % (D / 8);
        const int64_t R = sel_row(a, st, b, g, r);
        cp16(dst + r * (D + 8) + cc * 8, R >= 0 ? src + R * D + cc * 8 : src, R >= 0);
    }
}
template <typename T, int D, int PACK>
__global__ void __launch_bounds__(32) k_sel_fwd_tma(AttnArgs a, const __grid_constant__ CUtensorMap mk,
                                                   const __grid_constant__ CUtensorMap mv) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NT = SEL_TMA_KT / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];   // the ring is aligned to 1024 by hand
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    __shared__ uint64_t bars[SEL_TMA_NST];
    unsigned char *ring = reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
    T *Qs = reinterpret_cast<T *>(ring + (size_t)SEL_TMA_NST * 2 * SEL_TMA_KT * D * 2);   // [16][DP]
    const int lane = threadIdx.x, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    sel_rows_load<T, D>(Qs, (const T *)a.q, a, st, b, g, lane);
    cp_commit();
    if (lane < SEL_TMA_NST) mbar_init((uint32_t)__cvta_generic_to_shared(&bars[lane]));
    if (lane == 0) sel_union<PACK>(a, st, b, g, ul, uf, &nu_s);
    cp_wait<0>();
    __syncwarp();
    const int per = a.lsel / SEL_TMA_KT;
    SelTmaFeed<T, D> feed{ring, (uint32_t)__cvta_generic_to_shared(bars), &mk, &mv, {ul, a.lsel, per, nu_s * per, st.tmax},
                          g, b, lane, 0};
    const int c0 = feed.start();
    uint32_t qf[NKS][4];
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) frag_a<DP>(qf[kk], Qs, 0, kk * 16, lane);
    const bool rv[2] = {sel_row(a, st, b, g, gid) >= 0, sel_row(a, st, b, g, gid + 8) >= 0};
    const int tr[2] = {st.t[0], st.t[1]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    int it = 0;
    for (int c = c0; c < feed.ch.nch; c = feed.ch.next(c + 1), it++) {
        const int fl = uf[c / per], kb = feed.ch.kb(c);
        feed.wait(it, kb);
        const T *Kw = feed.kst(it % SEL_TMA_NST), *Vw = feed.vst(it % SEL_TMA_NST);
        float s[NT][4];
#pragma unroll
        for (int i = 0; i < NT; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < NKS; kk++)
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                uint32_t bf[4];
                frag_b_nk_l<SwzTile<SEL_TMA_KT>>(bf, Kw, np * 16, kk * 16, lane);
                mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
            }
        sel_online_softmax<NT, NDT>(s, oacc, m, lsum, kb, rv, fl, tr, a.scale_log2, tig);
        mma_acc_kn_l<T, D, SEL_TMA_KT, SwzTile<SEL_TMA_KT>>(oacc, s, Vw, 0, lane);
        feed.release(it);
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 1);
        lsum[r] += __shfl_xor_sync(0xffffffffu, lsum[r], 2);
        const int64_t R = sel_row(a, st, b, g, gid + 8 * r);
        if (R < 0) continue;
        const bool any = lsum[r] > 0.f;
        T *o = (T *)a.o + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) {
            const int col = nt * 8 + 2 * tig;
            o[col] = fromf<T>(any ? oacc[nt][2 * r] / lsum[r] : 0.f);
            o[col + 1] = fromf<T>(any ? oacc[nt][2 * r + 1] / lsum[r] : 0.f);
        }
        if (tig == 0) {
            const float lse = any ? (m[r] + log2f(lsum[r])) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

// ============================================================================================
// dK/dV: key-centric, partials per (key chunk, row chunk)
// ============================================================================================
// rows per tile: 64 with warpgroup MMA at D 64 (the first products m64n64k16, as in the rows
// kernels), else 32 (D 128's accumulators leave no registers for 64)
template <int D, bool WG> __host__ __device__ constexpr int dkdv_rt() { return WG && D == 64 ? 64 : 32; }

// WG: K and V (64-row atoms) and the Q / dO row tiles (RT-row atoms, RT * 128 bytes)
// swizzled, after a 1024-byte alignment slack
template <int D, int KT, bool WG> constexpr size_t dkdv_smem() {
    constexpr int RT = dkdv_rt<D, WG>();
    return WG ? 1024 + (size_t)(2 * KT + 4 * RT) * D * 2 + 2 * 3 * RT * 4 : (size_t)(2 * KT + 4 * RT) * (D + 8) * 2 + 2 * 3 * RT * 4;
}

// WG (sm_90a, KT 64, D 64 or 128): every product by warpgroup MMA from swizzled tiles.
// S^T = K Q^T and dP^T = V dO^T for the CTA's 64 keys x a tile's RT rows (wg_two), then
// dV += P^T dO and dK += dS^T Q with P^T, dS^T from registers and dO, Q as transposed B
// operands (wg_rs).
template <typename T, int D, int KT, int BR, bool WG> __global__ void __launch_bounds__(KT * 2) k_dkdv(AttnArgs a, int NKC) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NW = KT / 16, NTH = NW * 32;
    static_assert(!WG || (KT == 64 && D % 64 == 0), "the warpgroup path: 64 keys, 64-element atoms");
    constexpr int KP = WG ? D : DP;                // elements per row as stored
    constexpr int RT = dkdv_rt<D, WG>(), NRT = RT / 8;   // rows per tile, their n-tiles
    constexpr int RT_ATOM = RT * 128;              // WG: bytes of an RT-row atom
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = WG ? reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023) : smem_raw;
    T *Ks = reinterpret_cast<T *>(base);
    T *Vs = Ks + KT * KP;
    T *Qs = Vs + KT * KP;                       // [2][RT][KP]
    T *Ys = Qs + 2 * RT * KP;              // [2][RT][KP]
    float *l2s = reinterpret_cast<float *>(Ys + 2 * RT * KP);   // [2][RT]
    float *drs = l2s + 2 * RT;
    int *trs = reinterpret_cast<int *>(drs + 2 * RT);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int e = blockIdx.x, rc = blockIdx.y;
    const int4 ch = a.chunks[e];
    const int kb = ch.x, nk = ch.y, rb = ch.z, nrows = ch.w;
    const int r_lo = rc * a.rch;
    if (r_lo >= nrows) return;
    const int r_hi = r_lo + a.rch < nrows ? r_lo + a.rch : nrows;
    const int bg = e / NKC, b = bg / a.G, g = bg % a.G, hpg = a.hpg;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const int32_t *list = BR == BR_SEL ? a.ilist + rb : NULL;
    for (int i = tid; i < KT * (D / 8); i += NTH) {
        int r = i / (D / 8), cc = i % (D / 8), s = kb + r;
        bool ok = r < nk;
        const uint32_t o = WG ? wg_tile_off(r, cc) : (uint32_t)(r * DP + cc * 8) * 2;
        cp16(reinterpret_cast<unsigned char *>(Ks) + o, ok ? Kg + s * ks + cc * 8 : Kg, ok);
        cp16(reinterpret_cast<unsigned char *>(Vs) + o, ok ? Vg + s * ks + cc * 8 : Vg, ok);
    }
    auto load_rows = [&](int it, int buf) {
        const int f0 = r_lo + it * RT;
        for (int i = tid; i < RT * (D / 8); i += NTH) {
            int r = i / (D / 8), cc = i % (D / 8), f = f0 + r;
            bool ok = f < r_hi;
            int64_t off = 0;
            if (ok) {
                int ti = f / hpg, hh = f % hpg;
                int t = list ? list[ti] : rb + ti;
                off = (((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + hh) * D + cc * 8;
            }
            const uint32_t o = WG ? (uint32_t)((cc / 8) * RT_ATOM) + wg_swz(r, cc % 8) : (uint32_t)(r * DP + cc * 8) * 2;
            cp16(reinterpret_cast<unsigned char *>(Qs + buf * RT * KP) + o, (const T *)a.q + off, ok);
            cp16(reinterpret_cast<unsigned char *>(Ys + buf * RT * KP) + o, (const T *)a.dout + off, ok);
        }
        for (int r = tid; r < RT; r += NTH) {
            int f = f0 + r, t = -1;
            float l2 = -INFINITY, dr = 0.f;
            if (f < r_hi) {
                int ti = f / hpg, hh = f % hpg;
                t = list ? list[ti] : rb + ti;
                int64_t R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + hh;
                l2 = a.lse_in[R] * MMA_LOG2E;
                dr = a.drow[R];
                if (l2 == -INFINITY) t = -1;
            }
            trs[buf * RT + r] = t;
            l2s[buf * RT + r] = l2;
            drs[buf * RT + r] = dr;
        }
    };
    const int ntiles = (r_hi - r_lo + RT - 1) / RT;
    load_rows(0, 0);
    cp_commit();

    float dka[NDT][4], dva[NDT][4];
#pragma unroll
    for (int i = 0; i < NDT; i++)
#pragma unroll
        for (int q = 0; q < 4; q++) dka[i][q] = dva[i][q] = 0.f;
    const int kw = warp * 16;   // this warp's first key (local)
    const int key0 = kb + kw + gid, key1 = key0 + 8;
    const bool kv0 = kw + gid < nk, kv1 = kw + gid + 8 < nk;

    for (int it = 0; it < ntiles; it++) {
        const int buf = it & 1;
        __syncthreads();   // buffer buf^1 free (its last reader finished at it-1)
        if (it + 1 < ntiles) load_rows(it + 1, buf ^ 1);
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const T *Qb = Qs + buf * RT * KP, *Yb = Ys + buf * RT * KP;
        const int *tb = trs + buf * RT;
        const float *lb = l2s + buf * RT, *db = drs + buf * RT;
        float s[NRT][4], dp[NRT][4];
        if constexpr (WG) {
            wg_two<T, D, RT, RT_ATOM>(s, dp, (uint32_t)__cvta_generic_to_shared(Ks), (uint32_t)__cvta_generic_to_shared(Qb),
                                      (uint32_t)__cvta_generic_to_shared(Vs), (uint32_t)__cvta_generic_to_shared(Yb));
        } else {
            static_assert(WG || RT == 32, "mma.sync: 32-row tiles");
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int q = 0; q < 4; q++) s[i][q] = dp[i][q] = 0.f;
#pragma unroll
            for (int kk = 0; kk < NKS; kk++) {
                uint32_t ka[4], va[4];
                frag_a<DP>(ka, Ks, kw, kk * 16, lane);
                frag_a<DP>(va, Vs, kw, kk * 16, lane);
#pragma unroll
                for (int np = 0; np < 2; np++) {
                    uint32_t bf[4];
                    frag_b_nk<DP>(bf, Qb, np * 16, kk * 16, lane);
                    mma16816<T>(s[2 * np], ka, bf[0], bf[1]);
                    mma16816<T>(s[2 * np + 1], ka, bf[2], bf[3]);
                    frag_b_nk<DP>(bf, Yb, np * 16, kk * 16, lane);
                    mma16816<T>(dp[2 * np], va, bf[0], bf[1]);
                    mma16816<T>(dp[2 * np + 1], va, bf[2], bf[3]);
                }
            }
        }
        // element (nt, q): key = key0 / key1 (q >> 1), row = nt*8 + 2*tig + (q & 1)
#pragma unroll
        for (int nt = 0; nt < NRT; nt++)
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const int row = nt * 8 + 2 * tig + (q & 1), t = tb[row];
                const int key = (q >> 1) ? key1 : key0;
                const bool vis = t >= 0 && ((q >> 1) ? kv1 : kv0) && sees<BR>(a, t, key);
                const float p = vis ? exp2f(s[nt][q] * a.scale_log2 - lb[row]) : 0.f;
                s[nt][q] = p;
                dp[nt][q] = p * (dp[nt][q] - db[row]);
            }
        if constexpr (WG) {
            // dV += P^T dO, dK += dS^T Q by warpgroup MMA: P^T and dS^T from registers,
            // dO and Q as transposed B operands
            uint32_t pa[RT / 16][4], da[RT / 16][4];
#pragma unroll
            for (int kk = 0; kk < RT / 16; kk++) {
                acc_afrag<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
                acc_afrag<T>(da[kk], dp[2 * kk], dp[2 * kk + 1]);
            }
            wg_fence();
            wg_rs<T, D, RT>(dva, pa, (uint32_t)__cvta_generic_to_shared(Yb), RT_ATOM);
            wg_rs<T, D, RT>(dka, da, (uint32_t)__cvta_generic_to_shared(Qb), RT_ATOM);
            wg_commit();
            wg_wait0();
        } else {
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t pa[4];
                acc_afrag<T>(pa, s[2 * kk], s[2 * kk + 1]);
                uint32_t da[4];
                acc_afrag<T>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int dd = 0; dd < D / 16; dd++) {
                    uint32_t bf[4];
                    frag_b_kn<DP>(bf, Yb, kk * 16, dd * 16, lane);
                    mma16816<T>(dva[2 * dd], pa, bf[0], bf[1]);
                    mma16816<T>(dva[2 * dd + 1], pa, bf[2], bf[3]);
                    frag_b_kn<DP>(bf, Qb, kk * 16, dd * 16, lane);
                    mma16816<T>(dka[2 * dd], da, bf[0], bf[1]);
                    mma16816<T>(dka[2 * dd + 1], da, bf[2], bf[3]);
                }
            }
        }
    }
    float *pk = a.part + (int64_t)(a.chunk_part[e] + rc) * 2 * KT * D;
    float *pv = pk + KT * D;
#pragma unroll
    for (int nt = 0; nt < NDT; nt++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int kl = kw + gid + 8 * (q >> 1), dd = nt * 8 + 2 * tig + (q & 1);
            pk[kl * D + dd] = a.scale * dka[nt][q];
            pv[kl * D + dd] = dva[nt][q];
        }
}

// ============================================================================================
// selection scores on tensor cores (bf16/fp16): a CTA owns BQ positions x the whole
// group (hpg <= 64 heads): S = Q Kc^T per chunk of 64 compressed blocks as in
// k_rows_fwd, p = exp(S - lse) from the compressed branch's saved lse, then the head
// sums Psum[position][i] = sum_h p[h, i] (a butterfly over a warp's 16 rows when the
// group's heads fill whole warps, else through the P tile, heads ascending, every
// (position, block) pair in parallel), then per (position, selection block j)
// score[j] += sum_i w(i, j) Psum[i] (blocks i and chunks in ascending order), and the
// top-n per position by a warp (forced blocks, ties to the lower index). Shared: Q,
// K double buffer, the P tile, Psum [BQ][KC], scores [BQ][NS], taken flags [BQ][NS].
// ============================================================================================
#define SEL_PP 65   // P tile row pitch (floats)
// Float areas after Q and the K double buffer, in floats: the P tile [64][SEL_PP] only
// where the head sums go through shared memory, the per-warp sums Pw [4][KC] where they
// are butterflies, Psum [BQ][KC] (Pw itself when one warp is one position), then
// scores [BQ][NS] and taken flags [BQ][NS] bytes. Sized to what the group needs, so that
// three CTAs fit an SM at the paper shape.
struct SelScoreLayout {
    int psum, score, nfloat;   // offsets of Psum and score, floats before the flags
};
__host__ __device__ __forceinline__ SelScoreLayout selscore_layout(int hpg, int NS) {
    const RowsGeom rg = rows_geom(hpg);
    SelScoreLayout L;
    const bool warp_rows = rg.HB % 16 == 0;
    if (!warp_rows) L.psum = 64 * SEL_PP;
    else L.psum = rg.HB == 16 ? 0 : 4 * ROWS_KC;
    L.score = warp_rows && rg.HB == 16 ? 4 * ROWS_KC : L.psum + rg.BQ * ROWS_KC;
    L.nfloat = L.score + rg.BQ * NS;
    return L;
}
// Q and the K double buffer: padded rows for ldmatrix, or (WG) swizzled atoms behind a
// 1024-byte alignment slack
template <int D, bool WG> __host__ __device__ constexpr size_t selscore_qk_bytes() {
    return WG ? 1024 + (size_t)(64 + 2 * ROWS_KC) * D * 2 : (size_t)(64 + 2 * ROWS_KC) * (D + 8) * 2;
}
template <int D, bool WG> size_t selscore_smem(int hpg, int NS) {
    return selscore_qk_bytes<D, WG>() + (size_t)selscore_layout(hpg, NS).nfloat * 4 + (size_t)rows_geom(hpg).BQ * NS + 16;
}

// WG (sm_90a, D 64 or 128): S = Q Kc^T by one warpgroup MMA per 16-wide k-step from
// swizzled shared tiles (wg_qkT) instead of mma.sync from padded ones; the rest is shared.
template <typename T, int D, bool WG> __global__ void __launch_bounds__(128) k_select_mma(AttnArgs a, int32_t *sel_out) {
    constexpr int DP = D + 8, NKS = D / 16;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *qk = WG ? reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023) : smem_raw;
    T *Qs = reinterpret_cast<T *>(qk);                                // [64][DP], or WG: atoms of 64 rows
    T *Ks = WG ? Qs + 64 * D : Qs + 64 * DP;                          // [2][KC][DP], or WG: [2][atoms]
    const SelScoreLayout lay = selscore_layout(a.hpg, a.NS);
    float *Ps = reinterpret_cast<float *>(smem_raw + selscore_qk_bytes<D, WG>());   // [64][SEL_PP] or Pw [4][KC]
    float *Psum = Ps + lay.psum;                                      // [BQ][KC]
    float *score = Ps + lay.score;                                    // [BQ][NS]
    const RowsGeom rg = rows_geom(a.hpg);
    unsigned char *taken = reinterpret_cast<unsigned char *>(score + rg.BQ * a.NS);   // [BQ][NS]
    __shared__ int trow[64];
    __shared__ float l2s[64];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int hpg = a.hpg, HB = rg.HB, BQ = rg.BQ;
    const int b = blockIdx.z, g = blockIdx.y;
    const int tbase = a.t0 + blockIdx.x * BQ, tend = a.t0 + a.Tn;
    // HB a multiple of 16: each warp's rows are heads of one position (wpp warps per
    // position) and the head sums are butterflies in registers; else P goes through Ps
    const bool warp_rows = HB % 16 == 0;
    const int wpp = HB / 16;
    float *Pw = Ps;   // [4][KC] per-warp head sums (warp_rows; Psum is Pw when wpp == 1)
    if (tid < 64) {
        int tq = tid / HB, t = tbase + tq;
        bool ok = tq < BQ && t < tend;
        float l2 = -INFINITY;
        if (ok) l2 = a.lse_in[((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + tid % HB] * MMA_LOG2E;
        trow[tid] = ok && l2 != -INFINITY ? t : -1;
        l2s[tid] = l2;
    }
    for (int i = tid; i < BQ * a.NS; i += 128) score[i] = 0.f;
    for (int c = tid; c < 64 * (D / 8); c += 128) {
        int r = c / (D / 8), cc = c % (D / 8);
        int tq = r / HB, t = tbase + tq;
        bool ok = tq < BQ && t < tend;
        const T *src = ok ? (const T *)a.q + (((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + r % HB) * D + cc * 8 : (const T *)a.q;
        if (WG) cp16(reinterpret_cast<unsigned char *>(Qs) + (cc / 8) * WG_ATOM_BYTES + wg_swz(r, cc % 8), src, ok);
        else cp16(Qs + r * DP + cc * 8, src, ok);
    }
    const int t_last = tbase + BQ - 1 < tend - 1 ? tbase + BQ - 1 : tend - 1;
    const int kend = mma_cmp_visible(t_last, a.l, a.d, a.NC);
    const int nchunks = (kend + ROWS_KC - 1) / ROWS_KC;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    // K chunks alternate between the two halves of the K area (no V needed)
    auto load_k = [&](int c, int buf) {
        T *dst = Ks + buf * ROWS_KC * (WG ? D : DP);
        const int kb1 = c * ROWS_KC, CH = D / 8;
        for (int i = tid; i < ROWS_KC * CH; i += 128) {
            int r = i / CH, cc = i % CH, s = kb1 + r;
            bool ok = s < kend;
            const T *src = ok ? Kg + s * ks + cc * 8 : Kg;
            if (WG) cp16(reinterpret_cast<unsigned char *>(dst) + (cc / 8) * WG_ATOM_BYTES + wg_swz(r, cc % 8), src, ok);
            else cp16(dst + r * DP + cc * 8, src, ok);
        }
    };
    if (nchunks > 0) load_k(0, 0);
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};
    const float l2r[2] = {l2s[r0], l2s[r0 + 8]};
    uint32_t qf[NKS][4];
    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_k(c + 1, buf ^ 1);
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const int kb = c * ROWS_KC;
        float s[8][4];
        if constexpr (WG) {
            wg_qkT<T, D>(s, (uint32_t)__cvta_generic_to_shared(Qs),
                         (uint32_t)__cvta_generic_to_shared(Ks + buf * ROWS_KC * D));
        } else {
            if (c == 0) {
#pragma unroll
                for (int kk = 0; kk < NKS; kk++) frag_a<DP>(qf[kk], Qs, warp * 16, kk * 16, lane);
            }
            const T *Kb = Ks + buf * ROWS_KC * DP;
#pragma unroll
            for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
            for (int kk = 0; kk < NKS; kk++)
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    uint32_t bf[4];
                    frag_b_nk<DP>(bf, Kb, np * 16, kk * 16, lane);
                    mma16816<T>(s[2 * np], qf[kk], bf[0], bf[1]);
                    mma16816<T>(s[2 * np + 1], qf[kk], bf[2], bf[3]);
                }
        }
        // p = exp(S - lse) where the row sees the block, else 0
        float p[8][4];
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                const bool vis = t >= 0 && key < kend && key * a.d + a.l - 1 <= t;
                p[nt][e] = vis ? exp2f(s[nt][e] * a.scale_log2 - l2r[e >> 1]) : 0.f;
            }
        // Psum[tq][kl] = sum over the position's heads of p (a fixed order either way)
        if (warp_rows) {
            // the warp's 16 rows are 16 heads of one position: rows g and g + 8 added,
            // then a butterfly over the 8 row groups (lane bits 2..4)
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int c = 0; c < 2; c++) {
                    float v = p[nt][c] + p[nt][c + 2];
                    v += __shfl_xor_sync(0xffffffffu, v, 4);
                    v += __shfl_xor_sync(0xffffffffu, v, 8);
                    v += __shfl_xor_sync(0xffffffffu, v, 16);
                    if (gid == 0) Pw[warp * ROWS_KC + nt * 8 + 2 * tig + c] = v;
                }
            __syncthreads();
            if (wpp > 1) {   // a position spans wpp warps: add their sums in warp order
                for (int it = tid; it < BQ * ROWS_KC; it += 128) {
                    const int tq = it / ROWS_KC, kl = it % ROWS_KC;
                    float acc = 0.f;
                    for (int w = 0; w < wpp; w++) acc += Pw[(tq * wpp + w) * ROWS_KC + kl];
                    Psum[it] = acc;
                }
                __syncthreads();
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    Ps[(r0 + 8 * (e >> 1)) * SEL_PP + nt * 8 + 2 * tig + (e & 1)] = p[nt][e];
            __syncthreads();
            // heads in ascending order, every (position, block) pair in parallel
            for (int it = tid; it < BQ * ROWS_KC; it += 128) {
                const int tq = it / ROWS_KC, kl = it % ROWS_KC;
                const float *col = Ps + tq * HB * SEL_PP + kl;
                float acc = 0.f;
                for (int h = 0; h < HB; h++) acc += col[h * SEL_PP];
                Psum[it] = acc;
            }
            __syncthreads();
        }
        // score[tq][j] += sum_{i in chunk} w(i, j) Psum[tq][i - kb], j over the chunk's blocks
        const int ilast = kb + ROWS_KC - 1 < kend - 1 ? kb + ROWS_KC - 1 : kend - 1;
        const int jlo = kb * a.d / a.lsel;
        int jhi = (ilast * a.d + a.l - 1) / a.lsel;
        if (jhi > a.NS - 1) jhi = a.NS - 1;
        const int nj = jhi - jlo + 1;
        for (int it = tid; it < BQ * nj; it += 128) {
            const int tq = it / nj, j = jlo + it % nj;
            int i0 = j * a.lsel - a.l < 0 ? 0 : (j * a.lsel - a.l) / a.d + 1;
            int i1 = ((j + 1) * a.lsel - 1) / a.d;
            if (i0 < kb) i0 = kb;
            if (i1 > ilast) i1 = ilast;
            const float *ps = Psum + tq * ROWS_KC - kb;
            float acc = 0.f;
            for (int i = i0; i <= i1; i++) acc += (float)overlap_num_d(i, j, a.l, a.d, a.lsel) / (float)a.d * ps[i];
            score[tq * a.NS + j] += acc;
        }
        __syncthreads();
    }
    cp_wait<0>();
    // top-n per position: warp w takes positions w, w+4, ...
    for (int tq = warp; tq < BQ; tq += 4) {
        const int t = tbase + tq;
        if (t >= tend) break;
        const int cur = t / a.lsel;
        float *sc = score + tq * a.NS;
        unsigned char *tk = taken + tq * a.NS;
        for (int j = lane; j <= cur; j += 32) tk[j] = (j == 0 || j >= cur - 1);
        __syncwarp();
        const int nforced = cur == 0 ? 1 : cur == 1 ? 2 : 3;
        int32_t *out = sel_out + (((int64_t)b * a.T + t) * a.G + g) * a.n;
        int m = 0;
        int list[72];
        list[m++] = 0;
        if (cur >= 2) list[m++] = cur - 1;
        if (cur >= 1) list[m++] = cur;
        for (int c = 0; c < a.n - nforced; c++) {
            int best = -1;
            float bs = 0.f;
            for (int j = 1 + lane; j <= cur - 2; j += 32)
                if (!tk[j] && (best < 0 || sc[j] > bs)) { best = j; bs = sc[j]; }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const int ob = __shfl_xor_sync(0xffffffffu, best, o);
                const float os = __shfl_xor_sync(0xffffffffu, bs, o);
                if (ob >= 0 && (best < 0 || os > bs || (os == bs && ob < best))) { best = ob; bs = os; }
            }
            if (best < 0) break;
            __syncwarp();   // every lane's reads of tk above happen before lane 0's write
            if (lane == 0) tk[best] = 1;
            __syncwarp();
            list[m++] = best;
        }
        if (lane == 0) {
            for (int i = 1; i < m; i++) {
                int v = list[i], k = i - 1;
                while (k >= 0 && list[k] > v) { list[k + 1] = list[k]; k--; }
                list[k + 1] = v;
            }
            for (int c = 0; c < a.n; c++) out[c] = c < m ? list[c] : -1;
        }
        __syncwarp();
    }
}

// ============================================================================================
// host launchers
// ============================================================================================
// Every launch: raise the kernel's dynamic shared-memory limit where it needs more than
// 48 KiB, then launch on the backend's stream.
template <typename K, typename... A> static void mma_launch(K kernel, dim3 grid, int block, size_t sm, A... args) {
    mma_smem_attr(kernel, sm);
    kernel<<<grid, block, sm, NSA_STREAM>>>(args...);
}

template <typename T, int D> void mma_select(const AttnArgs &a, int32_t *sel_out) {
    const RowsGeom rg = rows_geom(a.hpg);
    dim3 grid((a.Tn + rg.BQ - 1) / rg.BQ, a.G, a.B);
    if constexpr (D % 64 == 0) {
        if (g_nsa_cuda.wgmma) {
            mma_launch(k_select_mma<T, D, true>, grid, 128, selscore_smem<D, true>(a.hpg, a.NS), a, sel_out);
            CUDA_LAUNCHED();
            return;
        }
    }
    mma_launch(k_select_mma<T, D, false>, grid, 128, selscore_smem<D, false>(a.hpg, a.NS), a, sel_out);
    CUDA_LAUNCHED();
}

// The TMA selection kernels' 4-D tensor maps over k and v [B][NK][G][D] (D innermost): a box
// of 64 keys x 64 elements of one group, 128-byte swizzle, keys past NK read as zeros. False
// where they cannot be made (no driver entry point, an address not 16-byte aligned): the
// caller then runs the cp.async kernels.
template <typename T> static bool sel_tma_maps(const AttnArgs &a, CUtensorMap *mk, CUtensorMap *mv) {
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    static int state = 0;   // 0 untried, 1 found, -1 not available
    if (state == 0) {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        const bool ok = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
                        q == cudaDriverEntryPointSuccess && fn;
        encode = ok ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn) : nullptr;
        state = ok ? 1 : -1;
        if (!ok) {
            (void)cudaGetLastError();
            fprintf(stderr, "nsa cuda: cuTensorMapEncodeTiled not available: the selection branch uses its cp.async kernels\n");
        }
    }
    if (state < 0 || (((uintptr_t)a.k | (uintptr_t)a.v) & 15)) return false;
    const cuuint64_t dims[4] = {(cuuint64_t)a.D, (cuuint64_t)a.G, (cuuint64_t)a.NK, (cuuint64_t)a.B};
    const cuuint64_t strides[3] = {(cuuint64_t)a.D * 2, (cuuint64_t)a.G * a.D * 2, (cuuint64_t)a.NK * a.G * a.D * 2};
    const cuuint32_t box[4] = {64, 1, SEL_TMA_KT, 1}, elem[4] = {1, 1, 1, 1};
    const CUtensorMapDataType dt = std::is_same<T, bf16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    for (int i = 0; i < 2; i++)
        if (encode(i ? mv : mk, dt, 4, const_cast<void *>(i ? a.v : a.k), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                   CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS)
            return false;
    return true;
}
// The forward and the dQ pass share one dispatch over the branch: selection (the rows kernels
// where nsa_sel_rows_on says so; else the TMA kernels where they run, else key tile KT 32 or
// 16; P positions per tile), window or compressed rows.
// A kernel set names its kernels, their shared memory and the query rows it covers (the
// forward may cover a row range, dQ all rows).
template <typename T, int D> struct FwdKernels {
    static int rows(const AttnArgs &a) { return a.Tn; }
    template <int KT, int P> static void sel(dim3 grid, const AttnArgs &a) {
        mma_launch(k_sel_fwd<T, D, KT, P>, grid, 128, sel_smem<D, KT>(), a);
    }
    static constexpr bool has_sel_tma = true;
    template <int P> static void sel_tma(dim3 grid, const AttnArgs &a, const CUtensorMap &mk, const CUtensorMap &mv) {
        mma_launch(k_sel_fwd_tma<T, D, P>, grid, 32, sel_tma_smem<D>(), a, mk, mv);
    }
    template <int BR> static void rows_k(dim3 grid, const AttnArgs &a, size_t extra) {
        if constexpr (D % 64 == 0) {
            if (g_nsa_cuda.wgmma) {
                mma_launch(k_rows_fwd<T, D, BR, true>, grid, 128, rows_fwd_smem<D, true>() + extra, a);
                return;
            }
        }
        mma_launch(k_rows_fwd<T, D, BR, false>, grid, 128, rows_fwd_smem<D, false>() + extra, a);
    }
};
template <typename T, int D> struct DqKernels {
    static int rows(const AttnArgs &a) { return a.T; }
    template <int KT, int P> static void sel(dim3 grid, const AttnArgs &a) {
        mma_launch(k_sel_dq<T, D, KT, P>, grid, 128, sel_smem<D, KT>(), a);
    }
    static constexpr bool has_sel_tma = false;   // k_sel_dq_tma measured no faster (see k_sel_fwd_tma)
    template <int BR> static void rows_k(dim3 grid, const AttnArgs &a, size_t extra) {
        if constexpr (D % 64 == 0) {
            if (g_nsa_cuda.wgmma) {
                mma_launch(k_rows_dq<T, D, BR, true>, grid, 128, rows_dq_smem<D, true>() + extra, a);
                return;
            }
        }
        mma_launch(k_rows_dq<T, D, BR, false>, grid, 128, rows_dq_smem<D, false>() + extra, a);
    }
};
// the TMA selection forward where this build's sm_90a code runs (NSA_CUDA_WGMMA=0: off), D is
// 64 or 128, blocks are whole 64-key chunks and the maps encode; false: not launched
template <typename T, int D, typename Kn> static bool sel_pass_tma(dim3 grid, const AttnArgs &a, int pack) {
    if constexpr (D % 64 == 0 && Kn::has_sel_tma) {
        CUtensorMap mk, mv;
        if (!g_nsa_cuda.wgmma || a.lsel % SEL_TMA_KT != 0 || !sel_tma_maps<T>(a, &mk, &mv)) return false;
        if (pack) Kn::template sel_tma<2>(grid, a, mk, mv);
        else Kn::template sel_tma<1>(grid, a, mk, mv);
        return true;
    }
    return false;
}
template <typename T, int D, typename Kn> static void mma_attn_rows_pass(const AttnArgs &a, int br) {
    const int rows = Kn::rows(a);
    const RowsGeom rg = rows_geom(a.hpg);
    const dim3 rows_grid((rows + rg.BQ - 1) / rg.BQ, a.G * rg.nhb, a.B);
    if (br == BR_SEL && nsa_sel_rows_on(a.hpg, D, a.lsel, a.NS, a.n)) {
        Kn::template rows_k<BR_SEL>(rows_grid, a, sel_rows_table_bytes(a.NS));
    } else if (br == BR_SEL) {
        const int pack = nsa_sel_pack_on(a.hpg, a.n);
        const int nrt = (a.hpg + 15) / 16;
        dim3 grid(pack ? (rows + 1) / 2 : rows, pack ? a.G : a.G * nrt, a.B);
        if (sel_pass_tma<T, D, Kn>(grid, a, pack)) {
        } else if (a.lsel % 32 == 0) {
            if (pack) Kn::template sel<32, 2>(grid, a);
            else Kn::template sel<32, 1>(grid, a);
        } else {
            if (pack) Kn::template sel<16, 2>(grid, a);
            else Kn::template sel<16, 1>(grid, a);
        }
    } else if (br == BR_WIN) {
        Kn::template rows_k<BR_WIN>(rows_grid, a, 0);
    } else {
        Kn::template rows_k<BR_CMP>(rows_grid, a, 0);
    }
    CUDA_LAUNCHED();
}
template <typename T, int D> void mma_attn_fwd(const AttnArgs &a, int br) { mma_attn_rows_pass<T, D, FwdKernels<T, D>>(a, br); }
template <typename T, int D> void mma_attn_dq(const AttnArgs &a, int br) { mma_attn_rows_pass<T, D, DqKernels<T, D>>(a, br); }

// dK/dV: 64-key chunks (128 threads) for every branch, 16-key chunks (32 threads) for
// selection blocks of 16 keys
template <typename T, int D, int KT, bool WG> static void dkdv_launch(const AttnArgs &a, int br, dim3 grid, int NKC) {
    const size_t sm = dkdv_smem<D, KT, WG>();
    if (br == BR_WIN) mma_launch(k_dkdv<T, D, KT, BR_WIN, WG>, grid, KT * 2, sm, a, NKC);
    else if (br == BR_CMP) mma_launch(k_dkdv<T, D, KT, BR_CMP, WG>, grid, KT * 2, sm, a, NKC);
    else mma_launch(k_dkdv<T, D, KT, BR_SEL, WG>, grid, KT * 2, sm, a, NKC);
}
template <typename T, int D> void mma_attn_dkdv(const AttnArgs &a, int br) {
    const int NKC = a.nentries / (a.B * a.G);
    int maxrows = br == BR_WIN ? (a.kt + a.w) * a.hpg : a.T * a.hpg;
    dim3 grid(a.nentries, (maxrows + a.rch - 1) / a.rch);
    if constexpr (D % 64 == 0) {
        if (a.kt == 64 && g_nsa_cuda.wgmma) {
            dkdv_launch<T, D, 64, true>(a, br, grid, NKC);
            CUDA_LAUNCHED();
            return;
        }
    }
    if (a.kt == 64) dkdv_launch<T, D, 64, false>(a, br, grid, NKC);
    else mma_launch(k_dkdv<T, D, 16, BR_SEL, false>, grid, 32, dkdv_smem<D, 16, false>(), a, NKC);
    CUDA_LAUNCHED();
}

#define NSA_INSTANTIATE_MMA(D)                                                   \
    template void mma_attn_fwd<bf16, D>(const AttnArgs &, int);                  \
    template void mma_attn_fwd<f16, D>(const AttnArgs &, int);                   \
    template void mma_attn_dq<bf16, D>(const AttnArgs &, int);                   \
    template void mma_attn_dq<f16, D>(const AttnArgs &, int);                    \
    template void mma_attn_dkdv<bf16, D>(const AttnArgs &, int);                 \
    template void mma_attn_dkdv<f16, D>(const AttnArgs &, int);                  \
    template void mma_select<bf16, D>(const AttnArgs &, int32_t *);              \
    template void mma_select<f16, D>(const AttnArgs &, int32_t *);
#endif
