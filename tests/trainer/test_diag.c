// tests/trainer/test_diag.c — the trainer-side diagnostics (docs/diagnostics.md)
// on the CPU backend, tiny config:
//   - gradient-arrival trace: arrival order (lm_head, norm_f, last layer ... tok_emb),
//     nothing missing without force_branch, missing == expected_missing exactly
//     with each force_branch, drop_grad => missing == [PARAM] and its gradient 0;
//   - gate statistics: fc2 std vs the Xavier gain-0.1 expectation, outputs not
//     uniform; gate_zero_init => outputs exactly 1/3 (softmax) / 0.5 (sigmoid),
//     std 0; identical statistics with checkpointing and sequential prefill;
//   - flight recorder: header, exited = 1, last step, events in order, the
//     seqlock reader's torn detection;
//   - faults: nan_at_seqlen (exit 3 and the anomaly record, no effect when T is
//     not a multiple of K), gc_recompute_mismatch and clobber_activation (each
//     changes gradients only in its documented checkpointing case),
//     prefill_state_leak (sequential losses differ from batched from step 2, not
//     step 1, memory grows per step; no effect in batched prefill); the parser;
//   - the step dump's 16-bit widening (actdump_widen16): every bf16 and fp16 bit pattern
//     gives the fp32 bits of the exact value (common/safetensors.c's decoder narrowed to
//     float, as the route through act_to_f64 does), and a NaN sends it back to that route.
#define _POSIX_C_SOURCE 200809L   // mkdtemp, fmemopen
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/safetensors.h"
#include "trainer/actdump.h"
#include "trainer/faults.h"
#include "trainer/flightrec.h"
#include "trainer/gatestats.h"
#include "trainer/model.h"
#include "trainer/rng.h"
#include "trainer/trace.h"
#include "trainer/train.h"
#include "tests/trainer/tiny_model.h"

// ---- helpers ---------------------------------------------------------------------------

static char g_tmp[256];   // per-process scratch directory

// forward + backward of `micro` random micro-batches (gradients accumulated)
static void fwd_bwd(Model *m, int micro) {
    const int N = m->B * m->T;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N);
    model_zero_grad(m);
    for (int k = 0; k < micro; k++) {
        random_batch(in, tg, N, m->V, 99 + (uint64_t)k);
        double loss = model_forward(m, in, tg, 1.0 / ((double)N * micro));
        assert_true(isfinite(loss));
        assert_int_equal(model_backward(m), 0);
    }
    free(in); free(tg);
}

static double *grads_f64(const Model *m) {
    double *g = malloc(sizeof(double) * (size_t)m->n_elems);
    m->be->param_to_f64(g, m->grad_mem, m->n_elems);
    return g;
}

// Gradients of one forward+backward of the tiny model with `sets` and `faults`.
static double *grads_with(const char **sets, int n, Faults *f) {
    NsaConfig cfg;
    load_cfg(&cfg, sets, n);
    Model m;
    make_model(&m, &cfg);
    char err[512];
    if (f) {
        assert_int_equal(faults_check_config(f, &cfg, err, sizeof err), 0);
        assert_int_equal(faults_bind(f, &m, 0, err, sizeof err), 0);
        faults_begin_step(f, &m, 1);
    }
    fwd_bwd(&m, 1);
    double *g = grads_f64(&m);
    for (int64_t i = 0; i < m.n_elems; i++) assert_true(isfinite(g[i]));
    if (f) faults_unbind(f, &m);
    model_free(&m);
    return g;
}

static json_t *parse(const char *js) {
    json_error_t e;
    json_t *j = json_loads(js, 0, &e);
    if (!j) fprintf(stderr, "bad JSON (%s): %s\n", e.text, js);
    assert_non_null(j);
    return j;
}

static int str_list_equal(json_t *a, json_t *b) {
    if (json_array_size(a) != json_array_size(b)) return 0;
    for (size_t i = 0; i < json_array_size(a); i++)
        if (strcmp(json_string_value(json_array_get(a, i)), json_string_value(json_array_get(b, i)))) return 0;
    return 1;
}

static void fault(Faults *f, const char *spec) {
    char err[512];
    int rc = faults_parse(f, spec, err, sizeof err);
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
}

// a fresh directory under the test's scratch dir
static const char *subdir(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    mkdir(path, 0775);
    return path;
}

