// tests/trainer/test_ddp.c — the data-parallel layer (trainer/ddp.c, trainer/comm.c)
// in one process: an MPI singleton (world size 1, --transport mpi), tiny config,
// CPU backend. What a single rank can show on its own:
//   - the bucket layout: reverse parameter order, contiguous, within the cap (a
//     larger parameter alone), covering every parameter exactly once
//     (OUT/buckets.jsonl records, one per bucket, each with a coll_seq);
//   - a world-1 reduction leaves the gradients bitwise unchanged;
//   - default mode with a parameter that never arrives: the bucket is never
//     launched, the record says so (launched false, missing [PARAM]) and the wait
//     ends in NSA_EXIT_COMM_TIMEOUT after the timeout, not never;
//   - find_unused: the same run completes and the parameter's gradient is 0;
//   - static_graph: the set recorded at step 1; a parameter missing at step 2 is
//     NSA_EXIT_DDP_CONTRACT (exit 5), not a hang;
//   - no_sync: a non-reducing micro-batch launches nothing;
//   - divergent_unused: parsing, the default parameter (gate.fc2 of the middle
//     layer, o_proj with force_branch), applied on its rank only; hang PHASE comm.
// The 2-rank behaviour (hangs across ranks, equality with one rank) is in
// tests/cli/ddp_mpi.sh. Without MPI in the build: SKIP (exit 77).
#define _POSIX_C_SOURCE 200809L   // mkdtemp
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trainer/comm.h"
#include "common/config.h"
#include "trainer/ddp.h"
#include "trainer/faults.h"
#include "trainer/flightrec.h"
#include "trainer/model.h"
#include "trainer/rng.h"
#include "trainer/train.h"
#include "tests/trainer/tiny_model.h"

#ifndef NSA_HAVE_MPI
int main(void) {
    printf("SKIP: this build has no MPI (the data-parallel layer needs it)\n");
    return 77;
}
#else
static CommWorld g_world;
static char g_tmp[256];

static void on_ready(void *ctx, int id) { ddp_grad_ready(ctx, id); }

static const char *subdir(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
    return path;
}

static Ddp *open_ddp(Model *m, int mode, double bucket_mb, double timeout_s, const char *out) {
    DdpOpts o = {mode, bucket_mb, timeout_s, out, NULL};
    char err[1024];
    int rc = -1;
    Ddp *d = ddp_open(m, &g_world, &o, &rc, err, sizeof err);
    if (!d) fprintf(stderr, "ddp_open: %s\n", err);
    assert_non_null(d);
    assert_int_equal(rc, 0);
    m->grad_ready = on_ready;
    m->grad_ready_ctx = d;
    return d;
}

// One forward + backward (a reducing one) of a fixed batch; returns finish's code.
static int step(Model *m, Ddp *d, int64_t s) {
    const int N = m->B * m->T;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N);
    for (int i = 0; i < N; i++) {
        in[i] = (int32_t)rng_below(7, 1, (uint64_t)i, (uint64_t)m->V);
        tg[i] = (int32_t)rng_below(7, 2, (uint64_t)i, (uint64_t)m->V);
    }
    model_zero_grad(m);
    if (d) ddp_begin_step(d, s);
    assert_true(isfinite(model_forward(m, in, tg, 1.0 / N)));
    if (d) ddp_begin_backward(d, 1);
    assert_int_equal(model_backward(m), 0);
    free(in); free(tg);
    return d ? ddp_finish_backward(d) : 0;
}

// The records of OUT/buckets.jsonl (a JSON array of objects).
static json_t *records(const char *out) {
    char path[600];
    snprintf(path, sizeof path, "%s/buckets.jsonl", out);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    json_t *all = json_array();
    char line[1 << 16];
    while (fgets(line, sizeof line, f)) {
        json_error_t je;
        json_t *r = json_loads(line, 0, &je);
        if (!r) fail_msg("%s: %s", path, je.text);
        json_array_append_new(all, r);
    }
    fclose(f);
    return all;
}

