// harness/families/selftest.c — the detection matrix: the harness proving itself.
//
// A self-test file (family "selftest", scenarios/selftest/) lists detections:
// a scenario, the faults to inject (or none), seeds, and what the report must
// then say — each case's verdict, strings in RESULTS.md (the localisation: the
// culprit layer, the first non-finite tensor, the diverging step, the missing
// parameter), facts in summary.json. Each detection is run as a nested
// `nsa-harness run` (once per seed, --set train.seed=S) through the public
// command line, in its own process group under the same watchdog rules as a
// trainer; its report folder is kept inside the detection's case folder. A
// detection PASSes when every expectation holds for every seed: a clean
// detection over three seeds that stays PASS is the "no false alarm" proof, a
// fault detection that gives the expected verdict and names the right place is
// the "it catches the bug" proof. Loading and validating a self-test file (its
// own schema) is selftest_detections.c; this file runs and judges the detections.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/core/check.h"
#include "harness/families/families.h"
#include "harness/exec/proc.h"
#include "harness/core/trainer_cmd.h"
#include "common/jsonutil.h"

// Compare one nested run's report with the expectation; mismatches appended to bad.
static void judge(const json_t *expect, const char *run_dir, int status, Str *bad, json_t *observed) {
    char p[2400];
    snprintf(p, sizeof p, "%s/summary.json", run_dir);
    json_t *sj = json_load_path(p, 0, NULL);
    if (!sj) {
        str_printf(bad, "- no report (%s missing; nested run status %d)\n", p, status);
        return;
    }
    const json_t *cases = json_object_get(sj, "cases");
    const json_t *vd = json_object_get(expect, "verdicts");
    const char *glob;
    json_t *want;
    json_object_foreach((json_t *)vd, glob, want) {
        int hits = 0;
        size_t i;
        json_t *c;
        json_array_foreach(cases, i, c) {
            const char *name = json_string_value(json_object_get(c, "case"));
            if (fnmatch(glob, name, 0) != 0) continue;
            hits++;
            const json_t *got = json_object_get(c, "verdict");
            json_object_set(observed, name, (json_t *)got);
            if (!json_is_string(got) || strcmp(json_string_value(got), json_string_value(want)))
                str_printf(bad, "- case `%s`: %s expected, got %s (%s)\n", name, json_string_value(want),
                           json_is_string(got) ? json_string_value(got) : "not run",
                           json_string_value(json_object_get(c, "summary")));
        }
        if (!hits) str_printf(bad, "- no case matches `%s` in the nested run\n", glob);
    }
    snprintf(p, sizeof p, "%s/RESULTS.md", run_dir);
    char *md = read_file(p, NULL);
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(expect, "contains"), i, s) {
        if (!md || !strstr(md, json_string_value(s))) str_printf(bad, "- RESULTS.md lacks: `%s`\n", json_string_value(s));
    }
    free(md);
    const json_t *facts = json_object_get(expect, "facts");
    json_object_foreach((json_t *)facts, glob, want) {
        json_t *c;
        int hits = 0;
        json_array_foreach(cases, i, c) {
            if (fnmatch(glob, json_string_value(json_object_get(c, "case")), 0) != 0) continue;
            hits++;
            const char *k;
            json_t *v;
            json_object_foreach(want, k, v) {
                const json_t *got = json_object_get(json_object_get(c, "facts"), k);
                if (!got || !json_equal(got, v)) {
                    char *a = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY), *b = got ? json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
                    str_printf(bad, "- case `%s`: fact %s = %s expected, got %s\n",
                               json_string_value(json_object_get(c, "case")), k, a ? a : "?", b ? b : "(absent)");
                    free(a);
                    free(b);
                }
            }
        }
        if (!hits) str_printf(bad, "- facts: no case matches `%s`\n", glob);
    }
    const json_t *xc = json_object_get(expect, "exit");
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (xc && code != (int)json_integer_value(xc))
        str_printf(bad, "- the nested run exited %d, expected %lld\n", code, (long long)json_integer_value(xc));
    json_decref(sj);
}

static int interrupted(const RunCtx *ctx) { return ctx->interrupted && *ctx->interrupted; }

