// kernels/cuda/attn_dq.cu — dQ of the attention backward of the three NSA branches on tensor
// cores, then its launcher: P and dP recomputed from the saved log-sum-exp, dS = P (dP - Drow),
// dQ += scale dS K accumulated in registers and added to dq (one owner per element: no
// atomics).
//
//  k_rows_dq (compressed, window; selection where nsa_sel_rows_on): 64 query rows a CTA
//    (attn_rows.cuh) walking its keys in 64-key chunks.
//  k_rows_dq_ws (where nsa_dq_ws_on: compressed, window; selection on the rows kernels when
//    two tiles' positions fit a 64-bit mask): two such tiles a CTA on two consumer warpgroups,
//    their keys streamed by a producer warpgroup.
//  k_sel_dq (selection): a CTA per 16-row selection tile (attn_sel.cuh), the 4 warps splitting
//    the selected blocks, their dQ partials added in warp order.
//  k_sel_dq_tma (selection on sm_90a, D 64 or 128, where nsa_sel_dq_tma_warps gives it warps: 1
//    by default where the rows tiles' blocks overlap little): the same tiles fed by a ring of TMA
//    copies, NW warps splitting each chunk's keys.
// Instantiated for bf16/fp16 and D 16, 64, 128.
#include "kernels/cuda/attn_pass.cuh"
#include "kernels/cuda/attn_rows.cuh"
#include "kernels/cuda/attn_sel.cuh"

// ============================================================================================
// rows kernels
// ============================================================================================
// a warp's dQ sums (its rows r0 and r0 + 8 of the tile, at positions tr; -1: none), scaled, added
// to dq
template <typename T, int D>
__device__ __forceinline__ void rows_dq_add(const AttnArgs &a, const RowsGeom &rg, int b, int g, int hb, int r0, const int (&tr)[2],
                                            int tig, const float (&dqa)[D / 8][4]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int t = tr[r];
        if (t < 0) continue;
        T *dq = (T *)a.dq + rows_index(a, rg, b, g, hb, r0 + 8 * r, t) * D;
#pragma unroll
        for (int nt = 0; nt < D / 8; nt++)
            add2<T>(dq + nt * 8 + 2 * tig, a.scale * dqa[nt][2 * r], a.scale * dqa[nt][2 * r + 1]);
    }
}

// WG (sm_90a, D 64 or 128): every product by warpgroup MMA from swizzled tiles. S = Q K^T
// and dP = dO V^T over the chunk's 64 keys at D 64, 32 keys at a time at D 128 (wg_two),
// then dQ += dS K with dS from registers and the same keys of K as a transposed
// B operand (wg_rs). mma.sync: 32 keys a pass.
template <typename T, int D, int BR, bool WG> __global__ void __launch_bounds__(128, WG && D == 64 ? 4 : 0) k_rows_dq(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8;
    // keys a pass: the whole chunk with warpgroup MMA at D 64, else halves (at D 128 the whole
    // chunk was faster for the selection and window dQ but slower for the compressed one:
    // paper shape 64k 70.6 -> 74.0 ms, bench/RESULTS.md)
    constexpr int KH = WG && D == 64 ? ROWS_KC : 32;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *qk = WG ? smem_align1024(smem_raw) : smem_raw;
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
            dr = drow_of<T, D>(a, R);
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

    // EARLY (warpgroup MMA, the whole chunk a pass): a chunk's S and dP are issued first and the
    // next chunk's copies while they run, one barrier a chunk; otherwise the copies first, then
    // the products, two barriers a chunk
    constexpr bool EARLY = WG && KH == ROWS_KC;
    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        float se[KH / 8][4], dpe[KH / 8][4];   // EARLY: S and dP, issued before the copies
        if constexpr (EARLY) {
            cp_wait<0>();   // chunk c (its copies issued during chunk c - 1)
            wg_fence_proxy();
            __syncthreads();   // chunk c in place for every warp; buffer buf^1 free (chunk c - 1 is past)
            wg_two_issue<T, D, WG_ATOM_BYTES>(se, dpe, (uint32_t)__cvta_generic_to_shared(Qs),
                                              (uint32_t)__cvta_generic_to_shared(Ks + buf * ROWS_KC * QP),
                                              (uint32_t)__cvta_generic_to_shared(Ys),
                                              (uint32_t)__cvta_generic_to_shared(Vs + buf * ROWS_KC * QP));
            if (c + 1 < nchunks) load_chunk(buf ^ 1, ch.kb(c + 1));
            cp_commit();
            wg_wait0();
        } else {
            if (c + 1 < nchunks) load_chunk(buf ^ 1, ch.kb(c + 1));
            cp_commit();
            cp_wait<1>();
            if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
            __syncthreads();
        }
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
            if constexpr (EARLY) {
#pragma unroll
                for (int nt = 0; nt < KH / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) s[nt][e] = se[nt][e], dp[nt][e] = dpe[nt][e];
            } else if constexpr (WG) {
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
                    const float p = vis ? exp2_ftz(s[nt][e] * a.scale_log2 - l2r[e >> 1]) : 0.f;
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
        if constexpr (!EARLY) __syncthreads();
    }
    cp_wait<0>();
    rows_dq_add<T, D>(a, rg, b, g, hb, r0, tr, tig, dqa);
}

