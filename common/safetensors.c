// common/safetensors.c — safetensors reader and writer (contract: safetensors.h).
//
// Layout written: u64 LE header length N | N bytes of compact JSON padded with
// spaces to a multiple of 8 (as the reference implementation does, so the data
// section starts 8-aligned for mmap readers) | tensor bytes, contiguous, in the
// order the tensors were added. Header keys: "__metadata__" first (only when
// there is metadata), then the tensors in insertion order, so the same calls
// give byte-identical files.
//
// Writing is atomic: path.tmp is written, fsync'ed and renamed over path, then
// the directory is fsync'ed (best effort), so a killed run leaves either the old
// file or the new one, never a torn one.
//
// Reading is strict: every structural property the format promises is checked
// and reported as "path: why" — a checkpoint that loads is one whose tensors
// exactly tile the data section. Nothing in a malformed file can make the reader
// index out of bounds: sizes are checked for overflow before any arithmetic is
// trusted.
//
// Alignment: the data pointers handed out are always aligned for their dtype.
// Files where some tensor's offset is not a multiple of its element size (legal
// in the format; our writer produces them when e.g. an odd-length U8 tensor
// precedes an F32 one) are repacked on load: blob then holds every tensor at an
// 8-aligned position rather than the verbatim data section.
#define _POSIX_C_SOURCE 200809L
#include "common/safetensors.h"
#include "common/util.h"   // xrealloc, xstrdup (abort on OOM: st_add has no error channel), set_err

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// Tensor bytes go to and from disk with memcpy/fwrite: only right on a
// little-endian host. Refuse to build elsewhere rather than write wrong files.
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

// The reference implementation refuses headers over 100 MB; a larger length is
// a corrupt prefix, not a real header, and must not drive a huge allocation.
#define ST_MAX_HEADER ((uint64_t)100 * 1000 * 1000)

static const struct { const char *name; size_t size; } DTYPES[] = {
    [ST_F64] = {"F64", 8}, [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4},
    [ST_U16] = {"U16", 2},  [ST_U8] = {"U8", 1},
};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))

size_t st_dtype_size(StDtype dt) {
    return (unsigned)dt < (unsigned)N_DTYPES ? DTYPES[dt].size : 0;
}

static double half_to_f64(uint16_t h) {
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m | 0x400, e - 25);
    return h & 0x8000 ? -v : v;
}

double st_elem_f64(const StTensor *t, size_t i) {
    const unsigned char *p = (const unsigned char *)t->data + i * st_dtype_size(t->dtype);
    switch (t->dtype) {
    case ST_F64: { double v; memcpy(&v, p, 8); return v; }
    case ST_F32: { float v; memcpy(&v, p, 4); return v; }
    case ST_F16: { uint16_t v; memcpy(&v, p, 2); return half_to_f64(v); }
    case ST_BF16: { uint16_t v; memcpy(&v, p, 2); uint32_t u = (uint32_t)v << 16; float f; memcpy(&f, &u, 4); return f; }
    case ST_I64: { int64_t v; memcpy(&v, p, 8); return (double)v; }
    case ST_I32: { int32_t v; memcpy(&v, p, 4); return v; }
    case ST_U16: { uint16_t v; memcpy(&v, p, 2); return v; }
    case ST_U8: return *p;
    }
    return NAN;
}

const char *st_dtype_name(StDtype dt) {
    return (unsigned)dt < (unsigned)N_DTYPES ? DTYPES[dt].name : "?";
}

static int dtype_from_name(const char *s) {
    for (int i = 0; i < N_DTYPES; i++)
        if (strcmp(s, DTYPES[i].name) == 0) return i;
    return -1;
}

// Bytes of a tensor of this dtype and shape; -1 when the dtype or ndim is out of
// range, a dimension is negative, or the size overflows size_t/int64.
static int tensor_nbytes(int dt, int ndim, const int64_t *shape, size_t *out) {
    if (dt < 0 || dt >= N_DTYPES || ndim < 0 || ndim > ST_MAX_DIMS) return -1;
    uint64_t n = DTYPES[dt].size;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        uint64_t d = (uint64_t)shape[i];
        if (d != 0 && n > (uint64_t)INT64_MAX / d) return -1;
        n *= d;
    }
    if (n > SIZE_MAX) return -1;
    *out = (size_t)n;
    return 0;
}

