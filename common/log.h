// common/log.h — the tagged lines a program writes to stderr, in one format:
//
//   LOG_ERROR    "<program>: <message>"            (what failed; the exit code follows)
//   LOG_STATUS   "<program>: <message>"            (progress and state worth a line on stderr)
//   LOG_WARN     "<program>: warning: <message>"   (the run goes on, but probably not as meant)
//   LOG_NOTE     "<program>: note: <message>"      (the run goes on as meant; something to know)
//
// The program's name is set once at start (nsa_log_set_program("nsa-train")); until then it
// is the executable's name. Each line is written with one write to stderr, so lines of
// several threads, or of ranks sharing a --log-file, do not interleave. A newline is added
// unless the message ends with one (a message of several lines: the first carries the tag).
// errno is unchanged by a call. Lines that belong to a protocol of their own ([IO-ERROR],
// [COMM-TIMEOUT], [DDP], ... that the runner parses) are not written through here.
#ifndef NSA_COMMON_LOG_H
#define NSA_COMMON_LOG_H
#include <stdarg.h>

typedef enum { LOG_ERROR, LOG_STATUS, LOG_WARN, LOG_NOTE } LogLevel;

// the name every line starts with (copied; at most 63 bytes are kept)
void nsa_log_set_program(const char *name);
const char *nsa_log_program(void);

void nsa_log(LogLevel level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void nsa_vlog(LogLevel level, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
#endif
