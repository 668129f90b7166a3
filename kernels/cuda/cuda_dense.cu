// kernels/cuda/cuda_dense.cu — dense ops of the CUDA backend other than the matmul
// (cuda_gemm.cu) and the embedding backward (cuda_embed.cu): conversions, column
// sums, RMSNorm, RoPE, SwiGLU/SiLU, adds, the fused softmax cross-entropy, and the
// parameter-buffer reductions and AdamW.
//
// Arithmetic is fp32 on values loaded from the activation type (fp64 where the CPU
// reference uses fp64: column sums, sum of squares, AdamW); results are rounded once
// when stored. Determinism: no atomics on floating-point data. Every reduction has
// a partition and an order that depend on the sizes only (fixed row chunks, fixed
// warp/block trees), never on scheduling.
//
// Layout: kernels first, launchers (extern "C") at the end of the file.
#include "kernels/cuda/cuda_common.cuh"
#include <vector>

#define EW_THREADS 256

// ---- conversions ---------------------------------------------------------------------------
template <typename T> __global__ void k_f32_to_act(T *dst, const float *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = fromf<T>(src[i]);
}
template <typename T> __global__ void k_act_to_f32(float *dst, const T *src, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = tof(src[i]);
}

// ---- column sums (dbias, dpe, RMSNorm dw) ------------------------------------------------------
// A block of 256 threads owns 32 columns (tx) x 8 row lanes (ty). Stage 1: rows in
// chunks of COL_RC; lane ty sums rows ty, ty+8, ... of its column in fp64 (two
// interleaved chains), the 8 lanes are folded in ty order through shared memory into
// part[chunk][col]. Stage 2: the same shape over the chunks, then dst[c] += total once.
// Every order depends on the shape only: deterministic, and enough threads in flight
// to keep the memory system busy (the first version ran one chain per column).
#define COL_RC 256
enum { COLSUM_PLAIN = 0, COLSUM_RMS = 1 };
template <typename T, int MODE>
__global__ void __launch_bounds__(256) k_colsum_part(double *part, const T *src, const T *x, const float *rstd,
                                                     int64_t rows, int cols) {
    __shared__ double sh[8][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, c = blockIdx.x * 32 + tx;
    const int64_t r0 = (int64_t)blockIdx.y * COL_RC, r1 = r0 + COL_RC < rows ? r0 + COL_RC : rows;
    double s0 = 0, s1 = 0;
    if (c < cols) {
        int64_t r = r0 + ty;
        for (; r + 8 < r1; r += 16) {
            float v0 = tof(src[r * cols + c]), v1 = tof(src[(r + 8) * cols + c]);
            if (MODE == COLSUM_RMS) {
                v0 *= tof(x[r * cols + c]) * rstd[r];
                v1 *= tof(x[(r + 8) * cols + c]) * rstd[r + 8];
            }
            s0 += (double)v0;
            s1 += (double)v1;
        }
        if (r < r1) {
            float v0 = tof(src[r * cols + c]);
            if (MODE == COLSUM_RMS) v0 *= tof(x[r * cols + c]) * rstd[r];
            s0 += (double)v0;
        }
    }
    sh[ty][tx] = s0 + s1;
    __syncthreads();
    if (ty == 0 && c < cols) {
        double t = 0;
        for (int k = 0; k < 8; k++) t += sh[k][tx];
        part[(int64_t)blockIdx.y * cols + c] = t;
    }
}
__global__ void __launch_bounds__(256) k_colsum_final(float *dst, const double *part, int nch, int cols) {
    __shared__ double sh[8][33];
    const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5, c = blockIdx.x * 32 + tx;
    double s = 0;
    if (c < cols)
        for (int i = ty; i < nch; i += 8) s += part[(int64_t)i * cols + c];
    sh[ty][tx] = s;
    __syncthreads();
    if (ty == 0 && c < cols) {
        double t = 0;
        for (int k = 0; k < 8; k++) t += sh[k][tx];
        dst[c] = (float)((double)dst[c] + t);
    }
}

// ---- RMSNorm: a warp per row ------------------------------------------------------------------
template <typename T>
__global__ void k_rmsnorm_fwd(T *out, T *rstd, float *rstd32, const T *inp, const float *w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (int64_t)row * C;
    float ss = 0;
    for (int c = lane; c < C; c += 32) {
        float v = tof(x[c]);
        ss += v * v;
    }
    ss = warp_sum(ss);
    float r = (float)(1.0 / sqrt((double)ss / C + (double)eps));
    T *o = out + (int64_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = fromf<T>(tof(x[c]) * r * w[c]);
    if (lane == 0) {
        rstd[row] = fromf<T>(r);
        if (rstd32) rstd32[row] = r;
    }
}
// 8-wide version: row pointers 16-byte aligned, C % 8 == 0 (w read as scalars: a
// parameter slice need not be aligned)
template <typename T>
__global__ void k_rmsnorm_fwd_v8(T *out, T *rstd, float *rstd32, const T *inp, const float *w, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (int64_t)row * C;
    const int nv = C / 8;
    float ss = 0;
    for (int v = lane; v < nv; v += 32) {
        float a[8];
        ld8(x + v * 8, a);
#pragma unroll
        for (int k = 0; k < 8; k++) ss += a[k] * a[k];
    }
    ss = warp_sum(ss);
    float r = (float)(1.0 / sqrt((double)ss / C + (double)eps));
    T *o = out + (int64_t)row * C;
    for (int v = lane; v < nv; v += 32) {
        float a[8];
        ld8(x + v * 8, a);
#pragma unroll
        for (int k = 0; k < 8; k++) a[k] = a[k] * r * w[v * 8 + k];
        st8(o + v * 8, a);
    }
    if (lane == 0) {
        rstd[row] = fromf<T>(r);
        if (rstd32) rstd32[row] = r;
    }
}
template <typename T>
__global__ void k_rmsnorm_bwd_v8(T *dinp, const T *dout, const T *inp, const float *w, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (int64_t)row * C, *dy = dout + (int64_t)row * C;
    T *dx = dinp + (int64_t)row * C;
    const int nv = C / 8;
    float r = rstd[row], dot = 0;
    for (int v = lane; v < nv; v += 32) {
        float a[8], g[8];
        ld8(x + v * 8, a);
        ld8(dy + v * 8, g);
#pragma unroll
        for (int k = 0; k < 8; k++) dot += (g[k] * w[v * 8 + k]) * (a[k] * r);
    }
    dot = warp_sum(dot);
    float mean = dot / C;
    for (int v = lane; v < nv; v += 32) {
        float a[8], g[8], d[8];
        ld8(x + v * 8, a);
        ld8(dy + v * 8, g);
        ld8(dx + v * 8, d);
#pragma unroll
        for (int k = 0; k < 8; k++) d[k] += r * (g[k] * w[v * 8 + k] - (a[k] * r) * mean);
        st8(dx + v * 8, d);
    }
}
// dx += r (g - xhat mean(g xhat)), g = dy w, xhat = x r
template <typename T>
__global__ void k_rmsnorm_bwd(T *dinp, const T *dout, const T *inp, const float *w, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (row >= N) return;
    const T *x = inp + (int64_t)row * C, *dy = dout + (int64_t)row * C;
    T *dx = dinp + (int64_t)row * C;
    float r = rstd[row], dot = 0;
    for (int c = lane; c < C; c += 32) dot += (tof(dy[c]) * w[c]) * (tof(x[c]) * r);
    dot = warp_sum(dot);
    float mean = dot / C;
    for (int c = lane; c < C; c += 32)
        dx[c] = fromf<T>(tof(dx[c]) + r * (tof(dy[c]) * w[c] - (tof(x[c]) * r) * mean));
}

// ---- RoPE ----------------------------------------------------------------------------------------
template <typename T>
__global__ void k_rope(T *x, const float *cs, int B, int T_, int t0, int Tn, int nh, int D, int inverse) {
    int half = D / 2;
    int64_t total = (int64_t)B * Tn * nh * half;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int i = (int)(u % half);
        int64_t r = u / half;
        int h = (int)(r % nh);
        r /= nh;
        int t = t0 + (int)(r % Tn), b = (int)(r / Tn);
        float c = cs[((int64_t)t * half + i) * 2], s = cs[((int64_t)t * half + i) * 2 + 1];
        if (inverse) s = -s;
        T *p = x + (((int64_t)b * T_ + t) * nh + h) * D;
        float y1, y2;
        rope_rotate(tof(p[i]), tof(p[i + half]), c, s, y1, y2);
        p[i] = fromf<T>(y1);
        p[i + half] = fromf<T>(y2);
    }
}
// 8 consecutive pairs (i .. i+7) a thread, 16-byte accesses (D/2 % 8 == 0, x and cs 16-byte
// aligned): k_rope's arithmetic (rope_rotate) pair for pair, so the same bits
template <typename T>
__global__ void k_rope_v8(T *x, const float *cs, int B, int T_, int t0, int Tn, int nh, int D, int inverse) {
    const int half = D / 2, nv = half / 8;
    const int64_t total = (int64_t)B * Tn * nh * nv;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(u % nv) * 8;
        int64_t r = u / nv;
        const int h = (int)(r % nh);
        r /= nh;
        const int t = t0 + (int)(r % Tn), b = (int)(r / Tn);
        const float4 *cp = (const float4 *)(cs + ((int64_t)t * half + i) * 2);
        float c[8], s[8];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float4 q = cp[k];
            c[2 * k] = q.x, s[2 * k] = q.y, c[2 * k + 1] = q.z, s[2 * k + 1] = q.w;
        }
        T *p = x + (((int64_t)b * T_ + t) * nh + h) * D;
        float x1[8], x2[8], y1[8], y2[8];
        ld8(p + i, x1);
        ld8(p + i + half, x2);
#pragma unroll
        for (int k = 0; k < 8; k++) rope_rotate(x1[k], x2[k], c[k], inverse ? -s[k] : s[k], y1[k], y2[k]);
        st8(p + i, y1);
        st8(p + i + half, y2);
    }
}
template <typename T> __global__ void k_rope_table(T *cs, float *cs32, int Tmax, int D, double theta) {
    int half = D / 2;
    int64_t total = (int64_t)Tmax * half;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int p = (int)(u / half), i = (int)(u % half);
        double ang = (double)p * pow(theta, -2.0 * i / D);
        float c = (float)cos(ang), s = (float)sin(ang);
        cs[u * 2] = fromf<T>(c);
        cs[u * 2 + 1] = fromf<T>(s);
        if (cs32) { cs32[u * 2] = c; cs32[u * 2 + 1] = s; }
    }
}

