// tests/trainer/test_safetensors.c — safetensors reader/writer (common/safetensors.h).
//
// Asserts: a round trip of every dtype (incl. 0-d, empty and 8-d tensors, and
// metadata) preserves names, order, dtypes, shapes and bytes, with aligned data
// pointers; the written bytes follow the format independently of the reader
// (8-aligned space-padded header, contiguous offsets in insertion order,
// deterministic output); a file built byte by byte in this test is read
// correctly; every malformed file gives -1 and "path: why" (never a crash),
// including every truncation and many header byte flips of a valid file; the
// writer rejects invalid tensors, and a failed write leaves no .tmp behind
// and the old file intact. With NSA_ST_PY_OUT set, the fixture is also written there for
// tests/cli/safetensors_py.sh to check with tools/st_dump.py.
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/safetensors.h"

#define TEST_TMPDIR_TAG "st"
#include "tests/trainer/test_tmpdir.h"   // g_dir, setup_dir, teardown_dir, path_in_dir

static void write_bytes(const char *path, const void *buf, size_t n) {
    // A new file rather than a truncated one: ext4 flushes a truncated file's
    // data on close (auto_da_alloc), which makes thousands of rewrites slow.
    unlink(path);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    if (n) assert_int_equal(fwrite(buf, 1, n, fp), n);
    assert_int_equal(fclose(fp), 0);
}

static unsigned char *read_bytes(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)len, fp), (size_t)len);
    fclose(fp);
    *n = (size_t)len;
    return buf;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void assert_no_tmp(const char *path) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_false(file_exists(tmp));
}

// ---- the fixture: every dtype, 0-d, empty, 8-d, odd-sized U8 before wider types --

// Values exactly representable in their dtype, so a reader in another language
// (tools/st_dump.py via tests/cli/safetensors_py.sh) can compare them exactly.
static const double FX_F64[3] = {1.5, -0.25, 1e300};
static const float FX_F32[6] = {0.0f, 1.0f, -2.5f, 3.25f, 1024.0f, -0.125f};
static const uint16_t FX_F16[4] = {0x3C00, 0xC000, 0x3800, 0x7BFF};    // 1, -2, 0.5, 65504
static const uint16_t FX_BF16[4] = {0x3F80, 0xC040, 0x3E20, 0x4380};   // 1, -3, 0.15625, 256
static const int64_t FX_I64[2] = {-9007199254740993LL, 42};             // not a double
static const int32_t FX_I32[3] = {-1, INT32_MAX, INT32_MIN};
static const uint16_t FX_U16[2] = {0, 65535};
static const uint8_t FX_U8[5] = {0, 1, 127, 128, 255};
static const float FX_SCALAR = 7.5f;
static const int32_t FX_I32_8D[6] = {0, 1, 2, 3, 4, 5};

typedef struct { const char *name; StDtype dt; int ndim; int64_t shape[ST_MAX_DIMS]; const void *data; } Fx;
static const Fx FIXTURE[] = {
    {"f64", ST_F64, 1, {3}, FX_F64},
    {"u8", ST_U8, 1, {5}, FX_U8},   // 5 bytes: everything after it is misaligned in the file
    {"blocks.0.attn.f32", ST_F32, 2, {2, 3}, FX_F32},
    {"f16", ST_F16, 1, {4}, FX_F16},
    {"bf16", ST_BF16, 2, {2, 2}, FX_BF16},
    {"i64", ST_I64, 1, {2}, FX_I64},
    {"i32", ST_I32, 1, {3}, FX_I32},
    {"u16", ST_U16, 1, {2}, FX_U16},
    {"scalar", ST_F32, 0, {0}, &FX_SCALAR},
    {"empty", ST_F32, 2, {0, 4}, NULL},
    {"eight_d", ST_I32, 8, {1, 2, 1, 1, 1, 1, 1, 3}, FX_I32_8D},
};
#define N_FIXTURE ((int)(sizeof FIXTURE / sizeof FIXTURE[0]))

static size_t fx_nbytes(const Fx *x) {
    size_t n = st_dtype_size(x->dt);
    for (int d = 0; d < x->ndim; d++) n *= (size_t)x->shape[d];
    return n;
}

