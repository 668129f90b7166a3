// harness/cmd/commands.h — the nsa-harness subcommands that live in files of their own
// (main.c keeps run, list, validate, show and dispatches). Each takes the
// arguments after its name and returns the process exit code.
#ifndef NSA_HARNESS_COMMANDS_H
#define NSA_HARNESS_COMMANDS_H
#include <stdio.h>

// nsa-harness run [SCENARIO...] [options] (harness/main.c)
int cmd_run(int argc, char **argv);
// nsa-harness baseline record|show ... (harness/cmd/baseline.c)
int cmd_baseline(int argc, char **argv);
void usage_baseline(FILE *f);
// nsa-harness compare A B [--out FILE] (harness/cmd/compare.c)
int cmd_compare(int argc, char **argv);
void usage_compare(FILE *f);
// nsa-harness bisect --good REV --bad REV [run options] (harness/cmd/bisect.c)
int cmd_bisect(int argc, char **argv);
void usage_bisect(FILE *f);
#endif