// ---- elementwise ----------------------------------------------------------------------------
enum { EW_SWIGLU_F, EW_SWIGLU_B, EW_SILU_F, EW_SILU_B, EW_ADD };
__device__ __forceinline__ float sigm(float a) { return 1.0f / (1.0f + __expf(-a)); }

template <int OP> __device__ __forceinline__ void ew_op(float &o0, float &o1, float a, float b, float c) {
    if (OP == EW_SWIGLU_F) {
        o0 = a * sigm(a) * b;
    } else if (OP == EW_SWIGLU_B) {   // a = dh, b = a, c = b
        float s = sigm(b);
        o1 = a * (b * s);
        o0 = a * c * (s * (1.0f + b * (1.0f - s)));
    } else if (OP == EW_SILU_F) {
        o0 = a * sigm(a);
    } else if (OP == EW_SILU_B) {     // a = dout, b = inp
        float s = sigm(b);
        o0 = a * (s * (1.0f + b * (1.0f - s)));
    } else {
        o0 = a + b;
    }
}
// VEC: 8 elements per step through 16-byte accesses (all pointers 16-byte aligned),
// else 1. Every element is read before any output element is written, so outputs may
// alias inputs element for element.
template <typename T, int OP, int VEC>
__global__ void k_ew(int64_t n, T *o0, T *o1, const T *i0, const T *i1, const T *i2) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    if (VEC == 8) {
        int64_t nv = n / 8;
        for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += stride) {
            float a[8], b[8] = {0}, c[8] = {0}, r0[8], r1[8];
            ld8(i0 + v * 8, a);
            if (i1) ld8(i1 + v * 8, b);
            if (i2) ld8(i2 + v * 8, c);
#pragma unroll
            for (int k = 0; k < 8; k++) ew_op<OP>(r0[k], r1[k], a[k], b[k], c[k]);
            st8(o0 + v * 8, r0);
            if (OP == EW_SWIGLU_B) st8(o1 + v * 8, r1);
        }
        for (int64_t i = nv * 8 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
            float r0, r1 = 0;
            ew_op<OP>(r0, r1, tof(i0[i]), i1 ? tof(i1[i]) : 0.f, i2 ? tof(i2[i]) : 0.f);
            o0[i] = fromf<T>(r0);
            if (OP == EW_SWIGLU_B) o1[i] = fromf<T>(r1);
        }
    } else {
        for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) {
            float r0, r1 = 0;
            ew_op<OP>(r0, r1, tof(i0[i]), i1 ? tof(i1[i]) : 0.f, i2 ? tof(i2[i]) : 0.f);
            o0[i] = fromf<T>(r0);
            if (OP == EW_SWIGLU_B) o1[i] = fromf<T>(r1);
        }
    }
}