void st_init(StFile *f) { memset(f, 0, sizeof *f); }

void st_add(StFile *f, const char *name, StDtype dt, int ndim, const int64_t *shape,
            const void *data) {
    if (f->n_tensors == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        f->tensors = xrealloc(f->tensors, (size_t)f->cap * sizeof *f->tensors);
    }
    StTensor *t = &f->tensors[f->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->dtype = dt;
    // An out-of-range ndim is kept as given so st_write can report it; only the
    // dimensions that fit are copied.
    t->ndim = ndim;
    for (int i = 0; i < ndim && i < ST_MAX_DIMS; i++) t->shape[i] = shape[i];
    t->data = (void *)data;   // borrowed until st_write returns
    if (tensor_nbytes((int)dt, ndim, t->shape, &t->nbytes) != 0) t->nbytes = 0;
}

// A repeated key replaces its value: metadata is a map, last write wins.
void st_add_meta(StFile *f, const char *key, const char *val) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) {
            free(f->meta_vals[i]);
            f->meta_vals[i] = xstrdup(val);
            return;
        }
    if (f->n_meta == f->meta_cap) {
        f->meta_cap = f->meta_cap ? 2 * f->meta_cap : 8;
        f->meta_keys = xrealloc(f->meta_keys, (size_t)f->meta_cap * sizeof *f->meta_keys);
        f->meta_vals = xrealloc(f->meta_vals, (size_t)f->meta_cap * sizeof *f->meta_vals);
    }
    f->meta_keys[f->n_meta] = xstrdup(key);
    f->meta_vals[f->n_meta] = xstrdup(val);
    f->n_meta++;
}

// Builds the header object; -1 with err on an invalid tensor (bad dtype/shape,
// NULL data for a non-empty tensor, reserved or duplicate name, invalid UTF-8).
static json_t *build_header(const StFile *f, const char *path, char *err, size_t errlen) {
    json_t *root = json_object();
    if (!root) goto oom;
    if (f->n_meta > 0) {
        json_t *meta = json_object();
        if (!meta || json_object_set_new(root, "__metadata__", meta) != 0) goto oom;
        for (int i = 0; i < f->n_meta; i++) {
            json_t *v = json_string(f->meta_vals[i]);
            if (!v || json_object_set_new(meta, f->meta_keys[i], v) != 0) {
                set_err(err, errlen, "%s: metadata '%s' is not valid UTF-8", path,
                        f->meta_keys[i]);
                json_decref(root);
                return NULL;
            }
        }
    }
    uint64_t off = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const StTensor *t = &f->tensors[i];
        size_t nb;
        const char *why = NULL;
        if (tensor_nbytes((int)t->dtype, t->ndim, t->shape, &nb) != 0)
            why = "invalid dtype, ndim or shape";
        else if (nb > 0 && !t->data)
            why = "no data";
        else if (strcmp(t->name, "__metadata__") == 0)
            why = "name is reserved";
        else if (json_object_get(root, t->name))
            why = "duplicate name";
        if (why) {
            set_err(err, errlen, "%s: tensor '%s': %s", path, t->name, why);
            json_decref(root);
            return NULL;
        }
        json_t *shape = json_array();
        for (int d = 0; shape && d < t->ndim; d++)
            if (json_array_append_new(shape, json_integer((json_int_t)t->shape[d])) != 0) {
                json_decref(shape);
                shape = NULL;
            }
        // "o" steals shape, also when packing fails (and fails on a NULL shape).
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", DTYPES[t->dtype].name, "shape",
                              shape, "data_offsets", (json_int_t)off, (json_int_t)(off + nb));
        if (!e) goto oom;
        // Fails on a name that is not valid UTF-8 (allocation is the other cause).
        if (json_object_set_new(root, t->name, e) != 0) {
            set_err(err, errlen, "%s: tensor name '%s' is not valid UTF-8", path, t->name);
            json_decref(root);
            return NULL;
        }
        off += nb;
    }
    return root;
oom:
    set_err(err, errlen, "%s: out of memory building the header", path);
    json_decref(root);
    return NULL;
}

