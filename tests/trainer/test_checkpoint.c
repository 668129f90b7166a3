// tests/trainer/test_checkpoint.c — checkpoint integrity and artifact write failures
//, on the CPU backend, tiny config:
//   - checkpoint_config_diff: the keys that differ between two canonical configs, in
//     sorted order with both values (nsa.w, data.kind, a key present on one side only,
//     reals in their short form), train.steps and name marked allowed, bad JSON -> -1;
//   - a checkpoint round trip restores every tensor and reports its checksums verified;
//     ten flipped bytes in one tensor's data are an error naming that tensor, and
//     the model is left untouched (every tensor is checked before any is copied); a
//     checkpoint without "tensor_digests" (older) loads with checksums = 0; a digest
//     table that lacks a tensor is an error naming it; a shape mismatch names the
//     config keys that differ;
//   - artifact failures: st_write to a file whose .tmp is /dev/full returns -1 with
//     errno ENOSPC (0 for an invalid tensor: not an I/O failure); jsonl_write on
//     /dev/full returns -1 and records ENOSPC with ONE [IO-ERROR] line for two
//     failures; fr_reserve_file allocates every block (fallocate and the zero-writing
//     fallback) and returns ENOSPC on /dev/full; flightrec_open fails with errno set.
// Before the fix none of these functions existed or behaved so: the shell test
// tests/cli/train_reliability.sh shows the old trainer's behaviour end to end.
#define _POSIX_C_SOURCE 200809L   // mkdtemp, symlink
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "trainer/checkpoint.h"
#include "common/config.h"
#include "common/digest.h"
#include "trainer/data.h"
#include "trainer/flightrec.h"
#include "trainer/ioerr.h"
#include "trainer/jsonl.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "common/safetensors.h"
#include "tests/trainer/tiny_model.h"

static char g_tmp[256];

static const char *tmp_path(const char *name) {
    static char path[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", g_tmp, name);
    return path[k];
}

static char *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len + 1);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    buf[len] = 0;
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void write_all_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

// ---- config diff ------------------------------------------------------------------------

static void test_config_diff(void **state) {
    (void)state;
    NsaConfig a, b;
    load_cfg(&a, NULL, 0);
    const char *sets[] = {"nsa.w=64", "data.kind=synthetic", "train.steps=500", "train.lr=0.001", "name=other"};
    load_cfg(&b, sets, 5);
    char *ja = config_to_json(&a), *jb = config_to_json(&b);
    CkptConfigDiff d[16];
    int n = checkpoint_config_diff(ja, jb, d, 16);
    assert_int_equal(n, 5);
    // sorted: data.kind, name, nsa.w, train.lr, train.steps
    assert_string_equal(d[0].key, "data.kind");
    assert_string_equal(d[0].ckpt, "\"learnable\"");
    assert_string_equal(d[0].run, "\"synthetic\"");
    assert_false(d[0].allowed);
    assert_string_equal(d[1].key, "name");
    assert_true(d[1].allowed);
    assert_string_equal(d[2].key, "nsa.w");
    assert_string_equal(d[2].ckpt, "32");
    assert_string_equal(d[2].run, "64");
    assert_false(d[2].allowed);
    assert_string_equal(d[3].key, "train.lr");
    assert_string_equal(d[3].ckpt, "0.003");   // the short form, not 0.0030000000000000001
    assert_string_equal(d[3].run, "0.001");
    assert_string_equal(d[4].key, "train.steps");
    assert_true(d[4].allowed);
    // identical configs: nothing; a truncated table still counts every key
    assert_int_equal(checkpoint_config_diff(ja, ja, d, 16), 0);
    assert_int_equal(checkpoint_config_diff(ja, jb, d, 2), 5);
    // a key on one side only (data.path exists for text data)
    const char *text[] = {"data.kind=text", "data.path=README.md"};
    NsaConfig c;
    load_cfg(&c, text, 2);
    char *jc = config_to_json(&c);
    n = checkpoint_config_diff(ja, jc, d, 16);
    assert_int_equal(n, 2);
    assert_string_equal(d[0].key, "data.kind");
    assert_string_equal(d[1].key, "data.path");
    assert_string_equal(d[1].ckpt, "absent");
    assert_string_equal(d[1].run, "\"README.md\"");
    // not JSON objects
    assert_int_equal(checkpoint_config_diff("{", ja, d, 16), -1);
    assert_int_equal(checkpoint_config_diff(ja, "[1]", d, 16), -1);
    assert_int_equal(checkpoint_config_diff(NULL, ja, d, 16), -1);
    free(ja); free(jb); free(jc);
}

