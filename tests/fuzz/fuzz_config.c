// tests/fuzz/fuzz_config.c — libFuzzer target: the strict config loader
// (common/config.c config_load: Jansson parse, jsonpos file:line:col, every key's
// type and range, cross-key rules) on a file plus --set overrides.
// Input: the config file's bytes, then optionally NUL-separated overrides
// ("nsa.w=64\0train.lr=1e999"), at most 16. A valid config is also turned back
// into canonical JSON (config_to_json), which must load again to the same digest.
#include "tests/fuzz/fuzz_common.h"
#include "common/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t file_len;
    char *sets[16];
    int n_sets = fuzz_split_sets(data, size, &file_len, sets, 16);
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", fuzz_tmpdir());
    fuzz_write(path, data, file_len);

    NsaConfig cfg;
    char err[4096];
    if (config_load(&cfg, path, (const char *const *)sets, n_sets, err, sizeof err) == 0) {
        // the canonical form of a valid config loads again, to the same digest
        char *js = config_to_json(&cfg);
        if (!js) abort();
        char path2[600];
        snprintf(path2, sizeof path2, "%s/canonical.json", fuzz_tmpdir());
        fuzz_write(path2, (const uint8_t *)js, strlen(js));
        NsaConfig again;
        if (config_load(&again, path2, NULL, 0, err, sizeof err) != 0) {
            fprintf(stderr, "fuzz_config: the canonical JSON of a valid config does not load: %s\n%s\n", err, js);
            abort();
        }
        if (strcmp(cfg.digest, again.digest) != 0) {
            fprintf(stderr, "fuzz_config: digest %s of a valid config, %s after its canonical JSON\n", cfg.digest,
                    again.digest);
            abort();
        }
        free(js);
    } else if (!err[0]) {
        fprintf(stderr, "fuzz_config: config_load failed without a message\n");
        abort();
    }
    for (int i = 0; i < n_sets; i++) free(sets[i]);
    return 0;
}
