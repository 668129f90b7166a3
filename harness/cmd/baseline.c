// harness/cmd/baseline.c — `nsa-harness baseline record|show` (docs/regression.md).
//
// record runs the scenarios that hold a golden or perf_floor check (`run
// --recording`, so those checks compare nothing), --repeat N times for the
// run-to-run spread of the timings, then writes one baseline per case that passed
// every other check, summarised from its folders by harness/core/baseline.c. A case that
// did not pass is not recorded (a failing run never becomes the known-good past).
//
// show prints what a baseline file holds, or lists the baselines under a folder.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/home.h"
#include "harness/core/baseline.h"
#include "harness/cmd/commands.h"
#include "harness/cmd/options.h"
#include "harness/core/files.h"
#include "harness/exec/proc.h"
#include "harness/core/result.h"
#include "harness/core/scenario.h"
#include "harness/core/scenario_load.h"
#include "common/exit_codes.h"
#include "common/jsonutil.h"
#include "common/util.h"


static const CmdOption RECORD_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness baseline record [SCENARIO...] [options]\n"
     "       nsa-harness baseline show FILE|DIR\n"
     "\n"
     "record: runs the scenarios (default: every file in <home>/scenarios with a golden or\n"
     "perf_floor check) and writes each passing case's baseline to\n"
     "  <baselines>/<profile>/<device class>/<scenario>/<case>.json\n"
     "(every step's loss, grad norm, lr and data digest; the step-1 dump summarised tensor by\n"
     "tensor; gate statistics; peak memory, FLOPs, step time and tok/s; provenance: commit, date,\n"
     "device, build fingerprint, config digest, this command; device_arch, the device's\n"
     "architecture, by which a device without baselines of its own finds the nearest). A case\n"
     "that does not pass its other checks is not recorded. Re-recording replaces a baseline:\n"
     "say in the commit which numerics changed on purpose, and why.\n"},
    CMD_OPT_PROFILE,
    {"filter", "GLOB", OPT_FILTER, 0, "only these cases (as `run --filter`); repeatable"},
    {"case", "SCENARIO/CASE", OPT_CASE, 0, "exactly this case (as `run --case`); repeatable"},
    {"set", "KEY=VALUE", OPT_SET, 0, "a config override for every case (as `run --set`); repeatable"},
    {"repeat", "N", OPT_REPEAT, 0,
     "run everything N times (1-100, default 1): step time and tok/s are the median of the runs' medians, with "
     "their spread (perf floors: use >= 5)"},
    {"warmup", "N", OPT_WARMUP, 0, "steps left out of each run's step-time median (default 2)"},
    {"baselines", "DIR", OPT_BASELINES, 0, "where to write (default <home>/golden/baselines)"},
    {"out", "DIR", OPT_OUT, 0, "the runs' reports (default <home>/reports/record_<UTC time>)"},
    {"trainer", "PATH", OPT_TRAINER, 0, "the nsa-train executable (default: the one beside nsa-harness)"},
    {"trainer-map", "MAP", OPT_TRAINER_MAP, 0,
     "your own PyTorch trainer through its trainer map and the probe (docs/your-trainer.md); default scenarios "
     "then: <home>/scenarios/trainer with a golden or perf_floor check. Its baselines' commit is the trainer's "
     "(its script's git work tree), the fingerprint its python, torch and machine; keep them with the trainer: "
     "--baselines DIR"},
    {"timeout-scale", "X", OPT_TIMEOUT_SCALE, 0, "as `run --timeout-scale`"},
    {"commit", "SHA", OPT_COMMIT, 0,
     "the commit the sources are at, for a tree without git metadata (a copy on a GPU machine); its dirty flag is "
     "then recorded as unknown"},
    CMD_OPT_HELP,
    {NULL, NULL, 0, 0,
     "exit codes: 0 every case recorded; 1 a case did not pass (not recorded); 2 usage or an\n"
     "invalid scenario; 130 interrupted\n"
     "\n"
     "show: a baseline's provenance, steps, dump and perf; for a folder, one line per baseline.\n"},
};
const CmdOptions CMD_BASELINE_RECORD_OPTIONS = {"baseline record", "baseline", RECORD_ROWS,
                                                (int)(sizeof RECORD_ROWS / sizeof RECORD_ROWS[0]), NULL};

