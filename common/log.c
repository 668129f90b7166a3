// common/log.c — see log.h.
#define _GNU_SOURCE   // program_invocation_short_name
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char g_program[64];

void nsa_log_set_program(const char *name) {
    snprintf(g_program, sizeof g_program, "%s", name ? name : "");
}

const char *nsa_log_program(void) {
    return g_program[0] ? g_program : program_invocation_short_name;
}

static const char *level_word(LogLevel level) {
    switch (level) {
    case LOG_WARN: return "warning: ";
    case LOG_NOTE: return "note: ";
    case LOG_ERROR:
    case LOG_STATUS: break;
    }
    return "";
}

void nsa_vlog(LogLevel level, const char *fmt, va_list ap) {
    int saved = errno;
    char small[1024], *line = small;
    int head = snprintf(small, sizeof small, "%s: %s", nsa_log_program(), level_word(level));
    if (head < 0 || (size_t)head >= sizeof small) head = 0;
    va_list ap2;
    va_copy(ap2, ap);
    int body = vsnprintf(small + head, sizeof small - (size_t)head, fmt, ap);
    if (body < 0) body = 0;
    size_t n = (size_t)head + (size_t)body;
    if (n + 2 > sizeof small) {   // a long message: the whole line in one buffer all the same
        char *big = malloc(n + 2);
        if (big) {   // else the first 1 KiB of it, which is still one line
            memcpy(big, small, (size_t)head);
            vsnprintf(big + head, n + 1 - (size_t)head, fmt, ap2);
            line = big;
        } else {
            n = sizeof small - 2;
        }
    }
    va_end(ap2);
    if (n == 0 || line[n - 1] != '\n') line[n++] = '\n';
    fwrite(line, 1, n, stderr);
    if (line != small) free(line);
    errno = saved;
}

void nsa_log(LogLevel level, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    nsa_vlog(level, fmt, ap);
    va_end(ap);
}