// One whole training run through train_run (quiet). Returns its exit code.
static int run_train(const char **sets, int n, Faults *f, const char *out, const char *fr, int trace, int gate) {
    TrainOpts o;
    memset(&o, 0, sizeof o);
    load_cfg(&o.cfg, sets, n);
    o.out_dir = out;
    o.quiet = 1;
    o.faults = f;
    o.flight_recorder = fr;
    o.trace_grads = trace;
    o.gate_stats = gate;
    fflush(stdout);
    return train_run(&o);
}

// metrics.jsonl of a run: loss and mem_bytes per step
static int read_metrics(const char *dir, double *loss, double *mem, int max) {
    char path[600];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int n = 0;
    while (n < max && fgets(line, sizeof line, f)) {
        json_t *j = parse(line);
        loss[n] = json_real_value(json_object_get(j, "loss"));
        mem[n] = (double)json_integer_value(json_object_get(j, "mem_bytes"));
        json_decref(j);
        n++;
    }
    fclose(f);
    return n;
}

// ---- gradient-arrival trace -------------------------------------------------------------

// The trace of one step (two micro-batches) as parsed JSON.
static json_t *trace_step(Model *m) {
    GradTrace tr;
    char err[256];
    assert_int_equal(gradtrace_open(&tr, m, NULL, 3, 0, err, sizeof err), 0);
    m->grad_ready = gradtrace_ready;
    m->grad_ready_ctx = &tr;
    gradtrace_begin_step(&tr, 7);
    const int N = m->B * m->T;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N);
    model_zero_grad(m);
    for (int k = 0; k < 2; k++) {
        random_batch(in, tg, N, m->V, 5 + (uint64_t)k);
        model_forward(m, in, tg, 0.5 / N);
        gradtrace_begin_micro(&tr, k);
        assert_int_equal(model_backward(m), 0);
    }
    char *js = gradtrace_end_step(&tr);
    // after the step the hook is inert (replays are not traced)
    int before = tr.n_order;
    gradtrace_ready(&tr, 0);
    assert_int_equal(tr.n_order, before);
    m->grad_ready = NULL;
    gradtrace_close(&tr);
    free(in); free(tg);
    json_t *j = parse(js);
    free(js);
    assert_int_equal(json_integer_value(json_object_get(j, "step")), 7);
    assert_int_equal(json_integer_value(json_object_get(j, "rank")), 3);
    assert_int_equal(json_integer_value(json_object_get(j, "n_params")), m->n_params);
    return j;
}

static void test_trace_order_and_nothing_missing(void **state) {
    (void)state;
    const char *sets[] = {"train.batch_size=2", "train.seq_len=64"};
    NsaConfig cfg;
    load_cfg(&cfg, sets, 2);
    Model m;
    make_model(&m, &cfg);
    json_t *j = trace_step(&m);
    assert_int_equal(json_array_size(json_object_get(j, "missing")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "expected_missing")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "nonfinite")), 0);
    assert_int_equal(json_array_size(json_object_get(j, "zero")), 0);
    assert_int_equal(json_integer_value(json_object_get(j, "arrived")), m.n_params);
    json_t *order = json_object_get(j, "order");
    assert_int_equal(json_array_size(order), m.n_params);   // each parameter exactly once
    assert_string_equal(json_string_value(json_array_get(order, 0)), "lm_head.weight");
    assert_string_equal(json_string_value(json_array_get(order, 1)), "norm_f.weight");
    // then every parameter of the last layer, then the layer before, ..., then tok_emb
    int per_layer = (m.n_params - 3) / m.L;
    for (int L = m.L - 1, pos = 2; L >= 0; L--) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blocks.%d.", L);
        for (int i = 0; i < per_layer; i++, pos++)
            assert_true(!strncmp(json_string_value(json_array_get(order, (size_t)pos)), prefix, strlen(prefix)));
    }
    assert_string_equal(json_string_value(json_array_get(order, (size_t)m.n_params - 1)), "tok_emb.weight");
    json_decref(j);
    model_free(&m);
}

