// harness/cmd/validate.c — `nsa-harness validate [SCENARIO...]`: every profile of each scenario
// against the schema, with file:line:col problems.
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
#include "harness/core/scenario_load.h"
#include "harness/exec/trainer_caps.h"
#include "common/exit_codes.h"

static const CmdOption VALIDATE_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness validate [SCENARIO...]\n"
     "  validates scenarios for every profile they define: schema, matrix, and each case's\n"
     "  config overrides through the trainer's config loader. A SCENARIO is a file, or a\n"
     "  directory standing for the *.json files directly in it (not its subdirectories), as\n"
     "  run and list take them (default: <home>/scenarios). Problems are printed as\n"
     "  file:line:col: message; exit 2 if any, or if a file is not a regular file or a\n"
     "  directory holds no *.json.\n"
     "\n"
     "options:\n"},
    CMD_OPT_HELP,
};
const CmdOptions CMD_VALIDATE_OPTIONS = {"validate", "validate", VALIDATE_ROWS,
                                         (int)(sizeof VALIDATE_ROWS / sizeof VALIDATE_ROWS[0]), NULL};

void usage_validate(FILE *f) { cmd_options_help(&CMD_VALIDATE_OPTIONS, f); }

static int apply_validate_option(void *ctx, int id, const char *flag, const char *v) {
    (void)flag;
    if (id == OPT_WORD) strlist_add(ctx, v);
    return CMD_GO_ON;
}

// The trainer maps a scenario's run.trainers name (this profile's), each checked by its probe
// (`PROBE --map MAP --check-map`): a rejected map is a problem at its "map" value, after the
// probe's own lines (MAP:line:col: message). seen: the maps checked already (another profile's).
// 0, or -1 when one is rejected.
static int validate_trainer_maps(const Scenario *s, Problems *ps, StrList *seen) {
    int bad = 0;
    for (int t = 0; t < s->n_trainers; t++) {
        const TrainerSpec *ts = &s->trainers[t];
        int checked = 0;
        for (int k = 0; ts->map && k < seen->n; k++) checked |= !strcmp(seen->v[k], ts->map);
        if (!ts->map || checked) continue;
        strlist_add(seen, ts->map);
        Str lines = {0};
        char why[1200];
        if (trainer_caps_check_map(ts, &lines, why, sizeof why)) {
            // where its "map" stands: the profile's run.trainers, else the top level's
            char jp[600] = "", tp[400], np[500];
            for (int top = 0; top < 2 && !jp[0]; top++) {
                char base[200];
                if (top) snprintf(base, sizeof base, "run");
                else snprintf(base, sizeof base, "profiles.%s.run", PROFILE_NAMES[s->profile]);
                scenario_member_path(tp, sizeof tp, base, "trainers");
                scenario_member_path(np, sizeof np, tp, ts->name);
                scenario_member_path(jp, sizeof jp, np, "map");
                int line, col;
                if (!top && scenario_pos(s, jp, 0, &line, &col) != 0) jp[0] = '\0';
            }
            for (char *ln = lines.p, *e; ln && *ln; ln = e ? e + 1 : NULL) {   // the probe's lines, as they are
                e = strchr(ln, '\n');
                if (e) *e = '\0';
                if (ln[0]) problems_add(ps, 0, 0, "%s", ln);
            }
            scenario_problem(s, ps, jp, 0, "trainers.%s.map: %s", ts->name, why);
            bad = 1;
        }
        str_free(&lines);
    }
    return bad ? -1 : 0;
}

int cmd_validate(int argc, char **argv) {
    StrList in = {0};
    int prc = cmd_options_parse(&CMD_VALIDATE_OPTIONS, argc, argv, apply_validate_option, NULL, &in);
    if (prc != CMD_GO_ON) return prc;
    StrList files = {0};
    if (cmd_collect_scenarios(&files, in.v, in.n)) return HARNESS_EXIT_USAGE;
    if (files.n == 0) {
        cmd_log("validate", LOG_ERROR, "no scenario files in %s", in.n ? in.v[0] : harness_path("scenarios"));
        return HARNESS_EXIT_USAGE;
    }
    int bad = 0;
    for (int i = 0; i < files.n; i++) {
        Problems ps = {0};
        Scenario s;
        int counts[PROFILE_COUNT] = {0}, has[PROFILE_COUNT] = {0}, ok = 1;
        StrList maps = {0};
        for (int p = 0; p < PROFILE_COUNT && ok; p++) {
            // the first load validates every profile; then count each profile's cases
            if (scenario_load(&s, files.v[i], p, p == 0, NULL, 0, &ps)) {
                ok = 0;
                break;
            }
            has[p] = s.has_profile[p];
            counts[p] = s.n_cases;
            if (validate_trainer_maps(&s, &ps, &maps)) ok = 0;
            scenario_free(&s);
        }
        strlist_free(&maps);
        if (!ok) {
            char *t = cmd_problems_text(&ps);
            fputs(t, stderr);
            free(t);
            bad++;
        } else {
            printf("ok  %s", files.v[i]);
            for (int p = 0; p < PROFILE_COUNT; p++)
                if (has[p]) printf("  %s: %d case%s", PROFILE_NAMES[p], counts[p], counts[p] == 1 ? "" : "s");
            printf("\n");
        }
        problems_free(&ps);
    }
    if (bad) cmd_log("validate", LOG_ERROR, "%d of %d file%s invalid", bad, files.n, files.n == 1 ? "" : "s");
    return bad ? HARNESS_EXIT_USAGE : HARNESS_EXIT_OK;
}

