// kernels/cuda/cuda_gemm.cu — matmul_fwd / matmul_bwd through cuBLASLt.
//
// Row-major C = A·B^T of ops.h is the column-major product C^T = B·A^T, so every
// call below is a column-major cuBLASLt matmul on the same memory (no copies).
// Precisions (compute type always fp32, no TF32):
//   bf16 / fp16: A, B in the activation type (the weight operand is the backend's
//                low-precision copy of the fp32 master weights, see cuda_backend.cu),
//                out / dinp in the activation type, dW accumulated in fp32
//                (cuBLASLt's "16BF x 16BF -> 32F" / "16F x 16F -> 32F" kernels);
//   fp32:        everything fp32, CUBLAS_COMPUTE_32F (true fp32, not TF32).
// Bias in the forward is cuBLASLt's BIAS epilogue (added in fp32 before rounding);
// dbias is a deterministic column sum (nsa_cuda_colsum_acc).
//
// Determinism: a plan (descriptors + the heuristic's algorithm) is cached per shape,
// type, leading dimensions and pointer alignments, so the same call always runs
// the same kernel; cuBLASLt matmuls are bitwise reproducible run to run for a
// given algorithm (split-K reductions are ordered, see docs/cuda.md). A row's
// result may depend on M (cuBLASLt picks other tiles for other shapes): the GPU
// does not keep the CPU backend's row-independence promise, only run-to-run bits.
//
// Loading: cuBLASLt is not linked; nsa_cuda_gemm_init (CUDA backend init, once) dlopens
// libcublasLt.so.<CUBLAS_VER_MAJOR> (else libcublasLt.so; by name, then from libcudart's
// directory) and resolves the functions below. Linked, its library constructors cost
// every process ~0.11 s at start, CPU-only runs and --help included (the tests start
// nsa-train hundreds of times); dlopen'ed they run only where a GPU backend comes up.
// <cublasLt.h> still gives the types and the exact prototypes (decltype). A missing
// library or symbol, or a library whose major version is not the header's, is a clear
// nsa_cuda_fail, never a crash. The calls, their order and arguments are as when linked.
// The load, the handle and the workspace are made there, in the calling thread; each part's
// time goes to the start-up accounting (NSA_TRAIN_TIMING).
#include <cublasLt.h>
#include <dlfcn.h>
#include <string.h>
#include <map>
#include <array>
#include "kernels/cuda/cuda_common.cuh"

// every cuBLASLt function this file calls, resolved once by lt_load()
#define NSA_LT_FUNCS(X)                                                                          \
    X(cublasLtGetVersion)                                                                        \
    X(cublasLtGetStatusString)                                                                   \
    X(cublasLtCreate)                                                                            \
    X(cublasLtMatmulDescCreate)                                                                  \
    X(cublasLtMatmulDescSetAttribute)                                                            \
    X(cublasLtMatrixLayoutCreate)                                                                \
    X(cublasLtMatmulPreferenceCreate)                                                            \
    X(cublasLtMatmulPreferenceSetAttribute)                                                      \
    X(cublasLtMatmulPreferenceDestroy)                                                           \
    X(cublasLtMatmulAlgoGetHeuristic)                                                            \
    X(cublasLtMatmul)
static struct {
#define NSA_LT_MEMBER(f) decltype(&::f) f;
    NSA_LT_FUNCS(NSA_LT_MEMBER)
#undef NSA_LT_MEMBER
} lt;

#define NSA_STR2(x) #x
#define NSA_STR(x) NSA_STR2(x)
// a failure of the load, reported by nsa_cuda_gemm_init as nsa_cuda_fail(what, why, file, line)
static struct {
    const char *what;
    char why[768];
    int line;
} g_lt_err;
#define LT_FAIL(what_, line_)                                                                    \
    do {                                                                                         \
        g_lt_err.what = (what_);                                                                 \
        g_lt_err.line = (line_);                                                                 \
        return -1;                                                                               \
    } while (0)
