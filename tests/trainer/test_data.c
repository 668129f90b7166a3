// tests/trainer/test_data.c — the training data sources (trainer/data.h).
//
// Asserts, for every source: targets are inputs shifted by one within each
// sequence; tokens are in [0, V); restoring a saved position replays the same
// batches; a world=2 rank's batch is its slice of the world=1 global batch.
// synthetic: tokens follow the documented rng formula; same seed same data,
// other seed other data; batch i does not depend on batches 0..i-1 having been
// drawn. learnable: 0 < optimal < unigram <= log V, both matching an
// independent computation from the documented generator; every transition is
// one of the documented successors; token frequencies over many batches match
// the stationary distribution (small KL) and the mean -log p(next | token)
// matches the optimal entropy. shards: data_write_shard's bytes are the llm.c
// format; a glob of shards is read back exactly, following an independent model
// of the consumption rule through shard changes and wrap-around; bad magic,
// bad version, truncation, trailing bytes, tokens >= V (first shard: at open;
// later shard: when reached), a shard rewritten after open, shards too small,
// positions outside the data and missing files are errors naming the file.
// text: batches are the file's bytes with wrap-around; V < 256, empty and
// too-small files are errors.
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "trainer/data.h"
#include "trainer/rng.h"

#define TEST_TMPDIR_TAG "data"
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

static DataSource *open_ok(int kind, const char *path, int V, int B, int T, uint64_t seed,
                           int rank, int world) {
    char err[1024] = "";
    DataSource *ds = data_open(kind, path, V, B, T, seed, rank, world, err, sizeof err);
    if (!ds) fail_msg("data_open: %s", err);
    return ds;
}

// data_open must fail with an error starting with `prefix` and containing `want`.
static void open_fails(int kind, const char *path, int V, int B, int T, int rank, int world,
                       const char *prefix, const char *want) {
    char err[1024] = "";
    DataSource *ds = data_open(kind, path, V, B, T, 1, rank, world, err, sizeof err);
    if (ds) {
        data_close(ds);
        fail_msg("data_open succeeded; expected '%s'", want);
    }
    if (strncmp(err, prefix, strlen(prefix)) != 0 || !strstr(err, want))
        fail_msg("error '%s' lacks prefix '%s' or '%s'", err, prefix, want);
}

typedef struct { int32_t *in, *tg; int n; } Batch;

static Batch batch_new(int B, int T) {
    Batch b = {malloc(sizeof(int32_t) * (size_t)B * T), malloc(sizeof(int32_t) * (size_t)B * T), B * T};
    assert_non_null(b.in);
    assert_non_null(b.tg);
    return b;
}

static void batch_free(Batch *b) {
    free(b->in);
    free(b->tg);
}

static void next_ok(DataSource *ds, Batch *b) { assert_int_equal(data_next(ds, b->in, b->tg), 0); }

static int batch_equal(const Batch *a, const Batch *b) {
    return memcmp(a->in, b->in, sizeof(int32_t) * (size_t)a->n) == 0 &&
           memcmp(a->tg, b->tg, sizeof(int32_t) * (size_t)a->n) == 0;
}

static void check_shift_and_range(const Batch *b, int B, int T, int V) {
    for (int s = 0; s < B; s++)
        for (int t = 0; t < T; t++) {
            int i = s * T + t;
            assert_in_range(b->in[i], 0, V - 1);
            assert_in_range(b->tg[i], 0, V - 1);
            if (t + 1 < T) assert_int_equal(b->in[i + 1], b->tg[i]);
        }
}

// ---- properties common to all sources -------------------------------------------

// Resume: a position saved after k0 batches, restored into a fresh source,
// replays the next n batches exactly (and ends at the same position).
static void check_resume(int kind, const char *path, int V, int B, int T, int k0, int n) {
    DataSource *a = open_ok(kind, path, V, B, T, 99, 0, 1);
    DataSource *b = open_ok(kind, path, V, B, T, 99, 0, 1);
    Batch x = batch_new(B, T), y = batch_new(B, T);
    for (int i = 0; i < k0; i++) next_ok(a, &x);
    DataPos p = data_get_pos(a);
    data_set_pos(b, p);
    DataPos q = data_get_pos(b);
    assert_memory_equal(&p, &q, sizeof p);
    for (int i = 0; i < n; i++) {
        next_ok(a, &x);
        next_ok(b, &y);
        check_shift_and_range(&x, B, T, V);
        assert_true(batch_equal(&x, &y));
    }
    p = data_get_pos(a);
    q = data_get_pos(b);
    assert_int_equal(p.batches, q.batches);
    assert_int_equal(p.shard, q.shard);
    assert_int_equal(p.offset, q.offset);
    assert_int_equal(p.batches, (uint64_t)(k0 + n));
    batch_free(&x);
    batch_free(&y);
    data_close(a);
    data_close(b);
}