static void test_layout_and_identity(void **state) {
    (void)state;
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model ref, m;
    make_model(&ref, &cfg);
    make_model(&m, &cfg);
    step(&ref, NULL, 1);
    const char *out = subdir("layout");
    const double cap_mb = 0.05;
    Ddp *d = open_ddp(&m, NSA_DDP_DEFAULT, cap_mb, 30, out);
    assert_int_equal(step(&m, d, 1), 0);
    // world 1: the sum is the identity, bit for bit
    size_t bytes = (size_t)m.n_elems * m.be->param_bytes;
    assert_memory_equal(m.grad_mem, ref.grad_mem, bytes);
    json_t *rs = records(out);
    const int nb = ddp_n_buckets(d);
    assert_int_equal((int)json_array_size(rs), nb);
    assert_true(nb > 3);
    // concatenated bucket params == reverse parameter order; each within the cap
    int expect = m.n_params - 1;
    int64_t total = 0, prev_seq = 0;
    for (int k = 0; k < nb; k++) {
        json_t *r = json_array_get(rs, (size_t)k);
        assert_int_equal(json_integer_value(json_object_get(r, "bucket")), k);
        assert_int_equal(json_integer_value(json_object_get(r, "step")), 1);
        assert_int_equal(json_integer_value(json_object_get(r, "rank")), 0);
        assert_string_equal(json_string_value(json_object_get(r, "dtype")), "f32");
        assert_true(json_is_true(json_object_get(r, "launched")));
        assert_int_equal(json_array_size(json_object_get(r, "missing")), 0);
        assert_true(json_is_number(json_object_get(r, "ready_ms")));
        assert_true(json_is_number(json_object_get(r, "complete_ms")));
        int64_t seq = json_integer_value(json_object_get(r, "coll_seq"));
        assert_true(seq > prev_seq);   // launched in bucket order
        prev_seq = seq;
        json_t *ps = json_object_get(r, "params");
        int64_t el = 0;
        for (size_t i = 0; i < json_array_size(ps); i++, expect--) {
            assert_string_equal(json_string_value(json_array_get(ps, i)), m.params[expect].name);
            el += m.params[expect].numel;
        }
        assert_int_equal(json_integer_value(json_object_get(r, "elements")), el);
        assert_int_equal(json_integer_value(json_object_get(r, "bytes")), el * 4);
        if (json_array_size(ps) > 1) assert_true((double)el * 4 <= cap_mb * 1048576.0);
        total += el;
    }
    assert_int_equal(expect, -1);
    assert_int_equal(total, m.n_elems);
    assert_string_equal(json_string_value(json_array_get(json_object_get(json_array_get(rs, 0), "params"), 0)),
                        cfg.tie_embeddings ? "norm_f.weight" : "lm_head.weight");
    json_decref(rs);
    ddp_close(d, 1);
    m.grad_ready = NULL;
    model_free(&m);
    model_free(&ref);
}

// a Faults object that drops one parameter's gradient (drop_grad) on this rank
static void drop_fault(Faults *f, Model *m, const char *name) {
    faults_init(f);
    char spec[128], err[512];
    snprintf(spec, sizeof spec, "drop_grad=%s", name);
    assert_int_equal(faults_parse(f, spec, err, sizeof err), 0);
    assert_int_equal(faults_bind(f, m, 0, err, sizeof err), 0);
}

static void test_default_missing_times_out(void **state) {
    (void)state;
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model m;
    make_model(&m, &cfg);
    const char *victim = "blocks.1.attn.gate.fc2.weight";
    Faults f;
    drop_fault(&f, &m, victim);
    const char *out = subdir("default_missing");
    Ddp *d = open_ddp(&m, NSA_DDP_DEFAULT, 0.05, 0.5, out);
    assert_int_equal(step(&m, d, 1), NSA_EXIT_COMM_TIMEOUT);
    json_t *rs = records(out);
    assert_int_equal((int)json_array_size(rs), ddp_n_buckets(d));
    int found = 0, after = 0;
    for (size_t k = 0; k < json_array_size(rs); k++) {
        json_t *r = json_array_get(rs, k);
        json_t *miss = json_object_get(r, "missing");
        if (json_array_size(miss)) {
            assert_int_equal(json_array_size(miss), 1);
            assert_string_equal(json_string_value(json_array_get(miss, 0)), victim);
            assert_true(json_is_false(json_object_get(r, "launched")));
            assert_true(json_is_null(json_object_get(r, "coll_seq")));
            assert_true(json_is_null(json_object_get(r, "ready_ms")));
            found = 1;
        } else if (found) {
            // held back behind it: ready, but never launched (launch order)
            assert_true(json_is_false(json_object_get(r, "launched")));
            assert_true(json_is_number(json_object_get(r, "ready_ms")));
            after++;
        } else {
            assert_true(json_is_true(json_object_get(r, "launched")));
        }
    }
    assert_true(found);
    assert_true(after > 0);
    json_decref(rs);
    ddp_close(d, 0);
    m.grad_ready = NULL;
    faults_unbind(&f, &m);
    model_free(&m);
}