static void build_fixture(StFile *f) {
    st_init(f);
    for (int i = 0; i < N_FIXTURE; i++)
        st_add(f, FIXTURE[i].name, FIXTURE[i].dt, FIXTURE[i].ndim, FIXTURE[i].shape, FIXTURE[i].data);
    st_add_meta(f, "format", "pt");
    st_add_meta(f, "note", "replaced below");
    st_add_meta(f, "empty", "");
    st_add_meta(f, "note", "h\xc3\xa9llo \xe2\x9c\x93");   // last write wins
}

static void write_fixture(const char *path) {
    StFile f;
    char err[512] = "";
    build_fixture(&f);
    int rc = st_write(&f, path, err, sizeof err);
    st_free(&f);
    if (rc != 0) fail_msg("st_write: %s", err);
}

static void test_dtype_table(void **state) {
    static const char *names[] = {"F64", "F32", "F16", "BF16", "I64", "I32", "U16", "U8"};
    static const size_t sizes[] = {8, 4, 2, 2, 8, 4, 2, 1};
    for (int i = 0; i < 8; i++) {
        assert_string_equal(st_dtype_name((StDtype)i), names[i]);
        assert_int_equal(st_dtype_size((StDtype)i), sizes[i]);
    }
}

// st_elem_f64 decodes every dtype exactly, 16-bit floats by their bit patterns (IEEE
// binary16: sign, 5-bit exponent bias 15, subnormals; bfloat16: the top half of a float).
static void test_elem_f64(void **state) {
    (void)state;
    const uint16_t f16[] = {0x3C00, 0xC000, 0x3555, 0x0001, 0x7BFF, 0x7C00, 0x0000, 0x8000};
    const double f16_want[] = {1.0, -2.0, 0.333251953125, 5.9604644775390625e-08, 65504.0, INFINITY, 0.0, -0.0};
    const uint16_t bf16[] = {0x3F80, 0xC0A0, 0x3EAB};
    const double bf16_want[] = {1.0, -5.0, 0.333984375};
    const int32_t i32[] = {-7, 2147483647};
    StTensor t = {0};
    t.dtype = ST_F16;
    t.data = (void *)f16;
    t.nbytes = sizeof f16;
    for (size_t i = 0; i < sizeof f16 / 2; i++) assert_true(st_elem_f64(&t, i) == f16_want[i]);
    assert_true(signbit(st_elem_f64(&t, 7)));
    uint16_t nan16 = 0x7E00;
    t.data = &nan16;
    assert_true(isnan(st_elem_f64(&t, 0)));
    t.dtype = ST_BF16;
    t.data = (void *)bf16;
    for (size_t i = 0; i < 3; i++) assert_true(st_elem_f64(&t, i) == bf16_want[i]);
    t.dtype = ST_I32;
    t.data = (void *)i32;
    assert_true(st_elem_f64(&t, 0) == -7 && st_elem_f64(&t, 1) == 2147483647.0);
}

static void test_roundtrip_all_dtypes(void **state) {
    char path[512], err[512] = "";
    path_in_dir(path, sizeof path, "rt.safetensors");
    write_fixture(path);
    assert_no_tmp(path);

    StFile f;
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    assert_int_equal(f.n_tensors, N_FIXTURE);
    for (int i = 0; i < N_FIXTURE; i++) {
        const Fx *x = &FIXTURE[i];
        const StTensor *t = &f.tensors[i];   // header order = insertion order
        assert_string_equal(t->name, x->name);
        assert_ptr_equal(st_find(&f, x->name), t);
        assert_int_equal(t->dtype, x->dt);
        assert_int_equal(t->ndim, x->ndim);
        for (int d = 0; d < x->ndim; d++) assert_int_equal(t->shape[d], x->shape[d]);
        assert_int_equal(t->nbytes, fx_nbytes(x));
        if (t->nbytes) assert_memory_equal(t->data, x->data, t->nbytes);
        // Usable as a typed array even though most offsets in the file are odd.
        assert_int_equal((uintptr_t)t->data % st_dtype_size(t->dtype), 0);
    }
    assert_null(st_find(&f, "nope"));
    assert_int_equal(f.n_meta, 3);
    assert_string_equal(st_meta(&f, "format"), "pt");
    assert_string_equal(st_meta(&f, "note"), "h\xc3\xa9llo \xe2\x9c\x93");
    assert_string_equal(st_meta(&f, "empty"), "");
    assert_null(st_meta(&f, "nope"));
    st_free(&f);
    assert_int_equal(f.n_tensors, 0);
    assert_null(f.blob);
}

