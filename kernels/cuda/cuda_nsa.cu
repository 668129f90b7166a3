// kernels/cuda/cuda_nsa.cu — the NSA ops of the CUDA backend except the tensor-core
// attention kernels (attn_*.cu): compression (avg, mlp gather), gate
// activation, combine, top-n selection, the helpers of the attention backward
// (Drow, the inverted block->queries index, the key-chunk tables and the ordered
// reduction of dK/dV partials), the simple attention kernels (fp32 activations,
// shapes the tensor-core kernels do not cover, and the NSA_CUDA_ATTN=simple
// cross-check) and the dispatch between the two.
//
// Determinism: no floating-point atomics. Every sum has one owner thread (or warp,
// or block) that adds its terms in a fixed order; selection ties go to the lower
// block index; the inverted index lists queries in ascending t.
#include <type_traits>   // std::integral_constant (by_head_dim)

#include "kernels/cuda/cuda_common.cuh"

// ============================================================================================
// compression
// ============================================================================================
template <typename T>
__global__ void k_compress_avg_fwd(T *Kc, const T *k, int B, int T_, int G, int D, int l, int d, int NC, int i0, int Ni) {
    int64_t total = (int64_t)B * Ni * G * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int e = (int)(u % D);
        int64_t r = u / D;
        int g = (int)(r % G);
        r /= G;
        int i = i0 + (int)(r % Ni), b = (int)(r / Ni);
        float s = 0;
        for (int rr = 0; rr < l; rr++) s += tof(k[(((int64_t)b * T_ + (int64_t)i * d + rr) * G + g) * D + e]);
        Kc[(((int64_t)b * NC + i) * G + g) * D + e] = fromf<T>(s / (float)l);
    }
}

__device__ __forceinline__ void blocks_of_token(int s, int l, int d, int NC, int &ilo, int &ihi) {
    int lo = s - l + 1;
    ilo = lo <= 0 ? 0 : (lo + d - 1) / d;
    int hi = s / d;
    ihi = hi < NC - 1 ? hi : NC - 1;
}

template <typename T>
__global__ void k_compress_avg_bwd(T *dk, const T *dKc, int B, int T_, int G, int D, int l, int d, int NC) {
    int64_t total = (int64_t)B * T_ * G * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int e = (int)(u % D);
        int64_t r = u / D;
        int g = (int)(r % G);
        r /= G;
        int s = (int)(r % T_), b = (int)(r / T_), ilo, ihi;
        blocks_of_token(s, l, d, NC, ilo, ihi);
        if (ilo > ihi) continue;
        float acc = 0;
        for (int i = ilo; i <= ihi; i++) acc += tof(dKc[(((int64_t)b * NC + i) * G + g) * D + e]) / (float)l;
        dk[u] = fromf<T>(tof(dk[u]) + acc);
    }
}

// The 16-byte version (D % 8 == 0, dk and dKc 16-byte aligned), element for element the
// arithmetic above (the same terms added in the same order, each divided by l), so the same
// bits: 8 consecutive elements of one (b, s, g) a thread, the index split by one 64-bit division
// a thread instead of three an element (the scalar kernel's integer arithmetic, not its bytes,
// was its time: 47 us for dK of the paper shape at S 8k, 8 MB).
template <typename T>
__global__ void k_compress_avg_bwd_v8(T *dk, const T *dKc, int B, int T_, int G, int D, int l, int d, int NC) {
    const int D8 = D / 8, per = G * D8;   // 8-element items a token
    const int64_t total = (int64_t)B * T_ * per;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int64_t bs = u / per;
        const int j = (int)(u - bs * per), g = j / D8, e = (j - g * D8) * 8;
        const int s = (int)(bs % T_), b = (int)(bs / T_);
        int ilo, ihi;
        blocks_of_token(s, l, d, NC, ilo, ihi);
        if (ilo > ihi) continue;
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int i = ilo; i <= ihi; i++) {
            float x[8];
            ld8(dKc + (((int64_t)b * NC + i) * G + g) * D + e, x);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += x[k] / (float)l;
        }
        T *p = dk + (bs * G + g) * D + e;
        float y[8];
        ld8(p, y);
#pragma unroll
        for (int k = 0; k < 8; k++) y[k] = y[k] + acc[k];
        st8(p, y);
    }
}

template <typename T>
__global__ void k_gather_fwd(T *X, const T *k, const float *pe, int B, int T_, int G, int D, int l, int d, int NC, int i0,
                             int Ni) {
    int64_t total = (int64_t)B * Ni * G * l * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int e = (int)(u % D);
        int64_t r = u / D;
        int rr = (int)(r % l);
        r /= l;
        int g = (int)(r % G);
        r /= G;
        int i = i0 + (int)(r % Ni), b = (int)(r / Ni);
        float v = tof(k[(((int64_t)b * T_ + (int64_t)i * d + rr) * G + g) * D + e]) + pe[rr * D + e];
        X[((((int64_t)b * NC + i) * G + g) * l + rr) * D + e] = fromf<T>(v);
    }
}

template <typename T>
__global__ void k_gather_bwd_dk(T *dk, const T *dX, int B, int T_, int G, int D, int l, int d, int NC) {
    int64_t total = (int64_t)B * T_ * G * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int e = (int)(u % D);
        int64_t r = u / D;
        int g = (int)(r % G);
        r /= G;
        int s = (int)(r % T_), b = (int)(r / T_), ilo, ihi;
        blocks_of_token(s, l, d, NC, ilo, ihi);
        if (ilo > ihi) continue;
        float acc = 0;
        for (int i = ilo; i <= ihi; i++)
            acc += tof(dX[((((int64_t)b * NC + i) * G + g) * l + (s - i * d)) * D + e]);
        dk[u] = fromf<T>(tof(dk[u]) + acc);
    }
}

// ============================================================================================
// gate and combine
// ============================================================================================
template <typename T> __global__ void k_gate_fwd(T *gate, const T *x, int64_t NG, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < NG; i += (int64_t)gridDim.x * blockDim.x) {
        float a = tof(x[3 * i]), b = tof(x[3 * i + 1]), c = tof(x[3 * i + 2]);
        if (act == NSA_GATE_SIGMOID) {
            gate[3 * i] = fromf<T>(1.0f / (1.0f + expf(-a)));
            gate[3 * i + 1] = fromf<T>(1.0f / (1.0f + expf(-b)));
            gate[3 * i + 2] = fromf<T>(1.0f / (1.0f + expf(-c)));
        } else {
            float m = fmaxf(fmaxf(a, b), c);
            float ea = expf(a - m), eb = expf(b - m), ec = expf(c - m), s = ea + eb + ec;
            gate[3 * i] = fromf<T>(ea / s);
            gate[3 * i + 1] = fromf<T>(eb / s);
            gate[3 * i + 2] = fromf<T>(ec / s);
        }
    }
}
template <typename T> __global__ void k_gate_bwd(T *dx, const T *dg, const T *gate, int64_t NG, int act) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < NG; i += (int64_t)gridDim.x * blockDim.x) {
        float g0 = tof(gate[3 * i]), g1 = tof(gate[3 * i + 1]), g2 = tof(gate[3 * i + 2]);
        float d0 = tof(dg[3 * i]), d1 = tof(dg[3 * i + 1]), d2 = tof(dg[3 * i + 2]);
        if (act == NSA_GATE_SIGMOID) {
            dx[3 * i] = fromf<T>(d0 * g0 * (1 - g0));
            dx[3 * i + 1] = fromf<T>(d1 * g1 * (1 - g1));
            dx[3 * i + 2] = fromf<T>(d2 * g2 * (1 - g2));
        } else {
            float dot = g0 * d0 + g1 * d1 + g2 * d2;
            dx[3 * i] = fromf<T>(g0 * (d0 - dot));
            dx[3 * i + 1] = fromf<T>(g1 * (d1 - dot));
            dx[3 * i + 2] = fromf<T>(g2 * (d2 - dot));
        }
    }
}