static void test_find_unused(void **state) {
    (void)state;
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model m;
    make_model(&m, &cfg);
    const char *victim = "blocks.1.attn.gate.fc2.weight";
    Faults f;
    drop_fault(&f, &m, victim);
    const char *out = subdir("find_unused");
    Ddp *d = open_ddp(&m, NSA_DDP_FIND_UNUSED, 0.05, 30, out);
    assert_int_equal(step(&m, d, 1), 0);
    assert_int_equal(step(&m, d, 2), 0);
    int id = model_find_param(&m, victim);
    double *g = malloc(sizeof(double) * (size_t)m.params[id].numel);
    m.be->param_to_f64(g, model_grad_ptr(&m, id), m.params[id].numel);
    for (int64_t i = 0; i < m.params[id].numel; i++) assert_true(g[i] == 0.0);
    free(g);
    json_t *rs = records(out);
    assert_int_equal((int)json_array_size(rs), 2 * ddp_n_buckets(d));
    for (size_t k = 0; k < json_array_size(rs); k++)
        assert_true(json_is_true(json_object_get(json_array_get(rs, k), "launched")));
    json_decref(rs);
    ddp_close(d, 1);
    m.grad_ready = NULL;
    faults_unbind(&f, &m);
    model_free(&m);
}

static void test_static_graph(void **state) {
    (void)state;
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model m;
    make_model(&m, &cfg);
    const char *out = subdir("static");
    Ddp *d = open_ddp(&m, NSA_DDP_STATIC_GRAPH, 0.05, 30, out);
    assert_int_equal(step(&m, d, 1), 0);   // recorded: every parameter
    assert_int_equal(step(&m, d, 2), 0);   // the same set
    // step 3: one parameter does not arrive (driven by hand): exit 1, no hang
    ddp_begin_step(d, 3);
    ddp_begin_backward(d, 1);
    int victim = model_find_param(&m, "blocks.0.mlp.up_proj.weight");
    for (int id = m.n_params - 1; id >= 0; id--)
        if (id != victim) ddp_grad_ready(d, id);
    assert_int_equal(ddp_finish_backward(d), NSA_EXIT_DDP_CONTRACT);
    ddp_close(d, 1);

    // force_branch: the bypassed gate never arrives; static_graph records that
    // at step 1 and the next steps pass
    const char *sets[] = {"nsa.force_branch=\"win\""};
    NsaConfig cfg2;
    load_cfg(&cfg2, sets, 1);
    Model m2;
    make_model(&m2, &cfg2);
    d = open_ddp(&m2, NSA_DDP_STATIC_GRAPH, 0.05, 30, subdir("static_force"));
    for (int s = 1; s <= 3; s++) assert_int_equal(step(&m2, d, s), 0);
    ddp_close(d, 1);
    // ... while default mode waits for them: a timeout
    d = open_ddp(&m2, NSA_DDP_DEFAULT, 0.05, 0.3, subdir("default_force"));
    assert_int_equal(step(&m2, d, 1), NSA_EXIT_COMM_TIMEOUT);
    ddp_close(d, 0);
    m.grad_ready = m2.grad_ready = NULL;
    model_free(&m);
    model_free(&m2);
}

