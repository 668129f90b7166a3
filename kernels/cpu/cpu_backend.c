// kernels/cpu/cpu_backend.c — memory hooks and the op table of the CPU backend.
// Compiled once per precision (see real.h): the tables cpu_backend_f32 ("cpu")
// and cpu_backend_f64 ("cpu64").
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "cpu_ops.h"

// Shared by both precisions: defined only in the f32 build, declared in both.
void *nsa_cpu_alloc(size_t bytes);
void nsa_cpu_free(void *p);
void nsa_cpu_zero(void *p, size_t bytes);
void nsa_cpu_memcpy(void *dst, const void *src, size_t bytes);
void nsa_cpu_sync(void);

size_t nsa_cpu_mem_peak(void);

#ifndef NSA_REAL_F64
// Accounting for Backend.mem_peak: every block carries its requested size in a
// 64-byte header (which keeps the payload 64-byte aligned). The model allocates
// from one thread; the counters are atomics anyway, so a test that allocates from
// OpenMP threads cannot corrupt them.
#define CPU_ALLOC_HEADER 64
static _Atomic size_t g_cpu_in_use = 0, g_cpu_peak = 0;

void *nsa_cpu_alloc(size_t bytes) {
    // 64-byte aligned for the vector units; zero-filled as the op API promises.
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    char *base = aligned_alloc(64, sz + CPU_ALLOC_HEADER);
    if (!base) {
        fprintf(stderr, "%s:%d: out of host memory allocating %zu bytes\n", __FILE__, __LINE__, bytes);
        exit(1);
    }
    memcpy(base, &bytes, sizeof bytes);
    size_t now = atomic_fetch_add(&g_cpu_in_use, bytes) + bytes, peak = atomic_load(&g_cpu_peak);
    while (now > peak && !atomic_compare_exchange_weak(&g_cpu_peak, &peak, now)) {}
    memset(base + CPU_ALLOC_HEADER, 0, sz);
    return base + CPU_ALLOC_HEADER;
}
void nsa_cpu_free(void *p) {
    if (!p) return;
    char *base = (char *)p - CPU_ALLOC_HEADER;
    size_t bytes;
    memcpy(&bytes, base, sizeof bytes);
    atomic_fetch_sub(&g_cpu_in_use, bytes);
    free(base);
}
size_t nsa_cpu_mem_peak(void) { return atomic_load(&g_cpu_peak); }

const char *nsa_cpu_kernel_isa(void) {
    return ""
#if defined(__x86_64__)
           "x86_64"
#elif defined(__aarch64__)
           "aarch64"
#else
           "unknown-arch"
#endif
#ifdef __SSE4_2__
           " sse4.2"
#endif
#ifdef __AVX__
           " avx"
#endif
#ifdef __AVX2__
           " avx2"
#endif
#ifdef __FMA__
           " fma"
#endif
#ifdef __AVX512F__
           " avx512f"
#endif
#ifdef __AVX512BW__
           " avx512bw"
#endif
#ifdef __AVX512VL__
           " avx512vl"
#endif
#ifdef __AVX512BF16__
           " avx512bf16"
#endif
#ifdef __ARM_FEATURE_FMA
           " fma"
#endif
#ifdef __ARM_FEATURE_SVE
           " sve"
#endif
#ifdef __FAST_MATH__
           " fast-math"
#endif
        ;
}
void nsa_cpu_zero(void *p, size_t bytes) { if (bytes) memset(p, 0, bytes); }
void nsa_cpu_memcpy(void *dst, const void *src, size_t bytes) { if (bytes) memmove(dst, src, bytes); }
void nsa_cpu_sync(void) {}
#endif

void CPU_FN(act_to_f64)(double *h, const void *d, int64_t n) {
    const real *x = d;
    for (int64_t i = 0; i < n; i++) h[i] = (double)x[i];
}
void CPU_FN(act_from_f64)(void *d, const double *h, int64_t n) {
    real *x = d;
    for (int64_t i = 0; i < n; i++) x[i] = (real)h[i];
}

#ifdef NSA_REAL_F64
#define CPU_BACKEND_NAME "cpu64"
#else
#define CPU_BACKEND_NAME "cpu"
#endif

const Backend CPU_FN(cpu_backend) = {
    .name = CPU_BACKEND_NAME,
    .act_bytes = sizeof(real),
    .param_bytes = sizeof(real),
    .threads = 0,
    .alloc = nsa_cpu_alloc,
    .free = nsa_cpu_free,
    .zero = nsa_cpu_zero,
    .to_host = nsa_cpu_memcpy,
    .from_host = nsa_cpu_memcpy,
    .copy = nsa_cpu_memcpy,
    .sync = nsa_cpu_sync,
    .mem_peak = nsa_cpu_mem_peak,
    .act_to_f64 = CPU_FN(act_to_f64),
    .act_from_f64 = CPU_FN(act_from_f64),
    .param_to_f64 = CPU_FN(act_to_f64),
    .param_from_f64 = CPU_FN(act_from_f64),
    .matmul_fwd = CPU_FN(matmul_fwd),
    .matmul_bwd = CPU_FN(matmul_bwd),
    .embedding_fwd = CPU_FN(embedding_fwd),
    .embedding_bwd = CPU_FN(embedding_bwd),
    .rmsnorm_fwd = CPU_FN(rmsnorm_fwd),
    .rmsnorm_bwd = CPU_FN(rmsnorm_bwd),
    .rope_fwd = CPU_FN(rope_fwd),
    .rope_bwd = CPU_FN(rope_bwd),
    .rope_table = CPU_FN(rope_table),
    .kv_split_rope_fwd = CPU_FN(kv_split_rope_fwd),
    .kv_gather_rope_bwd = CPU_FN(kv_gather_rope_bwd),
    .swiglu_fwd = CPU_FN(swiglu_fwd),
    .swiglu_bwd = CPU_FN(swiglu_bwd),
    .silu_fwd = CPU_FN(silu_fwd),
    .silu_bwd = CPU_FN(silu_bwd),
    .add = CPU_FN(add),
    .add_inplace = CPU_FN(add_inplace),
    .xent_fwd_bwd = CPU_FN(xent_fwd_bwd),
    .sumsq_param = CPU_FN(sumsq_param),
    .sumsq_params = CPU_FN(sumsq_params),
    .scale_param = CPU_FN(scale_param),
    .first_nonfinite_act = CPU_FN(first_nonfinite),
    .first_nonfinite_param = CPU_FN(first_nonfinite),
    .adamw = CPU_FN(adamw),
    .adamw_runs = CPU_FN(adamw_runs),
    .compress_avg_fwd = CPU_FN(compress_avg_fwd),
    .compress_avg_bwd = CPU_FN(compress_avg_bwd),
    .block_gather_fwd = CPU_FN(block_gather_fwd),
    .block_gather_bwd = CPU_FN(block_gather_bwd),
    .cmp_attn_fwd = CPU_FN(cmp_attn_fwd),
    .cmp_attn_bwd = CPU_FN(cmp_attn_bwd),
    .select_blocks = CPU_FN(select_blocks),
    .sel_attn_fwd = CPU_FN(sel_attn_fwd),
    .sel_attn_bwd = CPU_FN(sel_attn_bwd),
    .win_attn_fwd = CPU_FN(win_attn_fwd),
    .win_attn_bwd = CPU_FN(win_attn_bwd),
    .gate_act_fwd = CPU_FN(gate_act_fwd),
    .gate_act_bwd = CPU_FN(gate_act_bwd),
    .combine_fwd = CPU_FN(combine_fwd),
    .combine_bwd = CPU_FN(combine_bwd),
};
