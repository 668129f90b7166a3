// common/util.c — see util.h.
#define _GNU_SOURCE   // program_invocation_short_name
#include "common/util.h"

#include <math.h>

#include <errno.h>
#include <fnmatch.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ---- allocation ---------------------------------------------------------------------
// The allocations that go through here are bookkeeping (names, lists, text) with no
// error channel: failing one means the process is already lost. One line naming the
// program ("nsa-harness: out of memory (N bytes)") and abort(), so nsa-train's
// SIGABRT handler dumps the stack and a core can be taken.
static void oom(size_t n) {
    fprintf(stderr, "%s: out of memory (%zu bytes)\n", program_invocation_short_name, n);
    abort();
}
void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}
void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}
void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}
char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = xmalloc(n);
    memcpy(p, s, n);
    return p;
}

// ---- error messages ---------------------------------------------------------------------
void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

// ---- Str ------------------------------------------------------------------------------
static void str_reserve(Str *s, size_t extra) {
    if (s->len + extra + 1 <= s->cap) return;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < s->len + extra + 1) cap *= 2;
    s->p = xrealloc(s->p, cap);
    s->cap = cap;
}
void str_addn(Str *s, const char *text, size_t n) {
    str_reserve(s, n);
    memcpy(s->p + s->len, text, n);
    s->len += n;
    s->p[s->len] = '\0';
}
void str_add(Str *s, const char *text) { str_addn(s, text, strlen(text)); }
void str_vprintf(Str *s, const char *fmt, va_list ap) {
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(NULL, 0, fmt, cp);
    va_end(cp);
    if (n < 0) return;
    str_reserve(s, (size_t)n);
    vsnprintf(s->p + s->len, (size_t)n + 1, fmt, ap);
    s->len += (size_t)n;
}
void str_printf(Str *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    str_vprintf(s, fmt, ap);
    va_end(ap);
}
void str_free(Str *s) {
    free(s->p);
    s->p = NULL;
    s->len = s->cap = 0;
}
const char *str_c(const Str *s) { return s->p ? s->p : ""; }
char *str_take(Str *s) {
    char *p = s->p ? s->p : xstrdup("");
    s->p = NULL;
    s->len = s->cap = 0;
    return p;
}

// ---- files ------------------------------------------------------------------------------
int mkdir_p(const char *dir) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", dir) >= (int)sizeof tmp) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(tmp, 0775) && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(tmp, 0775) && errno != EEXIST) return -1;
    return 0;
}

// What a non-regular file is, for "not a regular file (a FIFO)".
static const char *file_kind(mode_t m) {
    return S_ISDIR(m) ? "a folder" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISFIFO(m) ? "a FIFO or pipe" : S_ISSOCK(m) ? "a socket" : "not a plain file";
}

// "64 MiB", "512 KiB", "100 bytes"
static void fmt_limit(char *out, size_t n, size_t limit) {
    if (limit >= ((size_t)1 << 20) && limit % ((size_t)1 << 20) == 0) snprintf(out, n, "%zu MiB", limit >> 20);
    else if (limit >= 1024 && limit % 1024 == 0) snprintf(out, n, "%zu KiB", limit >> 10);
    else snprintf(out, n, "%zu bytes", limit);
}

// Opened without blocking (a FIFO without a writer would block open() forever), then
// checked: a regular file, or a pipe/FIFO when the caller reads one. -1 with errno and err.
static int open_readable(const char *path, int flags, struct stat *st, char *err, size_t errlen) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        int e = errno;
        set_err(err, errlen, "cannot open: %s", strerror(e));
        errno = e;
        return -1;
    }
    int ok = fstat(fd, st) == 0 && (S_ISREG(st->st_mode) || (S_ISFIFO(st->st_mode) && (flags & READ_PIPE_OK)));
    if (!ok) {
        set_err(err, errlen, "not a regular file (%s)", file_kind(st->st_mode));
        close(fd);
        errno = S_ISDIR(st->st_mode) ? EISDIR : EINVAL;
        return -1;
    }
    // a pipe is then read as any file: it ends when its writer closes it (or it holds the limit)
    if (S_ISFIFO(st->st_mode)) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
}

