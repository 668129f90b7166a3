// kernels/backend.c — backend lookup by name.
#include <string.h>
#include "ops.h"

extern const Backend cpu_backend_f32;
extern const Backend cpu_backend_f64;
#ifdef NSA_HAVE_CUDA
extern const Backend *cuda_backend_get(const char *precision, const char **why);
#endif

static int is(const char *precision, const char *want) { return !precision || !strcmp(precision, want); }

const Backend *backend_get(const char *name, const char *precision, const char **why) {
    if (why) *why = NULL;
    if (!name || !strcmp(name, "cpu") || !strcmp(name, "cpu64")) {
        int f64 = name && !strcmp(name, "cpu64");
        if (is(precision, f64 ? "fp64" : "fp32")) return f64 ? &cpu_backend_f64 : &cpu_backend_f32;
        if (why) *why = "the CPU backends compute in fp32 (cpu) or fp64 (cpu64) only";
        return NULL;
    }
    if (!strcmp(name, "cuda")) {
#ifdef NSA_HAVE_CUDA
        return cuda_backend_get(precision, why);
#else
        if (why) *why = "this build has no CUDA backend (CUDA toolkit not found at configure time)";
        return NULL;
#endif
    }
    if (why) *why = "unknown backend (known: cpu, cpu64, cuda)";
    return NULL;
}