template <typename T>
__global__ void k_combine_fwd(T *o, const T *gate, const T *oc, const T *os, const T *ow, int64_t N, int H, int G, int D) {
    const int hpg = H / G;
    int64_t total = N * H * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t rh = u / D;
        int h = (int)(rh % H);
        int64_t r = rh / H;
        const T *br[3] = {oc, os, ow};
        float acc = 0;
#pragma unroll
        for (int b = 0; b < 3; b++) {
            if (!br[b]) continue;
            float w = gate ? tof(gate[(r * G + h / hpg) * 3 + b]) : 1.0f;
            acc += w * tof(br[b][u]);
        }
        o[u] = fromf<T>(acc);
    }
}
template <typename T>
__global__ void k_combine_bwd_do(T *dc, T *ds, T *dw, const T *dout, const T *gate, int64_t N, int H, int G, int D) {
    const int hpg = H / G;
    int64_t total = N * H * D;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int64_t rh = u / D;
        int h = (int)(rh % H);
        int64_t r = rh / H;
        float dy = tof(dout[u]);
        T *db[3] = {dc, ds, dw};
#pragma unroll
        for (int b = 0; b < 3; b++) {
            if (!db[b]) continue;
            float w = gate ? tof(gate[(r * G + h / hpg) * 3 + b]) : 1.0f;
            db[b][u] = fromf<T>(w * dy);
        }
    }
}
// a warp per (row, group): dgate[r,g,b] = sum over the group's heads and dims of dout * o_b
template <typename T>
__global__ void k_combine_bwd_dgate(T *dgate, const T *dout, const T *oc, const T *os, const T *ow, int64_t N, int H,
                                    int G, int D) {
    int64_t wg = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wg >= N * G) return;
    const int hpg = H / G;
    int64_t r = wg / G;
    int g = (int)(wg % G);
    int64_t base = (r * H + (int64_t)g * hpg) * D;
    const T *br[3] = {oc, os, ow};
    for (int b = 0; b < 3; b++) {
        float acc = 0;
        if (br[b])
            for (int e = lane; e < hpg * D; e += 32) acc += tof(dout[base + e]) * tof(br[b][base + e]);
        acc = warp_sum(acc);
        if (lane == 0) dgate[wg * 3 + b] = fromf<T>(acc);
    }
}

// The 16-byte versions (D % 8 == 0, every pointer 16-byte aligned), element for element the
// arithmetic above, so the same bits. k_combine_fwd_v8: 8 consecutive elements of one
// (row, head) a thread.
template <typename T>
__global__ void k_combine_fwd_v8(T *o, const T *gate, const T *oc, const T *os, const T *ow, int64_t N, int H, int G,
                                 int D) {
    const int hpg = H / G;
    const int64_t nv = N * H * D / 8;
    for (int64_t v = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; v < nv; v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t u = v * 8, rh = u / D;
        const int h = (int)(rh % H);
        const int64_t r = rh / H;
        const T *br[3] = {oc, os, ow};
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int b = 0; b < 3; b++) {
            if (!br[b]) continue;
            const float w = gate ? tof(gate[(r * G + h / hpg) * 3 + b]) : 1.0f;
            float x[8];
            ld8(br[b] + u, x);
#pragma unroll
            for (int k = 0; k < 8; k++) acc[k] += w * x[k];
        }
        st8(o + u, acc);
    }
}
// k_combine_bwd_do and k_combine_bwd_dgate in one pass: a warp per (row, group), the
// group's hpg D elements in chunks of 256 (8 a lane). do_b = w_b dout goes out from
// registers; for dgate each chunk of dout and o_b is copied to shared memory, where lane l
// adds the chunk's elements l, l + 32, ..., l + 224: over the chunks in turn exactly
// k_combine_bwd_dgate's per-lane order, then the same xor tree.
#define CMB_WARPS 8
template <typename T>
__global__ void __launch_bounds__(CMB_WARPS * 32)
    k_combine_bwd_v8(T *dc, T *ds, T *dw, T *dgate, const T *dout, const T *gate, const T *oc, const T *os,
                     const T *ow, int64_t N, int H, int G, int D) {
    __shared__ Pack8<T> sh[CMB_WARPS][4][32];   // [warp][dout, o_cmp, o_sel, o_win][lane]: one chunk
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t wg = blockIdx.x * (int64_t)CMB_WARPS + warp;   // (row, group)
    if (wg >= N * G) return;
    const int L = H / G * D;
    const int64_t base = wg * L;   // (r H + g hpg) D
    const T *br[3] = {oc, os, ow};
    T *db[3] = {dc, ds, dw};
    float w[3], acc[3] = {0, 0, 0};
#pragma unroll
    for (int b = 0; b < 3; b++) w[b] = gate ? tof(gate[wg * 3 + b]) : 1.0f;
    const T *chunk = (const T *)sh[warp];   // element i of array a: chunk[a * 256 + i]
    for (int c0 = 0; c0 < L; c0 += 256) {
        const int e = c0 + 8 * lane, n = L - c0 < 256 ? L - c0 : 256;
        if (e < L) {
            const Pack8<T> dy = *(const Pack8<T> *)(dout + base + e);
            if (dgate) sh[warp][0][lane] = dy;
#pragma unroll
            for (int b = 0; b < 3; b++) {
                if (dgate && br[b]) sh[warp][1 + b][lane] = *(const Pack8<T> *)(br[b] + base + e);
                if (!db[b]) continue;
                Pack8<T> d;
#pragma unroll
                for (int k = 0; k < 8; k++) d.v[k] = fromf<T>(w[b] * tof(dy.v[k]));
                *(Pack8<T> *)(db[b] + base + e) = d;
            }
        }
        if (!dgate) continue;
        __syncwarp();
#pragma unroll
        for (int b = 0; b < 3; b++)
            if (br[b])
                for (int i = lane; i < n; i += 32) acc[b] += tof(chunk[i]) * tof(chunk[(1 + b) * 256 + i]);
        __syncwarp();
    }
    if (!dgate) return;
#pragma unroll
    for (int b = 0; b < 3; b++) {
        const float a = warp_sum(acc[b]);
        if (lane == 0) dgate[wg * 3 + b] = fromf<T>(a);
    }
}