// The nested run's command line (into argv[64], NULL-terminated): the scenario
// for this profile into `out`, the detection's faults, filter and sets, and
// `seedset` ("train.seed=S") when there are seeds. scale: room for the timeout scale.
static void nested_argv(const RunCtx *ctx, const json_t *d, const char *scen, const char *out, const char *seedset,
                        const char *trainer_cmd, char scale[32], const char *argv[64]) {
    int n = 0;
    argv[n++] = ctx->harness;
    argv[n++] = "run";
    argv[n++] = scen;
    argv[n++] = "--profile";
    argv[n++] = ctx->profile;
    argv[n++] = "--out";
    argv[n++] = out;
    argv[n++] = "--quiet";
    if (trainer_cmd) {   // the detection's (or the file's) trainer command, else the outer run's trainer
        argv[n++] = "--trainer-cmd";
        argv[n++] = trainer_cmd;
    } else if (ctx->trainer_map) {
        argv[n++] = "--trainer-map";
        argv[n++] = ctx->trainer_map;
    } else if (ctx->trainer_cmd) {
        argv[n++] = "--trainer-cmd";
        argv[n++] = ctx->trainer_cmd;
    } else {
        argv[n++] = "--trainer";
        argv[n++] = ctx->trainer;
    }
    const json_t *tsc = json_object_get(d, "timeout_scale");
    snprintf(scale, 32, "%g", ctx->timeout_scale * (json_is_number(tsc) ? json_number_value(tsc) : 1.0));
    argv[n++] = "--timeout-scale";
    argv[n++] = scale;
    const json_t *f = json_object_get(d, "fault");
    if (json_is_string(f)) {
        argv[n++] = "--fault";
        argv[n++] = json_string_value(f);
    }
    size_t i;
    json_t *x;
    json_array_foreach(f, i, x) if (n < 56) {
        argv[n++] = "--fault";
        argv[n++] = json_string_value(x);
    }
    const json_t *filt = json_object_get(d, "filter");   // one glob or a list (any selects a case)
    if (json_is_string(filt)) {
        argv[n++] = "--filter";
        argv[n++] = json_string_value(filt);
    }
    json_array_foreach(filt, i, x) if (n < 56) {
        argv[n++] = "--filter";
        argv[n++] = json_string_value(x);
    }
    json_array_foreach(json_object_get(d, "set"), i, x) if (n < 58) {
        argv[n++] = "--set";
        argv[n++] = json_string_value(x);
    }
    if (seedset) {
        argv[n++] = "--set";
        argv[n++] = seedset;
    }
    argv[n] = NULL;
}

