// kernels/cuda/attn_dkdv.cu — dK and dV of the attention backward of the three NSA branches on
// tensor cores, then its launcher. Key-centric: a CTA owns KT keys of one (b, group) and a chunk
// of the rows that see them: for the window and compressed branches a contiguous range of
// positions, for the selection branch the inverted index (the positions that selected the
// block, ascending). Rows are flattened (t, head) pairs, so every MMA row is useful whatever the
// group size. Each warp owns 16 keys and accumulates dK, dV over the CTA's rows in order; the
// CTA writes fp32 partials that k_reduce_parts (cuda_nsa.cu) adds in row-chunk order:
// deterministic without atomics. Instantiated for bf16/fp16 and D 16, 64, 128.
#include "kernels/cuda/attn_tiles.cuh"

// ============================================================================================
// shared by both kernels
// ============================================================================================
// A CTA's work: entry e (keys kb .. kb + nk - 1 of one (b, group)) and its row chunk c (partial
// c of the entry), rows r_lo .. r_hi - 1 of the entry's flattened (t, head) list (none where
// r_lo >= nrows). Flat row f is head f % hpg of position rb + f / hpg, or of list[f / hpg] for
// the selection branch (the positions that selected the block, ascending). blockIdx.y is c, or
// with rows_abs the group's row chunk (dkdv_row_chunks: the entry's chunk c = blockIdx.y - first,
// none outside its chunks).
struct DkdvWork {
    int kb, nk, rb, nrows, r_lo, r_hi, b, g, hpg;
    const int32_t *list;
};
template <int BR> __device__ __forceinline__ DkdvWork dkdv_work(const AttnArgs &a, int NKC) {
    const int e = blockIdx.x;
    const int4 ch = a.chunks[e];
    DkdvWork w;
    w.kb = ch.x, w.nk = ch.y, w.rb = ch.z, w.nrows = ch.w;
    int c = blockIdx.y;
    if (BR != BR_SEL && a.rows_abs) {
        // the group's rows y rch .. (y + 1) rch - 1, counted from the entry's first row r0
        const DkdvChunk rc = dkdv_row_chunks(a, w.rb, w.nrows);
        const int y = blockIdx.y, r0 = w.rb * a.hpg;
        c = y - rc.first;
        w.r_lo = max(y * a.rch - r0, 0);
        w.r_hi = min((y + 1) * a.rch - r0, w.nrows);
        if (c < 0 || c >= rc.count) w.r_lo = w.nrows;   // none of the entry's rows
    } else {
        w.r_lo = c * a.rch;
        w.r_hi = w.r_lo + a.rch < w.nrows ? w.r_lo + a.rch : w.nrows;
    }
    const int bg = e / NKC;
    w.b = bg / a.G, w.g = bg % a.G, w.hpg = a.hpg;
    w.list = BR == BR_SEL ? a.ilist + w.rb : NULL;
    return w;
}
// the partial the CTA's chunk c (dkdv_work) writes, worked out where it is written: a register
// holding it through the row loop cost the 64-key kernel at D 64 its third CTA an SM (170
// registers a thread, 168 the most for three)
template <int BR> __device__ __forceinline__ int dkdv_part(const AttnArgs &a) {
    const int e = blockIdx.x;
    int c = blockIdx.y;
    if (BR != BR_SEL && a.rows_abs) {
        const int4 ch = a.chunks[e];
        c -= dkdv_row_chunks(a, ch.z, ch.w).first;
    }
    return a.chunk_part[e] + c;
}
// S^T and dP^T of a warp's 16 keys x a tile's rows into P^T and dS^T = P^T (dP^T - Drow): element
// (nt, q) is key key0 + 8 (q >> 1), tile row nt*8 + 2*tig + (q & 1) (tb, lb, db: the tile's t,
// lse and Drow); zero where the row does not exist, the key is past the chunk (kv0, kv1) or the
// row does not see it. lb in log2 units (a row whose lse is -inf has t = -1), or RAW: the saved
// lse itself, taken to log2 units here (the same product, rounded alone) and a row whose lse is
// -inf masked here
template <int BR, int NRT, bool RAW = false>
__device__ __forceinline__ void dkdv_probs(const AttnArgs &a, float (&s)[NRT][4], float (&dp)[NRT][4], const int *tb, const float *lb,
                                           const float *db, int key0, bool kv0, bool kv1, int tig) {
#pragma unroll
    for (int nt = 0; nt < NRT; nt++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int row = nt * 8 + 2 * tig + (q & 1), t = tb[row];
            const int key = key0 + 8 * (q >> 1);
            const float l2 = RAW ? __fmul_rn(lb[row], MMA_LOG2E) : lb[row];
            const bool vis = t >= 0 && (!RAW || l2 != -INFINITY) && ((q >> 1) ? kv1 : kv0) && sees<BR>(a, t, key);
            const float p = vis ? exp2_ftz(s[nt][q] * a.scale_log2 - l2) : 0.f;
            s[nt][q] = p;
            dp[nt][q] = p * (dp[nt][q] - db[row]);
        }
}
// a warp's dK (scaled) and dV sums, its keys kw .. kw + 15 of the CTA's KT, into partial `part`
// (dkdv_part: this CTA's)
template <int D, int KT>
__device__ __forceinline__ void dkdv_write_part(const AttnArgs &a, const float (&dka)[D / 8][4], const float (&dva)[D / 8][4], int kw,
                                                int lane, int part) {
    const int gid = lane >> 2, tig = lane & 3;
    float *pk = a.part + (int64_t)part * 2 * KT * D;
    float *pv = pk + KT * D;
#pragma unroll
    for (int nt = 0; nt < D / 8; nt++)
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int kl = kw + gid + 8 * (q >> 1), dd = nt * 8 + 2 * tig + (q & 1);
            pk[kl * D + dd] = a.scale * dka[nt][q];
            pv[kl * D + dd] = dva[nt][q];
        }
}

