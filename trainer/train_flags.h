// trainer/train_flags.h — nsa-train's flags: one table, from which the command line is
// parsed (getopt_long's option array is built from it) and `--help` is written. A flag
// is added here (its id, its row with the text --help shows) and acted on in
// trainer/train_main.c (apply_flag, a switch over every id: the build fails on one left
// out); nothing else lists the flags.
//
// A flag is taken only by its full name, its value as the next word: getopt_long's
// abbreviations (--conf) and --flag=VALUE are unknown options (train_flag_word says so
// before getopt_long sees the word).
#ifndef NSA_TRAINER_TRAIN_FLAGS_H
#define NSA_TRAINER_TRAIN_FLAGS_H
#include <stdio.h>

struct option;   // <getopt.h>

typedef enum {
    FLAG_HELP = 'h',   // also -h, the only short form
    FLAG_CONFIG = 256, FLAG_SET, FLAG_STEPS, FLAG_BACKEND, FLAG_OUT, FLAG_SAVE, FLAG_SAVE_EVERY, FLAG_RESUME,
    FLAG_INIT_WEIGHTS, FLAG_WRITE_INIT, FLAG_ALLOW_CONFIG_CHANGE, FLAG_STOP_AFTER, FLAG_DUMP_STEP, FLAG_DUMP_ACTS,
    FLAG_DUMP_TENSORS, FLAG_THREADS, FLAG_CHECK_CONFIG, FLAG_DEVICES, FLAG_QUIET, FLAG_LOG_FILE,
    FLAG_TRANSPORT, FLAG_BOOTSTRAP, FLAG_RDZV_TIMEOUT, FLAG_CHECK_WORLD, FLAG_COMM_TIMEOUT,
    FLAG_RANK, FLAG_TRACE_GRADS, FLAG_GATE_STATS, FLAG_FLIGHT_RECORDER, FLAG_SHOW_FLIGHT_RECORDER, FLAG_STACK_FILE,
    FLAG_FAULT, FLAG_LIST_FAULTS, FLAG_PRINT_ENV, FLAG_PROTOCOL_INFO,
} TrainFlagId;

typedef struct {
    const char *name;   // the flag without "--"; NULL: a row of text that --help prints as it is
    const char *arg;    // the value's name in --help (FILE, N, ...); NULL: the flag takes no value
    int id;             // a TrainFlagId: what getopt_long returns for the flag
    const char *help;   // what it does, one paragraph (--help wraps it); a text row's text
} TrainFlag;

extern const TrainFlag TRAIN_FLAGS[];
extern const int TRAIN_N_FLAGS;   // rows, text rows included

// --help's layout: the value starts at column TRAIN_HELP_INDENT, lines end by TRAIN_HELP_WIDTH
#define TRAIN_HELP_INDENT 23
#define TRAIN_HELP_WIDTH 110

// the row of a flag by its full name (without "--"), or NULL
const TrainFlag *train_flag_find(const char *name);
// getopt_long's option array: every flag of the table, then the zero row (static storage)
const struct option *train_flags_getopt(void);
// the optstring that goes with it: flags and plain words in order, ':' for a missing value
#define TRAIN_FLAGS_OPTSTRING "-:h"
// Whether `word`, the next word of the command line, may go to getopt_long: a word not
// starting with '-' (getopt_long returns it as a plain word), "-h", or "--" followed by
// the full name of a flag. 0 for anything else ("--", "-", "-x", "--conf", "--steps=3").
int train_flag_word_ok(const char *word);
// the whole --help text
void train_flags_help(FILE *f);
#endif