// Rank split: with the same global batch size (world*B), rank r of world 2
// gets sequences [r*B, (r+1)*B) of the world-1 global batch, batch after batch.
static void check_rank_split(int kind, const char *path, int V, int B, int T, int n) {
    DataSource *g = open_ok(kind, path, V, 2 * B, T, 5, 0, 1);
    DataSource *r0 = open_ok(kind, path, V, B, T, 5, 0, 2);
    DataSource *r1 = open_ok(kind, path, V, B, T, 5, 1, 2);
    Batch gb = batch_new(2 * B, T), b0 = batch_new(B, T), b1 = batch_new(B, T);
    size_t half = sizeof(int32_t) * (size_t)B * T;
    for (int i = 0; i < n; i++) {
        next_ok(g, &gb);
        next_ok(r0, &b0);
        next_ok(r1, &b1);
        assert_memory_equal(b0.in, gb.in, half);
        assert_memory_equal(b0.tg, gb.tg, half);
        assert_memory_equal(b1.in, gb.in + B * T, half);
        assert_memory_equal(b1.tg, gb.tg + B * T, half);
    }
    assert_non_null(strstr(data_describe(r1), "rank 1/2"));
    batch_free(&gb);
    batch_free(&b0);
    batch_free(&b1);
    data_close(g);
    data_close(r0);
    data_close(r1);
}

// ---- synthetic -----------------------------------------------------------------

static void test_synthetic_formula(void **state) {
    const int V = 1000, B = 3, T = 16;
    // rank 1 of 2: global sequence index gs = batches*world*B + rank*B + b.
    DataSource *ds = open_ok(NSA_DATA_SYNTHETIC, NULL, V, B, T, 7, 1, 2);
    Batch x = batch_new(B, T);
    for (uint64_t n = 0; n < 3; n++) {
        next_ok(ds, &x);
        for (int b = 0; b < B; b++) {
            uint64_t gs = n * 2 * B + 1 * B + (uint64_t)b;
            for (int t = 0; t < T; t++) {
                assert_int_equal(x.in[b * T + t], rng_below(7, 0x5EED0000 + gs, (uint64_t)t, V));
                assert_int_equal(x.tg[b * T + t], rng_below(7, 0x5EED0000 + gs, (uint64_t)t + 1, V));
            }
        }
    }
    assert_int_equal(data_get_pos(ds).batches, 3);
    assert_non_null(strstr(data_describe(ds), "synthetic"));
    assert_true(data_unigram_entropy(ds) == -1.0);
    assert_true(data_optimal_entropy(ds) == -1.0);
    batch_free(&x);
    data_close(ds);
}

// Same seed same batches; another seed other batches (synthetic and learnable).
static void test_seed_determinism(void **state) {
    const int kinds[2] = {NSA_DATA_SYNTHETIC, NSA_DATA_LEARNABLE};
    for (int k = 0; k < 2; k++) {
        DataSource *a = open_ok(kinds[k], NULL, 256, 4, 32, 1337, 0, 1);
        DataSource *b = open_ok(kinds[k], NULL, 256, 4, 32, 1337, 0, 1);
        DataSource *c = open_ok(kinds[k], NULL, 256, 4, 32, 1338, 0, 1);
        Batch x = batch_new(4, 32), y = batch_new(4, 32), z = batch_new(4, 32), first = batch_new(4, 32);
        for (int i = 0; i < 5; i++) {
            next_ok(a, &x);
            next_ok(b, &y);
            next_ok(c, &z);
            check_shift_and_range(&x, 4, 32, 256);
            assert_true(batch_equal(&x, &y));
            assert_false(batch_equal(&x, &z));
            if (i == 0) memcpy(first.in, x.in, sizeof(int32_t) * 4 * 32);
            else assert_memory_not_equal(first.in, x.in, sizeof(int32_t) * 4 * 32);
        }
        assert_string_equal(data_describe(a), data_describe(b));
        batch_free(&x);
        batch_free(&y);
        batch_free(&z);
        batch_free(&first);
        data_close(a);
        data_close(b);
        data_close(c);
    }
}