// ============================================================================================
// kernel
// ============================================================================================
// rows per tile the kernel is instantiated with unless its launcher asks for others: 64 with
// warpgroup MMA at D 64 (the first products m64n64k16, as in the rows kernels), else 32. At D
// 128 with warpgroup MMA the launcher asks for 64 by default (NSA_CUDA_DKDV_RT64=1: 240
// registers a thread, no spills, two CTAs an SM as with 32; the selection's dK/dV 7 % faster)
template <int D, bool WG> __host__ __device__ constexpr int dkdv_rt() { return WG && D == 64 ? 64 : 32; }
// CTAs an SM the 64-key kernel is compiled for: 3 with warpgroup MMA at D 64 (at most 168
// registers a thread; its 52 KB of shared memory fit three, and at 170 registers only two ran),
// else 0 (no minimum: ptxas chooses the registers)
template <int D, bool WG> __host__ __device__ constexpr int dkdv_min_ctas() { return WG && D == 64 ? 3 : 0; }

// K, V, two buffers of the Q / dO row tiles, then two buffers of the rows' lse, Drow, t (4
// bytes each), global row index (8 bytes), its t and its list entry (4 bytes each). WG: the
// tiles swizzled (K and V in 64-row atoms, the row tiles in RT-row atoms of RT * 128 bytes)
// after a 1024-byte alignment slack
template <int D, int KT, bool WG, int RT = dkdv_rt<D, WG>()> constexpr size_t dkdv_smem() {
    return WG ? 1024 + (size_t)(2 * KT + 4 * RT) * D * 2 + 2 * 7 * RT * 4 : (size_t)(2 * KT + 4 * RT) * (D + 8) * 2 + 2 * 7 * RT * 4;
}

