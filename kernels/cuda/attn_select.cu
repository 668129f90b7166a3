// kernels/cuda/attn_select.cu — the selection branch's block scores and top-n on tensor cores,
// then its launcher. A CTA owns BQ positions x the whole group (hpg <= 64 heads, the rows
// kernels' tile, attn_rows.cuh): S = Q Kc^T per chunk of 64 compressed blocks, p = exp(S - lse)
// from the compressed branch's saved lse, the head sums, the overlap-weighted block scores, and
// the top-n per position (forced blocks, ties to the lower index). Instantiated for bf16/fp16
// and D 16, 64, 128.
#include "kernels/cuda/attn_rows.cuh"

// ============================================================================================
// selection scores on tensor cores (bf16/fp16): a CTA owns BQ positions x the whole
// group (hpg <= 64 heads): S = Q Kc^T per chunk of 64 compressed blocks as in
// k_rows_fwd, p = exp(S - lse) from the compressed branch's saved lse, then the head
// sums Psum[position][i] = sum_h p[h, i] (in registers over a warp's 16 rows when the
// group's heads fill whole warps, else through the P tile, heads ascending, every
// (position, block) pair in parallel), then per (position, selection block j)
// score[j] += sum_i w(i, j) Psum[i] (blocks i and chunks in ascending order), and the
// top-n per position by a warp (forced blocks, ties to the lower index). Where a warp's
// rows are one position (16 heads a group) that warp alone sums and scores it, between warp
// barriers; a chunk every row sees whole is not masked; the overlap weights come from a table
// by i - j l'/d where d divides l' (the same floats, added in the same order). Shared: Q,
// K double buffer, the P tile, Psum [BQ][KC], scores [BQ][NS], taken flags [BQ][NS].
// STREAM (select_stream_on, NSA_CUDA_SELECT_STREAM): the top-n is kept as the chunks go instead
// of from all NS scores at the end. A block's score is final once no later chunk overlaps it
// (the blocks before the next chunk's first one); its scores live in a ring of SEL_RING slots a
// position until then, and the final ones that are candidates (1 .. cur - 2) and beat the
// position's n - forced best so far (score higher; an equal score loses to the earlier, lower
// block) are merged into that sorted list, the lowest falling off (a NaN score ranks below every
// other). The same selection (for scores that are not NaN: the top of the same order), in a
// fraction of the shared memory at long sequences ([BQ][SEL_RING] scores and [BQ][n] list
// entries instead of [BQ][NS] scores and flags), so more CTAs an SM.
// POS (select_pos_on, NSA_CUDA_SELECT_POS; with STREAM and warpgroup MMA): the tile's 64 rows are
// 64 consecutive positions of one head, and each chunk walks the group's heads in turn, their Q
// tiles resident in shared memory: S_h = Q_h Kc^T, Psum += exp(S_h - lse_h) in registers, heads
// ascending from 0 (the P tile's order: the same Psum bits, so the same blocks, as PAD 0 and 2).
// Each K chunk then serves 64 positions instead of BQ, the head sums cost one add an element
// instead of shuffles or a staging tile, no row is padding, and the next head's product is in
// flight while this one's exponentials run. Tiles are taken last position first (the causal
// tail: the longest key ranges start first).
// ============================================================================================
#define SEL_PP 65   // P tile row pitch (floats)
#define SEL_WR_MAX 32   // the overlap weights' table: blocks i overlapping one selection block
#define SEL_RING 64     // STREAM: a position's score slots (a power of 2 >= a chunk's blocks)
#define SEL_SP 40       // PAD 2: a warp's staging tile's row pitch (floats; 8 mod 32: its float2
                        // stores and its column reads are free of bank conflicts)
#define SEL_POS_PP 72   // POS: Psum's row pitch (floats; 8 mod 32: the accumulators' float2 stores
                        // in two wavefronts)