// The written bytes, checked without the reader: layout, padding, offsets, order.
static void test_written_layout(void **state) {
    char path[512], path2[512];
    path_in_dir(path, sizeof path, "layout.safetensors");
    path_in_dir(path2, sizeof path2, "layout2.safetensors");
    write_fixture(path);
    write_fixture(path2);
    size_t n, n2;
    unsigned char *buf = read_bytes(path, &n), *buf2 = read_bytes(path2, &n2);
    assert_int_equal(n, n2);   // deterministic
    assert_memory_equal(buf, buf2, n);
    free(buf2);

    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    assert_int_equal(hlen % 8, 0);
    assert_true(8 + hlen <= n);
    size_t end = (size_t)hlen;   // JSON ends at the last '}', then only spaces
    while (end > 0 && buf[8 + end - 1] == ' ') end--;
    assert_true(hlen - end < 8);
    assert_int_equal(buf[8 + end - 1], '}');
    assert_int_equal(buf[8], '{');

    json_error_t jerr;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, 0, &jerr);
    assert_non_null(root);
    const char *key;
    json_t *val;
    int i = -1;   // -1: __metadata__ comes first
    size_t off = 0;
    json_object_foreach(root, key, val) {
        if (i < 0) {
            assert_string_equal(key, "__metadata__");
            assert_string_equal(json_string_value(json_object_get(val, "format")), "pt");
            i++;
            continue;
        }
        assert_true(i < N_FIXTURE);
        assert_string_equal(key, FIXTURE[i].name);
        assert_string_equal(json_string_value(json_object_get(val, "dtype")), st_dtype_name(FIXTURE[i].dt));
        json_t *offs = json_object_get(val, "data_offsets");
        assert_int_equal(json_integer_value(json_array_get(offs, 0)), off);
        size_t nb = fx_nbytes(&FIXTURE[i]);
        assert_int_equal(json_integer_value(json_array_get(offs, 1)), off + nb);
        if (nb) assert_memory_equal(buf + 8 + hlen + off, FIXTURE[i].data, nb);
        off += nb;
        i++;
    }
    assert_int_equal(i, N_FIXTURE);
    assert_int_equal(8 + hlen + off, n);
    json_decref(root);
    free(buf);
}

// ---- files built by hand, independent of the writer --------------------------------

static void write_raw(const char *path, const char *hdr, size_t hlen, const unsigned char *data,
                      size_t dlen) {
    unsigned char *buf = malloc(8 + hlen + dlen + 1);
    assert_non_null(buf);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    memcpy(buf + 8, hdr, hlen);
    if (dlen) memcpy(buf + 8 + hlen, data, dlen);
    write_bytes(path, buf, 8 + hlen + dlen);
    free(buf);
}

