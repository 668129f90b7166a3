// trainer/jsonl.c — see jsonl.h.
#define _POSIX_C_SOURCE 200809L
#include "trainer/jsonl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/ioerr.h"

int jsonl_write(int fd, const char *js, const char *path) {
    if (fd < 0 || !js) return 0;
    size_t n = strlen(js);
    char *line = malloc(n + 1);
    if (!line) {
        io_error(path, ENOMEM);
        return -1;
    }
    memcpy(line, js, n);
    line[n] = '\n';
    size_t done = 0;
    int rc = 0;
    while (done < n + 1) {
        ssize_t k = write(fd, line + done, n + 1 - done);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            io_error(path, k < 0 ? errno : EIO);
            rc = -1;
            break;
        }
        done += (size_t)k;   // short: the next write says why (ENOSPC), or completes the line
    }
    free(line);
    return rc;
}
