// harness/cmd/options.h — the options of the nsa-harness subcommands: one table per command
// (CmdOptions), from which its command line is parsed (getopt_long's option array is built
// from it) and its `--help` is written. An option is added as a row of its command's table
// (harness/cmd/<command>.c; a row of CMD_OPT_* below where commands share it) and acted on
// in that command's option function, a switch over the ids; nothing else lists the options.
//
// An option is taken only by its full name (--profile; -h and run's -j are the short forms),
// its value as the next word whatever it looks like (--set -x); -jN also takes N. getopt_long's
// abbreviations (--prof), --flag=VALUE, "--" and other words starting with '-' that name no
// row are unknown options: exit 2 naming the word (a command may take them instead, as
// bisect forwards them to run). A missing value is exit 2 naming the option.
#ifndef NSA_HARNESS_CMD_OPTIONS_H
#define NSA_HARNESS_CMD_OPTIONS_H
#include <stdio.h>

#include "common/log.h"

struct option;   // <getopt.h>

// every option's id across the commands: what getopt_long returns for it (a shared row has
// one id wherever it stands)
typedef enum {
    OPT_WORD = 1,   // a plain word (a SCENARIO, a report, ...): the value is the word
    OPT_HELP = 'h',
    OPT_JOBS = 'j',   // run's -j, --jobs
    OPT_PROFILE = 256, OPT_OUT, OPT_FILTER, OPT_CASE, OPT_FAULT, OPT_SET, OPT_TIMEOUT_SCALE, OPT_TRAINER,
    OPT_TRAINER_CMD, OPT_TRAINER_MAP, OPT_BASELINES, OPT_RECORDING, OPT_BISECT, OPT_CASES_PER_GPU, OPT_QUIET,
    OPT_CHECKS, OPT_TENSORS, OPT_REPEAT, OPT_WARMUP, OPT_COMMIT, OPT_PLOTS, OPT_LOSS_TOL, OPT_TIME_TOL,
    OPT_MEM_TOL, OPT_TENSOR_TOL, OPT_GOOD, OPT_BAD, OPT_REPO, OPT_BUILD_JOBS, OPT_VERIFY, OPT_NO_VERIFY,
    OPT_ALLOW_DIRTY, OPT_KEEP_WORKTREES,
} CmdOptId;

typedef struct {
    const char *name;   // the option without "--"; NULL: a row of text that --help prints as it is
    const char *arg;    // the value's name in --help (DIR, N, ...); NULL: the option takes no value
    int id;             // a CmdOptId
    char short_name;    // its one-letter form ('h', 'j'), or 0
    const char *help;   // what it does, one paragraph (--help wraps it); a text row's text.
                        // "<home>" in either stands for the runner's data folder (harness_home())
} CmdOption;

// the rows several commands share
#define CMD_OPT_HELP {"help", NULL, OPT_HELP, 'h', "this text"}
#define CMD_OPT_PROFILE                                                                                     \
    {"profile", "ci|gpu", OPT_PROFILE, 0, "sizes to run (default: gpu when a CUDA device is usable, else ci)"}

typedef struct CmdOptions {
    const char *command;   // as messages name it: "run", "baseline record"
    const char *help_of;   // the command of `nsa-harness help X` that shows the table: "run", "baseline"
    const CmdOption *rows;
    int n_rows;
    const struct CmdOptions *help_from;   // the table whose help --help prints (NULL: this one)
} CmdOptions;

// The tables, for the unit tests and `help` (harness/cmd/<command>.c).
extern const CmdOptions CMD_RUN_OPTIONS, CMD_LIST_OPTIONS, CMD_VALIDATE_OPTIONS, CMD_SHOW_OPTIONS,
    CMD_BASELINE_RECORD_OPTIONS, CMD_BASELINE_SHOW_OPTIONS, CMD_COMPARE_OPTIONS, CMD_BISECT_OPTIONS;
// every table above, then NULL
const CmdOptions *cmd_options_at(int i);

enum { CMD_GO_ON = -1 };   // an option function's "go on"; any other value is the exit code

// What a command does with one option of its table (id; flag: the option as given, "--out"
// or "-j"; value: its value, NULL for a switch) or with a plain word (id OPT_WORD, value the
// word). Returns CMD_GO_ON, or the exit code (its message printed).
typedef int (*CmdOptionFn)(void *ctx, int id, const char *flag, const char *value);
// What a command does with a word starting with '-' that is no option of its table (next:
// the word after it, or NULL): the number of words it took (1 or 2), or 0 for an unknown
// option. NULL: every such word is an unknown option.
typedef int (*CmdUnknownFn)(void *ctx, const char *word, const char *next);

// The arguments in order through getopt_long and the table: --help prints the help to stdout
// (HARNESS_EXIT_OK), an unknown option or a missing value is exit 2 with its message
// ("nsa-harness run: unknown option '--prof' (see nsa-harness help run)"). Returns CMD_GO_ON,
// or the exit code.
int cmd_options_parse(const CmdOptions *t, int argc, char **argv, CmdOptionFn fn, CmdUnknownFn unknown, void *ctx);

// A line of a subcommand on stderr: common/log.h's format with the command after the
// program's name, "nsa-harness run: <message>" (LOG_ERROR, LOG_STATUS), "nsa-harness run:
// warning: <message>" (LOG_WARN), "... note: ..." (LOG_NOTE); one write, a newline added
// unless the message ends with one.
void cmd_log(const char *command, LogLevel level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// the row of an option by its full name (without "--"), or NULL
const CmdOption *cmd_option_find(const CmdOptions *t, const char *name);
// getopt_long's option array of the table, then the zero row (malloc'd)
struct option *cmd_options_getopt(const CmdOptions *t);
// the whole --help text of the table
void cmd_options_help(const CmdOptions *t, FILE *f);

// --help's layout: an option's text starts at column CMD_HELP_INDENT, lines end by CMD_HELP_WIDTH
#define CMD_HELP_INDENT 24
#define CMD_HELP_WIDTH 100
#endif
