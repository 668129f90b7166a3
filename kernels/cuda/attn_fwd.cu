// kernels/cuda/attn_fwd.cu — the attention forward of the three NSA branches on tensor cores
// (flash-style: scores live in registers, never a T x T matrix), then its launcher:
//
//  k_rows_fwd (compressed, window; selection where nsa_sel_fwd_rows_on): 64 query rows a CTA
//    (attn_rows.cuh) walking its keys in 64-key chunks, online softmax.
//  k_rows_fwd_ws (where nsa_fwd_ws_on): two such tiles a CTA on two consumer warpgroups, their
//    keys streamed by a producer warpgroup (as k_rows_dq_ws).
//  k_sel_fwd (selection): a CTA per 16-row selection tile (attn_sel.cuh), the 4 warps splitting
//    the selected blocks, their softmax states merged in warp order.
//  k_sel_fwd_tma (selection on sm_90a, D 64 or 128, blocks of whole 32-key chunks): one warp a
//    tile fed by a ring of TMA copies.
// Writes o and the log-sum-exp (act, and fp32 where lse32 is set). Instantiated for bf16/fp16
// and D 16, 64, 128.
#include "kernels/cuda/attn_pass.cuh"
#include "kernels/cuda/attn_rows.cuh"
#include "kernels/cuda/attn_sel.cuh"
#include <type_traits>

// ============================================================================================
// rows kernel
// ============================================================================================
// a warp's rows r0 and r0 + 8 of a rows tile (at positions tr; -1: none) written out: O =
// oacc / lsum and the log-sum-exp (act, and fp32 where lse32 is set), lsum summed over the quad
template <typename T, int D>
__device__ __forceinline__ void rows_fwd_out(const AttnArgs &a, const RowsGeom &rg, int b, int g, int hb, int r0, const int (&tr)[2],
                                             int tig, const float (&oacc)[D / 8][4], const float (&m)[2], float (&lsum)[2]) {
    constexpr int NDT = D / 8;
    quad_sum2(lsum);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int t = tr[r];
        if (t < 0) continue;
        const int64_t R = rows_index(a, rg, b, g, hb, r0 + 8 * r, t);
        const bool any = lsum[r] > 0.f;
        const float inv = any ? 1.0f / lsum[r] : 0.f;
        T *o = (T *)a.o + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++)
            *reinterpret_cast<uint32_t *>(o + nt * 8 + 2 * tig) = pack2<T>(oacc[nt][2 * r] * inv, oacc[nt][2 * r + 1] * inv);
        if (tig == 0) {
            const float lse = any ? (m[r] + log2f(lsum[r])) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

// WG (sm_90a, D 64 or 128): both products by warpgroup MMA from swizzled Q, K and V tiles:
// S = Q K^T (wg_qkT), then O += P V with P from registers and V as a transposed B operand
// (wg_rs); the online-softmax rescale of O between chunks is ordered by wg_fence.
template <typename T, int D, int BR, bool WG> __global__ void __launch_bounds__(128) k_rows_fwd(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *qk = WG ? smem_align1024(smem_raw) : smem_raw;
    constexpr int QP = WG ? D : DP;        // elements per Q/K row as stored
    T *Qs = reinterpret_cast<T *>(qk);
    T *Ks = Qs + 64 * QP;                  // [2][KC][QP]
    constexpr int VP = WG ? D : DP;        // elements per V row as stored
    T *Vs = Ks + 2 * ROWS_KC * QP;         // [2][KC][VP]
    __shared__ int trow[64];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int hpg = a.hpg;
    const RowsGeom rg = rows_geom(hpg);
    const int b = blockIdx.z, g = blockIdx.y / rg.nhb, hb = blockIdx.y % rg.nhb;
    const int tbase = a.t0 + blockIdx.x * rg.BQ, tend = a.t0 + a.Tn;
    if (tid < 64) {
        int64_t R;
        trow[tid] = rows_row(a, rg, b, g, hb, tbase, tend, tid, R) ? tbase + tid / rg.HB : -1;
    }
    rows_tile_load<T, D, WG>(Qs, (const T *)a.q, nullptr, nullptr, a, rg, b, g, hb, tbase, tend);
    int t_last = tbase + rg.BQ - 1 < tend - 1 ? tbase + rg.BQ - 1 : tend - 1;
    int kstart, kend;
    rows_keys<BR>(a, tbase, t_last, kstart, kend);
    const RowsChunks<BR> ch = rows_chunks<BR>(a, b, g, tbase, t_last, kstart, kend, smem_raw + rows_fwd_smem<D, WG>());
    const int nchunks = ch.n;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    // K and V chunk kb.. into buffer buf
    auto load_chunk = [&](int buf, int kb) {
        kv_tile_load<T, D, WG, ROWS_KC, 128>(Ks + buf * ROWS_KC * QP, Kg, Vs + buf * ROWS_KC * VP, Vg, ks, kb, kend, tid);
    };
    if (nchunks > 0) load_chunk(0, ch.kb(0));
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
    acc_zero(oacc);
    uint32_t qf[NKS][4];

    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_chunk(buf ^ 1, ch.kb(c + 1));
        cp_commit();
        cp_wait<1>();
        if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        __syncthreads();
        const T *Vb = Vs + buf * ROWS_KC * VP;
        const int kb = ch.kb(c);
        const uint64_t pm = ch.pm(c);
        float s[8][4];
        rows_qkT<T, D, WG>(s, qf, Qs, Ks + buf * ROWS_KC * QP, c, warp, lane);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                const bool vis = rows_vis<BR>(a, t, key, kend, pm, tbase);
                s[nt][e] = vis ? s[nt][e] * a.scale_log2 : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
            }
        online_softmax_step<8, NDT>(s, oacc, m, lsum, mx);
        if constexpr (WG) {
            // O += P V by warpgroup MMA: P from registers, V as a transposed B operand
            uint32_t pa[ROWS_KC / 16][4];
#pragma unroll
            for (int kk = 0; kk < ROWS_KC / 16; kk++) {
                acc_afrag<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
            }
            wg_fence();
            wg_rs<T, D, ROWS_KC>(oacc, pa, (uint32_t)__cvta_generic_to_shared(Vb), WG_ATOM_BYTES);
            wg_commit();
            wg_wait0();
        } else {
            mma_acc_kn<T, D, ROWS_KC, DP>(oacc, s, Vb, 0, lane);
        }
        __syncthreads();
    }
    cp_wait<0>();
    rows_fwd_out<T, D>(a, rg, b, g, hb, r0, tr, tig, oacc, m, lsum);
}