static void test_trace_force_branch_missing_is_expected(void **state) {
    (void)state;
    static const char *branches[] = {"nsa.force_branch=\"sel\"", "nsa.force_branch=\"cmp\"", "nsa.force_branch=\"win\""};
    for (int b = 0; b < 3; b++) {
        const char *sets[] = {"train.batch_size=2", "train.seq_len=64", branches[b], "nsa.phi=\"mlp\""};
        NsaConfig cfg;
        load_cfg(&cfg, sets, 4);
        Model m;
        make_model(&m, &cfg);
        json_t *j = trace_step(&m);
        json_t *miss = json_object_get(j, "missing"), *exp = json_object_get(j, "expected_missing");
        assert_true(json_array_size(miss) > 0);
        assert_true(str_list_equal(miss, exp));
        // every missing gradient is exactly zero and flagged as such nowhere else
        for (size_t i = 0; i < json_array_size(miss); i++) {
            int id = model_find_param(&m, json_string_value(json_array_get(miss, i)));
            assert_true(id >= 0);
            assert_true(m.be->sumsq_param(model_grad_ptr(&m, id), m.params[id].numel) == 0.0);
        }
        assert_int_equal(json_integer_value(json_object_get(j, "arrived")) + (json_int_t)json_array_size(miss),
                         m.n_params);
        json_decref(j);
        model_free(&m);
    }
}

static void test_trace_drop_grad(void **state) {
    (void)state;
    const char *name = "blocks.1.attn.o_proj.weight";
    const char *sets[] = {"train.batch_size=2", "train.seq_len=64"};
    NsaConfig cfg;
    load_cfg(&cfg, sets, 2);
    Model m;
    make_model(&m, &cfg);
    int id = model_find_param(&m, name);
    assert_true(id >= 0);
    // without the fault the gradient is not zero (so the check below means something)
    fwd_bwd(&m, 1);
    assert_true(m.be->sumsq_param(model_grad_ptr(&m, id), m.params[id].numel) > 0);
    Faults f;
    faults_init(&f);
    fault(&f, "drop_grad=blocks.1.attn.o_proj.weight");
    char err[512];
    assert_int_equal(faults_bind(&f, &m, 0, err, sizeof err), 0);
    json_t *j = trace_step(&m);   // two micro-batches: the gradient must stay zero across both
    json_t *miss = json_object_get(j, "missing");
    assert_int_equal(json_array_size(miss), 1);
    assert_string_equal(json_string_value(json_array_get(miss, 0)), name);
    assert_int_equal(json_array_size(json_object_get(j, "expected_missing")), 0);
    double *h = malloc(sizeof(double) * (size_t)m.params[id].numel);
    m.be->param_to_f64(h, model_grad_ptr(&m, id), m.params[id].numel);
    for (int64_t i = 0; i < m.params[id].numel; i++) assert_true(h[i] == 0.0);
    free(h);
    json_decref(j);
    faults_unbind(&f, &m);
    // an unknown parameter name is refused, naming it
    faults_init(&f);
    fault(&f, "drop_grad=blocks.9.nope");
    assert_int_equal(faults_bind(&f, &m, 0, err, sizeof err), -1);
    assert_non_null(strstr(err, "blocks.9.nope"));
    assert_non_null(strstr(err, "tok_emb.weight"));
    faults_unbind(&f, &m);
    model_free(&m);
}

// ---- gate statistics ----------------------------------------------------------------------

static void gs_hook(void *ctx, Model *m, int ev, int L, int t) {
    (void)t;
    if (ev == MODEL_EV_LAYER_FWD_DONE) gatestats_layer(ctx, m, L);
}

// Gate statistics of one forward with `sets` (+ gate_zero_init if zero).
static json_t *gate_record(const char **sets, int n, int zero_init) {
    NsaConfig cfg;
    load_cfg(&cfg, sets, n);
    Model m;
    make_model(&m, &cfg);
    Faults f;
    faults_init(&f);
    char err[256];
    if (zero_init) {
        fault(&f, "gate_zero_init");
        assert_int_equal(faults_bind(&f, &m, 0, err, sizeof err), 0);
        faults_after_init_weights(&f, &m);
    }
    GateStats gs;
    assert_int_equal(gatestats_open(&gs, NULL, 0, m.L, err, sizeof err), 0);
    m.event = gs_hook;
    m.event_ctx = &gs;
    gatestats_arm(&gs);
    const int N = m.B * m.T;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)N), *tg = malloc(sizeof(int32_t) * (size_t)N);
    random_batch(in, tg, N, m.V, 11);
    model_forward(&m, in, tg, 1.0 / N);
    char *js = gatestats_finish_step(&gs, &m, 1);
    assert_non_null(js);
    // the backward's recompute of checkpointed layers is not measured again
    model_backward(&m);
    assert_int_equal(gs.armed, 0);
    json_t *j = parse(js);
    free(js); free(in); free(tg);
    gatestats_close(&gs);
    faults_unbind(&f, &m);
    model_free(&m);
    return j;
}