// ---- round trip, corruption, old files ----------------------------------------------------

// A tiny model + optimizer with distinct state, saved to `path`.
static void save_one(const char *path, Model *m, Optim *o) {
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    make_model(m, &cfg);
    optim_init(o, m);
    // moments with values of their own (so a mix-up of m/v/params would show)
    size_t bytes = (size_t)m->n_elems * m->be->param_bytes;
    float *h = malloc(bytes);
    for (int64_t i = 0; i < m->n_elems; i++) h[i] = (float)(i % 97) * 1e-3f;
    m->be->from_host(o->m_mem, h, bytes);
    for (int64_t i = 0; i < m->n_elems; i++) h[i] = (float)(i % 89) * 2e-3f;
    m->be->from_host(o->v_mem, h, bytes);
    free(h);
    o->t = 7;
    DataPos pos = {7, 0, 0};   // one micro-batch per step (the metadata must say so, or more)
    char err[512];
    assert_int_equal(checkpoint_save(path, m, o, 7, pos, err, sizeof err), 0);
}

// a fresh model of the same config (other weights: seed + 1)
static void fresh(Model *m, Optim *o) {
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    make_model(m, &cfg);
    model_init_weights(m, cfg.seed + 1);
    optim_init(o, m);
}

static int same_params(const Model *a, const Model *b) {
    size_t bytes = (size_t)a->n_elems * a->be->param_bytes;
    char *x = malloc(bytes), *y = malloc(bytes);
    a->be->to_host(x, a->param_mem, bytes);
    b->be->to_host(y, b->param_mem, bytes);
    int same = memcmp(x, y, bytes) == 0;
    free(x); free(y);
    return same;
}

// rewrite a safetensors file with its header edited by fn (data section kept)
static void rewrite_header(const char *src, const char *dst, void (*fn)(json_t *h)) {
    size_t n;
    char *raw = read_all(src, &n);
    uint64_t hlen;
    memcpy(&hlen, raw, 8);
    json_t *h = json_loadb(raw + 8, (size_t)hlen, 0, NULL);
    assert_non_null(h);
    fn(h);
    char *hs = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    size_t hl = strlen(hs), padded = (hl + 7) / 8 * 8;
    FILE *f = fopen(dst, "wb");
    uint64_t p64 = padded;
    fwrite(&p64, 8, 1, f);
    fwrite(hs, 1, hl, f);
    for (size_t i = hl; i < padded; i++) fputc(' ', f);
    fwrite(raw + 8 + hlen, 1, n - 8 - (size_t)hlen, f);
    fclose(f);
    free(hs);
    json_decref(h);
    free(raw);
}

// a checkpoint as a writer before checksums made it: neither digest table
static void drop_digests(json_t *h) {
    json_object_del(json_object_get(h, "__metadata__"), "tensor_digests");
    json_object_del(json_object_get(h, "__metadata__"), "metadata_digests");
}
// one written before metadata digests, with a tensor missing from its digest table
static void drop_one_digest(json_t *h) {
    json_t *meta = json_object_get(h, "__metadata__");
    json_object_del(meta, "metadata_digests");
    json_t *d = json_loads(json_string_value(json_object_get(meta, "tensor_digests")), 0, NULL);
    json_object_del(d, "optim.m.norm_f.weight");
    char *s = json_dumps(d, JSON_COMPACT);
    json_object_set_new(meta, "tensor_digests", json_string(s));
    free(s);
    json_decref(d);
}

