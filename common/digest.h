// common/digest.h — a fast 64-bit digest of bytes, for "are these bitwise the
// same?" questions: a tensor in a step dump against its baseline, the tokens of a
// training step against the baseline's (data order). Not cryptographic: it
// guards against accidents, not adversaries.
//
// Definition (so other tools can reproduce it): h = (seed ^ (n * K1)) + K2; for each
// 8-byte little-endian word w of the input (the tail zero-padded into one last
// word): h = rotl(h ^ mix(w), 27) * K2 + K3, with mix(w) = fmix64(w * K1);
// the result is fmix64(h), fmix64 being MurmurHash3's 64-bit finalizer.
// K1 = 0x9E3779B97F4A7C15, K2 = 0xC2B2AE3D27D4EB4F, K3 = 0x165667B19E3779F9.
#ifndef NSA_COMMON_DIGEST_H
#define NSA_COMMON_DIGEST_H
#include <stddef.h>
#include <stdint.h>

uint64_t digest64(const void *data, size_t n, uint64_t seed);
// 16 lowercase hex digits + NUL
void digest64_hex(uint64_t h, char out[17]);
#endif