// `baseline show` takes only --help, which prints the whole text above
static const CmdOption SHOW_ROWS[] = {
    {NULL, NULL, 0, 0, "usage: nsa-harness baseline show FILE|DIR\n"},
    CMD_OPT_HELP,
};
const CmdOptions CMD_BASELINE_SHOW_OPTIONS = {"baseline show", "baseline", SHOW_ROWS,
                                              (int)(sizeof SHOW_ROWS / sizeof SHOW_ROWS[0]),
                                              &CMD_BASELINE_RECORD_OPTIONS};

void usage_baseline(FILE *f) { cmd_options_help(&CMD_BASELINE_RECORD_OPTIONS, f); }


// ---- record ---------------------------------------------------------------------------------------

typedef struct {
    StrList files, filters, cases, sets;
    const char *profile, *baselines, *out, *trainer, *trainer_map, *scale, *commit;
    int repeat, warmup;
} RecordOpts;

static int parse_int_in(const char *flag, const char *v, int lo, int hi, int *out) {
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!v[0] || *end || x < lo || x > hi) {
        cmd_log("baseline record", LOG_ERROR, "%s %s: expected a whole number from %d to %d", flag, v, lo, hi);
        return -1;
    }
    *out = (int)x;
    return 0;
}

// One option of record's table (RECORD_ROWS), or a SCENARIO. CMD_GO_ON or 2 (said).
static int apply_record_option(void *ctx, int id, const char *flag, const char *v) {
    RecordOpts *o = ctx;
    switch (id) {
    case OPT_WORD: strlist_add(&o->files, v); break;
    case OPT_PROFILE:
        if (cmd_parse_profile(v) < 0) {
            cmd_log("baseline record", LOG_ERROR, "--profile %s: expected ci or gpu", v);
            return HARNESS_EXIT_USAGE;
        }
        o->profile = v;
        break;
    case OPT_FILTER: strlist_add(&o->filters, v); break;
    case OPT_CASE: strlist_add(&o->cases, v); break;
    case OPT_SET: strlist_add(&o->sets, v); break;
    case OPT_REPEAT: return parse_int_in(flag, v, 1, 100, &o->repeat) ? HARNESS_EXIT_USAGE : CMD_GO_ON;
    case OPT_WARMUP: return parse_int_in(flag, v, 0, 1000, &o->warmup) ? HARNESS_EXIT_USAGE : CMD_GO_ON;
    case OPT_BASELINES: o->baselines = v; break;
    case OPT_OUT: o->out = v; break;
    case OPT_TRAINER: o->trainer = v; break;
    case OPT_TRAINER_MAP: o->trainer_map = v; break;
    case OPT_TIMEOUT_SCALE: o->scale = v; break;
    case OPT_COMMIT: o->commit = v; break;
    default: break;   // (no other row in RECORD_ROWS)
    }
    return CMD_GO_ON;
}

// 0, 1 (--help: printed), or -1 (usage error: printed)
static int parse_record(int argc, char **argv, RecordOpts *o) {
    memset(o, 0, sizeof *o);
    o->repeat = 1;
    o->warmup = 2;
    o->baselines = harness_path("golden/baselines");
    int rc = cmd_options_parse(&CMD_BASELINE_RECORD_OPTIONS, argc, argv, apply_record_option, NULL, o);
    if (rc != CMD_GO_ON) return rc == HARNESS_EXIT_OK ? 1 : -1;
    if (o->trainer && o->trainer_map) {
        cmd_log("baseline record", LOG_ERROR, "--trainer %s and --trainer-map %s: give one", o->trainer, o->trainer_map);
        return -1;
    }
    if (!o->baselines[0] || (o->out && !o->out[0])) {
        cmd_log("baseline record", LOG_ERROR, "--baselines and --out need a folder, got ''");
        return -1;
    }
    return 0;
}