static double num(json_t *o, const char *k) { return json_real_value(json_object_get(o, k)); }
static double num3(json_t *o, const char *k, int b) { return json_real_value(json_array_get(json_object_get(o, k), (size_t)b)); }

static void test_gate_stats_normal_init(void **state) {
    (void)state;
    for (int act = 0; act < 2; act++) {
        const char *sets[] = {act ? "nsa.gate_act=\"sigmoid\"" : "nsa.gate_act=\"softmax\""};
        NsaConfig cfg;
        load_cfg(&cfg, sets, 1);
        json_t *j = gate_record(sets, 1, 0);
        assert_string_equal(json_string_value(json_object_get(j, "gate_act")), act ? "sigmoid" : "softmax");
        assert_true(json_is_true(json_object_get(j, "gated")));
        json_t *layers = json_object_get(j, "layers");
        assert_int_equal(json_array_size(layers), cfg.n_layers);
        // fc2 is Xavier-uniform with gain 0.1 over fan_in + fan_out = gate_hidden + 3G:
        // U(-a, a) with a = 0.1 sqrt(6 / (gh + 3G)), so std = a / sqrt(3) = 0.1 sqrt(2 / (gh + 3G)).
        // With gh = dim/4 = 16, G = 2: 0.0302. The sample std of 3G*gh = 96 uniform draws
        // has a relative standard error of sqrt(0.8 / (4 * 96)) = 4.6%; tolerance 20%.
        const int gh = cfg.dim / 4, G3 = 3 * cfg.n_kv_heads;
        const double want = 0.1 * sqrt(2.0 / (gh + G3));
        for (size_t L = 0; L < json_array_size(layers); L++) {
            json_t *o = json_array_get(layers, L);
            assert_int_equal(json_integer_value(json_object_get(o, "layer")), (json_int_t)L);
            assert_true(fabs(num(o, "fc2_weight_std") - want) < 0.2 * want);
            assert_true(fabs(num(o, "fc2_weight_mean")) < 3 * want / sqrt(gh * G3));   // 3 standard errors
            assert_true(num(o, "fc2_bias_mean") == 0.0 && num(o, "fc2_bias_std") == 0.0);
            for (int b = 0; b < 3; b++) {
                double center = act ? 0.5 : 1.0 / 3.0;
                assert_true(fabs(num3(o, "out_mean", b) - center) < 0.02);   // small gain: near uniform...
                assert_true(num3(o, "out_std", b) > 1e-4);                    // ...but not uniform
                assert_true(num3(o, "out_min", b) < num3(o, "out_max", b));
                assert_true(num3(o, "out_min", b) <= num3(o, "out_mean", b) &&
                            num3(o, "out_mean", b) <= num3(o, "out_max", b));
            }
        }
        json_decref(j);
    }
}

static void test_gate_stats_zero_init(void **state) {
    (void)state;
    for (int act = 0; act < 2; act++) {
        const char *sets[] = {act ? "nsa.gate_act=\"sigmoid\"" : "nsa.gate_act=\"softmax\""};
        json_t *j = gate_record(sets, 1, 1);
        json_t *layers = json_object_get(j, "layers");
        assert_int_equal(json_array_size(layers), 2);
        const double want = act ? 0.5 : (double)(1.0f / 3.0f);   // fp32 activations
        for (size_t L = 0; L < json_array_size(layers); L++) {
            json_t *o = json_array_get(layers, L);
            assert_true(num(o, "fc2_weight_mean") == 0.0 && num(o, "fc2_weight_std") == 0.0);
            assert_true(num(o, "fc2_bias_mean") == 0.0 && num(o, "fc2_bias_std") == 0.0);
            for (int b = 0; b < 3; b++) {
                assert_true(num3(o, "out_mean", b) == want);
                assert_true(num3(o, "out_min", b) == want);
                assert_true(num3(o, "out_max", b) == want);
                assert_true(num3(o, "out_std", b) == 0.0);
            }
        }
        json_decref(j);
    }
    // force_branch: the gate is bypassed
    const char *fb[] = {"nsa.force_branch=\"win\""};
    json_t *j = gate_record(fb, 1, 0);
    assert_true(json_is_false(json_object_get(j, "gated")));
    assert_int_equal(json_array_size(json_object_get(j, "layers")), 0);
    json_decref(j);
}

