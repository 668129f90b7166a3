// kernels/cuda/attn_rows.cuh — what the rows kernels share (k_rows_fwd in attn_fwd.cu,
// k_rows_dq in attn_dq.cu; the compressed and window branches, and the selection branch where
// nsa_sel_rows_on says so): a CTA of 4 warps owns 64 query rows, the flattened (t, head) pairs
// of BQ consecutive positions x the HB heads of one KV group (RowsGeom, cuda_common.cuh), 16
// rows a warp, and walks the union of its rows' keys in chunks of ROWS_KC staged in shared
// memory (cp.async, double-buffered) and shared by the 4 warps; a per-(row, key) predicate
// masks what a row does not see. For the selection branch the chunks are the union of the
// blocks the tile's positions selected, each masked for the positions that did not select it.
#ifndef NSA_KERNELS_CUDA_ATTN_ROWS_CUH
#define NSA_KERNELS_CUDA_ATTN_ROWS_CUH
#include "kernels/cuda/attn_tiles.cuh"

#define ROWS_KC 64

// tile row r (0..63) of the CTA's rows: false past the positions or the group's heads, else
// true with R its global row index (b, t, head)
__device__ __forceinline__ bool rows_row(const AttnArgs &a, const RowsGeom &rg, int b, int g, int hb, int tbase, int tend, int r,
                                         int64_t &R) {
    const int tq = r / rg.HB, h = hb * rg.HB + r % rg.HB, t = tbase + tq;
    R = ((int64_t)b * a.T + t) * a.H + (int64_t)g * a.hpg + h;
    return tq < rg.BQ && t < tend && h < a.hpg;
}
// the global row index (b, t, head) of tile row `row` at position t
__device__ __forceinline__ int64_t rows_index(const AttnArgs &a, const RowsGeom &rg, int b, int g, int hb, int row, int t) {
    const int h = hb * rg.HB + row % rg.HB;
    return ((int64_t)b * a.T + t) * a.H + (int64_t)g * a.hpg + h;
}
// the tile's 64 rows of q (and of dO into dst2 where given) [B*T*H][D] into tiles (padded, or
// SWZ: swizzled atoms), rows past the positions or heads zero; 128 threads (tid: 0..127 of the
// warpgroup that loads)
template <typename T, int D, bool SWZ, typename Dst2>
__device__ __forceinline__ void rows_tile_load(void *dst, const T *src, Dst2 dst2, const T *src2, const AttnArgs &a,
                                               const RowsGeom &rg, int b, int g, int hb, int tbase, int tend,
                                               int tid = threadIdx.x) {
    tile_load<T, D, SWZ, 64, 128>(dst, src, dst2, src2, [&](int r, int64_t &off) {
        const bool ok = rows_row(a, rg, b, g, hb, tbase, tend, r, off);
        off *= D;
        return ok;
    }, tid);
}

// S = Q K^T over a chunk's ROWS_KC keys (Kb: the chunk's K tile): by warpgroup MMA from the
// swizzled Q and K tiles (WG), else this warp's 16 rows on mma.sync (Q's fragments qf loaded
// at the first chunk, c == 0)
template <typename T, int D, bool WG>
__device__ __forceinline__ void rows_qkT(float (&s)[8][4], uint32_t (&qf)[D / 16][4], const T *Qs, const T *Kb, int c, int warp,
                                         int lane) {
    if constexpr (WG) {
        wg_qkT<T, D>(s, (uint32_t)__cvta_generic_to_shared(Qs), (uint32_t)__cvta_generic_to_shared(Kb));
    } else {
        if (c == 0) frags_a<D / 16, D + 8>(qf, Qs, warp * 16, lane);
        warp_abT<T, D / 16, 8, D + 8>(s, qf, Kb, 0, lane);
    }
}

