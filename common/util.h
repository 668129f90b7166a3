// common/util.h — small host utilities shared by the runner and the trainer: a growable
// string, allocation that aborts on OOM, error messages into char *err, files and
// directories, clocks and sleep, escaping for Markdown/XML/JSON, string lists, and a
// list of problems that sort by file position (the scenario loader reports every problem
// it finds). Each helper exists here once: neither program keeps a private copy.
#ifndef NSA_COMMON_UTIL_H
#define NSA_COMMON_UTIL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

// ---- growable string ----------------------------------------------------------
typedef struct {
    char *p;      // NUL-terminated once anything was added ("" never NULL after str_add)
    size_t len;   // bytes, excluding the NUL
    size_t cap;
} Str;

void str_add(Str *s, const char *text);
void str_addn(Str *s, const char *text, size_t n);
void str_printf(Str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void str_vprintf(Str *s, const char *fmt, va_list ap);
void str_free(Str *s);
// the contents, "" when empty (never NULL)
const char *str_c(const Str *s);
// hands the buffer to the caller (free()), leaving s empty
char *str_take(Str *s);

// ---- allocation: abort() on OOM after "<program>: out of memory (N bytes)" on stderr ----
char *xstrdup(const char *s);                 // aborts on OOM (as do all allocations here)
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);

// ---- error messages -----------------------------------------------------------------------
// A formatted message into the caller's err[errlen] (the convention of every
// `char *err, size_t errlen` parameter); nothing when err is NULL or errlen 0.
void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- files and directories --------------------------------------------------------
int mkdir_p(const char *dir);                 // 0 or -1 (errno)
// mkdir -p of the directory part of a file's path, before creating the file ("."
// when it has none: nothing to do); 0 or -1 (errno; ENAMETOOLONG past 4095 bytes)
int mkdir_p_parent(const char *path);
// ---- reading files: every reader has a limit and reads only what a file can be ----------
// The most a reader takes unless told otherwise: nothing either program reads (scenarios,
// configs, reports, baselines, a trainer's logs and metrics) comes near it.
#define READ_LIMIT_DEFAULT ((size_t)64 << 20)   // 64 MiB
enum { READ_PIPE_OK = 1 };   // flag: a pipe or FIFO is read too (nsa-train --config <(generate))
// The whole file, NUL-terminated, *len its length when len is non-NULL. Reads at most
// `limit` bytes (0: READ_LIMIT_DEFAULT) and only a regular file (with READ_PIPE_OK also a
// pipe or FIFO): a folder, a device (/dev/zero, /dev/urandom), a socket, or a FIFO
// without READ_PIPE_OK is refused before any read, so no input makes it hang or grow
// without bound. NULL on error, with errno set (EFBIG: over the limit; EISDIR: a folder;
// EINVAL: another non-regular file; else open's or read's) and what went wrong, without the path, in
// err[errlen] ("cannot open: No such file or directory", "not a regular file (a FIFO)",
// "larger than 64 MiB, the most read from such a file"); the caller names the file.
char *read_file_limited(const char *path, size_t limit, int flags, size_t *len, char *err, size_t errlen);
// read_file_limited(path, 0, 0, len, NULL, 0): a regular file of at most 64 MiB
char *read_file(const char *path, size_t *len);
// the last `max` bytes of a regular file (from a line start when possible); NULL if
// unreadable or not a regular file
char *read_tail(const char *path, size_t max);
// write via PATH.tmp + rename, so a reader never sees half a file; 0 or -1
int write_file_atomic(const char *path, const char *data, size_t len);
int file_exists(const char *path);
int is_dir(const char *path);
// directory part of a path ("." when none), into out
void path_dirname(const char *path, char *out, size_t n);
const char *path_basename(const char *path);   // strrchr only: async-signal-safe (stackdump)
// join a relative `rel` to directory `dir` (absolute rel is copied unchanged)
void path_join(char *out, size_t n, const char *dir, const char *rel);

// ---- clocks -------------------------------------------------------------------------
// mono_ns is one clock_gettime(CLOCK_MONOTONIC) call and nothing else, so it is
// async-signal-safe (trainer/stackdump.c calls it from a signal handler): keep it so.
double mono_s(void);                          // CLOCK_MONOTONIC seconds
uint64_t mono_ns(void);                       // CLOCK_MONOTONIC nanoseconds
// one nanosleep of s seconds (nothing when s <= 0); a signal may end it early, so
// callers poll a deadline against mono_s
void sleep_s(double s);
void utc_iso(char *out, size_t n);            // 2026-11-23T14:02:11Z
void utc_stamp(char *out, size_t n);          // 20261123T140211Z (for directory names)
void fmt_duration(char *out, size_t n, double s);   // "8.2 s", "1 m 12 s"

// ---- escaping -------------------------------------------------------------------------
void str_add_xml(Str *s, const char *text);   // & < > " ' escaped, invalid control bytes dropped
void str_add_md_cell(Str *s, const char *text);   // | escaped, newlines -> space
void str_add_json_string(Str *s, const char *text);   // with quotes

// ---- numbers ------------------------------------------------------------------------------
// the median of v[0..n) (v is not changed); NAN when n == 0
double median_d(const double *v, int n);
// The relative change of now against ref, in percent, with the digits that show it: one
// decimal from 1 % up ("+12.3 %", "-50.0 %"), two significant digits below ("-0.047 %",
// "+0.0012 %", "+1.2e-09 %"), "±0 %" when equal, "—" when ref is 0 or either is not finite.
void fmt_rel_change(char *out, size_t n, double now, double ref);

// ---- lists of strings ---------------------------------------------------------------------
typedef struct {
    char **v;     // NULL-terminated once anything was added (an argv)
    int n;
} StrList;
void strlist_add(StrList *l, const char *s);   // a copy
void strlist_sort(StrList *l);                 // strcmp order
void strlist_free(StrList *l);

// ---- shell words ------------------------------------------------------------------------
// argv (NULL-terminated) appended as one shell-quoted command line: words of
// [A-Za-z0-9_-./=:,+@%] as they are, others in single quotes (for logs, reproduce
// and record commands a user can paste)
void shell_join(Str *s, char *const *argv);

// ---- names ------------------------------------------------------------------------------
// a file-system-safe copy of a case name: '/' and control bytes become '_'
void safe_name(char *out, size_t n, const char *name);
int has_glob_meta(const char *pattern);
// name matches one of the comma-separated fnmatch globs of list (NULL list: every name does)
int glob_list_match(const char *list, const char *name);

// ---- problems (sorted by line, then column, then order of discovery) --------------------
typedef struct {
    int line, col, seq;
    char *text;   // "file:line:col: message"
} Problem;
typedef struct {
    Problem *v;
    int n, cap;
} Problems;
void problems_add(Problems *ps, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void problems_sort(Problems *ps);
void problems_free(Problems *ps);
#endif
