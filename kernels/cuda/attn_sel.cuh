// kernels/cuda/attn_sel.cuh — what the selection-tile kernels share (k_sel_fwd and
// k_sel_fwd_tma in attn_fwd.cu, k_sel_dq in attn_dq.cu): a CTA per (b, t, KV group, 16-head
// tile). The group's heads are the 16 rows of the A operand (padded with zero rows when
// H/G < 16: any group size works; H/G > 16 takes several tiles), so each selected block is
// loaded once for all heads of the group. The warps split the selected blocks (chunks of KT
// keys) and keep their own softmax state; a fixed-order merge ends the CTA.
#ifndef NSA_KERNELS_CUDA_ATTN_SEL_CUH
#define NSA_KERNELS_CUDA_ATTN_SEL_CUH
#include "kernels/cuda/attn_tiles.cuh"

template <int D, int KT> constexpr size_t sel_smem() {
    // Q and dO tiles [16][DP] + per warp K and V [KT][DP]; the merge area reuses the K/V space
    return (size_t)(2 * 16 + 4 * 2 * KT) * (D + 8) * 2;
}
template <int D, int KT> __host__ __device__ constexpr bool sel_merge_fits() {
    return (size_t)4 * 16 * D * 4 + 4 * 16 * 2 * 4 <= (size_t)4 * 2 * KT * (D + 8) * 2;
}


// keys kb .. kb + KT - 1 of K and V into a warp's padded tiles, landed when it returns (the
// warp's own cp.async copies waited for); keys past position t read as zeros
template <typename T, int D, int KT>
__device__ __forceinline__ void sel_load_block(T *Kw, T *Vw, const T *Kg, const T *Vg, int64_t ks, int kb, int t, int lane) {
    kv_tile_load<T, D, false, KT, 32>(Kw, Kg, Vw, Vg, ks, kb, t + 1, lane);
    cp_commit();
    cp_wait<0>();
    __syncwarp();
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
// tile row (0..15): false for padding, else true with R its global row index (b, t, head)
__device__ __forceinline__ bool sel_row(const AttnArgs &a, const SelTile &st, int b, int g, int row, int64_t &R) {
    const int k = row & 7;
    const bool hi = row >= 8;
    const int t = hi ? st.t[1] : st.t[0], nh = hi ? st.nh[1] : st.nh[0], h0 = hi ? st.h0[1] : st.h0[0];
    R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * a.hpg + h0 + k;
    return k < nh && t >= 0;
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
// the tile's 16 rows (padding rows zero) of q (and of dO into dst2 where given) [B*T*H][D] into
// [16][D + 8] shared tiles (cp.async), threads tid, tid + nth, ...
template <typename T, int D, int NTH, typename Dst2>
__device__ __forceinline__ void sel_rows_load(T *dst, const T *src, Dst2 dst2, const T *src2, const AttnArgs &a, const SelTile &st,
                                              int b, int g, int tid) {
    tile_load<T, D, false, 16, NTH>(dst, src, dst2, src2, [&](int r, int64_t &off) {
        const bool ok = sel_row(a, st, b, g, r, off);
        off *= D;
        return ok;
    }, tid);
}
#endif