// Returns 0, or -1 with g_lt_err filled.
static int lt_load(void) {
    static const char *const names[] = {"libcublasLt.so." NSA_STR(CUBLAS_VER_MAJOR), "libcublasLt.so"};
    char *why = g_lt_err.why;
    why[0] = 0;
    size_t used = 0;
    void *h = NULL;
    // by name (the loader's search: LD_LIBRARY_PATH, this binary's RUNPATH, ld.so.cache),
    // then next to the libcudart this process runs with (the toolkit's lib directory)
    char dir[512] = "";
    Dl_info ci;
    if (dladdr((void *)&cudaGetErrorString, &ci) && ci.dli_fname && strstr(ci.dli_fname, "libcudart")) {
        const char *slash = strrchr(ci.dli_fname, '/');
        if (slash && (size_t)(slash - ci.dli_fname) < sizeof dir - 32)
            snprintf(dir, sizeof dir, "%.*s/", (int)(slash - ci.dli_fname), ci.dli_fname);
    }
    for (int pass = 0; pass < (dir[0] ? 2 : 1) && !h; pass++) {
        for (const char *name : names) {
            char path[600];
            snprintf(path, sizeof path, "%s%s", pass ? dir : "", name);
            dlerror();
            h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
            if (h) break;
            const char *e = dlerror();
            used += (size_t)snprintf(why + used, used < sizeof g_lt_err.why ? sizeof g_lt_err.why - used : 0, "%s%s",
                                     used ? "; " : "", e ? e : path);
            if (used >= sizeof g_lt_err.why) used = sizeof g_lt_err.why - 1;
        }
    }
    if (!h) LT_FAIL("dlopen(libcublasLt.so." NSA_STR(CUBLAS_VER_MAJOR) " / libcublasLt.so)", __LINE__);
#define NSA_LT_SYM(f)                                                                            \
    do {                                                                                         \
        dlerror();                                                                               \
        void *p_ = dlsym(h, #f);                                                                 \
        if (!p_) {                                                                               \
            const char *e_ = dlerror();                                                          \
            snprintf(why, sizeof g_lt_err.why, "libcublasLt has no symbol %s (%s)", #f, e_ ? e_ : "NULL"); \
            LT_FAIL("dlsym(" #f ")", __LINE__);                                                  \
        }                                                                                        \
        lt.f = (decltype(lt.f))p_;                                                               \
    } while (0);
    NSA_LT_FUNCS(NSA_LT_SYM)
#undef NSA_LT_SYM
    const size_t v = lt.cublasLtGetVersion();
    if (v / 10000 != (size_t)CUBLAS_VER_MAJOR) {
        Dl_info di;
        const char *path = dladdr((void *)lt.cublasLtGetVersion, &di) && di.dli_fname ? di.dli_fname : "libcublasLt";
        snprintf(why, sizeof g_lt_err.why, "%s is cuBLASLt %zu.%zu.%zu; this build was compiled against cuBLAS %d.%d (major %d)",
                 path, v / 10000, v / 100 % 100, v % 100, CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_MAJOR);
        LT_FAIL("cublasLtGetVersion", __LINE__);
    }
    return 0;
}

#define LT_CHECK(call)                                                                          \
    do {                                                                                        \
        cublasStatus_t s_ = (call);                                                             \
        if (s_ != CUBLAS_STATUS_SUCCESS) nsa_cuda_fail(#call, lt.cublasLtGetStatusString(s_), __FILE__, __LINE__); \
    } while (0)

static cublasLtHandle_t g_lt;
static void *g_ws;
static const size_t g_ws_bytes = 64u << 20;
// one workspace per lane (lane 0: g_ws), all of g_ws_bytes: a plan is made for that size, so a
// GEMM finds the same algorithm, hence the same bits, on every lane
static void *g_ws_lane[NSA_CUDA_MAX_LANES];

// (called by lanes_open, never while recording)
int nsa_cuda_gemm_lanes(int n) {
    int grew = 0;
    for (int l = 1; l < n && l < NSA_CUDA_MAX_LANES; l++) {
        if (g_ws_lane[l]) continue;
        cudaCheck(cudaMalloc(&g_ws_lane[l], g_ws_bytes));
        grew = 1;
    }
    return grew;
}
static void *lane_ws(void) {
    const int l = g_nsa_cuda.lane;
    if (l <= 0) return g_ws;
    if (!g_ws_lane[l]) nsa_cuda_fail("cublasLtMatmul", "a lane without its GEMM workspace (lanes_open first)", __FILE__, __LINE__);
    return g_ws_lane[l];
}

static double g_lt_secs[3];      // load, handle, workspace

// Returns 0, or -1 with g_lt_err filled.
static int lt_start(void) {
    double t = nsa_cuda_now();
    if (lt_load()) return -1;
    double t1 = nsa_cuda_now();
    g_lt_secs[0] = t1 - t;
    t = t1;
    cublasStatus_t st = lt.cublasLtCreate(&g_lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(g_lt_err.why, sizeof g_lt_err.why, "%s", lt.cublasLtGetStatusString(st));
        LT_FAIL("cublasLtCreate", __LINE__);
    }
    t1 = nsa_cuda_now();
    g_lt_secs[1] = t1 - t;
    t = t1;
    cudaError_t e = cudaMalloc(&g_ws, g_ws_bytes);
    if (e != cudaSuccess) {
        snprintf(g_lt_err.why, sizeof g_lt_err.why, "%s", cudaGetErrorString(e));
        LT_FAIL("cudaMalloc (cuBLASLt workspace)", __LINE__);
    }
    g_lt_secs[2] = nsa_cuda_now() - t;
    return 0;
}

// CUDA backend init (once, the backend's device current): load, handle, workspace, each part
// added to the start-up accounting; a failure ends the process with nsa_cuda_fail.
void nsa_cuda_gemm_init(void) {
    if (lt_start()) nsa_cuda_fail(g_lt_err.what, g_lt_err.why, __FILE__, g_lt_err.line);
    nsa_cuda_startup_add("cuBLASLt load (dlopen)", g_lt_secs[0]);
    nsa_cuda_startup_add("cuBLASLt handle", g_lt_secs[1]);
    nsa_cuda_startup_add("GEMM workspace", g_lt_secs[2]);
}

static int ptr_align(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int al = 256;
    while (al > 1 && (a % (uintptr_t)al)) al >>= 1;
    return al;
}

typedef std::array<int64_t, 14> PlanKey;
struct Plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};
static std::map<PlanKey, Plan> g_plans;
static double g_plan_secs;   // host time spent making plans (descriptors + heuristic query)
void nsa_cuda_gemm_plan_stats(int *plans, double *secs) {
    *plans = (int)g_plans.size();
    *secs = g_plan_secs;
}

static cudaDataType_t cuda_type(int dt) {
    return dt == NSA_DT_F32 ? CUDA_R_32F : dt == NSA_DT_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

// Column-major D[m,n] = alpha op(A)[m,k] op(B)[k,n] + beta C, D == C.
// ab_dt: type of A and B; c_dt: type of C/D (NSA_DT_F32 for fp32 outputs).
static void lt_matmul(int ab_dt, int c_dt, int ta, int tb, int m, int n, int k, const void *A, int64_t lda,
                      const void *B, int64_t ldb, float beta, void *C, int64_t ldc, const void *bias) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {   // empty inner dimension: D = beta C (+ bias, never used with k = 0)
        if (beta == 0.0f) {
            if (ldc == m) cudaCheck(cudaMemsetAsync(C, 0, (size_t)m * n * dt_bytes(c_dt), NSA_STREAM));
            else
                for (int j = 0; j < n; j++)
                    cudaCheck(cudaMemsetAsync((char *)C + (size_t)j * ldc * dt_bytes(c_dt), 0,
                                              (size_t)m * dt_bytes(c_dt), NSA_STREAM));
        }
        return;
    }
    PlanKey key = {{ab_dt, c_dt, ta, tb, m, n, k, lda, ldb, ldc, ptr_align(A), ptr_align(B), ptr_align(C),
                    bias ? ptr_align(bias) : 0}};
    auto it = g_plans.find(key);
    if (it == g_plans.end()) {
        // a shape first seen: never while recording a graph (the eager run before a recording
        // makes every plan it needs; one made here means the recording differs from it)
        NsaCapturePause pause_("a new cuBLASLt plan");
        const double t0 = nsa_cuda_now();
        Plan p;
        cudaDataType_t tab = cuda_type(ab_dt), tc = cuda_type(c_dt);
        LT_CHECK(lt.cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        if (bias) {
            cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
            LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        }
        // stored shapes (column-major): op(A) is m x k
        LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p.la, tab, ta ? k : m, ta ? m : k, lda));
        LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p.lb, tab, tb ? n : k, tb ? k : n, ldb));
        LT_CHECK(lt.cublasLtMatrixLayoutCreate(&p.lc, tc, m, n, ldc));
        cublasLtMatmulPreference_t pref;
        LT_CHECK(lt.cublasLtMatmulPreferenceCreate(&pref));
        uint64_t ws = g_ws_bytes;
        LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        uint32_t al[4] = {(uint32_t)ptr_align(A), (uint32_t)ptr_align(B), (uint32_t)ptr_align(C), (uint32_t)ptr_align(C)};
        LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al[0], 4));
        LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al[1], 4));
        LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al[2], 4));
        LT_CHECK(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al[3], 4));
        cublasLtMatmulHeuristicResult_t res;
        int nres = 0;
        LT_CHECK(lt.cublasLtMatmulAlgoGetHeuristic(g_lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &nres));
        LT_CHECK(lt.cublasLtMatmulPreferenceDestroy(pref));
        if (nres < 1) {
            char msg[256];
            snprintf(msg, sizeof msg, "no cuBLASLt algorithm for m=%d n=%d k=%d ta=%d tb=%d types %d/%d", m, n, k, ta, tb,
                     ab_dt, c_dt);
            nsa_cuda_fail("cublasLtMatmulAlgoGetHeuristic", msg, __FILE__, __LINE__);
        }
        p.algo = res.algo;
        it = g_plans.insert(std::make_pair(key, p)).first;
        g_plan_secs += nsa_cuda_now() - t0;
    }
    Plan &p = it->second;
    if (bias) LT_CHECK(lt.cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f;
    const cublasStatus_t st = lt.cublasLtMatmul(g_lt, p.desc, &alpha, A, p.la, B, p.lb, &beta, C, p.lc, C, p.lc, &p.algo,
                                                lane_ws(), g_ws_bytes, NSA_STREAM);
    if (st != CUBLAS_STATUS_SUCCESS) {
        // while recording, a capture that went wrong underneath (its launch error pending) spoils
        // the recording instead of ending the process
        const cudaError_t ce = cudaPeekAtLastError();
        if (!(ce != cudaSuccess && nsa_cuda_capture_error(ce, "cublasLtMatmul")))
            nsa_cuda_fail("cublasLtMatmul", lt.cublasLtGetStatusString(st), __FILE__, __LINE__);
    }
    CUDA_LAUNCHED();
}