// The shipped scenarios that hold a golden or perf_floor check: scenarios/ for nsa-train,
// scenarios/trainer/ (the scenarios written for any map) for a map trainer.
static int default_scenarios(StrList *files, int map) {
    const char *dir = map ? harness_path("scenarios/trainer") : harness_path("scenarios");
    StrList all = {0};
    if (collect_json_files(&all, NULL, 0, dir)) return -1;
    for (int i = 0; i < all.n; i++) {
        Scenario s;
        Problems ps = {0};
        if (scenario_load(&s, all.v[i], PROFILE_CI, 0, NULL, 0, &ps) == 0) {
            int want = 0;
            for (int c = 0; c < s.n_checks; c++)
                want |= !strcmp(s.checks[c].kind, "golden") || !strcmp(s.checks[c].kind, "perf_floor");
            if (want) strlist_add(files, all.v[i]);
            scenario_free(&s);
        }
        problems_free(&ps);
    }
    strlist_free(&all);
    if (files->n == 0) {
        cmd_log("baseline record", LOG_ERROR, "no scenario in %s has a golden or perf_floor check", dir);
        return -1;
    }
    return 0;
}

// One `run --recording` into out_dir; its exit code.
static int record_run(const RecordOpts *o, const char *out_dir) {
    StrList a = {0};
    for (int i = 0; i < o->files.n; i++) strlist_add(&a, o->files.v[i]);
    strlist_add(&a, "--recording");
    strlist_add(&a, "--out");
    strlist_add(&a, out_dir);
    strlist_add(&a, "--baselines");
    strlist_add(&a, o->baselines);
    if (o->profile) {
        strlist_add(&a, "--profile");
        strlist_add(&a, o->profile);
    }
    if (o->trainer) {
        strlist_add(&a, "--trainer");
        strlist_add(&a, o->trainer);
    }
    if (o->trainer_map) {
        strlist_add(&a, "--trainer-map");
        strlist_add(&a, o->trainer_map);
    }
    if (o->scale) {
        strlist_add(&a, "--timeout-scale");
        strlist_add(&a, o->scale);
    }
    for (int i = 0; i < o->filters.n; i++) {
        strlist_add(&a, "--filter");
        strlist_add(&a, o->filters.v[i]);
    }
    for (int i = 0; i < o->cases.n; i++) {
        strlist_add(&a, "--case");
        strlist_add(&a, o->cases.v[i]);
    }
    for (int i = 0; i < o->sets.n; i++) {
        strlist_add(&a, "--set");
        strlist_add(&a, o->sets.v[i]);
    }
    int rc = cmd_run(a.n, a.v);
    strlist_free(&a);
    return rc;
}

static int has_regression_check(const json_t *c) {
    size_t i;
    json_t *k;
    json_array_foreach(json_object_get(c, "checks"), i, k) {
        const char *n = json_string_value(k);
        if (n && (!strcmp(n, "golden") || !strcmp(n, "perf_floor"))) return 1;
    }
    return 0;
}

// The verdict of case (scenario, name) in a summary.json, or NULL.
static const char *verdict_in(const json_t *summary, const char *scenario, const char *name) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(summary, "cases"), i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "scenario")), scenario) &&
            !strcmp(json_string_value(json_object_get(c, "case")), name))
            return json_string_value(json_object_get(c, "verdict"));
    }
    return NULL;
}

