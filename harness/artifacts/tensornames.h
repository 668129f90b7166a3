// harness/artifacts/tensornames.h — the names of the tensors a case's step-1 dump holds, from its
// config alone (the runner links no model code): inputs, targets, logits, loss,
// grads.<parameter> for every parameter (docs/architecture.md lists them, with the
// config's rules: the phi=mlp compressor, an untied LM head), and with --dump-acts
// every layer's activations (trainer/actdump.h: the branches the config computes, the
// gate unless force_branch). tests/cli/harness_misc.sh holds this list against the
// trainer's real dumps, so the two cannot drift apart silently.
#ifndef NSA_HARNESS_TENSORNAMES_H
#define NSA_HARNESS_TENSORNAMES_H
#include "common/util.h"
#include "common/config.h"

void dump_tensor_names(const NsaConfig *c, int with_acts, StrList *out);
#endif
