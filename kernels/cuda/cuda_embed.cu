// kernels/cuda/cuda_embed.cu — token embedding forward and its deterministic backward.
//
// Backward: dwte[tokens[n], :] += dout[n, :]. A token repeated in the batch must
// receive its rows in a fixed order, so instead of atomics the rows are grouped by
// token with a stable radix sort of (token, n) pairs (CUB; stable => n ascending
// inside a token), and one thread block per distinct token sums that token's rows
// in ascending n and adds the sum to dwte once (the CPU reference's order, too).
#include <cub/device/device_radix_sort.cuh>
#include "kernels/cuda/cuda_common.cuh"

template <typename T> __global__ void k_embed_fwd(T *out, const int32_t *tok, const float *wte, int N, int C) {
    int64_t total = (int64_t)N * C;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t n = u / C;
        int c = (int)(u % C);
        out[u] = fromf<T>(wte[(int64_t)tok[n] * C + c]);
    }
}

__global__ void k_iota(int32_t *v, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) v[i] = i;
}

// one block per sorted position; only the first position of each token's run works
template <typename T>
__global__ void k_embed_bwd_runs(float *dwte, const T *dout, const int32_t *skey, const int32_t *sval, int N, int C) {
    const int p = blockIdx.x;
    const int key = skey[p];
    if (p > 0 && skey[p - 1] == key) return;
    int e = p + 1;
    while (e < N && skey[e] == key) e++;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = 0;
        for (int q = p; q < e; q++) acc += tof(dout[(int64_t)sval[q] * C + c]);
        dwte[(int64_t)key * C + c] += acc;
    }
}

extern "C" void nsa_cuda_embedding_fwd(int dt, void *out, const int32_t *tokens, const void *wte, int N, int C) {
    int64_t total = (int64_t)N * C;
    if (total <= 0) return;
    DISPATCH_DT(dt, T, k_embed_fwd<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>((T *)out, tokens, (const float *)wte,
                                                                                    N, C));
    CUDA_LAUNCHED();
}

extern "C" void nsa_cuda_embedding_bwd(int dt, void *dwte, const void *dout, const int32_t *tokens, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int32_t *vin = (int32_t *)nsa_cuda_scratch(SCR_SORT0, (size_t)N * 4);
    int32_t *kout = (int32_t *)nsa_cuda_scratch(SCR_SORT1, (size_t)N * 4);
    int32_t *vout = (int32_t *)nsa_cuda_scratch(SCR_SORT2, (size_t)N * 4);
    k_iota<<<(N + 255) / 256, 256, 0, NSA_STREAM>>>(vin, N);
    CUDA_LAUNCHED();
    size_t tmp_bytes = 0;
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, tmp_bytes, tokens, kout, vin, vout, N, 0, 32, NSA_STREAM));
    void *tmp = nsa_cuda_scratch(SCR_SORTTMP, tmp_bytes);
    cudaCheck(cub::DeviceRadixSort::SortPairs(tmp, tmp_bytes, tokens, kout, vin, vout, N, 0, 32, NSA_STREAM));
    CUDA_LAUNCHED();
    DISPATCH_DT(dt, T, k_embed_bwd_runs<T><<<N, 128, 0, NSA_STREAM>>>((float *)dwte, (const T *)dout, kout, vout, N, C));
    CUDA_LAUNCHED();
}
