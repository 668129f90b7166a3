// kernels/cuda/cuda_kv.cu — the fused K/V projection's split and gather (ops.h
// kv_split_rope_fwd / kv_gather_rope_bwd).
//
// trainer/model.c runs the six K/V projections of the three NSA branches as one GEMM
// with N = 6*G*D (their weights are consecutive in the parameter buffer): the GEMM
// writes kv[nr, 6, G*D], and these kernels move it to and from the six [B,T,G,D]
// buffers k_cmp, v_cmp, k_sel, v_sel, k_win, v_win, with RoPE on the keys (parts 0, 2,
// 4) at position t = r mod T: k_rope's arithmetic (fp32 on the loaded values, cos/sin
// from the table's fp32 shadow, one rounding when stored), so a key gets the bits
// rope_fwd / rope_bwd would give it. Values are copied.
//
// One thread per pair (e, e + D/2) of one head of one part of one row, grid-stride;
// consecutive threads take consecutive e, so both sides are read and written in
// contiguous runs. No reductions: deterministic, and a row's result does not depend
// on the other rows of the call.
//
// Layout: kernels first, launchers (extern "C") at the end of the file.
#include "kernels/cuda/cuda_common.cuh"

#define KV_THREADS 256

struct KvBufs {
    void *p[6];   // k_cmp, v_cmp, k_sel, v_sel, k_win, v_win: [B*T, G*D] each
};

// BWD = 0: buf[j][r] = RoPE(kv[i, j]) (keys) or kv[i, j] (values), r = r0 + i.
// BWD = 1: kv[i, j] = RoPE^-1(buf[j][r]) (key gradients) or buf[j][r] (value gradients).
template <typename T, int BWD>
__global__ void k_kv_move(T *kv, KvBufs bufs, const float *cs, int64_t r0, int64_t nr, int T_, int G, int D) {
    const int half = D / 2, GD = G * D;
    const int64_t total = nr * 6 * G * half;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int e = (int)(u % half);
        int64_t rest = u / half;
        const int h = (int)(rest % G);
        rest /= G;
        const int j = (int)(rest % 6);
        const int64_t i = rest / 6, r = r0 + i;
        T *part = kv + (i * 6 + j) * GD + h * D;
        T *b = (T *)bufs.p[j] + r * GD + h * D;
        T *dst = BWD ? part : b;
        const T *src = BWD ? b : part;
        if (j & 1) {   // a value (or its gradient): copied
            dst[e] = src[e];
            dst[e + half] = src[e + half];
            continue;
        }
        const int t = (int)(r % T_);
        float c = cs[((int64_t)t * half + e) * 2], s = cs[((int64_t)t * half + e) * 2 + 1];
        if (BWD) s = -s;
        float x1 = tof(src[e]), x2 = tof(src[e + half]);
        dst[e] = fromf<T>(x1 * c - x2 * s);
        dst[e + half] = fromf<T>(x2 * c + x1 * s);
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
    const unsigned nb = nsa_blocks(total, KV_THREADS);
    DISPATCH_DT(dt, X, {
        if (bwd)
            k_kv_move<X, 1><<<nb, KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0, nr, T, G, D);
        else
            k_kv_move<X, 0><<<nb, KV_THREADS, 0, NSA_STREAM>>>((X *)kv, kb, c32, r0, nr, T, G, D);
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