// Batch i after set_pos(i) on a fresh source equals batch i drawn in sequence.
static void test_batch_independent_of_history(void **state) {
    const int kinds[2] = {NSA_DATA_SYNTHETIC, NSA_DATA_LEARNABLE};
    for (int k = 0; k < 2; k++) {
        DataSource *a = open_ok(kinds[k], NULL, 300, 2, 24, 3, 0, 1);
        Batch seq[6], x = batch_new(2, 24);
        for (int i = 0; i < 6; i++) {
            seq[i] = batch_new(2, 24);
            next_ok(a, &seq[i]);
        }
        for (int i = 5; i >= 0; i--) {   // any order: each batch is a pure function of i
            DataSource *b = open_ok(kinds[k], NULL, 300, 2, 24, 3, 0, 1);
            data_set_pos(b, (DataPos){.batches = (uint64_t)i});
            next_ok(b, &x);
            assert_true(batch_equal(&x, &seq[i]));
            assert_int_equal(data_get_pos(b).batches, (uint64_t)i + 1);
            data_close(b);
        }
        for (int i = 0; i < 6; i++) batch_free(&seq[i]);
        batch_free(&x);
        data_close(a);
    }
}

static void test_resume_and_ranks_generated(void **state) {
    check_resume(NSA_DATA_SYNTHETIC, NULL, 512, 3, 20, 4, 5);
    check_resume(NSA_DATA_LEARNABLE, NULL, 512, 3, 20, 4, 5);
    check_rank_split(NSA_DATA_SYNTHETIC, NULL, 512, 3, 20, 4);
    check_rank_split(NSA_DATA_LEARNABLE, NULL, 512, 3, 20, 4);
}

static void test_bad_parameters(void **state) {
    open_fails(NSA_DATA_SYNTHETIC, NULL, 0, 2, 8, 0, 1, "data: ", "invalid parameters");
    open_fails(NSA_DATA_SYNTHETIC, NULL, 256, 0, 8, 0, 1, "data: ", "invalid parameters");
    open_fails(NSA_DATA_SYNTHETIC, NULL, 256, 2, 0, 0, 1, "data: ", "invalid parameters");
    open_fails(NSA_DATA_SYNTHETIC, NULL, 256, 2, 8, 2, 2, "data: ", "invalid parameters");
    open_fails(NSA_DATA_SYNTHETIC, NULL, 256, 2, 8, -1, 2, "data: ", "invalid parameters");
    open_fails(NSA_DATA_SYNTHETIC, NULL, 256, 65536, 65536, 0, 1, "data: ", "invalid parameters");
    open_fails(42, NULL, 256, 2, 8, 0, 1, "data: ", "unknown data kind");
    open_fails(NSA_DATA_SHARDS, NULL, 256, 2, 8, 0, 1, "data: ", "needs a path");
    open_fails(NSA_DATA_TEXT, "", 256, 2, 8, 0, 1, "data: ", "needs a path");
}

// ---- learnable -------------------------------------------------------------------

static const double LP[4] = {0.6, 0.25, 0.1, 0.05};

// The chain rebuilt from the documented generator: succ[v*4+k], the merged
// transition probability p(w | v) and the stationary pi by plain (non-lazy)
// power iteration, a different route than data.c's.
typedef struct { int V; int32_t *succ; double *pi; } Chain;

static Chain chain_new(int V, uint64_t seed) {
    Chain c = {V, malloc(sizeof(int32_t) * 4 * (size_t)V), malloc(sizeof(double) * (size_t)V)};
    double *nx = malloc(sizeof(double) * (size_t)V);
    assert_non_null(c.succ);
    assert_non_null(c.pi);
    assert_non_null(nx);
    for (int v = 0; v < V; v++)
        for (int k = 0; k < 4; k++) c.succ[4 * v + k] = (int32_t)rng_below(seed ^ 0xC4A1, (uint64_t)v, (uint64_t)k, (uint64_t)V);
    for (int v = 0; v < V; v++) c.pi[v] = 1.0 / V;
    for (int it = 0; it < 3000; it++) {
        memset(nx, 0, sizeof(double) * (size_t)V);
        for (int v = 0; v < V; v++)
            for (int k = 0; k < 4; k++) nx[c.succ[4 * v + k]] += LP[k] * c.pi[v];
        memcpy(c.pi, nx, sizeof(double) * (size_t)V);
    }
    free(nx);
    return c;
}

