// kernels/cuda/attn_tiles.cuh — the tile building blocks every tensor-core attention kernel
// is made of (attn_fwd.cu, attn_dq.cu, attn_dkdv.cu, attn_select.cu): the MMA wrappers
// (mma.sync m16n8k16 and sm_90a warpgroup MMA, bf16/fp16 in, fp32 accumulate), fragment
// loads from padded and swizzled shared tiles, tile loads by cp.async, the per-warp QK^T and
// P V products, one online-softmax step, the branches' visibility tests, mbarrier and TMA
// copies, and the launch helper. Header-only (templates and inline device functions).
//
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane/4, c = lane%4):
//   A (16x16, row): a0 (g, 2c..2c+1) a1 (g+8, 2c..) a2 (g, 2c+8..) a3 (g+8, 2c+8..)
//   B (16x8, col):  b0 (k = 2c..2c+1, n = g)  b1 (k = 2c+8.., n = g)
//   C (16x8):       c0,c1 (g, 2c..2c+1)  c2,c3 (g+8, 2c..2c+1)
// An accumulator pair of n-tiles (16 columns) is an A fragment of the next product
// after rounding to 16 bits (pack2), as in FlashAttention-2.
#ifndef NSA_KERNELS_CUDA_ATTN_TILES_CUH
#define NSA_KERNELS_CUDA_ATTN_TILES_CUH
#include "kernels/cuda/cuda_common.cuh"
#include <cuda.h>            // CUtensorMap (TMA copies)
#include <cudaTypedefs.h>    // PFN_cuTensorMapEncodeTiled (tma_map_4d)
#include <cstdio>
#include <cstddef>           // std::nullptr_t: one tile or a pair (tile_load)
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
// The dynamic shared memory's first 1024-byte aligned byte (the swizzled tiles' alignment), as
// smem plus an offset: the compiler still knows every pointer derived from it is shared, so its
// loads and stores are LDS / STS. Aligning the address through an integer loses that, and every
// access through it becomes a generic LD / ST.
__device__ __forceinline__ unsigned char *smem_align1024(unsigned char *smem) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(smem);
    return smem + ((1024u - (s & 1023u)) & 1023u);
}
// 16-byte global -> shared copy; pred false zero-fills the destination
__device__ __forceinline__ void cp16(void *s, const void *g, bool pred) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    int n = pred ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(g), "r"(n) : "memory");
}
// 4-byte global -> shared copy (a row's statistic)
__device__ __forceinline__ void cp4(void *s, const void *g) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(sa), "l"(g) : "memory");
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
__device__ __forceinline__ void wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
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
// d[64 x 64] = A[64 x 16] . B[64 x 16]^T: the first k-step, d written only
template <typename T> __device__ __forceinline__ void wgmma_64x64x16_first(float (&d)[8][4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wgmma_64x64x16_first<bf16>(float (&d)[8][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3])
                 : "l"(da), "l"(db), "n"(0));
}
template <> __device__ __forceinline__ void wgmma_64x64x16_first<f16>(float (&d)[8][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3])
                 : "l"(da), "l"(db), "n"(0));
}
// d[64 x 128] += A[64 x 16] . B[128 x 16]^T (both K-major: B a 128-row swizzled tile), fp32
// accumulate; _first: the first k-step, d written only
template <typename T> __device__ __forceinline__ void wgmma_64x128x16(float (&d)[16][4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wgmma_64x128x16<bf16>(float (&d)[16][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <> __device__ __forceinline__ void wgmma_64x128x16<f16>(float (&d)[16][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]), "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]), "+f"(d[3][3]), "+f"(d[4][0]), "+f"(d[4][1]), "+f"(d[4][2]), "+f"(d[4][3]), "+f"(d[5][0]), "+f"(d[5][1]), "+f"(d[5][2]), "+f"(d[5][3]), "+f"(d[6][0]), "+f"(d[6][1]), "+f"(d[6][2]), "+f"(d[6][3]), "+f"(d[7][0]), "+f"(d[7][1]), "+f"(d[7][2]), "+f"(d[7][3]), "+f"(d[8][0]), "+f"(d[8][1]), "+f"(d[8][2]), "+f"(d[8][3]), "+f"(d[9][0]), "+f"(d[9][1]), "+f"(d[9][2]), "+f"(d[9][3]), "+f"(d[10][0]), "+f"(d[10][1]), "+f"(d[10][2]), "+f"(d[10][3]), "+f"(d[11][0]), "+f"(d[11][1]), "+f"(d[11][2]), "+f"(d[11][3]), "+f"(d[12][0]), "+f"(d[12][1]), "+f"(d[12][2]), "+f"(d[12][3]), "+f"(d[13][0]), "+f"(d[13][1]), "+f"(d[13][2]), "+f"(d[13][3]), "+f"(d[14][0]), "+f"(d[14][1]), "+f"(d[14][2]), "+f"(d[14][3]), "+f"(d[15][0]), "+f"(d[15][1]), "+f"(d[15][2]), "+f"(d[15][3])
                 : "l"(da), "l"(db), "r"(1));
}
template <typename T> __device__ __forceinline__ void wgmma_64x128x16_first(float (&d)[16][4], uint64_t da, uint64_t db);
template <> __device__ __forceinline__ void wgmma_64x128x16_first<bf16>(float (&d)[16][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3]), "=f"(d[8][0]), "=f"(d[8][1]), "=f"(d[8][2]), "=f"(d[8][3]), "=f"(d[9][0]), "=f"(d[9][1]), "=f"(d[9][2]), "=f"(d[9][3]), "=f"(d[10][0]), "=f"(d[10][1]), "=f"(d[10][2]), "=f"(d[10][3]), "=f"(d[11][0]), "=f"(d[11][1]), "=f"(d[11][2]), "=f"(d[11][3]), "=f"(d[12][0]), "=f"(d[12][1]), "=f"(d[12][2]), "=f"(d[12][3]), "=f"(d[13][0]), "=f"(d[13][1]), "=f"(d[13][2]), "=f"(d[13][3]), "=f"(d[14][0]), "=f"(d[14][1]), "=f"(d[14][2]), "=f"(d[14][3]), "=f"(d[15][0]), "=f"(d[15][1]), "=f"(d[15][2]), "=f"(d[15][3])
                 : "l"(da), "l"(db), "n"(0));
}
template <> __device__ __forceinline__ void wgmma_64x128x16_first<f16>(float (&d)[16][4], uint64_t da, uint64_t db) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "=f"(d[0][0]), "=f"(d[0][1]), "=f"(d[0][2]), "=f"(d[0][3]), "=f"(d[1][0]), "=f"(d[1][1]), "=f"(d[1][2]), "=f"(d[1][3]), "=f"(d[2][0]), "=f"(d[2][1]), "=f"(d[2][2]), "=f"(d[2][3]), "=f"(d[3][0]), "=f"(d[3][1]), "=f"(d[3][2]), "=f"(d[3][3]), "=f"(d[4][0]), "=f"(d[4][1]), "=f"(d[4][2]), "=f"(d[4][3]), "=f"(d[5][0]), "=f"(d[5][1]), "=f"(d[5][2]), "=f"(d[5][3]), "=f"(d[6][0]), "=f"(d[6][1]), "=f"(d[6][2]), "=f"(d[6][3]), "=f"(d[7][0]), "=f"(d[7][1]), "=f"(d[7][2]), "=f"(d[7][3]), "=f"(d[8][0]), "=f"(d[8][1]), "=f"(d[8][2]), "=f"(d[8][3]), "=f"(d[9][0]), "=f"(d[9][1]), "=f"(d[9][2]), "=f"(d[9][3]), "=f"(d[10][0]), "=f"(d[10][1]), "=f"(d[10][2]), "=f"(d[10][3]), "=f"(d[11][0]), "=f"(d[11][1]), "=f"(d[11][2]), "=f"(d[11][3]), "=f"(d[12][0]), "=f"(d[12][1]), "=f"(d[12][2]), "=f"(d[12][3]), "=f"(d[13][0]), "=f"(d[13][1]), "=f"(d[13][2]), "=f"(d[13][3]), "=f"(d[14][0]), "=f"(d[14][1]), "=f"(d[14][2]), "=f"(d[14][3]), "=f"(d[15][0]), "=f"(d[15][1]), "=f"(d[15][2]), "=f"(d[15][3])
                 : "l"(da), "l"(db), "n"(0));
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
// a warpgroup's registers a thread from here on (warp specialisation: a producer gives some
// back, the consumers take them); every warp of the warpgroup executes it
template <int N> __device__ __forceinline__ void wg_regs_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void wg_regs_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
#else
template <int N> __device__ __forceinline__ void wg_regs_dec() {}
template <int N> __device__ __forceinline__ void wg_regs_inc() {}
__device__ __forceinline__ void wg_fence() { __trap(); }
__device__ __forceinline__ void wg_commit() {}
__device__ __forceinline__ void wg_wait0() {}
__device__ __forceinline__ void wg_wait1() {}
template <typename T> __device__ __forceinline__ void wgmma_64x64x16(float (&)[8][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_64x64x16_first(float (&)[8][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_64x32x16(float (&)[4][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_64x128x16(float (&)[16][4], uint64_t, uint64_t) { __trap(); }
template <typename T> __device__ __forceinline__ void wgmma_64x128x16_first(float (&)[16][4], uint64_t, uint64_t) { __trap(); }
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
// S[64 x 64] = A . B^T and P[64 x 64] = C . E^T as wg_two, issued as one commit group without
// waiting (the caller's wg_wait0); the first k-step writes the accumulators (no zeroing moves,
// which the compiler may sink past the fence and then serialise on)
template <typename T, int D, int BSTR>
__device__ __forceinline__ void wg_two_issue(float (&s)[8][4], float (&p)[8][4], uint32_t sA, uint32_t sB, uint32_t sC, uint32_t sE) {
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t off = (kk / 4) * WG_ATOM_BYTES + (kk % 4) * 32, offb = (kk / 4) * BSTR + (kk % 4) * 32;
        if (kk == 0) {
            wgmma_64x64x16_first<T>(s, wg_desc(sA + off), wg_desc(sB + offb));
            wgmma_64x64x16_first<T>(p, wg_desc(sC + off), wg_desc(sE + offb));
        } else {
            wgmma_64x64x16<T>(s, wg_desc(sA + off), wg_desc(sB + offb));
            wgmma_64x64x16<T>(p, wg_desc(sC + off), wg_desc(sE + offb));
        }
    }
    wg_commit();
}
// S[64 x N] = A . B^T over D as wg_qkT, issued as one commit group without waiting (the
// caller's wg_wait0); the first k-step writes the accumulators. N 64, or 128: B a 128-row tile
// (its atoms 128 rows x 64 columns, 16 KiB apart), one m64n128k16 a k-step
template <typename T, int D, int N = 64> __device__ __forceinline__ void wg_qkT_issue(float (&d)[N / 8][4], uint32_t sA, uint32_t sB) {
    static_assert(N == 64 || N == 128, "m64n64k16 or m64n128k16");
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; kk++) {
        const uint32_t off = (kk / 4) * WG_ATOM_BYTES + (kk % 4) * 32, offb = (kk / 4) * (N * 128) + (kk % 4) * 32;
        if constexpr (N == 128) {
            if (kk == 0) wgmma_64x128x16_first<T>(d, wg_desc(sA + off), wg_desc(sB + offb));
            else wgmma_64x128x16<T>(d, wg_desc(sA + off), wg_desc(sB + offb));
        } else {
            if (kk == 0) wgmma_64x64x16_first<T>(d, wg_desc(sA + off), wg_desc(sB + offb));
            else wgmma_64x64x16<T>(d, wg_desc(sA + off), wg_desc(sB + offb));
        }
    }
    wg_commit();
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

// ---- tiles in shared memory ---------------------------------------------------------------
// Where 16-byte chunk cc (8 elements) of row r of a D-wide operand tile is, in bytes from the
// tile's start: padded rows [rows][D + 8] (ldmatrix-friendly), or (SWZ) 128-byte-swizzle atoms
// of ATOM_ROWS rows x 64 columns, as the warpgroup MMA and TMA lay them out
template <int D, bool SWZ, int ATOM_ROWS = 64> __device__ __forceinline__ uint32_t tile_off(int r, int cc) {
    if constexpr (SWZ) return (uint32_t)((cc / 8) * (ATOM_ROWS * 128)) + wg_swz(r, cc % 8);
    else return (uint32_t)(r * (D + 8) + cc * 8) * 2;
}

// The first ROWS rows of one or two D-wide tiles from global memory by cp.async, NTH threads
// (tid 0 .. NTH - 1): `bool row_at(int r, int64_t &off)` says whether row r exists and, where it
// does, sets off, the element offset of its D elements in src (the same rows of src2 into dst2: a
// pair of tiles where dst2 is a pointer, one tile where it is the literal nullptr); rows that do
// not exist read as zeros. This loop runs once a key chunk in every attention kernel, so what it
// costs is settled at compile time: the pair, the trip count (unrolled), and, where NTH is a
// multiple of the row's D / 8 chunks, a thread's chunk column (fixed) and rows (a stride); the
// row test is the caller's own 32-bit comparison.
// ROWS_FIRST: every row's test and offset first, then the copies, for a row_at that reads shared
// memory (a row's global index), which a copy issued before it would otherwise hold back (the
// copies' memory clobbers); off by default: the offsets' registers cost a warp-specialised
// producer spills.
template <typename T, int D, bool SWZ, int ROWS, int NTH, int ATOM_ROWS = 64, bool ROWS_FIRST = false, typename Dst2, typename RowAt>
__device__ __forceinline__ void tile_load(void *dst, const T *src, Dst2 dst2, const T *src2, RowAt row_at, int tid) {
    constexpr int CH = D / 8, N = ROWS * CH, IT = (N + NTH - 1) / NTH;
    constexpr bool PAIR = !std::is_same<Dst2, std::nullptr_t>::value, COL_FIXED = NTH % CH == 0;
    auto row_of = [&](int j) { return COL_FIXED ? tid / CH + j * (NTH / CH) : (tid + j * NTH) / CH; };
    auto copy = [&](int j, bool ok, int64_t off) {
        const int r = row_of(j), cc = COL_FIXED ? tid % CH : (tid + j * NTH) % CH;
        const uint32_t o = tile_off<D, SWZ, ATOM_ROWS>(r, cc);
        cp16(reinterpret_cast<unsigned char *>(dst) + o, ok ? src + off + cc * 8 : src, ok);
        if constexpr (PAIR) cp16(reinterpret_cast<unsigned char *>(dst2) + o, ok ? src2 + off + cc * 8 : src2, ok);
    };
    if constexpr (ROWS_FIRST) {
        int64_t off[IT];
        bool ok[IT];
#pragma unroll
        for (int j = 0; j < IT; j++) {
            off[j] = 0;
            ok[j] = (N % NTH == 0 || tid + j * NTH < N) && row_at(row_of(j), off[j]);
        }
#pragma unroll
        for (int j = 0; j < IT; j++)
            if (N % NTH == 0 || tid + j * NTH < N) copy(j, ok[j], off[j]);
    } else {
#pragma unroll
        for (int j = 0; j < IT; j++) {
            if (N % NTH != 0 && tid + j * NTH >= N) break;
            int64_t off = 0;
            const bool ok = row_at(row_of(j), off);
            copy(j, ok, off);
        }
    }
}
// rows kb .. kb + ROWS - 1 of two key-major tensors (K and V: rows ks elements apart) into
// their tiles (V: none where Vd is the literal nullptr; SWZ: atoms of ATOM_ROWS rows); rows at
// or past kend read as zeros
template <typename T, int D, bool SWZ, int ROWS, int NTH, int ATOM_ROWS = 64, typename Vdst>
__device__ __forceinline__ void kv_tile_load(void *Kd, const T *Kg, Vdst Vd, const T *Vg, int64_t ks, int kb, int kend, int tid) {
    tile_load<T, D, SWZ, ROWS, NTH, ATOM_ROWS>(Kd, Kg, Vd, Vg, [&](int r, int64_t &off) {
        off = (int64_t)(kb + r) * ks;
        return kb + r < kend;
    }, tid);
}

// ---- per-warp products on mma.sync ---------------------------------------------------------
template <int N> __device__ __forceinline__ void acc_zero(float (&acc)[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
}
// the A fragments of a warp's 16 rows row0 .. row0 + 15 of a padded [rows][DP] tile, over
// NKS k-steps of 16
template <int NKS, int DP, typename T>
__device__ __forceinline__ void frags_a(uint32_t (&f)[NKS][4], const T *S, int row0, int lane) {
#pragma unroll
    for (int kk = 0; kk < NKS; kk++) frag_a<DP>(f[kk], S, row0, kk * 16, lane);
}
// s[16 x 8 NT] = A . M^T for one warp: A as NKS k-steps of register fragments, M's rows
// n0 .. n0 + 8 NT - 1 stored [n][k] in a tile of layout L (PadTile or SwzTile); every
// accumulator sums its k-steps in ascending order
template <typename T, int NKS, int NT, typename L>
__device__ __forceinline__ void warp_abT_l(float (&s)[NT][4], const uint32_t (&af)[NKS][4], const T *M, int n0, int lane) {
    acc_zero(s);
#pragma unroll
    for (int kk = 0; kk < NKS; kk++)
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t bf[4];
            frag_b_nk_l<L>(bf, M, n0 + np * 16, kk * 16, lane);
            mma16816<T>(s[2 * np], af[kk], bf[0], bf[1]);
            mma16816<T>(s[2 * np + 1], af[kk], bf[2], bf[3]);
        }
}
template <typename T, int NKS, int NT, int DP>
__device__ __forceinline__ void warp_abT(float (&s)[NT][4], const uint32_t (&af)[NKS][4], const T *M, int n0, int lane) {
    warp_abT_l<T, NKS, NT, PadTile<DP>>(s, af, M, n0, lane);
}
// two such products over the same rows of two padded tiles, interleaved (s = A . M^T and
// p = C . E^T: S and dP of a backward pass)
template <typename T, int NKS, int NT, int DP>
__device__ __forceinline__ void warp_abT2(float (&s)[NT][4], const uint32_t (&af)[NKS][4], const T *M, float (&p)[NT][4],
                                          const uint32_t (&cf)[NKS][4], const T *E, int n0, int lane) {
    acc_zero(s);
    acc_zero(p);
#pragma unroll
    for (int kk = 0; kk < NKS; kk++)
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t bf[4];
            frag_b_nk<DP>(bf, M, n0 + np * 16, kk * 16, lane);
            mma16816<T>(s[2 * np], af[kk], bf[0], bf[1]);
            mma16816<T>(s[2 * np + 1], af[kk], bf[2], bf[3]);
            frag_b_nk<DP>(bf, E, n0 + np * 16, kk * 16, lane);
            mma16816<T>(p[2 * np], cf[kk], bf[0], bf[1]);
            mma16816<T>(p[2 * np + 1], cf[kk], bf[2], bf[3]);
        }
}
// the sums of a row's four lanes (the quad holding its columns), rows gid and gid + 8
__device__ __forceinline__ void quad_sum2(float (&v)[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        v[r] += __shfl_xor_sync(0xffffffffu, v[r], 1);
        v[r] += __shfl_xor_sync(0xffffffffu, v[r], 2);
    }
}

// rowsum(dO * O) of row R as k_drow (cuda_nsa.cu) sums it, so with its bits: partial s (0..7) is a
// chain of fused multiply-adds over elements s, s + 8, .. ascending, and the row's sum is ((p0 +
// p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7)). One thread, the eight partials from 16-byte loads.
// dout and o 16-byte aligned, D % 8 == 0.
template <typename T, int D> __device__ __forceinline__ float row_drow(const T *dout, const T *o, int64_t R) {
    float p[8];
#pragma unroll
    for (int s = 0; s < 8; s++) p[s] = 0.f;
    const uint4 *y = reinterpret_cast<const uint4 *>(dout + R * D), *x = reinterpret_cast<const uint4 *>(o + R * D);
#pragma unroll
    for (int c = 0; c < D / 8; c++) {
        const uint4 yv = y[c], xv = x[c];
        const T *ye = reinterpret_cast<const T *>(&yv), *xe = reinterpret_cast<const T *>(&xv);
#pragma unroll
        for (int s = 0; s < 8; s++) p[s] += tof(ye[s]) * tof(xe[s]);
    }
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}
// the same sum by two lanes (lane ^ 1 the other half): half 0 the partials 0-3, half 1 the
// partials 4-7, from 8-byte loads; each lane returns the row's sum ((p0 + p1) + (p2 + p3)) + ((p4 +
// p5) + (p6 + p7)) (its own half's sum plus the other's: the same bits either way round). Every
// lane of the warp calls it; ok false: no loads, and the sum is not used
template <typename T, int D> __device__ __forceinline__ float row_drow_pair(const T *dout, const T *o, int64_t R, int half, bool ok) {
    float p[4] = {0.f, 0.f, 0.f, 0.f};
    if (ok) {
        const uint2 *y = reinterpret_cast<const uint2 *>(dout + R * D + 4 * half), *x = reinterpret_cast<const uint2 *>(o + R * D + 4 * half);
#pragma unroll
        for (int c = 0; c < D / 8; c++) {
            const uint2 yv = y[2 * c], xv = x[2 * c];
            const T *ye = reinterpret_cast<const T *>(&yv), *xe = reinterpret_cast<const T *>(&xv);
#pragma unroll
            for (int s = 0; s < 4; s++) p[s] += tof(ye[s]) * tof(xe[s]);
        }
    }
    const float mine = (p[0] + p[1]) + (p[2] + p[3]);
    return mine + __shfl_xor_sync(0xffffffffu, mine, 1);
}
// a dQ kernel's Drow of its row R, the one thread that owns the row: worked out and written to
// drow_out where it is set, else read from drow
template <typename T, int D> __device__ __forceinline__ float drow_of(const AttnArgs &a, int64_t R) {
    if (!a.drow_out) return a.drow[R];
    const float dr = row_drow<T, D>((const T *)a.dout, (const T *)a.o, R);
    a.drow_out[R] = dr;
    return dr;
}

// does query t see key s (a key of the branch's K: token or compressed block)?
template <int BR> __device__ __forceinline__ bool sees(const AttnArgs &a, int t, int s) {
    if (BR == BR_WIN) return s <= t && s > t - a.w;
    if (BR == BR_CMP) return s * a.d + a.l - 1 <= t;
    return s <= t;
}
// does every query t0 .. t1 see every key s0 .. s1 (t0 <= t1, s0 <= s1)?
template <int BR> __device__ __forceinline__ bool sees_block(const AttnArgs &a, int t0, int t1, int s0, int s1) {
    if (BR == BR_WIN) return s1 <= t0 && s0 > t1 - a.w;
    if (BR == BR_CMP) return s1 * a.d + a.l - 1 <= t0;
    return s1 <= t0;
}


// 2^x by the SFU alone (ex2.approx.ftz): exp2f's value wherever it is normal (the same SFU
// instruction), 0 where it would be subnormal (below 2^-126), without exp2f's rescaling around
// it (a compare and two multiplies an element). An attention probability below 2^-126 is lost
// beside the row's largest (1 in the forward's running sums, at least 1 / the row's keys in the
// backward's P): a row's sum, output and gradient terms do not move by it.
__device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// One chunk's online-softmax step for a warp's 16 rows (rows gid and gid + 8 of the mma.sync
// fragments), after masking: s holds the chunk's scores in log2 units (-inf where masked) and
// mx this lane's maxima of them per row. The running max m and sum lsum are updated, s replaced
// by the probabilities exp2(s - m) (a row that has seen no key yet keeps m = -inf and gets
// zeros), and alpha set to the factor of each row's earlier sums, for the output accumulator
// (acc_scale_rows) whenever that is free to change (a warpgroup MMA into it may still be running).
template <int NT>
__device__ __forceinline__ void online_softmax_probs(float (&s)[NT][4], float (&m)[2], float (&lsum)[2], float (&mx)[2], float (&alpha)[2]) {
    float muse[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mnew = fmaxf(m[r], mx[r]);
        muse[r] = mnew == -INFINITY ? 0.f : mnew;
        alpha[r] = exp2_ftz(m[r] - muse[r]);
        m[r] = mnew;
        lsum[r] *= alpha[r];
    }
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            s[nt][e] = exp2_ftz(s[nt][e] - muse[e >> 1]);
            lsum[e >> 1] += s[nt][e];
        }
}
// rows gid and gid + 8 of an accumulator [NDT n-tiles][4] times alpha[0], alpha[1]
template <int NDT> __device__ __forceinline__ void acc_scale_rows(float (&acc)[NDT][4], const float (&alpha)[2]) {
#pragma unroll
    for (int i = 0; i < NDT; i++) {
        acc[i][0] *= alpha[0];
        acc[i][1] *= alpha[0];
        acc[i][2] *= alpha[1];
        acc[i][3] *= alpha[1];
    }
}
// the step whole: probabilities, then the accumulator rescaled
template <int NT, int NDT>
__device__ __forceinline__ void online_softmax_step(float (&s)[NT][4], float (&oacc)[NDT][4], float (&m)[2], float (&lsum)[2],
                                                    float (&mx)[2]) {
    float alpha[2];
    online_softmax_probs<NT>(s, m, lsum, mx, alpha);
    acc_scale_rows<NDT>(oacc, alpha);
}
// the accumulator's registers pinned here: a use after this point is not moved above it (after
// a wgmma wait, so that no read of an accumulator a warpgroup MMA was writing comes earlier)
template <int NDT> __device__ __forceinline__ void acc_pin(float (&acc)[NDT][4]) {
#pragma unroll
    for (int i = 0; i < NDT; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) asm volatile("" : "+f"(acc[i][e])::"memory");
}

// ---- division by a shape's length ----------------------------------------------------------
// x / v and x % v (x >= 0) by a shift and a mask where v is a power of two (l' = 64, l' / keys a
// chunk = 1, 2 or 4 at the usual sizes), else by the division: an integer division is some twenty
// instructions, and the chunk loops take several a chunk (a chunk of a selection block list:
// block c / per, its chunk c % per; a key's selection block: k / l')
struct PowDiv {
    int v, sh;   // sh: log2(v) where v is a power of two, else -1
    __host__ __device__ __forceinline__ static PowDiv of(int v) {
        PowDiv p{v, -1};
        if (v > 0 && (v & (v - 1)) == 0)
            for (p.sh = 0; (1 << p.sh) < v; p.sh++) {}
        return p;
    }
    __device__ __forceinline__ int div(int x) const { return sh >= 0 ? x >> sh : x / v; }
    __device__ __forceinline__ int mod(int x) const { return sh >= 0 ? x & (v - 1) : x % v; }
};

// ---- mbarrier and TMA (sm_90) ------------------------------------------------------------
// mbarrier (sm_90): a phase completes when its `count` arrivals have come (by default one, an
// expect_tx) and the bytes announced with them have landed
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count = 1) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// one arrival of this thread (release: its earlier shared-memory writes are seen by a waiter)
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// this thread's arrival with `bytes` more to land before the phase completes (a copy's issuer)
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
#endif
}
// `bytes` more to land before the phase completes, without an arrival: the issuer arrives later,
// after its own shared-memory writes of the stage (mbar_arrive)
__device__ __forceinline__ void mbar_add_tx(uint32_t bar, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
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

// A 4-D tensor map (host) over a dense bf16/fp16 tensor at base with dims[0] innermost (its
// elements 2 bytes, dims[0] x 2 bytes a row): box `box`, 128-byte swizzle, reads past dims as
// zeros. False where it cannot be made (the driver's encoder not found: said once on stderr with
// `fallback`, what the caller does instead; base not 16-byte aligned; the encoder refusing):
// the caller then runs its cp.async path.
template <typename T>
static bool tma_map_4d(CUtensorMap *m, const void *base, const uint64_t (&dims)[4], const uint32_t (&box)[4], const char *fallback) {
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
            fprintf(stderr, "nsa cuda: cuTensorMapEncodeTiled not available: %s\n", fallback);
        }
    }
    if (state < 0 || ((uintptr_t)base & 15)) return false;
    const cuuint64_t gd[4] = {dims[0], dims[1], dims[2], dims[3]};
    const cuuint64_t gs[3] = {dims[0] * 2, dims[0] * dims[1] * 2, dims[0] * dims[1] * dims[2] * 2};
    const cuuint32_t bx[4] = {box[0], box[1], box[2], box[3]}, elem[4] = {1, 1, 1, 1};
    const CUtensorMapDataType dt = std::is_same<T, bf16>::value ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    return encode(m, dt, 4, const_cast<void *>(base), gd, gs, bx, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}
// tma_map_4d's map over a key-indexed tensor [B][NK][G][D] at base (k or v): a box of 64 elements
// x 1 group x `keys` keys (the TMA feeds' K/V chunks), keys past NK read as zeros; false as
// tma_map_4d
template <typename T> static bool kv_tma_map(const AttnArgs &a, const void *base, int keys, CUtensorMap *m, const char *fallback) {
    const uint64_t dims[4] = {(uint64_t)a.D, (uint64_t)a.G, (uint64_t)a.NK, (uint64_t)a.B};
    const uint32_t box[4] = {64, 1, (uint32_t)keys, 1};
    return tma_map_4d<T>(m, base, dims, box, fallback);
}
// the maps over k and v
template <typename T>
static bool kv_tma_maps(const AttnArgs &a, int keys, CUtensorMap *mk, CUtensorMap *mv, const char *fallback) {
    return kv_tma_map<T>(a, a.k, keys, mk, fallback) && kv_tma_map<T>(a, a.v, keys, mv, fallback);
}

// ---- warp-specialised ring (sm_90) -------------------------------------------------------------
// A producer warpgroup streams items (tiles of rows or keys) into a ring of NST stages that the
// consumer warpgroups read with warpgroup MMA. Per stage a full barrier (count 128: an arrival of
// each producer thread once its own copies have landed and been made visible to the async
// proxy) and an empty one (count: the consumer warps that read the stage; one arrival each).
// The producer, every thread of its warpgroup: items 0 .. n - 1 by issue(i) (this thread's
// cp.async copies of item i into stage i % NST); the first NST at once, then, item by item,
// its arrival as soon as it has landed and only then the refill of the stage before it (item
// i - 1 + NST, once its consumers released i - 1), so an item's arrival never waits on the
// consumers or on a later item's issue. One cp.async group a step (empty past the last item)
// keeps the wait counts constant.
// the ring's barriers, by threads 0 .. NST - 1 (a __syncthreads before first use): full for the
// producer warpgroup's 128 threads, empty for the consumer warps that take part (4 a consumer
// warpgroup; a consumer warpgroup with nothing to do leaves before the ring, uncounted)
template <int NST> __device__ __forceinline__ void ws_ring_init(uint32_t full, uint32_t empty, int tid, int consumer_warps) {
    if (tid < NST) {
        mbar_init(full + 8 * tid, 128);
        mbar_init(empty + 8 * tid, consumer_warps);
    }
}
template <int NST, typename Issue> __device__ __forceinline__ void ws_ring_produce(int n, uint32_t full, uint32_t empty, Issue issue) {
    for (int j = 0; j < NST; j++) {
        if (j < n) issue(j);
        cp_commit();
    }
    for (int i = 0; i < n; i++) {
        if (i == 0) cp_wait<NST - 1>();
        else cp_wait<NST - 2>();
        wg_fence_proxy();
        mbar_arrive(full + 8 * (i % NST));
        if (i >= 1) {
            if (i - 1 + NST < n) {
                mbar_wait(empty + 8 * ((i - 1) % NST), (uint32_t)((i - 1) / NST) & 1);
                issue(i - 1 + NST);
            }
            cp_commit();
        }
    }
}
// The producer of a ring whose items come in by TMA where they can: for item i where bulk(i),
// tma(i, bar) (thread 0 adds the item's bytes to its stage's full barrier, mbar_add_tx, and
// issues the copies; any thread may write the item's metadata), else issue(i) (this thread's
// cp.async copies, then landed and made visible to the async proxy); then every producer
// thread's arrival, which releases its own shared-memory writes of the item. A stage is
// refilled as soon as its consumers release it: the producer never waits for a landing.
template <int NST, typename Bulk, typename Tma, typename Issue>
__device__ __forceinline__ void ws_ring_produce_tma(int n, uint32_t full, uint32_t empty, Bulk bulk, Tma tma, Issue issue) {
    auto produce = [&](int i) {
        const uint32_t bar = full + 8 * (i % NST);
        if (bulk(i)) {
            tma(i, bar);
        } else {
            issue(i);
            cp_commit();
            cp_wait<0>();
            wg_fence_proxy();
        }
        mbar_arrive(bar);
    };
    for (int i = 0; i < NST && i < n; i++) produce(i);
    for (int i = 0; i + NST < n; i++) {
        mbar_wait(empty + 8 * (i % NST), (uint32_t)(i / NST) & 1);
        produce(i + NST);
    }
}
// consumer warpgroup cw's own barrier (named barrier 1 + cw, its 128 threads)
__device__ __forceinline__ void ws_consumer_sync(int cw) {
    if (cw == 0) asm volatile("bar.sync 1, 128;\n" ::: "memory");
    else asm volatile("bar.sync 2, 128;\n" ::: "memory");
}
// a consumer: wait for item i's stage to be full; release it (a warp's arrival once its reads
// of the stage, warpgroup MMA included, are done)
template <int NST> __device__ __forceinline__ void ws_ring_wait(uint32_t full, int i) { mbar_wait(full + 8 * (i % NST), (uint32_t)(i / NST) & 1); }
template <int NST> __device__ __forceinline__ void ws_ring_release(uint32_t empty, int i, int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + 8 * (i % NST));
}
// Turns of the two consumer warpgroups at issuing their warpgroup MMAs (ping-pong, as
// FlashAttention-3 schedules its warpgroups): a consumer issues an item's products only in its
// turn and hands the turn over as soon as they are issued, so that one consumer's elementwise work
// runs under the other's products instead of both issuing at once. Named barriers 3 (consumer 0's
// turn) and 4 (consumer 1's), 256 threads each: the consumer taking its turn syncs on its own, the
// other's hand-over arrives there. Each consumer takes exactly n turns (ws_turns: n fixed by the
// caller, the same for both); consumer 1 hands over once before consumer 0's first turn and not
// after its own last, so no arrival is left pending at the end. Off: no barrier at all. Both
// consumers must take part (a CTA whose second consumer has no rows runs with it off).
struct WsTurns {
    bool on;
    int cw, taken, n;
    __device__ __forceinline__ void take() const {
        if (!on) return;
        if (cw == 0) asm volatile("bar.sync 3, 256;\n" ::: "memory");
        else asm volatile("bar.sync 4, 256;\n" ::: "memory");
    }
    __device__ __forceinline__ void hand_over() {
        if (!on) return;
        taken++;
        if (cw == 0) asm volatile("bar.arrive 4, 256;\n" ::: "memory");
        else if (taken < n) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    }
    __device__ __forceinline__ void idle() {   // a turn with nothing to issue
        take();
        hand_over();
    }
};
__device__ __forceinline__ WsTurns ws_turns(bool on, int cw, int n) {
    WsTurns t{on, cw, 0, n};
    if (on && cw == 1) asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    return t;
}
// A consumer's run of items [c0, c1) in which an item's second product overlaps the next item's
// elementwise work (sm_90a warpgroup MMA): first(c) issues item c's first products as one commit
// group (its fence included), mid(c) works on their results in the item's own registers, hold(c)
// makes them the operand of its second product (and anything else that must wait for the
// previous second product: an output rescale), second(c) issues that product for the held item
// (no commit), pin() pins its accumulator after a wait. Item c's second product is issued right
// after item c + 1's first products and waited for after mid(c + 1); then the item is released.
// The same operations in the same order as one item after another. No warpgroup MMA under a
// branch here: ptxas would serialise every one of the kernel's. Every issue is a turn (WsTurns):
// c1 - c0 + 1 of them.
template <int NST, typename First, typename Mid, typename Hold, typename Second, typename Pin>
__device__ __forceinline__ void ws_ring_run_overlap(int c0, int c1, uint32_t full, uint32_t empty, int lane, WsTurns &turns, First first,
                                                    Mid mid, Hold hold, Second second, Pin pin) {
    ws_ring_wait<NST>(full, c0);
    turns.take();
    first(c0);
    turns.hand_over();
    wg_wait0();
    mid(c0);
    hold(c0);
    int pend = c0;
    for (int c = c0 + 1; c < c1; c++) {
        ws_ring_wait<NST>(full, c);
        turns.take();
        first(c);   // its fence covers what hold wrote
        second(pend);
        wg_commit();
        turns.hand_over();
        wg_wait1();   // item c's first products; the held item's second still running
        mid(c);
        wg_wait0();
        pin();
        ws_ring_release<NST>(empty, pend, lane);
        hold(c);
        pend = c;
    }
    turns.take();
    wg_fence();
    second(pend);
    wg_commit();
    turns.hand_over();
    wg_wait0();
    pin();
    ws_ring_release<NST>(empty, pend, lane);
}
// a consumer passing item i over: waited for all the same (its release must not count toward the
// stage's earlier use), then released
template <int NST> __device__ __forceinline__ void ws_ring_pass(uint32_t full, uint32_t empty, int i, int lane) {
    ws_ring_wait<NST>(full, i);
    ws_ring_release<NST>(empty, i, lane);
}

// ---- launch ---------------------------------------------------------------------------------
// Every launch: raise the kernel's dynamic shared-memory limit to what it asks for (without,
// dynamic plus the kernel's static shared memory may not pass 48 KiB: a request just under
// 48 KiB fails to launch next to a kernel's own arrays), once a kernel and size, then launch
// on the backend's stream.
template <typename K> static void mma_smem_attr(K kernel, size_t bytes) {
    struct Raised {
        const void *fn;
        size_t bytes;
    };
    static Raised raised[128];   // this translation unit's kernels of this signature launched so far, the limit each got
    static int nraised;
    if (bytes == 0) return;
    const void *fn = reinterpret_cast<const void *>(kernel);
    int i = 0;
    while (i < nraised && raised[i].fn != fn) i++;
    if (i < nraised && raised[i].bytes >= bytes) return;
    cudaCheck(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    if (i < nraised) raised[i].bytes = bytes;
    else if (nraised < 128) raised[nraised++] = Raised{fn, bytes};
}
template <typename K, typename... A> static void mma_launch(K kernel, dim3 grid, int block, size_t sm, A... args) {
    mma_smem_attr(kernel, sm);
    kernel<<<grid, block, sm, NSA_STREAM>>>(args...);
}
#endif
