// trainer/jsonl.h — append one JSON record as a line to a JSONL file.
#ifndef NSA_TRAINER_JSONL_H
#define NSA_TRAINER_JSONL_H

// Write js and a newline with ONE write(2) on fd, which the caller opened with
// O_APPEND: then records from several ranks appending to the same file never
// interleave. A short write is reported on stderr naming `what` (the file).
// No-op when fd < 0 or js is NULL.
void jsonl_write(int fd, const char *js, const char *what);
#endif
