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

// A full disk must not leave a report that cannot say why: the claim also sets aside
// DIR/.nsa-harness.reserve, a ballast file of up to 256 KiB (as much of it as fits),
// which outdir_release_reserve deletes when a report write fails, so the report that
// names the file the disk refused still fits. It is deleted at the end of the run.
//
// 0 with *lock_fd held (close it, or exit, to release); -1 with the reason in err
// ("--out DIR: ...").
int outdir_claim(const char *dir, int *lock_fd, char *err, size_t errlen);
// Delete the ballast (if still there): 1 if it freed space, else 0.
int outdir_release_reserve(const char *dir);
#endif
