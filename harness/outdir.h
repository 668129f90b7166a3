// harness/outdir.h — the report folder a run writes (`run --out DIR`, or the default
// reports/<time>_<sha>): claimed before any case runs, so that a problem with it is a
// usage error up front (exit 2), never a run whose every case ERRORs.
//
// Claiming: the path must be a folder or creatable; it must be writable; a lock file
// (DIR/.nsa-harness.lock, flock, holding the pid) keeps a second run out while the
// first holds it — the second exits 2 naming the holder's pid (two runs writing one
// folder read each other's metrics and gave a false FAIL). A folder that holds an
// earlier report (its summary.json) is cleared of that report — its report files and
// its case folders, nothing else — so no stale artifact is read as this run's; a
// non-empty folder that is not a report is refused.
#ifndef NSA_HARNESS_OUTDIR_H
#define NSA_HARNESS_OUTDIR_H
#include <stddef.h>

// 0 with *lock_fd held (close it, or exit, to release); -1 with the reason in err
// ("--out DIR: ...").
int outdir_claim(const char *dir, int *lock_fd, char *err, size_t errlen);
#endif
