// bench/bench_cuda_attn.c — forward/backward time and TFLOP/s of each NSA branch on
// the CUDA backend (bf16), against a dense causal attention of our own (the window
// kernels with w = S), at the m7c_125m shape (12 q heads, 2 KV heads, D 64) and the
// paper-style shape (64 q heads, 4 KV heads, D 128, top-16 blocks of 64).
//
//   bench_cuda_attn [--S 2048,8192,32768,65536] [--B 1] [--shape m7c|paper|both] [--reps N] [--no-dense]
//   (--no-dense leaves out the dense causal reference; an unknown argument exits 2)
//
// FLOPs ("useful", the FlashAttention convention): forward 4*D per (query head, key)
// over the keys each branch really attends to (compressed blocks visible to t; the
// selected keys counted from the actual selection; min(w, t+1) window keys; t+1
// dense causal keys); backward 2.5x the forward. Selection is reported by time, with
// its 2*D score FLOPs per (query head, visible compressed block). Times are medians
// of N timed calls after one warm-up, each call bracketed by device synchronisation.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/ops.h"
#ifdef NSA_HAVE_CUDA
#include "kernels/cuda/cuda_launch.h"

typedef struct {
    const char *name;
    int H, G, D, l, d, lsel, n, w;
} Shp;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

enum { OP_COMPRESS, OP_CMP_F, OP_SELECT, OP_SEL_F, OP_WIN_F, OP_CMP_B, OP_SEL_B, OP_WIN_B, OP_DENSE_F, OP_DENSE_B, NOPS };
static const char *OPN[NOPS] = {"compress(avg) fwd K+V", "cmp fwd", "select (score+top-n)", "sel fwd", "win fwd",
                                "cmp bwd (+compress bwd)", "sel bwd", "win bwd", "dense causal fwd", "dense causal bwd"};

typedef struct {
    const Backend *be;
    NsaGeom g, gd;   // NSA geometry, dense geometry (w = S)
    void *q, *k, *v, *Kc, *Vc, *o[4], *lse[4], *dout, *dq, *dk, *dv, *dKc, *dVc;
    int32_t *sel;
    size_t qb, kb, kcb;
} Ctx;

static void run(Ctx *c, int op) {
    const Backend *be = c->be;
    const NsaGeom *g = &c->g;
    switch (op) {
    case OP_COMPRESS:
        be->compress_avg_fwd(c->Kc, c->k, g, 0, g->NC);
        be->compress_avg_fwd(c->Vc, c->v, g, 0, g->NC);
        break;
    case OP_CMP_F: be->cmp_attn_fwd(c->o[0], c->lse[0], c->q, c->Kc, c->Vc, g, 0, g->T); break;
    case OP_SELECT: be->select_blocks(c->sel, c->q, c->Kc, c->lse[0], g, 0, g->T); break;
    case OP_SEL_F: be->sel_attn_fwd(c->o[1], c->lse[1], c->q, c->k, c->v, c->sel, g, 0, g->T); break;
    case OP_WIN_F: be->win_attn_fwd(c->o[2], c->lse[2], c->q, c->k, c->v, g, 0, g->T); break;
    case OP_CMP_B:
        be->cmp_attn_bwd(c->dq, c->dKc, c->dVc, c->dout, c->q, c->Kc, c->Vc, c->o[0], c->lse[0], g);
        be->compress_avg_bwd(c->dk, c->dKc, g);
        be->compress_avg_bwd(c->dv, c->dVc, g);
        break;
    case OP_SEL_B: be->sel_attn_bwd(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o[1], c->lse[1], c->sel, g); break;
    case OP_WIN_B: be->win_attn_bwd(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o[2], c->lse[2], g); break;
    case OP_DENSE_F: be->win_attn_fwd(c->o[3], c->lse[3], c->q, c->k, c->v, &c->gd, 0, c->gd.T); break;
    case OP_DENSE_B:
        be->win_attn_bwd(c->dq, c->dk, c->dv, c->dout, c->q, c->k, c->v, c->o[3], c->lse[3], &c->gd);
        break;
    }
}

