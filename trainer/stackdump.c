// trainer/stackdump.c — stack dumps from a signal handler (see stackdump.h).
//
// Everything the handler does is async-signal-safe, because it may interrupt
// the main thread anywhere (inside malloc, inside stdio, holding a lock):
//   * backtrace() (<execinfo.h>): called once at install time so that libgcc's
//     unwinder is already loaded (its first call may malloc); afterwards it only
//     walks the stack, through the kernel's signal frame, using the .eh_frame CFI.
//   * /proc/self/maps is read with open/read and parsed by hand to map every
//     return address to its module (executable or shared library) and its
//     module-relative address (PIE and shared objects are ET_DYN: address minus
//     the module's load base; an ET_EXEC executable keeps absolute addresses).
//   * symbolization runs in a child: vfork + execve of
//       addr2line -f -C -i -p -a -e MODULE ADDR...
//     (path resolved at install time from $PATH, or $NSA_ADDR2LINE), its output
//     read through a pipe with poll() and a deadline, the child killed if it
//     overruns, waitpid. addr2line reads the DWARF of the RelWithDebInfo build,
//     so static functions and inlined frames get their names and file:line.
//     Return addresses point after the call: we pass address-1 so the line is
//     the call's line; the interrupted frame's exact PC (from the ucontext) is
//     passed as is.
//   * no addr2line: backtrace_symbols_fd() (exported symbols only, no lines).
//   * output through a fixed buffer and write(2); the time is formatted by hand.
#define _GNU_SOURCE   // REG_RIP in ucontext, vfork, syscall, gettid/tgkill numbers
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"   // mono_ns (one clock_gettime call), path_basename: async-signal-safe
#include "trainer/flightrec.h"
#include "trainer/stackdump.h"

#define SD_MAX_FRAMES 64
#define SD_MAX_MODS 48
#define SD_SYMBOLIZE_BUDGET_MS 10000   // all addr2line runs of one dump together
#define SD_EVENTS 32                   // flight-recorder events printed
#define SD_PEER_WAIT_MS 1500           // a stall dump's wait for the other ranks' dumps

static char g_path[1024];      // stack file, "" = stderr
static int g_rank;
static pid_t g_main_tid;
static char g_addr2line[1024]; // "" = not available
static volatile sig_atomic_t g_in_dump;
static char **g_peer_paths;    // the other ranks' stack files (stackdump_set_peers)
static off_t *g_peer_base;     // each one's size then: only a dump written past it counts
static volatile sig_atomic_t g_npeers;
static const int SIGNALS[] = {SIGUSR1, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
#define N_SIGNALS ((int)(sizeof SIGNALS / sizeof SIGNALS[0]))

static pid_t my_tid(void) { return (pid_t)syscall(SYS_gettid); }

// ---- async-signal-safe output ----------------------------------------------------------

typedef struct { int fd; int n; char buf[8192]; } Out;
static Out g_out;

static void out_flush(Out *o) {
    int off = 0;
    while (off < o->n) {
        ssize_t k = write(o->fd, o->buf + off, (size_t)(o->n - off));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        off += (int)k;
    }
    o->n = 0;
}
static void out_mem(Out *o, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (o->n == (int)sizeof o->buf) out_flush(o);
        o->buf[o->n++] = s[i];
    }
}
static void out_str(Out *o, const char *s) { out_mem(o, s, strlen(s)); }
static void out_u64_w(Out *o, uint64_t v, int width) {   // zero-padded to width
    char t[24];
    int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n < width) t[n++] = '0';
    while (n) out_mem(o, &t[--n], 1);
}
static void out_i64(Out *o, int64_t v) {
    if (v < 0) { out_str(o, "-"); out_u64_w(o, (uint64_t)(-(v + 1)) + 1, 0); }
    else out_u64_w(o, (uint64_t)v, 0);
}
static void out_hex(Out *o, uint64_t v) {
    char t[18];
    int n = 0;
    do { t[n++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    out_str(o, "0x");
    while (n) out_mem(o, &t[--n], 1);
}
// seconds with 6 decimals from nanoseconds
static void out_secs(Out *o, int64_t ns) {
    if (ns < 0) { out_str(o, "-"); ns = -ns; }
    out_u64_w(o, (uint64_t)(ns / 1000000000), 0);
    out_str(o, ".");
    out_u64_w(o, (uint64_t)(ns % 1000000000) / 1000, 6);
}

// UTC calendar date from days since 1970-01-01 (H. Hinnant's civil_from_days).
static void civil_from_days(int64_t z, int64_t *y, unsigned *mo, unsigned *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *mo = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*mo <= 2);
}
static void out_utc_now(Out *o) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t days = ts.tv_sec / 86400, sod = ts.tv_sec % 86400;
    int64_t y;
    unsigned mo, d;
    civil_from_days(days, &y, &mo, &d);
    out_i64(o, y); out_str(o, "-"); out_u64_w(o, mo, 2); out_str(o, "-"); out_u64_w(o, d, 2);
    out_str(o, "T"); out_u64_w(o, (uint64_t)(sod / 3600), 2); out_str(o, ":");
    out_u64_w(o, (uint64_t)(sod / 60 % 60), 2); out_str(o, ":"); out_u64_w(o, (uint64_t)(sod % 60), 2);
    out_str(o, "."); out_u64_w(o, (uint64_t)ts.tv_nsec / 1000000, 3); out_str(o, "Z");
}