static void test_hand_built(void **state) {
    char path[512], err[512] = "";
    path_in_dir(path, sizeof path, "hand.safetensors");
    // Unpadded header (length not a multiple of 8), tensors listed out of offset
    // order, metadata in the middle, an empty tensor at the end of the data.
    const char *hdr =
        "{\"b\":{\"dtype\":\"I32\",\"shape\":[2],\"data_offsets\":[8,16]},"
        "\"a\":{\"shape\":[2,1],\"dtype\":\"F32\",\"data_offsets\":[0,8]},"
        "\"__metadata__\":{\"k\":\"v\"},"
        "\"z\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[16,16]}}";
    const unsigned char data[16] = {0x00, 0x00, 0x80, 0x3F, 0x00, 0x00, 0x00, 0xC0,   // 1.0f, -2.0f
                                    0x07, 0x00, 0x00, 0x00, 0xFF, 0xFF, 0xFF, 0xFF};  // 7, -1
    write_raw(path, hdr, strlen(hdr), data, sizeof data);
    StFile f;
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    assert_int_equal(f.n_tensors, 3);
    assert_string_equal(f.tensors[0].name, "b");
    assert_string_equal(f.tensors[1].name, "a");
    assert_string_equal(f.tensors[2].name, "z");
    const StTensor *a = st_find(&f, "a"), *b = st_find(&f, "b"), *z = st_find(&f, "z");
    assert_int_equal(a->dtype, ST_F32);
    assert_int_equal(a->ndim, 2);
    assert_int_equal(a->shape[0], 2);
    assert_int_equal(a->shape[1], 1);
    assert_true(((const float *)a->data)[0] == 1.0f);
    assert_true(((const float *)a->data)[1] == -2.0f);
    assert_int_equal(b->dtype, ST_I32);
    assert_int_equal(((const int32_t *)b->data)[0], 7);
    assert_int_equal(((const int32_t *)b->data)[1], -1);
    assert_int_equal(z->nbytes, 0);
    assert_int_equal(z->shape[0], 0);
    assert_string_equal(st_meta(&f, "k"), "v");
    st_free(&f);

    // A misaligned F64 (offset 3) comes back aligned with the right value; a
    // 0-d tensor has ndim 0 and one element; whitespace around the JSON is fine.
    const char *hdr2 =
        "  {\n \"c\": {\"dtype\": \"U8\", \"shape\": [3], \"data_offsets\": [0, 3]},\n"
        " \"d\": {\"dtype\": \"F64\", \"shape\": [], \"data_offsets\": [3, 11]}\n}\n ";
    const unsigned char data2[11] = {9, 8, 7, 0, 0, 0, 0, 0, 0, 0xE0, 0x3F};   // 0.5
    write_raw(path, hdr2, strlen(hdr2), data2, sizeof data2);
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    const StTensor *c = st_find(&f, "c"), *d = st_find(&f, "d");
    assert_memory_equal(c->data, data2, 3);
    assert_int_equal(d->ndim, 0);
    assert_int_equal(d->nbytes, 8);
    assert_int_equal((uintptr_t)d->data % 8, 0);
    assert_true(*(const double *)d->data == 0.5);
    assert_int_equal(f.n_meta, 0);
    st_free(&f);

    // No tensors at all: {} with an empty data section is a valid file.
    write_raw(path, "{}      ", 8, NULL, 0);
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    assert_int_equal(f.n_tensors, 0);
    st_free(&f);
}

// ---- malformed files -------------------------------------------------------------

// st_read must fail, say "path: ..." containing `want`, and leave f empty.
static void expect_fail(const char *path, const char *want) {
    StFile f;
    char err[1024] = "";
    memset(&f, 0xAB, sizeof f);   // st_read must not trust the caller's struct
    int rc = st_read(&f, path, err, sizeof err);
    if (rc != -1) fail_msg("%s: expected failure containing '%s', got success", path, want);
    size_t pl = strlen(path);
    if (strncmp(err, path, pl) != 0 || strncmp(err + pl, ": ", 2) != 0)
        fail_msg("error does not start with the path: '%s'", err);
    if (!strstr(err, want)) fail_msg("error '%s' lacks '%s'", err, want);
    assert_int_equal(f.n_tensors, 0);
    assert_null(f.tensors);
    assert_null(f.blob);
    st_free(&f);
}

static void expect_fail_header(const char *hdr, size_t dlen, const char *want) {
    char path[512];
    path_in_dir(path, sizeof path, "bad.safetensors");
    unsigned char *data = calloc(1, dlen + 1);
    assert_non_null(data);
    write_raw(path, hdr, strlen(hdr), data, dlen);
    free(data);
    expect_fail(path, want);
}

#define E_(dt, shape, offs) "{\"dtype\":" dt ",\"shape\":" shape ",\"data_offsets\":" offs "}"

