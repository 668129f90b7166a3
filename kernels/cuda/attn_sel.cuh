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
// sel_union by a warp: PACK 1 (or a tile of one position) its lanes read the list 32 entries
// at a time and keep the valid ones in order (a ballot's prefix), the same list as sel_union's;
// a pair's merge by lane 0. Ends with the list seen by the whole warp.
template <int PACK>
__device__ __forceinline__ void sel_union_warp(const AttnArgs &a, const SelTile &st, int b, int g, int *ul, int *uf, int *nu, int lane) {
    if (PACK == 1 || st.t[1] < 0) {
        const int32_t *sa = a.sel + (((int64_t)b * a.T + st.t[0]) * a.G + g) * a.n;
        int m = 0;
        for (int c0 = 0; c0 < a.n; c0 += 32) {
            const int x = c0 + lane < a.n ? sa[c0 + lane] : -1;
            const unsigned v = __ballot_sync(0xffffffffu, x >= 0);
            if (x >= 0) {
                const int at = m + __popc(v & ((1u << lane) - 1u));
                ul[at] = x;
                uf[at] = 3;
            }
            m += __popc(v);
        }
        if (lane == 0) *nu = m;
    } else if (lane == 0) {
        sel_union<PACK>(a, st, b, g, ul, uf, nu);
    }
    __syncwarp();
}

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
            const float p = vis ? exp2_ftz(s[nt][e] * scale_log2 - l2r[r]) : 0.f;
            s[nt][e] = p * (dp[nt][e] - drr[r]);
        }
}
// dQ: a lane's registers of its tile once the Q and dO tiles [16][DP] have landed: their A
// fragments (qf, yf) and, for its rows gid and gid + 8, the saved log-sum-exp in log2 units
// (l2r), Drow (drr: worked out from dO and O where drow_out is set, and written there by the warp
// with write_drow) and whether the row exists and saw a key at all (rv)
template <int NKS, int DP, int D, typename T>
__device__ __forceinline__ void sel_dq_regs(uint32_t (&qf)[NKS][4], uint32_t (&yf)[NKS][4], const T *Qs, const T *Ys, const AttnArgs &a,
                                            const SelTile &st, int b, int g, int lane, float (&l2r)[2], float (&drr)[2], bool (&rv)[2],
                                            bool write_drow) {
    frags_a<NKS, DP>(qf, Qs, 0, lane);
    frags_a<NKS, DP>(yf, Ys, 0, lane);
    float dmine = 0.f;   // drow_out: the quad's lanes 0, 1 sum row gid's Drow, lanes 2, 3 row gid + 8's
    if (a.drow_out) {
        int64_t R;
        const int tig = lane & 3;
        const bool ok = sel_row(a, st, b, g, (lane >> 2) + 8 * (tig >> 1), R);
        dmine = row_drow_pair<T, D>((const T *)a.dout, (const T *)a.o, R, tig & 1, ok);
        if (ok && (tig & 1) == 0 && write_drow) a.drow_out[R] = dmine;
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int64_t R;
        const bool ok = sel_row(a, st, b, g, (lane >> 2) + 8 * r, R);
        l2r[r] = ok ? a.lse_in[R] * MMA_LOG2E : -INFINITY;
        const float dr = a.drow_out ? __shfl_sync(0xffffffffu, dmine, (lane & ~3) + 2 * r) : 0.f;   // lane 2r of the quad's sum
        drr[r] = ok ? (a.drow_out ? dr : a.drow[R]) : 0.f;
        rv[r] = ok && l2r[r] != -INFINITY;
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

// ---- the TMA feed (sm_90a, D 64 or 128, blocks of whole 32-key chunks) ---------------------
// k_sel_fwd_tma (attn_fwd.cu) and k_sel_dq_tma (attn_dq.cu) walk every 32-key chunk of their
// tile's block list in order through NST stages of K and V [32][D] in 128-byte-swizzle atoms
// (SwzTile<32>), each stage filled by one TMA tile copy per atom (4-D tensor maps over k and v
// [B][NK][G][D], sel_tma_maps) completing on the stage's mbarrier. A stage is refilled with the
// chunk NST ahead as soon as the CTA's NW warps are done with it, so NST - 1 chunks load while
// they compute. Keys past the tile's last position are zeroed after they land (masked, but 0 *
// NaN of a later position's bits would not be 0); keys past the sequence come in as zeros.
#define SEL_TMA_KT 32
#define SEL_TMA_STAGE(D) (2 * SEL_TMA_KT * (D) * 2)   // bytes of a stage: K then V [32][D]
template <int D, int NST> constexpr size_t sel_tma_smem() {
    // 1024-byte alignment slack, the stages (the last one the Q and dO tiles' staging area
    // before its first copy: SelTmaFeed::start)
    return 1024 + (size_t)NST * SEL_TMA_STAGE(D);
}
// f(std::integral_constant<int, NST>) with the feed's stages NSA_CUDA_SEL_TMA_NST asks for (host:
// the launchers pick their kernels' NST)
template <typename F> static void sel_tma_nst_dispatch(F f) {
    switch (g_nsa_cuda.sel_tma_nst) {
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 2>{}); break;
    }
}
// the Q and dO tiles [16][D + 8] fit the last stage, where they are read into registers
static_assert(2 * 16 * (64 + 8) * 2 <= SEL_TMA_STAGE(64) && 2 * 16 * (128 + 8) * 2 <= SEL_TMA_STAGE(128), "staging");
// A tile's chunks in order: chunk j of block ul[i] covers keys ul[i] l' + 32 j .. + 31. The
// walk ends before the first chunk that starts after the tile's last position (tmax): under the
// lists' ascending order (kernels/ops.h) only the last block can hold such chunks, so nch counts
// the chunks before them (a block out of that order is walked whole: its keys past tmax are
// zeroed and masked, the same sums). A cursor (SelCursor) steps block and chunk without dividing.
struct SelChunks {
    const int *ul;   // the tile's block list
    int lsel, per;   // l', chunks a block
    int nch, tmax;   // chunks to walk, the tile's last position
    __device__ static SelChunks of(const int *ul, int nu, int lsel, int tmax) {
        SelChunks ch{ul, lsel, lsel / SEL_TMA_KT, 0, tmax};
        if (nu > 0) {
            const int d = tmax - ul[nu - 1] * lsel, last = d < 0 ? 0 : d / SEL_TMA_KT + 1;
            ch.nch = (nu - 1) * ch.per + (last < ch.per ? last : ch.per);
        }
        return ch;
    }
};
struct SelCursor {
    int i = 0, j = 0;   // block index in the list, chunk of the block
    __device__ int kb(const SelChunks &ch) const { return ch.ul[i] * ch.lsel + j * SEL_TMA_KT; }
    __device__ void step(const SelChunks &ch) {
        if (++j == ch.per) {
            j = 0;
            i++;
        }
    }
};
// one thread: the chunk at key k0 into a stage, one TMA copy per 64-column atom of K and V,
// completing on bar
template <int D>
__device__ __forceinline__ void sel_tma_issue(unsigned char *stage, const CUtensorMap *mk, const CUtensorMap *mv, int g, int k0,
                                              int b, uint32_t bar) {
    mbar_expect_tx(bar, SEL_TMA_STAGE(D));
#pragma unroll
    for (int at = 0; at < D / 64; at++) {
        tma_load4(stage + at * SEL_TMA_KT * 128, mk, at * 64, g, k0, b, bar);
        tma_load4(stage + SEL_TMA_STAGE(D) / 2 + at * SEL_TMA_KT * 128, mv, at * 64, g, k0, b, bar);
    }
}
// one warp: zero the K and V rows [r0, r1) of a landed stage (a key row is 128 contiguous bytes
// in each atom, whatever the swizzle), then order those writes before a later TMA write to it
template <int D> __device__ __forceinline__ void sel_tma_zero(unsigned char *stage, int r0, int r1, int lane) {
    const int nz = r1 - r0;
    if (nz <= 0) return;
    for (int i = lane; i < nz * (D / 64) * 2 * 8; i += 32) {
        const int ch = i & 7, row = r0 + (i >> 3) % nz, at = (i >> 3) / nz;
        *reinterpret_cast<uint4 *>(stage + at * SEL_TMA_KT * 128 + row * 128 + ch * 16) = make_uint4(0, 0, 0, 0);
    }
    wg_fence_proxy();
}

// NW warps consume the ring together (warp w the keys w * 32 / NW .. of each chunk); lane 0 of
// warp 0 fills it
template <typename T, int D, int NST, int NW> struct SelTmaFeed {
    static constexpr int STAGE = SEL_TMA_STAGE(D), KW = SEL_TMA_KT / NW;   // KW: keys a warp
    unsigned char *ring;       // NST stages, 1024-byte aligned
    uint32_t bar;              // shared address of the NST mbarriers (8 bytes each)
    const CUtensorMap *mk, *mv;
    SelChunks ch;
    int g, b, warp, lane;
    int pn;                    // chunks asked for so far, kept by lane 0 of warp 0 with their cursor
    SelCursor pc;

    __device__ const T *kst(int s) const { return reinterpret_cast<const T *>(ring + s * STAGE); }
    __device__ const T *vst(int s) const { return reinterpret_cast<const T *>(ring + s * STAGE + STAGE / 2); }
    __device__ void issue(int s) {   // lane 0 of warp 0
        sel_tma_issue<D>(ring + s * STAGE, mk, mv, g, pc.kb(ch), b, bar + 8 * s);
        pc.step(ch);
        pn++;
    }
    // the first NST - 1 copies in flight (the mbarriers initialised and seen by lane 0 of warp
    // 0); the last stage is left to the Q / dO tiles' staging (stage_tile) until start_last
    __device__ void start() {
        pn = 0;
        if (warp == 0 && lane == 0)
            for (int s = 0; s < NST - 1 && pn < ch.nch; s++) issue(s);
    }
    __device__ T *stage_tile() const { return reinterpret_cast<T *>(ring + (NST - 1) * STAGE); }
    // every thread is done with the staging area (its fragments read): each orders its accesses
    // before the async proxy's, the NW warps meet, then the last stage's first copy
    __device__ void start_last() {
        wg_fence_proxy();
        if (NW > 1) asm volatile("bar.sync 1, %0;\n" ::"n"(NW * 32) : "memory");
        else __syncwarp();
        if (warp == 0 && lane == 0 && pn < ch.nch) issue(NST - 1);
    }
    // the it-th chunk (starting at key k0) is in stage it % NST: wait for it, zero the warp's
    // keys past tmax
    __device__ void wait(int it, int k0) {
        const int s = it % NST;
        mbar_wait(bar + 8 * s, (uint32_t)(it / NST) & 1);
        const int z0 = ch.tmax - k0 + 1;
        sel_tma_zero<D>(ring + s * STAGE, z0 > warp * KW ? z0 : warp * KW, (warp + 1) * KW, lane);
        __syncwarp();
    }
    // the warps are done with the it-th chunk: its stage takes the next chunk to load
    __device__ void release(int it) {
        if (NW > 1) asm volatile("bar.sync 1, %0;\n" ::"n"(NW * 32) : "memory");
        else __syncwarp();
        if (warp == 0 && lane == 0 && pn < ch.nch) issue(it % NST);
    }
};

// The TMA selection kernels' maps over k and v (kv_tma_maps): SEL_TMA_KT keys x 64 elements of
// one group a box. False where they cannot be made: the caller then runs the cp.async kernels.
template <typename T> static bool sel_tma_maps(const AttnArgs &a, CUtensorMap *mk, CUtensorMap *mv) {
    return kv_tma_maps<T>(a, SEL_TMA_KT, mk, mv, "the selection branch uses its cp.async kernels");
}
#endif
