// harness/pystack.c — see pystack.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/pystack.h"

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
// all_reduce): where the program waits, not whose code got it there.
static int library_path(const char *path, size_t len) {
    static const char *const parts[] = {"/lib/python", "/site-packages/", "/dist-packages/", "<frozen ", NULL};
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
    if (own_code && library_path(path, (size_t)(q - path))) return 0;
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