// ---- fused softmax cross-entropy: a block per row -----------------------------------------------
// Online (max, sum) per thread over a strided slice, folded by a fixed tree: the
// same row always gives the same bits. d_i = (exp(x_i - lse) - [i == t]) dscale.
#define XENT_THREADS 512
// one element into a thread's online (max, sum of exp(x - max))
__device__ __forceinline__ void ms_push(float &m, float &s, float v) {
    if (v > m) {
        s = s * __expf(m - v) + 1.0f;
        m = v;
    } else {
        s += __expf(v - m);
    }
}
__device__ __forceinline__ void ms_fold(float &m, float &s, float mo, float so) {
    float M = fmaxf(m, mo);
    if (M == -INFINITY) return;
    s = s * __expf(m - M) + so * __expf(mo - M);
    m = M;
}
// a row whose target is < 0 (ignored): loss 0, dlogits 0
template <typename T> __device__ __forceinline__ void xent_ignored_row(T *losses, T *d, int row, int V) {
    if (threadIdx.x == 0) losses[row] = fromf<T>(0.f);
    if (d)
        for (int i = threadIdx.x; i < V; i += blockDim.x) d[i] = fromf<T>(0.f);
}
// fold every thread's online (max, sum) by a fixed tree (warps by shuffles, then the warps
// in order), write the row's loss lse - x[t] and return lse to every thread
template <typename T>
__device__ __forceinline__ float xent_lse(float m, float s, const T *x, int t, T *loss, float *shm, float *shs, float *sh_lse,
                                          float *sh_xt) {
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float mo = __shfl_xor_sync(0xffffffffu, m, o), so = __shfl_xor_sync(0xffffffffu, s, o);
        ms_fold(m, s, mo, so);
    }
    if (lane == 0) { shm[wid] = m; shs[wid] = s; }
    if (tid == 0) *sh_xt = tof(x[t]);
    __syncthreads();
    if (tid == 0) {
        float M = shm[0], S = shs[0];
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) ms_fold(M, S, shm[w], shs[w]);
        *sh_lse = M + logf(S);
        *loss = fromf<T>(*sh_lse - *sh_xt);
    }
    __syncthreads();
    return *sh_lse;
}
template <typename T>
__global__ void k_xent(T *losses, T *dlogits, const T *logits, const int32_t *targets, int N, int V, float dscale) {
    __shared__ float shm[32], shs[32], sh_lse, sh_xt;
    const int row = blockIdx.x, tid = threadIdx.x;
    const int t = targets[row];
    const T *x = logits + (int64_t)row * V;
    T *d = dlogits ? dlogits + (int64_t)row * V : NULL;
    if (t < 0) {
        xent_ignored_row(losses, d, row, V);
        return;
    }
    float m = -INFINITY, s = 0;
    for (int i = tid; i < V; i += blockDim.x) {
        ms_push(m, s, tof(x[i]));
    }
    const float lse = xent_lse(m, s, x, t, losses + row, shm, shs, &sh_lse, &sh_xt);
    if (!d) return;
    for (int i = tid; i < V; i += blockDim.x) {
        float p = __expf(tof(x[i]) - lse);
        d[i] = fromf<T>((p - (i == t ? 1.0f : 0.0f)) * dscale);
    }
}
// k_xent with 16-byte loads and stores (rows of V % (16 / sizeof(T)) == 0 elements, 16-byte
// aligned), the same bits: the first pass stages tiles of XENT_THREADS x VEC elements in
// shared memory and every thread folds its own elements tid, tid + XENT_THREADS, ... in the
// same order as k_xent; the second pass is elementwise.
template <typename T>
__global__ void k_xent_vec(T *losses, T *dlogits, const T *logits, const int32_t *targets, int N, int V, float dscale) {
    constexpr int VEC = 16 / sizeof(T), TILE = XENT_THREADS * VEC;
    __shared__ __align__(16) T tile[TILE];
    __shared__ float shm[32], shs[32], sh_lse, sh_xt;
    const int row = blockIdx.x, tid = threadIdx.x;
    const int t = targets[row];
    const T *x = logits + (int64_t)row * V;
    T *d = dlogits ? dlogits + (int64_t)row * V : NULL;
    if (t < 0) {
        xent_ignored_row(losses, d, row, V);
        return;
    }
    float m = -INFINITY, s = 0;
    for (int base = 0; base < V; base += TILE) {
        const int n = V - base < TILE ? V - base : TILE;
        __syncthreads();   // the previous tile is folded
        if (tid * VEC < n) *reinterpret_cast<uint4 *>(tile + tid * VEC) = *reinterpret_cast<const uint4 *>(x + base + tid * VEC);
        __syncthreads();
#pragma unroll
        for (int j = 0; j < VEC; j++) {
            const int i = tid + j * XENT_THREADS;
            if (i >= n) break;
            ms_push(m, s, tof(tile[i]));
        }
    }
    const float lse = xent_lse(m, s, x, t, losses + row, shm, shs, &sh_lse, &sh_xt);
    if (!d) return;
    for (int i0 = tid * VEC; i0 < V; i0 += XENT_THREADS * VEC) {
        uint4 u = *reinterpret_cast<const uint4 *>(x + i0);
        T *e = reinterpret_cast<T *>(&u);
#pragma unroll
        for (int k = 0; k < VEC; k++) {
            float p = __expf(tof(e[k]) - lse);
            e[k] = fromf<T>((p - (i0 + k == t ? 1.0f : 0.0f)) * dscale);
        }
        *reinterpret_cast<uint4 *>(d + i0) = u;
    }
}