// ============================================================================================
// selection (Eq. 9 scores, group sum, forced blocks, top-n; ties to the lower index)
// ============================================================================================
// (cmp_visible, overlap_num: cuda_common.cuh)

// CTA per (t, g, b). Dynamic shared memory: wsum[NC] + score[NS] (double), q[hpg*D],
// lse[hpg] (float), taken[NS] (byte).
template <typename T>
__global__ void k_select(int32_t *sel_idx, const T *q, const T *Kc, const float *lse, AttnArgs a) {
    extern __shared__ double sm_d[];
    const int t = a.t0 + blockIdx.x, g = blockIdx.y, b = blockIdx.z, tid = threadIdx.x;
    const int hpg = a.hpg, D = a.D;
    double *wsum = sm_d, *score = sm_d + a.NC;
    float *qs = (float *)(score + a.NS), *ls = qs + hpg * D;
    unsigned char *taken = (unsigned char *)(ls + hpg);
    const int cur = t / a.lsel, nv = cmp_visible(t, a.l, a.d, a.NC);
    const int64_t row = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg;
    for (int i = tid; i < hpg * D; i += blockDim.x) qs[i] = tof(q[row * D + i]);
    for (int h = tid; h < hpg; h += blockDim.x) ls[h] = lse[row + h];
    __syncthreads();
    for (int i = tid; i < nv; i += blockDim.x) {
        const T *kc = Kc + (((int64_t)b * a.NC + i) * a.G + g) * D;
        double acc = 0;
        for (int h = 0; h < hpg; h++) {
            float dot = 0;
            for (int e = 0; e < D; e++) dot = fmaf(qs[h * D + e], tof(kc[e]), dot);
            acc += (double)expf(a.scale * dot - ls[h]);
        }
        wsum[i] = acc;
    }
    __syncthreads();
    for (int j = tid; j <= cur; j += blockDim.x) {
        int lo = j * a.lsel - a.l < 0 ? 0 : (j * a.lsel - a.l) / a.d + 1;
        int hi = ((j + 1) * a.lsel - 1) / a.d;
        if (hi > nv - 1) hi = nv - 1;
        double s = 0;
        for (int i = lo; i <= hi; i++) s += (double)overlap_num(i, j, a.l, a.d, a.lsel) / a.d * wsum[i];
        score[j] = s;
        taken[j] = (j == 0 || j >= cur - 1);
    }
    __syncthreads();
    if (tid >= 32) return;
    const int lane = tid;
    int nforced = cur == 0 ? 1 : cur == 1 ? 2 : 3;
    int chosen[64];   // only lane 0's copy is used; n <= 64 + 3 enforced by the launcher
    int nch = 0;
    for (int c = 0; c < a.n - nforced; c++) {
        int best = -1;
        double bs = 0;
        for (int j = 1 + lane; j <= cur - 2; j += 32)
            if (!taken[j] && (best < 0 || score[j] > bs)) { best = j; bs = score[j]; }
        for (int o = 16; o > 0; o >>= 1) {
            int ob = __shfl_xor_sync(0xffffffffu, best, o);
            double os = __shfl_xor_sync(0xffffffffu, bs, o);
            if (ob >= 0 && (best < 0 || os > bs || (os == bs && ob < best))) { best = ob; bs = os; }
        }
        if (best < 0) break;
        __syncwarp();   // every lane's reads of taken above happen before lane 0's write
        if (lane == 0) {
            taken[best] = 1;
            if (nch < 64) chosen[nch++] = best;
        }
        __syncwarp();
    }
    if (lane != 0) return;
    int list[72], m = 0;
    list[m++] = 0;
    if (cur >= 2) list[m++] = cur - 1;
    if (cur >= 1) list[m++] = cur;
    for (int c = 0; c < nch; c++) list[m++] = chosen[c];
    for (int i = 1; i < m; i++) {   // insertion sort, ascending
        int v = list[i], k = i - 1;
        while (k >= 0 && list[k] > v) { list[k + 1] = list[k]; k--; }
        list[k + 1] = v;
    }
    int32_t *out = sel_idx + (((int64_t)b * a.T + t) * a.G + g) * a.n;
    for (int c = 0; c < a.n; c++) out[c] = c < m ? list[c] : -1;
}

// ============================================================================================
// backward helpers
// ============================================================================================
// drow[r] = sum_e dO[r,e] O[r,e], 8 lanes per row
template <typename T> __global__ void k_drow(float *drow, const T *dout, const T *o, int64_t rows, int D) {
    int64_t r = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 3;
    int sub = threadIdx.x & 7;
    float acc = 0;
    if (r < rows)
        for (int e = sub; e < D; e += 8) acc += tof(dout[r * D + e]) * tof(o[r * D + e]);
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (r < rows && sub == 0) drow[r] = acc;
}

// Inverted selection index: for entry e = (b*G + g)*NS + j, the queries t (ascending)
// whose selection contains block j. Built through a membership bitmap bits[e][T/32]
// (bit t: t selected j): one integer atomicOr per selection entry sets it (OR is
// order-free, so the bitmap does not depend on the schedule), then a warp per entry
// counts its bits and, after the scan of the counts, writes its t in ascending order.
// Linear in T (scanning every query's selection row per block was quadratic).
__global__ void k_idx_bits_set(uint32_t *bits, const int32_t *sel, int B, int T_, int G, int NS, int n, int W) {
    const int64_t total = (int64_t)B * T_ * G * n;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        const int j = sel[u];
        if (j < 0) continue;
        const int64_t r = u / n;   // (b, t, g)
        const int g = (int)(r % G), t = (int)((r / G) % T_), b = (int)(r / ((int64_t)G * T_));
        atomicOr(bits + (((int64_t)b * G + g) * NS + j) * W + (t >> 5), 1u << (t & 31));
    }
}
// a warp per entry; fill = 0: cnt[e] = its bits; fill = 1: list[off[e] ..] = its t, ascending
__global__ void k_idx_bits_list(int32_t *cnt, const int32_t *off, int32_t *list, const uint32_t *bits, int E, int NS,
                                int lsel, int W, int fill) {
    const int e = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (e >= E) return;
    const uint32_t *row = bits + (int64_t)e * W;
    const int w0 = (e % NS) * lsel >> 5;   // no query before the block's first token selects it
    int base = fill ? off[e] : 0;
    for (int wb = w0; wb < W; wb += 32) {
        const int w = wb + lane;
        uint32_t m = w < W ? row[w] : 0u;
        const int c = __popc(m);
        int incl = c;   // inclusive prefix of the counts over the lanes
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        if (fill) {
            int at = base + incl - c;
            while (m) {
                const int bit = __ffs(m) - 1;
                list[at++] = w * 32 + bit;
                m &= m - 1;
            }
        }
        base += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (!fill && lane == 0) cnt[e] = base;
}

// exclusive scan of E ints by one block of 1024 threads; out[E] = total
__global__ void k_scan_excl(int32_t *out, const int32_t *in, int E) {
    __shared__ int sh[1024];
    int tid = threadIdx.x, seg = (E + 1023) / 1024;
    int lo = tid * seg, hi = lo + seg < E ? lo + seg : E;
    int s = 0;
    for (int i = lo; i < hi; i++) s += in[i];
    sh[tid] = s;
    __syncthreads();
    for (int o = 1; o < 1024; o <<= 1) {
        int v = tid >= o ? sh[tid - o] : 0;
        __syncthreads();
        sh[tid] += v;
        __syncthreads();
    }
    int run = sh[tid] - s;
    for (int i = lo; i < hi; i++) {
        out[i] = run;
        run += in[i];
    }
    if (tid == 1023) out[E] = sh[1023];
}

// key-chunk table of the tensor-core dK/dV kernel: entry e = (b*G + g)*NKC + kc
__global__ void k_chunk_build(int4 *chunks, int32_t *nrc, AttnArgs a, int br, int NKC) {
    int e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= a.B * a.G * NKC) return;
    int kc = e % NKC, bg = e / NKC;
    int kb, nk, rb, rows;
    if (br == BR_SEL) {
        int per = a.lsel / a.kt, j = kc / per, sub = kc % per;
        kb = j * a.lsel + sub * a.kt;
        nk = a.T - kb < a.kt ? a.T - kb : a.kt;
        rb = a.ioff[bg * a.NS + j];
        rows = nk > 0 ? a.icnt[bg * a.NS + j] : 0;
    } else if (br == BR_WIN) {
        kb = kc * a.kt;
        nk = a.T - kb < a.kt ? a.T - kb : a.kt;
        rb = kb;
        int tb = kb + nk - 1 + a.w;
        if (tb > a.T) tb = a.T;
        rows = tb - kb;
    } else {
        kb = kc * a.kt;
        nk = a.NC - kb < a.kt ? a.NC - kb : a.kt;
        rb = kb * a.d + a.l - 1;
        rows = a.T - rb;
    }
    if (nk <= 0 || rows < 0) rows = 0;
    if (nk < 0) nk = 0;
    int nrows = rows * a.hpg;
    chunks[e] = make_int4(kb, nk, rb, nrows);
    nrc[e] = dkdv_row_chunks(a, rb, nrows).count;
}