static double time_op(Ctx *c, int op, int reps) {
    double *t = malloc(sizeof(double) * (size_t)reps);
    int bwd = op == OP_CMP_B || op == OP_SEL_B || op == OP_WIN_B || op == OP_DENSE_B;
    for (int r = -1; r < reps; r++) {
        if (bwd) {   // gradients accumulate: start each call from zero (not timed)
            c->be->zero(c->dq, c->qb);
            c->be->zero(c->dk, c->kb);
            c->be->zero(c->dv, c->kb);
            c->be->zero(c->dKc, c->kcb);
            c->be->zero(c->dVc, c->kcb);
        }
        c->be->sync();
        double t0 = now_ms();
        run(c, op);
        c->be->sync();
        if (r >= 0) t[r] = now_ms() - t0;
    }
    qsort(t, (size_t)reps, sizeof(double), cmpd);
    double med = t[reps / 2];
    free(t);
    return med;
}

static int g_no_dense;   // --no-dense: leave the dense causal reference out (it dominates at 64k)

static void bench_shape(const Shp *s, int S, int B, int reps) {
    Ctx c;
    memset(&c, 0, sizeof c);
    c.be = backend_get("cuda", "bf16", NULL);
    const Backend *be = c.be;
    nsa_geom_init(&c.g, B, S, s->H, s->G, s->D, s->l, s->d, s->lsel, s->n, s->w);
    nsa_geom_init(&c.gd, B, S, s->H, s->G, s->D, s->l, s->d, s->lsel, s->n, S);
    const NsaGeom *g = &c.g;
    const int64_t nq = (int64_t)B * S * s->H * s->D, nk = (int64_t)B * S * s->G * s->D;
    const int64_t nkc = (int64_t)B * (g->NC > 0 ? g->NC : 1) * s->G * s->D, nl = (int64_t)B * S * s->H;
    c.qb = (size_t)nq * 2;
    c.kb = (size_t)nk * 2;
    c.kcb = (size_t)nkc * 2;
    c.q = be->alloc(c.qb); c.k = be->alloc(c.kb); c.v = be->alloc(c.kb);
    c.Kc = be->alloc(c.kcb); c.Vc = be->alloc(c.kcb); c.dKc = be->alloc(c.kcb); c.dVc = be->alloc(c.kcb);
    for (int i = 0; i < 4; i++) { c.o[i] = be->alloc(c.qb); c.lse[i] = be->alloc((size_t)nl * 2); }
    c.dout = be->alloc(c.qb); c.dq = be->alloc(c.qb); c.dk = be->alloc(c.kb); c.dv = be->alloc(c.kb);
    c.sel = be->alloc(sizeof(int32_t) * (size_t)B * S * s->G * s->n);
    nsa_cuda_fill_random(NSA_DT_BF16, c.q, nq, 1, 1.0);
    nsa_cuda_fill_random(NSA_DT_BF16, c.k, nk, 2, 1.0);
    nsa_cuda_fill_random(NSA_DT_BF16, c.v, nk, 3, 1.0);
    nsa_cuda_fill_random(NSA_DT_BF16, c.dout, nq, 4, 1.0);
    // valid inputs for the dependent ops: compress, cmp fwd (lse), select, each fwd
    for (int op = OP_COMPRESS; op <= OP_WIN_F; op++) run(&c, op);
    if (!g_no_dense) run(&c, OP_DENSE_F);
    be->sync();

    // exact key counts per query row (B = 1 row pattern, times B)
    int32_t *sel = malloc(sizeof(int32_t) * (size_t)B * S * s->G * s->n);
    be->to_host(sel, c.sel, sizeof(int32_t) * (size_t)B * S * s->G * s->n);
    double kc = 0, ks = 0, kw = 0, kd = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) {
            kc += nsa_cmp_visible(g, t) * (double)s->G;
            kw += (t + 1 < s->w ? t + 1 : s->w) * (double)s->G;
            kd += (t + 1) * (double)s->G;
            for (int gr = 0; gr < s->G; gr++) {
                const int32_t *row = sel + (((int64_t)b * S + t) * s->G + gr) * s->n;
                for (int i = 0; i < s->n; i++) {
                    if (row[i] < 0) continue;
                    int k0 = row[i] * s->lsel, k1 = k0 + s->lsel < t + 1 ? k0 + s->lsel : t + 1;
                    ks += k1 - k0;
                }
            }
        }
    free(sel);
    const int hpg = s->H / s->G;
    const double f = 4.0 * s->D * hpg;   // per (group key): the group's heads
    double flops[NOPS] = {0};
    flops[OP_CMP_F] = f * kc;
    flops[OP_SELECT] = 2.0 * s->D * hpg * kc;
    flops[OP_SEL_F] = f * ks;
    flops[OP_WIN_F] = f * kw;
    flops[OP_CMP_B] = 2.5 * f * kc;
    flops[OP_SEL_B] = 2.5 * f * ks;
    flops[OP_WIN_B] = 2.5 * f * kw;
    flops[OP_DENSE_F] = f * kd;
    flops[OP_DENSE_B] = 2.5 * f * kd;
    double ms[NOPS];
    for (int op = 0; op < NOPS; op++) {
        if (g_no_dense && (op == OP_DENSE_F || op == OP_DENSE_B)) {
            ms[op] = 0;
            continue;
        }
        ms[op] = time_op(&c, op, reps);
        printf("%-6s S=%-6d B=%-3d %-26s %10.3f ms", s->name, S, B, OPN[op], ms[op]);
        if (flops[op] > 0) printf("  %8.1f TFLOP/s", flops[op] / (ms[op] * 1e-3) / 1e12);
        printf("\n");
        fflush(stdout);
    }
    double nsa_cs = ms[OP_COMPRESS] + ms[OP_CMP_F] + ms[OP_SELECT] + ms[OP_SEL_F] + ms[OP_CMP_B] + ms[OP_SEL_B];
    double nsa_all = nsa_cs + ms[OP_WIN_F] + ms[OP_WIN_B];
    double dense = ms[OP_DENSE_F] + ms[OP_DENSE_B];
    printf("SUMMARY %-6s S=%-6d B=%-3d keys/query cmp %.0f sel %.0f win %.0f | cmp+sel fwd+bwd %.3f ms | all NSA "
           "fwd+bwd %.3f ms | dense causal fwd+bwd %.3f ms | dense/NSA %.2fx\n",
           s->name, S, B, kc / (B * (double)S * s->G), ks / (B * (double)S * s->G), kw / (B * (double)S * s->G), nsa_cs,
           nsa_all, dense, dense / nsa_all);
    fflush(stdout);
    be->free(c.q); be->free(c.k); be->free(c.v); be->free(c.Kc); be->free(c.Vc); be->free(c.dKc); be->free(c.dVc);
    for (int i = 0; i < 4; i++) { be->free(c.o[i]); be->free(c.lse[i]); }
    be->free(c.dout); be->free(c.dq); be->free(c.dk); be->free(c.dv); be->free(c.sel);
}