static double chain_p(const Chain *c, int v, int w) {
    double p = 0.0;
    for (int k = 0; k < 4; k++)
        if (c->succ[4 * v + k] == w) p += LP[k];
    return p;
}

static void test_learnable_entropies(void **state) {
    const int V = 256;
    DataSource *ds = open_ok(NSA_DATA_LEARNABLE, NULL, V, 8, 64, 1337, 0, 1);
    double hu = data_unigram_entropy(ds), ho = data_optimal_entropy(ds);
    print_message("learnable V=256 seed=1337: unigram %.6f nats, optimal %.6f nats\n", hu, ho);
    print_message("describe: %s\n", data_describe(ds));
    assert_true(ho > 0.0);
    assert_true(ho < hu);
    assert_true(hu <= log((double)V) + 1e-12);
    // The K=4 distribution's own entropy bounds the optimal one (merging lowers it).
    double hk = 0.0;
    for (int k = 0; k < 4; k++) hk -= LP[k] * log(LP[k]);
    assert_true(ho <= hk + 1e-12);

    Chain c = chain_new(V, 1337);
    double eu = 0.0, eo = 0.0;
    for (int v = 0; v < V; v++) {
        if (c.pi[v] > 0) eu -= c.pi[v] * log(c.pi[v]);
        for (int w = 0; w < V; w++) {   // O(V^2) here on purpose: no merging logic to share a bug with
            double p = chain_p(&c, v, w);
            if (p > 0) eo -= c.pi[v] * p * log(p);
        }
    }
    assert_float_equal(hu, eu, 1e-9);
    assert_float_equal(ho, eo, 1e-9);
    char want[128];
    snprintf(want, sizeof want, "learnable markov V=256 K=4 seed=1337 (unigram %.2f nats, optimal %.2f nats)", hu, ho);
    assert_string_equal(data_describe(ds), want);

    // V=1: a single token that always follows itself; nothing to predict.
    DataSource *one = open_ok(NSA_DATA_LEARNABLE, NULL, 1, 1, 4, 1, 0, 1);
    assert_float_equal(data_unigram_entropy(one), 0.0, 1e-12);
    assert_float_equal(data_optimal_entropy(one), 0.0, 1e-12);
    data_close(one);
    free(c.succ);
    free(c.pi);
    data_close(ds);
}

// Sampled data follow the chain: only successors occur, token frequencies match
// pi, and the empirical loss of the true predictor matches the optimal entropy.
static void test_learnable_statistics(void **state) {
    const int V = 256, B = 16, T = 128, N = 100;
    DataSource *ds = open_ok(NSA_DATA_LEARNABLE, NULL, V, B, T, 1337, 0, 1);
    Chain c = chain_new(V, 1337);
    Batch x = batch_new(B, T);
    double *freq = calloc((size_t)V, sizeof(double));
    double *first = calloc((size_t)V, sizeof(double));
    assert_non_null(freq);
    assert_non_null(first);
    double nll = 0.0, count = 0.0;
    for (int n = 0; n < N; n++) {
        next_ok(ds, &x);
        for (int i = 0; i < B * T; i++) {
            double p = chain_p(&c, x.in[i], x.tg[i]);
            if (p <= 0.0) fail_msg("transition %d -> %d is not a successor", x.in[i], x.tg[i]);
            nll -= log(p);
            freq[x.tg[i]] += 1.0;
            count += 1.0;
        }
        for (int b = 0; b < B; b++) first[x.in[b * T]] += 1.0;
    }
    double kl = 0.0, kl_first = 0.0;
    for (int v = 0; v < V; v++) {
        double q = freq[v] / count, q0 = first[v] / (N * B);
        if (q > 0) {
            if (c.pi[v] <= 0) fail_msg("token %d occurs but has stationary probability 0", v);
            kl += q * log(q / c.pi[v]);
        }
        if (q0 > 0) {
            if (c.pi[v] <= 0) fail_msg("first token %d has stationary probability 0", v);
            kl_first += q0 * log(q0 / c.pi[v]);
        }
    }
    print_message("KL(empirical || pi) = %.5f over %.0f tokens; first tokens %.4f; mean NLL %.4f vs optimal %.4f\n",
                  kl, count, kl_first, nll / count, data_optimal_entropy(ds));
    // Sampling noise alone gives ~(V-1)/(2N) ~ 0.0004 here (more with correlation).
    assert_true(kl < 0.01);
    // 1600 first tokens over 256 values: noise ~0.08; a uniform start without
    // burn-in would be far off pi (KL(uniform || pi) ~ log V - H(pi) and more).
    assert_true(kl_first < 0.2);
    assert_float_equal(nll / count, data_optimal_entropy(ds), 0.02);
    free(freq);
    free(first);
    free(c.succ);
    free(c.pi);
    batch_free(&x);
    data_close(ds);
}

