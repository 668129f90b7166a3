// common/envparse.h — the environment knobs' parsing, for the backends (NSA_CUDA_*) and the
// trainer above them (NSA_KV_FUSED, the bootstrap's RANK, MASTER_PORT, ...). A variable
// that is set is a whole decimal number in a stated range, or an error that names the
// variable and the value it got: never a silent default. Header only (C and CUDA C++).
#ifndef NSA_COMMON_ENVPARSE_H
#define NSA_COMMON_ENVPARSE_H
#include <stdio.h>
#include <stdlib.h>

// NAME unset or empty: 0 (*out untouched). A whole number in [lo, hi]: 1, *out set.
// Anything else: -1, and err says "NAME=VALUE: expected a whole number in [lo, hi]".
static inline int nsa_env_int(const char *name, long lo, long hi, int *out, char *err, size_t errlen) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        if (err && errlen) snprintf(err, errlen, "%s=%s: expected a whole number in [%ld, %ld]", name, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 1;
}

#endif