// Float areas after Q and the K double buffer, in floats: the P tile [64][SEL_PP] only
// where the head sums go through shared memory, the per-warp sums Pw [4][KC] where they
// are butterflies, Psum [BQ][KC] (Pw itself when one warp is one position), then
// scores [BQ][NS] and taken flags [BQ][NS] bytes (STREAM: the score ring [BQ][SEL_RING], the
// lists' scores [BQ][n] and blocks [BQ][n], no flags). Sized to what the group needs, so that
// three CTAs fit an SM at the paper shape.
// PAD (NSA_CUDA_SELECT_PAD, 5 <= heads a group <= 15): each position's heads padded with zero
// rows to 8 (two positions a warp: rows 0-7 and 8-15 of its 16) or to 16 (one position a warp),
// so that a warp alone sums and scores its positions, as at 16 heads a group, instead of passing
// P through the shared P tile between block barriers; 8 positions a CTA at 6 heads a group
// instead of 10, the P tile's 16 KB gone. Otherwise (0) the rows kernels' tile (rows_geom).
// PAD 2 (the default) adds each position's heads in the P tile's ascending order through a
// warp's own staging tile: the bits and blocks of 0 (m7c scoring, H200: 14 % faster at 2k and
// 8k, 5 % at 64k). PAD 1 sums them as a butterfly in registers (25 % faster from 8k on), other
// low bits of a score, so a near tie may pick another block than 0 and 2 would.
__host__ __device__ __forceinline__ bool selscore_pads(int hpg) { return hpg >= 5 && hpg <= 15; }
__host__ __device__ __forceinline__ RowsGeom selscore_geom(int hpg, int pad) {
    if (!pad || !selscore_pads(hpg)) return rows_geom(hpg);
    RowsGeom r;
    r.HB = hpg <= 8 ? 8 : 16;
    r.BQ = 64 / r.HB;
    r.nhb = 1;
    return r;
}
// two positions a warp: PAD at 8 rows a position
__host__ __device__ __forceinline__ bool selscore_pairs(const RowsGeom &rg, int pad) { return pad && rg.HB == 8; }
struct SelScoreLayout {
    int psum, score, nfloat;   // offsets of Psum and score, 4-byte words before the flags
    int pp;                    // Psum's row pitch (floats)
};
__host__ __device__ __forceinline__ SelScoreLayout selscore_layout(int hpg, int pad, int NS, bool stream, int n, bool pos = false) {
    SelScoreLayout L;
    L.pp = ROWS_KC;
    if (pos) {   // Psum [64][SEL_POS_PP], the score ring [64][SEL_RING], the lists [64][n] x 2
        L.psum = 0;
        L.pp = SEL_POS_PP;
        L.score = 64 * SEL_POS_PP;
        L.nfloat = L.score + 64 * (SEL_RING + 2 * n);
        return L;
    }
    const RowsGeom rg = selscore_geom(hpg, pad);
    const bool warp_rows = rg.HB % 16 == 0, pairs = selscore_pairs(rg, pad);
    if (pad == 2 && selscore_pads(hpg)) L.psum = 4 * 16 * SEL_SP;   // the warps' staging tiles [4][16][SEL_SP], then Psum
    else if (pairs) L.psum = 0;   // Pw [8][KC] is Psum
    else if (!warp_rows) L.psum = 64 * SEL_PP;
    else L.psum = rg.HB == 16 ? 0 : 4 * ROWS_KC;   // Psum is Pw [4][KC] at one warp a position
    L.score = L.psum + rg.BQ * ROWS_KC;
    L.nfloat = L.score + (stream ? rg.BQ * (SEL_RING + 2 * n) : rg.BQ * NS);
    return L;
}
// STREAM fits where a chunk of ROWS_KC compressed blocks overlaps at most SEL_RING selection
// blocks
__host__ __device__ __forceinline__ bool selscore_stream_fits(int l, int d, int lsel) {
    return ((int64_t)ROWS_KC * d + l) / lsel + 2 <= SEL_RING;
}
// STREAM wherever it fits unless NSA_CUDA_SELECT_STREAM=0 (measured as fast as the scan or faster
// at both benchmark shapes and every length)
static inline bool select_stream_on(const AttnArgs &a) {
    return g_nsa_cuda.select_stream != 0 && selscore_stream_fits(a.l, a.d, a.lsel);
}
// the blocks every position at block cur takes: 0, cur - 1 and cur (those that exist)
__device__ __forceinline__ int sel_nforced(int cur) { return cur == 0 ? 1 : cur == 1 ? 2 : 3; }
// Q (POS: the group's hpg head tiles) and the K double buffer: padded rows for ldmatrix, or (WG)
// swizzled atoms behind a 1024-byte alignment slack
template <int D, bool WG> __host__ __device__ constexpr size_t selscore_qk_bytes(int qtiles = 1) {
    return WG ? 1024 + (size_t)(64 * qtiles + 2 * ROWS_KC) * D * 2 : (size_t)(64 * qtiles + 2 * ROWS_KC) * (D + 8) * 2;
}
template <int D, bool WG, bool STREAM, bool POS = false> size_t selscore_smem(int hpg, int pad, int NS, int n) {
    return selscore_qk_bytes<D, WG>(POS ? hpg : 1) + (size_t)selscore_layout(hpg, pad, NS, STREAM, n, POS).nfloat * 4 +
           (STREAM ? 0 : (size_t)selscore_geom(hpg, pad).BQ * NS) + 16;
}
// POS can run where the streaming top-n runs with warpgroup MMA, two CTAs fit an SM (m7c's 6 heads
// at D 64: 107 KB a CTA) and the kernel is compiled for the group's heads (2, 3, 4 or 6 at D 64, 2
// at D 128). It runs there (NSA_CUDA_SELECT_POS -1, the default) where its tiles number at least
// SEL_POS_MIN_TILES_SM an SM (one and a half waves of two CTAs an SM): the causal key ranges make
// the tiles unequal, and at short lengths too few of them leave SMs idle. m7c's scoring on one
// H200 (132 SMs), POS against the BQ-position tiles: 2k (64 tiles) 3x slower, 8k (256) 1.3x
// slower, 16k (512) 7 % faster, 32k 15 %, 64k 24 %. 1 wherever it can, 0 never.
// f(std::integral_constant<int, hpg>) where the kernel is compiled for hpg heads (then true), else
// false: the one list of those head counts, for the choice and the launch
template <int D, typename F> static bool select_pos_heads(int hpg, F &&f) {
    if (hpg == 2) return f(std::integral_constant<int, 2>{}), true;
    if constexpr (D == 64) {
        if (hpg == 3) return f(std::integral_constant<int, 3>{}), true;
        if (hpg == 4) return f(std::integral_constant<int, 4>{}), true;
        if (hpg == 6) return f(std::integral_constant<int, 6>{}), true;
    }
    return false;
}
#define SEL_POS_MIN_TILES_SM 3
template <int D> static inline bool select_pos_on(const AttnArgs &a, bool stream) {
    if (g_nsa_cuda.select_pos == 0 || !g_nsa_cuda.wgmma || !select_pos_heads<D>(a.hpg, [](auto) {}) || !stream ||
        selscore_smem<D, true, true, true>(a.hpg, 0, a.NS, a.n) > 109 * 1024)
        return false;
    const int64_t tiles = (int64_t)(a.Tn + 63) / 64 * a.G * a.B;
    return g_nsa_cuda.select_pos == 1 || tiles >= (int64_t)SEL_POS_MIN_TILES_SM * g_nsa_cuda.sms;
}

