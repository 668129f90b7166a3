// tests/trainer/test_tmpdir.h — a scratch folder for a cmocka test group (header-only,
// included by one test program each): $TMPDIR/nsa_<tag>_XXXXXX made by the group's
// setup, emptied and removed by its teardown. Tests name files in it with path_in_dir.
#ifndef NSA_TESTS_TMPDIR_H
#define NSA_TESTS_TMPDIR_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef TEST_TMPDIR_TAG
#error "define TEST_TMPDIR_TAG (a short name for the folder) before including test_tmpdir.h"
#endif

static char g_dir[256];

static int setup_dir(void **state) {
    (void)state;
    const char *t = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/nsa_" TEST_TMPDIR_TAG "_XXXXXX", t && *t ? t : "/tmp");
    return mkdtemp(g_dir) ? 0 : -1;
}

// removes the folder's files and empty folders (one level), then the folder
static int teardown_dir(void **state) {
    (void)state;
    DIR *d = opendir(g_dir);
    if (!d) return -1;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(p, sizeof p, "%s/%s", g_dir, e->d_name);
        remove(p);
    }
    closedir(d);
    return rmdir(g_dir);
}

static void path_in_dir(char *out, size_t n, const char *name) {
    snprintf(out, n, "%s/%s", g_dir, name);
}
#endif
