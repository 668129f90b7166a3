// common/digest.c — see digest.h.
#include "common/digest.h"

#include <stdio.h>
#include <string.h>

#define K1 0x9E3779B97F4A7C15ull
#define K2 0xC2B2AE3D27D4EB4Full
#define K3 0x165667B19E3779F9ull

static uint64_t fmix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return k;
}

static uint64_t step(uint64_t h, uint64_t w) {
    h ^= fmix64(w * K1);
    h = (h << 27) | (h >> 37);
    return h * K2 + K3;
}

uint64_t digest64(const void *data, size_t n, uint64_t seed) {
    const unsigned char *p = data;
    uint64_t h = (seed ^ ((uint64_t)n * K1)) + K2;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);   // little-endian hosts only (x86-64, aarch64)
        h = step(h, w);
    }
    if (i < n) {
        uint64_t w = 0;
        memcpy(&w, p + i, n - i);
        h = step(h, w);
    }
    return fmix64(h);
}

void digest64_hex(uint64_t h, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)h); }
