// common/safetensors.h — read and write safetensors files.
//
// Format: 8-byte little-endian header length N, N bytes of JSON header
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// then the raw little-endian tensor bytes (offsets relative to the data start).
// PyTorch's `safetensors.torch.load_file` reads what this writes. The header goes
// through Jansson. Supported dtypes: F64, F32, F16, BF16, I64, I32, U16, U8.
#ifndef NSA_COMMON_SAFETENSORS_H
#define NSA_COMMON_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

typedef enum { ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_U16, ST_U8 } StDtype;

#define ST_MAX_DIMS 8
typedef struct {
    char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    void *data;        // owned by the file object (reader) / borrowed (writer)
    size_t nbytes;
} StTensor;

typedef struct {
    StTensor *tensors; int n_tensors, cap;
    char **meta_keys, **meta_vals; int n_meta, meta_cap;
    void *blob;        // reader: the whole data section
} StFile;

size_t st_dtype_size(StDtype dt);
const char *st_dtype_name(StDtype dt);
// Element i of a tensor as a double (every dtype, 16-bit floats decoded exactly).
double st_elem_f64(const StTensor *t, size_t i);

// Writer: add tensors (data borrowed until st_write returns) and metadata, then write.
void st_init(StFile *f);
void st_add(StFile *f, const char *name, StDtype dt, int ndim, const int64_t *shape, const void *data);
void st_add_meta(StFile *f, const char *key, const char *val);
// Writes atomically (path.tmp then rename). Returns 0, or -1 with err filled and
// errno set: the failing system call's error when the file could not be created,
// written, flushed, fsync'ed, closed or renamed (ENOSPC on a full disk), 0 when
// nothing was written for another reason (an invalid tensor or name, out of memory).
int st_write(const StFile *f, const char *path, char *err, size_t errlen);

// Reader: whole file into memory. Returns 0, or -1 with err ("path: why").
int st_read(StFile *f, const char *path, char *err, size_t errlen);
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);   // NULL if absent
void st_free(StFile *f);
#endif