// dK/dV: add the partials of every key in ascending row-chunk order, once
template <typename T> __global__ void k_reduce_parts(T *dk, T *dv, AttnArgs a, int br, int NKC) {
    int64_t total = (int64_t)a.B * a.NK * a.G * a.D;
    const int KT = a.kt;
    for (int64_t u = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; u < total; u += (int64_t)gridDim.x * blockDim.x) {
        int e = (int)(u % a.D);
        int64_t r = u / a.D;
        int g = (int)(r % a.G);
        r /= a.G;
        int s = (int)(r % a.NK), b = (int)(r / a.NK);
        int kc, kl;
        if (br == BR_SEL) {
            int j = s / a.lsel, within = s % a.lsel;
            kc = j * (a.lsel / KT) + within / KT;
            kl = within % KT;
        } else {
            kc = s / KT;
            kl = s % KT;
        }
        int ent = (b * a.G + g) * NKC + kc;
        const int4 ch = a.chunks[ent];
        const int nrc = dkdv_row_chunks(a, ch.z, ch.w).count;
        if (nrc == 0) continue;
        int base = a.chunk_part[ent];
        float sk = 0, sv = 0;
        for (int c = 0; c < nrc; c++) {
            const float *p = a.part + (int64_t)(base + c) * 2 * KT * a.D;
            sk += p[kl * a.D + e];
            sv += p[(int64_t)KT * a.D + kl * a.D + e];
        }
        dk[u] = fromf<T>(tof(dk[u]) + sk);
        dv[u] = fromf<T>(tof(dv[u]) + sv);
    }
}

// ============================================================================================
// simple attention kernels: a warp per query row (fwd, dq) or per key (dK/dV)
// ============================================================================================
#define SMAXD 8   // dims per lane: D <= 256
template <typename T> __device__ __forceinline__ void ldrow(float *r, const T *p, int D, int lane) {
#pragma unroll
    for (int u = 0; u < SMAXD; u++) r[u] = lane + 32 * u < D ? tof(p[lane + 32 * u]) : 0.f;
}
template <typename T> __device__ __forceinline__ float wdot(const float *r, const T *p, int D, int lane) {
    float s = 0;
#pragma unroll
    for (int u = 0; u < SMAXD; u++)
        if (lane + 32 * u < D) s += r[u] * tof(p[lane + 32 * u]);
    return warp_sum(s);
}

// calls f(s) for every key of query (b, t, group g) in ascending order (warp-uniform)
template <class F> __device__ __forceinline__ void for_keys(const AttnArgs &a, int br, int b, int t, int g, F &f) {
    if (br == BR_CMP) {
        int nv = cmp_visible(t, a.l, a.d, a.NC);
        for (int i = 0; i < nv; i++) f(i);
    } else if (br == BR_WIN) {
        int lo = t - a.w + 1 > 0 ? t - a.w + 1 : 0;
        for (int s = lo; s <= t; s++) f(s);
    } else {
        const int32_t *row = a.sel + (((int64_t)b * a.T + t) * a.G + g) * a.n;
        for (int c = 0; c < a.n; c++) {
            int j = row[c];
            if (j < 0) continue;
            int s0 = j * a.lsel, s1 = s0 + a.lsel < t + 1 ? s0 + a.lsel : t + 1;
            for (int s = s0; s < s1; s++) f(s);
        }
    }
}

template <typename T> struct FMax {
    const float *q; const T *K; int64_t ks; int D, lane; float sc, m;
    __device__ void operator()(int s) { m = fmaxf(m, sc * wdot(q, K + s * ks, D, lane)); }
};
template <typename T> struct FAcc {
    const float *q; const T *K, *V; int64_t ks; int D, lane; float sc, m, l; float o[SMAXD];
    __device__ void operator()(int s) {
        float p = expf(sc * wdot(q, K + s * ks, D, lane) - m);
        l += p;
#pragma unroll
        for (int u = 0; u < SMAXD; u++)
            if (lane + 32 * u < D) o[u] += p * tof(V[s * ks + lane + 32 * u]);
    }
};
template <typename T> struct FDq {
    const float *q, *dy; const T *K, *V; int64_t ks; int D, lane; float sc, lse, drow; float acc[SMAXD];
    __device__ void operator()(int s) {
        float p = expf(sc * wdot(q, K + s * ks, D, lane) - lse);
        float dp = wdot(dy, V + s * ks, D, lane);
        float ds = p * (dp - drow);
#pragma unroll
        for (int u = 0; u < SMAXD; u++)
            if (lane + 32 * u < D) acc[u] += ds * tof(K[s * ks + lane + 32 * u]);
    }
};

