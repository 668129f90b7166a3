// trainer/flops.c — see flops.h.
#include "trainer/flops.h"
#include "common/nsa_names.h"

// Keys a query at position t attends in each branch (exactly the unmasked ones).
static double keys_at(const Model *m, const NsaGeom *g, int t) {
    double keys = 0;
    if (m->cmp_needed) keys += nsa_cmp_visible(g, t);   // computed for selection scores too
    if (m->used[NSA_BR_SEL]) {
        int j = t / g->lsel;                            // the current selection block
        int blocks = g->n < j + 1 ? g->n : j + 1;
        keys += (double)(blocks - 1) * g->lsel + (t - j * g->lsel + 1);
    }
    if (m->used[NSA_BR_WIN]) keys += g->w < t + 1 ? g->w : t + 1;
    return keys;
}

double model_flops_per_step(const Model *m, int B, int T, int grad_accum) {
    const NsaConfig *c = &m->cfg;
    const double C = m->C, H = m->H, G = m->G, D = m->D, F = m->F, V = m->V, gh = m->gh;
    NsaGeom g;
    nsa_geom_init(&g, B, T, m->H, m->G, m->D, c->l, c->d, c->l_sel, c->n, c->w);
    // weights a token passes through, per layer
    double kv_branches = (m->cmp_needed ? 1 : 0) + m->used[NSA_BR_SEL] + m->used[NSA_BR_WIN];
    double layer_w = H * D * C + kv_branches * 2 * G * D * C + C * H * D + 3 * F * C;
    if (nsa_gated(c->force_branch)) layer_w += gh * C + 3 * G * gh;   // the gate MLP
    double tokens = (double)B * T;
    double fwd = 2 * tokens * (m->L * layer_w + V * C);
    if (c->phi == NSA_PHI_MLP && m->cmp_needed)   // per compressed block, group, K and V: fc1 + fc2
        fwd += (double)m->L * 2 * 2 * B * g.NC * G * (c->l * D * D + D * D);
    double keys = 0;
    for (int t = 0; t < T; t++) keys += keys_at(m, &g, t);
    fwd += (double)m->L * B * H * 4 * D * keys;
    return 3 * fwd * grad_accum;
}
