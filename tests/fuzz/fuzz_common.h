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
// An input laid out as FILE \0 SET \0 SET ...: the file's length (up to the first NUL, or
// all of it), and copies of up to max_sets NUL-separated strings after it in sets[]
// (NUL-terminated; the caller frees each). Returns how many sets were copied.
static inline int fuzz_split_sets(const uint8_t *data, size_t size, size_t *file_len, char **sets, int max_sets) {
    const uint8_t *nul = memchr(data, 0, size);
    *file_len = nul ? (size_t)(nul - data) : size;
    int n_sets = 0;
    for (size_t at = *file_len + 1; nul && at <= size && n_sets < max_sets;) {
        const uint8_t *end = at < size ? memchr(data + at, 0, size - at) : NULL;
        size_t len = (end ? (size_t)(end - data) : size) - at;
        sets[n_sets] = malloc(len + 1);
        if (!sets[n_sets]) abort();
        if (len) memcpy(sets[n_sets], data + at, len);
        sets[n_sets][len] = '\0';
        n_sets++;
        at += len + 1;
    }
    return n_sets;
}
#endif