static void test_malformed(void **state) {
    char path[512];
    path_in_dir(path, sizeof path, "bad.safetensors");

    write_bytes(path, "", 0);
    expect_fail(path, "shorter than the 8-byte");
    write_bytes(path, "\x02\0\0\0\0\0\0", 7);
    expect_fail(path, "shorter than the 8-byte");
    write_bytes(path, "\0\0\0\0\0\0\0\x80{}", 10);
    expect_fail(path, "absurd");
    write_bytes(path, "\xe8\x03\0\0\0\0\0\0{}", 10);   // 1000 > 2 bytes left
    expect_fail(path, "past the end of the file");
    write_bytes(path, "\0\0\0\0\0\0\0\0", 8);
    expect_fail(path, "invalid JSON header");

    expect_fail_header("{\"a\":", 0, "invalid JSON header at line 1");
    expect_fail_header("{\n \"a\": {\"dtype\":\"F32\",\n  \"shape\": [1,,]}}", 0,
                       "invalid JSON header at line 3 col");
    expect_fail_header("{} x", 0, "invalid JSON");                  // trailing garbage
    expect_fail_header("{\"a\xff\":1}", 0, "invalid JSON");          // not UTF-8
    expect_fail_header("[1, 2]", 0, "not a JSON object");
    expect_fail_header("\"str\"", 0, "invalid JSON");
    expect_fail_header("{\"a\":5}", 0, "'a': entry is not an object");
    expect_fail_header("{\"a\":" E_("\"F8\"", "[1]", "[0,1]") "}", 1, "unknown dtype");
    expect_fail_header("{\"a\":" E_("\"f32\"", "[1]", "[0,4]") "}", 4, "unknown dtype");
    expect_fail_header("{\"a\":" E_("4", "[1]", "[0,4]") "}", 4, "unknown dtype");
    expect_fail_header("{\"a\":" E_("\"F32\"", "3", "[0,12]") "}", 12, "shape is not a list");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[-1]", "[0,0]") "}", 0, "shape is not a list");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[2.0]", "[0,8]") "}", 8, "shape is not a list");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[\"2\"]", "[0,8]") "}", 8, "shape is not a list");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[null]", "[0,0]") "}", 0, "shape is not a list");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1,1,1,1,1,1,1,1,1]", "[0,1]") "}", 1,
                       "more than 8 dimensions");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "1") "}", 1, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[0]") "}", 1, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[0,1,2]") "}", 2, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[0]", "[1,0]") "}", 1, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[-1,0]") "}", 1, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[0.0,1]") "}", 1, "data_offsets is not");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[4]", "[0,4]") "}", 3, "data_offsets is not");   // past the data
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[0,99999999999999999999]") "}", 1,
                       "invalid JSON");   // integer too big for Jansson
    expect_fail_header("{\"a\":" E_("\"F32\"", "[2]", "[0,4]") "}", 4, "does not match");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[4611686018427387904,4]", "[0,0]") "}", 0,
                       "does not match");   // product overflows
    expect_fail_header("{\"a\":" E_("\"F32\"", "[2]", "[0,8]") ",\"b\":" E_("\"F32\"", "[2]", "[4,12]") "}",
                       12, "overlaps");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[2]", "[0,8]") ",\"b\":" E_("\"F32\"", "[2]", "[0,8]") "}",
                       8, "overlaps");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[1]", "[0,4]") ",\"b\":" E_("\"F32\"", "[1]", "[8,12]") "}",
                       12, "gap in the data section: bytes [4, 8)");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[1]", "[4,8]") "}", 8, "gap in the data section: bytes [0, 4)");
    expect_fail_header("{\"a\":" E_("\"F32\"", "[1]", "[0,4]") "}", 8,
                       "tensors cover 4 bytes but the data section has 8");
    expect_fail_header("{}", 3, "tensors cover 0 bytes but the data section has 3");
    expect_fail_header("{\"__metadata__\":\"x\"}", 0, "__metadata__ is not an object");
    expect_fail_header("{\"__metadata__\":{\"k\":1}}", 0, "metadata 'k' is not a string");
    expect_fail_header("{\"__metadata__\":{\"k\":null}}", 0, "metadata 'k' is not a string");
    expect_fail_header("{\"a\":" E_("\"U8\"", "[1]", "[0,1]") ",\"a\":" E_("\"U8\"", "[1]", "[1,2]") "}",
                       2, "duplicate");
    expect_fail_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate");
    expect_fail_header("{\"a\":{\"dtype\":\"U8\",\"data_offsets\":[0,1]}}", 1, "needs dtype, shape");
    expect_fail_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1],\"x\":1}}", 1,
                       "unknown key");

    char nul_hdr[] = "{\"a\":1}";
    nul_hdr[2] = '\0';   // a NUL inside the JSON text
    unsigned char none[1] = {0};
    write_raw(path, nul_hdr, sizeof nul_hdr - 1, none, 0);
    expect_fail(path, "invalid JSON");

    path_in_dir(path, sizeof path, "does_not_exist.safetensors");
    expect_fail(path, "No such file");
    expect_fail(g_dir, "not a regular file");
}

