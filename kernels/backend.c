// kernels/backend.c — backend lookup by name.
#include <string.h>
#include "ops.h"

extern const Backend cpu_backend_f32;
extern const Backend cpu_backend_f64;
#ifdef NSA_HAVE_CUDA
extern const Backend *cuda_backend_get(const char **why);
#endif

const Backend *backend_get(const char *name, const char **why) {
    if (why) *why = NULL;
    if (!name || !strcmp(name, "cpu")) return &cpu_backend_f32;
    if (!strcmp(name, "cpu64")) return &cpu_backend_f64;
    if (!strcmp(name, "cuda")) {
#ifdef NSA_HAVE_CUDA
        return cuda_backend_get(why);
#else
        if (why) *why = "this build has no CUDA backend (CUDA toolkit not found at configure time)";
        return NULL;
#endif
    }
    if (why) *why = "unknown backend (known: cpu, cpu64, cuda)";
    return NULL;
}
