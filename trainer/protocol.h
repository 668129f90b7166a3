// trainer/protocol.h — the trainer protocol's capability handshake (docs/trainer-protocol.md).
//
// `nsa-train --protocol-info` prints one JSON object and exits 0, without a config:
//   {"protocol": 2, "trainer": "nsa-train", "version": "<git sha of the build>",
//    "features": {"backends": [...], "precisions": [...], "transports": [...],
//                 "bootstraps": [...], "ddp_modes": [...], "prefill": [...], "data": [...],
//                 "faults": [...], "diagnostics": [...]}}
// Every list is derived from the code that decides it (the fault table, the transports
// and bootstraps this build has, the config's names, the backends built), so the answer
// cannot drift from what the trainer accepts. The runner (harness/exec/trainer_caps.h) asks it
// once per run and SKIPs a case that needs a feature missing from it.
#ifndef NSA_TRAINER_PROTOCOL_H
#define NSA_TRAINER_PROTOCOL_H
#include <stdio.h>

// The protocol version this trainer speaks (docs/trainer-protocol.md "Versions").
#define NSA_TRAINER_PROTOCOL 2

// The handshake object as compact JSON text (malloc'd, no newline), or NULL when memory ran out.
char *protocol_info_json(void);
// Print it and a newline to out. 0, or -1 (memory, or a write error).
int protocol_info_print(FILE *out);
#endif