// Per-layer statistics must come from each layer's own forward, whatever shares
// memory: checkpointed layers (one scratch) and sequential prefill give the same
// record as plain batched prefill.
static void test_gate_stats_checkpointing_and_sequential(void **state) {
    (void)state;
    const char *plain[] = {"train.batch_size=2", "train.seq_len=64"};
    const char *ckpt[] = {"train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[0,2]"};
    const char *seq[] = {"train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[0,2]",
                         "train.prefill=\"sequential\""};
    json_t *a = gate_record(plain, 2, 0), *b = gate_record(ckpt, 3, 0), *c = gate_record(seq, 4, 0);
    assert_true(json_equal(a, b));
    assert_true(json_equal(a, c));
    // and the layers differ from each other (a shared scratch read late would not)
    json_t *layers = json_object_get(a, "layers");
    assert_true(num3(json_array_get(layers, 0), "out_std", 0) != num3(json_array_get(layers, 1), "out_std", 0));
    json_decref(a); json_decref(b); json_decref(c);
}

// ---- flight recorder ----------------------------------------------------------------------

static void test_flight_recorder_after_run(void **state) {
    (void)state;
    const char *out = subdir("fr");
    char path[600];
    snprintf(path, sizeof path, "%s/fr.bin", out);
    const char *sets[] = {"train.steps=3", "train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[1,2]"};
    assert_int_equal(run_train(sets, 4, NULL, out, path, 0, 0), 0);
    assert_null(flightrec_header());   // closed at exit
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    struct stat sb;
    assert_int_equal(fstat(fd, &sb), 0);
    assert_int_equal(sb.st_size, FR_FILE_BYTES);
    void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(p != MAP_FAILED);
    const FrHeader *h = p;
    assert_int_equal(fr_check_header(h, (size_t)sb.st_size), 0);
    assert_memory_equal(h->magic, FR_MAGIC, 8);
    assert_int_equal(h->pid, getpid());
    FrState s;
    assert_int_equal(fr_read_state(h, &s), 0);
    assert_int_equal(s.exited, 1);
    assert_int_equal(s.exit_code, 0);
    assert_int_equal(s.fatal_signal, 0);
    assert_int_equal(s.step, 3);
    assert_int_equal(s.phase, FR_PHASE_DONE);
    assert_true(s.n_events > 20 && s.n_events < FR_RING);
    static FrEvent ev[FR_RING];
    int n = 0;
    assert_int_equal(fr_read_events(h, ev, FR_RING, &n, NULL), 0);
    assert_int_equal(n, s.n_events);
    assert_string_equal(ev[0].op, "init");
    assert_string_equal(ev[n - 1].op, "exit");
    // time and step never go back; per step the phases come in order
    for (int i = 1; i < n; i++) {
        assert_true(ev[i].t_ns >= ev[i - 1].t_ns);
        assert_true(ev[i].step >= ev[i - 1].step);
    }
    for (int64_t step = 1; step <= 3; step++) {
        // expected subsequence for this step
        static const struct { int phase; int layer; const char *op; } want[] = {
            {FR_PHASE_DATA, -1, "step"}, {FR_PHASE_DATA, -1, "data_next"}, {FR_PHASE_FORWARD, -1, "forward"},
            {FR_PHASE_FORWARD, 0, "layer_fwd"}, {FR_PHASE_FORWARD, 1, "layer_fwd"}, {FR_PHASE_FORWARD, -1, "head"},
            {FR_PHASE_BACKWARD, -1, "backward"}, {FR_PHASE_BACKWARD, -1, "head_bwd"},
            {FR_PHASE_BACKWARD, 1, "recompute"}, {FR_PHASE_BACKWARD, 1, "layer_bwd"},
            {FR_PHASE_BACKWARD, 0, "layer_bwd"}, {FR_PHASE_BACKWARD, -1, "embedding_bwd"},
            {FR_PHASE_OPTIMIZER, -1, "grad_norm"}, {FR_PHASE_OPTIMIZER, -1, "adamw"},
            {FR_PHASE_OPTIMIZER, -1, "step"}};
        const int nw = (int)(sizeof want / sizeof want[0]);
        int k = 0;
        for (int i = 0; i < n && k < nw; i++) {
            if (ev[i].step != step) continue;
            assert_int_equal(ev[i].phase, want[k].phase);
            assert_int_equal(ev[i].layer, want[k].layer);
            assert_string_equal(ev[i].op, want[k].op);
            assert_int_equal(ev[i].kind, k == nw - 1 ? FR_KIND_END : FR_KIND_BEGIN);
            k++;
        }
        assert_int_equal(k, nw);
    }
    munmap(p, (size_t)sb.st_size);
}