int main(int argc, char **argv) {
    int Ss[8] = {2048, 8192, 32768, 65536}, nS = 4, B = 1, reps = 5;
    const char *which = "both";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--S") && i + 1 < argc) {
            nS = 0;
            for (char *p = strtok(argv[++i], ","); p && nS < 8; p = strtok(NULL, ",")) Ss[nS++] = atoi(p);
        } else if (!strcmp(argv[i], "--B") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--shape") && i + 1 < argc) which = argv[++i];
        else if (!strcmp(argv[i], "--no-dense")) g_no_dense = 1;
        else {
            fprintf(stderr, "bench_cuda_attn: unknown argument '%s' (usage: [--S 2048,8192,...] [--B N] "
                            "[--shape m7c|paper|both] [--reps N] [--no-dense])\n", argv[i]);
            return 2;
        }
    }
    const char *why = NULL;
    if (!nsa_cuda_init(&why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    static const Shp shapes[2] = {{"m7c", 12, 2, 64, 32, 16, 64, 16, 512}, {"paper", 64, 4, 128, 32, 16, 64, 16, 512}};
    for (int si = 0; si < 2; si++) {
        if (strcmp(which, "both") && strcmp(which, shapes[si].name)) continue;
        for (int i = 0; i < nS; i++) bench_shape(&shapes[si], Ss[i], B, Ss[i] >= 32768 ? (reps > 3 ? 3 : reps) : reps);
    }
    printf("peak device memory held by the backend: %.2f GiB\n", nsa_cuda_peak_bytes() / 1073741824.0);
    return 0;
}
#else
int main(void) {
    printf("bench_cuda_attn: this build has no CUDA backend\n");
    return 0;
}
#endif
