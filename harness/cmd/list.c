// harness/cmd/list.c — `nsa-harness list [SCENARIO...]`: each scenario's family, description,
// profiles and cases; --checks the registries of checks and families; --tensors a case's dump.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/cmd/commands.h"
#include "harness/cmd/options.h"
#include "harness/core/home.h"
#include "harness/core/check.h"
#include "harness/artifacts/tensornames.h"
#include "harness/exec/run_cases.h"
#include "harness/core/scenario_load.h"
#include "common/exit_codes.h"

static const CmdOption LIST_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness list [SCENARIO...] [--profile ci|gpu] [--checks] [--tensors]\n"
     "  lists each scenario's family, description, profiles and the cases of the profile\n"
     "  (both profiles when none is given)\n"
     "\n"
     "options:\n"},
    {"profile", "ci|gpu", OPT_PROFILE, 0, "only this profile's cases (default: both profiles)"},
    {"checks", NULL, OPT_CHECKS, 0, "list the checks and families instead"},
    {"tensors", NULL, OPT_TENSORS, 0,
     "add, under each case, the tensors its full step-1 dump holds (the names the dump_match and golden checks "
     "compare; a run asks a trainer that lists dump_tensors for only those its checks read)"},
    CMD_OPT_HELP,
};
const CmdOptions CMD_LIST_OPTIONS = {"list", "list", LIST_ROWS, (int)(sizeof LIST_ROWS / sizeof LIST_ROWS[0]), NULL};

void usage_list(FILE *f) { cmd_options_help(&CMD_LIST_OPTIONS, f); }

typedef struct {
    int profile, checks, tensors;
    StrList in;
} ListOpts;

static int apply_list_option(void *ctx, int id, const char *flag, const char *v) {
    ListOpts *o = ctx;
    (void)flag;
    switch (id) {
    case OPT_WORD: strlist_add(&o->in, v); break;
    case OPT_PROFILE:
        if ((o->profile = cmd_parse_profile(v)) < 0) {
            cmd_log("list", LOG_ERROR, "--profile %s: expected ci or gpu", v);
            return HARNESS_EXIT_USAGE;
        }
        break;
    case OPT_CHECKS: o->checks = 1; break;
    case OPT_TENSORS: o->tensors = 1; break;
    default: break;   // (no other row in LIST_ROWS)
    }
    return CMD_GO_ON;
}

int cmd_list(int argc, char **argv) {
    ListOpts o = {.profile = -1};
    int prc = cmd_options_parse(&CMD_LIST_OPTIONS, argc, argv, apply_list_option, NULL, &o);
    if (prc != CMD_GO_ON) return prc;
    const int profile = o.profile, checks = o.checks, tensors = o.tensors;
    StrList in = o.in;
    if (checks) {
        printf("checks:\n");
        for (int i = 0; check_at(i); i++) printf("  %-16s %s\n", check_at(i)->name, check_at(i)->summary);
        printf("families:\n");
        for (int i = 0; family_at(i); i++) printf("  %-16s %s\n", family_at(i)->name, family_at(i)->summary);
        return HARNESS_EXIT_OK;
    }
    StrList files = {0};
    if (cmd_collect_scenarios(&files, in.v, in.n)) return HARNESS_EXIT_USAGE;
    if (files.n == 0) {
        cmd_log("list", LOG_ERROR, "no scenario files in %s", in.n ? in.v[0] : harness_path("scenarios"));
        return HARNESS_EXIT_USAGE;
    }
    int rc = HARNESS_EXIT_OK;
    // per profile: the cases, the scenarios with any, the cases only for a trainer that
    // supports an "if_supported" value, and the adaptive families (harness/core/counts.h)
    int tot_cases[PROFILE_COUNT] = {0}, tot_scen[PROFILE_COUNT] = {0}, tot_if[PROFILE_COUNT] = {0};
    Str tot_adaptive[PROFILE_COUNT] = {{0}};
    for (int i = 0; i < files.n; i++) {
        for (int p = 0; p < PROFILE_COUNT; p++) {
            if (profile >= 0 && p != profile) continue;
            Problems ps = {0};
            Scenario s;
            if (scenario_load(&s, files.v[i], p, 0, NULL, 0, &ps)) {
                if (p == 0 || profile >= 0) {
                    char *t = cmd_problems_text(&ps);
                    fputs(t, stderr);
                    free(t);
                    rc = HARNESS_EXIT_USAGE;
                }
                problems_free(&ps);
                break;
            }
            if (p == 0 || profile >= 0 || (profile < 0 && !s.has_profile[0]))
                printf("%s  [%s]  %s\n    %s\n", s.name, s.family, s.path, s.description);
            if (s.has_profile[p]) {
                const FamilyDef *fam = family_find(s.family);
                const int adaptive = fam && fam->execute;
                printf("    profile %s: %d case%s%s, config %s\n", PROFILE_NAMES[p], s.n_cases, s.n_cases == 1 ? "" : "s",
                       adaptive ? " (each run as its bisection: 2 or more steps)" : "", s.config_path);
                tot_cases[p] += s.n_cases;
                tot_scen[p] += s.n_cases > 0;
                if (adaptive && s.n_cases) str_printf(&tot_adaptive[p], "%s%s's", tot_adaptive[p].len ? ", " : "", s.name);
                for (int c = 0; c < s.n_cases; c++) {
                    const Case *cs = &s.cases[c];
                    tot_if[p] += cs->if_feature[0] != 0;
                    if (cs->if_feature[0])
                        printf("      %s  (only for a trainer that supports %s '%s': a run whose trainer does not is "
                               "without it)\n", cs->name, cs->if_what, cs->if_value);
                    else printf("      %s\n", cs->name);
                    if (!tensors) continue;
                    // what the case's step dump holds: the names dump_match and golden compare
                    StrList names = {0};
                    dump_tensor_names(&s.cases[c].cfg, (checks_needs(&s) & NEED_DUMP_ACTS) != 0, &names);
                    for (int k = 0; k < names.n; k++) printf("        %s\n", names.v[k]);
                    strlist_free(&names);
                }
            }
            scenario_free(&s);
        }
    }
    for (int p = 0; p < PROFILE_COUNT; p++) {
        if ((profile >= 0 && p != profile) || !tot_scen[p]) continue;
        // the words of `run`'s first line (harness/core/counts.h)
        printf("profile %s: %d case%s", PROFILE_NAMES[p], tot_cases[p], tot_cases[p] == 1 ? "" : "s");
        if (tot_adaptive[p].len) printf(" (+ %s bisection steps)", str_c(&tot_adaptive[p]));
        printf(" in %d scenario%s", tot_scen[p], tot_scen[p] == 1 ? "" : "s");
        if (tot_if[p]) printf("; %d of them only for a trainer that supports their value (marked above)", tot_if[p]);
        printf("\n");
        str_free(&tot_adaptive[p]);
    }
    return rc;
}

