// trainer/ioerr.c — see ioerr.h.
#define _POSIX_C_SOURCE 200809L
#include "trainer/ioerr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>

static int g_first_errno;   // 0: no failure recorded

void io_error(const char *path, int err) {
    if (err <= 0) err = EIO;
    int none = 0;
    if (!__atomic_compare_exchange_n(&g_first_errno, &none, err, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    // one fprintf on unbuffered stderr: one write(2), the line stays whole
    fprintf(stderr, "[IO-ERROR] file=%s errno=%d %s\n", path ? path : "?", err, strerror(err));
    fflush(stderr);
}

int io_error_seen(void) { return __atomic_load_n(&g_first_errno, __ATOMIC_ACQUIRE); }

void io_error_reset(void) { __atomic_store_n(&g_first_errno, 0, __ATOMIC_RELEASE); }

int artifact_open_append(const char *path, const char *what, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s%scannot open %s: %s", what ? what : "", what ? ": " : "", path, strerror(e));
        io_error(path, e);
        errno = e;
    }
    return fd;
}
