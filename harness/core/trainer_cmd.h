// harness/core/trainer_cmd.h — which trainer runs a case (docs/trainer-protocol.md "Choosing the
// trainer"): the run's default (the nsa-train beside nsa-harness, `--trainer PATH`, or
// `--trainer-cmd "CMD"`), or one a scenario names in run.trainers.
//
// A trainer given as a command (--trainer-cmd, run.trainers) speaks protocol 2's form of the
// command line: `CMD... --config CASE/config.json --out CASE --rank R ...`, the config
// resolved by the runner and no --set. A trainer given by path keeps version 1's
// `--config FILE --set K=V...`.
#ifndef NSA_HARNESS_TRAINER_CMD_H
#define NSA_HARNESS_TRAINER_CMD_H
#include <stddef.h>

#include "common/util.h"

typedef struct {
    char name[64];    // "nsa-train" (the run's default) or the scenario's name for it
    StrList words;    // the command, NULL-terminated (words.v)
    int is_cmd;       // 1: a command (resolved config file, no --set); 0: a path (--config FILE --set ...)
    char *display;    // the command as a shell line: reports, and the key its handshake is cached by
    char *map;        // a trainer given by a trainer map: the map's absolute path (else NULL)
} TrainerSpec;

// Split `text` into words as a shell would, without expanding anything: blanks separate
// words; '...' quotes literally; "..." quotes with \" \\ \$ \` escaped; a backslash outside
// quotes escapes the next character. 0, or -1 with err ("unterminated \" quote at byte N").
int trainer_split_words(const char *text, StrList *out, char *err, size_t errlen);

// A word that names a path relative to a folder is made absolute: it contains '/', starts
// with neither '/' nor '-', has no '=', and (must_exist) names an existing path there.
void trainer_absolutize(StrList *words, const char *base_dir, int must_exist);

// Fill spec from words (copied): display from shell_join.
void trainer_spec_init(TrainerSpec *t, const char *name, char *const *words, int is_cmd);
void trainer_spec_free(TrainerSpec *t);

// A trainer map's path (relative to base_dir, "" or "." for the current folder) made absolute,
// without "dir/../", into out. 0, or -1 when it names no file (a folder is none).
int trainer_map_path(const char *base_dir, const char *path, char *out, size_t n);
// The probe that runs a map's trainer: $NSA_PROBE when set, else <source root>/probe/nsa-probe.
const char *trainer_probe_path(void);
// A trainer given by a trainer map: the command [PROBE, --map, abs_map] (is_cmd), t->map set.
void trainer_spec_init_map(TrainerSpec *t, const char *name, const char *abs_map);
// How messages name the trainer: the map's file name for the run's default given by a map
// (its name is "nsa-train", the scenarios' word for the default), else its name.
const char *trainer_spec_label(const TrainerSpec *t);
// A copy of t's words followed by extra (NULL-terminated), into out (appended).
void trainer_spec_argv(const TrainerSpec *t, StrList *out);
#endif
