// tests/trainer/test_step_counters.c — the deterministic counters a regression
// baseline stores beside the losses (docs/regression.md):
//   - model_flops_per_step against a count done by hand for configs where every
//     term is easy to write down (window branch alone; all branches at T < l);
//   - the CPU backend's mem_peak: exact bytes, a high-water mark;
//   - digest64: fixed values (a change of the function would silently invalidate
//     every committed baseline), and every single-bit flip of the input changes it.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "kernels/ops.h"
#include "common/digest.h"
#include "trainer/flops.h"
#include "tests/trainer/tiny_model.h"

// tiny (C 64, L 2, H 4, G 2, D 16, F 128, V 256, gate_hidden 16), w 32, B 4, T 128,
// force_branch win: no gate MLP, only the window's K/V projections, window keys
// sum_t min(32, t+1) = 32*33/2 + 96*32 = 3600 per sequence and head.
static void test_flops_window_only(void **state) {
    (void)state;
    const char *sets[] = {"nsa.force_branch=\"win\""};
    NsaConfig cfg;
    load_cfg(&cfg, sets, 1);
    Model m;
    make_model(&m, &cfg);
    const double C = 64, L = 2, H = 4, G = 2, D = 16, F = 128, V = 256, B = 4, T = 128;
    const double layer_w = H * D * C + 2 * G * D * C + C * H * D + 3 * F * C;
    const double fwd = 2 * B * T * (L * layer_w + V * C) + L * B * H * 4 * D * 3600;
    assert_true(model_flops_per_step(&m, 4, 128, 1) == 3 * fwd);
    assert_true(model_flops_per_step(&m, 4, 128, 3) == 9 * fwd);   // grad_accum multiplies
    model_free(&m);
}

// T = 7 < l = 8: no compressed block is visible; every position selects all its
// keys (blocks 0..t/l' with n = 4 >= 1 block), t+1 of them, and the window sees t+1:
// 2 * sum_{t<7} (t+1) = 56 keys per sequence and head. The gate MLP (gh 16) and all
// three branches' K/V projections (the compressed one feeds selection) are counted.
static void test_flops_all_branches_short(void **state) {
    (void)state;
    const char *sets[] = {"train.seq_len=7"};
    NsaConfig cfg;
    load_cfg(&cfg, sets, 1);
    Model m;
    make_model(&m, &cfg);
    const double C = 64, L = 2, H = 4, G = 2, D = 16, F = 128, V = 256, B = 4, T = 7, gh = 16;
    const double layer_w = H * D * C + 3 * 2 * G * D * C + C * H * D + 3 * F * C + gh * C + 3 * G * gh;
    const double fwd = 2 * B * T * (L * layer_w + V * C) + L * B * H * 4 * D * 56;
    assert_true(model_flops_per_step(&m, 4, 7, 1) == 3 * fwd);
    model_free(&m);
}

// The CPU backend counts every block at the size asked for: a fresh high-water
// mark moves by exactly the bytes allocated beyond it; a block below it leaves it.
static void test_cpu_mem_peak_exact(void **state) {
    (void)state;
    const Backend *be = backend_get("cpu", NULL, NULL);
    assert_non_null(be);
    assert_non_null(be->mem_peak);
    const size_t p0 = be->mem_peak();   // earlier tests allocated and freed: held now <= p0
    void *a = be->alloc(p0 + 1000003);  // not a multiple of the alignment: counted as asked
    const size_t p1 = be->mem_peak();
    assert_true(p1 >= p0 + 1000003 && p1 <= 2 * p0 + 1000003);
    void *b = be->alloc(777);
    assert_true(be->mem_peak() == p1 + 777);   // nothing else allocates in between: exact
    be->free(b);
    be->free(a);
    void *c = be->alloc(500);   // far below the mark
    assert_true(be->mem_peak() == p1 + 777);
    be->free(c);
}

static void test_digest64_fixed_values_and_bit_flips(void **state) {
    (void)state;
    char hex[17];
    digest64_hex(digest64("", 0, 0), hex);
    assert_string_equal(hex, "0ff2e69699c4857e");
    digest64_hex(digest64("abc", 3, 0), hex);
    assert_string_equal(hex, "6605ce666bca394b");
    digest64_hex(digest64("0123456789abcdef0123", 20, 7), hex);
    assert_string_equal(hex, "f1952490d6d68ee0");
    unsigned char buf[37];
    for (int i = 0; i < 37; i++) buf[i] = (unsigned char)(i * 29 + 3);
    const uint64_t h0 = digest64(buf, sizeof buf, 0);
    for (int byte = 0; byte < 37; byte++)
        for (int bit = 0; bit < 8; bit++) {
            buf[byte] ^= (unsigned char)(1u << bit);
            assert_true(digest64(buf, sizeof buf, 0) != h0);
            buf[byte] ^= (unsigned char)(1u << bit);
        }
    assert_true(digest64(buf, 36, 0) != digest64(buf, 37, 0));   // the length counts
    assert_true(digest64(buf, 37, 1) != h0);                     // so does the seed
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flops_window_only),
        cmocka_unit_test(test_flops_all_branches_short),
        cmocka_unit_test(test_cpu_mem_peak_exact),
        cmocka_unit_test(test_digest64_fixed_values_and_bit_flips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