// ---- shards ------------------------------------------------------------------------

// Tokens of test shard s, index i: distinct per (s, i) so any misread shows.
static uint16_t shard_tok(int s, int64_t i, int V) { return (uint16_t)((s * 7919 + i * 31 + i / 7) % V); }

static void write_test_shard(const char *path, int s, int64_t n, int V) {
    uint16_t *t = malloc(sizeof(uint16_t) * (size_t)(n ? n : 1));
    assert_non_null(t);
    for (int64_t i = 0; i < n; i++) t[i] = shard_tok(s, i, V);
    assert_int_equal(data_write_shard(path, t, n), 0);
    free(t);
}

// The format of data_write_shard, checked byte by byte.
static void test_shard_file_format(void **state) {
    char path[512];
    path_in_dir(path, sizeof path, "fmt.bin");
    const uint16_t toks[3] = {1, 0xABCD, 65535};
    assert_int_equal(data_write_shard(path, toks, 3), 0);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    unsigned char buf[2048];
    size_t n = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    assert_int_equal(n, 1024 + 6);
    const unsigned char h0[12] = {0x88, 0xD8, 0x34, 0x01, 1, 0, 0, 0, 3, 0, 0, 0};   // 20240520 = 0x0134D888, 1, 3
    assert_memory_equal(buf, h0, 12);
    for (int i = 12; i < 1024; i++) assert_int_equal(buf[i], 0);
    const unsigned char t[6] = {1, 0, 0xCD, 0xAB, 0xFF, 0xFF};
    assert_memory_equal(buf + 1024, t, 6);
    assert_int_equal(data_write_shard(path, toks, -1), -1);
}

static void test_shards_readback(void **state) {
    const int V = 50000, B = 2, T = 8, S = 3;
    const int64_t stride = (int64_t)B * T;   // world 1
    // Shard 1 holds exactly two windows (2*stride+1 tokens); the others leave
    // a remainder that is skipped.
    const int64_t counts[3] = {5 * stride + 7, 2 * stride + 1, 3 * stride + stride};
    char path[512], pattern[512];
    for (int s = 0; s < S; s++) {
        char name[64];
        snprintf(name, sizeof name, "train_%03d.bin", s);
        path_in_dir(path, sizeof path, name);
        write_test_shard(path, s, counts[s], V);
    }
    path_in_dir(pattern, sizeof pattern, "train_*.bin");
    DataSource *ds = open_ok(NSA_DATA_SHARDS, pattern, V, B, T, 0, 0, 1);
    assert_non_null(strstr(data_describe(ds), "shards 3 files"));

    // Independent model of the rule: a window needs stride+1 tokens from offset.
    int s = 0;
    int64_t off = 0;
    Batch x = batch_new(B, T);
    int changes = 0, wraps = 0;
    for (int n = 0; n < 40; n++) {
        if (counts[s] - off < stride + 1) {
            s = (s + 1) % S;
            off = 0;
            changes++;
            wraps += s == 0;
        }
        next_ok(ds, &x);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                assert_int_equal(x.in[b * T + t], shard_tok(s, off + b * T + t, V));
                assert_int_equal(x.tg[b * T + t], shard_tok(s, off + b * T + t + 1, V));
            }
        off += stride;
        DataPos p = data_get_pos(ds);
        assert_int_equal(p.shard, s);
        assert_int_equal(p.offset, off);
    }
    assert_true(changes >= 6);
    assert_true(wraps >= 2);
    batch_free(&x);
    data_close(ds);

    // Resume across shard changes; world 2 ranks against the world 1 batch.
    for (int k0 = 0; k0 < 12; k0++) check_resume(NSA_DATA_SHARDS, pattern, V, B, T, k0, 9);
    check_rank_split(NSA_DATA_SHARDS, pattern, V, 1, T, 30);

    // A single file (no glob characters) is a one-shard data set that wraps.
    path_in_dir(path, sizeof path, "train_001.bin");
    ds = open_ok(NSA_DATA_SHARDS, path, V, B, T, 0, 0, 1);
    Batch y = batch_new(B, T);
    for (int n = 0; n < 5; n++) {
        next_ok(ds, &y);
        assert_int_equal(y.in[0], shard_tok(1, (n % 2) * stride, V));
    }
    batch_free(&y);
    data_close(ds);
}