template <typename T> __global__ void k_simple_fwd(AttnArgs a, int br) {
    int64_t wr = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wr >= (int64_t)a.B * a.Tn * a.H) return;
    int h = (int)(wr % a.H), t = a.t0 + (int)((wr / a.H) % a.Tn), b = (int)(wr / ((int64_t)a.H * a.Tn));
    int g = h / a.hpg;
    const int64_t row = ((int64_t)b * a.T + t) * a.H + h;
    const int64_t ks = (int64_t)a.G * a.D;
    const T *K = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * a.D;
    const T *V = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * a.D;
    float qr[SMAXD];
    ldrow(qr, (const T *)a.q + row * a.D, a.D, lane);
    FMax<T> fm = {qr, K, ks, a.D, lane, a.scale, -INFINITY};
    for_keys(a, br, b, t, g, fm);
    T *o = (T *)a.o + row * a.D;
    if (fm.m == -INFINITY) {   // no visible key
#pragma unroll
        for (int u = 0; u < SMAXD; u++)
            if (lane + 32 * u < a.D) o[lane + 32 * u] = fromf<T>(0.f);
        if (lane == 0) {
            ((T *)a.lse)[row] = fromf<T>(-INFINITY);
            if (a.lse32) a.lse32[row] = -INFINITY;
        }
        return;
    }
    FAcc<T> fa;
    fa.q = qr; fa.K = K; fa.V = V; fa.ks = ks; fa.D = a.D; fa.lane = lane; fa.sc = a.scale; fa.m = fm.m; fa.l = 0;
#pragma unroll
    for (int u = 0; u < SMAXD; u++) fa.o[u] = 0;
    for_keys(a, br, b, t, g, fa);
#pragma unroll
    for (int u = 0; u < SMAXD; u++)
        if (lane + 32 * u < a.D) o[lane + 32 * u] = fromf<T>(fa.o[u] / fa.l);
    if (lane == 0) {
        float lse = fm.m + logf(fa.l);
        ((T *)a.lse)[row] = fromf<T>(lse);
        if (a.lse32) a.lse32[row] = lse;
    }
}

template <typename T> __global__ void k_simple_dq(AttnArgs a, int br) {
    int64_t wr = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wr >= (int64_t)a.B * a.T * a.H) return;
    int h = (int)(wr % a.H), t = (int)((wr / a.H) % a.T), b = (int)(wr / ((int64_t)a.H * a.T));
    int g = h / a.hpg;
    const int64_t row = ((int64_t)b * a.T + t) * a.H + h;
    float lse = a.lse_in[row];
    if (lse == -INFINITY) return;
    const int64_t ks = (int64_t)a.G * a.D;
    FDq<T> f;
    float qr[SMAXD], dyr[SMAXD];
    ldrow(qr, (const T *)a.q + row * a.D, a.D, lane);
    ldrow(dyr, (const T *)a.dout + row * a.D, a.D, lane);
    f.q = qr; f.dy = dyr;
    f.K = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * a.D;
    f.V = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * a.D;
    f.ks = ks; f.D = a.D; f.lane = lane; f.sc = a.scale; f.lse = lse; f.drow = a.drow[row];
#pragma unroll
    for (int u = 0; u < SMAXD; u++) f.acc[u] = 0;
    for_keys(a, br, b, t, g, f);
    T *dq = (T *)a.dq + row * a.D;
#pragma unroll
    for (int u = 0; u < SMAXD; u++)
        if (lane + 32 * u < a.D) dq[lane + 32 * u] = fromf<T>(tof(dq[lane + 32 * u]) + a.scale * f.acc[u]);
}

// a warp per (b, key s, g): every query row (t, h) that sees key s, t ascending
template <typename T> __global__ void k_simple_dkdv(AttnArgs a, int br) {
    int64_t wk = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
    int lane = threadIdx.x & 31;
    if (wk >= (int64_t)a.B * a.NK * a.G) return;
    int g = (int)(wk % a.G), s = (int)((wk / a.G) % a.NK), b = (int)(wk / ((int64_t)a.G * a.NK));
    const int64_t ks = (int64_t)a.G * a.D;
    const int64_t kro = ((int64_t)b * a.NK + s) * ks + (int64_t)g * a.D;
    float kr[SMAXD], vr[SMAXD], dk[SMAXD], dv[SMAXD];
    ldrow(kr, (const T *)a.k + kro, a.D, lane);
    ldrow(vr, (const T *)a.v + kro, a.D, lane);
#pragma unroll
    for (int u = 0; u < SMAXD; u++) dk[u] = dv[u] = 0;
    int n_t, t_first;
    const int32_t *list = NULL;
    if (br == BR_WIN) {
        t_first = s;
        int tl = s + a.w - 1 < a.T - 1 ? s + a.w - 1 : a.T - 1;
        n_t = tl - s + 1;
    } else if (br == BR_CMP) {
        t_first = s * a.d + a.l - 1;
        n_t = a.T - t_first;
    } else {
        int ent = (b * a.G + g) * a.NS + s / a.lsel;
        list = a.ilist + a.ioff[ent];
        n_t = a.icnt[ent];
        t_first = 0;
    }
    for (int it = 0; it < n_t; it++) {
        int t = list ? list[it] : t_first + it;
        if (t < s) continue;   // sel: key after the query inside the current block
        for (int hh = 0; hh < a.hpg; hh++) {
            const int64_t row = ((int64_t)b * a.T + t) * a.H + (int64_t)g * a.hpg + hh;
            float lse = a.lse_in[row];
            if (lse == -INFINITY) continue;
            const T *qp = (const T *)a.q + row * a.D, *dyp = (const T *)a.dout + row * a.D;
            float p = expf(a.scale * wdot(kr, qp, a.D, lane) - lse);
            float dp = wdot(vr, dyp, a.D, lane);
            float ds = p * (dp - a.drow[row]);
#pragma unroll
            for (int u = 0; u < SMAXD; u++)
                if (lane + 32 * u < a.D) {
                    dk[u] += ds * tof(qp[lane + 32 * u]);
                    dv[u] += p * tof(dyp[lane + 32 * u]);
                }
        }
    }
    T *dkp = (T *)a.dk + kro, *dvp = (T *)a.dv + kro;
#pragma unroll
    for (int u = 0; u < SMAXD; u++)
        if (lane + 32 * u < a.D) {
            dkp[lane + 32 * u] = fromf<T>(tof(dkp[lane + 32 * u]) + a.scale * dk[u]);
            dvp[lane + 32 * u] = fromf<T>(tof(dvp[lane + 32 * u]) + dv[u]);
        }
}

// ============================================================================================
// launchers
// ============================================================================================
static AttnArgs make_args(const NsaGeom *g, int NK, int t0, int Tn) {
    AttnArgs a;
    memset(&a, 0, sizeof a);
    a.B = g->B; a.T = g->T; a.H = g->H; a.G = g->G; a.D = g->D; a.hpg = g->H / g->G; a.NK = NK;
    a.l = g->l; a.d = g->d; a.lsel = g->lsel; a.n = g->n; a.w = g->w; a.NC = g->NC; a.NS = g->NS;
    a.t0 = t0; a.Tn = Tn;
    a.scale = (float)g->scale;
    a.scale_log2 = (float)(g->scale * 1.4426950408889634);
    return a;
}