// out[M,N] = inp[M,K] · w[N,K]^T (+ bias): column-major out^T[N,M] = w^T... i.e.
// m = N, n = M, k = K, A = w (stored K x N, op T), B = inp (stored K x M, op N).
extern "C" void nsa_cuda_matmul_fwd(int dt, void *out, int64_t ldo, const void *inp, int64_t ldi, const void *w,
                                    const void *bias, int M, int N, int K) {
    const void *wl = nsa_cuda_weight(dt, w, (int64_t)N * K, SCR_WCOPY);
    const void *bl = bias ? nsa_cuda_weight(dt, bias, N, SCR_BCOPY) : NULL;
    lt_matmul(dt, dt, 1, 0, N, M, K, wl, K, inp, ldi, 0.0f, out, ldo, bl);
}

extern "C" void nsa_cuda_matmul_bwd(int dt, void *dinp, void *dw, void *dbias, const void *dout, const void *inp,
                                    const void *w, int M, int N, int K, int dinp_accumulate) {
    // dinp[M,K] = dout[M,N] · w[N,K]: column-major dinp^T[K,M] = w^T[K,N] · dout^T[N,M]
    if (dinp) {
        const void *wl = nsa_cuda_weight(dt, w, (int64_t)N * K, SCR_WCOPY);
        lt_matmul(dt, dt, 0, 0, K, M, N, wl, K, dout, N, dinp_accumulate ? 1.0f : 0.0f, dinp, K, NULL);
    }
    // dw[N,K] += dout^T · inp: column-major dw^T[K,N] = inp^T[K,M] · dout[M,N]
    // (a misaligned dW slice of the gradient buffer goes through an aligned scratch:
    // two small copies instead of cuBLASLt's slow unaligned kernels)
    if (dw) {
        if ((uintptr_t)dw & 15) {
            const size_t bytes = (size_t)N * K * 4;
            void *tmp = nsa_cuda_scratch(SCR_DW, bytes);
            cudaCheck(cudaMemcpyAsync(tmp, dw, bytes, cudaMemcpyDeviceToDevice, NSA_STREAM));
            lt_matmul(dt, NSA_DT_F32, 0, 1, K, N, M, inp, K, dout, N, 1.0f, tmp, K, NULL);
            cudaCheck(cudaMemcpyAsync(dw, tmp, bytes, cudaMemcpyDeviceToDevice, NSA_STREAM));
        } else {
            lt_matmul(dt, NSA_DT_F32, 0, 1, K, N, M, inp, K, dout, N, 1.0f, dw, K, NULL);
        }
    }
    if (dbias) nsa_cuda_colsum_acc(dt, (float *)dbias, dout, M, N);
}