static void test_no_sync(void **state) {
    (void)state;
    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model m;
    make_model(&m, &cfg);
    const char *out = subdir("no_sync");
    Ddp *d = open_ddp(&m, NSA_DDP_DEFAULT, 0.05, 30, out);
    ddp_begin_step(d, 1);
    ddp_begin_backward(d, 0);   // not the last micro-batch: arrivals are ignored
    for (int id = m.n_params - 1; id >= 0; id--) ddp_grad_ready(d, id);
    ddp_begin_backward(d, 1);
    for (int id = m.n_params - 1; id >= 0; id--) ddp_grad_ready(d, id);
    assert_int_equal(ddp_finish_backward(d), 0);
    json_t *rs = records(out);
    assert_int_equal((int)json_array_size(rs), ddp_n_buckets(d));   // one reduction
    json_decref(rs);
    double v = 2.5;
    assert_int_equal(ddp_mean(d, &v, "allreduce test"), 0);
    assert_true(v == 2.5);
    assert_int_equal(ddp_check_weights(d, 1), 0);
    ddp_close(d, 1);
    m.grad_ready = NULL;
    model_free(&m);
}

static void test_divergent_fault(void **state) {
    (void)state;
    char err[1024];
    static const char *bad[] = {"divergent_unused", "divergent_unused=", "divergent_unused=x",
                                "divergent_unused=1:", "divergent_unused=-1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Faults g;
        faults_init(&g);
        assert_int_equal(faults_parse(&g, bad[i], err, sizeof err), -1);
        assert_non_null(strstr(err, bad[i]));
    }
    Faults h;
    faults_init(&h);
    assert_int_equal(faults_parse(&h, "hang=1:2:comm", err, sizeof err), 0);
    assert_int_equal(h.hang_phase, FR_PHASE_COMM);

    NsaConfig cfg;
    load_cfg(&cfg, NULL, 0);
    Model m;
    make_model(&m, &cfg);
    for (int rank = 0; rank < 2; rank++) {
        Faults f;
        faults_init(&f);
        assert_int_equal(faults_parse(&f, "divergent_unused=1", err, sizeof err), 0);
        assert_int_equal(faults_parse(&f, "divergent_unused=0", err, sizeof err), -1);   // once
        assert_int_equal(faults_bind(&f, &m, rank, err, sizeof err), 0);
        assert_string_equal(f.divergent_param, "blocks.1.attn.gate.fc2.weight");   // n_layers 2: layer 1
        int id = model_find_param(&m, f.divergent_param);
        assert_int_equal(faults_grad_dropped(&f, id), rank == 1);
        faults_unbind(&f, &m);
    }
    Faults p;
    faults_init(&p);
    assert_int_equal(faults_parse(&p, "divergent_unused=0:blocks.0.mlp.up_proj.weight", err, sizeof err), 0);
    assert_int_equal(faults_bind(&p, &m, 0, err, sizeof err), 0);
    assert_true(faults_grad_dropped(&p, model_find_param(&m, "blocks.0.mlp.up_proj.weight")));
    faults_unbind(&p, &m);
    faults_init(&p);
    assert_int_equal(faults_parse(&p, "divergent_unused=0:no.such", err, sizeof err), 0);
    assert_int_equal(faults_bind(&p, &m, 1, err, sizeof err), -1);   // unknown on every rank
    assert_non_null(strstr(err, "no parameter 'no.such'"));
    faults_unbind(&p, &m);
    model_free(&m);

    const char *sets[] = {"nsa.force_branch=\"sel\""};
    load_cfg(&cfg, sets, 1);
    make_model(&m, &cfg);
    faults_init(&p);
    assert_int_equal(faults_parse(&p, "divergent_unused=0", err, sizeof err), 0);
    assert_int_equal(faults_bind(&p, &m, 0, err, sizeof err), 0);
    assert_string_equal(p.divergent_param, "blocks.1.attn.o_proj.weight");
    faults_unbind(&p, &m);
    model_free(&m);
}

int main(void) {
    char err[1024];
    if (comm_world_init(&g_world, COMM_MPI, err, sizeof err)) {
        printf("SKIP: MPI singleton init failed: %s\n", err);
        return 77;
    }
    if (g_world.world != 1) {
        printf("test_ddp runs as one process (got world size %d)\n", g_world.world);
        return 1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/nsa_test_ddp_XXXXXX");
    if (!mkdtemp(g_tmp)) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_and_identity),
        cmocka_unit_test(test_default_missing_times_out),
        cmocka_unit_test(test_find_unused),
        cmocka_unit_test(test_static_graph),
        cmocka_unit_test(test_no_sync),
        cmocka_unit_test(test_divergent_fault),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    if (system(cmd)) {}
    comm_world_finalize(&g_world);
    return rc;
}
#endif