extern "C" void nsa_cuda_compress_avg_fwd(int dt, void *Kc, const void *k, const NsaGeom *g, int i0, int Ni) {
    int64_t total = (int64_t)g->B * Ni * g->G * g->D;
    if (total <= 0) return;
    DISPATCH_DT(dt, T, k_compress_avg_fwd<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                           (T *)Kc, (const T *)k, g->B, g->T, g->G, g->D, g->l, g->d, g->NC, i0, Ni));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_compress_avg_bwd(int dt, void *dk, const void *dKc, const NsaGeom *g) {
    int64_t total = (int64_t)g->B * g->T * g->G * g->D;
    if (total <= 0 || g->NC <= 0) return;
    if (g->D % 8 == 0 && nsa_aligned16(dk) && nsa_aligned16(dKc)) {
        DISPATCH_DT(dt, T, k_compress_avg_bwd_v8<T><<<nsa_blocks(total / 8, 256), 256, 0, NSA_STREAM>>>(
                               (T *)dk, (const T *)dKc, g->B, g->T, g->G, g->D, g->l, g->d, g->NC));
        CUDA_LAUNCHED();
        return;
    }
    DISPATCH_DT(dt, T, k_compress_avg_bwd<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                           (T *)dk, (const T *)dKc, g->B, g->T, g->G, g->D, g->l, g->d, g->NC));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_block_gather_fwd(int dt, void *X, const void *k, const void *pe, const NsaGeom *g, int i0, int Ni) {
    int64_t total = (int64_t)g->B * Ni * g->G * g->l * g->D;
    if (total <= 0) return;
    DISPATCH_DT(dt, T, k_gather_fwd<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                           (T *)X, (const T *)k, (const float *)pe, g->B, g->T, g->G, g->D, g->l, g->d, g->NC, i0, Ni));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_block_gather_bwd(int dt, void *dk, void *dpe, const void *dX, const NsaGeom *g) {
    int64_t total = (int64_t)g->B * g->T * g->G * g->D;
    if (total <= 0 || g->NC <= 0) return;
    DISPATCH_DT(dt, T, k_gather_bwd_dk<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                           (T *)dk, (const T *)dX, g->B, g->T, g->G, g->D, g->l, g->d, g->NC));
    CUDA_LAUNCHED();
    if (dpe) nsa_cuda_colsum_acc(dt, (float *)dpe, dX, (int64_t)g->B * g->NC * g->G, g->l * g->D);
}

extern "C" void nsa_cuda_gate_act_fwd(int dt, void *gate, const void *logits, int64_t NG, int act) {
    if (NG <= 0) return;
    DISPATCH_DT(dt, T, k_gate_fwd<T><<<nsa_blocks(NG, 256), 256, 0, NSA_STREAM>>>((T *)gate, (const T *)logits, NG, act));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_gate_act_bwd(int dt, void *dlogits, const void *dgate, const void *gate, int64_t NG, int act) {
    if (NG <= 0) return;
    DISPATCH_DT(dt, T, k_gate_bwd<T><<<nsa_blocks(NG, 256), 256, 0, NSA_STREAM>>>((T *)dlogits, (const T *)dgate,
                                                                                (const T *)gate, NG, act));
    CUDA_LAUNCHED();
}
// the 16-byte kernels apply: D % 8 == 0 and the pointers (NULL allowed) 16-byte aligned (the
// gate and dgate are accessed one element at a time)
static int combine_v8(int D, const void *a, const void *b, const void *c, const void *d, const void *e) {
    return D % 8 == 0 && nsa_aligned16(a) && nsa_aligned16(b) && nsa_aligned16(c) && nsa_aligned16(d) &&
           nsa_aligned16(e);
}
extern "C" void nsa_cuda_combine_fwd(int dt, void *o, const void *gate, const void *o_cmp, const void *o_sel,
                                     const void *o_win, int64_t N, int H, int G, int D) {
    int64_t total = N * H * D;
    if (total <= 0) return;
    if (combine_v8(D, o, o_cmp, o_sel, o_win, NULL))
        DISPATCH_DT(dt, T, k_combine_fwd_v8<T><<<nsa_blocks(total / 8, 256), 256, 0, NSA_STREAM>>>(
                               (T *)o, (const T *)gate, (const T *)o_cmp, (const T *)o_sel, (const T *)o_win, N, H, G, D));
    else
        DISPATCH_DT(dt, T, k_combine_fwd<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                               (T *)o, (const T *)gate, (const T *)o_cmp, (const T *)o_sel, (const T *)o_win, N, H, G, D));
    CUDA_LAUNCHED();
}
extern "C" void nsa_cuda_combine_bwd(int dt, void *do_cmp, void *do_sel, void *do_win, void *dgate, const void *dout,
                                     const void *gate, const void *o_cmp, const void *o_sel, const void *o_win, int64_t N,
                                     int H, int G, int D) {
    int64_t total = N * H * D;
    if (total <= 0) return;
    if (combine_v8(D, do_cmp, do_sel, do_win, dout, NULL) && combine_v8(D, o_cmp, o_sel, o_win, NULL, NULL)) {
        const int64_t warps = N * G;
        DISPATCH_DT(dt, T, k_combine_bwd_v8<T><<<(unsigned)((warps + CMB_WARPS - 1) / CMB_WARPS), CMB_WARPS * 32, 0,
                                                 NSA_STREAM>>>((T *)do_cmp, (T *)do_sel, (T *)do_win, (T *)dgate,
                                                               (const T *)dout, (const T *)gate, (const T *)o_cmp,
                                                               (const T *)o_sel, (const T *)o_win, N, H, G, D));
        CUDA_LAUNCHED();
        return;
    }
    DISPATCH_DT(dt, T, k_combine_bwd_do<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>(
                           (T *)do_cmp, (T *)do_sel, (T *)do_win, (const T *)dout, (const T *)gate, N, H, G, D));
    CUDA_LAUNCHED();
    if (!dgate) return;
    int64_t warps = N * G;
    DISPATCH_DT(dt, T, k_combine_bwd_dgate<T><<<(unsigned)((warps + 7) / 8), 256, 0, NSA_STREAM>>>(
                           (T *)dgate, (const T *)dout, (const T *)o_cmp, (const T *)o_sel, (const T *)o_win, N, H, G, D));
    CUDA_LAUNCHED();
}

static int use_mma(int dt, const NsaGeom *g, int br, const void *p0, const void *p1, const void *p2, const void *p3,
                   const void *p4);
// the tensor-core kernels exist for head_dim 16, 64 and 128 (use_mma checks): calls
// f(std::integral_constant<int, D>) with the head dimension as a compile-time constant
template <typename F> static void by_head_dim(int D, F f) {
    if (D == 16) f(std::integral_constant<int, 16>());
    else if (D == 64) f(std::integral_constant<int, 64>());
    else f(std::integral_constant<int, 128>());
}
template <typename T> static void mma_sel_T(const AttnArgs &a, int32_t *sel) {
    by_head_dim(a.D, [&](auto d) { mma_select<T, decltype(d)::value>(a, sel); });
}