// Checks a successfully read (possibly fuzzed) file for internal consistency
// and, with rewrite set, that it survives a write/read round trip unchanged
// (st_write fsyncs, so this is done for a sample only).
static void check_consistent(const StFile *f, size_t dsize, int rewrite) {
    size_t total = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const StTensor *t = &f->tensors[i];
        size_t n = st_dtype_size(t->dtype);
        assert_true(n > 0);
        assert_in_range(t->ndim, 0, ST_MAX_DIMS);
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        assert_int_equal(n, t->nbytes);
        total += n;
    }
    assert_int_equal(total, dsize);
    if (!rewrite) return;
    char path[512], err[512] = "";
    path_in_dir(path, sizeof path, "fuzz_rt.safetensors");
    StFile w, r;
    st_init(&w);
    for (int i = 0; i < f->n_tensors; i++)
        st_add(&w, f->tensors[i].name, f->tensors[i].dtype, f->tensors[i].ndim, f->tensors[i].shape,
               f->tensors[i].data);
    for (int i = 0; i < f->n_meta; i++) st_add_meta(&w, f->meta_keys[i], f->meta_vals[i]);
    if (st_write(&w, path, err, sizeof err) != 0) fail_msg("rewrite: %s", err);
    st_free(&w);
    if (st_read(&r, path, err, sizeof err) != 0) fail_msg("reread: %s", err);
    assert_int_equal(r.n_tensors, f->n_tensors);
    for (int i = 0; i < f->n_tensors; i++) {
        assert_string_equal(r.tensors[i].name, f->tensors[i].name);
        assert_int_equal(r.tensors[i].nbytes, f->tensors[i].nbytes);
        if (r.tensors[i].nbytes)
            assert_memory_equal(r.tensors[i].data, f->tensors[i].data, r.tensors[i].nbytes);
    }
    st_free(&r);
}

static void test_fuzz_truncate_and_flip(void **state) {
    char good[512], path[512], err[1024];
    path_in_dir(good, sizeof good, "fuzz_src.safetensors");
    path_in_dir(path, sizeof path, "fuzz.safetensors");
    write_fixture(good);
    size_t n;
    unsigned char *buf = read_bytes(good, &n);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];

    // The tensors tile the data section, so every proper prefix is invalid.
    for (size_t len = 0; len < n; len++) {
        write_bytes(path, buf, len);
        StFile f;
        err[0] = '\0';
        if (st_read(&f, path, err, sizeof err) == 0) fail_msg("truncation to %zu bytes was accepted", len);
        assert_int_equal(strncmp(err, path, strlen(path)), 0);
    }

    // Byte flips in the length prefix and header: fail cleanly, or succeed with
    // a consistent file (e.g. a renamed tensor or swapped dimensions).
    static const unsigned char masks[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xFF};
    int accepted = 0, rejected = 0;
    for (size_t i = 0; i < 8 + hlen; i++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            buf[i] ^= masks[m];
            write_bytes(path, buf, n);
            buf[i] ^= masks[m];
            StFile f;
            err[0] = '\0';
            if (st_read(&f, path, err, sizeof err) == 0) {
                accepted++;
                check_consistent(&f, n - 8 - (size_t)hlen, accepted % 10 == 1);
                st_free(&f);
            } else {
                rejected++;
                assert_int_equal(strncmp(err, path, strlen(path)), 0);
                assert_true(strlen(err) > strlen(path) + 2);
            }
        }
    }
    print_message("byte flips: %d accepted, %d rejected\n", accepted, rejected);
    assert_true(accepted > 0);   // e.g. flipped name letters
    assert_true(rejected > accepted);
    free(buf);
}

// ---- writer errors and atomicity -------------------------------------------------

static void expect_write_fail(StFile *f, const char *path, const char *want) {
    char err[1024] = "";
    assert_int_equal(st_write(f, path, err, sizeof err), -1);
    if (strncmp(err, path, strlen(path)) != 0 || !strstr(err, want))
        fail_msg("write error '%s' lacks path or '%s'", err, want);
    assert_no_tmp(path);
}