// ---- parameter-buffer reductions and AdamW --------------------------------------------------------
#define RED_CHUNK 16384
#define RED_THREADS 256
// One block: the sum of squares of chunk c of x[0, n) (valid in thread 0), and the sum of
// np partials. Every kernel below uses these two, so a tensor's sum has the same bits
// whether it is reduced alone or with others.
__device__ __forceinline__ double sumsq_chunk(const float *x, int64_t n, int64_t c, double *sh) {
    int64_t i0 = c * RED_CHUNK, i1 = i0 + RED_CHUNK < n ? i0 + RED_CHUNK : n;
    double s = 0;
    for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) s += (double)x[i] * (double)x[i];
    return block_reduce<SumOp>(s, sh);
}
__device__ __forceinline__ double sum_parts(const double *part, int64_t np, double *sh) {
    double s = 0;
    for (int64_t i = threadIdx.x; i < np; i += blockDim.x) s += part[i];
    return block_reduce<SumOp>(s, sh);
}
__global__ void k_sumsq_part(double *part, const float *x, int64_t n) {
    __shared__ double sh[33];
    const double s = sumsq_chunk(x, n, blockIdx.x, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void k_sum_final(double *out, const double *part, int64_t np) {
    __shared__ double sh[33];
    const double s = sum_parts(part, np, sh);
    if (threadIdx.x == 0) out[0] = s;
}
// Many tensors of one buffer in two launches. tab: off [n], len [n], cstart [n + 1] (tensor
// i's chunks are partials cstart[i] .. cstart[i + 1] - 1). Block b of the first kernel is
// chunk b - cstart[i] of the tensor i whose range holds b; block i of the second sums
// tensor i's partials.
__global__ void k_sumsq_part_many(double *part, const float *x, const int64_t *tab, int n) {
    __shared__ double sh[33];
    const int64_t *off = tab, *len = tab + n, *cstart = tab + 2 * n;
    int lo = 0, hi = n - 1;   // the last i with cstart[i] <= b (empty tensors have no chunk)
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (cstart[mid] <= (int64_t)blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const double s = sumsq_chunk(x + off[lo], len[lo], (int64_t)blockIdx.x - cstart[lo], sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}
__global__ void k_sum_final_many(double *out, const double *part, const int64_t *tab, int n) {
    __shared__ double sh[33];
    const int64_t *cstart = tab + 2 * n;
    const double s = sum_parts(part + cstart[blockIdx.x], cstart[blockIdx.x + 1] - cstart[blockIdx.x], sh);
    if (threadIdx.x == 0) out[blockIdx.x] = s;
}
// x *= s in fp64, rounded once: elements [head, head + 4 nq) as 16-byte quads, the rest one
// by one (the same arithmetic, the same bits)
__global__ void k_scale(float *x, double s, int64_t n, int64_t head, int64_t nq) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t q = tid; q < nq; q += stride) {
        float4 a = *reinterpret_cast<const float4 *>(x + head + 4 * q);
        a.x = (float)((double)a.x * s);
        a.y = (float)((double)a.y * s);
        a.z = (float)((double)a.z * s);
        a.w = (float)((double)a.w * s);
        *reinterpret_cast<float4 *>(x + head + 4 * q) = a;
    }
    for (int64_t j = tid; j < n - 4 * nq; j += stride) {
        const int64_t e = j < head ? j : j + 4 * nq;
        x[e] = (float)((double)x[e] * s);
    }
}
template <typename T> __global__ void k_nonfinite(unsigned long long *first, const T *x, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = tof(x[i]);
        if (!isfinite(v)) atomicMin(first, (unsigned long long)i);   // integer: same result every run
    }
}
// AdamW's hyperparameters of one update (bc1, bc2: the bias corrections 1 - beta^t)
struct AdamwHyper {
    double lr, b1, b2, bc1, bc2, eps, wd;
};
// one element in fp64 (the CPU reference's arithmetic), each result rounded once to fp32
__device__ __forceinline__ float adamw_elem(float &m, float &v, float p, float g, const AdamwHyper &h) {
    const double gi = g, pi = p;
    const double mi = h.b1 * (double)m + (1 - h.b1) * gi;
    const double vi = h.b2 * (double)v + (1 - h.b2) * gi * gi;
    m = (float)mi;
    v = (float)vi;
    return (float)(pi - h.lr * ((mi / h.bc1) / (sqrt(vi / h.bc2) + h.eps) + h.wd * pi));
}
template <typename TC> struct alignas(4 * sizeof(TC)) Quad {
    TC x[4];
};
// One run of AdamW (a table entry in device memory): elements [off, off + n) of p, g, m, v.
// Elements [head, head + 4 nq) of the run go as quads (16-byte fp32 accesses, 4-element
// copies), the others (the head and the tail; all of them when nq = 0) one by one. Every
// element gets the same arithmetic (adamw_elem) either way, so neither the grouping nor the
// runs change a bit. wc, wa: the run's parameters rounded to the copy type (NULL: none).
struct AdamwRun {
    int64_t off, n, head, nq;
    int64_t block0;   // the run's first block
    double wd;
    void *wc, *wa;
};
#define ADAMW_QUADS 1024   // quads a block; a run without quads: 4 ADAMW_QUADS single elements a block
static int64_t adamw_blocks(int64_t n, int64_t nq) {
    return nq > 0 ? (nq + ADAMW_QUADS - 1) / ADAMW_QUADS : (n + 4 * ADAMW_QUADS - 1) / (4 * ADAMW_QUADS);
}
// a block per ADAMW_QUADS quads of a run (its first block also takes the run's single
// elements), the run found by a binary search over the table's block0
template <typename TC>
__global__ void __launch_bounds__(EW_THREADS) k_adamw_runs(float *p, const float *g, float *m, float *v, const AdamwRun *runs,
                                                           int nr, AdamwHyper h) {
    int lo = 0, hi = nr - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (runs[mid].block0 <= (int64_t)blockIdx.x) lo = mid;
        else hi = mid - 1;
    }
    const AdamwRun r = runs[lo];
    h.wd = r.wd;
    const int64_t c = blockIdx.x - r.block0;
    float *pr = p + r.off, *mr = m + r.off, *vr = v + r.off;
    const float *gr = g + r.off;
    TC *wc = (TC *)r.wc, *wa = (TC *)r.wa;
    const int64_t q1 = (c + 1) * ADAMW_QUADS < r.nq ? (c + 1) * ADAMW_QUADS : r.nq;
    for (int64_t q = c * ADAMW_QUADS + threadIdx.x; q < q1; q += blockDim.x) {
        const int64_t e = r.head + 4 * q;
        const float4 pp = *reinterpret_cast<const float4 *>(pr + e), gg = *reinterpret_cast<const float4 *>(gr + e);
        float4 mm = *reinterpret_cast<const float4 *>(mr + e), vv = *reinterpret_cast<const float4 *>(vr + e);
        float4 pn;
        pn.x = adamw_elem(mm.x, vv.x, pp.x, gg.x, h);
        pn.y = adamw_elem(mm.y, vv.y, pp.y, gg.y, h);
        pn.z = adamw_elem(mm.z, vv.z, pp.z, gg.z, h);
        pn.w = adamw_elem(mm.w, vv.w, pp.w, gg.w, h);
        *reinterpret_cast<float4 *>(mr + e) = mm;
        *reinterpret_cast<float4 *>(vr + e) = vv;
        *reinterpret_cast<float4 *>(pr + e) = pn;
        Quad<TC> cp = {{fromf<TC>(pn.x), fromf<TC>(pn.y), fromf<TC>(pn.z), fromf<TC>(pn.w)}};
        if (wc) *reinterpret_cast<Quad<TC> *>(wc + e) = cp;
        if (wa) *reinterpret_cast<Quad<TC> *>(wa + e) = cp;
    }
    // single elements: the head and tail with the first block, or a block's 4 ADAMW_QUADS of a
    // run without quads
    const int64_t ns = r.n - 4 * r.nq;
    const int64_t j0 = r.nq > 0 ? (c == 0 ? 0 : ns) : c * 4 * ADAMW_QUADS;
    const int64_t j1 = r.nq > 0 ? ns : ((c + 1) * 4 * ADAMW_QUADS < ns ? (c + 1) * 4 * ADAMW_QUADS : ns);
    for (int64_t j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        const int64_t e = j < r.head ? j : j + 4 * r.nq;
        const float pn = adamw_elem(mr[e], vr[e], pr[e], gr[e], h);
        pr[e] = pn;
        if (wc) wc[e] = fromf<TC>(pn);
        if (wa) wa[e] = fromf<TC>(pn);
    }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
template <typename T> __global__ void k_fill_random(T *p, int64_t n, uint64_t seed, float scale) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = mix64(seed ^ mix64((uint64_t)i));
        float u = 0.05f + 0.95f * (float)(h >> 40) * (1.0f / 16777216.0f);
        p[i] = fromf<T>(((h & 1) ? -u : u) * scale);
    }
}

