// harness/report/outdir.c — see outdir.h.
#define _XOPEN_SOURCE 700   // nftw
#include "harness/report/outdir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "harness/report/report_in.h"
#include "common/util.h"

#define LOCK_NAME ".nsa-harness.lock"
#define RESERVE_NAME ".nsa-harness.reserve"

// Make the ballast hold `want` bytes (blocks allocated, not a sparse file): grown with
// fallocate, shrunk with ftruncate. When the disk cannot give `want` (ENOSPC, EDQUOT), as
// much as it can (halving down to 4 KiB) is kept and -1 returned. A file system that keeps
// no ballast at all (no fallocate, not even glibc's emulation) is not a full disk: 0.
static int reserve_set(const char *dir, off_t want) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, RESERVE_NAME);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno == ENOSPC || errno == EDQUOT ? -1 : 0;
    struct stat st;
    int rc = 0, e;
    if (fstat(fd, &st) == 0 && st.st_size > want) (void)!ftruncate(fd, want);   // shrunk: space given back
    else if ((e = posix_fallocate(fd, 0, want)) == ENOSPC || e == EDQUOT) {
        rc = -1;
        for (off_t sz = (want / 2) & ~(off_t)4095; sz >= 4096; sz = (sz / 2) & ~(off_t)4095)
            if (fstat(fd, &st) == 0 && st.st_size >= sz) break;   // holds that much already
            else if (posix_fallocate(fd, 0, sz) == 0) break;
    }
    close(fd);
    return rc;
}

static long long blocks_of(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? ((long long)st.st_size + 4095) / 4096 * 4096 : 0;
}

int outdir_reserve_fit(const char *dir) {
    static const char *const files[] = {"RESULTS.md", "summary.json", "junit.xml", NULL};
    long long report = 0;
    for (int k = 0; files[k]; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, files[k]);
        report += blocks_of(p);
    }
    // a rewrite holds a file's new copy beside the old one until the rename, and the report
    // grows as cases end: twice its size and a margin covers the final report
    long long want = 2 * report + 16 * 1024;
    return reserve_set(dir, want > OUTDIR_RESERVE_MIN ? (off_t)want : OUTDIR_RESERVE_MIN);
}

long long outdir_free_bytes(const char *dir) {
    struct statvfs fs;
    // a file system that reports no size (some FUSE ones) says nothing about its free space
    if (statvfs(dir, &fs) != 0 || fs.f_blocks == 0) return -1;
    // root may write into the blocks ext4 keeps back from others
    return (long long)(geteuid() == 0 ? fs.f_bfree : fs.f_bavail) * (long long)fs.f_frsize;
}

void outdir_disk_name(const char *dir, char *out, size_t n) {
    snprintf(out, n, "%s", dir);
    char real[4096];
    if (!realpath(dir, real)) return;
    FILE *f = fopen("/proc/self/mounts", "re");
    if (!f) return;
    char line[8192], best_fs[256] = "", best_mnt[4096] = "";
    size_t best = 0;
    while (fgets(line, sizeof line, f)) {
        char dev[1024], mnt[4096], type[256];
        if (sscanf(line, "%1023s %4095s %255s", dev, mnt, type) != 3) continue;
        size_t l = strlen(mnt);
        int under = !strcmp(mnt, "/") || (!strncmp(real, mnt, l) && (real[l] == '/' || real[l] == '\0'));
        if (under && (l >= best || !best_mnt[0])) {
            best = l;
            snprintf(best_fs, sizeof best_fs, "%s", type);
            snprintf(best_mnt, sizeof best_mnt, "%s", mnt);
        }
    }
    fclose(f);
    if (best_mnt[0]) snprintf(out, n, "%s (%s mounted on %s)", dir, best_fs, best_mnt);
}

void outdir_abandon(const char *dir) {
    static const char *const files[] = {"RESULTS.md", "summary.json", "junit.xml", "env.json", NULL};
    for (int k = 0; files[k]; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, files[k]);
        unlink(p);
    }
    outdir_release_reserve(dir);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) ? -1 : 0;
}

// The folder's entries other than the lock file: 0 none, 1 some, -1 unreadable.
static int has_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *e;
    int any = 0;
    while (!any && (e = readdir(d)))
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && strcmp(e->d_name, LOCK_NAME) &&
              strcmp(e->d_name, RESERVE_NAME);
    closedir(d);
    return any;
}

