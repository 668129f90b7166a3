// trainer/jsonl.c — see jsonl.h.
#define _POSIX_C_SOURCE 200809L
#include "trainer/jsonl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void jsonl_write(int fd, const char *js, const char *what) {
    if (fd < 0 || !js) return;
    size_t n = strlen(js);
    char *line = malloc(n + 1);
    if (!line) {
        fprintf(stderr, "nsa-train: out of memory writing %s\n", what);
        return;
    }
    memcpy(line, js, n);
    line[n] = '\n';
    ssize_t k = write(fd, line, n + 1);
    if (k != (ssize_t)(n + 1)) fprintf(stderr, "nsa-train: short write to %s\n", what);
    free(line);
}
