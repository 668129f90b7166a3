// kernels/cuda/cuda_kv.cu — the fused K/V projection's split and gather (ops.h
// kv_split_rope_fwd / kv_gather_rope_bwd).
//
// trainer/model.c runs the six K/V projections of the three NSA branches as one GEMM
// with N = 6*G*D (their weights are consecutive in the parameter buffer): the GEMM
// writes kv[nr, 6, G*D], and these kernels move it to and from the six [B,T,G,D]
// buffers k_cmp, v_cmp, k_sel, v_sel, k_win, v_win, with RoPE on the keys (parts 0, 2,
// 4) at position t = r mod T: k_rope's arithmetic (rope_rotate in fp32 on the loaded
// values, cos/sin from the table's fp32 shadow, one rounding when stored), so a key gets
// the bits rope_fwd / rope_bwd would give it. Values are copied.
//
// A thread owns one pair (e, e + D/2) of one head of one part — its column of the
// [6, G, D/2] pairs, fixed for the whole call, so its part, head, cos/sin index and the
// key/value choice are computed once — and walks the rows with the grid's y stride.
// Consecutive threads take consecutive e: both sides are read and written in contiguous
// runs. No reductions: deterministic, and a row's result does not depend on the other
// rows of the call.
//
// Layout: kernels first, launchers (extern "C") at the end of the file.
#include "kernels/cuda/cuda_common.cuh"

#define KV_THREADS 128

struct KvBufs {
    void *p[6];   // k_cmp, v_cmp, k_sel, v_sel, k_win, v_win: [B*T, G*D] each
};

// BWD = 0: buf[j][r] = RoPE(kv[i, j]) (keys) or kv[i, j] (values), r = r0 + i.
// BWD = 1: kv[i, j] = RoPE^-1(buf[j][r]) (key gradients) or buf[j][r] (value gradients).
template <typename T, int BWD>
__global__ void k_kv_move(T *kv, KvBufs bufs, const float *cs, int64_t r0, int64_t nr, int T_, int G, int D) {
    const int half = D / 2, GD = G * D;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;   // (j, h, e) of the pair
    if (col >= 6 * G * half) return;
    const int e = col % half, h = (col / half) % G, j = col / (G * half);
    const bool key = (j & 1) == 0;
    T *const buf = (T *)bufs.p[j] + h * D;
    T *const part = kv + (int64_t)j * GD + h * D;
    for (int64_t i = blockIdx.y; i < nr; i += gridDim.y) {
        const int64_t r = r0 + i;
        T *b = buf + r * GD, *q = part + i * 6 * GD;
        T *dst = BWD ? q : b;
        const T *src = BWD ? b : q;
        if (!key) {   // a value (or its gradient): copied
            dst[e] = src[e];
            dst[e + half] = src[e + half];
            continue;
        }
        const int t = (int)(r % T_);
        const float c = cs[((int64_t)t * half + e) * 2], s = BWD ? -cs[((int64_t)t * half + e) * 2 + 1]
                                                                  : cs[((int64_t)t * half + e) * 2 + 1];
        float y1, y2;
        rope_rotate(tof(src[e]), tof(src[e + half]), c, s, y1, y2);
        dst[e] = fromf<T>(y1);
        dst[e + half] = fromf<T>(y2);
    }
}

