// kernels/cuda/cuda_backend.cu — the CUDA op table (issue 4).
// Until the kernels exist, cuda_backend_get says so instead of returning a table.
#include "kernels/ops.h"

extern "C" const Backend *cuda_backend_get(const char *precision, const char **why) {
    (void)precision;
    if (why) *why = "the CUDA op backend is not implemented yet (CUDA toolkit found; device probe only)";
    return NULL;
}