extern "C" void nsa_cuda_select_blocks(int dt, int32_t *sel_idx, const void *q, const void *Kc, const void *lse,
                                       const NsaGeom *g, int t0, int Tn) {
    if (g->B <= 0 || Tn <= 0) return;
    if (g->n > 64 + 3) nsa_cuda_fail("select_blocks", "n > 67 selected blocks is not supported", __FILE__, __LINE__);
    AttnArgs a = make_args(g, g->NC, t0, Tn);
    const float *l32 = nsa_cuda_stat_read(dt, lse, (int64_t)g->B * g->T * g->H, SCR_STAT0);
    if (use_mma(dt, g, BR_CMP, q, Kc, q, q, q) && a.hpg <= 64 && g->NS <= 2048 && g->n <= 67) {
        a.q = q; a.k = Kc; a.lse_in = l32;
        if (dt == NSA_DT_BF16) mma_sel_T<bf16>(a, sel_idx);
        else mma_sel_T<f16>(a, sel_idx);
        return;
    }
    size_t smem = (size_t)(g->NC + g->NS) * 8 + (size_t)a.hpg * g->D * 4 + (size_t)a.hpg * 4 + (size_t)g->NS + 16;
    dim3 grid(Tn, g->G, g->B);
    DISPATCH_DT(dt, T, {
        if (smem > 48 * 1024) cudaCheck(cudaFuncSetAttribute(k_select<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        k_select<T><<<grid, 128, smem, NSA_STREAM>>>(sel_idx, (const T *)q, (const T *)Kc, l32, a);
    });
    CUDA_LAUNCHED();
}

// ---- attention dispatch -----------------------------------------------------------------------
static int use_mma(int dt, const NsaGeom *g, int br, const void *p0, const void *p1, const void *p2, const void *p3,
                   const void *p4) {
    if (dt == NSA_DT_F32 || g_nsa_cuda.attn_impl == 1) return 0;
    if (!(g->D == 16 || g->D == 64 || g->D == 128)) return 0;
    if (br == BR_SEL && (g->lsel % 16)) return 0;
    return nsa_aligned16(p0) && nsa_aligned16(p1) && nsa_aligned16(p2) && nsa_aligned16(p3) && nsa_aligned16(p4);
}

extern "C" int nsa_cuda_sel_tile_positions(int dt, const NsaGeom *g) {
    const int hpg = g->H / g->G;
    if (!use_mma(dt, g, BR_SEL, NULL, NULL, NULL, NULL, NULL)) return 1;   // the simple kernels: a row each
    if (nsa_sel_fwd_rows_on(hpg, g->D, g->lsel, g->NS, g->n)) return rows_geom(hpg).BQ;
    return nsa_sel_pack_on(hpg, g->n) ? 2 : 1;
}

template <typename T> static void mma_fwd(const AttnArgs &a, int br) {
    by_head_dim(a.D, [&](auto d) { mma_attn_fwd<T, decltype(d)::value>(a, br); });
}
template <typename T> static void mma_dq(const AttnArgs &a, int br) {
    by_head_dim(a.D, [&](auto d) { mma_attn_dq<T, decltype(d)::value>(a, br); });
}
template <typename T> static void mma_dkdv(const AttnArgs &a, int br) {
    by_head_dim(a.D, [&](auto d) { mma_attn_dkdv<T, decltype(d)::value>(a, br); });
}

static void attn_fwd(int dt, int br, void *o, void *lse, const void *q, const void *k, const void *v,
                     const int32_t *sel, const NsaGeom *g, int NK, int t0, int Tn) {
    if (g->B <= 0 || Tn <= 0) return;
    AttnArgs a = make_args(g, NK, t0, Tn);
    a.q = q; a.k = k; a.v = v; a.o = o; a.lse = lse; a.sel = sel;
    a.lse32 = nsa_cuda_stat_write(dt, lse);
    if (use_mma(dt, g, br, q, k, v, o, NULL)) {
        if (dt == NSA_DT_BF16) mma_fwd<bf16>(a, br);
        else mma_fwd<f16>(a, br);
        return;
    }
    if (g->D > 32 * SMAXD) nsa_cuda_fail("attention", "head_dim > 256 is not supported", __FILE__, __LINE__);
    int64_t warps = (int64_t)g->B * Tn * g->H;
    DISPATCH_DT(dt, T, k_simple_fwd<T><<<(unsigned)((warps + 3) / 4), 128, 0, NSA_STREAM>>>(a, br));
    CUDA_LAUNCHED();
}

static void build_index(AttnArgs &a) {
    const int E = a.B * a.G * a.NS, W = (a.T + 31) / 32;
    int32_t *cnt = (int32_t *)nsa_cuda_scratch(SCR_IDX_CNT, (size_t)E * 4 + 16);
    int32_t *off = (int32_t *)nsa_cuda_scratch(SCR_IDX_OFF, (size_t)(E + 1) * 4 + 16);
    int32_t *list = (int32_t *)nsa_cuda_scratch(SCR_IDX_LIST, (size_t)a.B * a.T * a.G * a.n * 4 + 16);
    uint32_t *bits = (uint32_t *)nsa_cuda_scratch(SCR_IDX_BITS, (size_t)E * W * 4 + 16);
    cudaCheck(cudaMemsetAsync(bits, 0, (size_t)E * W * 4, NSA_STREAM));
    const int64_t entries = (int64_t)a.B * a.T * a.G * a.n;
    k_idx_bits_set<<<nsa_blocks(entries, 256), 256, 0, NSA_STREAM>>>(bits, a.sel, a.B, a.T, a.G, a.NS, a.n, W);
    CUDA_LAUNCHED();
    k_idx_bits_list<<<(E + 3) / 4, 128, 0, NSA_STREAM>>>(cnt, NULL, NULL, bits, E, a.NS, a.lsel, W, 0);
    CUDA_LAUNCHED();
    k_scan_excl<<<1, 1024, 0, NSA_STREAM>>>(off, cnt, E);
    CUDA_LAUNCHED();
    k_idx_bits_list<<<(E + 3) / 4, 128, 0, NSA_STREAM>>>(cnt, off, list, bits, E, a.NS, a.lsel, W, 1);
    CUDA_LAUNCHED();
    a.icnt = cnt; a.ioff = off; a.ilist = list;
}

static void attn_bwd(int dt, int br, void *dq, void *dk, void *dv, const void *dout, const void *q, const void *k,
                     const void *v, const void *o, const void *lse, const int32_t *sel, const NsaGeom *g, int NK) {
    if (g->B <= 0 || g->T <= 0 || NK <= 0) return;
    AttnArgs a = make_args(g, NK, 0, g->T);
    a.q = q; a.k = k; a.v = v; a.dout = dout; a.dq = dq; a.dk = dk; a.dv = dv; a.sel = sel;
    const int64_t rows = (int64_t)g->B * g->T * g->H;
    a.lse_in = nsa_cuda_stat_read(dt, lse, rows, SCR_STAT0);
    float *drow = (float *)nsa_cuda_scratch(SCR_DROW, (size_t)rows * 4);
    const bool mma = use_mma(dt, g, br, q, k, v, dout, dq) && nsa_aligned16(dk) && nsa_aligned16(dv);
    if (mma && nsa_aligned16(dout) && nsa_aligned16(o)) {
        // the dQ kernels work out each row's Drow as they take the row (row_drow: k_drow's sums)
        // and write it for dK/dV: one read of dO and O fewer
        a.drow_out = drow;
        a.o = const_cast<void *>(o);
    } else {
        DISPATCH_DT(dt, T, k_drow<T><<<(unsigned)((rows * 8 + 255) / 256), 256, 0, NSA_STREAM>>>(drow, (const T *)dout,
                                                                                               (const T *)o, rows, g->D));
        CUDA_LAUNCHED();
    }
    a.drow = drow;
    if (br == BR_SEL) build_index(a);
    if (mma) {
        // dQ: query-centric, recomputing P and dP
        if (dt == NSA_DT_BF16) mma_dq<bf16>(a, br);
        else mma_dq<f16>(a, br);
        // dK/dV: key-centric over key chunks x row chunks, partials reduced in order
        a.kt = br == BR_SEL ? (g->lsel % 64 == 0 ? 64 : 16) : nsa_dkdv_ws_on(g->D) ? 128 : 64;
        const int NKC = br == BR_SEL ? g->NS * (g->lsel / a.kt) : (NK + a.kt - 1) / a.kt;
        const int E = g->B * g->G * NKC;
        a.nentries = E;
        // upper bound of the rows the key chunks see, all entries together
        int64_t bound_rows;
        if (br == BR_SEL) bound_rows = (int64_t)g->B * g->T * g->G * g->n * a.hpg * (g->lsel / a.kt);
        else if (br == BR_WIN) bound_rows = (int64_t)E * (a.kt + g->w) * a.hpg;
        else bound_rows = (int64_t)E * g->T * a.hpg;
        // rows per partial (a key-centric CTA walks its rows serially): long enough to bound
        // the partial buffers at long sequences (<= 64 partials an entry: T hpg / 64 rows,
        // >= 1024), short enough that the CTAs fill the GPU where the call has few rows in
        // all (about 512 of them, >= 128 rows each: the compressed branch at batch 1 had 48
        // CTAs of 1024 rows). A function of the shape only.
        int rch_max = (g->T * a.hpg / 64 + 31) / 32 * 32;
        rch_max = rch_max < 1024 ? 1024 : rch_max;
        int64_t rch = (bound_rows / 512 + 31) / 32 * 32;
        rch = rch < 128 ? 128 : rch > rch_max ? rch_max : rch;
        a.rch = (int)rch;
        // row chunks at the group's multiples of rch where the entries' rows are long runs of
        // positions (the compressed branch, a window of at least 4 chunks, the dense causal
        // attention), on the warp-specialised kernel (D 128; NSA_CUDA_DKDV_ALIGN=2: on the
        // 64-key kernel too); the partials' bounds move, so the bits of dK/dV there differ from
        // chunks taken from each entry's first row
        a.rows_abs = (g_nsa_cuda.dkdv_align == 2 || (g_nsa_cuda.dkdv_align == 1 && a.kt == 128)) && br != BR_SEL &&
                     a.kt >= 64 && bound_rows >= (int64_t)E * 4 * rch;
        int4 *chunks = (int4 *)nsa_cuda_scratch(SCR_CHUNKS, (size_t)E * sizeof(int4) + 16);
        int32_t *nrcb = (int32_t *)nsa_cuda_scratch(SCR_RED0, (size_t)(2 * E + 2) * 4);
        int32_t *npart = nrcb + E;   // exclusive scan of nrc, [E+1]
        a.chunks = chunks;
        k_chunk_build<<<(E + 127) / 128, 128, 0, NSA_STREAM>>>(chunks, nrcb, a, br, NKC);
        CUDA_LAUNCHED();
        k_scan_excl<<<1, 1024, 0, NSA_STREAM>>>(npart, nrcb, E);
        CUDA_LAUNCHED();
        a.chunk_part = npart;
        // upper bound of the number of partials (host side, no synchronisation)
        int64_t bound = (a.rows_abs ? 2 * E : E) + bound_rows / a.rch + 1;
        a.part = (float *)nsa_cuda_scratch(SCR_PART, (size_t)bound * 2 * a.kt * g->D * 4);
        if (dt == NSA_DT_BF16) mma_dkdv<bf16>(a, br);
        else mma_dkdv<f16>(a, br);
        int64_t total = (int64_t)g->B * NK * g->G * g->D;
        DISPATCH_DT(dt, T, k_reduce_parts<T><<<nsa_blocks(total, 256), 256, 0, NSA_STREAM>>>((T *)dk, (T *)dv, a, br, NKC));
        CUDA_LAUNCHED();
        return;
    }
    if (g->D > 32 * SMAXD) nsa_cuda_fail("attention", "head_dim > 256 is not supported", __FILE__, __LINE__);
    int64_t warps = (int64_t)g->B * g->T * g->H;
    DISPATCH_DT(dt, T, k_simple_dq<T><<<(unsigned)((warps + 3) / 4), 128, 0, NSA_STREAM>>>(a, br));
    CUDA_LAUNCHED();
    warps = (int64_t)g->B * NK * g->G;
    DISPATCH_DT(dt, T, k_simple_dkdv<T><<<(unsigned)((warps + 3) / 4), 128, 0, NSA_STREAM>>>(a, br));
    CUDA_LAUNCHED();
}

extern "C" void nsa_cuda_cmp_attn_fwd(int dt, void *o, void *lse, const void *q, const void *Kc, const void *Vc,
                                      const NsaGeom *g, int t0, int Tn) {
    attn_fwd(dt, BR_CMP, o, lse, q, Kc, Vc, NULL, g, g->NC, t0, Tn);
}
extern "C" void nsa_cuda_cmp_attn_bwd(int dt, void *dq, void *dKc, void *dVc, const void *dout, const void *q,
                                      const void *Kc, const void *Vc, const void *o, const void *lse, const NsaGeom *g) {
    attn_bwd(dt, BR_CMP, dq, dKc, dVc, dout, q, Kc, Vc, o, lse, NULL, g, g->NC);
}
extern "C" void nsa_cuda_sel_attn_fwd(int dt, void *o, void *lse, const void *q, const void *k, const void *v,
                                      const int32_t *sel_idx, const NsaGeom *g, int t0, int Tn) {
    attn_fwd(dt, BR_SEL, o, lse, q, k, v, sel_idx, g, g->T, t0, Tn);
}
extern "C" void nsa_cuda_sel_attn_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                      const void *k, const void *v, const void *o, const void *lse,
                                      const int32_t *sel_idx, const NsaGeom *g) {
    attn_bwd(dt, BR_SEL, dq, dk, dv, dout, q, k, v, o, lse, sel_idx, g, g->T);
}
extern "C" void nsa_cuda_win_attn_fwd(int dt, void *o, void *lse, const void *q, const void *k, const void *v,
                                      const NsaGeom *g, int t0, int Tn) {
    attn_fwd(dt, BR_WIN, o, lse, q, k, v, NULL, g, g->T, t0, Tn);
}
extern "C" void nsa_cuda_win_attn_bwd(int dt, void *dq, void *dk, void *dv, const void *dout, const void *q,
                                      const void *k, const void *v, const void *o, const void *lse, const NsaGeom *g) {
    attn_bwd(dt, BR_WIN, dq, dk, dv, dout, q, k, v, o, lse, NULL, g, g->T);
}
