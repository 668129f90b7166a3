// trainer/ioerr.h — artifact write failures (disk full, I/O error).
//
// An artifact is a file nsa-train writes for someone else to read: metrics.jsonl,
// grad_trace.jsonl, gate_stats.jsonl, buckets.jsonl, rank_times.jsonl,
// anomaly.json, the --dump-step file, checkpoints, the flight recorder. A failure
// to create, write, flush or close one is never a warning: it is recorded here and
// the run ends with NSA_EXIT_IO (6, trainer/train.h).
//
// io_error() prints ONE machine-readable line on stderr, the first time it is
// called in the process (later failures, usually the same full disk, are not
// printed again):
//
//   [IO-ERROR] file=<path> errno=<n> <strerror(n)>
//
// <path> is the artifact as nsa-train names it (for safetensors files the final
// path, not its .tmp staging file); the rest of the line after errno=<n> and one
// space is strerror's text. The runner (nsa-harness) parses this line to report
// the case as ERROR "disk full writing <file>"; keep the format
// (docs/diagnostics.md, "Exit codes").
//
// Not artifacts (best effort, documented there): stdout/stderr and --log-file
// (the log channel itself), --stack-file (written from a signal handler).
#ifndef NSA_TRAINER_IOERR_H
#define NSA_TRAINER_IOERR_H
#include <stddef.h>

// Record a failure of `path` with errno value `err` (0 or negative: EIO). Prints the
// [IO-ERROR] line if it is the first failure of the process. Thread-safe.
void io_error(const char *path, int err);
// errno of the first failure recorded since the last io_error_reset, or 0.
int io_error_seen(void);
// Forget recorded failures (train_run calls it at its start; tests).
void io_error_reset(void);
// Open the artifact `path` for appending (O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
// 0644). On failure: err = "WHAT: cannot open PATH: why" ("cannot open PATH: why"
// when what is NULL), the failure recorded with io_error, errno kept, -1.
int artifact_open_append(const char *path, const char *what, char *err, size_t errlen);
#endif
