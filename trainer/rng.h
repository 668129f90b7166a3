// trainer/rng.h — counter-based random numbers (header-only).
//
// Every random value is a pure function of (seed, stream, index): initialisation
// of tensor k element i does not depend on the order in which tensors are built,
// on the backend or on the precision; the synthetic data of batch b does not
// depend on earlier batches. SplitMix64 finalizer as the mixing function.
#ifndef NSA_TRAINER_RNG_H
#define NSA_TRAINER_RNG_H
#include <math.h>
#include <stdint.h>

static inline uint64_t rng_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline uint64_t rng_u64(uint64_t seed, uint64_t stream, uint64_t index) {
    return rng_mix64(rng_mix64(seed ^ rng_mix64(stream)) + index);
}
// uniform in [0, 1) with 53 bits
static inline double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
    return (double)(rng_u64(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}
// standard normal (Box-Muller on two derived uniforms)
static inline double rng_normal(uint64_t seed, uint64_t stream, uint64_t index) {
    double u1 = rng_uniform(seed, stream, 2 * index);
    double u2 = rng_uniform(seed, stream, 2 * index + 1);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
// integer in [0, n)
static inline uint64_t rng_below(uint64_t seed, uint64_t stream, uint64_t index, uint64_t n) {
    return (uint64_t)(rng_uniform(seed, stream, index) * (double)n) % n;
}
#endif
