// trainer/flightrec.h — the flight recorder's writer (nsa-train). The file layout,
// its consistency rules and the readers the runner uses are in
// common/flightrec_layout.h.
#ifndef NSA_TRAINER_FLIGHTREC_H
#define NSA_TRAINER_FLIGHTREC_H
#include <stddef.h>
#include <stdint.h>
#include "common/flightrec_layout.h"

// ---- writer (nsa-train only; trainer/flightrec.c) -----------------------------------
// One process-wide recorder, written by the main thread only. Every call is a
// no-op when no recorder is open, and costs a clock_gettime and a few stores
// when one is.

// Create/truncate `path`, reserve its blocks (fr_reserve_file), map it, fill the
// header, the magic last. Returns 0, or -1 with err filled ("path: why") and errno
// set to the cause (ENOSPC when the blocks cannot be reserved).
int flightrec_open(const char *path, int rank, char *err, size_t errlen);
// Allocate bytes [0, bytes) of the open file fd: posix_fallocate, or, when
// try_fallocate is 0 or the filesystem does not support it (EOPNOTSUPP), by
// writing zeros. Returns 0 or the errno value (ENOSPC on a full filesystem).
int fr_reserve_file(int fd, uint64_t bytes, int try_fallocate);
// The mapped header, or NULL when off (for the stack dumper and tests).
FrHeader *flightrec_header(void);
// Record an event and make it the current state (phase, step, layer, op).
void flightrec_event(int phase, int kind, int64_t step, int layer, const char *op);
// Update the current state and the heartbeat without adding a ring event (for
// very frequent points, e.g. every token of sequential prefill).
void flightrec_state(int phase, int64_t step, int layer, const char *op);
// A collective counter advanced (which = FR_COLL_*): sets the counter to seq,
// the collective name, and records a FR_KIND_COLLECTIVE event in phase comm.
void flightrec_collective(int which, int64_t seq, const char *name, int64_t step);
// Normal exit: phase done, exited = 1, exit_code; unmaps (the file stays).
void flightrec_finish(int exit_code);
// Called by the crash/stall handler (async-signal-safe): fatal_signal = sig.
void flightrec_note_signal(int sig);
// `nsa-train --show-flight-recorder FILE`: print the file's header, state and
// events to stdout as one JSON object (format: docs/diagnostics.md). Returns 0,
// or -1 (message on stderr) if FILE is not a readable flight recorder.
int flightrec_show(const char *path);
#endif