// ============================================================================================
// warp-specialised rows kernel (sm_90a, D 64 or 128)
// ============================================================================================
// Two consumer warpgroups own a 64-row tile each (position tiles 2x and 2x + 1 of the rows grid)
// and share the key chunks of both tiles' key ranges, streamed by a producer warpgroup through
// the ring of k_rows_dq_ws (attn_rows.cuh: rows_ws_tiles, rows_ws_produce): per chunk S = Q K^T
// (m64n64k16 from shared memory, the first k-step writing the accumulators), the online
// softmax in registers (no mask where every row of the tile sees every key of the chunk), then
// O += P V (P from registers, V as a transposed B operand). A chunk outside a consumer's own
// keys is passed over, its stage still released. Each row meets its keys in the same order as
// in k_rows_fwd; window: the chunks start where the first tile's keys start, so the second
// tile's chunks may fall elsewhere than k_rows_fwd's (other bits, same values within
// rounding). Selection: the union of both tiles' selected blocks (2 BQ <= 64 positions).
// KC: the keys of a chunk, ROWS_KC or (D 128, window and compressed, nsa_fwd_kc) 128: S = Q K^T
// by m64n128k16, the chunk's K and V in 128-row atoms; the softmax's running maxima move at
// other keys, so other bits than with 64-key chunks (the same values within rounding).
template <int D, int KC = ROWS_KC> constexpr size_t rows_fwd_ws_smem() {
    // 1024-byte alignment slack, Q of both tiles [2][64][D], the ring's K and V
    // [NST][KC][D] each, both tiles' t [2][64], the barriers (then, selection, the union's table:
    // sel_rows_table_bytes)
    constexpr int NST = rows_fwd_ws_nst<D, KC>();
    return 1024 + (size_t)2 * 64 * D * 2 + (size_t)NST * 2 * KC * D * 2 + (size_t)2 * 64 * 4 + 2 * NST * 8;
}