static const char *sig_name(int sig) {
    switch (sig) {
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    case SIGABRT: return "SIGABRT";
    default: return "signal";
    }
}

// ---- frames -> modules (/proc/self/maps) --------------------------------------------------

typedef struct {
    char path[512];
    uintptr_t base;   // load base: address of file offset 0
    int is_exec;      // ET_EXEC: addr2line wants absolute addresses
    int symbolizable; // a file we can hand to addr2line
} Module;

typedef struct {
    uintptr_t addr;   // as backtrace() gave it
    int mod;          // index into g_mods, -1 unknown / anonymous
    int exact;        // 1: the interrupted instruction itself (not a return address)
} Frame;

static void *g_raw[SD_MAX_FRAMES];
static Frame g_frames[SD_MAX_FRAMES];
static Module g_mods[SD_MAX_MODS];
static int g_nmods;
static char g_maps_chunk[4096];
static char g_line[1536];

static uintptr_t parse_hex(const char **p) {
    uintptr_t v = 0;
    for (;; (*p)++) {
        char c = **p;
        if (c >= '0' && c <= '9') v = v * 16 + (uintptr_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v = v * 16 + (uintptr_t)(c - 'a' + 10);
        else return v;
    }
}

static int elf_is_exec(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    unsigned char h[18];
    ssize_t k = read(fd, h, sizeof h);
    close(fd);
    if (k != (ssize_t)sizeof h || h[0] != 0x7f || h[1] != 'E' || h[2] != 'L' || h[3] != 'F') return 0;
    return (h[16] | h[17] << 8) == 2;   // e_type ET_EXEC (little-endian hosts)
}

// one /proc/self/maps line: "start-end perms offset dev inode   path"
static void maps_line(const char *ln, int nframes, char *last_path, uintptr_t *last_base) {
    const char *p = ln;
    uintptr_t start = parse_hex(&p);
    if (*p++ != '-') return;
    uintptr_t end = parse_hex(&p);
    for (int field = 0; field < 1; field++) { while (*p == ' ') p++; while (*p && *p != ' ') p++; }   // perms
    while (*p == ' ') p++;
    uintptr_t off = parse_hex(&p);
    for (int field = 0; field < 2; field++) { while (*p == ' ') p++; while (*p && *p != ' ') p++; }   // dev, inode
    while (*p == ' ') p++;
    const char *path = p;
    if (*path && strcmp(path, last_path)) {   // first mapping of a new file: its load base
        size_t n = strlen(path);
        if (n >= 512) n = 511;
        memcpy(last_path, path, n);
        last_path[n] = 0;
        *last_base = start - off;
    }
    for (int i = 0; i < nframes; i++) {
        Frame *f = &g_frames[i];
        if (f->mod != -1 || f->addr < start || f->addr >= end) continue;
        if (!*path) { f->mod = -2; continue; }   // anonymous memory (JIT code)
        int m = -1;
        for (int j = 0; j < g_nmods; j++) if (!strcmp(g_mods[j].path, last_path)) m = j;
        if (m < 0 && g_nmods < SD_MAX_MODS) {
            m = g_nmods++;
            Module *md = &g_mods[m];
            memcpy(md->path, last_path, sizeof md->path);
            md->base = *last_base;
            md->symbolizable = path[0] == '/';
            md->is_exec = md->symbolizable && elf_is_exec(md->path);
        }
        f->mod = m < 0 ? -2 : m;
    }
}

static void map_frames(int nframes) {
    g_nmods = 0;
    for (int i = 0; i < nframes; i++) g_frames[i].mod = -1;
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    static char last_path[512];
    last_path[0] = 0;
    uintptr_t last_base = 0;
    int ll = 0;
    for (;;) {
        ssize_t k = read(fd, g_maps_chunk, sizeof g_maps_chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        for (ssize_t i = 0; i < k; i++) {
            char c = g_maps_chunk[i];
            if (c == '\n') {
                g_line[ll] = 0;
                maps_line(g_line, nframes, last_path, &last_base);
                ll = 0;
            } else if (ll < (int)sizeof g_line - 1) {
                g_line[ll++] = c;
            }
        }
    }
    close(fd);
}

static uintptr_t frame_rel(const Frame *f) {
    if (f->mod < 0) return f->addr;
    const Module *m = &g_mods[f->mod];
    return m->is_exec ? f->addr : f->addr - m->base;
}

// ---- symbolization (addr2line in a child) ------------------------------------------------

static char g_argbuf[SD_MAX_FRAMES][24];
static char *g_argv[SD_MAX_FRAMES + 16];
static char g_sym[65536];
static char *g_envp[] = {"LC_ALL=C", NULL};


static void hex_arg(char *dst, uintptr_t v) {
    char t[20];
    int n = 0;
    do { t[n++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    dst[0] = '0'; dst[1] = 'x';
    int j = 2;
    while (n) dst[j++] = t[--n];
    dst[j] = 0;
}

// Run addr2line on frames [i0, i1) (all in one module); print its answer, one
// "#i" line per frame. Returns the number of frames it printed.
static int symbolize_run(Out *o, int i0, int i1, int64_t deadline) {
    const Module *m = &g_mods[g_frames[i0].mod];
    int a = 0;
    g_argv[a++] = g_addr2line;
    g_argv[a++] = "-f"; g_argv[a++] = "-C"; g_argv[a++] = "-i"; g_argv[a++] = "-p"; g_argv[a++] = "-a";
    g_argv[a++] = "-e";
    g_argv[a++] = (char *)m->path;
    for (int i = i0; i < i1; i++) {
        uintptr_t rel = frame_rel(&g_frames[i]);
        hex_arg(g_argbuf[i], g_frames[i].exact ? rel : rel - 1);   // return address -> the call
        g_argv[a++] = g_argbuf[i];
    }
    g_argv[a] = NULL;
    int pfd[2];
    if (pipe(pfd)) return 0;
    pid_t pid = vfork();
    if (pid == 0) {
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        close(pfd[0]);
        close(pfd[1]);
        execve(g_addr2line, g_argv, g_envp);
        _exit(127);
    }
    close(pfd[1]);
    if (pid < 0) { close(pfd[0]); return 0; }
    int len = 0, killed = 0;
    for (;;) {
        int64_t left = deadline - (int64_t)(mono_ns() / 1000000);
        if (left <= 0) { kill(pid, SIGKILL); killed = 1; break; }
        struct pollfd pf = {pfd[0], POLLIN, 0};
        int r = poll(&pf, 1, (int)left);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) continue;   // timeout: caught by the deadline test
        char *dst = len < (int)sizeof g_sym - 1 ? g_sym + len : g_maps_chunk;   // overflow: drain and discard
        size_t cap = len < (int)sizeof g_sym - 1 ? sizeof g_sym - 1 - (size_t)len : sizeof g_maps_chunk;
        ssize_t k = read(pfd[0], dst, cap);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (dst != g_maps_chunk) len += (int)k;
    }
    close(pfd[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    g_sym[len] = 0;
    // one block per address: "0x...: func at file:line" + " (inlined by) ..." lines
    int k = -1;
    char *line = g_sym;
    while (*line) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (line[0] == '0' && line[1] == 'x' && k + 1 < i1 - i0) {
            k++;
            char *body = strstr(line, ": ");
            out_str(o, "  #");
            out_i64(o, i0 + k);
            out_str(o, "  ");
            out_str(o, body ? body + 2 : line);
            out_str(o, "  [");
            out_str(o, path_basename(m->path));   // strrchr: async-signal-safe
            out_str(o, "]\n");
        } else if (line[0]) {
            out_str(o, k >= 0 ? "        " : "  (addr2line) ");
            out_str(o, line);
            out_str(o, "\n");
        }
        if (!nl) break;
        line = nl + 1;
    }
    if (killed) out_str(o, "  (addr2line overran its time budget and was killed)\n");
    return k + 1;
}

static void print_frames(Out *o, int first, int n) {
    out_str(o, "native stack (");
    out_i64(o, n - first);
    out_str(o, " frames; raw):\n");
    for (int i = first; i < n; i++) {
        const Frame *f = &g_frames[i];
        out_str(o, "  #"); out_i64(o, i - first); out_str(o, "  "); out_hex(o, f->addr);
        if (f->mod >= 0) {
            out_str(o, "  "); out_str(o, g_mods[f->mod].path); out_str(o, " + "); out_hex(o, frame_rel(f));
        }
        out_str(o, "\n");
    }
    // renumber from `first`: frames are printed #0.. in both sections
    for (int i = first; i < n; i++) g_frames[i - first] = g_frames[i];
    n -= first;
    if (!g_addr2line[0]) {
        out_str(o, "symbolized (backtrace_symbols_fd; addr2line not found, no file:line):\n");
        out_flush(o);
        backtrace_symbols_fd(g_raw + first, n, o->fd);
        return;
    }
    out_str(o, "symbolized (addr2line):\n");
    int64_t deadline = (int64_t)(mono_ns() / 1000000) + SD_SYMBOLIZE_BUDGET_MS;
    for (int i = 0; i < n;) {
        int j = i + 1;
        const Frame *f = &g_frames[i];
        if (f->mod >= 0 && g_mods[f->mod].symbolizable)
            while (j < n && g_frames[j].mod == f->mod) j++;
        int done = f->mod >= 0 && g_mods[f->mod].symbolizable ? symbolize_run(o, i, j, deadline) : 0;
        for (int q = i + done; q < j; q++) {   // whatever addr2line did not answer
            out_str(o, "  #"); out_i64(o, q); out_str(o, "  ?? "); out_hex(o, g_frames[q].addr);
            if (g_frames[q].mod >= 0) { out_str(o, "  ["); out_str(o, g_mods[g_frames[q].mod].path); out_str(o, "]"); }
            out_str(o, "\n");
        }
        i = j;
    }
}

// ---- the flight recorder, readable -----------------------------------------------------

static void print_flight_recorder(Out *o) {
    const FrHeader *h = flightrec_header();
    if (!h) { out_str(o, "flight recorder: off (no --flight-recorder FILE)\n"); return; }
    static FrEvent ev[SD_EVENTS];
    FrState s;
    int n = 0;
    int torn = fr_read_events(h, ev, SD_EVENTS, &n, &s);
    int64_t now = (int64_t)mono_ns();
    out_str(o, "flight recorder (rank "); out_i64(o, h->rank); out_str(o, ", pid "); out_i64(o, h->pid);
    out_str(o, "):\n  state: step "); out_i64(o, s.step);
    out_str(o, " phase "); out_str(o, fr_phase_name(s.phase));
    out_str(o, " layer "); out_i64(o, s.layer);
    out_str(o, " op "); out_mem(o, s.op, strnlen(s.op, FR_OP_LEN));
    out_str(o, "; heartbeat "); out_secs(o, now - s.heartbeat_ns); out_str(o, " s ago; events ");
    out_i64(o, s.n_events);
    out_str(o, "; collectives enqueued "); out_i64(o, s.coll_enqueued);
    out_str(o, " started "); out_i64(o, s.coll_started);
    out_str(o, " completed "); out_i64(o, s.coll_completed);
    out_str(o, " (last: "); out_str(o, s.coll_name[0] ? "" : "-"); out_mem(o, s.coll_name, strnlen(s.coll_name, FR_OP_LEN));
    out_str(o, ")\n");
    if (torn) out_str(o, "  (torn: the signal interrupted an update of the recorder; values may mix two events)\n");
    out_str(o, "  last "); out_i64(o, n); out_str(o, " events (oldest first; t = seconds since the recorder opened):\n");
    for (int i = 0; i < n; i++) {
        const FrEvent *e = &ev[i];
        out_str(o, "    t=+"); out_secs(o, e->t_ns - h->start_mono_ns);
        out_str(o, " step "); out_i64(o, e->step);
        out_str(o, " layer "); out_i64(o, e->layer);
        out_str(o, " "); out_str(o, fr_phase_name(e->phase));
        out_str(o, " "); out_str(o, fr_kind_name(e->kind));
        out_str(o, " "); out_mem(o, e->op, strnlen(e->op, FR_OP_LEN));
        if (e->kind == FR_KIND_COLLECTIVE) { out_str(o, " seq "); out_i64(o, e->coll_seq); }
        out_str(o, "\n");
    }
}

// ---- the handler ---------------------------------------------------------------------

static uintptr_t context_pc(void *uctx) {
#if defined(__x86_64__)
    return (uintptr_t)((ucontext_t *)uctx)->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
    return (uintptr_t)((ucontext_t *)uctx)->uc_mcontext.pc;
#else
    (void)uctx;
    return 0;
#endif
}

static void dump(int sig, siginfo_t *si, void *uctx) {
    Out *o = &g_out;
    o->n = 0;
    o->fd = 2;
    if (g_path[0]) {
        int fd = open(g_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) o->fd = fd;
    }
    pid_t tid = my_tid();
    out_str(o, "nsa-train rank "); out_i64(o, g_rank); out_str(o, " pid "); out_i64(o, getpid());
    out_str(o, ": "); out_str(o, sig_name(sig));
    out_str(o, sig == SIGUSR1 ? " (stall dump) at " : " (crash) at ");
    out_utc_now(o);
    out_str(o, "\n");
    out_str(o, "thread "); out_i64(o, tid); out_str(o, tid == g_main_tid ? " (main thread)" : " (not the main thread)");
    if (sig != SIGUSR1 && si) { out_str(o, "; fault address "); out_hex(o, (uintptr_t)si->si_addr); }
    out_str(o, "\n");
    out_flush(o);

    int n = backtrace(g_raw, SD_MAX_FRAMES);
    uintptr_t pc = context_pc(uctx);
    int first = 0;   // frames before the interrupted one are this handler's own
    for (int i = 0; i < n; i++) {
        g_frames[i].addr = (uintptr_t)g_raw[i];
        g_frames[i].exact = 0;
    }
    for (int i = 0; pc && i < n; i++)
        if (g_frames[i].addr == pc) { first = i; g_frames[i].exact = 1; break; }
    if (!g_frames[first].exact && first == 0 && n > 0) g_frames[0].exact = 1;
    map_frames(n);
    print_frames(o, first, n);
    out_flush(o);
    print_flight_recorder(o);
    out_flush(o);
}

// Whether the file at `path` ends a dump written past byte `base` (its size when the peers
// were set: a stack file is opened for append, and an older run's dump at its end must not
// count): the last 256 bytes after `base` hold an end-of-dump line. A file now shorter than
// `base` was replaced, so all of it counts. open/pread/close and a hand-written search:
// async-signal-safe.
static int peer_dump_ended(const char *path, off_t base) {
    static const char mark[] = "--- end of ";
    const int ml = (int)sizeof mark - 1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[256];
    const off_t end = lseek(fd, 0, SEEK_END);
    if (end < base) base = 0;
    const off_t from = end - (off_t)sizeof buf > base ? end - (off_t)sizeof buf : base;
    ssize_t k = end > from ? pread(fd, buf, (size_t)(end - from), from) : 0;
    close(fd);
    for (ssize_t i = 0; i + ml <= k; i++) {
        int j = 0;
        while (j < ml && buf[i + j] == mark[j]) j++;
        if (j == ml) return 1;
    }
    return 0;
}
// A stall dump's last step before exiting: wait (20 ms naps, at most SD_PEER_WAIT_MS) until
// every other rank's stack file ends a dump, so that this rank's exit does not make the
// launcher kill the ranks still writing theirs.
static void wait_for_peer_dumps(void) {
    if (g_npeers <= 0) return;
    const uint64_t t0 = mono_ns();
    for (;;) {
        int all = 1;
        for (int i = 0; i < g_npeers && all; i++)
            if (g_peer_paths[i] && !peer_dump_ended(g_peer_paths[i], g_peer_base ? g_peer_base[i] : 0)) all = 0;
        if (all || mono_ns() - t0 > (uint64_t)SD_PEER_WAIT_MS * 1000000u) return;
        struct timespec nap = {0, 20 * 1000000L};
        nanosleep(&nap, NULL);
    }
}

static void handler(int sig, siginfo_t *si, void *uctx) {
    int saved_errno = errno;
    if (sig == SIGUSR1 && my_tid() != g_main_tid) {
        // the stall dump is about the main thread: hand the signal to it
        syscall(SYS_tgkill, getpid(), g_main_tid, SIGUSR1);
        errno = saved_errno;
        return;
    }
    if (!g_in_dump) {
        g_in_dump = 1;
        flightrec_note_signal(sig);
        dump(sig, si, uctx);
    }
    Out *o = &g_out;
    if (sig == SIGUSR1) {
        out_str(o, "--- end of stall dump: exiting with status 138 ---\n");
        out_flush(o);
        wait_for_peer_dumps();
        _exit(NSA_EXIT_STALL_DUMP);
    }
    out_str(o, "--- end of crash dump: re-raising ");
    out_str(o, sig_name(sig));
    out_str(o, " ---\n");
    out_flush(o);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, NULL);
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, sig);
    pthread_sigmask(SIG_UNBLOCK, &un, NULL);
    syscall(SYS_tgkill, getpid(), my_tid(), sig);
    _exit(128 + sig);   // not reached
}

// ---- install ---------------------------------------------------------------------------
void stackdump_set_peers(char **paths, int n) {
    g_npeers = 0;   // a dump from here until the end sees no half-set list
    free(g_peer_base);
    g_peer_base = n > 0 ? calloc((size_t)n, sizeof *g_peer_base) : NULL;   // NULL: bases 0
    for (int i = 0; g_peer_base && i < n; i++) {
        struct stat st;
        g_peer_base[i] = paths[i] && stat(paths[i], &st) == 0 ? st.st_size : 0;
    }
    g_peer_paths = paths;
    g_npeers = n;
}

static void find_addr2line(void) {
    g_addr2line[0] = 0;
    const char *over = getenv("NSA_ADDR2LINE");
    if (over) {   // "" or "none": use the fallback (tests); else a path
        if (*over && strcmp(over, "none") && access(over, X_OK) == 0)
            snprintf(g_addr2line, sizeof g_addr2line, "%s", over);
        return;
    }
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/bin:/bin", path ? path : "");
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char cand[1024];
        snprintf(cand, sizeof cand, "%s/addr2line", *d ? d : ".");
        if (access(cand, X_OK) == 0) { snprintf(g_addr2line, sizeof g_addr2line, "%s", cand); return; }
    }
}

int stackdump_install(const char *stack_file, int rank) {
    snprintf(g_path, sizeof g_path, "%s", stack_file ? stack_file : "");
    // mkdir -p of the stack file's directory now rather than in the handler (a missing
    // directory would send the dump to stderr); a failure shows there too
    if (g_path[0]) mkdir_p_parent(g_path);
    g_rank = rank;
    g_main_tid = my_tid();
    find_addr2line();
    void *warm[4];
    backtrace(warm, 4);   // loads libgcc_s now, outside any signal handler
    // an alternate stack so that a stack overflow in the main thread still dumps
    static char *altstack;
    const size_t alt_bytes = 256 * 1024;
    if (!altstack) altstack = malloc(alt_bytes);
    if (altstack) {
        stack_t ss;
        memset(&ss, 0, sizeof ss);
        ss.ss_sp = altstack;
        ss.ss_size = alt_bytes;
        if (sigaltstack(&ss, NULL)) nsa_log(LOG_STATUS, "sigaltstack failed (stack dumps still work)");
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_SIGNALS; i++) sigaddset(&sa.sa_mask, SIGNALS[i]);   // no nesting
    for (int i = 0; i < N_SIGNALS; i++)
        if (sigaction(SIGNALS[i], &sa, NULL)) {
            nsa_log(LOG_ERROR, "cannot install the %s handler: %s", sig_name(SIGNALS[i]), strerror(errno));
            return -1;
        }
    return 0;
}