// The seqlock reader: an odd sequence (writer mid-update, or dead mid-update)
// makes it retry and finally report a torn copy.
static void test_flight_recorder_seqlock_reader(void **state) {
    (void)state;
    static union { FrHeader h; char bytes[FR_FILE_BYTES]; } f;
    memset(&f, 0, sizeof f);
    memcpy(f.h.magic, FR_MAGIC, 8);
    f.h.version = FR_VERSION; f.h.header_bytes = FR_HEADER_BYTES; f.h.event_bytes = FR_EVENT_BYTES;
    f.h.ring_len = FR_RING; f.h.file_bytes = FR_FILE_BYTES;
    assert_int_equal(fr_check_header(&f.h, sizeof f), 0);
    assert_int_equal(fr_check_header(&f.h, FR_HEADER_BYTES), -1);   // truncated file
    f.h.state.step = 42;
    FrState s;
    assert_int_equal(fr_read_state(&f.h, &s), 0);
    assert_int_equal(s.step, 42);
    f.h.seq = 7;   // odd: an update that never finished
    assert_int_equal(fr_read_state(&f.h, &s), 1);
    assert_int_equal(s.step, 42);   // best-effort copy
    int n;
    assert_int_equal(fr_read_events(&f.h, (FrEvent[4]){{0}}, 4, &n, NULL), 1);
    f.h.magic[0] = 'X';
    assert_int_equal(fr_check_header(&f.h, sizeof f), -1);
}

// ---- faults --------------------------------------------------------------------------------

static void test_fault_parser(void **state) {
    (void)state;
    static const char *good[] = {"gate_zero_init", "hang=0:2:backward", "crash=1:3", "drop_grad=x.y",
                                 "nan_at_seqlen=64", "prefill_state_leak", "gc_recompute_mismatch=1",
                                 "clobber_activation=0"};
    Faults f;
    faults_init(&f);
    for (int i = 0; i < 8; i++) fault(&f, good[i]);
    assert_int_equal(f.n_active, 8);
    assert_int_equal(f.hang_rank, 0);
    assert_int_equal(f.hang_step, 2);
    assert_int_equal(f.hang_phase, FR_PHASE_BACKWARD);
    assert_int_equal(f.crash_rank, 1);
    assert_int_equal(f.crash_step, 3);
    assert_int_equal(f.nan_seqlen, 64);
    assert_int_equal(f.gc_mismatch_layer, 1);
    assert_int_equal(f.clobber_layer, 0);
    static const char *bad[] = {"frob", "gate_zero_init=1", "hang", "hang=0:2", "hang=0:2:sleep", "hang=x:2:data",
                                "hang=0:0:data", "crash=0", "crash=0:-1", "nan_at_seqlen=0", "nan_at_seqlen=abc",
                                "drop_grad=", "gc_recompute_mismatch=-1", "clobber_activation=", "prefill_state_leak=yes"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        Faults g;
        faults_init(&g);
        char err[1024] = "";
        assert_int_equal(faults_parse(&g, bad[i], err, sizeof err), -1);
        assert_non_null(strstr(err, bad[i]));   // the message names the flag value
        assert_int_equal(g.n_active, 0);
    }
    char err[256];
    assert_int_equal(faults_parse(&f, "hang=1:1:data", err, sizeof err), -1);   // twice
    // every fault is listed
    char buf[16384];
    FILE *mf = fmemopen(buf, sizeof buf, "w");
    faults_list(mf);
    fclose(mf);
    for (int i = 0; i < 8; i++) {
        char name[64];
        snprintf(name, sizeof name, "\n%.*s ", (int)strcspn(good[i], "="), good[i]);
        assert_non_null(strstr(buf, name));
    }
}

