// kernels/cuda/attn_dq.cu — dQ of the attention backward of the three NSA branches on tensor
// cores, then its launcher: P and dP recomputed from the saved log-sum-exp, dS = P (dP - Drow),
// dQ += scale dS K accumulated in registers and added to dq (one owner per element: no
// atomics).
//
//  k_rows_dq (compressed, window; selection where nsa_sel_rows_on): 64 query rows a CTA
//    (attn_rows.cuh) walking its keys in 64-key chunks.
//  k_sel_dq (selection): a CTA per 16-row selection tile (attn_sel.cuh), the 4 warps splitting
//    the selected blocks, their dQ partials added in warp order.
// Instantiated for bf16/fp16 and D 16, 64, 128.
#include "kernels/cuda/attn_pass.cuh"
#include "kernels/cuda/attn_rows.cuh"
#include "kernels/cuda/attn_sel.cuh"

// ============================================================================================
// rows kernel
// ============================================================================================
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
    rows_tile_load<T, D, WG>(Qs, (const T *)a.q, Ys, (const T *)a.dout, a, rg, b, g, hb, tbase, tend);
    int t_last = tbase + rg.BQ - 1 < tend - 1 ? tbase + rg.BQ - 1 : tend - 1;
    int kstart, kend;
    rows_keys<BR>(a, tbase, t_last, kstart, kend);
    const RowsChunks<BR> ch = rows_chunks<BR>(a, b, g, tbase, t_last, kstart, kend, smem_raw + rows_dq_smem<D, WG>());
    const int nchunks = ch.n;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    // K and V chunk kb.. into buffer buf
    auto load_chunk = [&](int buf, int kb) {
        kv_tile_load<T, D, WG, ROWS_KC, 128>(Ks + buf * ROWS_KC * QP, Kg, Vs + buf * ROWS_KC * QP, Vg, ks, kb, kend, tid);
    };
    if (nchunks > 0) load_chunk(0, ch.kb(0));
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};
    const float l2r[2] = {lse2[r0], lse2[r0 + 8]}, drr[2] = {drw[r0], drw[r0 + 8]};

    float dqa[NDT][4];
    acc_zero(dqa);
    uint32_t qf[NKS][4], yf[NKS][4];

    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_chunk(buf ^ 1, ch.kb(c + 1));
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const uint64_t pm = ch.pm(c);
        if (!WG && c == 0) {
            frags_a<NKS, DP>(qf, Qs, warp * 16, lane);
            frags_a<NKS, DP>(yf, Ys, warp * 16, lane);
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
                warp_abT2<T, NKS, KH / 8, DP>(s, qf, Kb, dp, yf, Vb, half * 32, lane);
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
// selection tiles
// ============================================================================================
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
    sel_rows_load<T, D, 128>(Qs, (const T *)a.q, Ys, (const T *)a.dout, a, st, b, g, tid);
    cp_commit();
    if (tid == 0) sel_union<PACK>(a, st, b, g, ul, uf, &nu_s);
    cp_wait<0>();
    __syncthreads();
    uint32_t qf[NKS][4], yf[NKS][4];
    frags_a<NKS, DP>(qf, Qs, 0, lane);
    frags_a<NKS, DP>(yf, Ys, 0, lane);
    float l2r[2], drr[2];
    bool rv[2];
    const int tr[2] = {st.t[0], st.t[1]};
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t R;
        const bool ok = sel_row(a, st, b, g, gid + 8 * r, R);
        l2r[r] = ok ? a.lse_in[R] * MMA_LOG2E : -INFINITY;
        drr[r] = ok ? a.drow[R] : 0.f;
        rv[r] = ok && l2r[r] != -INFINITY;
    }
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    T *Kw = KV + warp * 2 * KT * DP, *Vw = Kw + KT * DP;
    const int per = a.lsel / KT, nch = nu_s * per;

    float dqa[NDT][4];
    acc_zero(dqa);

    for (int c = warp; c < nch; c += 4) {
        const int j = ul[c / per], fl = uf[c / per];
        const int kb = j * a.lsel + (c % per) * KT;
        if (kb > st.tmax) continue;
        sel_load_block<T, D, KT>(Kw, Vw, Kg, Vg, ks, kb, st.tmax, lane);
        cp_commit();
        cp_wait<0>();
        __syncwarp();
        float s[NT][4], dp[NT][4];
        warp_abT2<T, NKS, NT, DP>(s, qf, Kw, dp, yf, Vw, 0, lane);
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
        int64_t R;
        if (!sel_row(a, st, b, g, row, R)) continue;
        const float s = ((Om[row * D + dd] + Om[(16 + row) * D + dd]) + Om[(32 + row) * D + dd]) + Om[(48 + row) * D + dd];
        T *p = (T *)a.dq + R * D + dd;
        *p = fromf<T>(tof(*p) + a.scale * s);
    }
}

// ============================================================================================
// launcher
// ============================================================================================
// the dQ pass's kernel set for mma_attn_rows_pass (attn_pass.cuh): every query row
template <typename T, int D> struct DqKernels {
    static int rows(const AttnArgs &a) { return a.T; }
    template <int KT, int P> static void sel(dim3 grid, const AttnArgs &a) {
        mma_launch(k_sel_dq<T, D, KT, P>, grid, 128, sel_smem<D, KT>(), a);
    }
    // no TMA dQ: measured no faster than k_sel_dq (see k_sel_fwd_tma in attn_fwd.cu)
    static bool sel_tma(dim3, const AttnArgs &, int) { return false; }
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
template <typename T, int D> void mma_attn_dq(const AttnArgs &a, int br) { mma_attn_rows_pass<T, D, DqKernels<T, D>>(a, br); }

#define NSA_INSTANTIATE_DQ(D)                                  \
    template void mma_attn_dq<bf16, D>(const AttnArgs &, int); \
    template void mma_attn_dq<f16, D>(const AttnArgs &, int);
NSA_INSTANTIATE_DQ(16)
NSA_INSTANTIATE_DQ(64)
NSA_INSTANTIATE_DQ(128)
