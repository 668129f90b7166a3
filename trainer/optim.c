// trainer/optim.c — AdamW, global-norm clipping, LR schedule (see optim.h).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/util.h"
#include "trainer/optim.h"

void optim_init(Optim *o, const Model *m) {
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    o->m_mem = m->be->alloc(bytes);
    o->v_mem = m->be->alloc(bytes);
    o->t = 0;
    o->loss_scale = !strcmp(m->cfg.precision, "fp16") ? OPTIM_SCALE_INIT : 1.0;
    o->good_steps = 0;
}

int optim_unscale(Optim *o, Model *m, double *grad_norm) {
    if (o->loss_scale == 1.0 && strcmp(m->cfg.precision, "fp16")) return 1;
    if (!isfinite(*grad_norm)) {
        o->loss_scale = o->loss_scale > 1.0 ? o->loss_scale / 2 : 1.0;
        o->good_steps = 0;
        return 0;
    }
    m->be->scale_param(m->grad_mem, 1.0 / o->loss_scale, m->n_elems);
    *grad_norm /= o->loss_scale;
    if (++o->good_steps >= OPTIM_SCALE_WINDOW && o->loss_scale < OPTIM_SCALE_MAX) {
        o->loss_scale *= 2;
        o->good_steps = 0;
    }
    return 1;
}

void optim_free(Optim *o, const Model *m) {
    m->be->free(o->m_mem);
    m->be->free(o->v_mem);
    o->m_mem = o->v_mem = NULL;
}

double optim_lr(const NsaConfig *c, int64_t step) {
    if (c->warmup_steps > 0 && step <= c->warmup_steps)
        return c->lr * (double)step / (double)c->warmup_steps;
    double span = (double)(c->steps - c->warmup_steps);
    double frac = span > 0 ? (double)(step - c->warmup_steps) / span : 1.0;
    if (frac > 1) frac = 1;
    if (frac < 0) frac = 0;
    double lo = c->lr * c->min_lr_frac;
    return lo + 0.5 * (c->lr - lo) * (1.0 + cos(3.14159265358979323846 * frac));
}

// Each tensor's sum of squares (one backend call, one host wait), added in parameter order:
// the same bits as summing per-tensor sumsq_param calls.
double optim_grad_norm(const Model *m) {
    const int n = m->n_params;
    int64_t *off = xmalloc(sizeof(int64_t) * 2 * (size_t)(n > 0 ? n : 1));
    double *ss = xmalloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    int64_t *len = off + n;
    for (int i = 0; i < n; i++) {
        off[i] = m->params[i].offset;
        len[i] = m->params[i].numel;
    }
    m->be->sumsq_params(m->grad_mem, off, len, n, ss);
    double s = 0;
    for (int i = 0; i < n; i++) s += ss[i];
    free(off);
    free(ss);
    return sqrt(s);
}

void optim_step(Optim *o, Model *m, double lr, double grad_norm) {
    const NsaConfig *c = &m->cfg;
    if (c->grad_clip > 0 && grad_norm > c->grad_clip)
        m->be->scale_param(m->grad_mem, c->grad_clip / grad_norm, m->n_elems);
    o->t++;
    double bc1 = 1.0 - pow(c->beta1, (double)o->t), bc2 = 1.0 - pow(c->beta2, (double)o->t);
    // AdamW is elementwise: a run of consecutive tensors (contiguous in the parameter buffer)
    // with the same weight decay is one update, with the bits of one update per tensor
    // (m7c_125m: 207 tensors, 98 runs), and the backend gets all the runs in one call
    const size_t np = m->n_params > 0 ? (size_t)m->n_params : 1;
    int64_t *off = xmalloc(sizeof(int64_t) * 2 * np), *len = off + np;
    double *wd = xmalloc(sizeof(double) * np);
    int nr = 0;
    for (int i = 0; i < m->n_params;) {
        const ParamInfo *p = &m->params[i];
        int64_t n = p->numel;
        int j = i + 1;
        while (j < m->n_params && m->params[j].decay == p->decay && m->params[j].offset == p->offset + n) n += m->params[j++].numel;
        off[nr] = p->offset;
        len[nr] = n;
        wd[nr++] = p->decay ? c->weight_decay : 0.0;
        i = j;
    }
    m->be->adamw_runs(m->param_mem, m->grad_mem, o->m_mem, o->v_mem, off, len, wd, nr, lr, c->beta1, c->beta2, bc1, bc2,
                      c->adam_eps);
    free(wd);
    free(off);
}
