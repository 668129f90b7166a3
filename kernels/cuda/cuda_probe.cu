// kernels/cuda/cuda_probe.cu — what CUDA devices this process can use.
//
// Built whenever the CUDA toolkit is present (also in CI, which has nvcc but no
// GPU), so the CUDA toolchain path is compiled and linked on every commit.
// The CUDA op backend itself lives in cuda_backend.cu.
#include <cuda_runtime.h>
#include <stdio.h>
#include "kernels/ops.h"

extern "C" int nsa_cuda_describe(char *buf, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        snprintf(buf, n, "no usable CUDA device: %s", cudaGetErrorString(e));
        return 0;
    }
    size_t used = 0;
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    used += (size_t)snprintf(buf + used, n - used, "CUDA runtime %d.%d, driver %d.%d, %d device(s)", rt / 1000,
                             (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10, count);
    for (int i = 0; i < count && used < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        used += (size_t)snprintf(buf + used, n - used, "; %d: %s (sm_%d%d, %.1f GiB, %d SMs)", i, p.name, p.major,
                                 p.minor, (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount);
    }
    return count;
}