static void test_writer_errors_keep_old_file(void **state) {
    char path[512], err[512] = "";
    path_in_dir(path, sizeof path, "keep.safetensors");
    write_fixture(path);
    float x[2] = {1, 2};
    int64_t s2[1] = {2}, neg[1] = {-2}, nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    StFile f;

    st_init(&f);
    st_add(&f, "a", ST_F32, 1, s2, x);
    st_add(&f, "a", ST_F32, 1, s2, x);
    expect_write_fail(&f, path, "duplicate name");
    st_free(&f);

    st_init(&f);
    st_add(&f, "__metadata__", ST_F32, 1, s2, x);
    expect_write_fail(&f, path, "reserved");
    st_free(&f);

    st_init(&f);
    st_add(&f, "neg", ST_F32, 1, neg, x);
    expect_write_fail(&f, path, "invalid dtype, ndim or shape");
    st_free(&f);

    st_init(&f);
    st_add(&f, "nine", ST_F32, 9, nine, x);
    expect_write_fail(&f, path, "invalid dtype, ndim or shape");
    st_free(&f);

    st_init(&f);
    st_add(&f, "baddt", (StDtype)42, 1, s2, x);
    expect_write_fail(&f, path, "invalid dtype, ndim or shape");
    st_free(&f);

    st_init(&f);
    st_add(&f, "nodata", ST_F32, 1, s2, NULL);
    expect_write_fail(&f, path, "no data");
    st_free(&f);

    st_init(&f);
    st_add(&f, "bad\xff", ST_F32, 1, s2, x);
    expect_write_fail(&f, path, "not valid UTF-8");
    st_free(&f);

    st_init(&f);
    st_add_meta(&f, "k", "bad\xc3");
    expect_write_fail(&f, path, "not valid UTF-8");
    st_free(&f);

    // The failed writes left the old file as it was.
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("old file damaged: %s", err);
    assert_int_equal(f.n_tensors, N_FIXTURE);
    st_free(&f);

    // A failure after path.tmp was written (here: the rename, onto a
    // directory) removes path.tmp.
    char dirpath[512];
    path_in_dir(dirpath, sizeof dirpath, "a_directory");
    assert_int_equal(mkdir(dirpath, 0755), 0);
    st_init(&f);
    st_add(&f, "a", ST_F32, 1, s2, x);
    expect_write_fail(&f, dirpath, "renaming");
    st_free(&f);

    char missing[600];
    snprintf(missing, sizeof missing, "%s/no/such/dir/x.safetensors", g_dir);
    st_init(&f);
    st_add(&f, "a", ST_F32, 1, s2, x);
    expect_write_fail(&f, missing, "cannot create");
    st_free(&f);
}

static void test_atomic_replace(void **state) {
    char path[512], tmp[600], err[512] = "";
    path_in_dir(path, sizeof path, "atomic.safetensors");
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    write_bytes(tmp, "stale", 5);   // left over by a killed run
    write_bytes(path, "garbage", 7);

    float v[3] = {1, 2, 3};
    int64_t s[1] = {3};
    StFile f;
    st_init(&f);
    st_add(&f, "v", ST_F32, 1, s, v);
    if (st_write(&f, path, err, sizeof err) != 0) fail_msg("st_write: %s", err);
    st_free(&f);
    assert_false(file_exists(tmp));
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    assert_int_equal(f.n_tensors, 1);
    assert_memory_equal(f.tensors[0].data, v, sizeof v);
    assert_int_equal(f.n_meta, 0);
    st_free(&f);

    // An empty file object writes a valid empty file.
    st_init(&f);
    if (st_write(&f, path, err, sizeof err) != 0) fail_msg("st_write: %s", err);
    if (st_read(&f, path, err, sizeof err) != 0) fail_msg("st_read: %s", err);
    assert_int_equal(f.n_tensors, 0);
    st_free(&f);
}

// For tests/cli/safetensors_py.sh: the fixture at $NSA_ST_PY_OUT.
static void test_py_fixture(void **state) {
    const char *out = getenv("NSA_ST_PY_OUT");
    if (!out || !*out) skip();
    write_fixture(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_elem_f64),
        cmocka_unit_test(test_roundtrip_all_dtypes),
        cmocka_unit_test(test_written_layout),
        cmocka_unit_test(test_hand_built),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_fuzz_truncate_and_flip),
        cmocka_unit_test(test_writer_errors_keep_old_file),
        cmocka_unit_test(test_atomic_replace),
        cmocka_unit_test(test_py_fixture),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