char *read_file_limited(const char *path, size_t limit, int flags, size_t *len, char *err, size_t errlen) {
    if (!limit) limit = READ_LIMIT_DEFAULT;
    struct stat st;
    int fd = open_readable(path, flags, &st, err, errlen);
    if (fd < 0) return NULL;
    char lim[32];
    fmt_limit(lim, sizeof lim, limit);
    if (S_ISREG(st.st_mode) && (uint64_t)st.st_size > (uint64_t)limit) {   // said before reading it
        set_err(err, errlen, "larger than %s (%lld bytes), the most read from such a file", lim, (long long)st.st_size);
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    Str s = {0};
    char buf[65536];
    for (;;) {
        // one byte past the limit tells "exactly the limit" from "more" (a file that grew, a pipe)
        size_t want = limit + 1 - s.len < sizeof buf ? limit + 1 - s.len : sizeof buf;
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int e = errno;
            set_err(err, errlen, "cannot read: %s", strerror(e));
            close(fd);
            str_free(&s);
            errno = e;
            return NULL;
        }
        if (n == 0) break;
        str_addn(&s, buf, (size_t)n);
        if (s.len > limit) {
            set_err(err, errlen, "larger than %s, the most read from such a file", lim);
            close(fd);
            str_free(&s);
            errno = EFBIG;
            return NULL;
        }
    }
    close(fd);
    if (len) *len = s.len;
    return str_take(&s);
}

char *read_file(const char *path, size_t *len) { return read_file_limited(path, 0, 0, len, NULL, 0); }

char *read_tail(const char *path, size_t max) {
    struct stat st;
    int fd = open_readable(path, 0, &st, NULL, 0);
    if (fd < 0) return NULL;
    off_t size = st.st_size;
    off_t start = size > (off_t)max ? size - (off_t)max : 0;
    char *buf = xmalloc((size_t)(size - start) + 1);
    ssize_t n = pread(fd, buf, (size_t)(size - start), start);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    if (start > 0) {   // begin at a line
        char *nl = strchr(buf, '\n');
        if (nl && nl[1]) memmove(buf, nl + 1, strlen(nl + 1) + 1);
    }
    return buf;
}

int write_file_atomic(const char *path, const char *data, size_t len) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0664);
    if (fd < 0) return -1;
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, data + off, len - off);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            errno = e;
            return -1;
        }
        off += (size_t)w;
    }
    // a full disk can surface only at fsync/close: the old file stays, the torn copy goes
    if (fsync(fd) && errno != EINVAL) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    if (close(fd)) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    if (rename(tmp, path)) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}
int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}
void path_dirname(const char *path, char *out, size_t n) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == path) snprintf(out, n, "/");
    else snprintf(out, n, "%.*s", (int)(slash - path), path);
}
int mkdir_p_parent(const char *path) {
    char dir[4096];
    if (strlen(path) >= sizeof dir) {
        errno = ENAMETOOLONG;
        return -1;
    }
    path_dirname(path, dir, sizeof dir);
    return mkdir_p(dir);
}
const char *path_basename(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}
void path_join(char *out, size_t n, const char *dir, const char *rel) {
    if (rel[0] == '/' || !dir[0] || !strcmp(dir, ".")) snprintf(out, n, "%s", rel);
    else snprintf(out, n, "%s/%s", dir, rel);
}

// ---- clocks ------------------------------------------------------------------------------
uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
double mono_s(void) { return (double)mono_ns() * 1e-9; }
void sleep_s(double s) {
    if (s <= 0) return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}
void utc_iso(char *out, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}
void utc_stamp(char *out, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, n, "%Y%m%dT%H%M%SZ", &tm);
}
void fmt_duration(char *out, size_t n, double s) {
    if (s < 60) snprintf(out, n, "%.1f s", s);
    else if (s < 3600) snprintf(out, n, "%d m %02d s", (int)s / 60, (int)s % 60);
    else snprintf(out, n, "%d h %02d m", (int)s / 3600, ((int)s % 3600) / 60);
}

// ---- escaping -------------------------------------------------------------------------------
void str_add_xml(Str *s, const char *t) {
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        switch (*p) {
        case '&': str_add(s, "&amp;"); break;
        case '<': str_add(s, "&lt;"); break;
        case '>': str_add(s, "&gt;"); break;
        case '"': str_add(s, "&quot;"); break;
        case '\'': str_add(s, "&apos;"); break;
        default:
            // XML 1.0 allows only tab, newline and carriage return below 0x20
            if (*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r') continue;
            str_addn(s, (const char *)p, 1);
        }
    }
}
void str_add_md_cell(Str *s, const char *t) {
    for (const char *p = t; *p; p++) {
        if (*p == '|') str_add(s, "\\|");
        else if (*p == '\n' || *p == '\r') str_add(s, " ");
        else str_addn(s, p, 1);
    }
}
void str_add_json_string(Str *s, const char *t) {
    str_add(s, "\"");
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) {
        if (*p == '"') str_add(s, "\\\"");
        else if (*p == '\\') str_add(s, "\\\\");
        else if (*p == '\n') str_add(s, "\\n");
        else if (*p == '\t') str_add(s, "\\t");
        else if (*p < 0x20) str_printf(s, "\\u%04x", *p);
        else str_addn(s, (const char *)p, 1);
    }
    str_add(s, "\"");
}

