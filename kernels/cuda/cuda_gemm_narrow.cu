// kernels/cuda/cuda_gemm_narrow.cu — matmul_fwd / matmul_bwd (ops.h) for narrow outputs,
// N <= NSA_CUDA_NARROW_N: the gate MLP's second layer (N = 3 G: 6 in m7c_125m).
//
// cuBLASLt took 26 us a call for M 2048, N 6, K 192 at batch 1 (a row of 6 bf16 outputs is
// 12 bytes, not a multiple of 16: it falls back to its slow kernels); these take the shape
// as it is. Arithmetic: products of the activation-type values (the weight through the
// backend's low-precision copy, as the cuBLASLt path), fp32 sums, one rounding when stored.
// Determinism: every sum has one owner and a fixed order (no atomics):
//   forward   a warp per row; lane j adds its share of k (8-element vectors j, j + 32, ...
//             where the rows and the weight copy are 16-byte aligned and K % 8 == 0, else
//             k = j, j + 32, ...) into N sums, folded by the xor tree; the bias added in
//             fp32 before the rounding;
//   dinp      a thread per element, n = 0 .. N-1 in order (the old value added last when
//             accumulating);
//   dw        a thread per (k, chunk of NARROW_ROWS rows; more beyond 1M rows) sums its
//             rows in order into fp32 partials [chunk][n][k]; their column sum over the
//             chunks (nsa_cuda_colsum_acc: fp64, a fixed tree) is added to dw;
//   dbias     the column sum of the cuBLASLt path (nsa_cuda_colsum_acc).
//
// Call 4 (H100, M 2048, N 6, K 192) measured the first version slower than cuBLASLt
// (forward 12 us, backward 52 us: 16 row chunks of 128 for dW); this one has 16-row chunks.
//
// Layout: kernels first, launchers (extern "C") at the end of the file.
#include "kernels/cuda/cuda_common.cuh"

#define NARROW_ROWS 16   // rows of a dw chunk (a function of M only)
#define NARROW_THREADS 256

template <typename T>
__global__ void __launch_bounds__(NARROW_THREADS)
    k_narrow_fwd(T *out, int64_t ldo, const T *inp, int64_t ldi, const T *w, const T *bias, int M, int N, int K) {
    const int64_t m = blockIdx.x * (int64_t)(NARROW_THREADS / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (m >= M) return;
    const T *x = inp + m * ldi;
    float acc[NSA_CUDA_NARROW_N];
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++) acc[n] = 0.0f;
    for (int k = lane; k < K; k += 32) {
        const float xv = tof(x[k]);
#pragma unroll
        for (int n = 0; n < NSA_CUDA_NARROW_N; n++)
            if (n < N) acc[n] += xv * tof(w[(int64_t)n * K + k]);
    }
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++) {
        if (n >= N) break;
        float s = warp_sum(acc[n]);
        if (bias) s += tof(bias[n]);
        if (lane == 0) out[m * ldo + n] = fromf<T>(s);
    }
}

// the forward with 16-byte loads: rows of inp and w 16-byte aligned, K % 8 == 0
template <typename T>
__global__ void __launch_bounds__(NARROW_THREADS)
    k_narrow_fwd_v8(T *out, int64_t ldo, const T *inp, int64_t ldi, const T *w, const T *bias, int M, int N, int K) {
    const int64_t m = blockIdx.x * (int64_t)(NARROW_THREADS / 32) + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (m >= M) return;
    const T *x = inp + m * ldi;
    float acc[NSA_CUDA_NARROW_N];
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++) acc[n] = 0.0f;
    for (int v = lane; v < K / 8; v += 32) {
        float xv[8];
        ld8(x + 8 * v, xv);
#pragma unroll
        for (int n = 0; n < NSA_CUDA_NARROW_N; n++) {
            if (n >= N) break;
            float wv[8];
            ld8(w + (int64_t)n * K + 8 * v, wv);
#pragma unroll
            for (int j = 0; j < 8; j++) acc[n] += xv[j] * wv[j];
        }
    }
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++) {
        if (n >= N) break;
        float s = warp_sum(acc[n]);
        if (bias) s += tof(bias[n]);
        if (lane == 0) out[m * ldo + n] = fromf<T>(s);
    }
}

template <typename T>
__global__ void k_narrow_dinp(T *dinp, const T *dout, const T *w, int64_t M, int N, int K, int accumulate) {
    const int64_t total = M * K;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = u / K;
        const int k = (int)(u % K);
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += tof(dout[m * N + n]) * tof(w[(int64_t)n * K + k]);
        if (accumulate) s += tof(dinp[u]);
        dinp[u] = fromf<T>(s);
    }
}

