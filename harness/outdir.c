// harness/outdir.c — see outdir.h.
#define _XOPEN_SOURCE 700   // nftw
#include "harness/outdir.h"

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
#include <unistd.h>

#include "common/util.h"

#define LOCK_NAME ".nsa-harness.lock"
#define RESERVE_NAME ".nsa-harness.reserve"

// The ballast: the largest of 256, 64, 16, 4 KiB that the file system still holds.
static void set_aside_reserve(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, RESERVE_NAME);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    for (off_t sz = 256 * 1024; sz >= 4096; sz /= 4)
        if (posix_fallocate(fd, 0, sz) == 0) break;
    close(fd);
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
        snprintf(err, errlen, "--out %s: cannot write its lock file: %s", dir, strerror(errno));
        close(fd);
        return -1;
    }
    // a reused folder: an earlier report is cleared; anything else is not ours to touch
    char sp[4400];
    snprintf(sp, sizeof sp, "%s/summary.json", dir);
    json_error_t je;
    json_t *prev = file_exists(sp) ? json_load_file(sp, 0, &je) : NULL;
    int rc = 0;
    if (prev && json_is_string(json_object_get(prev, "format"))) rc = clear_previous_report(dir, prev, err, errlen);
    else if (file_exists(sp)) {
        snprintf(err, errlen, "--out %s: its summary.json is not a report's (%d:%d: %s): remove the folder or choose another",
                 dir, je.line, je.column, prev ? "no \"format\"" : je.text);
        rc = -1;
    } else if (has_entries(dir) != 0) {
        snprintf(err, errlen, "--out %s: not empty and not an nsa-harness report folder: choose a new or empty folder", dir);
        rc = -1;
    }
    json_decref(prev);
    if (rc) {
        close(fd);
        return -1;
    }
    *lock_fd = fd;
    set_aside_reserve(dir);
    return 0;
}

int outdir_release_reserve(const char *dir) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s", dir, RESERVE_NAME);
    return unlink(p) == 0;
}
