// harness/artifacts/pystack.c — see pystack.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/artifacts/pystack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// A frame of the dump's own making: the trainer's SIGUSR1 handler that called
// faulthandler.dump_traceback, not where the program was.
static int dump_frame(const char *fn, size_t len) {
    static const char *const words[] = {"signal", "sigusr", "handler", "faulthandler", "stack_dump", "dump_stack",
                                        "dump_traceback", NULL};
    char f[256];
    snprintf(f, sizeof f, "%.*s", (int)(len < sizeof f ? len : sizeof f - 1), fn);
    for (char *p = f; *p; p++)
        if (*p >= 'A' && *p <= 'Z') *p = (char)(*p - 'A' + 'a');
    for (int i = 0; words[i]; i++)
        if (strstr(f, words[i])) return 1;
    return 0;
}

// A frame in Python's own library or an installed package (threading.py's wait, torch's
// all_reduce), runpy (how `python -m` and the probe start a script: `runpy.py`, `<frozen
// runpy>`), or the probe (probe/nsa_probe/: its hooks around the user's script): where the
// program waits or what runs it, not whose code got it there.
static int library_path(const char *path, size_t len) {
    static const char *const parts[] = {"/lib/python", "/site-packages/", "/dist-packages/", "<frozen ", "/runpy.py",
                                        "/nsa_probe/", NULL};
    char p[1024];
    snprintf(p, sizeof p, "%.*s", (int)(len < sizeof p ? len : sizeof p - 1), path);
    for (int i = 0; parts[i]; i++)
        if (strstr(p, parts[i])) return 1;
    return 0;
}

// `  File "PATH", line N in FUNC` -> "FUNC (PATH:N)"; 1 if the line is such a frame worth naming
// (own_code: and not in a library).
static int frame(const char *ln, size_t len, const char *src_root, int own_code, char *out, size_t n) {
    const char *p = ln;
    while (p < ln + len && *p == ' ') p++;
    if ((size_t)(ln + len - p) < 8 || strncmp(p, "File \"", 6)) return 0;
    const char *path = p + 6;
    const char *q = memchr(path, '"', (size_t)(ln + len - path));
    if (!q) return 0;
    const char *line = strstr(q, ", line ");
    if (!line || line >= ln + len) return 0;
    long no = strtol(line + 7, NULL, 10);
    const char *in = strstr(line, " in ");
    if (!in || in >= ln + len) return 0;
    const char *fn = in + 4;
    size_t fl = (size_t)(ln + len - fn);
    while (fl && (fn[fl - 1] == '\r' || fn[fl - 1] == ' ')) fl--;
    if (dump_frame(fn, fl)) return 0;
    // the probe's faults are where a faulted rank is: its hang sleeps in fault_hang, its crash
    // dies in fault_crash (docs/trainer-maps.md "Faults"), so they are named like own code
    const int probe_fault = (fl == 10 && !strncmp(fn, "fault_hang", fl)) || (fl == 11 && !strncmp(fn, "fault_crash", fl));
    if (own_code && !probe_fault && library_path(path, (size_t)(q - path))) return 0;
    size_t pl = (size_t)(q - path), rl = src_root ? strlen(src_root) : 0;
    if (rl && pl > rl + 1 && !strncmp(path, src_root, rl) && path[rl] == '/') {
        path += rl + 1;
        pl -= rl + 1;
    }
    snprintf(out, n, "%.*s (%.*s:%ld)", (int)fl, fn, (int)pl, path, no);
    return 1;
}

int pystack_top(const char *text, const char *src_root, char *out, size_t n) {
    if (!text) return -1;
    // the Current thread block if there is one, else the first block
    const char *block = strstr(text, "Current thread 0x");
    if (!block) block = strstr(text, "Thread 0x");
    if (!block) block = strstr(text, "Stack (most recent call first):");
    if (!block) return -1;
    // the innermost frame of the trainer's own code, else the innermost frame at all
    for (int own_code = 1; own_code >= 0; own_code--) {
        const char *p = strchr(block, '\n');
        while (p && *p) {
            p++;
            const char *e = strchr(p, '\n');
            size_t len = e ? (size_t)(e - p) : strlen(p);
            if (len == 0 || strncmp(p, "  ", 2)) break;   // the block ends at a blank or unindented line
            if (frame(p, len, src_root, own_code, out, n)) return 0;
            p = e;
        }
    }
    return -1;
}

int pystack_traceback(const char *text, int max_lines, Str *block, char *exc, size_t n) {
    static const char HEAD[] = "Traceback (most recent call last):";
    const char *start = NULL;
    for (const char *p = text ? strstr(text, HEAD) : NULL; p; p = strstr(p + 1, HEAD))
        if (p == text || p[-1] == '\n') start = p;   // at a line's start
    if (!start) return -1;
    // the lines: the header, the indented frames (and their source and ^^^ lines), the exception
    const char *lines[4096];
    size_t lens[4096];
    int nl = 0, complete = 0;
    for (const char *p = start; *p && nl < 4096;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && p[len - 1] == '\r') len--;
        lines[nl] = p;
        lens[nl++] = len;
        if (nl > 1 && len && p[0] != ' ' && p[0] != '\t') {   // the exception line ends the block
            complete = 1;
            break;
        }
        if (nl > 1 && !len) break;   // a blank line before the exception line: cut short
        if (!e) break;
        p = e + 1;
    }
    if (!complete) return -1;
    snprintf(exc, n, "%.*s", (int)lens[nl - 1], lines[nl - 1]);
    const int keep_head = max_lines > 4 ? max_lines / 4 : 1, keep_tail = max_lines - keep_head - 1;
    for (int i = 0; i < nl; i++) {
        if (nl > max_lines && i == keep_head) {
            str_printf(block, "  ... (%d lines left out)\n", nl - keep_head - keep_tail);
            i = nl - keep_tail - 1;
            continue;
        }
        str_printf(block, "%.*s\n", (int)lens[i], lines[i]);
    }
    return 0;
}