// grid (ceil(K / NARROW_THREADS), chunks): part[chunk][n][k] for the chunk's rows
template <typename T>
__global__ void __launch_bounds__(NARROW_THREADS)
    k_narrow_dw_part(float *part, const T *dout, const T *inp, int64_t M, int N, int K, int rows) {
    const int k = blockIdx.x * NARROW_THREADS + threadIdx.x;
    if (k >= K) return;
    const int64_t r0 = (int64_t)blockIdx.y * rows, r1 = r0 + rows < M ? r0 + rows : M;
    float acc[NSA_CUDA_NARROW_N];
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++) acc[n] = 0.0f;
    for (int64_t m = r0; m < r1; m++) {
        const float xv = tof(inp[m * K + k]);
#pragma unroll
        for (int n = 0; n < NSA_CUDA_NARROW_N; n++)
            if (n < N) acc[n] += tof(dout[m * N + n]) * xv;
    }
    float *p = part + (int64_t)blockIdx.y * N * K;
#pragma unroll
    for (int n = 0; n < NSA_CUDA_NARROW_N; n++)
        if (n < N) p[(int64_t)n * K + k] = acc[n];
}
// ============================================================================================
// launchers
// ============================================================================================
extern "C" void nsa_cuda_matmul_narrow_fwd(int dt, void *out, int64_t ldo, const void *inp, int64_t ldi,
                                           const void *w, const void *bias, int M, int N, int K) {
    if (M <= 0 || N <= 0) return;
    const void *wl = nsa_cuda_weight(dt, w, (int64_t)N * K, SCR_WCOPY);
    const void *bl = bias ? nsa_cuda_weight(dt, bias, N, SCR_BCOPY) : NULL;
    const unsigned blocks = (unsigned)((M + NARROW_THREADS / 32 - 1) / (NARROW_THREADS / 32));
    const int v8 = K % 8 == 0 && ldi % 8 == 0 && nsa_aligned16(inp) && nsa_aligned16(wl);
    if (v8)
        DISPATCH_DT(dt, T, k_narrow_fwd_v8<T><<<blocks, NARROW_THREADS, 0, NSA_STREAM>>>(
                               (T *)out, ldo, (const T *)inp, ldi, (const T *)wl, (const T *)bl, M, N, K));
    else
        DISPATCH_DT(dt, T, k_narrow_fwd<T><<<blocks, NARROW_THREADS, 0, NSA_STREAM>>>(
                               (T *)out, ldo, (const T *)inp, ldi, (const T *)wl, (const T *)bl, M, N, K));
    CUDA_LAUNCHED();
}

extern "C" void nsa_cuda_matmul_narrow_bwd(int dt, void *dinp, void *dw, void *dbias, const void *dout,
                                           const void *inp, const void *w, int M, int N, int K,
                                           int dinp_accumulate) {
    if (M <= 0 || N <= 0) return;
    if (dinp && K > 0) {
        const void *wl = nsa_cuda_weight(dt, w, (int64_t)N * K, SCR_WCOPY);
        DISPATCH_DT(dt, T, k_narrow_dinp<T><<<nsa_blocks((int64_t)M * K, NARROW_THREADS), NARROW_THREADS, 0, NSA_STREAM>>>(
                               (T *)dinp, (const T *)dout, (const T *)wl, M, N, K, dinp_accumulate));
        CUDA_LAUNCHED();
    }
    if (dw && K > 0) {
        int rows = NARROW_ROWS;   // doubled while the chunks exceed the grid's y limit
        while ((M + rows - 1) / rows > 65535) rows *= 2;
        const int nch = (M + rows - 1) / rows, NK = N * K;
        float *part = (float *)nsa_cuda_scratch(SCR_DW, (size_t)nch * NK * sizeof(float));
        const dim3 grid((unsigned)((K + NARROW_THREADS - 1) / NARROW_THREADS), (unsigned)nch);
        DISPATCH_DT(dt, T, k_narrow_dw_part<T><<<grid, NARROW_THREADS, 0, NSA_STREAM>>>(part, (const T *)dout,
                                                                                      (const T *)inp, M, N, K, rows));
        CUDA_LAUNCHED();
        nsa_cuda_colsum_acc(NSA_DT_F32, (float *)dw, part, nch, NK);
    }
    if (dbias) nsa_cuda_colsum_acc(dt, (float *)dbias, dout, M, N);
}