// The folder where the nested runs keep their trainer's --print-env answer (harness/cmd/run.c,
// NSA_HARNESS_ENV_CACHE): one per outer run, made at its first detection in $TMPDIR and
// removed when the outer run exits. A run that is itself nested keeps its parent's folder.
static char env_cache_dir[4096];
static pid_t env_cache_owner;
static void remove_flat_dir(const char *dir) {   // a folder of plain files, and the folder
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[4400];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}
static void env_cache_remove(void) {
    if (!env_cache_dir[0] || getpid() != env_cache_owner) return;
    remove_flat_dir(env_cache_dir);
}
static void env_cache_ensure(void) {
    const char *have = getenv("NSA_HARNESS_ENV_CACHE");
    if ((have && have[0]) || env_cache_owner) return;
    const char *tmp = getenv("TMPDIR");
    snprintf(env_cache_dir, sizeof env_cache_dir, "%s/nsa_nested_env.XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
    env_cache_owner = getpid();   // tried once; without the folder every nested run asks its trainer
    if (!mkdtemp(env_cache_dir)) {
        env_cache_dir[0] = '\0';
        return;
    }
    setenv("NSA_HARNESS_ENV_CACHE", env_cache_dir, 1);
    atexit(env_cache_remove);
}

// Run the nested nsa-harness under the case's time limit; *status its wait
// status. Returns 1 if it had to be stopped for running out of time.
// The detection holds the machine's and its GPUs' lock files (harness/exec/run_cases.c) for its
// nested run, exclusively when it judges time: the nested run's cases take theirs in a lock
// folder of its own (NSA_HARNESS_LOCK_DIR), made here and removed after — in the outer run's
// folder they would wait for the detection's own locks for ever.
static int run_nested(const RunCtx *ctx, const Case *c, const char *const *argv, const char *log, int *status) {
    env_cache_ensure();
    StrList env = {0};   // side by side: the GPUs and cores the detection holds
    runner_side_by_side_env(ctx, c, &env);
    const char *tmp = getenv("TMPDIR");
    char lock_dir[4096], lock_env[4200];
    snprintf(lock_dir, sizeof lock_dir, "%s/nsa_nested_locks.XXXXXX", tmp && tmp[0] == '/' ? tmp : "/tmp");
    if (mkdtemp(lock_dir)) {
        snprintf(lock_env, sizeof lock_env, "NSA_HARNESS_LOCK_DIR=%s", lock_dir);
        strlist_add(&env, lock_env);
    } else {
        lock_dir[0] = '\0';   // (no folder: the nested run finds no lock file it can make and takes none)
        strlist_add(&env, "NSA_HARNESS_LOCK_DIR=/nonexistent/nsa-harness-nested");
    }
    pid_t pid = proc_spawn((char *const *)argv, log, env.v, env.n);
    strlist_free(&env);
    int done = 0, hung = 0;
    *status = 0;
    const double deadline = mono_s() + c->run.timeout_s * ctx->timeout_scale;
    while (!done && mono_s() < deadline && !interrupted(ctx)) done = proc_wait(pid, 0.2, status);
    if (!done) {   // the nested runner stops its own cases on SIGTERM and writes its report
        proc_kill_group(pid, SIGTERM);
        if (!proc_wait(pid, 20, status)) {
            proc_kill_group(pid, SIGKILL);
            proc_wait(pid, 30, status);
        }
        hung = !interrupted(ctx);
    }
    proc_kill_group(pid, SIGKILL);
    proc_reap_orphans();
    if (lock_dir[0]) remove_flat_dir(lock_dir);
    return hung;
}

static void fault_text(const json_t *d, Str *fs);

// FamilyDef.needs: a detection holds what its nested run's scenario needs — the GPUs of its
// profile's requires.gpus (at least one per rank) — and has the machine to itself when it
// judges time: a hang (its latency), a scaled-down timeout, or a scenario with a timing check.
// (Called in the runner's thread before any case starts: the nested runs' shared folder is
// made here, its setenv before any other thread exists.)
static void selftest_needs(const Scenario *s, const Case *c, const char *profile, int gpus_here, int *gpus, int *exclusive,
                           int *ranks) {
    env_cache_ensure();
    const json_t *d = c->spec;
    char scen[2048];
    path_join(scen, sizeof scen, s->dir, json_string_value(json_object_get(d, "scenario")));
    json_t *root = json_load_path(scen, 0, NULL);
    const json_t *prof = json_object_get(json_object_get(root, "profiles"), profile);
    int req = (int)json_integer_value(json_object_get(json_object_get(prof, "requires"), "gpus"));
    int world = (int)json_integer_value(json_object_get(json_object_get(root, "run"), "world_size"));
    const int pw = (int)json_integer_value(json_object_get(json_object_get(prof, "run"), "world_size"));
    if (pw > world) world = pw;
    if (world < 1) world = 1;
    int timing = 0;
    size_t i;
    json_t *ck;
    json_array_foreach(json_object_get(root, "checks"), i, ck) timing |= check_judges_time(json_string_value(json_object_get(ck, "check")), ck);
    json_decref(root);
    Str fs = {0};
    fault_text(d, &fs);
    const json_t *tsc = json_object_get(d, "timeout_scale");
    *ranks = world > req ? world : req > 0 ? req : 1;
    *gpus = gpus_here > 0 && req > 0 ? *ranks : 0;
    *exclusive = timing || (json_is_number(tsc) && json_number_value(tsc) < 1) || strstr(str_c(&fs), "hang") != NULL;
    str_free(&fs);
}

// The faults as one text ("a + b"), "" for none.
static void fault_text(const json_t *d, Str *fs) {
    const json_t *f = json_object_get(d, "fault");
    if (json_is_string(f)) str_add(fs, json_string_value(f));
    size_t i;
    json_t *x;
    json_array_foreach(f, i, x) str_printf(fs, "%s%s", i ? " + " : "", json_string_value(x));
}

// The most severe verdict the detection expects (shown in the matrix).
static const char *shown_verdict(const json_t *expect) {
    const char *shown = "PASS";
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(expect, "verdicts"), k, v) if (strcmp(json_string_value(v), "PASS") &&
                                                                        strcmp(json_string_value(v), "SKIP")) shown = json_string_value(v);
    return shown;
}

