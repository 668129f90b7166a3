// trainer/jsonl.h — append one JSON record as a line to a JSONL file.
#ifndef NSA_TRAINER_JSONL_H
#define NSA_TRAINER_JSONL_H

// Write js and a newline with ONE write(2) on fd, which the caller opened with
// O_APPEND: then records from several ranks appending to the same file never
// interleave. A failed or short write (disk full, I/O error) is an artifact
// failure: it is recorded with io_error(path, errno) (trainer/ioerr.h: the
// [IO-ERROR] line, the run ends with exit 6) and -1 is returned. A short write is
// completed by further writes first, so that the errno is the real cause.
// Returns 0; no-op (0) when fd < 0 or js is NULL. `path` is the file's path.
int jsonl_write(int fd, const char *js, const char *path);
#endif