// pingpong (the overlapped run only, both consumers with rows): the consumers issue their
// products in turns (WsTurns), one chunk of the ring a turn, passed-over chunks included, plus
// one: the same operations in the same order, so the same bits.
template <typename T, int D, int BR, bool TMA, int KC>
__global__ void __launch_bounds__(384, 1) k_rows_fwd_ws(AttnArgs a, const __grid_constant__ CUtensorMap mk, const __grid_constant__ CUtensorMap mv,
                                                        int pingpong) {
    constexpr int NST = rows_fwd_ws_nst<D, KC>(), NDT = D / 8, TILE = 64 * D, KTILE = KC * D, NT = KC / 8;
    constexpr uint32_t ATOM = KC * 128;   // bytes of a KC-row, 64-column swizzled atom of K or V
    static_assert(D % 64 == 0 && ROWS_KC == 64, "64-row swizzled tiles");
    static_assert(KC == ROWS_KC || (KC == 128 && BR != BR_SEL && rows_fwd_ws_overlap<D>()), "128-key chunks: the overlapped run");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align1024(smem_raw);
    T *Qs = reinterpret_cast<T *>(base);   // [2][64][D]: consumer c's rows at Qs + c TILE
    T *Ks = Qs + 2 * TILE;                  // [NST][KC][D]
    T *Vs = Ks + NST * KTILE;
    int *trow = reinterpret_cast<int *>(Vs + NST * KTILE);   // [2][64]
    const uint32_t full = (uint32_t)__cvta_generic_to_shared(trow + 2 * 64), empty = full + 8 * NST;
    const int tid = threadIdx.x, wg = tid >> 7;
    const RowsGeom rg = rows_geom(a.hpg);
    const int b = blockIdx.z, g = blockIdx.y / rg.nhb, hb = blockIdx.y % rg.nhb;
    const int tend = a.t0 + a.Tn;
    const RowsWsTiles wt = rows_ws_tiles<BR>(a, rg, tend);
    ws_ring_init<NST>(full, empty, tid, rows_ws_consumer_warps(wt, tend));
    // the chunks (selection: the union's table after the barriers; rows_chunks synchronises)
    const RowsChunks<BR, KC> ch = rows_chunks<BR, KC>(a, b, g, wt.tb[0], wt.tall, wt.kstart, wt.kend,
                                              reinterpret_cast<unsigned char *>(trow + 2 * 64) + 2 * NST * 8);
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
    T *Qc = Qs + cw * TILE;
    int *trc = trow + cw * 64;
    rows_tile_load<T, D, true>(Qc, (const T *)a.q, nullptr, nullptr, a, rg, b, g, hb, tbase, tend, ctid);
    cp_commit();
    if (ctid < 64) {
        int64_t R;
        trc[ctid] = rows_row(a, rg, b, g, hb, tbase, tend, ctid, R) ? tbase + ctid / rg.HB : -1;
    }
    cp_wait<0>();
    wg_fence_proxy();
    ws_consumer_sync(cw);   // this warpgroup's tile and rows landed
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trc[r0], trc[r0 + 8]};
    const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(Qc);
    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
    acc_zero(oacc);
    // the chunk's scores in log2 units, masked where a row does not see a key (not where every
    // row sees every key of the chunk: the same values; rows past the tile's positions are never
    // written), and this lane's row maxima
    auto scores = [&](float (&sc)[NT][4], int kb, uint64_t pm, uint64_t mine, float (&mx)[2]) {
        mx[0] = mx[1] = -INFINITY;
        if (rows_ws_whole<BR, KC>(a, own, kb, mine)) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    sc[nt][e] *= a.scale_log2;
                    mx[e >> 1] = fmaxf(mx[e >> 1], sc[nt][e]);
                }
        } else {
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                    const bool vis = rows_vis<BR>(a, t, key, own.ken, pm, wt.tb[0]);
                    sc[nt][e] = vis ? sc[nt][e] * a.scale_log2 : -INFINITY;
                    mx[e >> 1] = fmaxf(mx[e >> 1], sc[nt][e]);
                }
        }
    };
    auto stage_of = [&](const T *base, int c) { return (uint32_t)__cvta_generic_to_shared(base + (c % NST) * KTILE); };
    if constexpr (BR == BR_SEL || !rows_fwd_ws_overlap<D>()) {
        static_assert(KC == ROWS_KC, "one chunk at a time: 64 keys");
        rows_ws_walk<BR, NST>(ch, own, full, empty, lane, [&](int c, int kb, uint64_t pm, uint64_t mine) {
            float sc[8][4], mx[2];
            wg_qkT_issue<T, D>(sc, sQ, stage_of(Ks, c));
            wg_wait0();
            scores(sc, kb, pm, mine, mx);
            online_softmax_step<8, NDT>(sc, oacc, m, lsum, mx);
            uint32_t pa[4][4];
#pragma unroll
            for (int kk = 0; kk < 4; kk++) acc_afrag<T>(pa[kk], sc[2 * kk], sc[2 * kk + 1]);
            wg_fence();
            wg_rs<T, D, ROWS_KC>(oacc, pa, stage_of(Vs, c), ATOM);
            wg_commit();
            wg_wait0();
        });
    } else {
        // The tile's chunks are one run of the ring's (its keys [kst, ken)). Along the run a
        // chunk's O += P V runs while the next chunk's softmax does (ws_ring_run_overlap: O
        // rescaled once that P V is done; the same bits), so a consumer holds its last chunk a step
        // longer (4 stages, rows_fwd_ws_nst: the producer is still two chunks ahead).
        int c0, c1;
        rows_ws_run(ch, own, c0, c1);
        WsTurns turns = ws_turns(pingpong && rows_ws_consumer_warps(wt, tend) == 8, cw, ch.n + 1);
        for (int c = 0; c < c0; c++) {
            ws_ring_pass<NST>(full, empty, c, lane);
            turns.idle();
        }
        if (c0 < c1) {
            float sc[NT][4], alpha[2];
            uint32_t pa[KC / 16][4];   // the held chunk's P (A fragments)
            ws_ring_run_overlap<NST>(
                c0, c1, full, empty, lane, turns, [&](int c) { wg_qkT_issue<T, D, KC>(sc, sQ, stage_of(Ks, c)); },
                [&](int c) {
                    float mx[2];
                    scores(sc, ch.kb(c), 0, 0, mx);
                    online_softmax_probs<NT>(sc, m, lsum, mx, alpha);
                },
                [&](int) {
                    acc_scale_rows<NDT>(oacc, alpha);
#pragma unroll
                    for (int kk = 0; kk < KC / 16; kk++) acc_afrag<T>(pa[kk], sc[2 * kk], sc[2 * kk + 1]);
                },
                [&](int c) { wg_rs<T, D, KC>(oacc, pa, stage_of(Vs, c), ATOM); }, [&]() { acc_pin<NDT>(oacc); });
        } else {
            turns.idle();   // the run's extra turn
        }
        for (int c = c1; c < ch.n; c++) {
            ws_ring_pass<NST>(full, empty, c, lane);
            turns.idle();
        }
    }
    rows_fwd_out<T, D>(a, rg, b, g, hb, r0, tr, tig, oacc, m, lsum);
}

