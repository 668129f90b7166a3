// harness/main.c — the nsa-harness command line: the table of subcommands (harness/cmd/, one
// file each), `help` and the dispatch.
//
// Exit codes (DESIGN 7): 0 every case passed (or was skipped); 1 a case FAIL,
// HANG or CRASH; 2 usage error, invalid scenario, or a case the trainer could not
// start (ERROR); 125 with --bisect instead of 2 (git bisect run: "skip this
// commit"); 130 interrupted (SIGINT/SIGTERM), which also makes git bisect stop.
#include <stdio.h>
#include <string.h>

#include "harness/cmd/commands.h"
#include "harness/cmd/options.h"
#include "harness/core/home.h"
#include "common/exit_codes.h"
#include "common/log.h"

// ---- help --------------------------------------------------------------------------------

static void usage(FILE *f) {
    fprintf(f,
            "usage: nsa-harness COMMAND [options]\n"
            "\n"
            "Runs declarative NSA training diagnostics (scenarios/*.json, docs/scenarios.md) against\n"
            "nsa-train, or any trainer speaking docs/trainer-protocol.md (run --trainer-cmd, a\n"
            "scenario's run.trainers), one supervised process per rank, and writes a report\n"
            "directory with RESULTS.md, summary.json, junit.xml, env.json and every case's logs\n"
            "and traces.\n"
            "\n"
            "commands:\n"
            "  run [SCENARIO...]      run scenarios (files, or directories of *.json;\n"
            "                         default: %s/scenarios)\n"
            "  list [SCENARIO...]     list scenarios, their families and cases\n"
            "  validate [SCENARIO...] validate scenarios (files, or directories of *.json, as run takes\n"
            "                         them) against the schema, every profile\n"
            "  show REPORT            print a report's verdicts and diagnosis (a folder or its summary.json)\n"
            "  baseline record|show   record golden baselines and performance floors\n"
            "                         (golden/baselines/), or print what one holds\n"
            "  compare A B            two reports side by side; exit 1 when B regressed against A\n"
            "  bisect --good R --bad R  build and test commits to name the first bad one\n"
            "  help [COMMAND]         this text, or a command's options\n"
            "\n"
            "exit codes: 0 all passed (or skipped); 1 a case FAIL/HANG/CRASH; 2 usage error,\n"
            "invalid scenario or a case ERROR (e.g. a full disk); 125 instead of 2 with --bisect;\n"
            "130 interrupted\n",
            harness_home());
}


// ---- the subcommands ----------------------------------------------------------------------------

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);   // the arguments after the name; the exit code
    void (*usage)(FILE *f);              // `nsa-harness help NAME`
} Command;

static const Command COMMANDS[] = {
    {"run", cmd_run, usage_run},
    {"list", cmd_list, usage_list},
    {"validate", cmd_validate, usage_validate},
    {"show", cmd_show, usage_show},
    {"baseline", cmd_baseline, usage_baseline},
    {"compare", cmd_compare, usage_compare},
    {"bisect", cmd_bisect, usage_bisect},
};
#define N_COMMANDS ((int)(sizeof COMMANDS / sizeof COMMANDS[0]))

static const Command *command_find(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(COMMANDS[i].name, name)) return &COMMANDS[i];
    return NULL;
}

// "run, list, validate, show, baseline, compare, bisect"
static const char *command_names(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t used = 0;
        for (int i = 0; i < N_COMMANDS; i++)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%s", i ? ", " : "", COMMANDS[i].name);
    }
    return buf;
}

int main(int argc, char **argv) {
    nsa_log_set_program("nsa-harness");   // every tagged line: "nsa-harness: ...", "nsa-harness run: ..."
    if (argc < 2) {
        usage(stderr);
        return HARNESS_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    char home_err[600];
    if (harness_home_check(home_err, sizeof home_err)) {
        nsa_log(LOG_ERROR, "%s", home_err);
        return HARNESS_EXIT_USAGE;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return HARNESS_EXIT_OK;
    }
    if (!strcmp(cmd, "help")) {
        const char *t = argc > 2 ? argv[2] : "";
        const Command *c = command_find(t);
        if (c) c->usage(stdout);
        else if (!t[0]) usage(stdout);
        else {
            cmd_log("help", LOG_ERROR, "no command '%.80s' (%s)", t, command_names());
            return HARNESS_EXIT_USAGE;
        }
        return HARNESS_EXIT_OK;
    }
    const Command *c = command_find(cmd);
    if (c) return c->run(argc - 2, argv + 2);
    nsa_log(LOG_ERROR, "unknown command '%s' (%s, help)", cmd, command_names());
    return HARNESS_EXIT_USAGE;
}
