// harness/core/trainer_cmd.c — see trainer_cmd.h.
#define _XOPEN_SOURCE 700   // realpath
#include "harness/core/home.h"
#include "harness/core/trainer_cmd.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>


int trainer_split_words(const char *text, StrList *out, char *err, size_t errlen) {
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) return 0;
        Str w = {0};
        str_add(&w, "");
        while (*p && !(*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) {
            if (*p == '\'') {
                const char *q = strchr(p + 1, '\'');
                if (!q) {
                    set_err(err, errlen, "unterminated ' quote at byte %d", (int)(p - text) + 1);
                    str_free(&w);
                    return -1;
                }
                str_addn(&w, p + 1, (size_t)(q - p - 1));
                p = q + 1;
            } else if (*p == '"') {
                const char *start = p++;
                while (*p && *p != '"') {
                    if (*p == '\\' && p[1] && strchr("\"\\$`", p[1])) p++;
                    str_addn(&w, p, 1);
                    p++;
                }
                if (!*p) {
                    set_err(err, errlen, "unterminated \" quote at byte %d", (int)(start - text) + 1);
                    str_free(&w);
                    return -1;
                }
                p++;
            } else if (*p == '\\') {
                if (!p[1]) {
                    set_err(err, errlen, "a backslash ends the command");
                    str_free(&w);
                    return -1;
                }
                str_addn(&w, p + 1, 1);
                p += 2;
            } else {
                str_addn(&w, p, 1);
                p++;
            }
        }
        strlist_add(out, str_c(&w));
        str_free(&w);
    }
}

void trainer_absolutize(StrList *words, const char *base_dir, int must_exist) {
    for (int i = 0; i < words->n; i++) {
        const char *w = words->v[i];
        if (!strchr(w, '/') || w[0] == '/' || w[0] == '-' || strchr(w, '=')) continue;
        char abs[4096], real[PATH_MAX];
        path_join(abs, sizeof abs, base_dir, w);
        struct stat st;
        const int exists = stat(abs, &st) == 0;
        if (must_exist && !exists) continue;
        free(words->v[i]);
        words->v[i] = xstrdup(exists && realpath(abs, real) ? real : abs);   // no "dir/../" in reports
    }
}

void trainer_spec_init(TrainerSpec *t, const char *name, char *const *words, int is_cmd) {
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    for (int i = 0; words[i]; i++) strlist_add(&t->words, words[i]);
    t->is_cmd = is_cmd;
    Str d = {0};
    shell_join(&d, t->words.v);
    t->display = str_take(&d);
}

void trainer_spec_free(TrainerSpec *t) {
    strlist_free(&t->words);
    free(t->display);
    t->display = NULL;
    free(t->map);
    t->map = NULL;
}

int trainer_map_path(const char *base_dir, const char *path, char *out, size_t n) {
    char joined[4096], real[PATH_MAX];
    path_join(joined, sizeof joined, base_dir, path);
    struct stat st;
    if (!path[0] || !realpath(joined, real) || stat(real, &st) != 0 || S_ISDIR(st.st_mode)) return -1;
    snprintf(out, n, "%s", real);
    return 0;
}

const char *trainer_probe_path(void) {
    const char *env = getenv("NSA_PROBE");
    return env && env[0] ? env : harness_path("probe/nsa-probe");
}

void trainer_spec_init_map(TrainerSpec *t, const char *name, const char *abs_map) {
    char *const words[] = {(char *)trainer_probe_path(), "--map", (char *)abs_map, NULL};
    trainer_spec_init(t, name, words, 1);
    t->map = xstrdup(abs_map);
}

const char *trainer_spec_label(const TrainerSpec *t) {
    return t->map && !strcmp(t->name, "nsa-train") ? path_basename(t->map) : t->name;
}

void trainer_spec_argv(const TrainerSpec *t, StrList *out) {
    for (int i = 0; i < t->words.n; i++) strlist_add(out, t->words.v[i]);
}