// ============================================================================================
// warp-specialised rows kernel (sm_90a, D 64 or 128: window and compressed branches)
// ============================================================================================
// Two consumer warpgroups own a 64-row tile each (position tiles 2x and 2x + 1 of the rows grid)
// and share the key chunks of the two tiles' key ranges, which a producer warpgroup streams (K
// and V, ROWS_KC keys) through a ring of ROWS_DQ_WS_NST stages, with the barriers of k_dkdv_ws
// (attn_dkdv.cu): per chunk S = Q K^T and dP = dO V^T (m64n64k16 from shared memory, the first
// k-step writing the accumulators), dS in registers (no mask where every row of the tile sees
// every key of the chunk), dQ += dS K (K as a transposed B operand). A chunk outside a
// consumer's own keys is passed over, its stage still released. Each row's dQ is the sum over
// its keys ascending, as in k_rows_dq; window and compressed: the chunks start where the first
// tile's keys start, so the second tile's 16-key steps may fall elsewhere than k_rows_dq's
// (other bits, same values within rounding). Selection: the chunks are the union of the blocks
// the two tiles' positions selected (sel_rows_union over both, 2 BQ <= 64 positions), a
// consumer passing over a block none of its positions selected: its rows meet the same blocks
// in the same order as in k_rows_dq. Registers: as k_dkdv_ws (setmaxnreg 40 / 232).
template <int D> constexpr size_t rows_dq_ws_smem() {
    // 1024-byte alignment slack, Q and dO of both tiles [2][64][D] each, the ring's K and V
    // [ROWS_DQ_WS_NST][64][D] each, both tiles' t, lse, Drow [2][64] each and live flags, the
    // barriers (then, selection, the union's table: sel_rows_table_bytes)
    return 1024 + (size_t)2 * 2 * 64 * D * 2 + (size_t)ROWS_DQ_WS_NST * 2 * ROWS_KC * D * 2 + (size_t)2 * (3 * 64 + 1) * 4 +
           2 * ROWS_DQ_WS_NST * 8;
}