// key range [kstart, kend) of the CTA's rows (selection: keys past kend load as zeros; the
// chunks are the union's, below)
template <int BR>
__device__ __forceinline__ void rows_keys(const AttnArgs &a, int tbase, int t_last, int &kstart, int &kend) {
    if (BR == BR_WIN) {
        kstart = tbase - a.w + 1 > 0 ? tbase - a.w + 1 : 0;
        kend = t_last + 1;
    } else if (BR == BR_SEL) {
        kstart = 0;
        kend = t_last + 1;
    } else {
        kstart = 0;
        kend = cmp_visible(t_last, a.l, a.d, a.NC);
    }
}

// Selection on the rows kernels: the blocks that any of the tile's nq positions (tbase ..)
// selected, ascending, in selj[0 .. *nu), and for each the mask of the positions that selected
// it in selm (bit q: position tbase + q; BQ <= 64). selm is NS words of shared memory: first
// one per block (integer atomicOr: the same mask whatever the order), then compacted in place
// by one warp. selj holds NS ints. Every thread of the CTA calls it (it synchronises).
__device__ __forceinline__ void sel_rows_union(const AttnArgs &a, int b, int g, int tbase, int nq, uint64_t *selm, int *selj,
                                               int *nu) {
    for (int j = threadIdx.x; j < a.NS; j += blockDim.x) selm[j] = 0;
    __syncthreads();
    const int32_t *sl = a.sel + (((int64_t)b * a.T + tbase) * a.G + g) * a.n;
    for (int i = threadIdx.x; i < nq * a.n; i += blockDim.x) {
        const int q = i / a.n, j = sl[(int64_t)q * a.G * a.n + i % a.n];
        if (j >= 0) atomicOr(reinterpret_cast<unsigned long long *>(selm + j), 1ull << q);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int m = 0;
        for (int j0 = 0; j0 < a.NS; j0 += 32) {
            const int j = j0 + lane;
            const uint64_t w = j < a.NS ? selm[j] : 0;
            const unsigned bal = __ballot_sync(0xffffffffu, w != 0);
            __syncwarp();   // every lane has read its word before any is overwritten
            if (w) {
                const int p = m + __popc(bal & ((1u << lane) - 1));
                selm[p] = w;
                selj[p] = j;
            }
            __syncwarp();
            m += __popc(bal);
        }
        if (lane == 0) *nu = m;
    }
    __syncthreads();
}
// shared memory of the union's table after a rows kernel's tiles
__host__ __device__ constexpr size_t sel_rows_table_bytes(int NS) { return (size_t)NS * 12 + 16; }

// Does the row at position t (-1: none) see key `key` of chunk c? pm is the chunk's mask of
// the tile's positions that selected its block (selection only), tbase the tile's first position.
template <int BR>
__device__ __forceinline__ bool rows_vis(const AttnArgs &a, int t, int key, int kend, uint64_t pm, int tbase) {
    if (t < 0 || key >= kend) return false;
    if (BR == BR_SEL) return key <= t && ((pm >> (t - tbase)) & 1);
    return sees<BR>(a, t, key);
}

// WG: Q, K and V in swizzled atoms after a 1024-byte alignment slack (V's area keeps the size
// of padded rows)
template <int D, bool WG> __host__ __device__ constexpr size_t rows_fwd_smem() {
    return WG ? 1024 + (size_t)(64 + 2 * ROWS_KC) * D * 2 + (size_t)2 * ROWS_KC * (D + 8) * 2
              : (size_t)(64 + 4 * ROWS_KC) * (D + 8) * 2;
}
// WG: Q, dO, K and V all in swizzled atoms after a 1024-byte alignment slack
template <int D, bool WG> __host__ __device__ constexpr size_t rows_dq_smem() {
    return WG ? 1024 + (size_t)(128 + 4 * ROWS_KC) * D * 2 : (size_t)(128 + 4 * ROWS_KC) * (D + 8) * 2;
}