// WG (sm_90a, KT 64, D 64 or 128): every product by warpgroup MMA from swizzled tiles.
// S^T = K Q^T and dP^T = V dO^T for the CTA's 64 keys x a tile's RT rows (wg_two), then
// dV += P^T dO and dK += dS^T Q with P^T, dS^T from registers and dO, Q as transposed B
// operands (wg_rs).
template <typename T, int D, int KT, int BR, bool WG, int RT = dkdv_rt<D, WG>()>
__global__ void __launch_bounds__(KT * 2, dkdv_min_ctas<D, WG>()) k_dkdv(AttnArgs a, int NKC) {
    constexpr int DP = D + 8, NKS = D / 16, NDT = D / 8, NW = KT / 16, NTH = NW * 32;
    static_assert(!WG || (KT == 64 && D % 64 == 0), "the warpgroup path: 64 keys, 64-element atoms");
    static_assert(RT <= NTH, "a thread owns each row of a tile");
    constexpr int KP = WG ? D : DP;                // elements per row as stored
    constexpr int NRT = RT / 8;                    // the rows per tile's n-tiles
    constexpr int RT_ATOM = RT * 128;              // WG: bytes of an RT-row atom (the row tiles)
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = WG ? smem_align1024(smem_raw) : smem_raw;
    T *Ks = reinterpret_cast<T *>(base);
    T *Vs = Ks + KT * KP;
    T *Qs = Vs + KT * KP;                       // [2][RT][KP]
    T *Ys = Qs + 2 * RT * KP;              // [2][RT][KP]
    float *l2s = reinterpret_cast<float *>(Ys + 2 * RT * KP);   // [2][RT] the rows' lse as saved
    float *drs = l2s + 2 * RT;                                   // [2][RT] Drow
    int *trs = reinterpret_cast<int *>(drs + 2 * RT);            // [2][RT] t (-1: no row)
    int64_t *rix = reinterpret_cast<int64_t *>(trs + 2 * RT);    // [2][RT] global row (-1: none)
    int *tix = reinterpret_cast<int *>(rix + 2 * RT);             // [2][RT] its t, for trs
    int *lpx = tix + 2 * RT;                                      // [2][RT] its list entry
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const DkdvWork w = dkdv_work<BR>(a, NKC);
    if (w.r_lo >= w.nrows) return;
    const int kb = w.kb, nk = w.nk, rb = w.rb, r_lo = w.r_lo, r_hi = w.r_hi, b = w.b, g = w.g, hpg = w.hpg;
    const int32_t *list = w.list;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    kv_tile_load<T, D, WG, KT, NTH>(Ks, Kg, Vs, Vg, ks, kb, kb + nk, tid);
    // Row tiles in a pipeline with nothing but copies in flight: thread r < RT owns row r of every
    // tile. Two tiles ahead it works out the row's global index and position (rix, tix) from the
    // entry's list, whose entry it copied a tile before that (lpx); one tile ahead every thread
    // copies the tile's Q and dO rows at those indices and thread r the row's lse and Drow, all by
    // cp.async, so no load is waited for in the loop but the copies. Tile `it` computes from
    // buffer it & 1.
    const int ntiles = (r_hi - r_lo + RT - 1) / RT;
    const bool own = tid < RT;
    auto row_pos = [&](int it, int &ti, int &hh) {   // row tid of tile it: false past the CTA's rows
        const int f = r_lo + it * RT + tid;
        ti = f / hpg;
        hh = f - ti * hpg;
        return f < r_hi;
    };
    auto list_copy = [&](int it, int buf) {   // the row's list entry (selection) of tile it into lpx[buf]
        int ti, hh;
        if (list && it < ntiles && row_pos(it, ti, hh)) cp4(lpx + buf * RT + tid, list + ti);
    };
    auto row_meta = [&](int it, int lv, int &t, int64_t &R) {   // the row's t and global row
        int ti, hh;
        t = -1;
        R = -1;
        if (it < ntiles && row_pos(it, ti, hh)) {
            t = list ? lv : rb + ti;
            R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + hh;
        }
    };
    auto issue_rows = [&](int buf) {   // the tile at rix[buf] into buffer buf
        const int64_t *rx = rix + buf * RT;
        tile_load<T, D, WG, RT, NTH, RT, true>(Qs + buf * RT * KP, (const T *)a.q, Ys + buf * RT * KP, (const T *)a.dout,
                                         [&](int r, int64_t &off) {
                                             const int64_t x = rx[r];
                                             off = x * D;
                                             return x >= 0;
                                         }, tid);
        if (own) {
            const int64_t R = rx[tid];
            trs[buf * RT + tid] = tix[buf * RT + tid];
            if (R >= 0) {
                cp4(l2s + buf * RT + tid, a.lse_in + R);
                cp4(drs + buf * RT + tid, a.drow + R);
            } else {
                l2s[buf * RT + tid] = -INFINITY;
                drs[buf * RT + tid] = 0.f;
            }
        }
    };
    auto own_meta = [&](int it, int buf) {   // tile it's row from its list entry in lpx[buf]
        int t;
        int64_t R;
        row_meta(it, lpx[buf * RT + tid], t, R);
        rix[buf * RT + tid] = R;
        tix[buf * RT + tid] = t;
    };
    if (own) {
        list_copy(0, 0);
        list_copy(1, 1);
        cp_commit();
        cp_wait<0>();
        own_meta(0, 0);
        own_meta(1, 1);
        list_copy(2, 0);
    }
    __syncthreads();   // rix[0], rix[1] written
    issue_rows(0);
    cp_commit();

    float dka[NDT][4], dva[NDT][4];
    acc_zero(dka);
    acc_zero(dva);
    const int kw = warp * 16;   // this warp's first key (local)
    const int key0 = kb + kw + gid;
    const bool kv0 = kw + gid < nk, kv1 = kw + gid + 8 < nk;

    // EARLY (warpgroup MMA, 64-row tiles): a tile's S^T and dP^T are issued first and the next
    // tile's copies while they run, one barrier a tile; otherwise the copies first, then the
    // products, two barriers a tile
    constexpr bool EARLY = WG && RT == 64;
    for (int it = 0; it < ntiles; it++) {
        const int buf = it & 1;
        const T *Qb = Qs + buf * RT * KP, *Yb = Ys + buf * RT * KP;
        const int *tb = trs + buf * RT;
        const float *lb = l2s + buf * RT, *db = drs + buf * RT;
        float s[NRT][4], dp[NRT][4];
        if constexpr (EARLY) {
            cp_wait<0>();   // tile it (its copies issued during tile it - 1), tile it + 2's list entries
            wg_fence_proxy();
            // tile it in place for every warp; buffer buf^1 and rix[buf] free (their last readers,
            // tile it - 1's products and copies, are past); rix[buf^1] written
            __syncthreads();
            wg_two_issue<T, D, RT_ATOM>(s, dp, (uint32_t)__cvta_generic_to_shared(Ks), (uint32_t)__cvta_generic_to_shared(Qb),
                                        (uint32_t)__cvta_generic_to_shared(Vs), (uint32_t)__cvta_generic_to_shared(Yb));
            if (it + 1 < ntiles) issue_rows(buf ^ 1);
            if (own) list_copy(it + 3, buf ^ 1);
            cp_commit();
            if (own) own_meta(it + 2, buf);
            wg_wait0();
        } else {
            __syncthreads();   // buffer buf^1 free (its last reader finished at it-1), rix[buf^1] written
            if (it + 1 < ntiles) issue_rows(buf ^ 1);
            if (own) list_copy(it + 3, buf ^ 1);
            cp_commit();
            cp_wait<1>();   // tile it, and tile it + 2's list entries
            // tile it + 2's rows (rix[buf] was read for tile it before the barrier)
            if (own) own_meta(it + 2, buf);
            if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
            __syncthreads();
            if constexpr (WG) {
                wg_two<T, D, RT, RT_ATOM>(s, dp, (uint32_t)__cvta_generic_to_shared(Ks), (uint32_t)__cvta_generic_to_shared(Qb),
                                          (uint32_t)__cvta_generic_to_shared(Vs), (uint32_t)__cvta_generic_to_shared(Yb));
            } else {
                static_assert(WG || RT == 32, "mma.sync: 32-row tiles");
#pragma unroll
                for (int i = 0; i < 4; i++)
#pragma unroll
                    for (int q = 0; q < 4; q++) s[i][q] = dp[i][q] = 0.f;
#pragma unroll
                for (int kk = 0; kk < NKS; kk++) {
                    uint32_t ka[4], va[4];
                    frag_a<DP>(ka, Ks, kw, kk * 16, lane);
                    frag_a<DP>(va, Vs, kw, kk * 16, lane);
#pragma unroll
                    for (int np = 0; np < 2; np++) {
                        uint32_t bf[4];
                        frag_b_nk<DP>(bf, Qb, np * 16, kk * 16, lane);
                        mma16816<T>(s[2 * np], ka, bf[0], bf[1]);
                        mma16816<T>(s[2 * np + 1], ka, bf[2], bf[3]);
                        frag_b_nk<DP>(bf, Yb, np * 16, kk * 16, lane);
                        mma16816<T>(dp[2 * np], va, bf[0], bf[1]);
                        mma16816<T>(dp[2 * np + 1], va, bf[2], bf[3]);
                    }
                }
            }
        }
        dkdv_probs<BR, NRT, true>(a, s, dp, tb, lb, db, key0, kv0, kv1, tig);
        if constexpr (WG) {
            // dV += P^T dO, dK += dS^T Q by warpgroup MMA: P^T and dS^T from registers,
            // dO and Q as transposed B operands
            uint32_t pa[RT / 16][4], da[RT / 16][4];
#pragma unroll
            for (int kk = 0; kk < RT / 16; kk++) {
                acc_afrag<T>(pa[kk], s[2 * kk], s[2 * kk + 1]);
                acc_afrag<T>(da[kk], dp[2 * kk], dp[2 * kk + 1]);
            }
            wg_fence();
            wg_rs<T, D, RT>(dva, pa, (uint32_t)__cvta_generic_to_shared(Yb), RT_ATOM);
            wg_rs<T, D, RT>(dka, da, (uint32_t)__cvta_generic_to_shared(Qb), RT_ATOM);
            wg_commit();
            wg_wait0();
        } else {
#pragma unroll
            for (int kk = 0; kk < 2; kk++) {
                uint32_t pa[4];
                acc_afrag<T>(pa, s[2 * kk], s[2 * kk + 1]);
                uint32_t da[4];
                acc_afrag<T>(da, dp[2 * kk], dp[2 * kk + 1]);
#pragma unroll
                for (int dd = 0; dd < D / 16; dd++) {
                    uint32_t bf[4];
                    frag_b_kn<DP>(bf, Yb, kk * 16, dd * 16, lane);
                    mma16816<T>(dva[2 * dd], pa, bf[0], bf[1]);
                    mma16816<T>(dva[2 * dd + 1], pa, bf[2], bf[3]);
                    frag_b_kn<DP>(bf, Qb, kk * 16, dd * 16, lane);
                    mma16816<T>(dka[2 * dd], da, bf[0], bf[1]);
                    mma16816<T>(dka[2 * dd + 1], da, bf[2], bf[3]);
                }
            }
        }
    }
    dkdv_write_part<D, KT>(a, dka, dva, kw, lane, dkdv_part<BR>(a));
}