// ============================================================================================
// selection tiles
// ============================================================================================
template <typename T, int D, int KT, int PACK> __global__ void __launch_bounds__(128) k_sel_fwd(AttnArgs a) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NT = KT / 8;
    static_assert(sel_merge_fits<D, KT>(), "merge area");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    T *Qs = reinterpret_cast<T *>(smem_raw);
    T *KV = Qs + 32 * DP;   // per warp: K [KT][DP], V [KT][DP]
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    sel_rows_load<T, D, 128>(Qs, (const T *)a.q, nullptr, nullptr, a, st, b, g, tid);
    cp_commit();
    if (tid == 0) sel_union<PACK>(a, st, b, g, ul, uf, &nu_s);
    cp_wait<0>();
    __syncthreads();
    uint32_t qf[NKS][4];
    frags_a<NKS, DP>(qf, Qs, 0, lane);
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    T *Kw = KV + warp * 2 * KT * DP, *Vw = Kw + KT * DP;
    const PowDiv per = PowDiv::of(a.lsel / KT);
    const int nch = nu_s * per.v;
    int64_t R_unused;
    const bool rv[2] = {sel_row(a, st, b, g, gid, R_unused), sel_row(a, st, b, g, gid + 8, R_unused)};
    const int tr[2] = {st.t[0], st.t[1]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
    acc_zero(oacc);

    for (int c = warp; c < nch; c += 4) {
        const int j = ul[per.div(c)], fl = uf[per.div(c)];
        const int kb = j * a.lsel + per.mod(c) * KT;
        if (kb > st.tmax) continue;
        sel_load_block<T, D, KT>(Kw, Vw, Kg, Vg, ks, kb, st.tmax, lane);
        float s[NT][4];
        warp_abT<T, NKS, NT, DP>(s, qf, Kw, 0, lane);
        sel_online_softmax<NT, NDT>(s, oacc, m, lsum, kb, rv, fl, tr, a.scale_log2, tig);
        mma_acc_kn<T, D, KT, DP>(oacc, s, Vw, 0, lane);
        __syncwarp();
    }
    quad_sum2(lsum);
    // merge the 4 warps' partial softmax states in warp order
    __syncthreads();
    float *Om = reinterpret_cast<float *>(KV);   // [4][16][D]
    float *Mm = Om + 4 * 16 * D, *Lm = Mm + 4 * 16;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const int row = gid + 8 * r;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) {
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig] = oacc[nt][2 * r];
            Om[(warp * 16 + row) * D + nt * 8 + 2 * tig + 1] = oacc[nt][2 * r + 1];
        }
        if (tig == 0) {
            Mm[warp * 16 + row] = m[r];
            Lm[warp * 16 + row] = lsum[r];
        }
    }
    __syncthreads();
    for (int idx = tid; idx < 16 * D; idx += 128) {
        const int row = idx / D, dd = idx % D;
        int64_t R;
        if (!sel_row(a, st, b, g, row, R)) continue;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < 4; w++) M = fmaxf(M, Mm[w * 16 + row]);
        float L = 0.f, O = 0.f;
        if (M != -INFINITY) {
#pragma unroll
            for (int w = 0; w < 4; w++) {
                const float mw = Mm[w * 16 + row];
                if (mw == -INFINITY) continue;
                const float f = exp2f(mw - M);
                L += Lm[w * 16 + row] * f;
                O += Om[(w * 16 + row) * D + dd] * f;
            }
        }
        const bool any = L > 0.f;
        ((T *)a.o)[R * D + dd] = fromf<T>(any ? O / L : 0.f);
        if (dd == 0) {
            const float lse = any ? (M + log2f(L)) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

// ============================================================================================
// selection forward on the Hopper tensor memory accelerator (sm_90; D 64 or 128, blocks of a
// multiple of 64 keys): one warp a CTA, the same tile rows as k_sel_fwd
// ============================================================================================
// The warp walks its tile's chunks through the TMA feed (attn_sel.cuh: NST stages of 32 keys,
// NSA_CUDA_SEL_TMA_NST, 2 by default), as flash_nsa's selection kernels (1-warp programs, a ring
// of TMA loads). No partial softmax states to merge. The Q tile is asked for after the first
// copies are in flight and staged in the last stage until that stage's first copy. 32-key chunks
// in 2 stages: 35 KB a CTA at D 128 with the static list (6 CTAs an SM; 5 when the Q tile had
// its own 4 KB), 19 KB at D 64; 64-key chunks (3 CTAs an SM at D 128) were slower (paper 64k 23.2
// -> 19.4 ms with 32, bench/RESULTS.md), and so were 3 stages of 64 keys and 3 or 4 of 32.
template <typename T, int D, int PACK, int NST>
__global__ void __launch_bounds__(32) k_sel_fwd_tma(AttnArgs a, const __grid_constant__ CUtensorMap mk,
                                                   const __grid_constant__ CUtensorMap mv) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NT = SEL_TMA_KT / 8;
    extern __shared__ __align__(16) unsigned char smem_raw[];   // the ring is aligned to 1024 by hand
    __shared__ int ul[SEL_MAXU], uf[SEL_MAXU], nu_s;
    __shared__ uint64_t bars[NST];
    unsigned char *ring = smem_align1024(smem_raw);
    const int lane = threadIdx.x, gid = lane >> 2, tig = lane & 3;
    const int nrt = PACK == 1 ? (a.hpg + 15) / 16 : 1;
    const int g = blockIdx.y / nrt, rt = blockIdx.y % nrt, b = blockIdx.z;
    const SelTile st = sel_tile<PACK>(a, blockIdx.x, rt);
    if (lane < NST) mbar_init((uint32_t)__cvta_generic_to_shared(&bars[lane]));
    sel_union_warp<PACK>(a, st, b, g, ul, uf, &nu_s, lane);
    SelTmaFeed<T, D, NST, 1> feed{ring, (uint32_t)__cvta_generic_to_shared(bars), &mk, &mv, SelChunks::of(ul, nu_s, a.lsel, st.tmax),
                                  g, b, 0, lane};
    feed.start();   // the first copies in flight before the Q tile is asked for
    T *Qs = feed.stage_tile();     // [16][DP], in the last stage until its first copy
    sel_rows_load<T, D, 32>(Qs, (const T *)a.q, nullptr, nullptr, a, st, b, g, lane);
    cp_commit();
    cp_wait<0>();
    __syncwarp();
    uint32_t qf[NKS][4];
    frags_a<NKS, DP>(qf, Qs, 0, lane);
    feed.start_last();
    int64_t R_unused;
    const bool rv[2] = {sel_row(a, st, b, g, gid, R_unused), sel_row(a, st, b, g, gid + 8, R_unused)};
    const int tr[2] = {st.t[0], st.t[1]};

    float m[2] = {-INFINITY, -INFINITY}, lsum[2] = {0.f, 0.f};
    float oacc[NDT][4];
    acc_zero(oacc);
    SelCursor cur;   // the chunk of the list walked
    for (int it = 0; it < feed.ch.nch; it++, cur.step(feed.ch)) {
        const int fl = uf[cur.i], kb = cur.kb(feed.ch);
        feed.wait(it, kb);
        const T *Kw = feed.kst(it % NST), *Vw = feed.vst(it % NST);
        float s[NT][4];
        warp_abT_l<T, NKS, NT, SwzTile<SEL_TMA_KT>>(s, qf, Kw, 0, lane);
        sel_online_softmax<NT, NDT>(s, oacc, m, lsum, kb, rv, fl, tr, a.scale_log2, tig);
        mma_acc_kn_l<T, D, SEL_TMA_KT, SwzTile<SEL_TMA_KT>>(oacc, s, Vw, 0, lane);
        feed.release(it);
    }
    quad_sum2(lsum);
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t R;
        if (!sel_row(a, st, b, g, gid + 8 * r, R)) continue;
        const bool any = lsum[r] > 0.f;
        T *o = (T *)a.o + R * D;
#pragma unroll
        for (int nt = 0; nt < NDT; nt++) {
            const int col = nt * 8 + 2 * tig;
            o[col] = fromf<T>(any ? oacc[nt][2 * r] / lsum[r] : 0.f);
            o[col + 1] = fromf<T>(any ? oacc[nt][2 * r + 1] / lsum[r] : 0.f);
        }
        if (tig == 0) {
            const float lse = any ? (m[r] + log2f(lsum[r])) * MMA_LN2 : -INFINITY;
            ((T *)a.lse)[R] = fromf<T>(lse);
            if (a.lse32) a.lse32[R] = lse;
        }
    }
}