// The sums over a warp's 8 row groups (lane bits 2..4) of v[2 nt + c] (column nt 8 + 2 tig + c of
// a 64-column fragment row), each lane left with two of them, out[c] for columns nt 8 + 2 tig + c
// where nt is lane bits 2, 3, 4 read in reverse (returned): a reduce-scatter (8 + 4 + 2
// shuffles instead of 16 x 3) pairing lanes in the order of a butterfly (bit 2, then 3, then 4),
// so each sum is the same float additions of the same operands, bit for bit.
__device__ __forceinline__ int rowgroup_sum_scatter(const float (&v)[16], float (&out)[2], int lane) {
    const bool x = lane & 4, y = lane & 8, z = lane & 16;
    float a[8], b[4];
#pragma unroll
    for (int k = 0; k < 8; k++) a[k] = (x ? v[k + 8] : v[k]) + __shfl_xor_sync(0xffffffffu, x ? v[k] : v[k + 8], 4);
#pragma unroll
    for (int k = 0; k < 4; k++) b[k] = (y ? a[k + 4] : a[k]) + __shfl_xor_sync(0xffffffffu, y ? a[k] : a[k + 4], 8);
#pragma unroll
    for (int k = 0; k < 2; k++) out[k] = (z ? b[k + 2] : b[k]) + __shfl_xor_sync(0xffffffffu, z ? b[k] : b[k + 2], 16);
    return (int)z + 2 * (int)y + 4 * (int)x;
}

// POS: a chunk's head sums Psum[r][kl] = sum over the group's heads h, ascending from 0, of
// p = exp(S_h - lse_h) where position row r sees key kb + kl, else 0 (whole: every row sees every
// key of the chunk), S_h = Q_h Kc^T from head h's resident Q tile; head h + 1's product is
// issued before head h's exponentials (two accumulator sets), then the sums go to Psum
// [64][SEL_POS_PP]. The same p and the same additions as the P tile's (PAD 0), bit for bit.
// NH: the group's heads, known at compile time (so that ptxas can keep the next head's product in
// flight through this head's exponentials instead of serialising them)
template <typename T, int D, int NH>
__device__ __forceinline__ void select_pos_psum(const AttnArgs &a, float *Psum, const T *Qs, const T *Kb, const float *l2s,
                                                const int (&tr)[2], int kb, int kend, bool whole, int tbase, int warp, int lane) {
    const int gid = lane >> 2, tig = lane & 3, r0 = warp * 16 + gid;
    const uint32_t sK = (uint32_t)__cvta_generic_to_shared(Kb), sQ = (uint32_t)__cvta_generic_to_shared(Qs);
    constexpr uint32_t QT = 64 * D * 2;   // a head's Q tile, bytes
    float acc[8][4], s2[2][8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[nt][e] = 0.f;
    auto add = [&](const float (&s)[8][4], int h) {
        const float l2[2] = {l2s[h * 64 + r0], l2s[h * 64 + r0 + 8]};
        if (whole) {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[nt][e] += exp2_ftz(s[nt][e] * a.scale_log2 - l2[e >> 1]);
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kb + nt * 8 + 2 * tig + (e & 1);
                    acc[nt][e] += rows_vis<BR_CMP>(a, tr[e >> 1], key, kend, 0, tbase) ? exp2_ftz(s[nt][e] * a.scale_log2 - l2[e >> 1]) : 0.f;
                }
        }
    };
    wg_qkT_issue<T, D>(s2[0], sQ, sK);
#pragma unroll
    for (int h = 0; h < NH; h++) {
        if (h + 1 < NH) {
            wg_qkT_issue<T, D>(s2[(h + 1) & 1], sQ + (h + 1) * QT, sK);
            wg_wait1();
        } else {
            wg_wait0();
        }
        add(s2[h & 1], h);
    }
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int rr = 0; rr < 2; rr++)
            *reinterpret_cast<float2 *>(Psum + (r0 + 8 * rr) * SEL_POS_PP + nt * 8 + 2 * tig) = make_float2(acc[nt][2 * rr], acc[nt][2 * rr + 1]);
}

