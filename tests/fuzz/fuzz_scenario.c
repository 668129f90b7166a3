// tests/fuzz/fuzz_scenario.c — libFuzzer target: the scenario loader
// (harness/core/scenario_load.c scenario_load: strict schema, file:line:col problems, every
// case's overrides through the trainer's config loader, matrix expansion, check
// parameters, self-test files with nested scenarios), as `nsa-harness validate`
// runs it (every profile).
// Input: a scenario file, then optionally NUL-separated `run --set` overrides
// ("train.seed=7"), at most 8. The file is written to TMP/scenarios/selftest/in.json, beside
// links that make the repository's relative paths resolve as they do in the tree:
// TMP/configs and TMP/scenarios/configs -> configs/ ("../../configs/tiny.json" of
// tests/bad_scenarios, "../configs/tiny.json" of scenarios/), TMP/scenarios/X.json
// -> scenarios/X.json (a self-test's "../gate_init.json").
#include "tests/fuzz/fuzz_common.h"
#include "harness/core/scenario_load.h"
#include "common/util.h"

#ifndef NSA_SOURCE_DIR
#error "NSA_SOURCE_DIR (the repository) is needed for the configs and scenarios the input refers to"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char in_path[700];

static void link_or_die(const char *target, const char *link) {
    if (symlink(target, link) != 0) {
        perror(link);
        abort();
    }
}

static void setup(void) {
    const char *t = fuzz_tmpdir();
    char p[700], q[700];
    snprintf(p, sizeof p, "%s/scenarios", t);
    if (mkdir(p, 0700) != 0) abort();
    snprintf(p, sizeof p, "%s/scenarios/selftest", t);
    if (mkdir(p, 0700) != 0) abort();
    snprintf(p, sizeof p, "%s/configs", t);
    link_or_die(NSA_SOURCE_DIR "/configs", p);
    snprintf(p, sizeof p, "%s/scenarios/configs", t);
    link_or_die(NSA_SOURCE_DIR "/configs", p);
    DIR *d = opendir(NSA_SOURCE_DIR "/scenarios");
    if (!d) abort();
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n < 6 || strcmp(e->d_name + n - 5, ".json")) continue;
        snprintf(p, sizeof p, "%s/scenarios/%s", NSA_SOURCE_DIR, e->d_name);
        snprintf(q, sizeof q, "%s/scenarios/%s", t, e->d_name);
        link_or_die(p, q);
    }
    closedir(d);
    snprintf(in_path, sizeof in_path, "%s/scenarios/selftest/in.json", t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!in_path[0]) setup();
    size_t file_len;
    char *sets[8];
    int n_sets = fuzz_split_sets(data, size, &file_len, sets, 8);
    fuzz_write(in_path, data, file_len);
    Scenario s;
    Problems ps = {0};
    int rc = scenario_load(&s, in_path, PROFILE_CI, 1, (const char *const *)sets, n_sets, &ps);
    if (rc == 0) {
        if (ps.n) {
            fprintf(stderr, "fuzz_scenario: a valid scenario with %d problems (first: %s)\n", ps.n, ps.v[0].text);
            abort();
        }
        for (int c = 0; c < s.n_cases; c++) (void)scenario_case_matches(&s.cases[c], "*=*");
        scenario_free(&s);
    } else if (ps.n == 0) {
        fprintf(stderr, "fuzz_scenario: an invalid scenario without a problem to report\n");
        abort();
    }
    problems_free(&ps);
    for (int i = 0; i < n_sets; i++) free(sets[i]);
    return 0;
}