static void write_shard_header(const char *path, int32_t magic, int32_t version, int32_t count,
                               int64_t ntok) {
    int32_t h[256] = {magic, version, count};
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(h, 4, 256, fp), 256);
    for (int64_t i = 0; i < ntok; i++) {
        uint16_t t = (uint16_t)(i % 200);
        assert_int_equal(fwrite(&t, 2, 1, fp), 1);
    }
    assert_int_equal(fclose(fp), 0);
}

static void test_shard_errors(void **state) {
    char path[512], want[700];
    const int V = 256, B = 2, T = 8;   // a batch needs 17 tokens

    path_in_dir(path, sizeof path, "magic.bin");
    write_shard_header(path, 123, 1, 100, 100);
    snprintf(want, sizeof want, "%s: bad magic 123 (expected 20240520)", path);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, want, "");

    path_in_dir(path, sizeof path, "version.bin");
    write_shard_header(path, 20240520, 7, 100, 100);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "unsupported version 7");

    path_in_dir(path, sizeof path, "trunc.bin");
    write_shard_header(path, 20240520, 1, 100, 99);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "truncated");
    write_bytes(path, "\x88\xD8\x34\x01", 4);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "truncated");

    path_in_dir(path, sizeof path, "trailing.bin");
    write_shard_header(path, 20240520, 1, 100, 101);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "bytes after");

    path_in_dir(path, sizeof path, "negative.bin");
    write_shard_header(path, 20240520, 1, -5, 0);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "negative token count");

    path_in_dir(path, sizeof path, "small.bin");
    write_shard_header(path, 20240520, 1, 16, 16);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "too few for one micro-batch");

    // A token >= V in the first shard is found at open, with its index.
    path_in_dir(path, sizeof path, "badtok.bin");
    uint16_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (uint16_t)i;
    toks[37] = 256;
    assert_int_equal(data_write_shard(path, toks, 40), 0);
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "token 256 at index 37 is >= vocab_size 256");
    // ... in a later shard, data_next fails when it gets there.
    char pattern[512], first[512];
    path_in_dir(first, sizeof first, "bigtok_0.bin");
    toks[37] = 5;
    assert_int_equal(data_write_shard(first, toks, 40), 0);   // 2 batches of 17
    toks[3] = 60000;
    path_in_dir(path, sizeof path, "bigtok_1.bin");
    assert_int_equal(data_write_shard(path, toks, 40), 0);
    path_in_dir(pattern, sizeof pattern, "bigtok_?.bin");
    DataSource *ds = open_ok(NSA_DATA_SHARDS, pattern, V, B, T, 0, 0, 1);
    Batch x = batch_new(B, T);
    next_ok(ds, &x);
    next_ok(ds, &x);
    assert_int_equal(data_next(ds, x.in, x.tg), -1);
    assert_int_equal(data_next(ds, x.in, x.tg), -1);   // and stays failed
    // A position outside the data is refused, not read.
    data_set_pos(ds, (DataPos){.shard = 5});
    assert_int_equal(data_next(ds, x.in, x.tg), -1);
    data_set_pos(ds, (DataPos){.shard = 0, .offset = -1});
    assert_int_equal(data_next(ds, x.in, x.tg), -1);
    data_set_pos(ds, (DataPos){.shard = 0, .offset = 17});
    next_ok(ds, &x);
    assert_int_equal(x.in[0], 17);
    batch_free(&x);
    data_close(ds);

    // A shard rewritten with another token count after open is refused when
    // reached (the position bookkeeping assumed the old count).
    path_in_dir(first, sizeof first, "grow_0.bin");
    path_in_dir(path, sizeof path, "grow_1.bin");
    assert_int_equal(data_write_shard(first, toks + 4, 34), 0);   // 2 batches
    assert_int_equal(data_write_shard(path, toks + 4, 34), 0);
    path_in_dir(pattern, sizeof pattern, "grow_?.bin");
    ds = open_ok(NSA_DATA_SHARDS, pattern, V, B, T, 0, 0, 1);
    assert_int_equal(data_write_shard(path, toks + 4, 36), 0);
    x = batch_new(B, T);
    next_ok(ds, &x);
    next_ok(ds, &x);
    assert_int_equal(data_next(ds, x.in, x.tg), -1);
    batch_free(&x);
    data_close(ds);

    path_in_dir(path, sizeof path, "missing.bin");
    open_fails(NSA_DATA_SHARDS, path, V, B, T, 0, 1, path, "No such file");
    path_in_dir(pattern, sizeof pattern, "nothing_*.bin");
    open_fails(NSA_DATA_SHARDS, pattern, V, B, T, 0, 1, pattern, "no file matches");
}

