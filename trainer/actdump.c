// trainer/actdump.c — see actdump.h.
#include "trainer/actdump.h"
#include "common/nsa_names.h"
#include "common/util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[96];
    StDtype dtype;
    int ndim;
    int64_t shape[4];
    void *data;   // host copy
} Captured;

struct ActDump {
    Captured *v;
    int n, cap;
    const char *select;   // --dump-tensors, or NULL: every activation
};

ActDump *actdump_new(const char *select) {
    ActDump *d = xcalloc(1, sizeof *d);
    d->select = select;
    return d;
}

int actdump_widen16(float *out, const uint16_t *in, int64_t n, int bf16) {
    for (int64_t i = 0; i < n; i++) {
        const uint32_t h = in[i];
        uint32_t u;
        if (bf16) {
            if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) return -1;
            u = h << 16;
        } else {
            uint32_t e = (h >> 10) & 0x1fu, man = h & 0x3ffu;
            const uint32_t s = (h & 0x8000u) << 16;
            if (e == 0x1fu) {
                if (man) return -1;
                u = s | 0x7f800000u;
            } else if (e) {
                u = s | ((e + 112u) << 23) | (man << 13);
            } else if (!man) {
                u = s;
            } else {   // subnormal: man * 2^-24, normalised
                e = 113u;
                while (!(man & 0x400u)) man <<= 1, e--;
                u = s | (e << 23) | ((man & 0x3ffu) << 13);
            }
        }
        memcpy(&out[i], &u, 4);
    }
    return 0;
}

void *actdump_to_host(const Model *m, const void *dev, int64_t n) {
    const Backend *be = m->be;
    if (be->act_bytes == 8) {
        double *h = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
        be->act_to_f64(h, dev, n);
        return h;
    }
    float *f = xmalloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (be->act_bytes == 2 && (!strcmp(m->cfg.precision, "bf16") || !strcmp(m->cfg.precision, "fp16"))) {
        uint16_t *raw = xmalloc(sizeof(uint16_t) * (size_t)(n > 0 ? n : 1));
        be->to_host(raw, dev, sizeof(uint16_t) * (size_t)n);
        const int ok = actdump_widen16(f, raw, n, m->cfg.precision[0] == 'b') == 0;
        free(raw);
        if (ok) return f;
    }
    double *h = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    be->act_to_f64(h, dev, n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)h[i];   // exact for bf16/fp16/fp32 values
    free(h);
    return f;
}

static Captured *push(ActDump *d) {
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        d->v = xrealloc(d->v, sizeof(Captured) * (size_t)d->cap);
    }
    Captured *c = &d->v[d->n++];
    memset(c, 0, sizeof *c);
    return c;
}

// An activation-typed backend tensor of n = prod(shape) elements, converted.
static void grab_act(ActDump *d, const Model *m, const void *dev, int L, const char *what, int ndim, const int64_t *shape) {
    if (!dev) return;
    char name[96];
    snprintf(name, sizeof name, "acts.blocks.%d.%s", L, what);
    if (!glob_list_match(d->select, name)) return;
    Captured *c = push(d);
    memcpy(c->name, name, sizeof name);
    c->ndim = ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (c->shape[i] = shape[i]);
    c->dtype = m->be->act_bytes == 8 ? ST_F64 : ST_F32;
    c->data = actdump_to_host(m, dev, n);
}

void actdump_layer(ActDump *d, const Model *m, int L) {
    const LayerActs *a = &m->acts[L];
    const int64_t B = m->B, T = m->T, C = m->C, HD = (int64_t)m->H * m->D, GD = (int64_t)m->G * m->D;
    const int64_t rowC[3] = {B, T, C}, rowHD[3] = {B, T, HD}, rowGD[3] = {B, T, GD};
    char what[64];
    grab_act(d, m, a->xn1, L, "attn_norm.out", 3, rowC);
    grab_act(d, m, a->q, L, "attn.q", 3, rowHD);
    for (int b = 0; b < 3; b++) {
        snprintf(what, sizeof what, "attn.%s.k", nsa_branch_name(b));
        grab_act(d, m, a->k[b], L, what, 3, rowGD);
        snprintf(what, sizeof what, "attn.%s.v", nsa_branch_name(b));
        grab_act(d, m, a->v[b], L, what, 3, rowGD);
    }
    if (m->cmp_needed) {
        const int64_t kc[4] = {B, m->geom.NC, m->G, m->D};
        grab_act(d, m, a->Kc, L, "attn.cmp.Kc", 4, kc);
        grab_act(d, m, a->Vc, L, "attn.cmp.Vc", 4, kc);
        grab_act(d, m, a->o[0], L, "attn.cmp.o", 3, rowHD);
    }
    if (m->used[NSA_BR_SEL] && a->sel_idx) {
        snprintf(what, sizeof what, "acts.blocks.%d.attn.sel.idx", L);
        if (glob_list_match(d->select, what)) {
            Captured *c = push(d);
            snprintf(c->name, sizeof c->name, "%s", what);
            c->dtype = ST_I32;
            c->ndim = 4;
            c->shape[0] = B, c->shape[1] = T, c->shape[2] = m->G, c->shape[3] = m->cfg.n;
            size_t bytes = sizeof(int32_t) * (size_t)(B * T * m->G * m->cfg.n);
            c->data = xmalloc(bytes);
            m->be->to_host(c->data, a->sel_idx, bytes);
        }
        grab_act(d, m, a->o[1], L, "attn.sel.o", 3, rowHD);
    }
    if (m->used[NSA_BR_WIN]) grab_act(d, m, a->o[2], L, "attn.win.o", 3, rowHD);
    if (nsa_gated(m->cfg.force_branch)) {
        const int64_t g3[3] = {B, T, 3 * (int64_t)m->G};
        grab_act(d, m, a->gate, L, "attn.gate.out", 3, g3);
    }
    grab_act(d, m, a->attn_o, L, "attn.out", 3, rowHD);
    grab_act(d, m, a->x_mid, L, "attn.residual", 3, rowC);
    const int64_t rowF[3] = {B, T, m->F};
    grab_act(d, m, a->ffh, L, "mlp.hidden", 3, rowF);
    grab_act(d, m, m->res[L + 1], L, "out", 3, rowC);
}

void actdump_add(const ActDump *d, StFile *f) {
    for (int i = 0; i < d->n; i++) st_add(f, d->v[i].name, d->v[i].dtype, d->v[i].ndim, d->v[i].shape, d->v[i].data);
}

void actdump_free(ActDump *d) {
    if (!d) return;
    for (int i = 0; i < d->n; i++) free(d->v[i].data);
    free(d->v);
    free(d);
}