static void selftest_run_case(const RunCtx *ctx, CaseResult *r) {
    const Case *c = r->c;
    const json_t *d = c->spec, *expect = json_object_get(d, "expect");
    snprintf(r->dir, sizeof r->dir, "%s/%s/%s", ctx->report_dir, r->s->name, c->dir);
    if (!r->rel_dir[0])   // (set when planned: the report reads it while the case runs)
        snprintf(r->rel_dir, sizeof r->rel_dir, "%s/%s", r->s->name, c->dir);
    snprintf(r->repro, sizeof r->repro, "%s run %s --profile %s --filter '%s'", ctx->harness, r->s->path, ctx->profile,
             c->name);
    if (mkdir_p(r->dir)) {
        r->verdict = V_ERROR;
        snprintf(r->summary, sizeof r->summary, "cannot create the case folder: %s", strerror(errno));
        return;
    }
    char scen[2048], log[2200];
    path_join(scen, sizeof scen, r->s->dir, json_string_value(json_object_get(d, "scenario")));
    snprintf(log, sizeof log, "%s/output.log", r->dir);
    const json_t *seeds = json_object_get(d, "seeds");
    int n_runs = seeds ? (int)json_array_size(seeds) : 1;
    // "trainer_cmd": the detection's, else the file's run.trainer_cmd; its relative paths are
    // the self-test file's folder's (passed to the nested run as --trainer-cmd)
    const json_t *tc = json_object_get(d, "trainer_cmd");
    if (!json_is_string(tc)) tc = json_object_get(json_object_get(r->s->root, "run"), "trainer_cmd");
    Str tcmd = {0};
    str_add(&tcmd, "");
    if (json_is_string(tc)) {
        StrList words = {0};
        char err[200];
        if (trainer_split_words(json_string_value(tc), &words, err, sizeof err) == 0 && words.n) {
            trainer_absolutize(&words, r->s->dir, 0);
            shell_join(&tcmd, words.v);
        }
        strlist_free(&words);
    }
    const double t0 = mono_s();
    Str bad = {0}, what = {0};
    json_t *observed = json_object();
    int hung = 0;
    for (int k = 0; k < n_runs && !interrupted(ctx); k++) {
        char out[2300], seedset[64], scale[32];
        long long seed = seeds ? (long long)json_integer_value(json_array_get(seeds, (size_t)k)) : 0;
        if (seeds) snprintf(out, sizeof out, "%s/run_seed%lld", r->dir, seed);
        else snprintf(out, sizeof out, "%s/run", r->dir);
        snprintf(seedset, sizeof seedset, "train.seed=%lld", seed);
        const char *argv[64];
        nested_argv(ctx, d, scen, out, seeds ? seedset : NULL, str_c(&tcmd)[0] ? str_c(&tcmd) : NULL, scale, argv);
        int status;
        hung |= run_nested(ctx, c, argv, log, &status);
        if (what.len) str_add(&what, ", ");
        str_printf(&what, "%s", seeds ? strrchr(seedset, '=') + 1 : "once");
        Str one = {0};
        judge(expect, out, status, &one, observed);
        if (one.len) {
            str_printf(&bad, "- run `%s/` (%s):\n", out + strlen(ctx->report_dir) + 1, seeds ? seedset : "no seed");
            str_add(&bad, str_c(&one));
        }
        str_free(&one);
    }
    r->wall_s = mono_s() - t0;
    // facts for the matrix: the scenario, the fault, what was expected and seen
    Str fs = {0};
    fault_text(d, &fs);
    const char *shown = shown_verdict(expect);
    json_object_set_new(r->facts, "st_scenario", json_string(scen));
    json_object_set_new(r->facts, "st_fault", json_string(fs.len ? str_c(&fs) : "none"));
    json_object_set_new(r->facts, "st_runs", json_integer(n_runs));
    json_object_set_new(r->facts, "st_observed", observed);
    json_object_set_new(r->facts, "st_expected", json_string(shown));
    if (interrupted(ctx)) {
        r->verdict = V_ERROR;
        snprintf(r->summary, sizeof r->summary, "interrupted");
    } else if (hung) {
        r->verdict = V_HANG;
        snprintf(r->summary, sizeof r->summary, "the nested run did not finish within %.0f s", c->run.timeout_s * ctx->timeout_scale);
        str_add(&r->evidence, str_c(&bad));
    } else if (bad.len) {
        r->verdict = V_FAIL;
        snprintf(r->summary, sizeof r->summary, "%s with %s (%d run%s): not detected as expected", json_string_value(json_object_get(d, "scenario")),
                 fs.len ? str_c(&fs) : "no fault", n_runs, n_runs == 1 ? "" : "s");
        str_add(&r->evidence, str_c(&bad));
    } else {
        r->verdict = V_PASS;
        snprintf(r->summary, sizeof r->summary, "%s as expected (%s; seeds: %s)", shown, fs.len ? str_c(&fs) : "no fault",
                 str_c(&what));
    }
    json_object_set_new(r->facts, "st_ok", json_boolean(r->verdict == V_PASS));
    str_free(&fs);
    str_free(&bad);
    str_free(&what);
    str_free(&tcmd);
}