// ============================================================================================
// warp-specialised kernel (sm_90a, D 64 or 128: window and compressed branches)
// ============================================================================================
// A CTA owns WS_KT = 128 keys of one (b, group) and a chunk of the rows that see them, in
// three warpgroups: a producer that streams the rows' Q and dO tiles (WS_RT = 64 rows) and their
// t, lse and Drow into a ring of WS_NST stages, and two consumers of 64 keys each that take every
// tile from the ring: S^T = K Q^T and dP^T = V dO^T (64 keys x 64 rows, wg_two_issue), P and dS in
// registers, then dV += P^T dO and dK += dS^T Q (wg_rs). The two consumers share each tile (half
// the loads of the 64-key kernel per product) and run out of step with each other and with the
// producer: a full barrier a stage says its tile has landed (the producer's copies waited for,
// made visible to the warpgroup MMA, then an arrival of each producer thread), an empty barrier
// that both consumers are done with it (an arrival a consumer warp). Registers: the consumers
// hold dK and dV (64 keys x D fp32 each) and the tile's S and dP; the producer gives its
// registers to them (setmaxnreg). Rows are accumulated in the same order as k_dkdv, the partials
// written and reduced the same way (k_reduce_parts, KT = 128).
// TMA (NSA_CUDA_DKDV_TMA=1, the default, where the group's heads divide 64): a tile of whole
// positions inside the CTA's rows comes in as one TMA tile copy per 64-column atom of Q and dO
// (4-D maps over q and dO [B][T][H][D], box 64 elements x the group's heads x 64 / hpg
// positions, rows_tma_maps), its landing counted on the stage's full barrier (thread 0 adds the
// bytes to expect before it issues; every producer thread arrives once its row metadata is
// written, so the arrival releases that metadata to the consumers), so the
// producer refills a stage as soon as it is released, never waiting for a landing; any other
// tile (the last, partial one: rows past the CTA's must read as zeros, not as a later
// position's values) goes through the cp.async path, waited for before the arrivals. The same
// tiles and order: the same bits.
#define WS_KT 128
#define WS_RT 64
#define WS_NST 3
// registers a thread after setmaxnreg: the kernel starts with 168 (64 Ki / 384, rounded down to
// 8), and a consumer's increase can only take what the producer gave back within the CTA (else
// it waits for ever), so 2 (consumer - 168) <= 168 - producer: 232 and 40, the producer's fewest
// without spilling
#define WS_PRODUCER_REGS 40
#define WS_CONSUMER_REGS 232
template <int D> constexpr size_t dkdv_ws_smem() {
    // 1024-byte alignment slack, K and V [2][64][D] each, the ring's Q and dO [WS_NST][64][D]
    // each, t, lse, Drow [WS_NST][64] each and two live flags a stage, then the full and empty
    // barriers
    return 1024 + (size_t)2 * WS_KT * D * 2 + (size_t)WS_NST * 2 * WS_RT * D * 2 + (size_t)WS_NST * (3 * WS_RT + 2) * 4 + 2 * WS_NST * 8;
}

