// trainer/envinfo.h — the facts about this binary and host that `nsa-train
// --print-env` reports (DESIGN 7: the trainer's part of env.json).
#ifndef NSA_TRAINER_ENVINFO_H
#define NSA_TRAINER_ENVINFO_H
#include "common/config.h"

// The environment as pretty JSON text (caller frees). cfg (or NULL) adds the
// "config" section. Keys: docs/diagnostics.md "--print-env".
char *envinfo_json(const NsaConfig *cfg);
#endif