// ============================================================================================

// ============================================================================================
// launcher
// ============================================================================================
// the forward's kernel set for mma_attn_rows_pass (attn_pass.cuh): every query row of the
// call's range [t0, t0 + Tn)
template <typename T, int D> struct FwdKernels {
    static int rows(const AttnArgs &a) { return a.Tn; }
    // the TMA kernel where the rows kernels are on but not for the forward (nsa_sel_fwd_rows_on)
    static bool sel_tma_first(const AttnArgs &a) { return !nsa_sel_fwd_rows_on(a.hpg, D, a.lsel, a.NS, a.n); }
    template <int KT, int P> static void sel(dim3 grid, const AttnArgs &a) {
        mma_launch(k_sel_fwd<T, D, KT, P>, grid, 128, sel_smem<D, KT>(), a);
    }
    // the TMA selection forward where this build's sm_90a code runs (NSA_CUDA_WGMMA=0: off), D
    // is 64 or 128, blocks are whole SEL_TMA_KT-key chunks and the maps encode; false: not launched
    static bool sel_tma(dim3 grid, const AttnArgs &a, int pack) {
        if constexpr (D % 64 == 0) {
            CUtensorMap mk, mv;
            if (!g_nsa_cuda.wgmma || a.lsel % SEL_TMA_KT != 0 || !sel_tma_maps<T>(a, &mk, &mv)) return false;
            sel_tma_nst_dispatch([&](auto nst) {
                constexpr int NST = decltype(nst)::value;
                if (pack) mma_launch(k_sel_fwd_tma<T, D, 2, NST>, grid, 32, sel_tma_smem<D, NST>(), a, mk, mv);
                else mma_launch(k_sel_fwd_tma<T, D, 1, NST>, grid, 32, sel_tma_smem<D, NST>(), a, mk, mv);
            });
            return true;
        }
        return false;
    }
    template <int BR> static void rows_k(dim3 grid, const AttnArgs &a, size_t extra) {
        if constexpr (D % 64 == 0) {
            // two position tiles a CTA (selection: their positions in one 64-bit mask)
            if (nsa_fwd_ws_on(D, BR) && (BR != BR_SEL || 2 * rows_geom(a.hpg).BQ <= 64)) {
                const dim3 g2((grid.x + 1) / 2, grid.y, grid.z);
                auto launch = [&](auto kc) {   // KC keys a chunk (nsa_fwd_kc)
                    constexpr int KC = decltype(kc)::value;
                    const int pp = nsa_fwd_pingpong(KC);
                    const size_t sm = rows_fwd_ws_smem<D, KC>() + extra;
                    CUtensorMap mk{}, mv{};
                    if (g_nsa_cuda.rows_tma && rows_kv_tma_maps<T, KC>(a, &mk, &mv))
                        mma_launch(k_rows_fwd_ws<T, D, BR, true, KC>, g2, 384, sm, a, mk, mv, pp);
                    else mma_launch(k_rows_fwd_ws<T, D, BR, false, KC>, g2, 384, sm, a, mk, mv, pp);
                };
                if constexpr (D == 128 && BR != BR_SEL) {
                    if (nsa_fwd_kc(a, D, BR) == 128) {
                        launch(std::integral_constant<int, 128>{});
                        return;
                    }
                }
                launch(std::integral_constant<int, ROWS_KC>{});
                return;
            }
            if (g_nsa_cuda.wgmma) {
                mma_launch(k_rows_fwd<T, D, BR, true>, grid, 128, rows_fwd_smem<D, true>() + extra, a);
                return;
            }
        }
        mma_launch(k_rows_fwd<T, D, BR, false>, grid, 128, rows_fwd_smem<D, false>() + extra, a);
    }
};
template <typename T, int D> void mma_attn_fwd(const AttnArgs &a, int br) { mma_attn_rows_pass<T, D, FwdKernels<T, D>>(a, br); }

#define NSA_INSTANTIATE_FWD(D)                                  \
    template void mma_attn_fwd<bf16, D>(const AttnArgs &, int); \
    template void mma_attn_fwd<f16, D>(const AttnArgs &, int);
NSA_INSTANTIATE_FWD(16)
NSA_INSTANTIATE_FWD(64)
NSA_INSTANTIATE_FWD(128)
