// harness/cmd/commands.h — the nsa-harness subcommands, one file of harness/cmd/ each
// (harness/main.c is their table). Each takes the arguments after its name and returns
// the process exit code; usage_X prints its options (`nsa-harness help X`), from the table
// of its options (harness/cmd/options.h).
#ifndef NSA_HARNESS_COMMANDS_H
#define NSA_HARNESS_COMMANDS_H
#include <stdio.h>

// nsa-harness run [SCENARIO...] [options] (harness/cmd/run.c)
int cmd_run(int argc, char **argv);
void usage_run(FILE *f);
// nsa-harness list [SCENARIO...] (harness/cmd/list.c)
int cmd_list(int argc, char **argv);
void usage_list(FILE *f);
// nsa-harness validate [SCENARIO...] (harness/cmd/validate.c)
int cmd_validate(int argc, char **argv);
void usage_validate(FILE *f);
// nsa-harness show REPORT (harness/cmd/show.c)
int cmd_show(int argc, char **argv);
void usage_show(FILE *f);
// nsa-harness baseline record|show ... (harness/cmd/baseline.c)
int cmd_baseline(int argc, char **argv);
void usage_baseline(FILE *f);
// nsa-harness compare A B [--out FILE] (harness/cmd/compare.c)
int cmd_compare(int argc, char **argv);
void usage_compare(FILE *f);
// nsa-harness bisect --good REV --bad REV [run options] (harness/cmd/bisect.c)
int cmd_bisect(int argc, char **argv);
void usage_bisect(FILE *f);

// ---- what they share (harness/cmd/scenario_args.c) ----------------------------------------------
#include "harness/core/scenario.h"
// The scenario files of the arguments: files as given; directories expand to their *.json
// files, sorted (not recursive); none: the scenarios folder of the runner's home. 0 or -1.
int cmd_collect_scenarios(StrList *out, char **args, int n);
// --profile's value: PROFILE_CI or PROFILE_GPU, or -1.
int cmd_parse_profile(const char *v);
// The problems, sorted by position, one per line (malloc'd).
char *cmd_problems_text(Problems *ps);
// A command's first line of output, trailing blanks cut (malloc'd), or NULL: it failed or said nothing.
char *cmd_first_line(char *const argv[]);
// `git -C <the runner's home> ARGS...`'s first line of output (malloc'd), or NULL — also when the
// home is not the top of its own git work tree: a source tree copied without its .git into some
// other repository's folder must not report that repository's commit.
char *cmd_source_git(const char *const *args);
#endif
