// bench/bench_gemm.c — GFLOP/s of the CPU gemm (kernels/cpu/gemm.c) on the shapes
// the trainer uses. Built with the other benchmarks, never run by ctest.
//
//   OMP_NUM_THREADS=2 build/bench/bench_gemm [substring]
//
// Each shape is timed for at least ~0.3 s (at least 2 calls after a warm-up call);
// the best and the mean per-call rate are printed. A substring argument runs only
// the shapes whose name contains it. FLOPs are counted as 2*M*N*K.
#define _POSIX_C_SOURCE 200809L   // clock_gettime (gcc's -fopenmp declared it; clang's does not)
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

// Both precisions of the kernel (cpu_ops.h declares only one per translation unit).
void gemm_f32(int transA, int transB, int M, int N, int K, float alpha, const float *A,
              int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void gemm_f64(int transA, int transB, int M, int N, int K, double alpha, const double *A,
              int64_t lda, const double *B, int64_t ldb, double beta, double *C, int64_t ldc);

typedef struct {
    const char *name;
    int f64, transA, transB, M, N, K;
    double beta;
} Shape;

// The trainer's calls: matmul_fwd is gemm(0,1) on w[N,K]; the input gradient is
// gemm(0,0); the weight gradient dW[N,K] += dout^T inp is gemm(1,0) with the token
// count as the inner dimension; row-at-a-time prefill is M = 1.
static const Shape shapes[] = {
    {"square 1024^3 NN f32",            0, 0, 0, 1024, 1024, 1024, 0},
    {"square 1024^3 NT f32",            0, 0, 1, 1024, 1024, 1024, 0},
    {"square 1024^3 NN f64",            1, 0, 0, 1024, 1024, 1024, 0},
    {"fwd qkv 2048x768 . 768x2304 NT",  0, 0, 1, 2048, 2304, 768, 0},
    {"fwd lm-head 2048x768 . 768x50304 NT", 0, 0, 1, 2048, 50304, 768, 0},
    {"bwd dinp 2048x2304 . 2304x768 NN", 0, 0, 0, 2048, 768, 2304, 1},
    {"bwd dW 2304x768 += (M=2048) TN",  0, 1, 0, 2304, 768, 2048, 1},
    {"bwd dW 2304x768 += (M=32768) TN", 0, 1, 0, 2304, 768, 32768, 1},
    {"bwd lm-head dinp 2048x50304 . 50304x768 NN", 0, 0, 0, 2048, 768, 50304, 0},
    {"bwd lm-head dW 50304x768 += (M=2048) TN", 0, 1, 0, 50304, 768, 2048, 1},
    {"small M=64 64x768 . 768x2304 NT",  0, 0, 1, 64, 2304, 768, 0},
    {"row M=1 1x768 . 768x2304 NT",     0, 0, 1, 1, 2304, 768, 0},
    {"row M=1 1x768 . 768x768 NT",      0, 0, 1, 1, 768, 768, 0},
    {"row M=1 1x768 . 768x50304 NT",    0, 0, 1, 1, 50304, 768, 0},
    {"fwd qkv 2048x768 . 768x2304 NT f64", 1, 0, 1, 2048, 2304, 768, 0},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void *xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_gemm: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

// Stored shapes of op(A) and op(B): A is [M,K] or [K,M], B is [K,N] or [N,K].
static void run(const Shape *s) {
    size_t es = s->f64 ? sizeof(double) : sizeof(float);
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    void *A = xmalloc(na * es), *B = xmalloc(nb * es), *C = xmalloc(nc * es);
    // Small values (|x| < 0.01) so that beta = 1 accumulation over many calls stays
    // finite and denormal-free.
    uint64_t st = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < na + nb + nc; i++) {
        st ^= st << 13; st ^= st >> 7; st ^= st << 17;
        double x = ((double)(st >> 11) / 9007199254740992.0 - 0.5) * 0.02;
        void *base = i < na ? A : i < na + nb ? B : C;
        size_t j = i < na ? i : i < na + nb ? i - na : i - na - nb;
        if (s->f64) ((double *)base)[j] = x; else ((float *)base)[j] = (float)x;
    }
    int64_t lda = s->transA ? s->M : s->K, ldb = s->transB ? s->K : s->N;
    double best = 1e30, total = 0;
    int calls = 0;
    for (int it = 0;; it++) {
        double t0 = now_s();
        if (s->f64)
            gemm_f64(s->transA, s->transB, s->M, s->N, s->K, 1.0, A, lda, B, ldb, s->beta, C, s->N);
        else
            gemm_f32(s->transA, s->transB, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, (float)s->beta, C, s->N);
        double dt = now_s() - t0;
        if (it == 0) continue;   // warm-up: scratch buffers, page faults, caches
        calls++;
        total += dt;
        if (dt < best) best = dt;
        if (calls >= 2 && total >= 0.3) break;
    }
    double flop = 2.0 * s->M * s->N * s->K;
    printf("%-40s %6d calls  best %8.2f GFLOP/s  mean %8.2f GFLOP/s  (%.3f ms/call)\n",
           s->name, calls, flop / best * 1e-9, flop * calls / total * 1e-9, 1e3 * total / calls);
    fflush(stdout);
    free(A); free(B); free(C);
}

int main(int argc, char **argv) {
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("bench_gemm: %d thread(s)\n", threads);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (argc < 2 || strstr(shapes[i].name, argv[1])) run(&shapes[i]);
    return 0;
}
