// harness/cmd/show.c — `nsa-harness show REPORT`: a report's verdicts, counts and diagnosis.
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
#include "harness/report/report_in.h"
#include "common/exit_codes.h"

static const CmdOption SHOW_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness show REPORT\n"
     "  prints the verdicts, counts and diagnosis of a report (a report folder, or its\n"
     "  summary.json; with RESULTS.md beside it); exits with the code the run exited with, 2\n"
     "  if the report is missing or unreadable or its summary.json is not a report's (`{}`,\n"
     "  another format, a wrongly typed key: named with file:line:col, as compare names it)\n"
     "\n"
     "options:\n"},
    CMD_OPT_HELP,
};
const CmdOptions CMD_SHOW_OPTIONS = {"show", "show", SHOW_ROWS, (int)(sizeof SHOW_ROWS / sizeof SHOW_ROWS[0]), NULL};

void usage_show(FILE *f) { cmd_options_help(&CMD_SHOW_OPTIONS, f); }

static int apply_show_option(void *ctx, int id, const char *flag, const char *v) {
    (void)flag;
    if (id == OPT_WORD) strlist_add(ctx, v);
    return CMD_GO_ON;
}

int cmd_show(int argc, char **argv) {
    StrList args = {0};
    int prc = cmd_options_parse(&CMD_SHOW_OPTIONS, argc, argv, apply_show_option, NULL, &args);
    if (prc != CMD_GO_ON) return prc;
    if (args.n != 1) {
        usage_show(stderr);
        return HARNESS_EXIT_USAGE;
    }
    argv = args.v;
    if (!file_exists(argv[0])) {
        cmd_log("show", LOG_ERROR, "%s: %s", argv[0], strerror(errno));
        return HARNESS_EXIT_USAGE;
    }
    // the loader compare uses: a summary.json that is not a report's is exit 2 naming the
    // file, the place and what is wrong (harness/report/report_in.h)
    ReportIn rin;
    char err[1200];
    if (report_in_load(&rin, argv[0], err, sizeof err)) {
        cmd_log("show", LOG_ERROR, "%s", err);
        report_in_free(&rin);
        return HARNESS_EXIT_USAGE;
    }
    const json_t *sj = rin.root, *git = json_object_get(sj, "git");
#define OR_UNKNOWN(s) ((s) ? (s) : "?")
    printf("report %s — started %s, git %s%s, profile %s%s\n", argv[0], OR_UNKNOWN(report_in_str(sj, "started")),
           OR_UNKNOWN(report_in_str(git, "sha")), json_is_true(json_object_get(git, "dirty")) ? " (dirty)" : "",
           OR_UNKNOWN(report_in_str(sj, "profile")),
           json_is_true(json_object_get(sj, "finished")) ? ""
           : json_is_true(json_object_get(sj, "interrupted")) ? " — INTERRUPTED"
                                                               : " — PARTIAL (run did not finish)");
    const char *full = report_in_str(json_object_get(sj, "disk_full"), "why");
    if (full) printf("DISK FULL: %s; the cases after it did not run\n", full);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(sj, "invalid_scenarios"), i, c)
        printf("  %-6s %s: %s\n", "ERROR", OR_UNKNOWN(report_in_str(c, "file")),
               OR_UNKNOWN(json_string_value(json_array_get(json_object_get(c, "problems"), 0))));
    json_array_foreach(rin.cases, i, c) {
        const json_t *v = json_object_get(c, "verdict");
        printf("  %-6s %s/%s: %s\n", json_is_string(v) ? json_string_value(v) : "-", report_in_str(c, "scenario"),
               report_in_str(c, "case"), report_in_str(c, "summary") ? report_in_str(c, "summary") : "");
    }
#undef OR_UNKNOWN
    const json_t *counts = json_object_get(sj, "counts");
    const char *k;
    json_t *v;
    printf("counts:");
    json_object_foreach((json_t *)counts, k, v) if (json_integer_value(v)) printf(" %s %lld", k, (long long)json_integer_value(v));
    printf("\n");
    char p[4300];
    snprintf(p, sizeof p, "%s/RESULTS.md", rin.dir);
    char *md = read_file(p, NULL);
    if (md) {
        char *d = strstr(md, "\n## Diagnosis\n");
        if (d) {
            char *end = strstr(d + 14, "\n## ");
            if (end) *end = '\0';
            printf("%s\n", d + 1);
        }
        free(md);
    }
    const json_t *ec = json_object_get(sj, "exit_code");
    int rc = json_is_integer(ec) ? (int)json_integer_value(ec) : HARNESS_EXIT_OK;
    report_in_free(&rin);
    return rc;
}