// Write the baseline of one case of the runs; 0 recorded, 1 not (said why).
static int record_case(const RecordOpts *o, json_t *const *summaries, char *const *run_dirs, const json_t *c,
                       const char *commit, int dirty, const char *command) {
    const char *scen = json_string_value(json_object_get(c, "scenario"));
    const char *name = json_string_value(json_object_get(c, "case"));
    const char *rel = json_string_value(json_object_get(c, "dir"));
    for (int k = 0; k < o->repeat; k++) {
        const char *v = verdict_in(summaries[k], scen, name);
        if (!v || strcmp(v, "PASS")) {
            printf("  not recorded  %s/%s: %s in run %d (%s)\n", scen, name, v ? v : "not run", k + 1,
                   json_string_value(json_object_get(c, "summary")));
            return 1;
        }
    }
    char **dirs = xcalloc((size_t)o->repeat + 1, sizeof(char *));
    for (int k = 0; k < o->repeat; k++) {
        dirs[k] = xmalloc(4200);
        snprintf(dirs[k], 4200, "%s/%s", run_dirs[k], rel);
    }
    char envp[4300], err[2048];
    snprintf(envp, sizeof envp, "%s/env.json", dirs[0]);
    json_error_t je;
    json_t *env = json_load_path(envp, 0, &je);
    int rc = 1;
    if (!env) {
        printf("  not recorded  %s/%s: %s:%d:%d: %s\n", scen, name, envp, je.line, je.column, je.text);
        goto out;
    }
    BaselineMeta meta = {scen, name, path_basename(rel), json_string_value(json_object_get(summaries[0], "profile")),
                         json_string_value(json_object_get(c, "config_digest")),
                         json_string_value(json_object_get(c, "backend")), json_string_value(json_object_get(c, "precision")),
                         json_string_value(json_object_get(summaries[0], "device")), commit, dirty, command, o->warmup,
                         NULL, NULL};
    // a map trainer (--trainer-map, or the scenario's run.trainers map): the known-good past is
    // the trainer's commit (its script's git work tree, the probe's build.git_sha), not this
    // harness's; the harness's commit is kept beside it
    const char *map = json_string_value(json_object_get(json_object_get(env, "trainer"), "map"));
    if (map) {
        const json_t *build = json_object_get(env, "build");
        const json_t *gd = json_object_get(build, "git_dirty");
        meta.trainer_map = map;
        meta.harness_commit = commit;
        if (!o->commit) {
            meta.commit = json_string_value(json_object_get(build, "git_sha"));
            meta.dirty = json_is_boolean(gd) ? json_is_true(gd) : -1;
        }
        if (meta.dirty > 0)
            cmd_log("baseline record", LOG_WARN, "%s: the trainer's work tree has uncommitted changes; the "
                                                 "baseline says so (provenance.dirty)", name);
    }
    json_t *b = baseline_of_case((const char *const *)dirs, o->repeat, env, &meta, err, sizeof err);
    if (!b) {
        printf("  not recorded  %s/%s: %s\n", scen, name, err);
        goto out;
    }
    char path[4400];
    baseline_path(path, sizeof path, o->baselines, meta.profile, json_string_value(json_object_get(b, "device_class")),
                  scen, meta.case_dir);
    if (baseline_write(path, b, err, sizeof err)) printf("  not recorded  %s/%s: %s\n", scen, name, err);
    else {
        const json_t *dump = json_object_get(b, "dump");
        printf("  recorded      %s  (%zu steps, %zu tensors)\n", path, json_array_size(json_object_get(b, "steps")),
               json_is_object(dump) ? json_array_size(json_object_get(dump, "tensors")) : (size_t)0);
        rc = 0;
    }
    json_decref(b);
out:
    json_decref(env);
    for (int k = 0; k < o->repeat; k++) free(dirs[k]);
    free(dirs);
    return rc;
}

// The source tree's commit (full sha) or NULL (not a git work tree of its own).
static char *source_commit(void) {
    const char *head[] = {"rev-parse", "HEAD", NULL};
    char *out = cmd_source_git(head);
    if (out && !out[0]) {
        free(out);
        out = NULL;
    }
    return out;
}