// WG (sm_90a, D 64 or 128): S = Q Kc^T by one warpgroup MMA per 16-wide k-step from
// swizzled shared tiles (wg_qkT) instead of mma.sync from padded ones; the rest is shared.
// NH > 0: POS at NH heads a group.
// tma (WG): each K chunk by one TMA copy per 64-column atom (mk: select_k_tma_map), issued by
// thread 0 and awaited on its buffer's mbarrier, instead of every thread's cp.async copies and
// their address arithmetic.
template <typename T, int D, bool WG, bool STREAM, int PAD, int NH = 0>
__global__ void __launch_bounds__(128) k_select_mma(AttnArgs a, int32_t *sel_out, const __grid_constant__ CUtensorMap mk, int tma) {
    constexpr bool POS = NH > 0;
    constexpr int DP = D + 8, NKS = D / 16;
    static_assert(!WG || D % 64 == 0, "swizzled atoms are 64 elements wide");
    static_assert(!POS || (WG && STREAM && PAD == 0), "POS: warpgroup MMA, the streaming top-n, no padding");
    extern __shared__ __align__(16) unsigned char smem_raw[];
    // aligned through an integer, not smem_align1024: only the tiles' copies and descriptors use qk,
    // and with it the scoring measured 2 % slower at the paper shape, S 64k (one H200)
    unsigned char *qk = WG ? reinterpret_cast<unsigned char *>(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023) : smem_raw;
    const int qtiles = POS ? a.hpg : 1;
    T *Qs = reinterpret_cast<T *>(qk);                                // [64][DP], or WG: atoms of 64 rows (POS: [hpg] tiles)
    T *Ks = WG ? Qs + qtiles * 64 * D : Qs + 64 * DP;                 // [2][KC][DP], or WG: [2][atoms]
    const SelScoreLayout lay = selscore_layout(a.hpg, PAD, a.NS, STREAM, a.n, POS);
    float *Ps = reinterpret_cast<float *>(smem_raw + selscore_qk_bytes<D, WG>(qtiles));   // [64][SEL_PP] or Pw [4][KC]
    float *Psum = Ps + lay.psum;                                      // [BQ][pp]
    float *score = Ps + lay.score;                                    // [BQ][NS] (STREAM: [BQ][SEL_RING])
    // POS: 64 positions a tile, one head a row tile (hb = the head)
    const RowsGeom rg = POS ? RowsGeom{1, 64, a.hpg} : selscore_geom(a.hpg, PAD);
    constexpr int SW = STREAM ? SEL_RING : 0;                          // STREAM: slots a position
    unsigned char *taken = reinterpret_cast<unsigned char *>(score + rg.BQ * a.NS);   // [BQ][NS] (not STREAM)
    float *lsc = score + rg.BQ * SW;                                   // STREAM: list scores [BQ][n]
    int *lblk = reinterpret_cast<int *>(lsc + rg.BQ * a.n);             // STREAM: list blocks [BQ][n]
    __shared__ int lcount[64];                                         // STREAM: list lengths [BQ]
    __shared__ int trow[64];
    __shared__ float l2s[POS ? 64 * NH : 64];                         // POS: [NH][64]
    // w(i, j) = overlap_num(i, j) / d by r = i - j l'/d where d divides l' (the same floats as
    // computed per pair): wr[r - rlo] for r in [rlo, rlo + nr), nr = 0 where d does not
    __shared__ float wr[SEL_WR_MAX];
    __shared__ int wr_lo, wr_n, rows_dead;
    __shared__ uint64_t kbar[2];   // tma: the K buffers' barriers
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, gid = lane >> 2, tig = lane & 3;
    const int hpg = a.hpg, HB = rg.HB, BQ = rg.BQ;
    const int b = blockIdx.z, g = blockIdx.y;
    const int tbase = a.t0 + (POS ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BQ, tend = a.t0 + a.Tn;
    // HB a multiple of 16: each warp's rows are heads of one position (wpp warps per
    // position) and the head sums stay in registers (rowgroup_sum_scatter); else P goes through Ps
    const bool warp_rows = HB % 16 == 0;
    const int wpp = HB / 16;
    // PAD at 8 rows a position: warp w's rows are positions 2w and 2w + 1
    const bool pairs = selscore_pairs(rg, PAD);
    // HB 16 (or pairs): warp w's rows are position w (2w, 2w + 1), whose head sums and scores
    // only warp w touches
    const bool own = (warp_rows && wpp == 1) || pairs;
    const int ppw = pairs ? 2 : 1;   // own: positions a warp
    // [4][KC] per-warp head sums (warp_rows; Psum is Pw when wpp == 1), pairs [8][KC]; PAD 2:
    // Psum, after the staging tiles
    float *Pw = PAD == 2 ? Psum : Ps;
    if (tid < 64) {
        const int tq = tid / HB, h = tid % HB, t = tbase + tq;
        const bool ok = tq < BQ && t < tend;
        float l2 = -INFINITY;
        if (ok && h < hpg) l2 = a.lse_in[((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h] * MMA_LOG2E;
        else if (ok) l2 = INFINITY;   // PAD: a padding row (zero q), its p 0 below
        trow[tid] = ok && l2 != -INFINITY ? t : -1;
        l2s[tid] = l2;
    }
    if constexpr (POS)   // the other heads' lse: [h][position]
        for (int i = 64 + tid; i < hpg * 64; i += 128) {
            const int h = i / 64, t = tbase + i % 64;
            l2s[i] = t < tend ? a.lse_in[((int64_t)b * a.T + t) * a.H + (int64_t)g * hpg + h] * MMA_LOG2E : -INFINITY;
        }
    for (int i = tid; i < BQ * (STREAM ? SW : a.NS); i += 128) score[i] = 0.f;
    if (STREAM && tid < 64) lcount[tid] = 0;
    if (tid == 0) {
        int lo = 0, n = 0;
        if (a.lsel % a.d == 0) {
            lo = -((a.l + a.d - 1) / a.d);   // overlap_num(r, 0) > 0 iff -l < r d < l'
            while (overlap_num(lo, 0, a.l, a.d, a.lsel) == 0) lo++;
            while (n < SEL_WR_MAX && overlap_num(lo + n, 0, a.l, a.d, a.lsel) > 0) n++;
            if (overlap_num(lo + n, 0, a.l, a.d, a.lsel) > 0) n = 0;   // wider than the table: per pair
        }
        for (int r = 0; r < n; r++) wr[r] = (float)overlap_num(lo + r, 0, a.l, a.d, a.lsel) / (float)a.d;
        wr_lo = lo;
        wr_n = n;
        rows_dead = 0;
        if (WG && tma) {
            mbar_init((uint32_t)__cvta_generic_to_shared(&kbar[0]));
            mbar_init((uint32_t)__cvta_generic_to_shared(&kbar[1]));
        }
    }
    __syncthreads();
    // any of the tile's BQ x HB rows past the positions or with no key (rows past them, hpg not
    // dividing 64, are never summed)
    if (tid < BQ * HB && trow[tid] < 0) rows_dead = 1;
    // the group's heads: one tile (POS: a tile a head)
    for (int hb = 0; hb < qtiles; hb++)
        rows_tile_load<T, D, WG>(Qs + hb * 64 * D, (const T *)a.q, nullptr, nullptr, a, rg, b, g, hb, tbase, tend);
    const int t_last = tbase + BQ - 1 < tend - 1 ? tbase + BQ - 1 : tend - 1;
    const int kend = cmp_visible(t_last, a.l, a.d, a.NC);
    const int nchunks = (kend + ROWS_KC - 1) / ROWS_KC;
    const int64_t ks = (int64_t)a.G * D;
    const T *Kg = (const T *)a.k + (int64_t)b * a.NK * ks + (int64_t)g * D;
    // K chunks alternate between the two halves of the K area (no V needed). By TMA the rows past
    // kend are the keys there, not zeros (every product with them is masked: p = 0 by a select);
    // past NK they read as zeros.
    auto load_k = [&](int c, int buf) {
        if (WG && tma) {
            if (tid == 0) {
                const uint32_t bar = (uint32_t)__cvta_generic_to_shared(&kbar[buf]);
                mbar_expect_tx(bar, ROWS_KC * D * (uint32_t)sizeof(T));
#pragma unroll
                for (int at = 0; at < D / 64; at++)
                    tma_load4(Ks + buf * ROWS_KC * D + at * ROWS_KC * 64, &mk, at * 64, g, c * ROWS_KC, b, bar);
            }
            return;
        }
        kv_tile_load<T, D, WG, ROWS_KC, 128>(Ks + buf * ROWS_KC * (WG ? D : DP), Kg, nullptr, nullptr, ks, c * ROWS_KC, kend, tid);
    };
    if (WG && tma) {   // the Q tiles (cp.async) in place before the first chunk's copy is awaited
        cp_commit();
        cp_wait<0>();
        wg_fence_proxy();
    }
    if (nchunks > 0) load_k(0, 0);
    cp_commit();
    __syncthreads();
    const int r0 = warp * 16 + gid;
    const int tr[2] = {trow[r0], trow[r0 + 8]};
    const float l2r[2] = {l2s[r0], l2s[r0 + 8]};
    const bool padr[2] = {PAD && l2r[0] == INFINITY, PAD && l2r[1] == INFINITY};   // padding rows: p 0
    const bool rows_live = rows_dead == 0;
    const int P = a.lsel / a.d, rlo = wr_lo, nr = wr_n;
    const PowDiv lsd = PowDiv::of(a.lsel);   // a key's selection block: lsd.div(key)
    // STREAM: blocks jf .. jt are final: each warp takes its positions (tq = warp, warp + 4, ..),
    // reads and clears their slots, 32 blocks at a time, and merges the candidates that beat the
    // position's list into it at once: a candidate's place is the list entries at or above its
    // score (earlier blocks: an equal score stays behind them) plus the new candidates above it
    // (or equal and earlier), a list entry's place its own plus the new candidates strictly
    // above it; whatever lands at K or beyond falls off
    auto finalize = [&](int jf, int jt) {
        for (int tq = warp; tq < BQ; tq += 4) {
            const int t = tbase + tq, cur = lsd.div(t), K = a.n - sel_nforced(cur);
            float *ring = score + tq * SW, *ls = lsc + tq * a.n;
            int *lb = lblk + tq * a.n;
            int m = lcount[tq];
            for (int j0 = jf; j0 <= jt; j0 += 32) {
                const int j = j0 + lane;
                float s = 0.f;
                if (j <= jt) {
                    s = ring[j & (SW - 1)];
                    ring[j & (SW - 1)] = 0.f;
                    if (s != s) s = -1.f;   // NaN: below every score (>= 0), so the order stays total
                }
                const bool cand = t < tend && j <= jt && j >= 1 && j <= cur - 2 && K > 0;
                const unsigned bal = __ballot_sync(0xffffffffu, cand && (m < K || s > ls[K - 1]));
                if (!bal) continue;
                // the list entries (3 a lane: n <= 67, nsa_cuda_select_blocks)
                float ev[3];
                int eb[3], up[3];
#pragma unroll
                for (int k = 0; k < 3; k++) {
                    const int e = lane + 32 * k;
                    ev[k] = e < m ? ls[e] : 0.f;
                    eb[k] = e < m ? lb[e] : 0;
                    up[k] = 0;
                }
                // the new candidates above this one (score higher, or equal and an earlier block)
                // and above each list entry (strictly higher), over the registers that hold entries
                // (one up to 32 of them); without branches in the candidate loop
                int above = 0;
                auto count = [&](auto nk) {
                    for (unsigned r = bal; r; r &= r - 1) {
                        const int src = __ffs(r) - 1;
                        const float sv = __shfl_sync(0xffffffffu, s, src);
                        above += (int)(sv > s) | ((int)(sv == s) & (int)(src < lane));
#pragma unroll
                        for (int k = 0; k < decltype(nk)::value; k++) up[k] += (int)(sv > ev[k]);
                    }
                };
                if (m <= 32) count(std::integral_constant<int, 1>{});
                else count(std::integral_constant<int, 3>{});
                // the list entries at or above it: entries 0 .. lo - 1 (scores descending)
                int lo = 0, hi = m;
                while (lo < hi) {
                    const int mid = (lo + hi) >> 1;
                    if (ls[mid] >= s) lo = mid + 1;
                    else hi = mid;
                }
                int ep[3];
#pragma unroll
                for (int k = 0; k < 3; k++) ep[k] = lane + 32 * k < m ? lane + 32 * k + up[k] : K;
                __syncwarp();
#pragma unroll
                for (int k = 0; k < 3; k++)
                    if (ep[k] < K) ls[ep[k]] = ev[k], lb[ep[k]] = eb[k];
                const int np = lo + above;
                if ((bal >> lane & 1u) && np < K) ls[np] = s, lb[np] = j;
                __syncwarp();
                m = m + __popc(bal) < K ? m + __popc(bal) : K;
            }
            __syncwarp();   // every lane's read of lcount[tq] above (no merge where jf > jt)
            if (lane == 0) lcount[tq] = m;
            __syncwarp();
        }
    };
    int jfin = 0;   // STREAM: the first block not yet final
    // the last selection block chunk c overlaps
    auto chunk_jhi = [&](int c) {
        const int il = (c + 1) * ROWS_KC - 1 < kend - 1 ? (c + 1) * ROWS_KC - 1 : kend - 1;
        const int jh = lsd.div(il * a.d + a.l - 1);
        return jh < a.NS - 1 ? jh : a.NS - 1;
    };
    uint32_t qf[NKS][4];
    for (int c = 0; c < nchunks; c++) {
        const int buf = c & 1;
        if (c + 1 < nchunks) load_k(c + 1, buf ^ 1);
        if (WG && tma) {
            mbar_wait((uint32_t)__cvta_generic_to_shared(&kbar[buf]), (uint32_t)(c >> 1) & 1);
        } else {
            cp_commit();
            cp_wait<1>();
            if (WG) wg_fence_proxy();   // this thread's copies, visible to the warpgroup MMA
        }
        __syncthreads();
        const int kb = c * ROWS_KC;
        if constexpr (POS) {
            select_pos_psum<T, D, NH>(a, Psum, Qs, Ks + buf * ROWS_KC * D, l2s, tr, kb, kend,
                                  rows_live && kb + ROWS_KC <= kend && sees_block<BR_CMP>(a, tbase, t_last, kb, kb + ROWS_KC - 1),
                                  tbase, warp, lane);
            __syncthreads();
        } else {
        float s[8][4];
        rows_qkT<T, D, WG>(s, qf, Qs, Ks + buf * ROWS_KC * (WG ? D : DP), c, warp, lane);
        // p = exp(S - lse) where the row sees the block, else 0 (no test where every row sees
        // every block of the chunk: the same values)
        float p[8][4];
        if (rows_live && kb + ROWS_KC <= kend && sees_block<BR_CMP>(a, tbase, t_last, kb, kb + ROWS_KC - 1)) {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) p[nt][e] = padr[e >> 1] ? 0.f : exp2_ftz(s[nt][e] * a.scale_log2 - l2r[e >> 1]);
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int key = kb + nt * 8 + 2 * tig + (e & 1), t = tr[e >> 1];
                    p[nt][e] = rows_vis<BR_CMP>(a, t, key, kend, 0, tbase) && !padr[e >> 1] ? exp2_ftz(s[nt][e] * a.scale_log2 - l2r[e >> 1]) : 0.f;
                }
        }
        // Psum[tq][kl] = sum over the position's heads of p (a fixed order either way)
        if constexpr (PAD == 2) {
            // each position's heads added in ascending order from 0, as through the P tile (the
            // same bits, so the same blocks as without PAD): the warp's 16 rows through its own
            // staging tile, 32 columns at a time, each lane summing one column of each position
            float *St = Ps + warp * 16 * SEL_SP;
            const int rp = pairs ? 8 : 16;   // rows a position
#pragma unroll
            for (int half = 0; half < 2; half++) {
#pragma unroll
                for (int q = 0; q < 4; q++)
#pragma unroll
                    for (int rr = 0; rr < 2; rr++)
                        *reinterpret_cast<float2 *>(St + (gid + 8 * rr) * SEL_SP + q * 8 + 2 * tig) =
                            make_float2(p[half * 4 + q][2 * rr], p[half * 4 + q][2 * rr + 1]);
                __syncwarp();
                for (int r = 0; r < ppw; r++) {
                    float acc = 0.f;
                    for (int h = 0; h < hpg; h++) acc += St[(r * rp + h) * SEL_SP + lane];
                    Pw[(ppw * warp + r) * ROWS_KC + half * 32 + lane] = acc;
                }
                __syncwarp();   // the tile's reads before the next half's stores; the sums are the warp's own
            }
        } else if (pairs) {
            // rows gid (position 2 warp) and gid + 8 (position 2 warp + 1): the sum over the 8
            // row groups (lane bits 2..4) for each
#pragma unroll
            for (int r = 0; r < 2; r++) {
                float v[16], o[2];
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int c = 0; c < 2; c++) v[2 * nt + c] = p[nt][c + 2 * r];
                const int nt = rowgroup_sum_scatter(v, o, lane);
                *reinterpret_cast<float2 *>(Pw + (2 * warp + r) * ROWS_KC + nt * 8 + 2 * tig) = make_float2(o[0], o[1]);
            }
            __syncwarp();   // the warp's two positions: their sums are its own
        } else if (warp_rows) {
            // the warp's 16 rows are 16 heads of one position: rows g and g + 8 added, then the
            // sum over the 8 row groups (lane bits 2..4)
            {
                float v[16], o[2];
#pragma unroll
                for (int nt = 0; nt < 8; nt++)
#pragma unroll
                    for (int c = 0; c < 2; c++) v[2 * nt + c] = p[nt][c] + p[nt][c + 2];
                const int nt = rowgroup_sum_scatter(v, o, lane);
                *reinterpret_cast<float2 *>(Pw + warp * ROWS_KC + nt * 8 + 2 * tig) = make_float2(o[0], o[1]);
            }
            if (own) __syncwarp();   // one warp a position: its sums are its own
            else __syncthreads();
            if (wpp > 1) {   // a position spans wpp warps: add their sums in warp order
                for (int it = tid; it < BQ * ROWS_KC; it += 128) {
                    const int tq = it / ROWS_KC, kl = it % ROWS_KC;
                    float acc = 0.f;
                    for (int w = 0; w < wpp; w++) acc += Pw[(tq * wpp + w) * ROWS_KC + kl];
                    Psum[it] = acc;
                }
                __syncthreads();
            }
        } else {
#pragma unroll
            for (int nt = 0; nt < 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    Ps[(r0 + 8 * (e >> 1)) * SEL_PP + nt * 8 + 2 * tig + (e & 1)] = p[nt][e];
            __syncthreads();
            // heads in ascending order, every (position, block) pair in parallel
            for (int it = tid; it < BQ * ROWS_KC; it += 128) {
                const int tq = it / ROWS_KC, kl = it % ROWS_KC;
                const float *col = Ps + tq * HB * SEL_PP + kl;
                float acc = 0.f;
                for (int h = 0; h < HB; h++) acc += col[h * SEL_PP];
                Psum[it] = acc;
            }
            __syncthreads();
        }
        }   // !POS
        // score[tq][j] += sum_{i in chunk} w(i, j) Psum[tq][i - kb], j over the chunk's blocks
        const int ilast = kb + ROWS_KC - 1 < kend - 1 ? kb + ROWS_KC - 1 : kend - 1;
        const int jlo = lsd.div(kb * a.d), jhi = chunk_jhi(c);
        const int nj = jhi - jlo + 1;
        // the item (position tq, block j): each one thread's, whichever
        auto item = [&](int tq, int j) {
            const float *ps = Psum + tq * lay.pp - kb;
            float acc = 0.f;
            if (nr > 0) {   // the blocks i = j l'/d + r overlapping j, ascending, from the table
                for (int r = 0; r < nr; r++) {
                    const int i = j * P + rlo + r;
                    if (i >= kb && i <= ilast) acc += wr[r] * ps[i];
                }
            } else {
                int i0 = j * a.lsel - a.l < 0 ? 0 : (j * a.lsel - a.l) / a.d + 1;
                int i1 = ((j + 1) * a.lsel - 1) / a.d;
                if (i0 < kb) i0 = kb;
                if (i1 > ilast) i1 = ilast;
                for (int i = i0; i <= i1; i++) acc += (float)overlap_num(i, j, a.l, a.d, a.lsel) / (float)a.d * ps[i];
            }
            if constexpr (STREAM) score[tq * SW + (j & (SW - 1))] += acc;
            else score[tq * a.NS + j] += acc;
        };
        if (own) {   // the warp's positions, a lane a block
            for (int r = 0; r < ppw; r++)
                for (int jj = lane; jj < nj; jj += 32) item(warp * ppw + r, jlo + jj);
        } else if (POS) {   // 64 positions: two threads a position, alternate blocks
            for (int jj = tid & 1; jj < nj; jj += 2) item(tid >> 1, jlo + jj);
        } else {   // item it is (position it / nj, block jlo + it % nj), stepped without a division an item
            int iq = tid / nj, ij = tid % nj;
            const int dq = 128 / nj, dj = 128 % nj;
            for (int it = tid; it < BQ * nj; it += 128) {
                item(iq, jlo + ij);
                iq += dq;
                ij += dj;
                if (ij >= nj) ij -= nj, iq++;
            }
        }
        __syncthreads();
        if constexpr (STREAM) {
            // the blocks before the next chunk's first are final; they go into the lists only
            // when the ring could not also hold the next chunk's blocks (about every third chunk
            // where a chunk overlaps 17 blocks: fewer, fuller merges)
            if (c + 1 < nchunks && chunk_jhi(c + 1) - jfin + 1 > SW) {
                const int jnext = lsd.div((kb + ROWS_KC) * a.d);
                finalize(jfin, jnext - 1);
                jfin = jnext;
            }
        }
    }
    cp_wait<0>();
    if constexpr (STREAM) {   // the rest, up to the tile's last candidate (untouched blocks: 0)
        finalize(jfin, lsd.div(t_last) - 2);
        __syncthreads();
    }
    // top-n per position: warp w takes positions w, w+4, ...
    for (int tq = warp; tq < BQ; tq += 4) {
        const int t = tbase + tq;
        if (t >= tend) break;
        const int cur = lsd.div(t);
        float *sc = score + tq * a.NS;
        unsigned char *tk = taken + tq * a.NS;
        if constexpr (!STREAM)
            for (int j = lane; j <= cur; j += 32) tk[j] = (j == 0 || j >= cur - 1);
        __syncwarp();
        const int nforced = sel_nforced(cur);
        int32_t *out = sel_out + (((int64_t)b * a.T + t) * a.G + g) * a.n;
        if constexpr (STREAM) {
            // the forced blocks (0, cur - 1, cur: entries 0 .. nforced - 1) and the list kept as the
            // chunks went (the rest), each lane writing its entries at their ranks among them (the
            // blocks are distinct: ascending order; the first n where the forced ones outnumber n), -1
            // after them
            const int m = nforced + lcount[tq];
            const int *lb = lblk + tq * a.n;
            auto entry = [&](int e) { return e == 0 ? 0 : e < nforced ? (nforced == 2 ? cur : cur - 2 + e) : lb[e - nforced]; };
            for (int e = lane; e < (m > a.n ? m : a.n); e += 32) {
                if (e >= m) {
                    out[e] = -1;
                    continue;
                }
                const int v = entry(e);
                int r = 0;
                for (int e2 = 0; e2 < m; e2++) r += entry(e2) < v;
                if (r < a.n) out[r] = v;
            }
            continue;
        }
        int m = 0;
        int list[72];
        list[m++] = 0;
        if (cur >= 2) list[m++] = cur - 1;
        if (cur >= 1) list[m++] = cur;
        for (int c = 0; c < a.n - nforced; c++) {
            int best = -1;
            float bs = 0.f;
            for (int j = 1 + lane; j <= cur - 2; j += 32)
                if (!tk[j] && (best < 0 || sc[j] > bs)) { best = j; bs = sc[j]; }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                const int ob = __shfl_xor_sync(0xffffffffu, best, o);
                const float os = __shfl_xor_sync(0xffffffffu, bs, o);
                if (ob >= 0 && (best < 0 || os > bs || (os == bs && ob < best))) { best = ob; bs = os; }
            }
            if (best < 0) break;
            __syncwarp();   // every lane's reads of tk above happen before lane 0's write
            if (lane == 0) tk[best] = 1;
            __syncwarp();
            list[m++] = best;
        }
        if (lane == 0) {
            for (int i = 1; i < m; i++) {
                int v = list[i], k = i - 1;
                while (k >= 0 && list[k] > v) { list[k + 1] = list[k]; k--; }
                list[k + 1] = v;
            }
            for (int c = 0; c < a.n; c++) out[c] = c < m ? list[c] : -1;
        }
        __syncwarp();
    }
}