// The chunks a rows kernel walks: n of them; kb(c) is the first key of chunk c and pm(c)
// (selection) the mask of the tile's positions that selected chunk c's block. Window and
// compressed: KC-key chunks from kstart (KC: ROWS_KC, or 128 in the forward at D 128,
// nsa_fwd_kc). Selection: the union of the tile's selected blocks (sel_rows_union, its table
// at `table` in shared memory), l' / ROWS_KC chunks a block.
template <int BR, int KC = ROWS_KC> struct RowsChunks {
    static_assert(KC == ROWS_KC || BR != BR_SEL, "a selection chunk is ROWS_KC keys of a block");
    int n, per, kstart, lsel;
    const int *selj;
    const uint64_t *selm;
    __device__ __forceinline__ int kb(int c) const {
        return BR == BR_SEL ? selj[c / per] * lsel + (c % per) * ROWS_KC : kstart + c * KC;
    }
    __device__ __forceinline__ uint64_t pm(int c) const { return BR == BR_SEL ? selm[c / per] : 0; }
};
// Every thread of the CTA calls it (selection: it synchronises)
template <int BR, int KC = ROWS_KC>
__device__ __forceinline__ RowsChunks<BR, KC> rows_chunks(const AttnArgs &a, int b, int g, int tbase, int t_last, int kstart, int kend,
                                                          unsigned char *table) {
    RowsChunks<BR, KC> rc;
    rc.kstart = kstart;
    rc.lsel = a.lsel;
    rc.per = BR == BR_SEL ? a.lsel / ROWS_KC : 1;
    uint64_t *selm = reinterpret_cast<uint64_t *>(table);
    int *selj = reinterpret_cast<int *>(selm + a.NS), *nu = selj + a.NS;
    rc.selm = selm;
    rc.selj = selj;
    if constexpr (BR == BR_SEL) {
        sel_rows_union(a, b, g, tbase, t_last - tbase + 1, selm, selj, nu);
        rc.n = *nu * rc.per;
    } else {
        rc.n = kend > kstart ? (kend - kstart + KC - 1) / KC : 0;
    }
    return rc;
}