// ---- the matrix ---------------------------------------------------------------------------

static const char *base_name(const char *path) {
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static void selftest_section(const ScenarioRun *sr, const char *report_dir, Str *md) {
    (void)report_dir;
    // rows: scenarios; columns: faults (in first-seen order)
    const char *rows[64], *cols[64];
    int nr = 0, nc = 0;
    for (int i = 0; i < sr->n; i++) {
        const char *sc = json_string_value(json_object_get(sr->results[i].facts, "st_scenario"));
        const char *fa = json_string_value(json_object_get(sr->results[i].facts, "st_fault"));
        if (!sc || !fa) continue;
        int seen = 0;
        for (int k = 0; k < nr; k++) seen |= !strcmp(rows[k], sc);
        if (!seen && nr < 64) rows[nr++] = sc;
        seen = 0;
        for (int k = 0; k < nc; k++) seen |= !strcmp(cols[k], fa);
        if (!seen && nc < 64) cols[nc++] = fa;
    }
    if (!nr) return;
    str_printf(md, "\n## %s — detection matrix\n\nEach cell: the verdict the scenario must give with that fault injected "
                   "(and the localisation its detection checks), then ✓ if it did, ✗ if not. `none` runs over several "
                   "seeds: no false alarm allowed.\n\n| scenario |", sr->s->name);
    for (int c = 0; c < nc; c++) str_printf(md, " %s |", cols[c]);
    str_add(md, "\n|---|");
    for (int c = 0; c < nc; c++) str_add(md, "---|");
    str_add(md, "\n");
    for (int r0 = 0; r0 < nr; r0++) {
        str_printf(md, "| %s |", base_name(rows[r0]));
        for (int c = 0; c < nc; c++) {
            Str cell = {0};
            for (int i = 0; i < sr->n; i++) {
                const json_t *f = sr->results[i].facts;
                if (!json_object_get(f, "st_scenario") || strcmp(json_string_value(json_object_get(f, "st_scenario")), rows[r0]) ||
                    strcmp(json_string_value(json_object_get(f, "st_fault")), cols[c]))
                    continue;
                str_printf(&cell, "%s%s %s", cell.len ? "; " : "", json_string_value(json_object_get(f, "st_expected")),
                           sr->results[i].verdict == V_PASS ? "✓" : "✗");
                long long runs = json_integer_value(json_object_get(f, "st_runs"));
                if (runs > 1) str_printf(&cell, " ×%lld", runs);
            }
            str_printf(md, " %s |", cell.len ? str_c(&cell) : "");
            str_free(&cell);
        }
        str_add(md, "\n");
    }
}

static void selftest_diagnose(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict == V_PASS || r->verdict == V_SKIP) continue;
        const json_t *f = r->facts;
        str_printf(md, "- **%s · %s**: %s with fault `%s` was expected to give %s; see its evidence below and the "
                       "nested report in `%s/`.\n",
                   sr->s->name, r->c->name, base_name(json_string_value(json_object_get(f, "st_scenario")) ?
                                                        json_string_value(json_object_get(f, "st_scenario")) : "?"),
                   json_string_value(json_object_get(f, "st_fault")) ? json_string_value(json_object_get(f, "st_fault")) : "?",
                   json_string_value(json_object_get(f, "st_expected")) ? json_string_value(json_object_get(f, "st_expected")) : "?",
                   r->rel_dir);
    }
}

const FamilyDef family_selftest = {
    .name = "selftest",
    .summary = "each family against the faults it must catch and against none: verdicts and localisation",
    .diagnose = selftest_diagnose,
    .section = selftest_section,
    .run_case = selftest_run_case,
    .load = selftest_load,
    .needs = selftest_needs,
};