static int write_all(FILE *fp, const void *p, size_t n) {
    return n == 0 || fwrite(p, 1, n, fp) == n ? 0 : -1;
}

int st_write(const StFile *f, const char *path, char *err, size_t errlen) {
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp) {
        set_err(err, errlen, "%s: path too long", path);
        return -1;
    }
    json_t *root = build_header(f, path, err, errlen);
    if (!root) { errno = 0; return -1; }
    char *hdr = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!hdr) {
        set_err(err, errlen, "%s: out of memory serialising the header", path);
        errno = 0;
        return -1;
    }
    size_t hlen = strlen(hdr), padded = (hlen + 7) / 8 * 8;
    uint64_t n = padded;   // little-endian host: the in-memory bytes are the file's

    int rc = -1, e = 0;
    FILE *fp = fopen(tmp, "wb");
    if (!fp) {
        e = errno;
        set_err(err, errlen, "%s: cannot create %s: %s", path, tmp, strerror(e));
        free(hdr);
        errno = e;
        return -1;
    }
    static const char spaces[8] = "        ";
    int bad = write_all(fp, &n, 8) || write_all(fp, hdr, hlen) ||
              write_all(fp, spaces, padded - hlen);
    for (int i = 0; !bad && i < f->n_tensors; i++)
        bad = write_all(fp, f->tensors[i].data, f->tensors[i].nbytes);
    if (bad || fflush(fp) != 0 || fsync(fileno(fp)) != 0) {
        e = errno ? errno : EIO;
        set_err(err, errlen, "%s: writing %s: %s", path, tmp, strerror(e));
        fclose(fp);
    } else if (fclose(fp) != 0) {
        e = errno ? errno : EIO;
        set_err(err, errlen, "%s: closing %s: %s", path, tmp, strerror(e));
    } else if (rename(tmp, path) != 0) {
        e = errno;
        set_err(err, errlen, "%s: renaming %s: %s", path, tmp, strerror(e));
    } else {
        rc = 0;
    }
    free(hdr);
    if (rc != 0) {
        unlink(tmp);
        errno = e;   // the failing call's errno, for the caller's [IO-ERROR] line
        return -1;
    }
    // Make the rename itself durable. Best effort: some filesystems refuse to
    // fsync a directory, and the file's contents are already on disk.
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    int dfd = open(dir, O_RDONLY);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    return 0;
}

void st_free(StFile *f) {
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) {
        free(f->meta_keys[i]);
        free(f->meta_vals[i]);
    }
    free(f->meta_keys);
    free(f->meta_vals);
    free(f->blob);
    st_init(f);
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i].name, name) == 0) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_keys[i], key) == 0) return f->meta_vals[i];
    return NULL;
}

// ---- reader -----------------------------------------------------------------------

typedef struct { int64_t begin, end; int idx; } Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

// A JSON integer in [0, max], else -1.
static int64_t json_nonneg(const json_t *v, int64_t max) {
    if (!json_is_integer(v)) return -1;
    json_int_t x = json_integer_value(v);
    return x < 0 || x > max ? -1 : (int64_t)x;
}

// Parses one tensor entry into t (name already set); dsize is the data section
// size. Returns NULL or a static description of what is wrong.
static const char *parse_entry(const json_t *e, StTensor *t, int64_t dsize, int64_t *begin,
                               int64_t *end) {
    if (!json_is_object(e)) return "entry is not an object";
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)e, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return "unknown key in entry (expected dtype, shape, data_offsets)";
    }
    const json_t *dt = json_object_get(e, "dtype");
    const json_t *shape = json_object_get(e, "shape");
    const json_t *offs = json_object_get(e, "data_offsets");
    if (!dt || !shape || !offs) return "entry needs dtype, shape and data_offsets";
    int d = json_is_string(dt) ? dtype_from_name(json_string_value(dt)) : -1;
    if (d < 0) return "unknown dtype (supported: F64 F32 F16 BF16 I64 I32 U16 U8)";
    t->dtype = (StDtype)d;
    if (!json_is_array(shape)) return "shape is not a list of non-negative integers";
    if (json_array_size(shape) > ST_MAX_DIMS) return "shape has more than 8 dimensions";
    t->ndim = (int)json_array_size(shape);
    for (int i = 0; i < t->ndim; i++) {
        t->shape[i] = json_nonneg(json_array_get(shape, (size_t)i), INT64_MAX);
        if (t->shape[i] < 0) return "shape is not a list of non-negative integers";
    }
    if (!json_is_array(offs) || json_array_size(offs) != 2)
        return "data_offsets is not [begin, end]";
    *begin = json_nonneg(json_array_get(offs, 0), dsize);
    *end = json_nonneg(json_array_get(offs, 1), dsize);
    if (*begin < 0 || *end < 0 || *begin > *end)
        return "data_offsets is not [begin, end] with 0 <= begin <= end <= data size";
    if (tensor_nbytes(d, t->ndim, t->shape, &t->nbytes) != 0 ||
        t->nbytes != (uint64_t)(*end - *begin))
        return "data_offsets size does not match dtype size x product(shape)";
    return NULL;
}