// ---- names ----------------------------------------------------------------------------------
void safe_name(char *out, size_t n, const char *name) {
    size_t i = 0;
    for (; name[i] && i + 1 < n; i++) {
        unsigned char c = (unsigned char)name[i];
        out[i] = (c == '/' || c < 0x20 || c == 0x7f) ? '_' : (char)c;
    }
    out[i] = '\0';
    if (!strcmp(out, ".") || !strcmp(out, "..") || !out[0]) snprintf(out, n, "_");
}
int has_glob_meta(const char *p) { return strpbrk(p, "*?[") != NULL; }

int glob_list_match(const char *list, const char *name) {
    if (!list) return 1;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        const size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n > 0) {
            char small[256], *glob = n < sizeof small ? small : xmalloc(n + 1);
            memcpy(glob, p, n);
            glob[n] = 0;
            const int hit = fnmatch(glob, name, 0) == 0;
            if (glob != small) free(glob);
            if (hit) return 1;
        }
        p += n + (e != NULL);
    }
    return 0;
}

// ---- problems -----------------------------------------------------------------------------------
void problems_add(Problems *ps, int line, int col, const char *fmt, ...) {
    if (ps->n == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 16;
        ps->v = xrealloc(ps->v, sizeof(Problem) * (size_t)ps->cap);
    }
    Str s = {0};
    va_list ap;
    va_start(ap, fmt);
    str_vprintf(&s, fmt, ap);
    va_end(ap);
    // a message quotes what it got; a megabyte of it (a scenario's name, say) helps no one
    // and would be echoed into RESULTS.md and junit.xml
    enum { MAX_PROBLEM = 1200 };
    if (s.len > MAX_PROBLEM) {
        size_t cut = MAX_PROBLEM;
        while (cut > 0 && ((unsigned char)s.p[cut] & 0xC0) == 0x80) cut--;   // not inside a UTF-8 character
        Str t = {0};
        str_addn(&t, s.p, cut);
        str_printf(&t, "… (message cut: %zu bytes)", s.len);
        str_free(&s);
        s = t;
    }
    ps->v[ps->n] = (Problem){line, col, ps->n, str_take(&s)};
    ps->n++;
}
static int problem_cmp(const void *a, const void *b) {
    const Problem *x = a, *y = b;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    if (x->col != y->col) return x->col < y->col ? -1 : 1;
    return x->seq - y->seq;
}
void problems_sort(Problems *ps) {
    if (ps->n > 1) qsort(ps->v, (size_t)ps->n, sizeof(Problem), problem_cmp);
}
void problems_free(Problems *ps) {
    for (int i = 0; i < ps->n; i++) free(ps->v[i].text);
    free(ps->v);
    ps->v = NULL;
    ps->n = ps->cap = 0;
}

// ---- shell words ----------------------------------------------------------------------

void shell_join(Str *s, char *const *argv) {
    for (int i = 0; argv[i]; i++) {
        const char *a = argv[i];
        int plain = a[0] != '\0';
        for (const char *p = a; *p && plain; p++)
            plain = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@%", *p) != NULL;
        if (i) str_add(s, " ");
        if (plain) str_add(s, a);
        else {
            str_add(s, "'");
            for (const char *p = a; *p; p++) {
                if (*p == '\'') str_add(s, "'\\''");
                else str_addn(s, p, 1);
            }
            str_add(s, "'");
        }
    }
}

// ---- lists of strings ---------------------------------------------------------------------

void strlist_add(StrList *l, const char *s) {
    l->v = xrealloc(l->v, sizeof(char *) * (size_t)(l->n + 2));
    l->v[l->n++] = xstrdup(s);
    l->v[l->n] = NULL;
}

static int cmp_strp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void strlist_sort(StrList *l) {
    if (l->n > 1) qsort(l->v, (size_t)l->n, sizeof(char *), cmp_strp);
}

void strlist_free(StrList *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

// ---- numbers ------------------------------------------------------------------------------

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double median_d(const double *v, int n) {
    if (n <= 0) return NAN;
    double *t = xmalloc(sizeof(double) * (size_t)n);
    memcpy(t, v, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_double);
    double m = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return m;
}

void fmt_rel_change(char *out, size_t n, double now, double ref) {
    if (!isfinite(now) || !isfinite(ref) || ref == 0) {
        snprintf(out, n, "—");
        return;
    }
    if (now == ref) {
        snprintf(out, n, "±0 %%");
        return;
    }
    const double pct = 100 * (now - ref) / fabs(ref), a = fabs(pct);
    if (a >= 1) snprintf(out, n, "%+.1f %%", pct);
    else if (a >= 1e-6) snprintf(out, n, "%+.*f %%", 1 - (int)floor(log10(a)), pct);
    else snprintf(out, n, "%+.2g %%", pct);
}
