// trainer/optim.h — AdamW over the model's parameter table, global-norm
// clipping and the warmup + cosine learning-rate schedule.
#ifndef NSA_TRAINER_OPTIM_H
#define NSA_TRAINER_OPTIM_H
#include "trainer/model.h"

typedef struct {
    void *m_mem, *v_mem;   // [n_elems] first/second moments, parameter type, same layout as params
    int64_t t;             // optimizer steps taken (bias correction)
    // Dynamic loss scaling (precision fp16 only; 1 and unused otherwise): the loss
    // gradient is multiplied by loss_scale; a step whose scaled gradients overflow
    // is skipped and the scale halved; after OPTIM_SCALE_WINDOW good steps in a
    // row it doubles (at most OPTIM_SCALE_MAX).
    double loss_scale;
    int64_t good_steps;    // good steps since the last change of loss_scale
} Optim;

#define OPTIM_SCALE_INIT 65536.0
#define OPTIM_SCALE_MAX 16777216.0
#define OPTIM_SCALE_WINDOW 1000

void optim_init(Optim *o, const Model *m);   // loss_scale from the model's precision
// fp16 loss scaling after a backward with scaled gradients: returns 1 if the step
// may go on (gradients unscaled in place, *grad_norm unscaled) or 0 if it
// overflowed (scale halved, the caller skips the optimizer step). No-op returning
// 1 when loss_scale is 1 (every other precision).
int optim_unscale(Optim *o, Model *m, double *grad_norm);
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