// Stage 1: the 8-byte length and the JSON header, checked against the file's size.
// Returns the header object (the caller json_decref()s it) and the data section's
// size in *dsize, or NULL with err.
static json_t *read_header(FILE *fp, const char *path, int64_t *dsize, char *err, size_t errlen) {
    struct stat sb;
    if (fstat(fileno(fp), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        set_err(err, errlen, "%s: not a regular file", path);
        return NULL;
    }
    int64_t fsize = (int64_t)sb.st_size;
    unsigned char lenb[8];
    if (fsize < 8 || fread(lenb, 1, 8, fp) != 8) {
        set_err(err, errlen, "%s: file is %lld bytes, shorter than the 8-byte header length",
                path, (long long)fsize);
        return NULL;
    }
    uint64_t hlen;
    memcpy(&hlen, lenb, 8);
    if (hlen > ST_MAX_HEADER) {
        set_err(err, errlen,
                "%s: header length %llu is absurd (limit %llu): not a safetensors file?", path,
                (unsigned long long)hlen, (unsigned long long)ST_MAX_HEADER);
        return NULL;
    }
    if (hlen > (uint64_t)(fsize - 8)) {
        set_err(err, errlen, "%s: header length %llu runs past the end of the file (%lld bytes)",
                path, (unsigned long long)hlen, (long long)fsize);
        return NULL;
    }
    char *hdr = xrealloc(NULL, (size_t)hlen);
    if (fread(hdr, 1, (size_t)hlen, fp) != (size_t)hlen) {
        set_err(err, errlen, "%s: cannot read the header: %s", path,
                ferror(fp) ? strerror(errno) : "unexpected end of file");
        free(hdr);
        return NULL;
    }
    json_error_t jerr;
    json_t *root = json_loadb(hdr, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    free(hdr);
    if (!root) {
        set_err(err, errlen, "%s: invalid JSON header at line %d col %d: %s", path, jerr.line,
                jerr.column, jerr.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        set_err(err, errlen, "%s: header is not a JSON object", path);
        json_decref(root);
        return NULL;
    }
    *dsize = fsize - 8 - (int64_t)hlen;
    return root;
}

// Stage 2: every header entry, in file order: __metadata__ into f's metadata, each
// tensor into f->tensors (data not set yet) with its byte range in spans[i]
// (room for every entry). 0, or -1 with err.
static int parse_entries(StFile *f, json_t *root, int64_t dsize, Span *spans, const char *path,
                         char *err, size_t errlen) {
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                set_err(err, errlen, "%s: __metadata__ is not an object", path);
                return -1;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    set_err(err, errlen, "%s: metadata '%s' is not a string", path, mk);
                    return -1;
                }
                st_add_meta(f, mk, json_string_value(mv));
            }
            continue;
        }
        StTensor *t = &f->tensors[f->n_tensors];
        memset(t, 0, sizeof *t);
        t->name = xstrdup(key);
        f->n_tensors++;   // counted before parsing so st_free releases the name
        Span *s = &spans[f->n_tensors - 1];
        s->idx = f->n_tensors - 1;
        const char *why = parse_entry(val, t, dsize, &s->begin, &s->end);
        if (why) {
            set_err(err, errlen, "%s: tensor '%s': %s", path, key, why);
            return -1;
        }
    }
    return 0;
}