template <typename T, int D, int BR, bool TMA>
__global__ void __launch_bounds__(384, 1) k_rows_dq_ws(AttnArgs a, const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv) {
    constexpr int NST = ROWS_DQ_WS_NST, NDT = D / 8, TILE = 64 * D, KTILE = ROWS_KC * D;
    constexpr uint32_t ATOM = 64 * 128;   // bytes of a 64-row, 64-column swizzled atom
    static_assert(D % 64 == 0 && ROWS_KC == 64, "64-row swizzled tiles");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align1024(smem_raw);
    T *Qs = reinterpret_cast<T *>(base);   // [2][64][D]: consumer c's rows at Qs + c TILE
    T *Ys = Qs + 2 * TILE;                  // dO, the same
    T *Ks = Ys + 2 * TILE;                  // [NST][ROWS_KC][D]
    T *Vs = Ks + NST * KTILE;
    int *trow = reinterpret_cast<int *>(Vs + NST * KTILE);   // [2][64]
    float *lse2 = reinterpret_cast<float *>(trow + 2 * 64), *drw = lse2 + 2 * 64;
    int *live = reinterpret_cast<int *>(drw + 2 * 64);      // [2]: 0 where every row of tile c exists and has a finite lse
    const uint32_t full = (uint32_t)__cvta_generic_to_shared(live + 2), empty = full + 8 * NST;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int hpg = a.hpg;
    const RowsGeom rg = rows_geom(hpg);
    const int b = blockIdx.z, g = blockIdx.y / rg.nhb, hb = blockIdx.y % rg.nhb;
    const int tend = a.t0 + a.Tn;
    const RowsWsTiles wt = rows_ws_tiles<BR>(a, rg, tend);
    ws_ring_init<NST>(full, empty, tid, rows_ws_consumer_warps(wt, tend));
    if (tid < 2) live[tid] = 0;
    // the chunks (selection: the union's table after the barriers; rows_chunks synchronises)
    const RowsChunks<BR> ch = rows_chunks<BR>(a, b, g, wt.tb[0], wt.tall, wt.kstart, wt.kend,
                                              reinterpret_cast<unsigned char *>(live + 2) + 2 * NST * 8);
    __syncthreads();
    if (wg == 0) {   // ---- producer: the chunks' K and V through the ring
        rows_ws_produce<T, D, BR, TMA, NST>(a, b, g, ch, wt.kend, Ks, Vs, full, empty, tid, &mk, &mv);
        return;
    }

    // ---- consumers: warpgroup cw owns tile cw's 64 rows
    wg_regs_inc<ROWS_WS_CONSUMER_REGS>();
    const int cw = wg - 1, ctid = tid & 127, warp = ctid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const RowsWsOwn own = rows_ws_own(wt, cw, tend);
    if (!own.has) return;   // no rows (the last CTA's second tile): not counted in the ring
    const int tbase = own.tbase;
    T *Qc = Qs + cw * TILE, *Yc = Ys + cw * TILE;
    int *trc = trow + cw * 64;
    float *l2c = lse2 + cw * 64, *drc = drw + cw * 64;
    rows_tile_load<T, D, true>(Qc, (const T *)a.q, Yc, (const T *)a.dout, a, rg, b, g, hb, tbase, tend, ctid);
    cp_commit();
    if (ctid < 64) {
        int64_t R;
        const bool ok = rows_row(a, rg, b, g, hb, tbase, tend, ctid, R);
        const int tq = ctid / rg.HB;
        float l2 = -INFINITY, dr = 0.f;
        if (ok) {
            l2 = a.lse_in[R] * MMA_LOG2E;
            dr = drow_of<T, D>(a, R);
        }
        const bool lv = ok && l2 != -INFINITY;
        trc[ctid] = lv ? tbase + tq : -1;
        l2c[ctid] = l2;
        drc[ctid] = dr;
        const unsigned dead = __ballot_sync(0xffffffffu, !lv);
        if (lane == 0) atomicOr(live + cw, (int)(dead != 0u));   // stays 0 where every row is live
    }
    cp_wait<0>();
    wg_fence_proxy();
    ws_consumer_sync(cw);   // this warpgroup's tile and rows landed
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trc[r0], trc[r0 + 8]};
    const float l2r[2] = {l2c[r0], l2c[r0 + 8]}, drr[2] = {drc[r0], drc[r0 + 8]};
    const bool rows_live = live[cw] == 0;
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(Qc), sY = (uint32_t)__cvta_generic_to_shared(Yc);
    float dqa[NDT][4];
    acc_zero(dqa);
    rows_ws_walk<BR, NST>(ch, own, full, empty, lane, [&](int c, int kb, uint64_t pm, uint64_t mine) {
        const int s = c % NST;
        const uint32_t sK = (uint32_t)__cvta_generic_to_shared(Ks + s * KTILE), sV = (uint32_t)__cvta_generic_to_shared(Vs + s * KTILE);
        float sc[8][4], dp[8][4];
        wg_two_issue<T, D, ATOM>(sc, dp, sQ, sK, sY, sV);
        wg_wait0();
        // every row sees every key of the chunk: no mask (the same values as the masked path)
        const bool all = rows_live && rows_ws_whole<BR>(a, own, kb, mine);
        if (all) {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float p = exp2_ftz(sc[nt][e] * a.scale_log2 - l2r[e >> 1]);
                    sc[nt][e] = p * (dp[nt][e] - drr[e >> 1]);   // dS
                }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                    const bool vis = rows_vis<BR>(a, t, key, own.ken, pm, wt.tb[0]);
                    const float p = vis ? exp2_ftz(sc[nt][e] * a.scale_log2 - l2r[e >> 1]) : 0.f;
                    sc[nt][e] = p * (dp[nt][e] - drr[e >> 1]);   // dS
                }
        }
        uint32_t da[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; kk++) acc_afrag<T>(da[kk], sc[2 * kk], sc[2 * kk + 1]);
        wg_fence();
        wg_rs<T, D, ROWS_KC>(dqa, da, sK, ATOM);
        wg_commit();
        wg_wait0();
    });
    rows_dq_add<T, D>(a, rg, b, g, hb, r0, tr, tig, dqa);
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
    float l2r[2], drr[2];
    bool rv[2];
    sel_dq_regs<NKS, DP, D>(qf, yf, Qs, Ys, a, st, b, g, lane, l2r, drr, rv, warp == 0);
    const int tr[2] = {st.t[0], st.t[1]};
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    T *Kw = KV + warp * 2 * KT * DP, *Vw = Kw + KT * DP;
    const PowDiv per = PowDiv::of(a.lsel / KT);
    const int nch = nu_s * per.v;

    float dqa[NDT][4];
    acc_zero(dqa);

    for (int c = warp; c < nch; c += 4) {
        const int j = ul[per.div(c)], fl = uf[per.div(c)];
        const int kb = j * a.lsel + per.mod(c) * KT;
        if (kb > st.tmax) continue;
        sel_load_block<T, D, KT>(Kw, Vw, Kg, Vg, ks, kb, st.tmax, lane);
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
// selection dQ on the Hopper tensor memory accelerator (sm_90a; D 64 or 128, blocks of whole
// 32-key chunks): NW warps a CTA, the same tile rows as k_sel_dq
// ============================================================================================
// The NW warps walk the tile's chunks together through the TMA feed (attn_sel.cuh), warp w the
// keys w * 32 / NW .. (w + 1) * 32 / NW - 1 of each: S and dP of its keys, dS, and its own dQ
// sum += dS K over its keys of every chunk in order; the warps' sums added in warp order at the
// end. NW 2 (16 keys a warp): 144 accumulator and fragment registers a thread at D 128
// (NSA_CUDA_SEL_DQ_TMA=2); NW 1, the whole chunk a warp (=1).
template <typename T, int D, int PACK, int NW, int NST>
__global__ void __launch_bounds__(NW * 32) k_sel_dq_tma(AttnArgs a, const __grid_constant__ CUtensorMap mk,
                                                       const __grid_constant__ CUtensorMap mv) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, KW = SEL_TMA_KT / NW, NT = KW / 8;
    static_assert(KW % 16 == 0, "dQ += dS K: 16 keys a k-step");
    extern __shared__ __align__(16) unsigned char smem_raw[];   // the ring is aligned to 1024 by hand
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    __shared__ uint64_t bars[NST];
    unsigned char *ring = smem_align1024(smem_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    if (tid < NST) mbar_init((uint32_t)__cvta_generic_to_shared(&bars[tid]));
    if (warp == 0) sel_union_warp<PACK>(a, st, b, g, ul, uf, &nu_s, lane);
    if (NW > 1) __syncthreads();   // the list and the barriers, seen by every warp
    SelTmaFeed<T, D, NST, NW> feed{ring, (uint32_t)__cvta_generic_to_shared(bars), &mk, &mv, SelChunks::of(ul, nu_s, a.lsel, st.tmax),
                                   g, b, warp, lane};
    feed.start();   // the first copies in flight before the Q and dO tiles are asked for
    T *Qs = feed.stage_tile(), *Ys = Qs + 16 * DP;   // [16][DP] each, in the last stage until its first copy
    sel_rows_load<T, D, NW * 32>(Qs, (const T *)a.q, Ys, (const T *)a.dout, a, st, b, g, tid);
    cp_commit();
    cp_wait<0>();
    if (NW > 1) __syncthreads();
    else __syncwarp();
    uint32_t qf[NKS][4], yf[NKS][4];
    float l2r[2], drr[2];
    bool rv[2];
    sel_dq_regs<NKS, DP, D>(qf, yf, Qs, Ys, a, st, b, g, lane, l2r, drr, rv, warp == 0);
    feed.start_last();   // the fragments are read: the staging area becomes the last stage
    const int tr[2] = {st.t[0], st.t[1]};
    const int k0 = warp * KW;   // the warp's first key of a chunk
    float dqa[NDT][4];
    acc_zero(dqa);
    SelCursor cur;   // the chunk of the list walked
    for (int it = 0; it < feed.ch.nch; it++, cur.step(feed.ch)) {
        const int fl = uf[cur.i], kb = cur.kb(feed.ch);
        feed.wait(it, kb);
        const T *Kw = feed.kst(it % NST), *Vw = feed.vst(it % NST);
        float s[NT][4], dp[NT][4];
        warp_abT_l<T, NKS, NT, SwzTile<SEL_TMA_KT>>(s, qf, Kw, k0, lane);
        warp_abT_l<T, NKS, NT, SwzTile<SEL_TMA_KT>>(dp, yf, Vw, k0, lane);
        sel_dscores<NT>(s, dp, kb + k0, rv, fl, tr, l2r, drr, a.scale_log2, tig);
        mma_acc_kn_l<T, D, KW, SwzTile<SEL_TMA_KT>>(dqa, s, Kw, k0, lane);
        feed.release(it);
    }
    if constexpr (NW > 1) {
        // every copy was waited for and every warp is past the last chunk (release's barrier):
        // the ring holds the other warps' sums [NW - 1][NDT][32 lanes][4]
        float4 *Om = reinterpret_cast<float4 *>(ring);
        if (warp > 0)
#pragma unroll
            for (int nt = 0; nt < NDT; nt++)
                Om[((warp - 1) * NDT + nt) * 32 + lane] = make_float4(dqa[nt][0], dqa[nt][1], dqa[nt][2], dqa[nt][3]);
        asm volatile("bar.sync 1, %0;\n" ::"n"(NW * 32) : "memory");
        if (warp > 0) return;
        for (int w = 1; w < NW; w++)
#pragma unroll
            for (int nt = 0; nt < NDT; nt++) {
                const float4 o = Om[((w - 1) * NDT + nt) * 32 + lane];
                dqa[nt][0] += o.x;
                dqa[nt][1] += o.y;
                dqa[nt][2] += o.z;
                dqa[nt][3] += o.w;
            }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t R;
        if (!sel_row(a, st, b, g, gid + 8 * r, R)) continue;
        T *dq = (T *)a.dq + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) add2<T>(dq + nt * 8 + 2 * tig, a.scale * dqa[nt][2 * r], a.scale * dqa[nt][2 * r + 1]);
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
    // the TMA dQ where this build's sm_90a code runs, D is 64 or 128, blocks are whole 32-key
    // chunks and nsa_sel_dq_tma_warps gives it warps: then it runs wherever the selection's
    // tiles would (sel_tma_first: also where the forward takes the rows kernels)
    static bool sel_tma_first(const AttnArgs &a) {
        return D % 64 == 0 && nsa_sel_dq_tma_warps(D, a.hpg, a.NS, a.n) > 0 && g_nsa_cuda.wgmma && a.lsel % SEL_TMA_KT == 0;
    }
    template <int NW, int P> static void sel_tma_launch(dim3 grid, const AttnArgs &a, const CUtensorMap &mk, const CUtensorMap &mv) {
        if constexpr (D % 64 == 0)
            sel_tma_nst_dispatch([&](auto nst) {
                constexpr int NST = decltype(nst)::value;
                mma_launch(k_sel_dq_tma<T, D, P, NW, NST>, grid, NW * 32, sel_tma_smem<D, NST>(), a, mk, mv);
            });
    }
    static bool sel_tma(dim3 grid, const AttnArgs &a, int pack) {
        CUtensorMap mk, mv;
        if (!sel_tma_first(a) || !sel_tma_maps<T>(a, &mk, &mv)) return false;
        if (nsa_sel_dq_tma_warps(D, a.hpg, a.NS, a.n) == 2) {
            if (pack) sel_tma_launch<2, 2>(grid, a, mk, mv);
            else sel_tma_launch<2, 1>(grid, a, mk, mv);
        } else {
            if (pack) sel_tma_launch<1, 2>(grid, a, mk, mv);
            else sel_tma_launch<1, 1>(grid, a, mk, mv);
        }
        return true;
    }
    template <int BR> static void rows_k(dim3 grid, const AttnArgs &a, size_t extra) {
        if constexpr (D % 64 == 0) {
            // two position tiles a CTA (selection: their positions in one 64-bit mask)
            if (nsa_dq_ws_on(D) && (BR != BR_SEL || 2 * rows_geom(a.hpg).BQ <= 64)) {
                const dim3 g2((grid.x + 1) / 2, grid.y, grid.z);
                const size_t sm = rows_dq_ws_smem<D>() + extra;
                CUtensorMap mk{}, mv{};
                if (g_nsa_cuda.rows_tma && rows_kv_tma_maps<T>(a, &mk, &mv)) mma_launch(k_rows_dq_ws<T, D, BR, true>, g2, 384, sm, a, mk, mv);
                else mma_launch(k_rows_dq_ws<T, D, BR, false>, g2, 384, sm, a, mk, mv);
                return;
            }
        }
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
