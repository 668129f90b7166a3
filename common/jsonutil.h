// common/jsonutil.h — small Jansson helpers shared by the trainer and the runner.
#ifndef NSA_COMMON_JSONUTIL_H
#define NSA_COMMON_JSONUTIL_H
#include <jansson.h>

// A double as JSON: a finite value as a number, a non-finite one as the string
// "nan", "inf" or "-inf" (JSON has no non-finite numbers, and a reader should see
// which one it was rather than a null). A new reference (NULL only on OOM).
json_t *json_real_or_name(double v);

// A value as a person writes it: a string as its string (unquoted), anything else as its
// compact JSON text (3, true, [1,2]); "?" when it cannot be written. Into out.
void json_value_text(const json_t *v, char *out, size_t n);
// json_load_file's contract (flags, and je filled on failure: line and column -1 when
// the file could not be read), the file read through common/util's read_file_limited:
// a regular file of at most 64 MiB, so a FIFO, a device or a huge file is an error
// ("not a regular file (a FIFO or pipe)", "larger than 64 MiB, ...") and never a hang.
json_t *json_load_path(const char *path, size_t flags, json_error_t *je);
#endif