// ---- text ------------------------------------------------------------------------

static void test_text(void **state) {
    const int B = 2, T = 10;
    const int64_t stride = B * T, size = 1000;   // 49 windows, then wrap (20 left < 21)
    char path[512];
    path_in_dir(path, sizeof path, "corpus.txt");
    unsigned char buf[1000];
    for (int i = 0; i < size; i++) buf[i] = (unsigned char)(rng_u64(4, 0, (uint64_t)i) & 0xFF);
    write_bytes(path, buf, sizeof buf);

    DataSource *ds = open_ok(NSA_DATA_TEXT, path, 256, B, T, 0, 0, 1);
    assert_non_null(strstr(data_describe(ds), "text"));
    Batch x = batch_new(B, T);
    int64_t off = 0;
    int saw_high = 0;
    for (int n = 0; n < 120; n++) {
        if (size - off < stride + 1) off = 0;
        next_ok(ds, &x);
        for (int i = 0; i < B * T; i++) {
            assert_int_equal(x.in[i], buf[off + i]);
            assert_int_equal(x.tg[i], buf[off + i + 1]);
            saw_high |= x.in[i] >= 128;   // bytes are unsigned tokens
        }
        off += stride;
        assert_int_equal(data_get_pos(ds).offset, off);
    }
    assert_true(saw_high);
    batch_free(&x);
    data_close(ds);
    check_resume(NSA_DATA_TEXT, path, 256, B, T, 47, 6);   // across the wrap
    check_rank_split(NSA_DATA_TEXT, path, 300, 1, T, 60);

    open_fails(NSA_DATA_TEXT, path, 255, B, T, 0, 1, path, "vocab_size >= 256");
    path_in_dir(path, sizeof path, "empty.txt");
    write_bytes(path, "", 0);
    open_fails(NSA_DATA_TEXT, path, 256, B, T, 0, 1, path, "empty file");
    path_in_dir(path, sizeof path, "tiny.txt");
    write_bytes(path, buf, 20);
    open_fails(NSA_DATA_TEXT, path, 256, B, T, 0, 1, path, "too few for one micro-batch");
    path_in_dir(path, sizeof path, "absent.txt");
    open_fails(NSA_DATA_TEXT, path, 256, B, T, 0, 1, path, "No such file");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synthetic_formula),
        cmocka_unit_test(test_seed_determinism),
        cmocka_unit_test(test_batch_independent_of_history),
        cmocka_unit_test(test_resume_and_ranks_generated),
        cmocka_unit_test(test_bad_parameters),
        cmocka_unit_test(test_learnable_entropies),
        cmocka_unit_test(test_learnable_statistics),
        cmocka_unit_test(test_shard_file_format),
        cmocka_unit_test(test_shards_readback),
        cmocka_unit_test(test_shard_errors),
        cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
