// kernels/cuda/attn_pass.cuh — the dispatch the attention forward (attn_fwd.cu) and the dQ pass
// (attn_dq.cu) share: over the branch, to the kernel set Kn of the pass.
//
// A kernel set names its kernels, their shared memory and the query rows it covers (the
// forward may cover a row range, dQ all rows):
//   static int rows(const AttnArgs &)                          rows of the pass
//   template <int KT, int P> static void sel(dim3, const AttnArgs &)   selection tiles
//   static bool sel_tma(dim3, const AttnArgs &, int pack)      selection on TMA; false: not run
//   static bool sel_tma_first(const AttnArgs &)                the TMA kernel even where the rows
//                                                              kernels would be on
//   template <int BR> static void rows_k(dim3, const AttnArgs &, size_t extra)   rows kernels
#ifndef NSA_KERNELS_CUDA_ATTN_PASS_CUH
#define NSA_KERNELS_CUDA_ATTN_PASS_CUH
#include "kernels/cuda/attn_rows.cuh"

// Selection: the rows kernels where nsa_sel_rows_on says so (unless the pass's sel_tma_first);
// else the TMA kernels where they run, else key tile KT 32 or 16, P positions per tile
// (nsa_sel_pack_on). Window or compressed: the rows kernels.
template <typename T, int D, typename Kn> static void mma_attn_rows_pass(const AttnArgs &a, int br) {
    const int rows = Kn::rows(a);
    const RowsGeom rg = rows_geom(a.hpg);
    const dim3 rows_grid((rows + rg.BQ - 1) / rg.BQ, a.G * rg.nhb, a.B);
    if (br == BR_SEL && !Kn::sel_tma_first(a) && nsa_sel_rows_on(a.hpg, D, a.lsel, a.NS, a.n)) {
        Kn::template rows_k<BR_SEL>(rows_grid, a, sel_rows_table_bytes(a.NS));
    } else if (br == BR_SEL) {
        const int pack = nsa_sel_pack_on(a.hpg, a.n);
        const int nrt = (a.hpg + 15) / 16;
        dim3 grid(pack ? (rows + 1) / 2 : rows, pack ? a.G : a.G * nrt, a.B);
        if (Kn::sel_tma(grid, a, pack)) {
        } else if (a.lsel % 32 == 0) {
            if (pack) Kn::template sel<32, 2>(grid, a);
            else Kn::template sel<32, 1>(grid, a);
        } else {
            if (pack) Kn::template sel<16, 2>(grid, a);
            else Kn::template sel<16, 1>(grid, a);
        }
    } else if (br == BR_WIN) {
        Kn::template rows_k<BR_WIN>(rows_grid, a, 0);
    } else {
        Kn::template rows_k<BR_CMP>(rows_grid, a, 0);
    }
    CUDA_LAUNCHED();
}
#endif