static void test_nan_at_seqlen(void **state) {
    (void)state;
    struct { const char *seq; const char *extra; int rc; const char *tensor; const char *op; } cases[] = {
        {"train.seq_len=128", "train.prefill=\"batched\"", 3, "blocks.0.attn.sel.o", "sel_attn_fwd"},
        {"train.seq_len=128", "train.prefill=\"sequential\"", 3, "blocks.0.attn.sel.o", "sel_attn_fwd"},
        {"train.seq_len=128", "nsa.force_branch=\"win\"", 3, "blocks.0.attn.win.o", "win_attn_fwd"},
        {"train.seq_len=96", "train.prefill=\"batched\"", 0, NULL, NULL},
    };
    for (int c = 0; c < 4; c++) {
        char name[32];
        snprintf(name, sizeof name, "nan%d", c);
        const char *out = subdir(name);
        const char *sets[] = {"train.steps=2", "train.batch_size=2", cases[c].seq, cases[c].extra};
        Faults f;
        faults_init(&f);
        fault(&f, "nan_at_seqlen=64");
        assert_int_equal(run_train(sets, 4, &f, out, NULL, 1, 0), cases[c].rc);
        char path[600];
        snprintf(path, sizeof path, "%s/anomaly.json", out);
        if (!cases[c].tensor) { assert_int_equal(access(path, F_OK), -1); continue; }
        json_error_t e;
        json_t *a = json_load_file(path, 0, &e);
        assert_non_null(a);
        assert_string_equal(json_string_value(json_object_get(a, "tensor")), cases[c].tensor);
        assert_string_equal(json_string_value(json_object_get(a, "op")), cases[c].op);
        assert_int_equal(json_integer_value(json_object_get(a, "layer")), 0);
        assert_int_equal(json_integer_value(json_object_get(a, "step")), 1);
        json_t *pos = json_object_get(a, "position");
        assert_int_equal(json_integer_value(json_object_get(pos, "b")), 0);
        assert_int_equal(json_integer_value(json_object_get(pos, "t")), 127);
        json_decref(a);
        // the gradient trace recorded the non-finite gradients before the run halted
        snprintf(path, sizeof path, "%s/grad_trace.jsonl", out);
        json_t *t = json_load_file(path, JSON_DISABLE_EOF_CHECK, &e);
        assert_non_null(t);
        assert_true(json_array_size(json_object_get(t, "nonfinite")) > 0);
        json_decref(t);
    }
}

static int grads_equal(const double *a, const double *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) if (a[i] != b[i]) return 0;
    return 1;
}

static void test_gc_recompute_mismatch(void **state) {
    (void)state;
    const char *ck1[] = {"train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[0,2]"};
    const char *ck0[] = {"train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[0,1]"};
    NsaConfig cfg;
    load_cfg(&cfg, ck1, 3);
    Model m;
    make_model(&m, &cfg);
    const int64_t n = m.n_elems;
    model_free(&m);
    double *base = grads_with(ck1, 3, NULL);
    Faults f;
    faults_init(&f);
    fault(&f, "gc_recompute_mismatch=1");
    double *hit = grads_with(ck1, 3, &f);   // layer 1 checkpointed: its recompute differs
    assert_false(grads_equal(base, hit, n));
    faults_init(&f);
    fault(&f, "gc_recompute_mismatch=1");
    double *miss = grads_with(ck0, 3, &f);  // layer 1 not checkpointed: no effect
    assert_true(grads_equal(base, miss, n));   // (checkpointing itself is bitwise)
    free(base); free(hit); free(miss);
}

static void test_clobber_activation(void **state) {
    (void)state;
    const char *plain[] = {"train.batch_size=2", "train.seq_len=64"};
    const char *ck[] = {"train.batch_size=2", "train.seq_len=64", "train.checkpoint_layers=[1,2]"};
    NsaConfig cfg;
    load_cfg(&cfg, plain, 2);
    Model m;
    make_model(&m, &cfg);
    const int64_t n = m.n_elems;
    const int64_t off = m.params[m.lid[1][LP_W_DOWN]].offset;
    model_free(&m);
    double *base = grads_with(plain, 2, NULL);
    Faults f;
    faults_init(&f);
    fault(&f, "clobber_activation=1");
    double *hit = grads_with(plain, 2, &f);   // not checkpointed: the clobbered ffh is used
    assert_false(grads_equal(base, hit, n));
    assert_true(base[off] != hit[off] || base[off + 1] != hit[off + 1]);   // down_proj of layer 1
    faults_init(&f);
    fault(&f, "clobber_activation=1");
    double *healed = grads_with(ck, 3, &f);   // checkpointed: the recompute rewrites ffh
    assert_true(grads_equal(base, healed, n));
    free(base); free(hit); free(healed);
}