static int baseline_record(int argc, char **argv) {
    RecordOpts o;
    int prc = parse_record(argc, argv, &o);
    if (prc) return prc > 0 ? HARNESS_EXIT_OK : HARNESS_EXIT_USAGE;
    if (o.files.n == 0 && default_scenarios(&o.files, o.trainer_map != NULL)) return HARNESS_EXIT_USAGE;
    char stamp[32], out[2048];
    utc_stamp(stamp, sizeof stamp);
    if (o.out) snprintf(out, sizeof out, "%s", o.out);
    else snprintf(out, sizeof out, "%s/record_%s", harness_reports_dir(), stamp);
    Str command = {0};
    str_add(&command, "nsa-harness baseline record ");
    shell_join(&command, argv);
    char **run_dirs = xcalloc((size_t)o.repeat + 1, sizeof(char *));
    json_t **summaries = xcalloc((size_t)o.repeat + 1, sizeof(json_t *));
    int rc = HARNESS_EXIT_OK;
    for (int k = 0; k < o.repeat && !rc; k++) {
        run_dirs[k] = xmalloc(2200);
        snprintf(run_dirs[k], 2200, "%s/run_%d", out, k + 1);
        printf("nsa-harness baseline record: run %d of %d into %s\n", k + 1, o.repeat, run_dirs[k]);
        fflush(stdout);
        int r = record_run(&o, run_dirs[k]);
        if (r == HARNESS_EXIT_USAGE || r == HARNESS_EXIT_BISECT_SKIP || r == HARNESS_EXIT_INTERRUPTED)   // invalid scenario, usage, interrupt: stop
            rc = r == HARNESS_EXIT_BISECT_SKIP ? HARNESS_EXIT_USAGE : r;
        char sp[2300];
        snprintf(sp, sizeof sp, "%s/summary.json", run_dirs[k]);
        json_error_t je;
        if (!rc && !(summaries[k] = json_load_path(sp, 0, &je))) {
            cmd_log("baseline record", LOG_ERROR, "%s:%d:%d: %s", sp, je.line, je.column, je.text);
            rc = HARNESS_EXIT_USAGE;
        }
    }
    if (!rc) {
        char *commit = o.commit ? xstrdup(o.commit) : source_commit();
        int dirty = o.commit ? -1 : json_is_true(json_object_get(json_object_get(summaries[0], "git"), "dirty"));
        if (dirty > 0 && !o.trainer_map)   // a map trainer's own tree is what counts (record_case)
            cmd_log("baseline record", LOG_WARN, "the source tree has uncommitted changes; the baselines say "
                                                 "so (provenance.dirty)");
        printf("nsa-harness baseline record: writing to %s\n", o.baselines);
        int recorded = 0, refused = 0;
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(summaries[0], "cases"), i, c) {
            if (!has_regression_check(c)) continue;
            if (record_case(&o, summaries, run_dirs, c, commit, dirty, str_c(&command))) refused++;
            else recorded++;
        }
        printf("nsa-harness baseline record: %d recorded, %d not recorded%s\n", recorded, refused,
               recorded + refused == 0 ? " (no case with a golden or perf_floor check ran)" : "");
        rc = refused || recorded == 0 ? HARNESS_EXIT_FAIL : HARNESS_EXIT_OK;
        free(commit);
    }
    for (int k = 0; k < o.repeat; k++) {
        free(run_dirs[k]);
        json_decref(summaries[k]);
    }
    free(run_dirs);
    free(summaries);
    str_free(&command);
    strlist_free(&o.files);
    strlist_free(&o.filters);
    strlist_free(&o.cases);
    strlist_free(&o.sets);
    return rc;
}

// ---- show -----------------------------------------------------------------------------------------

static void show_one(const char *path, const json_t *b, int brief) {
    const json_t *p = json_object_get(b, "provenance"), *steps = json_object_get(b, "steps"),
                 *perf = json_object_get(b, "perf"), *dump = json_object_get(b, "dump");
    size_t n = json_array_size(steps);
    double l0 = json_number_or(json_array_get(steps, 0), "loss", NAN);
    double l1 = json_number_or(json_array_get(steps, n ? n - 1 : 0), "loss", NAN);
    if (brief) {
        printf("%-10s %-24s %-28s %-30s %3zu steps  loss %.6g → %.6g  %s %s\n",
               json_string_value(json_object_get(b, "profile")), json_string_value(json_object_get(b, "device_class")),
               json_string_value(json_object_get(b, "scenario")), json_string_value(json_object_get(b, "case")), n, l0, l1,
               json_string_value(json_object_get(p, "recorded")),
               json_is_string(json_object_get(p, "commit")) ? json_string_value(json_object_get(p, "commit")) : "?");
        return;
    }
    char arch[64];
    const char *arch_src = NULL;
    baseline_arch(b, arch, sizeof arch, &arch_src);   // what a device without its own baseline is matched by
    printf("%s\n  scenario %s, case %s, profile %s, device class %s (architecture %s, %s)\n  config digest %s\n", path,
           json_string_value(json_object_get(b, "scenario")), json_string_value(json_object_get(b, "case")),
           json_string_value(json_object_get(b, "profile")), json_string_value(json_object_get(b, "device_class")), arch,
           arch_src, json_string_value(json_object_get(b, "config_digest")));
    if (json_is_string(json_object_get(p, "trainer_map")))
        printf("  trainer map %s (the commit below is the trainer's; harness at %s)\n",
               json_string_value(json_object_get(p, "trainer_map")),
               json_is_string(json_object_get(p, "harness_commit")) ? json_string_value(json_object_get(p, "harness_commit")) : "?");
    printf("  recorded %s at %s%s on %s\n  fingerprint %s: ", json_string_value(json_object_get(p, "recorded")),
           json_is_string(json_object_get(p, "commit")) ? json_string_value(json_object_get(p, "commit")) : "?",
           json_is_true(json_object_get(p, "dirty")) ? " (dirty)" : json_is_null(json_object_get(p, "dirty")) ? " (dirty flag unknown)" : "", json_string_value(json_object_get(p, "device")),
           json_string_value(json_object_get(p, "fingerprint_id")));
    char *fp = json_dumps(json_object_get(p, "fingerprint"), JSON_COMPACT);
    printf("%s\n  command: %s\n", fp ? fp : "?", json_string_value(json_object_get(p, "command")));
    free(fp);
    printf("  steps: %zu, loss %.9g → %.9g\n", n, l0, l1);
    printf("  step-1 dump: %s\n", json_is_object(dump) ? "" : "none");
    if (json_is_object(dump)) printf("    %zu tensors summarised\n", json_array_size(json_object_get(dump, "tensors")));
    char peak[48] = "not recorded";   // null: the trainer writes no allocator high-water mark (a probe trainer)
    if (json_is_integer(json_object_get(perf, "peak_mem_bytes")))
        snprintf(peak, sizeof peak, "%lld B", (long long)json_integer_value(json_object_get(perf, "peak_mem_bytes")));
    printf("  perf: peak memory %s, %.6g FLOPs/step, step %.4g ms, %.6g tok/s (median of %lld run%s, spread %.3g)\n",
           peak,
           json_number_or(perf, "flops_per_step", NAN), json_number_or(json_object_get(perf, "step_ms"), "median", NAN),
           json_number_or(json_object_get(perf, "tok_per_s"), "median", NAN),
           (long long)json_integer_value(json_object_get(perf, "runs")),
           json_integer_value(json_object_get(perf, "runs")) == 1 ? "" : "s",
           json_number_or(json_object_get(perf, "tok_per_s"), "spread", NAN));
}

