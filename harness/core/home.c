// harness/core/home.c — see home.h.
#define _GNU_SOURCE
#include "harness/core/home.h"

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static char g_home[PATH_MAX];
static int g_installed;

// out = a + b; 0, or -1 where it does not fit
static int join(char *out, size_t n, const char *a, const char *b) {
    const int k = snprintf(out, n, "%s%s", a, b);
    return k < 0 || (size_t)k >= n ? -1 : 0;
}

static int has_scenarios(const char *dir) {
    char p[PATH_MAX];
    return join(p, sizeof p, dir, "/scenarios") == 0 && is_dir(p);
}

static void set_home(const char *dir) {
    char *real = realpath(dir, NULL);
    if (join(g_home, sizeof g_home, real ? real : dir, "")) join(g_home, sizeof g_home, ".", "");
    free(real);
}

static void resolve(void) {
    const char *env = getenv("NSA_HARNESS_HOME");
    if (env && env[0]) {
        set_home(env);
        return;
    }
    char exe[PATH_MAX] = "", dir[PATH_MAX] = "";
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = 0;
        path_dirname(exe, dir, sizeof dir);
        char p[PATH_MAX];
        if (join(p, sizeof p, dir, "/../share/nsa-harness") == 0 && has_scenarios(p)) {
            set_home(p);
            g_installed = 1;
            return;
        }
        char *text = join(p, sizeof p, dir, "/nsa-harness-home") == 0 ? read_file(p, NULL) : NULL;
        if (text) {
            text[strcspn(text, "\r\n")] = 0;
            const int ok = text[0] && has_scenarios(text);
            if (ok) set_home(text);
            free(text);
            if (ok) return;
        }
        if (join(p, sizeof p, dir, "/..") == 0 && has_scenarios(p)) {
            set_home(p);
            return;
        }
    }
    set_home(".");
}

int harness_home_check(char *err, size_t n) {
    const char *env = getenv("NSA_HARNESS_HOME");
    if (!env || !env[0] || has_scenarios(env)) return 0;
    snprintf(err, n, "NSA_HARNESS_HOME=%.400s: no scenarios/ folder there (the folder that holds scenarios/, configs/, "
                     "golden/baselines/: an installed PREFIX/share/nsa-harness or a source tree)", env);
    return -1;
}

const char *harness_home(void) {
    pthread_once(&g_once, resolve);
    return g_home;
}

// interned HOME/rel strings: reachable for the process (a handful of distinct ones)
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_paths;
static int g_n_paths, g_cap_paths;

const char *harness_path(const char *rel) {
    const char *home = harness_home();
    Str b = {0};
    str_printf(&b, "%s/%s", home, rel);
    pthread_mutex_lock(&g_lock);
    const char *out = NULL;
    for (int i = 0; i < g_n_paths && !out; i++)
        if (!strcmp(g_paths[i], str_c(&b))) out = g_paths[i];
    if (!out) {
        if (g_n_paths == g_cap_paths) {
            g_cap_paths = g_cap_paths ? 2 * g_cap_paths : 16;
            g_paths = xrealloc(g_paths, sizeof(char *) * (size_t)g_cap_paths);
        }
        out = g_paths[g_n_paths++] = xstrdup(str_c(&b));
    }
    pthread_mutex_unlock(&g_lock);
    str_free(&b);
    return out;
}

const char *harness_reports_dir(void) {
    harness_home();
    return g_installed ? "reports" : harness_path("reports");
}
