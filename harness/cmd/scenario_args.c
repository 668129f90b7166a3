// harness/cmd/scenario_args.c — what the subcommands share: the scenario files they are given,
// --profile, and a scenario's problems as text (see commands.h).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <limits.h>

#include "harness/cmd/commands.h"
#include "harness/exec/proc.h"
#include "harness/core/files.h"
#include "harness/core/home.h"
#include "harness/core/scenario.h"

int cmd_collect_scenarios(StrList *out, char **args, int n) {
    return collect_json_files(out, args, n, harness_path("scenarios"));
}

char *cmd_problems_text(Problems *ps) {
    problems_sort(ps);
    Str s = {0};
    for (int i = 0; i < ps->n; i++) {
        str_add(&s, ps->v[i].text);
        str_add(&s, "\n");
    }
    return str_take(&s);
}

int cmd_parse_profile(const char *v) {
    for (int p = 0; p < PROFILE_COUNT; p++)
        if (!strcmp(v, PROFILE_NAMES[p])) return p;
    return -1;
}


char *cmd_first_line(char *const argv[]) {
    char *out = NULL;
    if (proc_capture(argv, 10, &out) != 0 || !out || !out[0]) {
        free(out);
        return NULL;
    }
    out[strcspn(out, "\n")] = '\0';
    size_t n = strlen(out);
    while (n && (out[n - 1] == '\r' || out[n - 1] == ' ')) out[--n] = '\0';
    return out;
}

static char *git_first_line(const char *const *args) {
    char *argv[16];
    int n = 0;
    argv[n++] = "git";
    argv[n++] = "-C";
    argv[n++] = (char *)harness_home();
    for (int i = 0; args[i] && n < 15; i++) argv[n++] = (char *)args[i];
    argv[n] = NULL;
    return cmd_first_line(argv);
}

char *cmd_source_git(const char *const *args) {
    const char *top_args[] = {"rev-parse", "--show-toplevel", NULL};
    char *top = git_first_line(top_args);
    char a[PATH_MAX], b[PATH_MAX];
    const int own = top && top[0] && realpath(top, a) && realpath(harness_home(), b) && !strcmp(a, b);
    free(top);
    return own ? git_first_line(args) : NULL;
}