// The 16-byte version (D/2 % 8 == 0, kv, the six buffers and cs 16-byte aligned): a thread
// owns 8 consecutive pairs (e .. e+7) of one head of one part of one row, k_kv_move's
// arithmetic pair for pair, so the same bits. Consecutive threads take consecutive 8-pair
// columns of a row, then the next row.
template <typename T, int BWD>
__global__ void k_kv_move_v8(T *kv, KvBufs bufs, const float *cs, int64_t r0, int64_t nr, int T_, int G, int D) {
    const int half = D / 2, GD = G * D, nv = half / 8, cols = 6 * G * nv;
    const int64_t total = nr * cols;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int col = (int)(u % cols);
        const int64_t i = u / cols, r = r0 + i;
        const int e = (col % nv) * 8, h = (col / nv) % G, j = col / (G * nv);
        T *b = (T *)bufs.p[j] + r * GD + h * D, *q = kv + i * 6 * GD + (int64_t)j * GD + h * D;
        T *dst = BWD ? q : b;
        const T *src = BWD ? b : q;
        if (j & 1) {   // a value (or its gradient): copied
            *(Pack8<T> *)(dst + e) = *(const Pack8<T> *)(src + e);
            *(Pack8<T> *)(dst + e + half) = *(const Pack8<T> *)(src + e + half);
            continue;
        }
        const int t = (int)(r % T_);
        const float4 *cp = (const float4 *)(cs + ((int64_t)t * half + e) * 2);
        float c[8], s[8], x1[8], x2[8], y1[8], y2[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 w = cp[k];
            c[2 * k] = w.x, s[2 * k] = BWD ? -w.y : w.y, c[2 * k + 1] = w.z, s[2 * k + 1] = BWD ? -w.w : w.w;
        }
        ld8(src + e, x1);
        ld8(src + e + half, x2);
#pragma unroll
        for (int k = 0; k < 8; k++) rope_rotate(x1[k], x2[k], c[k], s[k], y1[k], y2[k]);
        st8(dst + e, y1);
        st8(dst + e + half, y2);
    }
}

// ============================================================================================
// launchers
// ============================================================================================
static void kv_move(int dt, int bwd, void *kv, const void *const *bufs, const void *rope_cs, int64_t r0, int64_t nr,
                    int T, int G, int D) {
    const int64_t total = nr * 6 * G * (D / 2);
    if (total <= 0) return;
    KvBufs kb;
    for (int j = 0; j < 6; j++) kb.p[j] = (void *)bufs[j];
    const float *c32 = nsa_cuda_stat_read(dt, rope_cs, (int64_t)T * D, SCR_STAT1);
    bool v8 = D % 16 == 0 && nsa_aligned16(kv) && nsa_aligned16(c32);
    for (int j = 0; j < 6; j++) v8 = v8 && nsa_aligned16(bufs[j]);
    if (v8) {
        DISPATCH_DT(dt, X, {
            if (bwd)
                k_kv_move_v8<X, 1><<<nsa_blocks(total / 8, KV_THREADS), KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0,
                                                                                                  nr, T, G, D);
            else
                k_kv_move_v8<X, 0><<<nsa_blocks(total / 8, KV_THREADS), KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0,
                                                                                                  nr, T, G, D);
        });
        CUDA_LAUNCHED();
        return;
    }
    const int cols = 6 * G * (D / 2);
    const dim3 grid((unsigned)((cols + KV_THREADS - 1) / KV_THREADS), (unsigned)(nr < 8192 ? nr : 8192));
    DISPATCH_DT(dt, X, {
        if (bwd)
            k_kv_move<X, 1><<<grid, KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0, nr, T, G, D);
        else
            k_kv_move<X, 0><<<grid, KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0, nr, T, G, D);
    });
    CUDA_LAUNCHED();
}

extern "C" void nsa_cuda_kv_split_rope_fwd(int dt, void *const *dst, const void *kv, const void *rope_cs, int64_t r0,
                                           int64_t nr, int T, int G, int D) {
    kv_move(dt, 0, (void *)kv, (const void *const *)dst, rope_cs, r0, nr, T, G, D);   // kv only read
}

extern "C" void nsa_cuda_kv_gather_rope_bwd(int dt, void *dkv, const void *const *src, const void *rope_cs, int64_t r0,
                                            int64_t nr, int T, int G, int D) {
    kv_move(dt, 1, dkv, src, rope_cs, r0, nr, T, G, D);   // src only read
}
