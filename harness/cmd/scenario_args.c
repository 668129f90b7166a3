// harness/cmd/scenario_args.c — what the subcommands share: the scenario files they are given,
// --profile, and a scenario's problems as text (see commands.h).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/cmd/commands.h"
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