template <typename T, int D, int BR, bool TMA>
__global__ void __launch_bounds__(384, 1) k_dkdv_ws(AttnArgs a, int NKC, const __grid_constant__ CUtensorMap mq,
                                                    const __grid_constant__ CUtensorMap my) {
    constexpr int KT = WS_KT, RT = WS_RT, NST = WS_NST, NRT = RT / 8, NDT = D / 8, TILE = RT * D;
    constexpr uint32_t ATOM = RT * 128;   // bytes of a 64-row, 64-column swizzled atom
    static_assert(D % 64 == 0, "swizzled atoms are 64 elements wide");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    unsigned char *base = smem_align1024(smem_raw);
    T *Ks = reinterpret_cast<T *>(base);   // [2][64][D]: consumer c's keys at Ks + c 64 D
    T *Vs = Ks + KT * D;
    T *Qs = Vs + KT * D;                    // [NST][RT][D]
    T *Ys = Qs + NST * TILE;                // [NST][RT][D]
    int *trs = reinterpret_cast<int *>(Ys + NST * TILE);   // [NST][RT]
    float *l2s = reinterpret_cast<float *>(trs + NST * RT);
    float *drs = l2s + NST * RT;
    int *live = reinterpret_cast<int *>(drs + NST * RT);   // [NST][2]: rows 0-31, 32-63 all live
    const uint32_t full = (uint32_t)__cvta_generic_to_shared(live + 2 * NST), empty = full + 8 * NST;
    const int tid = threadIdx.x, wg = tid >> 7;
    const DkdvWork w = dkdv_work<BR>(a, NKC);
    if (w.r_lo >= w.nrows) return;
    const int kb = w.kb, nk = w.nk, rb = w.rb, r_lo = w.r_lo, r_hi = w.r_hi, b = w.b, g = w.g, hpg = w.hpg;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    kv_tile_load<T, D, true, 64, 384>(Ks, Kg, Vs, Vg, ks, kb, kb + nk, tid);
    kv_tile_load<T, D, true, 64, 384>(Ks + 64 * D, Kg, Vs + 64 * D, Vg, ks, kb + 64, kb + nk, tid);
    cp_commit();
    ws_ring_init<NST>(full, empty, tid, 8);
    cp_wait<0>();
    wg_fence_proxy();
    __syncthreads();
    const int ntiles = (r_hi - r_lo + RT - 1) / RT;

    if (wg == 0) {
        // ---- producer: the rows' tiles through the ring (ws_ring_produce)
        wg_regs_dec<WS_PRODUCER_REGS>();
        // the tile's rows' t, lse and Drow, and its live flags (threads 0 .. RT - 1)
        auto issue_meta = [&](int s, int f0) {
            if (tid < RT) {
                const int f = f0 + tid;
                int t = -1;
                float l2 = -INFINITY, dr = 0.f;
                if (f < r_hi) {
                    t = rb + f / hpg;
                    const int64_t R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + f % hpg;
                    l2 = a.lse_in[R] * MMA_LOG2E;
                    dr = a.drow[R];
                    if (l2 == -INFINITY) t = -1;
                }
                trs[s * RT + tid] = t;
                l2s[s * RT + tid] = l2;
                drs[s * RT + tid] = dr;
                // the tile's rows all live (each of the two warps' ballot): the consumers' fast path
                const unsigned dead = __ballot_sync(0xffffffffu, t < 0);
                if ((tid & 31) == 0) live[s * 2 + (tid >> 5)] = dead == 0u;
            }
        };
        // tile j's Q and dO rows by cp.async (rows past the CTA's as zeros) and its metadata
        auto issue = [&](int j) {
            const int s = j % NST, f0 = r_lo + j * RT;
            auto row_at = [&](int r, int64_t &off) {
                const int f = f0 + r;
                if (f >= r_hi) return false;
                off = (((int64_t)b * a.T + rb + f / hpg) * a.H + (int64_t)g * hpg + f % hpg) * D;
                return true;
            };
            tile_load<T, D, true, RT, 128, RT>(Qs + s * TILE, (const T *)a.q, Ys + s * TILE, (const T *)a.dout, row_at, tid);
            issue_meta(s, f0);
        };
        if constexpr (TMA) {
            // tile j: whole positions inside the CTA's rows by TMA, its metadata by the threads
            // above; any other tile by the cp.async copies of issue
            auto bulk = [&](int j) {
                const int f0 = r_lo + j * RT;
                return f0 + RT <= r_hi && f0 % hpg == 0;
            };
            auto tma = [&](int j, uint32_t bar) {
                const int s = j % NST, f0 = r_lo + j * RT;
                if (tid == 0) {
                    mbar_add_tx(bar, 2 * TILE * (uint32_t)sizeof(T));
                    const int t0 = rb + f0 / hpg;
#pragma unroll
                    for (int at = 0; at < D / 64; at++) {
                        tma_load4(Qs + s * TILE + at * RT * 64, &mq, at * 64, g * hpg, t0, b, bar);
                        tma_load4(Ys + s * TILE + at * RT * 64, &my, at * 64, g * hpg, t0, b, bar);
                    }
                }
                issue_meta(s, f0);
            };
            ws_ring_produce_tma<NST>(ntiles, full, empty, bulk, tma, issue);
        } else {
            ws_ring_produce<NST>(ntiles, full, empty, issue);
        }
        return;
    }

    // ---- consumers: warpgroup c owns keys kb + 64 c .. kb + 64 c + 63
    wg_regs_inc<WS_CONSUMER_REGS>();
    const int c = wg - 1, warp = (tid >> 5) & 3, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int kw = c * 64 + warp * 16;   // this warp's first key (local)
    const int key0 = kb + kw + gid;
    const bool kv0 = kw + gid < nk, kv1 = kw + gid + 8 < nk;
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(Ks + c * 64 * D), sV = (uint32_t)__cvta_generic_to_shared(Vs + c * 64 * D);
    float dka[NDT][4], dva[NDT][4];
    acc_zero(dka);
    acc_zero(dva);
    // Each tile waits for its own products (issuing a tile's first products behind the previous
    // tile's still-running second ones makes ptxas serialise every warpgroup MMA, C7515).
    for (int it = 0; it < ntiles; it++) {
        const int s = it % NST;
        ws_ring_wait<NST>(full, it);
        const uint32_t sQ = (uint32_t)__cvta_generic_to_shared(Qs + s * TILE), sY = (uint32_t)__cvta_generic_to_shared(Ys + s * TILE);
        const int *tb = trs + s * RT;
        const float *lb = l2s + s * RT, *db = drs + s * RT;
        float sc[NRT][4], dp[NRT][4];
        wg_two_issue<T, D, ATOM>(sc, dp, sK, sQ, sV, sY);
        wg_wait0();
        // every row of the tile sees every key of this warpgroup (the rows' positions ascend:
        // the first and last bound them): no mask (the same values as the masked path)
        const int f0 = r_lo + it * RT, flast = f0 + RT - 1;
        const bool all = flast < r_hi && live[s * 2] && live[s * 2 + 1] &&
                         sees_block<BR>(a, rb + f0 / hpg, rb + flast / hpg, kb + c * 64, kb + c * 64 + 63) && c * 64 + 64 <= nk;
        // element (nt, q): key key0 + 8 (q >> 1), row nt*8 + 2*tig + (q & 1)
        if (all) {
#pragma unroll
            for (int nt = 0; nt < NRT; nt++)
#pragma unroll
                for (int q = 0; q < 4; q++) {
                    const int row = nt * 8 + 2 * tig + (q & 1);
                    const float p = exp2_ftz(sc[nt][q] * a.scale_log2 - lb[row]);
                    sc[nt][q] = p;
                    dp[nt][q] = p * (dp[nt][q] - db[row]);
                }
        } else {
            dkdv_probs<BR>(a, sc, dp, tb, lb, db, key0, kv0, kv1, tig);
        }
        uint32_t pa[RT / 16][4], da[RT / 16][4];   // P^T and dS^T: the A of the second products
#pragma unroll
        for (int kk = 0; kk < RT / 16; kk++) {
            acc_afrag<T>(pa[kk], sc[2 * kk], sc[2 * kk + 1]);
            acc_afrag<T>(da[kk], dp[2 * kk], dp[2 * kk + 1]);
        }
        wg_fence();
        wg_rs<T, D, RT>(dva, pa, sY, ATOM);
        wg_rs<T, D, RT>(dka, da, sQ, ATOM);
        wg_commit();
        wg_wait0();
        ws_ring_release<NST>(empty, it, lane);
    }
    dkdv_write_part<D, KT>(a, dka, dva, kw, lane, dkdv_part<BR>(a));
}