static void test_roundtrip_and_corruption(void **state) {
    (void)state;
    const char *path = tmp_path("ck.safetensors");
    Model m, m2;
    Optim o, o2;
    save_one(path, &m, &o);
    char err[2048];
    CkptInfo ck;

    // 1. the round trip: everything restored, checksums verified
    fresh(&m2, &o2);
    assert_false(same_params(&m, &m2));
    assert_int_equal(checkpoint_load(path, &m2, &o2, NULL, &ck, err, sizeof err), 0);
    assert_true(ck.checksums);
    assert_true(ck.meta_checksums);
    assert_int_equal(ck.step, 7);
    assert_int_equal(o2.t, 7);
    assert_string_equal(ck.digest, m.cfg.digest);
    assert_non_null(ck.config);
    assert_true(same_params(&m, &m2));
    checkpoint_info_free(&ck);
    optim_free(&o2, &m2);
    model_free(&m2);

    // 2. ten flipped bytes in blocks.0.attn.q_proj.weight: named, model untouched
    size_t n;
    char *raw = read_all(path, &n);
    uint64_t hlen;
    memcpy(&hlen, raw, 8);
    json_t *h = json_loadb(raw + 8, (size_t)hlen, 0, NULL);
    json_t *offs = json_object_get(json_object_get(h, "blocks.0.attn.q_proj.weight"), "data_offsets");
    size_t begin = (size_t)json_integer_value(json_array_get(offs, 0));
    json_decref(h);
    for (int i = 0; i < 10; i++) raw[8 + hlen + begin + 40 + 13 * (size_t)i] ^= 0x20;
    const char *bad = tmp_path("bad.safetensors");
    write_all_file(bad, raw, n);
    free(raw);
    fresh(&m2, &o2);
    Model ref;
    Optim oref;
    fresh(&ref, &oref);
    assert_int_equal(checkpoint_load(bad, &m2, &o2, NULL, &ck, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'blocks.0.attn.q_proj.weight' is corrupt"));
    assert_true(same_params(&m2, &ref));   // nothing was copied
    assert_int_equal(o2.t, 0);

    // 3. an older checkpoint without checksums loads, unverified
    const char *old = tmp_path("old.safetensors");
    rewrite_header(path, old, drop_digests);
    assert_int_equal(checkpoint_load(old, &m2, &o2, NULL, &ck, err, sizeof err), 0);
    assert_false(ck.checksums);
    assert_false(ck.meta_checksums);
    assert_true(same_params(&m, &m2));
    checkpoint_info_free(&ck);

    // 4. a digest table without one tensor: named
    const char *partial = tmp_path("partial.safetensors");
    rewrite_header(path, partial, drop_one_digest);
    assert_int_equal(checkpoint_load(partial, &m2, &o2, NULL, &ck, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'optim.m.norm_f.weight' has no checksum"));
    optim_free(&o2, &m2);
    model_free(&m2);
    optim_free(&oref, &ref);
    model_free(&ref);

    // 5. another shape: the tensor and the config keys that differ
    NsaConfig c32;
    const char *sets[] = {"model.dim=32", "model.head_dim=8"};
    load_cfg(&c32, sets, 2);
    make_model(&m2, &c32);
    optim_init(&o2, &m2);
    assert_int_equal(checkpoint_load(path, &m2, &o2, NULL, &ck, err, sizeof err), -1);
    assert_non_null(strstr(err, "tensor 'tok_emb.weight' is F32 [256,64], this model needs F32 [256,32]"));
    assert_non_null(strstr(err, "model.dim: checkpoint 64, this run 32"));
    optim_free(&o2, &m2);
    model_free(&m2);
    optim_free(&o, &m);
    model_free(&m);
}

// ---- metadata: checksummed and validated ----------------------------------

static const char *g_key, *g_val;
static int g_redigest;   // 1: recompute metadata_digests (a writer's bug, not an edit); 0: leave it
static void set_meta(json_t *h) {
    json_t *meta = json_object_get(h, "__metadata__");
    if (g_val) json_object_set_new(meta, g_key, json_string(g_val));
    else json_object_del(meta, g_key);
    if (!g_redigest) return;
    json_t *d = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!strcmp(k, "metadata_digests")) continue;
        char hex[17];
        digest64_hex(digest64(json_string_value(v), strlen(json_string_value(v)), 0), hex);
        json_object_set_new(d, k, json_string(hex));
    }
    char *txt = json_dumps(d, JSON_COMPACT);
    json_object_set_new(meta, "metadata_digests", json_string(txt));
    free(txt);
    json_decref(d);
}

// load `path` with metadata key := val (NULL: removed), the digests recomputed or not;
// the load must fail (want != NULL: with that text in the message) or succeed
static void expect_meta(const char *path, const char *key, const char *val, int redigest, const DataSource *ds,
                        const char *want) {
    const char *edited = tmp_path("meta.safetensors");
    g_key = key;
    g_val = val;
    g_redigest = redigest;
    rewrite_header(path, edited, set_meta);
    Model m;
    Optim o;
    fresh(&m, &o);
    CkptInfo ck;
    char err[2048] = "";
    int rc = checkpoint_load(edited, &m, &o, ds, &ck, err, sizeof err);
    if (want && (rc != -1 || !strstr(err, want)))
        fail_msg("%s=%s (%s): rc %d, message '%s', want '%s'", key, val ? val : "(removed)",
                 redigest ? "re-digested" : "digest kept", rc, err, want);
    if (!want && rc != 0) fail_msg("%s=%s: rc %d: %s", key, val ? val : "(removed)", rc, err);
    if (!want) {
        assert_int_equal(o.t, 7);
        checkpoint_info_free(&ck);
    } else {
        assert_int_equal(o.t, 0);   // refused: nothing restored
    }
    optim_free(&o, &m);
    model_free(&m);
}

static void test_metadata(void **state) {
    (void)state;
    char path[512];   // tmp_path's buffers rotate
    snprintf(path, sizeof path, "%s", tmp_path("ckm.safetensors"));
    Model m;
    Optim o;
    save_one(path, &m, &o);
    // the digest table: every other entry, and nothing else
    StFile f;
    char err[2048];
    assert_int_equal(st_read(&f, path, err, sizeof err), 0);
    json_t *d = json_loads(st_meta(&f, "metadata_digests"), 0, NULL);
    assert_true(json_is_object(d));
    assert_int_equal((int)json_object_size(d), f.n_meta - 1);
    for (int i = 0; i < f.n_meta; i++) {
        if (!strcmp(f.meta_keys[i], "metadata_digests")) continue;
        char hex[17];
        digest64_hex(digest64(f.meta_vals[i], strlen(f.meta_vals[i]), 0), hex);
        assert_string_equal(json_string_value(json_object_get(d, f.meta_keys[i])), hex);
    }
    json_decref(d);
    st_free(&f);

    // an edit, digest kept: the entry that changed is named (even with a valid value)
    expect_meta(path, "step", "6", 0, NULL, "metadata 'step' is \"6\", changed after the checkpoint was written");
    expect_meta(path, "seed", "1338", 0, NULL, "metadata 'seed' is \"1338\", changed after");
    expect_meta(path, "data_offset", NULL, 0, NULL, "metadata 'data_offset' is missing: the checkpoint recorded a checksum");
    expect_meta(path, "note", "x", 0, NULL, "metadata 'note' (\"x\") has no checksum in 'metadata_digests'");
    // values that make no sense, digests recomputed (what only validation can catch): named
    expect_meta(path, "step", "-5", 1, NULL, "metadata 'step' is -5: must be >= 0");
    expect_meta(path, "step", "4.0", 1, NULL, "metadata 'step' is \"4.0\": not a whole number");
    expect_meta(path, "step", " 7", 1, NULL, "metadata 'step' is \" 7\": not a whole number");
    expect_meta(path, "step", "99999999999999999999", 1, NULL, "metadata 'step' is 99999999999999999999: does not fit in 64 bits");
    expect_meta(path, "optim_t", "-1", 1, NULL, "metadata 'optim_t' is -1: must be >= 0");
    expect_meta(path, "optim_t", "8", 1, NULL, "metadata 'optim_t' is 8: more than 'step' 7");
    expect_meta(path, "data_batches", "6", 1, NULL, "metadata 'data_batches' is 6: fewer than 'step' 7");
    expect_meta(path, "data_offset", "-1", 1, NULL, "metadata 'data_offset' is -1: must be >= 0");
    expect_meta(path, "seed", "x", 1, NULL, "metadata 'seed' is \"x\": not a whole number");
    expect_meta(path, "seed", "-1", 1, NULL, "metadata 'seed' is -1: must be in [0, 2^64)");
    expect_meta(path, "seed", "1338", 1, NULL, "metadata 'seed' is 1338: the checkpoint's config has train.seed 1337");
    expect_meta(path, "config_digest", "0123456789abcdef", 1, NULL, "metadata 'config_digest' is \"0123456789abcdef\": the digest of metadata 'config' is");
    expect_meta(path, "backend", "cpu64", 1, NULL, "metadata 'backend' is \"cpu64\": the checkpoint's config has train.backend \"cpu\"");
    expect_meta(path, "backend", "tpu", 1, NULL, "metadata 'backend' is \"tpu\": not a backend");
    expect_meta(path, "loss_scale", "0", 1, NULL, "metadata 'loss_scale' is \"0\": must be a number in [1, 16777216]");
    expect_meta(path, "loss_scale_good_steps", "9", 1, NULL, "metadata 'loss_scale_good_steps' is 9: more than 'optim_t' 7");
    expect_meta(path, "step", NULL, 1, NULL, "metadata 'step' is missing");
    // the data position against a source: the learnable one has neither shards nor offsets
    const NsaConfig *c = &m.cfg;
    char derr[512];
    DataSource *ds = data_open(c->data_kind, c->data_path, c->vocab_size, c->batch_size, c->seq_len, c->seed, 0, 1, derr,
                               sizeof derr);
    assert_non_null(ds);
    expect_meta(path, "data_shard", "99", 1, ds, "metadata 'data_shard' is 99: outside this run's data: the learnable "
                "source has no shards (always 0)");
    expect_meta(path, "data_offset", "5", 1, ds, "metadata 'data_offset' is 5: outside this run's data");
    expect_meta(path, "data_shard", "99", 1, NULL, NULL);   // without a source: not checked
    data_close(ds);
    // a valid value, re-digested, loads (more micro-batches than steps: grad_accum > 1)
    expect_meta(path, "data_batches", "21", 1, NULL, NULL);
    // no digest table at all (older): values still validated
    g_key = "metadata_digests";
    expect_meta(path, "metadata_digests", NULL, 0, NULL, NULL);
    optim_free(&o, &m);
    model_free(&m);
}

// ---- artifact write failures ----------------------------------------------------------------

static void test_st_write_errno(void **state) {
    (void)state;
    const char *path = tmp_path("full.safetensors");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    assert_int_equal(symlink("/dev/full", tmp), 0);
    static float data[4096];
    StFile f;
    st_init(&f);
    int64_t shape[1] = {4096};
    st_add(&f, "x", ST_F32, 1, shape, data);
    char err[512];
    errno = 0;
    assert_int_equal(st_write(&f, path, err, sizeof err), -1);
    assert_int_equal(errno, ENOSPC);
    assert_non_null(strstr(err, "No space left on device"));
    assert_int_equal(access(tmp, F_OK), -1);   // the staging file is gone
    st_free(&f);
    // an invalid tensor is not an I/O failure: errno 0
    st_init(&f);
    st_add(&f, "__metadata__", ST_F32, 1, shape, data);
    errno = EBADF;
    assert_int_equal(st_write(&f, tmp_path("x.safetensors"), err, sizeof err), -1);
    assert_int_equal(errno, 0);
    st_free(&f);
}

static void test_jsonl_and_io_error(void **state) {
    (void)state;
    int fd = open("/dev/full", O_WRONLY);
    if (fd < 0) skip();
    // capture stderr
    const char *cap = tmp_path("stderr.txt");
    fflush(stderr);
    int saved = dup(2), cfd = open(cap, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(cfd, 2);
    close(cfd);
    io_error_reset();
    assert_int_equal(jsonl_write(fd, "{\"a\":1}", "OUT/grad_trace.jsonl"), -1);
    assert_int_equal(io_error_seen(), ENOSPC);
    assert_int_equal(jsonl_write(fd, "{\"a\":2}", "OUT/gate_stats.jsonl"), -1);   // not printed again
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    size_t n;
    char *text = read_all(cap, &n);
    char want[256];
    snprintf(want, sizeof want, "[IO-ERROR] file=OUT/grad_trace.jsonl errno=%d %s\n", ENOSPC, strerror(ENOSPC));
    assert_string_equal(text, want);
    free(text);
    io_error_reset();
    assert_int_equal(io_error_seen(), 0);
    // nothing to write: no failure
    assert_int_equal(jsonl_write(-1, "{}", "x"), 0);
    assert_int_equal(io_error_seen(), 0);
}

static void check_reserved(const char *path, int try_fallocate) {
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fr_reserve_file(fd, FR_FILE_BYTES, try_fallocate), 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal(sb.st_size, FR_FILE_BYTES);
    assert_true((int64_t)sb.st_blocks * 512 >= FR_FILE_BYTES);   // allocated, not a sparse file
    close(fd);
    size_t n;
    char *b = read_all(path, &n);
    for (size_t i = 0; i < n; i++) assert_int_equal(b[i], 0);
    free(b);
}

static void test_flightrec_reserve(void **state) {
    (void)state;
    check_reserved(tmp_path("fr1"), 1);   // posix_fallocate
    check_reserved(tmp_path("fr0"), 0);   // the zero-writing fallback (filesystems without fallocate)
    int fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        assert_int_equal(fr_reserve_file(fd, FR_FILE_BYTES, 0), ENOSPC);
        close(fd);
    }
    char err[600];
    errno = 0;
    assert_int_equal(flightrec_open(tmp_path("no/such/dir/fr"), 0, err, sizeof err), -1);
    assert_int_equal(errno, ENOENT);
    assert_null(flightrec_header());
}

int main(void) {
    snprintf(g_tmp, sizeof g_tmp, "/tmp/nsa_test_checkpoint_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_diff),
        cmocka_unit_test(test_roundtrip_and_corruption),
        cmocka_unit_test(test_metadata),
        cmocka_unit_test(test_st_write_errno),
        cmocka_unit_test(test_jsonl_and_io_error),
        cmocka_unit_test(test_flightrec_reserve),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) { /* best effort */ }
    return rc;
}