// Remove what the previous report in dir made: its report files and the top-level
// folder of every case it lists. Nothing else is touched.
static int clear_previous_report(const char *dir, const json_t *summary, char *err, size_t errlen) {
    static const char *const files[] = {"RESULTS.md", "summary.json", "junit.xml", "env.json", NULL};
    StrList tops = {0};
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(summary, "cases"), i, c) {
        const char *rel = json_string_value(json_object_get(c, "dir"));
        if (!rel || !rel[0] || rel[0] == '/' || strstr(rel, "..")) continue;   // only folders inside dir
        char top[1024];
        snprintf(top, sizeof top, "%.*s", (int)strcspn(rel, "/"), rel);
        int seen = 0;
        for (int k = 0; k < tops.n && !seen; k++) seen = !strcmp(tops.v[k], top);
        if (!seen) strlist_add(&tops, top);
    }
    int rc = 0;
    for (int k = 0; k < tops.n && !rc; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, tops.v[k]);
        if (file_exists(p) && nftw(p, rm_entry, 16, FTW_DEPTH | FTW_PHYS)) {
            snprintf(err, errlen, "cannot remove the previous report's %s: %s", p, strerror(errno));
            rc = -1;
        }
    }
    for (int k = 0; files[k] && !rc; k++) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, files[k]);
        if (remove(p) && errno != ENOENT) {
            snprintf(err, errlen, "cannot remove the previous report's %s: %s", p, strerror(errno));
            rc = -1;
        }
    }
    strlist_free(&tops);
    return rc;
}

// "--out DIR: the disk is full: DIR (tmpfs mounted on /x) has 4 KiB free; ..."
static void disk_full_error(const char *dir, char *err, size_t errlen) {
    char disk[4400];
    outdir_disk_name(dir, disk, sizeof disk);
    long long free_b = outdir_free_bytes(dir);
    snprintf(err, errlen, "--out %s: the disk is full: %s has %lld KiB free; a run needs at least %d KiB there for "
                          "its report (free some space, or choose a folder on another disk)",
             dir, disk, free_b > 0 ? free_b / 1024 : 0, OUTDIR_RESERVE_MIN / 1024);
}

int outdir_claim(const char *dir, int *lock_fd, char *err, size_t errlen) {
    *lock_fd = -1;
    if (!dir[0]) {
        snprintf(err, errlen, "--out '': expected a folder");
        return -1;
    }
    struct stat st;
    if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--out %s: exists and is not a folder", dir);
        return -1;
    }
    if (mkdir_p(dir)) {
        snprintf(err, errlen, "--out %s: cannot create it: %s", dir, strerror(errno));
        return -1;
    }
    char lp[4400];
    snprintf(lp, sizeof lp, "%s/%s", dir, LOCK_NAME);
    int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "--out %s: cannot write there: %s", dir, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof pid - 1, 0);
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        snprintf(err, errlen, "--out %s is in use by another nsa-harness run (pid %s): wait for it, or choose another folder",
                 dir, pid[0] ? pid : "unknown");
        close(fd);
        return -1;
    }
    char pid[32];
    int pl = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) || pwrite(fd, pid, (size_t)pl, 0) != pl) {
        if (errno == ENOSPC || errno == EDQUOT) disk_full_error(dir, err, errlen);
        else snprintf(err, errlen, "--out %s: cannot write its lock file: %s", dir, strerror(errno));
        close(fd);
        return -1;
    }
    // a reused folder: an earlier report is cleared; anything else is not ours to touch.
    // Its summary.json says what the report made: read with the loader show and compare use
    char sp[4400];
    snprintf(sp, sizeof sp, "%s/summary.json", dir);
    int rc = 0;
    if (file_exists(sp)) {
        ReportIn prev;
        char why[1200];
        if (report_in_load(&prev, dir, why, sizeof why) == 0) rc = clear_previous_report(dir, prev.root, err, errlen);
        else {
            snprintf(err, errlen, "--out %s: its summary.json is not a report's (%s): remove the folder or choose another",
                     dir, why);
            rc = -1;
        }
        report_in_free(&prev);
    } else if (has_entries(dir) != 0) {
        snprintf(err, errlen, "--out %s: not empty and not an nsa-harness report folder: choose a new or empty folder", dir);
        rc = -1;
    }
    if (rc) {
        close(fd);
        return -1;
    }
    // the ballast the first report is written beside; a disk that cannot give it could not
    // hold a report either: refused now, naming the disk, rather than a run that reports nothing
    if (reserve_set(dir, OUTDIR_RESERVE_MIN)) {
        disk_full_error(dir, err, errlen);
        outdir_release_reserve(dir);
        close(fd);
        return -1;
    }
    *lock_fd = fd;
    return 0;
}

int outdir_release_reserve(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, RESERVE_NAME);
    return unlink(p) == 0;
}
