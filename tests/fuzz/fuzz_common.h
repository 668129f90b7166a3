// tests/fuzz/fuzz_common.h — what the libFuzzer targets share: a private temporary
// folder per process (removed at exit) and writing an input there as a file, because
// every loader under test reads a path (config_load, scenario_load, st_read,
// data_open). The folder is under $TMPDIR (default /tmp); files are overwritten on
// every input, so a run leaves nothing behind however many inputs it tries.
#ifndef NSA_TESTS_FUZZ_COMMON_H
#define NSA_TESTS_FUZZ_COMMON_H
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char fuzz_dir[512];

// Removes fuzz_dir and everything below it (no symlink is followed: unlink removes
// the link itself).
static inline void fuzz_rm_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return;
    if (S_ISDIR(sb.st_mode)) {
        DIR *d = opendir(path);
        if (d) {
            struct dirent *e;
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                char sub[1024];
                snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
                fuzz_rm_tree(sub);
            }
            closedir(d);
        }
        rmdir(path);
    } else unlink(path);
}

static inline void fuzz_cleanup(void) {
    if (fuzz_dir[0]) fuzz_rm_tree(fuzz_dir);
}

// The process's folder, created on first use.
static inline const char *fuzz_tmpdir(void) {
    if (!fuzz_dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(fuzz_dir, sizeof fuzz_dir, "%s/nsa_fuzz.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup);
    }
    return fuzz_dir;
}

// Writes n bytes to path (truncating); aborts on an I/O error (the harness's fault,
// not the loader's).
static inline void fuzz_write(const char *path, const uint8_t *data, size_t n) {
    FILE *fp = fopen(path, "wb");
    if (!fp || (n && fwrite(data, 1, n, fp) != n) || fclose(fp) != 0) {
        perror(path);
        abort();
    }
}
#endif
