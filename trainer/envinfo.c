// trainer/envinfo.c — `nsa-train --print-env`: what this build and host are.
//
// build   git sha + dirty flag of the source tree at BUILD time (regenerated on
//         every build by cmake/build_info.cmake into nsa_build_info.h, rewritten
//         only when it changes), build type, compiler, flags, the CPU kernels'
//         instruction set (kernel_isa) and the C library, CUDA on/off
// cuda    runtime/driver versions, devices, cuBLAS version (kernels/cuda/
//         cuda_probe.cu); null without a CUDA build or without a usable device
// nccl, mpi  NCCL version and MPI library (first line), null when not built
// host    hostname, kernel, CPU model, cores, memory
// env     every NSA_*, NCCL_*, CUDA_*, OMPI_*, OMP_* variable
// config  (with --config) name, digest, seed, backend, precision
#define _DEFAULT_SOURCE   // gethostname, environ
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "nsa_build_info.h"   // generated: NSA_BUILD_GIT_SHA, NSA_BUILD_GIT_DIRTY
#include "common/util.h"
#include "trainer/comm.h"
#include "trainer/envinfo.h"
#include "kernels/ops.h"
#ifdef __GLIBC__
#include <gnu/libc-version.h>
#endif

#ifndef NSA_BUILD_TYPE
#define NSA_BUILD_TYPE "unknown"
#endif
#ifndef NSA_C_COMPILER
#define NSA_C_COMPILER "unknown"
#endif
#ifndef NSA_C_FLAGS
#define NSA_C_FLAGS ""
#endif
#ifndef NSA_KERNEL_FLAGS
#define NSA_KERNEL_FLAGS ""
#endif

#ifdef NSA_HAVE_CUDA
int nsa_cuda_env_json(char *buf, size_t n);   // kernels/cuda/cuda_probe.cu
#endif

extern char **environ;

static const char *libc_version(void) {
#ifdef __GLIBC__
    static char v[32];
    snprintf(v, sizeof v, "glibc %s", gnu_get_libc_version());
    return v;
#else
    return "unknown";
#endif
}

static json_t *build_section(void) {
    json_t *b = json_object();
    json_object_set_new(b, "git_sha", json_string(NSA_BUILD_GIT_SHA));
    json_object_set_new(b, "git_dirty", NSA_BUILD_GIT_DIRTY < 0 ? json_null() : json_boolean(NSA_BUILD_GIT_DIRTY));
    json_object_set_new(b, "build_type", json_string(NSA_BUILD_TYPE));
    json_object_set_new(b, "c_compiler", json_string(NSA_C_COMPILER));
    json_object_set_new(b, "c_flags", json_string(NSA_C_FLAGS));
    json_object_set_new(b, "kernel_flags", json_string(NSA_KERNEL_FLAGS));
    // what the CPU kernels were compiled for, and the C library whose libm they call:
    // with the compiler and flags, what decides whether two builds agree bitwise
    json_object_set_new(b, "kernel_isa", json_string(nsa_cpu_kernel_isa()));
    json_object_set_new(b, "libc", json_string(libc_version()));
#ifdef NSA_HAVE_CUDA
    json_object_set_new(b, "cuda_enabled", json_true());
#else
    json_object_set_new(b, "cuda_enabled", json_false());
#endif
#ifdef _OPENMP
    json_object_set_new(b, "openmp", json_integer(_OPENMP));
#else
    json_object_set_new(b, "openmp", json_null());
#endif
    return b;
}

// The "cuda" section, or null with the reason in why (why[0] == 0: no CUDA build).
static json_t *cuda_section(char *why, size_t whylen) {
    why[0] = 0;
#ifdef NSA_HAVE_CUDA
    char *buf = xmalloc(1 << 16);
    int n = nsa_cuda_env_json(buf, 1 << 16);
    json_t *c = NULL;
    if (n > 0) {
        json_error_t e;
        c = json_loads(buf, 0, &e);
        if (!c) snprintf(why, whylen, "cuda_probe gave invalid JSON: %s", e.text);
    } else {
        snprintf(why, whylen, "%s", buf);   // why there is no device
    }
    free(buf);
    return c ? c : json_null();
#else
    (void)whylen;
    return json_null();
#endif
}

// first "model name" line of /proc/cpuinfo
static json_t *cpu_model(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return json_null();
    char line[512];
    json_t *r = json_null();
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10)) continue;
        char *c = strchr(line, ':');
        if (!c) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        json_decref(r);
        r = json_string(c);
        break;
    }
    fclose(f);
    return r;
}

static json_t *host_section(void) {
    json_t *h = json_object();
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    json_object_set_new(h, "hostname", json_string(name));
    struct utsname u;
    if (uname(&u) == 0) {
        char k[600];
        snprintf(k, sizeof k, "%s %s %s", u.sysname, u.release, u.version);
        json_object_set_new(h, "kernel", json_string(k));
        json_object_set_new(h, "machine", json_string(u.machine));
    }
    json_object_set_new(h, "cpu_model", cpu_model());
    json_object_set_new(h, "cores", json_integer(sysconf(_SC_NPROCESSORS_ONLN)));
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    json_object_set_new(h, "memory_bytes", pages > 0 && psz > 0 ? json_integer((json_int_t)pages * psz) : json_null());
    return h;
}

static json_t *env_section(void) {
    static const char *prefixes[] = {"NSA_", "NCCL_", "CUDA_", "OMPI_", "OMP_"};
    json_t *e = json_object();
    for (char **p = environ; p && *p; p++) {
        const char *eq = strchr(*p, '=');
        if (!eq) continue;
        int want = 0;
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
            if (!strncmp(*p, prefixes[i], strlen(prefixes[i]))) want = 1;
        if (!want) continue;
        char key[256];
        size_t kl = (size_t)(eq - *p) < sizeof key - 1 ? (size_t)(eq - *p) : sizeof key - 1;
        memcpy(key, *p, kl);
        key[kl] = 0;
        json_object_set_new(e, key, json_string(eq + 1));
    }
    return e;
}

char *envinfo_json(const NsaConfig *cfg) {
    json_t *root = json_object();
    json_object_set_new(root, "build", build_section());
    char why[512];
    json_object_set_new(root, "cuda", cuda_section(why, sizeof why));
    if (why[0]) json_object_set_new(root, "cuda_error", json_string(why));   // CUDA build, no usable device
    // Data parallel (trainer/comm.c): the NCCL version (ncclGetVersion) and the first
    // line of MPI_Get_library_version this binary runs with; null when not built.
    char ver[512];
    json_object_set_new(root, "nccl", comm_nccl_version(ver, sizeof ver) ? json_null() : json_string(ver));
    json_object_set_new(root, "mpi", comm_mpi_version(ver, sizeof ver) ? json_null() : json_string(ver));
    json_object_set_new(root, "host", host_section());
    json_object_set_new(root, "env", env_section());
    if (cfg) {
        json_t *c = json_object();
        json_object_set_new(c, "name", json_string(cfg->name));
        json_object_set_new(c, "source", json_string(cfg->source));
        json_object_set_new(c, "digest", json_string(cfg->digest));
        json_object_set_new(c, "seed", json_integer((json_int_t)cfg->seed));
        json_object_set_new(c, "backend", json_string(cfg->backend));
        json_object_set_new(c, "precision", json_string(cfg->precision));
        json_object_set_new(root, "config", c);
    }
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}
