// tests/fuzz/fuzz_safetensors.c — libFuzzer target: the safetensors reader
// (common/safetensors.c st_read: header length, the JSON header, dtypes, shapes,
// data offsets that must tile the data section) and what callers then do with a
// file it accepted: look tensors up by name, read metadata, decode every element
// with st_elem_f64 (the harness's tensordiff and baselines do).
// Input: the file's bytes.
#include "tests/fuzz/fuzz_common.h"
#include "common/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static char path[600];
    if (!path[0]) snprintf(path, sizeof path, "%s/in.safetensors", fuzz_tmpdir());
    fuzz_write(path, data, size);
    StFile f;
    char err[1024];
    if (st_read(&f, path, err, sizeof err) != 0) {
        if (!err[0]) {
            fprintf(stderr, "fuzz_safetensors: st_read failed without a message\n");
            abort();
        }
        return 0;
    }
    volatile double sink = 0;
    for (int i = 0; i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        if (st_find(&f, t->name) == NULL) {
            fprintf(stderr, "fuzz_safetensors: tensor '%s' is listed but st_find misses it\n", t->name);
            abort();
        }
        // the element count the shape gives must be what the bytes hold
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        if (n * st_dtype_size(t->dtype) != t->nbytes) {
            fprintf(stderr, "fuzz_safetensors: tensor '%s': %zu elements of %zu bytes, but %zu bytes\n", t->name, n,
                    st_dtype_size(t->dtype), t->nbytes);
            abort();
        }
        for (size_t k = 0; k < n; k++) sink += st_elem_f64(t, k);
        (void)st_dtype_name(t->dtype);
    }
    (void)st_meta(&f, "format");
    (void)sink;
    st_free(&f);
    return 0;
}