// ---- the warp-specialised rows kernels (k_rows_fwd_ws in attn_fwd.cu, k_rows_dq_ws in
// attn_dq.cu): a CTA of three warpgroups, a producer streaming K and V chunks through a ring
// (ws_ring_produce) to two consumers that own position tiles 2x and 2x + 1 of the rows grid.
// Registers as k_dkdv_ws (a consumer's setmaxnreg increase takes only what the producer gave
// back). A consumer walks the ring's chunks one at a time (rows_ws_walk) or, the forward at D
// 128, overlapping them (ws_ring_run_overlap).
// The rings' stages. The forward at D 128 overlaps a chunk's P V with the next chunk's softmax
// (rows_fwd_ws_overlap), its consumer holding its last chunk until the next one's first product
// has come: 4 stages; at D 64 it walks one chunk at a time, as the dQ does (each chunk released
// after its products): 3. (One H200, alternated: the overlap moved the dense causal forward
// -5.7 % / -2.6 % at the paper shape 8k / 32k, the window forward +1.2 % / +2.9 % at m7c.)
// With 128-key chunks (the forward at D 128 off the selection, NSA_CUDA_FWD_KC128: S = Q K^T one
// m64n128k16 a k-step instead of two m64n64k16 reading Q twice) a stage is twice the keys and
// 3 stages fill the shared memory: 225.5 KiB a CTA.
#define ROWS_DQ_WS_NST 3
template <int D> __host__ __device__ constexpr bool rows_fwd_ws_overlap() { return D == 128; }
template <int D, int KC = ROWS_KC> __host__ __device__ constexpr int rows_fwd_ws_nst() {
    return KC == 128 ? 3 : rows_fwd_ws_overlap<D>() ? 4 : 3;
}
#define ROWS_WS_PRODUCER_REGS 40
#define ROWS_WS_CONSUMER_REGS 232
// the two tiles' positions tb .. tl and key ranges [ks, ke) (tile 1: none at the end of the
// rows, tb[1] >= tend), the union's range [kstart, kend) the chunks cover and its last
// position tall
struct RowsWsTiles {
    int tb[2], tl[2], ks[2], ke[2], kstart, kend, tall;
};
template <int BR> __device__ __forceinline__ RowsWsTiles rows_ws_tiles(const AttnArgs &a, const RowsGeom &rg, int tend) {
    RowsWsTiles w;
#pragma unroll
    for (int c = 0; c < 2; c++) {
        w.tb[c] = a.t0 + (2 * blockIdx.x + c) * rg.BQ;
        w.tl[c] = w.tb[c] + rg.BQ - 1 < tend - 1 ? w.tb[c] + rg.BQ - 1 : tend - 1;
        w.ks[c] = w.ke[c] = 0;
        if (w.tb[c] < tend) rows_keys<BR>(a, w.tb[c], w.tl[c], w.ks[c], w.ke[c]);
    }
    w.kstart = w.ks[0];
    w.kend = w.ke[1] > w.ke[0] ? w.ke[1] : w.ke[0];
    w.tall = w.tb[1] < tend ? w.tl[1] : w.tl[0];
    return w;
}
// the consumer warps that read the ring: 4 a tile with rows (the first always has some)
__device__ __forceinline__ int rows_ws_consumer_warps(const RowsWsTiles &w, int tend) { return w.tb[1] < tend ? 8 : 4; }
// consumer cw's own tile: positions tbase .. t_last (none where !has), keys [kst, ken); pall its
// positions' bits in a chunk's selection mask shifted down by psh (bit q of the mask: position
// tb[0] + q)
struct RowsWsOwn {
    int tbase, t_last, kst, ken, psh;
    bool has;
    uint64_t pall;
};
__device__ __forceinline__ RowsWsOwn rows_ws_own(const RowsWsTiles &w, int cw, int tend) {
    RowsWsOwn o;
    o.tbase = cw ? w.tb[1] : w.tb[0];
    o.t_last = cw ? w.tl[1] : w.tl[0];
    o.kst = cw ? w.ks[1] : w.ks[0];
    o.ken = cw ? w.ke[1] : w.ke[0];
    o.has = o.tbase < tend;
    o.psh = o.tbase - w.tb[0];
    o.pall = o.has ? (2ull << (o.t_last - o.tbase)) - 1 : 0;
    return o;
}
// does the tile take the KC-key chunk at key kb (selection: mine, the tile's bits of the chunk's
// mask)?
template <int BR, int KC = ROWS_KC> __device__ __forceinline__ bool rows_ws_takes(const RowsWsOwn &o, int kb, uint64_t mine) {
    return BR == BR_SEL ? mine != 0 && kb <= o.t_last : kb < o.ken && kb + KC > o.kst && o.has;
}
// a consumer's walk of the ring's chunks, one after another: each waited for, f(c, kb, pm, mine)
// where the tile takes it (selection: mine, the tile's positions that selected it), each released
template <int BR, int NST, typename F>
__device__ __forceinline__ void rows_ws_walk(const RowsChunks<BR> &ch, const RowsWsOwn &o, uint32_t full, uint32_t empty, int lane,
                                             F f) {
    for (int c = 0; c < ch.n; c++) {
        const int kb = ch.kb(c);
        const uint64_t pm = ch.pm(c), mine = BR == BR_SEL ? (pm >> o.psh) & o.pall : 0;
        ws_ring_wait<NST>(full, c);
        if (rows_ws_takes<BR>(o, kb, mine)) f(c, kb, pm, mine);
        ws_ring_release<NST>(empty, c, lane);
    }
}
// a consumer's chunks outside the window and compressed branches' run: the chunks [c0, c1)
// the tile takes are one run of the ring's (its keys [kst, ken))
template <int BR, int KC>
__device__ __forceinline__ void rows_ws_run(const RowsChunks<BR, KC> &ch, const RowsWsOwn &o, int &c0, int &c1) {
    static_assert(BR != BR_SEL, "a selection tile's chunks are no run");
    for (c0 = 0; c0 < ch.n && !rows_ws_takes<BR, KC>(o, ch.kb(c0), 0); c0++) {}
    for (c1 = c0; c1 < ch.n && rows_ws_takes<BR, KC>(o, ch.kb(c1), 0); c1++) {}
}
// does every row of the tile see every key of the KC-key chunk at kb (no mask needed)?
template <int BR, int KC = ROWS_KC>
__device__ __forceinline__ bool rows_ws_whole(const AttnArgs &a, const RowsWsOwn &o, int kb, uint64_t mine) {
    return kb + KC <= o.ken && sees_block<BR>(a, o.tbase, o.t_last, kb, kb + KC - 1) && (BR != BR_SEL || mine == o.pall);
}
// the producer warpgroup (threads 0..127): every chunk's K and V [KC][D] (swizzled atoms of KC
// rows) into stage c % NST of Ks and Vs, keys past kend zero. TMA (maps mk, mv over k and v
// [B][NK][G][D], box 64 elements x 1 group x KC keys: rows_kv_tma_maps): a chunk wholly
// before kend by one copy per 64-column atom of K and V (ws_ring_produce_tma), the chunk that
// kend cuts by cp.async with its zeros: the same tiles, the same bits.
template <typename T, int D, int BR, bool TMA, int NST, int KC>
__device__ __forceinline__ void rows_ws_produce(const AttnArgs &a, int b, int g, const RowsChunks<BR, KC> &ch, int kend, T *Ks, T *Vs,
                                                uint32_t full, uint32_t empty, int tid, const CUtensorMap *mk,
                                                const CUtensorMap *mv) {
    constexpr int KTILE = KC * D;
    wg_regs_dec<ROWS_WS_PRODUCER_REGS>();
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    const T *Vg = (const T *)a.v + (int64_t)b * a.NK * ks + (int64_t)g * D;
    auto issue = [&](int c) {
        const int s = c % NST;
        kv_tile_load<T, D, true, KC, 128, KC>(Ks + s * KTILE, Kg, Vs + s * KTILE, Vg, ks, ch.kb(c), kend, tid);
    };
    if constexpr (TMA) {
        auto bulk = [&](int c) { return ch.kb(c) + KC <= kend; };
        auto tma = [&](int c, uint32_t bar) {
            if (tid != 0) return;
            const int s = c % NST, kb = ch.kb(c);
            mbar_add_tx(bar, 2 * KTILE * (uint32_t)sizeof(T));
#pragma unroll
            for (int at = 0; at < D / 64; at++) {
                tma_load4(Ks + s * KTILE + at * KC * 64, mk, at * 64, g, kb, b, bar);
                tma_load4(Vs + s * KTILE + at * KC * 64, mv, at * 64, g, kb, b, bar);
            }
        };
        ws_ring_produce_tma<NST>(ch.n, full, empty, bulk, tma, issue);
    } else {
        ws_ring_produce<NST>(ch.n, full, empty, issue);
    }
}
// the maps of rows_ws_produce's TMA copies (host); false where they cannot be made (the
// cp.async copies then)
template <typename T, int KC = ROWS_KC> static bool rows_kv_tma_maps(const AttnArgs &a, CUtensorMap *mk, CUtensorMap *mv) {
    return kv_tma_maps<T>(a, KC, mk, mv, "the rows kernels read K and V by cp.async");
}

// WG (sm_90a, D 64 or 128): both products by warpgroup MMA from swizzled Q, K and V tiles:
// S = Q K^T (wg_qkT), then O += P V with P from registers and V as a transposed B operand
#endif