// ============================================================================================
// launcher
// ============================================================================================
// dK/dV: 64-key chunks (128 threads) for every branch, 16-key chunks (32 threads) for
// selection blocks of 16 keys
template <typename T, int D, int KT, bool WG, int RT = dkdv_rt<D, WG>()>
static void dkdv_launch(const AttnArgs &a, int br, dim3 grid, int NKC) {
    const size_t sm = dkdv_smem<D, KT, WG, RT>();
    if (br == BR_WIN) mma_launch(k_dkdv<T, D, KT, BR_WIN, WG, RT>, grid, KT * 2, sm, a, NKC);
    else if (br == BR_CMP) mma_launch(k_dkdv<T, D, KT, BR_CMP, WG, RT>, grid, KT * 2, sm, a, NKC);
    else mma_launch(k_dkdv<T, D, KT, BR_SEL, WG, RT>, grid, KT * 2, sm, a, NKC);
}
// k_dkdv_ws's TMA maps over q and dO [B][T][H][D]: a box of 64 elements x the group's heads x
// 64 / hpg positions (64 rows); false where the heads do not divide 64 or a map cannot be made
template <typename T> static bool rows_tma_maps(const AttnArgs &a, CUtensorMap *mq, CUtensorMap *my) {
    if (a.hpg < 1 || 64 % a.hpg != 0) return false;
    const uint64_t dims[4] = {(uint64_t)a.D, (uint64_t)a.H, (uint64_t)a.T, (uint64_t)a.B};
    const uint32_t box[4] = {64, (uint32_t)a.hpg, (uint32_t)(64 / a.hpg), 1};
    return tma_map_4d<T>(mq, a.q, dims, box, "dK/dV reads its rows by cp.async") &&
           tma_map_4d<T>(my, a.dout, dims, box, "dK/dV reads its rows by cp.async");
}
template <typename T, int D, bool TMA>
static void dkdv_ws_launch(const AttnArgs &a, int br, dim3 grid, int NKC, const CUtensorMap &mq, const CUtensorMap &my) {
    const size_t sm = dkdv_ws_smem<D>();
    if (br == BR_WIN) mma_launch(k_dkdv_ws<T, D, BR_WIN, TMA>, grid, 384, sm, a, NKC, mq, my);
    else mma_launch(k_dkdv_ws<T, D, BR_CMP, TMA>, grid, 384, sm, a, NKC, mq, my);
}
template <typename T, int D> void mma_attn_dkdv(const AttnArgs &a, int br) {
    const int NKC = a.nentries / (a.B * a.G);
    // blockIdx.y: an entry's row chunk, or with rows_abs the group's (dkdv_work)
    const int maxrows = a.rows_abs ? a.T * a.hpg : br == BR_WIN ? (a.kt + a.w) * a.hpg : a.T * a.hpg;
    dim3 grid(a.nentries, (maxrows + a.rch - 1) / a.rch);
    if constexpr (D % 64 == 0) {
        if (a.kt == WS_KT) {   // window / compressed where nsa_dkdv_ws_on
            CUtensorMap mq{}, my{};
            if (g_nsa_cuda.dkdv_tma && rows_tma_maps<T>(a, &mq, &my)) dkdv_ws_launch<T, D, true>(a, br, grid, NKC, mq, my);
            else dkdv_ws_launch<T, D, false>(a, br, grid, NKC, mq, my);
            CUDA_LAUNCHED();
            return;
        }
        if (a.kt == 64 && g_nsa_cuda.wgmma) {
            if (D == 128 && g_nsa_cuda.dkdv_rt64) dkdv_launch<T, D, 64, true, 64>(a, br, grid, NKC);
            else dkdv_launch<T, D, 64, true>(a, br, grid, NKC);
            CUDA_LAUNCHED();
            return;
        }
    }
    if (a.kt == 64) dkdv_launch<T, D, 64, false>(a, br, grid, NKC);
    else mma_launch(k_dkdv<T, D, 16, BR_SEL, false>, grid, 32, dkdv_smem<D, 16, false>(), a, NKC);
    CUDA_LAUNCHED();
}

#define NSA_INSTANTIATE_DKDV(D)                                  \
    template void mma_attn_dkdv<bf16, D>(const AttnArgs &, int); \
    template void mma_attn_dkdv<f16, D>(const AttnArgs &, int);
NSA_INSTANTIATE_DKDV(16)
NSA_INSTANTIATE_DKDV(64)
NSA_INSTANTIATE_DKDV(128)