// ============================================================================================
// launcher
// ============================================================================================
// the map of the warpgroup kernels' TMA copies of K chunks (ROWS_KC keys a box); 0 where it cannot
// be made or NSA_CUDA_ROWS_TMA=0 (the knob of the rows kernels' K/V chunks): the kernel then
// copies by cp.async
template <typename T> static int select_k_tma_map(const AttnArgs &a, CUtensorMap *mk) {
    return g_nsa_cuda.rows_tma && kv_tma_map<T>(a, a.k, ROWS_KC, mk, "the selection scoring reads K by cp.async") ? 1 : 0;
}
template <typename T, int D, int NH> static void select_pos_launch(const AttnArgs &a, int32_t *sel_out) {
    const dim3 grid((a.Tn + 63) / 64, a.G, a.B);
    CUtensorMap mk{};
    const int tma = select_k_tma_map<T>(a, &mk);
    mma_launch(k_select_mma<T, D, true, true, 0, NH>, grid, 128, selscore_smem<D, true, true, true>(NH, 0, a.NS, a.n), a, sel_out, mk, tma);
}
template <typename T, int D, bool WG, bool STREAM, int PAD> static void select_launch_one(dim3 grid, const AttnArgs &a, int32_t *sel_out) {
    CUtensorMap mk{};
    int tma = 0;
    if constexpr (WG) tma = select_k_tma_map<T>(a, &mk);
    mma_launch(k_select_mma<T, D, WG, STREAM, PAD>, grid, 128, selscore_smem<D, WG, STREAM>(a.hpg, PAD, a.NS, a.n), a, sel_out, mk, tma);
}
template <typename T, int D, bool WG, bool STREAM>
static void select_launch_pad(dim3 grid, const AttnArgs &a, int32_t *sel_out, int pad) {
    if (pad == 2) select_launch_one<T, D, WG, STREAM, 2>(grid, a, sel_out);
    else if (pad) select_launch_one<T, D, WG, STREAM, 1>(grid, a, sel_out);
    else select_launch_one<T, D, WG, STREAM, 0>(grid, a, sel_out);
}
template <typename T, int D, bool WG>
static void select_launch(dim3 grid, const AttnArgs &a, int32_t *sel_out, bool stream, int pad) {
    if (stream) select_launch_pad<T, D, WG, true>(grid, a, sel_out, pad);
    else select_launch_pad<T, D, WG, false>(grid, a, sel_out, pad);
    CUDA_LAUNCHED();
}
template <typename T, int D> void mma_select(const AttnArgs &a, int32_t *sel_out) {
    const int pad = selscore_pads(a.hpg) ? g_nsa_cuda.select_pad : 0;
    const RowsGeom rg = selscore_geom(a.hpg, pad);
    dim3 grid((a.Tn + rg.BQ - 1) / rg.BQ, a.G, a.B);
    const bool stream = select_stream_on(a);
    if constexpr (D % 64 == 0) {
        if (select_pos_on<D>(a, stream)) {   // 64 positions a tile, the group's heads in turn
            select_pos_heads<D>(a.hpg, [&](auto nh) { select_pos_launch<T, D, decltype(nh)::value>(a, sel_out); });
            CUDA_LAUNCHED();
            return;
        }
        if (g_nsa_cuda.wgmma) {
            select_launch<T, D, true>(grid, a, sel_out, stream, pad);
            return;
        }
    }
    select_launch<T, D, false>(grid, a, sel_out, stream, pad);
}

#define NSA_INSTANTIATE_SELECT(D)                                       \
    template void mma_select<bf16, D>(const AttnArgs &, int32_t *); \
    template void mma_select<f16, D>(const AttnArgs &, int32_t *);
NSA_INSTANTIATE_SELECT(16)
NSA_INSTANTIATE_SELECT(64)
NSA_INSTANTIATE_SELECT(128)
