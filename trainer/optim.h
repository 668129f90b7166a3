// trainer/optim.h — AdamW over the model's parameter table, global-norm
// clipping and the warmup + cosine learning-rate schedule.
#ifndef NSA_TRAINER_OPTIM_H
#define NSA_TRAINER_OPTIM_H
#include "trainer/model.h"

typedef struct {
    void *m_mem, *v_mem;   // [n_elems] first/second moments, parameter type, same layout as params
    int64_t t;             // optimizer steps taken (bias correction)
} Optim;

void optim_init(Optim *o, const Model *m);
void optim_free(Optim *o, const Model *m);
// LR at 1-based step s: linear warmup over warmup_steps, then cosine from lr to
// lr*min_lr_frac at cfg.steps.
double optim_lr(const NsaConfig *c, int64_t step);
// Global L2 norm of all gradients (fixed order: parameter order, each tensor's
// sum of squares fixed-order on the backend).
double optim_grad_norm(const Model *m);
// Clip (if grad_clip > 0 and norm > grad_clip) then one AdamW step at `lr`.
void optim_step(Optim *o, Model *m, double lr, double grad_norm);
#endif