// Every *.json below dir, depth first, sorted per folder.
static int show_dir(const char *dir, int *n) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    StrList names = {0};
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.') strlist_add(&names, e->d_name);
    closedir(d);
    strlist_sort(&names);
    int bad = 0;
    for (int i = 0; i < names.n; i++) {
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, names.v[i]);
        size_t l = strlen(names.v[i]);
        if (is_dir(p)) bad |= show_dir(p, n);
        else if (l > 5 && !strcmp(names.v[i] + l - 5, ".json")) {
            char err[2048];
            json_t *b = baseline_load(p, err, sizeof err);
            if (!b) {
                fprintf(stderr, "%s\n", err);
                bad = 1;
                continue;
            }
            show_one(p, b, 1);
            json_decref(b);
            (*n)++;
        }
    }
    strlist_free(&names);
    return bad;
}

static int apply_show_option(void *ctx, int id, const char *flag, const char *v) {
    (void)flag;
    if (id == OPT_WORD) strlist_add(ctx, v);
    return CMD_GO_ON;
}

static int baseline_show(int argc, char **argv) {
    StrList args = {0};
    int prc = cmd_options_parse(&CMD_BASELINE_SHOW_OPTIONS, argc, argv, apply_show_option, NULL, &args);
    if (prc != CMD_GO_ON) return prc;
    if (args.n != 1) {
        fprintf(stderr, "usage: nsa-harness baseline show FILE|DIR\n");
        return HARNESS_EXIT_USAGE;
    }
    argv = args.v;
    if (is_dir(argv[0])) {
        int n = 0, bad = show_dir(argv[0], &n);
        if (n == 0) cmd_log("baseline show", LOG_ERROR, "no baseline under %s", argv[0]);
        return bad || n == 0 ? HARNESS_EXIT_USAGE : HARNESS_EXIT_OK;
    }
    char err[2048];
    json_t *b = baseline_load(argv[0], err, sizeof err);
    if (!b) {
        cmd_log("baseline show", LOG_ERROR, "%s", err);
        return HARNESS_EXIT_USAGE;
    }
    show_one(argv[0], b, 0);
    json_decref(b);
    return HARNESS_EXIT_OK;
}

int cmd_baseline(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        usage_baseline(argc < 1 ? stderr : stdout);
        return argc < 1 ? HARNESS_EXIT_USAGE : HARNESS_EXIT_OK;
    }
    if (!strcmp(argv[0], "record")) return baseline_record(argc - 1, argv + 1);
    if (!strcmp(argv[0], "show")) return baseline_show(argc - 1, argv + 1);
    cmd_log("baseline", LOG_ERROR, "unknown subcommand '%s' (record, show)", argv[0]);
    return HARNESS_EXIT_USAGE;
}
