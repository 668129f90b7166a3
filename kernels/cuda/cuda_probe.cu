// kernels/cuda/cuda_probe.cu — what CUDA devices this process can use.
//
// Built whenever the CUDA toolkit is present (also in CI, which has nvcc but no
// GPU), so the CUDA toolchain path is compiled and linked on every commit.
// The CUDA op backend itself lives in cuda_backend.cu. nsa_cuda_env_json (below)
// gives nsa-train --print-env its "cuda" section.
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

// ---- nsa-train --print-env: the "cuda" section as JSON text ----------------------------
//
// Fills buf with {"runtime": "12.4", "driver": "12.4", "devices": [{"index", "name",
// "uuid", "memory_bytes", "sm", "sm_count"}], "cublas": "12.4.5" | null} and returns the
// number of devices; returns 0 with a plain-text reason in buf when no device is
// usable. cuBLAS is queried through dlopen (cublasGetProperty), so this file needs
// no link against cuBLAS: "cublas" is null when the library cannot be loaded.
#include <dlfcn.h>

// JSON string body (quotes and backslashes escaped, control characters dropped)
static size_t json_escape(char *dst, size_t n, const char *s) {
    size_t k = 0;
    for (; *s && k + 2 < n; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20) continue;
        if (c == '"' || c == '\\') dst[k++] = '\\';
        dst[k++] = (char)c;
    }
    if (n) dst[k < n ? k : n - 1] = 0;
    return k;
}

static void cublas_version(char *out, size_t n) {
    static const char *libs[] = {"libcublas.so", "libcublas.so.13", "libcublas.so.12", "libcublas.so.11"};
    snprintf(out, n, "null");
    for (const char *lib : libs) {
        void *h = dlopen(lib, RTLD_LAZY | RTLD_LOCAL);
        if (!h) continue;
        typedef int (*GetProperty)(int, int *);   // cublasGetProperty(libraryPropertyType, int *)
        GetProperty get = (GetProperty)dlsym(h, "cublasGetProperty");
        int v[3] = {0, 0, 0};
        if (get && get(0, &v[0]) == 0 && get(1, &v[1]) == 0 && get(2, &v[2]) == 0)
            snprintf(out, n, "\"%d.%d.%d\"", v[0], v[1], v[2]);
        dlclose(h);
        if (get) return;
    }
}

extern "C" int nsa_cuda_env_json(char *buf, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        snprintf(buf, n, "no usable CUDA device: %s", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    int rt = 0, drv = 0;
    cudaRuntimeGetVersion(&rt);
    cudaDriverGetVersion(&drv);
    char cublas[64];
    cublas_version(cublas, sizeof cublas);
    size_t used = (size_t)snprintf(buf, n, "{\"runtime\": \"%d.%d\", \"driver\": \"%d.%d\", \"cublas\": %s, \"devices\": [",
                                   rt / 1000, (rt % 1000) / 10, drv / 1000, (drv % 1000) / 10, cublas);
    for (int i = 0; i < count && used < n; i++) {
        cudaDeviceProp p;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
        char name[512], uuid[64];
        json_escape(name, sizeof name, p.name);
        const unsigned char *u = (const unsigned char *)p.uuid.bytes;
        snprintf(uuid, sizeof uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                 u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        used += (size_t)snprintf(buf + used, n - used,
                                 "%s{\"index\": %d, \"name\": \"%s\", \"uuid\": \"%s\", \"memory_bytes\": %zu, "
                                 "\"sm\": \"sm_%d%d\", \"sm_count\": %d}",
                                 i ? ", " : "", i, name, uuid, (size_t)p.totalGlobalMem, p.major, p.minor,
                                 p.multiProcessorCount);
    }
    if (used < n) used += (size_t)snprintf(buf + used, n - used, "]}");
    if (used >= n) {
        snprintf(buf, n, "device description longer than %zu bytes", n);
        return 0;
    }
    return count;
}
