// harness/report/outdir.h — the report folder a run writes (`run --out DIR`, or the default
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

// A full disk must not leave a report that cannot say why, at any amount of free space.
// DIR/.nsa-harness.reserve is a ballast file that keeps the space the next report write
// needs while cases run, so a trainer that fills the disk cannot take it:
//  - the claim sets aside OUTDIR_RESERVE_MIN, and refuses a disk that cannot give it
//    (no report could be written there: exit 2 up front, naming the disk);
//  - after every report write the runner resizes it for the report as it now is
//    (outdir_reserve_fit) and looks at the free space (outdir_free_bytes); when either
//    falls short the disk is full: no more cases start (harness/exec/run_cases.c);
//  - it is released (outdir_release_reserve) right before a report write that the disk
//    refused is tried again, and before the final report of a run that met a full disk,
//    which is then written from it. It is deleted at the end of the run.
//
// 0 with *lock_fd held (close it, or exit, to release); -1 with the reason in err
// ("--out DIR: ...").
enum { OUTDIR_RESERVE_MIN = 32 * 1024 };
int outdir_claim(const char *dir, int *lock_fd, char *err, size_t errlen);
// Resize the ballast to what rewriting the report in dir needs (twice its files, rounded
// to blocks, plus 16 KiB; at least OUTDIR_RESERVE_MIN): 0, or -1 when the disk cannot
// give that much (it then keeps as much as it could take).
int outdir_reserve_fit(const char *dir);
// Delete the ballast (if still there): 1 if it freed space, else 0.
int outdir_release_reserve(const char *dir);
// The bytes an unprivileged writer may still use on the disk holding dir (-1: unknown).
long long outdir_free_bytes(const char *dir);
// The disk holding dir as a person finds it: "tmpfs mounted on /mnt/x" (its file system
// and mount point, from /proc/self/mounts), else dir itself. Into out.
void outdir_disk_name(const char *dir, char *out, size_t n);
// Remove the report files of a run that could not write even its first report (a full
// disk), so no half report is left behind: RESULTS.md, summary.json, junit.xml, env.json
// and the ballast.
void outdir_abandon(const char *dir);
#endif
