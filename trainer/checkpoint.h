// trainer/checkpoint.h — training checkpoints as safetensors.
//
// One file holds: every parameter under its dotted name (F32, or F64 on cpu64),
// so PyTorch's safetensors loader reads the weights directly; the AdamW moments
// as "optim.m.<name>" / "optim.v.<name>"; and in the metadata the step, the
// optimizer step count, the data position, the seed and the canonical config.
// Randomness is counter-based (trainer/rng.h): the seed and the data position
// are the whole RNG state, so resume continues bit for bit.
#ifndef NSA_TRAINER_CHECKPOINT_H
#define NSA_TRAINER_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "trainer/data.h"
#include "trainer/model.h"
#include "trainer/optim.h"

int checkpoint_save(const char *path, const Model *m, const Optim *o, int64_t step, DataPos pos,
                    char *err, size_t errlen);
// Restores parameters and optimizer state into an initialised model/optimizer of
// the same shape. A missing tensor or a shape/dtype mismatch is an error.
// *digest_out (17 bytes) receives the config digest the checkpoint was written with.
int checkpoint_load(const char *path, Model *m, Optim *o, int64_t *step, DataPos *pos,
                    char *digest_out, char *err, size_t errlen);
#endif