static void test_prefill_state_leak(void **state) {
    (void)state;
    const char *batched[] = {"train.steps=3", "train.batch_size=2", "train.seq_len=64"};
    const char *seq[] = {"train.steps=3", "train.batch_size=2", "train.seq_len=64", "train.prefill=\"sequential\""};
    double lb[3], mb[3], ls[3], ms[3], lx[3], mx[3];
    const char *d1 = subdir("leak_batched");
    assert_int_equal(run_train(batched, 3, NULL, d1, NULL, 0, 0), 0);
    assert_int_equal(read_metrics(d1, lb, mb, 3), 3);
    Faults f;
    faults_init(&f);
    fault(&f, "prefill_state_leak");
    const char *d2 = subdir("leak_seq");
    assert_int_equal(run_train(seq, 4, &f, d2, NULL, 0, 0), 0);
    assert_int_equal(read_metrics(d2, ls, ms, 3), 3);
    assert_true(ls[0] == lb[0]);   // step 1: nothing stale yet, bitwise parity
    assert_true(ls[1] != lb[1]);   // step 2 on: stale compressed keys
    assert_true(ls[2] != lb[2]);
    assert_true(mb[0] == mb[1] && mb[1] == mb[2]);   // batched: flat memory
    assert_true(ms[0] == mb[0]);
    assert_true(ms[1] > ms[0] && ms[2] - ms[1] == ms[1] - ms[0]);   // one leak per step
    assert_true(f.leaked_bytes == (size_t)(ms[2] - ms[0]));
    // batched prefill: no effect
    faults_init(&f);
    fault(&f, "prefill_state_leak");
    const char *d3 = subdir("leak_batched_fault");
    assert_int_equal(run_train(batched, 3, &f, d3, NULL, 0, 0), 0);
    assert_int_equal(read_metrics(d3, lx, mx, 3), 3);
    for (int i = 0; i < 3; i++) assert_true(lx[i] == lb[i] && mx[i] == mb[i]);
}

// ---- the step dump's 16-bit widening -----------------------------------------------------------

static void test_dump_widen16(void **state) {
    (void)state;
    uint16_t *bits = malloc(sizeof(uint16_t) * 65536);
    float *out = malloc(sizeof(float) * 65536);
    for (int i = 0; i < 65536; i++) bits[i] = (uint16_t)i;
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        StTensor t = {.dtype = bf16 ? ST_BF16 : ST_F16, .ndim = 1, .data = bits, .nbytes = 2 * 65536};
        int nan = 0, subnormal = 0;
        for (int i = 0; i < 65536; i++) {
            const double ref = st_elem_f64(&t, (size_t)i);
            float got;
            const int rc = actdump_widen16(&got, &bits[i], 1, bf16);
            if (isnan(ref)) {
                assert_int_equal(rc, -1);
                nan++;
                continue;
            }
            assert_int_equal(rc, 0);
            const float want = (float)ref;
            assert_memory_equal(&got, &want, sizeof got);   // -0, infinities and subnormals included
            subnormal += !bf16 && ref != 0 && fabs(ref) < 0x1p-14;
        }
        assert_int_equal(nan, bf16 ? 2 * 127 : 2 * 1023);
        if (!bf16) assert_int_equal(subnormal, 2 * 1023);
    }
    // a whole tensor: 0 without a NaN, -1 with one anywhere
    for (int i = 0; i < 1024; i++) bits[i] = (uint16_t)(0x3c00 + i);   // fp16 1.0 and up
    assert_int_equal(actdump_widen16(out, bits, 1024, 0), 0);
    assert_true(out[0] == 1.0f && out[1] == 1.0f + 1.0f / 1024);
    bits[700] = 0x7e00;   // an fp16 NaN
    assert_int_equal(actdump_widen16(out, bits, 1024, 0), -1);
    bits[700] = 0x7fc0;   // a bf16 NaN
    assert_int_equal(actdump_widen16(out, bits, 1024, 1), -1);
    free(bits);
    free(out);
}

static int setup(void **state) {
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/nsa_test_diag_XXXXXX");
    return mkdtemp(g_tmp) ? 0 : -1;
}
static int teardown(void **state) {
    (void)state;
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trace_order_and_nothing_missing),
        cmocka_unit_test(test_trace_force_branch_missing_is_expected),
        cmocka_unit_test(test_trace_drop_grad),
        cmocka_unit_test(test_gate_stats_normal_init),
        cmocka_unit_test(test_gate_stats_zero_init),
        cmocka_unit_test(test_gate_stats_checkpointing_and_sequential),
        cmocka_unit_test(test_flight_recorder_after_run),
        cmocka_unit_test(test_flight_recorder_seqlock_reader),
        cmocka_unit_test(test_fault_parser),
        cmocka_unit_test(test_nan_at_seqlen),
        cmocka_unit_test(test_gc_recompute_mismatch),
        cmocka_unit_test(test_clobber_activation),
        cmocka_unit_test(test_prefill_state_leak),
        cmocka_unit_test(test_dump_widen16),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
