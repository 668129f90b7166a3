// tests/trainer/tiny_model.h — helpers the trainer tests share: load configs/tiny.json
// with overrides, build a model on the config's backend, draw a random batch.
// Include after <cmocka.h> (the helpers assert with cmocka); tests run from the source
// root, where configs/ is (ctest sets WORKING_DIRECTORY).
#ifndef NSA_TESTS_TINY_MODEL_H
#define NSA_TESTS_TINY_MODEL_H
#include <stdint.h>
#include <stdio.h>

#include "common/config.h"
#include "trainer/model.h"
#include "trainer/rng.h"

static inline void load_cfg(NsaConfig *cfg, const char **sets, int n) {
    char err[4096];
    int rc = config_load(cfg, "configs/tiny.json", sets, n, err, sizeof err);
    if (rc) fprintf(stderr, "%s", err);
    assert_int_equal(rc, 0);
}

static inline void make_model(Model *m, const NsaConfig *cfg) {
    char err[512];
    const Backend *be = backend_get(cfg->backend, cfg->precision, NULL);
    assert_non_null(be);
    assert_int_equal(model_init(m, cfg, be, err, sizeof err), 0);
    assert_int_equal(model_alloc_acts(m, cfg->batch_size, cfg->seq_len, err, sizeof err), 0);
    model_init_weights(m, cfg->seed);
}

// n random tokens and targets in [0, V), a pure function of seed
static inline void random_batch(int32_t *in, int32_t *tg, int n, int V, uint64_t seed) {
    for (int i = 0; i < n; i++) {
        in[i] = (int32_t)rng_below(seed, 1, (uint64_t)i, (uint64_t)V);
        tg[i] = (int32_t)rng_below(seed, 2, (uint64_t)i, (uint64_t)V);
    }
}
#endif