// ============================================================================================
// launchers
// ============================================================================================
extern "C" void nsa_cuda_f32_to_act(int dt, void *dst, const float *src, int64_t n) {
    if (n <= 0) return;
    if (dt == NSA_DT_F32) {
        if (dst != (const void *)src)
            cudaCheck(cudaMemcpyAsync(dst, src, (size_t)n * 4, cudaMemcpyDeviceToDevice, NSA_STREAM));
        return;
    }
    DISPATCH_DT(dt, T, k_f32_to_act<T><<<nsa_blocks(n, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>((T *)dst, src, n));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_fill_random(int dt, void *p, int64_t n, uint64_t seed, double scale) {
    if (n <= 0) return;
    DISPATCH_DT(dt, T, k_fill_random<T><<<nsa_blocks(n, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>((T *)p, n, seed, (float)scale));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_act_to_f32(int dt, float *dst, const void *src, int64_t n) {
    if (n <= 0) return;
    DISPATCH_DT(dt, T, k_act_to_f32<T><<<nsa_blocks(n, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>(dst, (const T *)src, n));
    CUDA_LAUNCHED();
}

static void colsum(int dt, int mode, float *dst, const void *src, const void *x, const float *rstd, int64_t rows,
                   int cols) {
    if (rows <= 0 || cols <= 0) return;
    int nch = (int)((rows + COL_RC - 1) / COL_RC);
    double *part = (double *)nsa_cuda_scratch(SCR_RED0, (size_t)nch * cols * sizeof(double));
    dim3 grid((cols + 31) / 32, nch);
    DISPATCH_DT(dt, T, {
        if (mode == COLSUM_RMS)
            k_colsum_part<T, COLSUM_RMS><<<grid, 256, 0, NSA_STREAM>>>(part, (const T *)src, (const T *)x, rstd, rows, cols);
        else
            k_colsum_part<T, COLSUM_PLAIN><<<grid, 256, 0, NSA_STREAM>>>(part, (const T *)src, NULL, NULL, rows, cols);
    });
    CUDA_LAUNCHED();
    k_colsum_final<<<(cols + 31) / 32, 256, 0, NSA_STREAM>>>(dst, part, nch, cols);
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_colsum_acc(int dt, float *dst, const void *src, int64_t rows, int cols) {
    colsum(dt, COLSUM_PLAIN, dst, src, NULL, NULL, rows, cols);
}

extern "C" void nsa_cuda_rmsnorm_fwd(int dt, void *out, void *rstd, const void *inp, const void *w, int N, int C,
                                     double eps) {
    if (N <= 0) return;
    float *r32 = nsa_cuda_stat_write(dt, rstd);
    const int v8 = C % 8 == 0 && nsa_aligned16(out) && nsa_aligned16(inp);
    DISPATCH_DT(dt, T, {
        if (v8)
            k_rmsnorm_fwd_v8<T><<<(N + 7) / 8, 256, 0, NSA_STREAM>>>((T *)out, (T *)rstd, r32, (const T *)inp,
                                                                   (const float *)w, N, C, (float)eps);
        else
            k_rmsnorm_fwd<T><<<(N + 7) / 8, 256, 0, NSA_STREAM>>>((T *)out, (T *)rstd, r32, (const T *)inp,
                                                                (const float *)w, N, C, (float)eps);
    });
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_rmsnorm_bwd(int dt, void *dinp, void *dw, const void *dout, const void *inp, const void *w,
                                     const void *rstd, int N, int C) {
    if (N <= 0) return;
    const float *r = nsa_cuda_stat_read(dt, rstd, N, SCR_STAT0);
    const int v8 = C % 8 == 0 && nsa_aligned16(dinp) && nsa_aligned16(dout) && nsa_aligned16(inp);
    DISPATCH_DT(dt, T, {
        if (v8)
            k_rmsnorm_bwd_v8<T><<<(N + 7) / 8, 256, 0, NSA_STREAM>>>((T *)dinp, (const T *)dout, (const T *)inp,
                                                                   (const float *)w, r, N, C);
        else
            k_rmsnorm_bwd<T><<<(N + 7) / 8, 256, 0, NSA_STREAM>>>((T *)dinp, (const T *)dout, (const T *)inp,
                                                                (const float *)w, r, N, C);
    });
    CUDA_LAUNCHED();
    if (dw) colsum(dt, COLSUM_RMS, (float *)dw, dout, inp, r, N, C);
}

static void rope(int dt, void *x, const void *cs, int B, int T_, int t0, int Tn, int nh, int D, int inv) {
    int64_t total = (int64_t)B * Tn * nh * (D / 2);
    if (total <= 0) return;
    const float *c32 = nsa_cuda_stat_read(dt, cs, (int64_t)(t0 + Tn) * D, SCR_STAT1);
    if (D % 16 == 0 && nsa_aligned16(x) && nsa_aligned16(c32))
        DISPATCH_DT(dt, T, k_rope_v8<T><<<nsa_blocks(total / 8, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>(
                               (T *)x, c32, B, T_, t0, Tn, nh, D, inv));
    else
        DISPATCH_DT(dt, T, k_rope<T><<<nsa_blocks(total, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>((T *)x, c32, B, T_, t0,
                                                                                                 Tn, nh, D, inv));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_rope_fwd(int dt, void *x, const void *cs, int B, int T, int t0, int Tn, int nh, int D) {
    rope(dt, x, cs, B, T, t0, Tn, nh, D, 0);
}
extern "C" void nsa_cuda_rope_bwd(int dt, void *x, const void *cs, int B, int T, int t0, int Tn, int nh, int D) {
    rope(dt, x, cs, B, T, t0, Tn, nh, D, 1);
}
extern "C" void nsa_cuda_rope_table(int dt, void *cs, int Tmax, int D, double theta) {
    int64_t total = (int64_t)Tmax * (D / 2);
    if (total <= 0) return;
    float *c32 = nsa_cuda_stat_write(dt, cs);
    DISPATCH_DT(dt, T, k_rope_table<T><<<nsa_blocks(total, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>((T *)cs, c32, Tmax, D,
                                                                                                   theta));
    CUDA_LAUNCHED();
}

template <typename T, int OP>
static void ew_launch(int64_t n, void *o0, void *o1, const void *i0, const void *i1, const void *i2) {
    if (n <= 0) return;
    int vec = nsa_aligned16(o0) && nsa_aligned16(o1) && nsa_aligned16(i0) && nsa_aligned16(i1) && nsa_aligned16(i2) && n >= 8;
    if (vec)
        k_ew<T, OP, 8><<<nsa_blocks((n + 7) / 8, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>(
            n, (T *)o0, (T *)o1, (const T *)i0, (const T *)i1, (const T *)i2);
    else
        k_ew<T, OP, 1><<<nsa_blocks(n, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>(n, (T *)o0, (T *)o1, (const T *)i0,
                                                                              (const T *)i1, (const T *)i2);
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_swiglu_fwd(int dt, void *h, const void *a, const void *b, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_SWIGLU_F>(n, h, NULL, a, b, NULL));
}
extern "C" void nsa_cuda_swiglu_bwd(int dt, void *da, void *db, const void *dh, const void *a, const void *b, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_SWIGLU_B>(n, da, db, dh, a, b));
}
extern "C" void nsa_cuda_silu_fwd(int dt, void *out, const void *inp, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_SILU_F>(n, out, NULL, inp, NULL, NULL));
}
extern "C" void nsa_cuda_silu_bwd(int dt, void *dinp, const void *dout, const void *inp, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_SILU_B>(n, dinp, NULL, dout, inp, NULL));
}
extern "C" void nsa_cuda_add(int dt, void *out, const void *a, const void *b, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_ADD>(n, out, NULL, a, b, NULL));
}
extern "C" void nsa_cuda_add_inplace(int dt, void *y, const void *x, int64_t n) {
    DISPATCH_DT(dt, T, ew_launch<T, EW_ADD>(n, y, NULL, y, x, NULL));
}

extern "C" void nsa_cuda_xent_fwd_bwd(int dt, void *losses, void *dlogits, const void *logits, const int32_t *targets,
                                      int N, int V, double dscale) {
    if (N <= 0) return;
    const int vec = 16 / (int)dt_bytes(dt);
    const bool aligned = ((uintptr_t)logits & 15) == 0 && ((uintptr_t)dlogits & 15) == 0 && V % vec == 0;
    if (aligned)
        DISPATCH_DT(dt, T, k_xent_vec<T><<<N, XENT_THREADS, 0, NSA_STREAM>>>((T *)losses, (T *)dlogits, (const T *)logits,
                                                                           targets, N, V, (float)dscale));
    else
        DISPATCH_DT(dt, T, k_xent<T><<<N, XENT_THREADS, 0, NSA_STREAM>>>((T *)losses, (T *)dlogits, (const T *)logits,
                                                                       targets, N, V, (float)dscale));
    CUDA_LAUNCHED();
}

extern "C" double nsa_cuda_sumsq_f32(const void *x, int64_t n) {
    if (n <= 0) return 0.0;
    NsaCapturePause pause_("a reduction read back to the host");
    int64_t np = (n + RED_CHUNK - 1) / RED_CHUNK;
    double *part = (double *)nsa_cuda_scratch(SCR_RED1, (size_t)(np + 1) * sizeof(double));
    k_sumsq_part<<<(unsigned)np, RED_THREADS, 0, NSA_STREAM>>>(part + 1, (const float *)x, n);
    CUDA_LAUNCHED();
    k_sum_final<<<1, RED_THREADS, 0, NSA_STREAM>>>(part, part + 1, np);
    CUDA_LAUNCHED();
    double r = 0;
    cudaCheck(cudaMemcpyAsync(&r, part, sizeof r, cudaMemcpyDeviceToHost, NSA_STREAM));
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
    return r;
}
// n tensors in two launches (k_sumsq_part_many, k_sum_final_many: per tensor the same
// chunks and sums as nsa_cuda_sumsq_f32, so the same bits), one copy back, one wait
extern "C" void nsa_cuda_sumsq_many_f32(const void *base, const int64_t *off, const int64_t *len, int n, double *out) {
    if (n <= 0) return;
    NsaCapturePause pause_("a reduction read back to the host");
    std::vector<int64_t> tab((size_t)3 * n + 1);
    int64_t np = 0;
    for (int i = 0; i < n; i++) {
        tab[i] = off[i];
        tab[n + i] = len[i];
        tab[2 * n + i] = np;
        np += len[i] > 0 ? (len[i] + RED_CHUNK - 1) / RED_CHUNK : 0;
    }
    tab[3 * n] = np;
    // [res n][part np] doubles, then the table
    double *res = (double *)nsa_cuda_scratch(SCR_RED1, (size_t)(n + np) * sizeof(double) + tab.size() * sizeof(int64_t));
    double *part = res + n;
    int64_t *dtab = (int64_t *)(part + np);
    cudaCheck(cudaMemcpyAsync(dtab, tab.data(), tab.size() * sizeof(int64_t), cudaMemcpyHostToDevice, NSA_STREAM));
    if (np > 0) {
        k_sumsq_part_many<<<(unsigned)np, RED_THREADS, 0, NSA_STREAM>>>(part, (const float *)base, dtab, n);
        CUDA_LAUNCHED();
    }
    k_sum_final_many<<<(unsigned)n, RED_THREADS, 0, NSA_STREAM>>>(res, part, dtab, n);
    CUDA_LAUNCHED();
    cudaCheck(cudaMemcpyAsync(out, res, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, NSA_STREAM));
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
}
extern "C" void nsa_cuda_scale_f32(void *x, double s, int64_t n) {
    if (n <= 0) return;
    int64_t head = (int64_t)((16 - (uintptr_t)x % 16) % 16) / 4, nq = 0;
    if ((uintptr_t)x % 4 == 0 && head <= n) nq = (n - head) / 4;
    else head = 0;
    const int64_t work = nq > n - 4 * nq ? nq : n - 4 * nq;
    k_scale<<<nsa_blocks(work, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>((float *)x, s, n, head, nq);
    CUDA_LAUNCHED();
}
extern "C" int64_t nsa_cuda_first_nonfinite(int dt, const void *x, int64_t n) {
    if (n <= 0) return -1;
    NsaCapturePause pause_("a check read back to the host");
    unsigned long long *first = (unsigned long long *)nsa_cuda_scratch(SCR_MISC, sizeof(unsigned long long));
    cudaCheck(cudaMemsetAsync(first, 0xff, sizeof *first, NSA_STREAM));
    DISPATCH_DT(dt, T, k_nonfinite<T><<<nsa_blocks(n, EW_THREADS), EW_THREADS, 0, NSA_STREAM>>>(first, (const T *)x, n));
    CUDA_LAUNCHED();
    unsigned long long h = 0;
    cudaCheck(cudaMemcpyAsync(&h, first, sizeof h, cudaMemcpyDeviceToHost, NSA_STREAM));
    cudaCheck(cudaStreamSynchronize(NSA_STREAM));
    return h == ~0ull ? -1 : (int64_t)h;
}
// the quad split of a run: head elements until p is 16-byte aligned, then quads, where g, m, v
// fall on 16 bytes and the copies on 4 elements at the same index (else nq = 0: all single)
static void adamw_split(const void *p, const void *g, const void *m, const void *v, const void *wc, const void *wa,
                        int esz, int64_t n, int64_t *head, int64_t *nq) {
    const int64_t h = (int64_t)((16 - (uintptr_t)p % 16) % 16) / 4;
    const uintptr_t hb = (uintptr_t)h * 4;
    bool ok = (uintptr_t)p % 4 == 0 && h <= n;
    for (const void *x : {g, m, v}) ok = ok && ((uintptr_t)x + hb) % 16 == 0;
    for (const void *x : {wc, wa}) ok = ok && (!x || ((uintptr_t)x + (uintptr_t)h * esz) % (4 * esz) == 0);
    *head = ok ? h : 0;
    *nq = ok ? (n - h) / 4 : 0;
}
extern "C" void nsa_cuda_adamw_runs(void *p, const void *g, void *m, void *v, const NsaAdamwRun *runs, int nr, double lr,
                                    double b1, double b2, double bc1, double bc2, double eps, int copy_dt) {
    // (its table is copied from host memory that is freed on return: never recorded)
    NsaCapturePause pause_("an optimizer update");
    std::vector<AdamwRun> tab;
    int64_t blocks = 0;
    const int esz = copy_dt == NSA_DT_F32 ? 4 : 2;
    for (int i = 0; i < nr; i++) {
        if (runs[i].n <= 0) continue;
        AdamwRun r = {runs[i].off, runs[i].n, 0, 0, blocks, runs[i].wd, NULL, NULL};
        if (copy_dt != NSA_DT_F32) {
            r.wc = runs[i].wcopy;
            r.wa = runs[i].wcopy2;
        }
        const int64_t o = r.off * 4;
        adamw_split((char *)p + o, (const char *)g + o, (char *)m + o, (char *)v + o, r.wc, r.wa, esz, r.n, &r.head, &r.nq);
        blocks += adamw_blocks(r.n, r.nq);
        tab.push_back(r);
    }
    if (tab.empty()) return;
    AdamwRun *dtab = (AdamwRun *)nsa_cuda_scratch(SCR_RED1, tab.size() * sizeof(AdamwRun));
    cudaCheck(cudaMemcpyAsync(dtab, tab.data(), tab.size() * sizeof(AdamwRun), cudaMemcpyHostToDevice, NSA_STREAM));
    const AdamwHyper h = {lr, b1, b2, bc1, bc2, eps, 0.0};
    float *pf = (float *)p, *mf = (float *)m, *vf = (float *)v;
    const float *gf = (const float *)g;
    const int n = (int)tab.size();
    if (copy_dt == NSA_DT_BF16)
        k_adamw_runs<bf16><<<(unsigned)blocks, EW_THREADS, 0, NSA_STREAM>>>(pf, gf, mf, vf, dtab, n, h);
    else if (copy_dt == NSA_DT_F16)
        k_adamw_runs<f16><<<(unsigned)blocks, EW_THREADS, 0, NSA_STREAM>>>(pf, gf, mf, vf, dtab, n, h);
    else
        k_adamw_runs<float><<<(unsigned)blocks, EW_THREADS, 0, NSA_STREAM>>>(pf, gf, mf, vf, dtab, n, h);
    CUDA_LAUNCHED();
}