// Stage 3: the tensors must tile the data section exactly: sorted by offset, each
// begins where the previous one ended, and the last ends at the file's end. Sorts
// spans; *aligned: every tensor starts at a multiple of its element size. 0, or -1
// with err.
static int check_tiling(const StFile *f, Span *spans, int64_t dsize, int *aligned,
                        const char *path, char *err, size_t errlen) {
    int nt = f->n_tensors;
    qsort(spans, (size_t)nt, sizeof *spans, span_cmp);
    int64_t at = 0;
    *aligned = 1;
    for (int i = 0; i < nt; i++) {
        const char *name = f->tensors[spans[i].idx].name;
        if (spans[i].begin < at) {
            set_err(err, errlen, "%s: tensor '%s' [%lld, %lld) overlaps '%s'", path, name,
                    (long long)spans[i].begin, (long long)spans[i].end,
                    f->tensors[spans[i - 1].idx].name);
            return -1;
        }
        if (spans[i].begin > at) {
            set_err(err, errlen,
                    "%s: gap in the data section: bytes [%lld, %lld) before tensor '%s' "
                    "belong to no tensor",
                    path, (long long)at, (long long)spans[i].begin, name);
            return -1;
        }
        at = spans[i].end;
        *aligned &= spans[i].begin % (int64_t)DTYPES[f->tensors[spans[i].idx].dtype].size == 0;
    }
    if (at != dsize) {
        set_err(err, errlen, "%s: tensors cover %lld bytes but the data section has %lld",
                path, (long long)at, (long long)dsize);
        return -1;
    }
    return 0;
}

// Stage 4: the data section into f->blob, each tensor's data pointing into it;
// repacked with every tensor 8-aligned when the file's offsets are not aligned
// (see the file comment). 0, or -1 with err.
static int read_data(StFile *f, FILE *fp, const Span *spans, int64_t dsize, int aligned,
                     const char *path, char *err, size_t errlen) {
    int nt = f->n_tensors;
    unsigned char *data = xrealloc(NULL, (size_t)dsize);
    if (dsize > 0 && fread(data, 1, (size_t)dsize, fp) != (size_t)dsize) {
        set_err(err, errlen, "%s: cannot read the data section: %s", path,
                ferror(fp) ? strerror(errno) : "unexpected end of file");
        free(data);
        return -1;
    }
    if (aligned) {
        f->blob = data;
        for (int i = 0; i < nt; i++) f->tensors[spans[i].idx].data = data + spans[i].begin;
        return 0;
    }
    // The padded size is at most dsize + 7 per tensor: no overflow for a file that fit.
    size_t total = 0;
    for (int i = 0; i < nt; i++)
        total = (total + 7) / 8 * 8 + (size_t)(spans[i].end - spans[i].begin);
    unsigned char *packed = xrealloc(NULL, total);
    size_t pos = 0;
    for (int i = 0; i < nt; i++) {
        size_t nb = (size_t)(spans[i].end - spans[i].begin);
        pos = (pos + 7) / 8 * 8;
        memcpy(packed + pos, data + spans[i].begin, nb);
        f->tensors[spans[i].idx].data = packed + pos;
        pos += nb;
    }
    free(data);
    f->blob = packed;
    return 0;
}

int st_read(StFile *f, const char *path, char *err, size_t errlen) {
    st_init(f);
    // opened without blocking: a FIFO in a dump's place must not block open() forever
    // (read_header then refuses anything but a regular file)
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    FILE *fp = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!fp) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    int64_t dsize = 0;
    json_t *root = read_header(fp, path, &dsize, err, errlen);
    Span *spans = NULL;
    int aligned = 0;
    int rc = -1;
    if (root) {
        size_t n_entries = json_object_size(root);
        f->tensors = xrealloc(NULL, n_entries * sizeof *f->tensors);
        f->cap = (int)n_entries;
        spans = xrealloc(NULL, n_entries * sizeof *spans);
        if (parse_entries(f, root, dsize, spans, path, err, errlen) == 0 &&
            check_tiling(f, spans, dsize, &aligned, path, err, errlen) == 0 &&
            read_data(f, fp, spans, dsize, aligned, path, err, errlen) == 0)
            rc = 0;
    }
    free(spans);
    json_decref(root);
    fclose(fp);
    if (rc) st_free(f);
    return rc;
}
