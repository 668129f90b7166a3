// harness/cmd/bisect.c — nsa-harness bisect: the first commit between a good and a bad
// one at which the selected scenarios stop passing (docs/bisect.md).
//
// Only nsa-train is built per commit, in a temporary git worktree; the runner (this
// executable), the scenario files, the configs and the baselines come from the
// invoking tree, so every commit is judged against the same inputs. Each tested
// commit is a step:
//
//   git worktree add --detach TMP/src SHA
//   cmake -S TMP/src -B TMP/build <settings of the invoking build> -DNSA_ENABLE_CUDA=...
//   cmake --build TMP/build --target nsa-train
//   cp TMP/build/nsa-train OUT/NN_SHA/nsa-train   (kept: the report's reproduce commands name it)
//   <this nsa-harness> run <run options> --profile P --trainer OUT/NN_SHA/nsa-train --out OUT/NN_SHA/report
//
// and its verdict is the run's exit code: 0 good, 1 bad, 2 or 125 skip (as is a
// failed checkout, configure or build), 130 stop. GOOD and BAD are tested first (unless
// --no-verify), and the inputs taken from the invoking tree must be as committed (unless
// --allow-dirty, which states them): check_inputs.
//
// The stages, each a group of functions below:
//   1. options    bisect's own options; everything else is a run option, forwarded
//   2. revisions  the repository, GOOD and BAD, the commits of GOOD..BAD oldest first
//   3. plan       the profile (decided once), the scenarios (do they need ranks?), the
//                 cmake arguments, ccache
//   4. step       one commit: worktree, configure, build, run, verdict, clean-up
//   5. search     binary search over the commits, skipped ones excluded
//   6. report     the steps' table, the first bad commit's finding, bisect.md
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/core/home.h"
#include "harness/cmd/commands.h"
#include "harness/cmd/options.h"
#include "harness/core/family.h"
#include "harness/core/files.h"
#include "harness/exec/proc.h"
#include "harness/core/scenario.h"
#include "harness/core/scenario_load.h"
#include "common/exit_codes.h"
#include "common/util.h"

static volatile sig_atomic_t g_stop = 0;
static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}


// 1 if l holds s
static int in_list(const StrList *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->v[i], s)) return 1;
    return 0;
}

static void chomp(char *s) {
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) s[--n] = '\0';
}

static const CmdOption BISECT_ROWS[] = {
    {NULL, NULL, 0, 0,
     "usage: nsa-harness bisect --good REV --bad REV [options] [run options] [SCENARIO...]\n"
     "\n"
     "Finds the first commit of GOOD..BAD at which the selected scenarios stop passing. For\n"
     "each commit it tests it builds only that commit's nsa-train, in a temporary git worktree,\n"
     "and runs this nsa-harness (so the runner, scenario files, configs and baselines of this\n"
     "tree) against it:\n"
     "  nsa-harness run [run options] [SCENARIO...] --profile P --trainer OUT/NN_SHA/nsa-train\n"
     "      --out OUT/NN_SHA/report\n"
     "Run exit 0 = good, 1 = bad, 2 or 125 = skip (as is a checkout, configure or build that\n"
     "fails), 130 = stop. GOOD and BAD are tested first (GOOD must test good, BAD bad; one that\n"
     "cannot be judged keeps its role); a skipped commit is left out and a neighbour is tested\n"
     "instead (binary search over git log --ancestry-path GOOD..BAD).\n"
     "\n"
     "The scenario files, their configs and baselines are this tree's, the same at every step: when\n"
     "one of them differs from its commit (modified, staged or new: git status) bisect refuses to\n"
     "start (exit 2, naming the files) unless --allow-dirty, which states them at the top of the\n"
     "output and of bisect.md. The state of every input and of this runner is printed first.\n"
     "\n"
     "options:\n"},
    {"good", "REV", OPT_GOOD, 0, "a commit where the scenarios pass (required)"},
    {"bad", "REV", OPT_BAD, 0, "a later commit where they fail; GOOD must be its ancestor (required)"},
    {"repo", "DIR", OPT_REPO, 0, "the git repository (default: the source tree of this nsa-harness, <home>)"},
    {"out", "DIR", OPT_OUT, 0,
     "output folder: one report per step and bisect.md (default: <home>/reports/bisect_<UTC time>)"},
    {"no-verify", NULL, OPT_NO_VERIFY, 0,
     "do not test GOOD and BAD first: assume them (by default they are tested, and one that contradicts its role "
     "is exit 2)"},
    {"verify", NULL, OPT_VERIFY, 0, "test GOOD and BAD first (the default)"},
    {"allow-dirty", NULL, OPT_ALLOW_DIRTY, 0,
     "bisect with inputs (scenarios, configs, baselines) that differ from their commit, stated up front (by "
     "default: refused, exit 2)"},
    {"jobs", "N", OPT_BUILD_JOBS, 0, "parallel compile jobs per build (default: the CPUs online)"},
    {"keep-worktrees", NULL, OPT_KEEP_WORKTREES, 0, "keep every step's worktree and build folder (debugging)"},
    CMD_OPT_HELP,
    {NULL, NULL, 0, 0,
     "\n"
     "run options (forwarded to every step's `nsa-harness run`, in the order given): SCENARIO...,\n"
     "the ones below and any other run option (--quiet, ...). --trainer and run's --out are set\n"
     "by bisect.\n"},
    {"profile", "ci|gpu", OPT_PROFILE, 0,
     "decided once, as `run` decides it (gpu when this build's nsa-train sees a CUDA device), and passed to "
     "every step"},
    {"filter", "GLOB", OPT_FILTER, 0, "as run's"},
    {"set", "KEY=VALUE", OPT_SET, 0, "as run's; the scenarios are checked with them first"},
    {"fault", "NAME[=ARG]", OPT_FAULT, 0, "as run's"},
    {"timeout-scale", "X", OPT_TIMEOUT_SCALE, 0, "as run's"},
    {"baselines", "DIR", OPT_BASELINES, 0, "as run's; an input whose state is checked like the scenarios'"},
    {"trainer", "PATH", OPT_TRAINER, 0, "refused: bisect tests the nsa-train of each commit"},
    {"trainer-cmd", "\"CMD\"", OPT_TRAINER_CMD, 0, "refused: bisect tests the nsa-train of each commit"},
    {"trainer-map", "MAP", OPT_TRAINER_MAP, 0,
     "refused: a map trainer's own history: `git bisect run` in its repository, docs/your-trainer.md"},
    {NULL, NULL, 0, 0,
     "\n"
     "Each step builds with the invoking build's CMAKE_BUILD_TYPE, CMAKE_C_COMPILER, CMAKE_C_FLAGS\n"
     "and NSA_NATIVE, -DNSA_ENABLE_CUDA=OFF for the ci profile, MPI only when a selected case\n"
     "has several ranks, only the nsa-train target, and ccache when it is on the PATH.\n"
     "\n"
     "Prints the first bad commit, its subject and the failing cases' findings from its report,\n"
     "and a table of the steps (also OUT/bisect.md). Each step's nsa-train is kept as\n"
     "OUT/NN_SHA/nsa-train (the step's report runs it and its reproduce commands name it).\n"
     "exit codes: 0 the first bad commit is named; 1 it cannot be isolated (skipped commits at\n"
     "the boundary: the candidates are listed); 2 usage error, an unknown revision, GOOD not an\n"
     "ancestor of BAD, not a git repository, invalid scenarios or run options, inputs that differ\n"
     "from their commit (without --allow-dirty), GOOD testing bad or BAD good; 130 interrupted\n"
     "(the temporary worktrees are removed in every case).\n"},
};
const CmdOptions CMD_BISECT_OPTIONS = {"bisect", "bisect", BISECT_ROWS,
                                       (int)(sizeof BISECT_ROWS / sizeof BISECT_ROWS[0]), NULL};

void usage_bisect(FILE *f) { cmd_options_help(&CMD_BISECT_OPTIONS, f); }

// ---- 1. options ---------------------------------------------------------------------------

typedef struct {
    const char *good, *bad, *repo, *out;
    int verify, keep, jobs;
    int allow_dirty;    // --allow-dirty: judge with inputs that differ from their commit (stated)
    const char *baselines;   // the run option --baselines, or NULL (the source tree's golden/baselines)
    StrList run;        // run options and scenario arguments, in the order given (forwarded)
    StrList scen;       // the scenario arguments among them
    StrList sets;       // the values of their --set (the scenarios are loaded with them)
    int profile;     // their --profile, or -1
} Opts;

// One option of bisect's table (BISECT_ROWS), or a SCENARIO. CMD_GO_ON or 2 (said).
static int apply_bisect_option(void *ctx, int id, const char *flag, const char *v) {
    Opts *o = ctx;
    switch (id) {
    case OPT_WORD:
        strlist_add(&o->run, v);
        strlist_add(&o->scen, v);
        return CMD_GO_ON;
    case OPT_GOOD: o->good = v; return CMD_GO_ON;
    case OPT_BAD: o->bad = v; return CMD_GO_ON;
    case OPT_REPO: o->repo = v; return CMD_GO_ON;
    case OPT_OUT: o->out = v; return CMD_GO_ON;
    case OPT_BUILD_JOBS: {
        char *end = NULL;
        long j = strtol(v, &end, 10);
        if (!end || *end || j < 1 || j > 1024) {
            cmd_log("bisect", LOG_ERROR, "--jobs %s: expected a number from 1 to 1024", v);
            return HARNESS_EXIT_USAGE;
        }
        o->jobs = (int)j;
        return CMD_GO_ON;
    }
    case OPT_VERIFY: o->verify = 1; return CMD_GO_ON;   // the default; kept for older command lines
    case OPT_NO_VERIFY: o->verify = 0; return CMD_GO_ON;
    case OPT_ALLOW_DIRTY: o->allow_dirty = 1; return CMD_GO_ON;
    case OPT_KEEP_WORKTREES: o->keep = 1; return CMD_GO_ON;
    case OPT_TRAINER:
    case OPT_TRAINER_CMD:
    case OPT_TRAINER_MAP:
        cmd_log("bisect", LOG_ERROR, "%s: bisect builds the trainer of each commit itself (nsa-train)%s", flag,
                  id == OPT_TRAINER_MAP ? "; bisect a map trainer's own history with `git bisect run` in its "
                                          "repository (docs/your-trainer.md, \"Regressions in your trainer\")"
                                        : "");
        return HARNESS_EXIT_USAGE;
    case OPT_PROFILE:
        if ((o->profile = cmd_parse_profile(v)) < 0) {
            cmd_log("bisect", LOG_ERROR, "--profile %s: expected ci or gpu", v);
            return HARNESS_EXIT_USAGE;
        }
        break;
    case OPT_SET: strlist_add(&o->sets, v); break;
    case OPT_BASELINES: o->baselines = v; break;
    default: break;   // --filter, --fault, --timeout-scale: forwarded as they are
    }
    strlist_add(&o->run, flag);   // a run option bisect reads: forwarded with its value
    strlist_add(&o->run, v);
    return CMD_GO_ON;
}

// An option of run's that bisect does not know: forwarded, and the word after it as its
// value when that names no file and does not start with '-'.
static int forward_run_option(void *ctx, const char *word, const char *next) {
    Opts *o = ctx;
    strlist_add(&o->run, word);
    if (!next || next[0] == '-' || file_exists(next)) return 1;
    strlist_add(&o->run, next);
    return 2;
}

// 0 ok, 1 help printed, -1 usage error (printed)
static int parse_options(int argc, char **argv, Opts *o) {
    memset(o, 0, sizeof *o);
    o->profile = -1;
    o->verify = 1;   // GOOD and BAD are tested first unless --no-verify
    int rc = cmd_options_parse(&CMD_BISECT_OPTIONS, argc, argv, apply_bisect_option, forward_run_option, o);
    if (rc != CMD_GO_ON) return rc == HARNESS_EXIT_OK ? 1 : -1;
    if (!o->good || !o->bad) {
        cmd_log("bisect", LOG_ERROR, "--good REV and --bad REV are required (see nsa-harness help bisect)");
        return -1;
    }
    if (!o->jobs) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        o->jobs = n > 0 ? (int)n : 2;
    }
    return 0;
}

// ---- 2. revisions ----------------------------------------------------------------------------

typedef struct {
    char sha[48];
    char shrt[16];
    char *subject;
} Commit;

typedef struct {
    char git[1024];   // the git executable
    char top[4096];   // the repository's top level
    Commit *c;        // c[0] = GOOD, then GOOD..BAD oldest first: c[n-1] = BAD
    int n;
} Repo;

// git -C top ARGS... with stdout captured (stderr dropped); 0 when git exited 0
static int git_capture(const Repo *R, const char *dir, const char *const *args, char **out) {
    const char *av[24] = {R->git, "-C", dir ? dir : R->top};
    int n = 3;
    for (int i = 0; args[i] && n < 23; i++) av[n++] = args[i];
    av[n] = NULL;
    int st = proc_capture((char *const *)av, 120, out);
    return st == 0 ? 0 : -1;
}

// "sha\tshort\tsubject" lines into commits
static void parse_log(const char *text, Repo *R) {
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char *line = xmalloc(len + 1);
        memcpy(line, p, len);
        line[len] = '\0';
        char *t1 = strchr(line, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (t1 && t2) {
            *t1 = *t2 = '\0';
            R->c = xrealloc(R->c, sizeof(Commit) * (size_t)(R->n + 1));
            Commit *c = &R->c[R->n++];
            snprintf(c->sha, sizeof c->sha, "%s", line);
            snprintf(c->shrt, sizeof c->shrt, "%s", t1 + 1);
            c->subject = xstrdup(t2 + 1);
        }
        free(line);
        p += len + (eol ? 1 : 0);
    }
}

static int resolve_rev(const Repo *R, const char *flag, const char *rev, char *sha, size_t n) {
    char spec[1200], *out = NULL;
    snprintf(spec, sizeof spec, "%s^{commit}", rev);
    const char *args[] = {"rev-parse", "--verify", "--quiet", spec, NULL};
    int rc = git_capture(R, NULL, args, &out);
    chomp(out);
    if (rc || !out[0] || rev[0] == '-') {
        cmd_log("bisect", LOG_ERROR, "%s %s: not a commit in %s", flag, rev, R->top);
        free(out);
        return -1;
    }
    snprintf(sha, n, "%s", out);
    free(out);
    return 0;
}

// The repository, GOOD and BAD, and the commits between them. 0, or -1 (printed).
static int load_revisions(const Opts *o, Repo *R) {
    memset(R, 0, sizeof *R);
    if (proc_which("git", R->git, sizeof R->git)) {
        cmd_log("bisect", LOG_ERROR, "git is not on the PATH (apt-get install git)");
        return -1;
    }
    const char *dir = o->repo ? o->repo : harness_home();
    char *out = NULL;
    const char *top_args[] = {"rev-parse", "--show-toplevel", NULL};
    if (!is_dir(dir) || git_capture(R, dir, top_args, &out) || !out[0]) {
        if (o->repo) cmd_log("bisect", LOG_ERROR, "--repo %s: not a git repository", dir);
        else cmd_log("bisect", LOG_ERROR, "%s (the source tree of this nsa-harness) is not a git repository: pass --repo DIR", dir);
        free(out);
        return -1;
    }
    chomp(out);
    snprintf(R->top, sizeof R->top, "%s", out);
    free(out);
    char good[48], bad[48];
    if (resolve_rev(R, "--good", o->good, good, sizeof good) || resolve_rev(R, "--bad", o->bad, bad, sizeof bad)) return -1;
    if (!strcmp(good, bad)) {
        cmd_log("bisect", LOG_ERROR, "--good %s and --bad %s are the same commit (%.12s): nothing to bisect", o->good, o->bad, good);
        return -1;
    }
    const char *anc[] = {"merge-base", "--is-ancestor", good, bad, NULL};
    if (git_capture(R, NULL, anc, &out)) {
        cmd_log("bisect", LOG_ERROR, "--good %s (%.12s) is not an ancestor of --bad %s (%.12s) in %s", o->good, good, o->bad, bad,
                R->top);
        free(out);
        return -1;
    }
    free(out);
    const char *fmt = "--format=%H%x09%h%x09%s";
    const char *one[] = {"log", "-1", fmt, good, NULL};
    if (git_capture(R, NULL, one, &out)) {
        cmd_log("bisect", LOG_ERROR, "git log %s failed in %s", good, R->top);
        free(out);
        return -1;
    }
    parse_log(out, R);
    free(out);
    char range[128];
    snprintf(range, sizeof range, "%s..%s", good, bad);
    const char *list[] = {"log", "--ancestry-path", "--topo-order", "--reverse", fmt, range, NULL};
    if (git_capture(R, NULL, list, &out)) {
        cmd_log("bisect", LOG_ERROR, "git log --ancestry-path %s failed in %s", range, R->top);
        free(out);
        return -1;
    }
    parse_log(out, R);
    free(out);
    if (R->n < 2 || strcmp(R->c[0].sha, good) || strcmp(R->c[R->n - 1].sha, bad)) {
        cmd_log("bisect", LOG_ERROR, "cannot list the commits of %s in %s", range, R->top);
        return -1;
    }
    return 0;
}

// ---- 3. plan: profile, scenarios, cmake arguments ------------------------------------------------

typedef struct {
    char self[4096];        // this nsa-harness
    char self_dir[4096];    // its build folder
    int profile;
    char profile_why[256];
    int need_ranks;         // a selected case runs several ranks (or the self-test): build MPI
    char cmake[1024];
    char ccache[1024];      // "" without ccache
    StrList cmake_args;        // after -S SRC -B BUILD
    StrList build_env;         // environment of configure and build (ccache's settings)
    char settings_from[4200];
    // the inputs every step is judged with (check_inputs): the selected scenario files and their
    // configs (absolute paths), and the baselines they compare with ("DIR\tPROFILE/*/SCENARIO")
    StrList in_files, in_baselines;
    Str inputs_line;        // their state, for the console (one or more lines, each ending in \n)
    Str inputs_md;          // ... and for bisect.md's header (list items)
} Plan;

static void self_paths(Plan *P) {
    ssize_t l = readlink("/proc/self/exe", P->self, sizeof P->self - 1);
    if (l <= 0) snprintf(P->self, sizeof P->self, "nsa-harness");
    else P->self[l] = '\0';
    path_dirname(P->self, P->self_dir, sizeof P->self_dir);
}

// The profile, once, as `run` decides it: gpu when this build's nsa-train sees a CUDA device.
static void decide_profile(const Opts *o, Plan *P) {
    if (o->profile >= 0) {
        P->profile = o->profile;
        snprintf(P->profile_why, sizeof P->profile_why, "--profile");
        return;
    }
    char trainer[4200];
    snprintf(trainer, sizeof trainer, "%s/nsa-train", P->self_dir);
    P->profile = PROFILE_CI;
    if (access(trainer, X_OK) != 0) {
        snprintf(P->profile_why, sizeof P->profile_why, "no nsa-train beside nsa-harness to ask for CUDA devices");
        return;
    }
    char *text = NULL;
    char *const pe[] = {trainer, "--print-env", NULL};
    json_t *env = proc_capture(pe, 120, &text) == 0 ? json_loads(text, 0, NULL) : NULL;
    free(text);
    int gpus = (int)json_array_size(json_object_get(json_object_get(env, "cuda"), "devices"));
    json_decref(env);
    if (gpus > 0) P->profile = PROFILE_GPU;
    snprintf(P->profile_why, sizeof P->profile_why, "%d CUDA device%s usable", gpus, gpus == 1 ? "" : "s");
}


// Scenario arguments as `run` reads them: files as given, directories' *.json (sorted).
static void scenario_files(const Opts *o, StrList *files) {
    collect_json_files(files, o->scen.v, o->scen.n, harness_path("scenarios"));
}

// Load the selected scenarios for the profile (the runner is the same at every step, so
// an invalid one would be invalid at every commit: an error now) and see whether any
// case needs several ranks. 0, or -1 (printed).
static int check_scenarios(const Opts *o, Plan *P) {
    StrList files = {0};
    scenario_files(o, &files);
    int bad = 0;
    for (int i = 0; i < files.n; i++) {
        Problems ps = {0};
        Scenario s;
        if (scenario_load(&s, files.v[i], P->profile, 0, (const char *const *)o->sets.v, o->sets.n, &ps)) {
            problems_sort(&ps);
            for (int k = 0; k < ps.n; k++) fprintf(stderr, "%s\n", ps.v[k].text);
            if (!ps.n) fprintf(stderr, "%s: cannot load this scenario\n", files.v[i]);
            problems_free(&ps);
            bad++;
            continue;
        }
        problems_free(&ps);
        // the inputs every step is judged with (check_inputs): the file, its config, its baselines
        char *abs = realpath(files.v[i], NULL);
        if (abs && !in_list(&P->in_files, abs)) strlist_add(&P->in_files, abs);
        free(abs);
        abs = realpath(s.config_path, NULL);
        if (abs && !in_list(&P->in_files, abs)) strlist_add(&P->in_files, abs);
        free(abs);
        int baselines = 0;
        for (int k = 0; k < s.n_checks; k++)
            baselines |= !strcmp(s.checks[k].kind, "golden") || !strcmp(s.checks[k].kind, "perf_floor");
        if (baselines) {
            char *bdir = realpath(o->baselines ? o->baselines : harness_path("golden/baselines"), NULL);
            if (bdir) {
                Str b = {0};
                str_printf(&b, "%s\t%s/*/%s", bdir, PROFILE_NAMES[P->profile], s.name);
                if (!in_list(&P->in_baselines, str_c(&b))) strlist_add(&P->in_baselines, str_c(&b));
                str_free(&b);
            }
            free(bdir);
        }
        // a family that runs its cases another way (the self-test's nested runs of other
        // scenarios) may need ranks whatever its own cases say
        const FamilyDef *fd = family_find(s.family);
        if (fd && fd->run_case) P->need_ranks = 1;
        for (int c = 0; c < s.n_cases; c++)
            if (s.cases[c].run.world_size > 1 || strcmp(s.cases[c].run.transport, "none") != 0) P->need_ranks = 1;
        scenario_free(&s);
    }
    if (bad) cmd_log("bisect", LOG_ERROR, "%d of %d scenario file%s invalid: nothing to bisect with", bad, files.n, files.n == 1 ? "" : "s");
    strlist_free(&files);
    return bad ? -1 : 0;
}

// NAME:TYPE=value of a CMakeCache.txt, into out; 0, or -1 when absent or empty
static int cache_value(const char *cache, const char *name, char *out, size_t n) {
    size_t nl = strlen(name);
    for (const char *p = cache; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
        if (strncmp(p, name, nl) || p[nl] != ':') continue;
        const char *eq = strchr(p, '=');
        const char *eol = strchr(p, '\n');
        if (!eq || (eol && eq > eol)) continue;
        int len = eol ? (int)(eol - eq - 1) : (int)strlen(eq + 1);
        snprintf(out, n, "%.*s", len, eq + 1);
        chomp(out);
        return out[0] ? 0 : -1;
    }
    return -1;
}

static void add_define(Plan *P, const char *name, const char *value) {
    Str d = {0};
    str_printf(&d, "-D%s=%s", name, value);
    strlist_add(&P->cmake_args, str_c(&d));
    str_free(&d);
}

// The configure arguments of every step: the invoking build's settings that change the
// numerics (so a step's build fingerprint matches the baselines'), the backends the
// profile needs, MPI only when a case needs ranks, ccache when on the PATH.
static int plan_build(Plan *P) {
    if (proc_which("cmake", P->cmake, sizeof P->cmake)) {
        cmd_log("bisect", LOG_ERROR, "cmake is not on the PATH (apt-get install cmake)");
        return -1;
    }
    char path[4200], v[2048];
    snprintf(path, sizeof path, "%s/CMakeCache.txt", P->self_dir);
    char *cache = read_file(path, NULL);
    snprintf(P->settings_from, sizeof P->settings_from, "%s", cache ? path : "(no CMakeCache.txt beside nsa-harness: CMake defaults)");
    add_define(P, "CMAKE_BUILD_TYPE", cache && !cache_value(cache, "CMAKE_BUILD_TYPE", v, sizeof v) ? v : "RelWithDebInfo");
    static const char *const copied[] = {"CMAKE_C_COMPILER", "CMAKE_C_FLAGS", "NSA_NATIVE"};
    for (size_t i = 0; i < sizeof copied / sizeof *copied; i++)
        if (cache && !cache_value(cache, copied[i], v, sizeof v)) add_define(P, copied[i], v);
    if (P->profile == PROFILE_GPU) {
        add_define(P, "NSA_ENABLE_CUDA", "ON");
        static const char *const cuda[] = {"CMAKE_CUDA_COMPILER", "CMAKE_CUDA_ARCHITECTURES", "CMAKE_CUDA_FLAGS"};
        for (size_t i = 0; i < sizeof cuda / sizeof *cuda; i++)
            if (cache && !cache_value(cache, cuda[i], v, sizeof v)) add_define(P, cuda[i], v);
    } else add_define(P, "NSA_ENABLE_CUDA", "OFF");
    add_define(P, "NSA_ENABLE_MPI", P->need_ranks ? "ON" : "OFF");
    add_define(P, "NSA_ENABLE_NCCL", P->need_ranks && P->profile == PROFILE_GPU ? "ON" : "OFF");
    if (!proc_which("ccache", P->ccache, sizeof P->ccache)) {
        add_define(P, "CMAKE_C_COMPILER_LAUNCHER", P->ccache);
        if (P->profile == PROFILE_GPU) add_define(P, "CMAKE_CUDA_COMPILER_LAUNCHER", P->ccache);
    } else P->ccache[0] = '\0';
    free(cache);
    return 0;
}

// ccache's settings for the steps' builds, unless the environment has its own: paths
// below the temporary folder are hashed relative to it and the build folder is left
// out of the hash, so that the objects of one bisect serve the next one too (the
// debug info may then name another bisect's temporary folder, deleted by then).
static void plan_ccache_env(Plan *P, const char *tmp) {
    if (!P->ccache[0]) return;
    if (!getenv("CCACHE_BASEDIR")) {
        Str e = {0};
        str_printf(&e, "CCACHE_BASEDIR=%s", tmp);
        strlist_add(&P->build_env, str_c(&e));
        str_free(&e);
    }
    if (!getenv("CCACHE_HASHDIR") && !getenv("CCACHE_NOHASHDIR")) strlist_add(&P->build_env, "CCACHE_NOHASHDIR=1");
}

// git -C DIR ARGS... (stdout captured, stderr dropped): 0 when git exited 0
static int git_in(const char *git, const char *dir, const char *const *args, char **out) {
    StrList av = {0};
    strlist_add(&av, git);
    strlist_add(&av, "-C");
    strlist_add(&av, dir);
    for (int i = 0; args[i]; i++) strlist_add(&av, args[i]);
    const int st = proc_capture(av.v, 60, out);
    strlist_free(&av);
    return st == 0 ? 0 : -1;
}

// The top of the git work tree that holds path (a file or a folder), into top; -1 outside any.
static int git_top_of(const char *git, const char *path, char *top, size_t n) {
    char dir[4096];
    if (is_dir(path)) snprintf(dir, sizeof dir, "%s", path);
    else path_dirname(path, dir, sizeof dir);
    char *out = NULL;
    const char *args[] = {"rev-parse", "--show-toplevel", NULL};
    int rc = git_in(git, dir, args, &out);
    if (!rc && out) chomp(out);
    char *real = !rc && out && out[0] ? realpath(out, NULL) : NULL;
    free(out);
    if (!real) return -1;
    snprintf(top, n, "%s", real);
    free(real);
    return 0;
}

// path relative to top ("" when path is top), or NULL when it is not below top
static const char *below(const char *path, const char *top) {
    size_t n = strlen(top);
    if (strncmp(path, top, n)) return NULL;
    if (!path[n]) return path + n;
    return path[n] == '/' ? path + n + 1 : NULL;
}

// The inputs every commit is judged with come from the invoking tree: the selected scenario
// files, their configs and the baselines they compare with (and this runner). A change to one
// of them that is not committed — modified, staged or a new file, in the git repository it
// lies in — would judge every commit with something no commit has: a one-digit edit to a
// baseline once made a bisect name a comment-only commit, without a word. Such a bisect is
// refused (exit 2, naming the files) unless --allow-dirty, which states them up front. The
// state of every input (its commit, clean or not; outside any repository: unknown) and of the
// runner's own sources goes to P->inputs_line and P->inputs_md. 0, or -1 (printed).
static int check_inputs(const Opts *o, Plan *P) {
    char git[1024];
    if (proc_which("git", git, sizeof git)) return 0;   // load_revisions has said so already
    StrList tops = {0}, outside = {0};
    // the repositories that hold inputs, in order of appearance
    StrList all = {0};
    for (int i = 0; i < P->in_files.n; i++) strlist_add(&all, P->in_files.v[i]);
    for (int i = 0; i < P->in_baselines.n; i++) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)strcspn(P->in_baselines.v[i], "\t"), P->in_baselines.v[i]);
        strlist_add(&all, dir);
    }
    for (int i = 0; i < all.n; i++) {
        char top[4096];
        if (git_top_of(git, all.v[i], top, sizeof top)) {
            if (!in_list(&outside, all.v[i])) strlist_add(&outside, all.v[i]);
        } else if (!in_list(&tops, top)) strlist_add(&tops, top);
    }
    int dirty_total = 0;
    for (int t = 0; t < tops.n; t++) {
        const char *top = tops.v[t];
        StrList args = {0};
        strlist_add(&args, "status");
        strlist_add(&args, "--porcelain");
        strlist_add(&args, "--untracked-files=all");
        strlist_add(&args, "--");
        int n_in = 0;
        for (int i = 0; i < P->in_files.n; i++) {
            const char *rel = below(P->in_files.v[i], top);
            if (rel && rel[0]) strlist_add(&args, rel), n_in++;
        }
        for (int i = 0; i < P->in_baselines.n; i++) {
            const char *tab = strchr(P->in_baselines.v[i], '\t');
            char dir[4096];
            snprintf(dir, sizeof dir, "%.*s", (int)(tab - P->in_baselines.v[i]), P->in_baselines.v[i]);
            const char *rel = below(dir, top);
            if (!rel) continue;
            Str spec = {0};
            str_printf(&spec, ":(glob)%s%s%s/**", rel, rel[0] ? "/" : "", tab + 1);
            strlist_add(&args, str_c(&spec));
            str_free(&spec);
            n_in++;
        }
        char *st = NULL, *sha = NULL;
        const char *head[] = {"rev-parse", "--short=7", "HEAD", NULL};
        if (git_in(git, top, head, &sha) || !sha[0]) {
            free(sha);
            sha = xstrdup("(no commit)");
        }
        chomp(sha);
        const int st_rc = git_in(git, top, (const char *const *)args.v, &st);
        strlist_free(&args);
        int n_dirty = 0;
        Str lines = {0};
        for (char *l = st; !st_rc && l && *l;) {
            char *eol = strchr(l, '\n');
            if (eol) *eol = '\0';
            if (l[0]) {
                str_printf(&lines, "    %s\n", l);
                n_dirty++;
            }
            l = eol ? eol + 1 : NULL;
        }
        if (st_rc) {
            str_printf(&P->inputs_line, "bisect: inputs in %s at %s: git status failed: their state is unknown\n", top, sha);
            str_printf(&P->inputs_md, "- inputs in `%s` at `%s`: git status failed, their state is unknown\n", top, sha);
        } else if (!n_dirty) {
            str_printf(&P->inputs_line, "bisect: inputs (%d path%s: scenarios, configs%s) as committed at %s in %s\n", n_in,
                       n_in == 1 ? "" : "s", P->in_baselines.n ? ", baselines" : "", sha, top);
            str_printf(&P->inputs_md, "- inputs: %d path%s (scenarios, configs%s) as committed at `%s` in `%s`\n", n_in,
                       n_in == 1 ? "" : "s", P->in_baselines.n ? ", baselines" : "", sha, top);
        } else {
            dirty_total += n_dirty;
            if (!o->allow_dirty) {
                cmd_log("bisect", LOG_ERROR,
                        "the inputs every commit would be judged with differ from their commit (%s in %s):\n%s", sha, top,
                        str_c(&lines));
            } else {
                str_printf(&P->inputs_line, "bisect: WARNING (--allow-dirty): every commit is judged with inputs that differ "
                                            "from their commit (%s in %s):\n%s", sha, top, str_c(&lines));
                str_printf(&P->inputs_md, "- **inputs that differ from their commit** (`--allow-dirty`; `%s` in `%s`): every "
                                          "commit was judged with them:\n\n```\n%s```\n", sha, top, str_c(&lines));
            }
        }
        str_free(&lines);
        free(st);
        free(sha);
    }
    for (int i = 0; i < outside.n; i++) {
        str_printf(&P->inputs_line, "bisect: %s is in no git repository: its state cannot be checked\n", outside.v[i]);
        str_printf(&P->inputs_md, "- `%s` is in no git repository: its state cannot be checked\n", outside.v[i]);
    }
    // the runner: this executable, from its home folder (harness/core/home.h; stated, never refused: it is the tool chosen)
    char top[4096];
    if (!git_top_of(git, harness_home(), top, sizeof top)) {
        char *sha = NULL, *st = NULL;
        const char *head[] = {"rev-parse", "--short=7", "HEAD", NULL};
        const char *stat[] = {"status", "--porcelain", "--untracked-files=no", "--", "harness", "common", NULL};
        git_in(git, top, head, &sha);
        if (sha) chomp(sha);
        const int mod = !git_in(git, top, stat, &st) && st && st[0];
        str_printf(&P->inputs_line, "bisect: runner %s, from %s at %s%s\n", P->self, top, sha && sha[0] ? sha : "?",
                   mod ? " (harness/ or common/ modified since: this build may differ from that commit)" : "");
        str_printf(&P->inputs_md, "- runner `%s`, from `%s` at `%s`%s\n", P->self, top, sha && sha[0] ? sha : "?",
                   mod ? " (harness/ or common/ modified since: this build may differ from that commit)" : "");
        free(sha);
        free(st);
    }
    strlist_free(&tops);
    strlist_free(&outside);
    strlist_free(&all);
    if (dirty_total && !o->allow_dirty) {
        cmd_log("bisect", LOG_ERROR, "every step would judge its commit with %s; commit or stash %s, or pass --allow-dirty to bisect "
                                     "with %s (stated at the top of the output and of bisect.md)",
                dirty_total == 1 ? "this change" : "these changes", dirty_total == 1 ? "it" : "them",
                dirty_total == 1 ? "it" : "them");
        return -1;
    }
    return 0;
}

// ---- 4. one step ---------------------------------------------------------------------------------

enum { BV_UNTESTED, BV_GOOD, BV_BAD, BV_SKIP, BV_STOP };
static const char *const BV_NAMES[] = {"untested", "good", "bad", "skip", "stop"};

typedef struct {
    int idx;              // the commit (Repo.c)
    const char *role;     // why it was tested: "search", "verify", "finding"
    char build[48];       // "ok", "checkout failed", "configure failed", "build failed", "interrupted"
    double build_s, run_s;
    int run_exit;         // -1: not run
    int verdict;          // BV_*
    char rel[64];         // its folder under the output folder: NN_short
} Step;

typedef struct {
    const Opts *o;
    Repo *R;
    Plan *P;
    char out[4096];       // the output folder
    char tmp[4096];       // temporary folder: the worktree (src) and the build folder (build)
    char command[8192];   // how bisect was invoked
    char started[32];
    double t0;
    int *state;           // BV_* per commit (c[0] good and c[n-1] bad by assumption)
    Step *steps;
    int n_steps;
    int lo, hi;           // last known good, first known bad (indices into R->c)
    char wt[4400];        // the worktree of the step now running ("" when none is registered)
    char why[1024];       // why bisect stopped with exit 2 ("" otherwise)
} Bisect;

// Append a line to a log file (the commands a step ran, before their output).
static void log_line(const char *log, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_line(const char *log, const char *fmt, ...) {
    FILE *f = fopen(log, "a");
    if (!f) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
}

// Run argv (argv[0] a path) to the end with its output appended to log. An interrupt
// (g_stop) is passed on to its process group as stop_sig, then SIGKILL after a grace
// period. Returns its exit code, 128 + signal when a signal ended it, -1 if it could
// not start.
static int spawn_wait(char *const argv[], const char *log, int stop_sig, char *const *env, int n_env) {
    Str cmd = {0};
    for (int i = 0; argv[i]; i++) str_printf(&cmd, "%s%s", i ? " " : "$ ", argv[i]);
    log_line(log, "%s", str_c(&cmd));
    str_free(&cmd);
    pid_t pid = proc_spawn(argv, log, env, n_env);
    if (pid < 0) {
        log_line(log, "cannot start %s: %s", argv[0], strerror(errno));
        return -1;
    }
    int status = 0, forwarded = 0;
    while (!proc_wait(pid, 0.2, &status)) {
        if (g_stop && !forwarded) {
            proc_kill_group(pid, stop_sig);   // the runner writes its report, marked interrupted
            forwarded = 1;
            if (!proc_wait(pid, 60, &status)) {
                proc_kill_group(pid, SIGKILL);
                proc_wait(pid, 10, &status);
            }
            break;
        }
    }
    proc_kill_group(pid, SIGKILL);   // anything it left behind
    if (WIFSIGNALED(status)) return EXIT_SIGNAL_BASE + WTERMSIG(status);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(p);
    return 0;
}
static void rm_rf(const char *dir) {
    if (dir[0] && file_exists(dir)) nftw(dir, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
}

static void step_paths(const Bisect *B, const Step *st, char *src, char *bdir, size_t n) {
    // one fixed pair of paths for every step, so that ccache finds the unchanged files
    // (its hash includes the directories of debug builds); --keep-worktrees: one per step
    if (B->o->keep) {
        snprintf(src, n, "%s/%s/src", B->tmp, st->rel);
        snprintf(bdir, n, "%s/%s/build", B->tmp, st->rel);
    } else {
        snprintf(src, n, "%s/src", B->tmp);
        snprintf(bdir, n, "%s/build", B->tmp);
    }
}

// Unregister and delete the step's worktree and build folder (not with --keep-worktrees).
static void remove_worktree(Bisect *B, const char *bdir) {
    if (B->o->keep) {
        B->wt[0] = '\0';
        return;
    }
    if (B->wt[0]) {
        char *out = NULL;
        const char *rm[] = {"worktree", "remove", "--force", B->wt, NULL};
        if (git_capture(B->R, NULL, rm, &out)) {   // then delete it and drop git's record of it
            rm_rf(B->wt);
            const char *prune[] = {"worktree", "prune", NULL};
            free(out);
            out = NULL;
            git_capture(B->R, NULL, prune, &out);
        }
        free(out);
        B->wt[0] = '\0';
    }
    if (bdir) rm_rf(bdir);
}

// Check out, configure and build nsa-train of the step's commit. 0 ok, -1 failed
// (st->build says where), -2 interrupted.
static int build_step(Bisect *B, Step *st, const char *src, const char *bdir, const char *log) {
    const Commit *c = &B->R->c[st->idx];
    const Plan *P = B->P;
    double t0 = mono_s();
    char jobs[16];
    snprintf(jobs, sizeof jobs, "-j%d", B->o->jobs);
    const char *add[] = {B->R->git, "-C", B->R->top, "worktree", "add", "--detach", src, c->sha, NULL};
    int rc = spawn_wait((char *const *)add, log, SIGTERM, NULL, 0);
    if (rc == 0) snprintf(B->wt, sizeof B->wt, "%s", src);
    const char *stage = "checkout failed";
    if (rc == 0 && !g_stop) {
        StrList cfg = {0};
        strlist_add(&cfg, P->cmake);
        strlist_add(&cfg, "-S");
        strlist_add(&cfg, src);
        strlist_add(&cfg, "-B");
        strlist_add(&cfg, bdir);
        for (int i = 0; i < P->cmake_args.n; i++) strlist_add(&cfg, P->cmake_args.v[i]);
        rc = spawn_wait(cfg.v, log, SIGTERM, P->build_env.v, P->build_env.n);
        strlist_free(&cfg);
        stage = "configure failed";
    }
    if (rc == 0 && !g_stop) {
        const char *bld[] = {P->cmake, "--build", bdir, "--target", "nsa-train", jobs, NULL};
        rc = spawn_wait((char *const *)bld, log, SIGTERM, P->build_env.v, P->build_env.n);
        stage = "build failed";
    }
    char trainer[4500];
    snprintf(trainer, sizeof trainer, "%s/nsa-train", bdir);
    if (rc == 0 && access(trainer, X_OK) != 0) {
        log_line(log, "bisect: the build made no %s", trainer);
        rc = -1;
    }
    st->build_s = mono_s() - t0;
    if (g_stop) {
        snprintf(st->build, sizeof st->build, "interrupted");
        return -2;
    }
    if (rc != 0) {
        snprintf(st->build, sizeof st->build, "%s", stage);
        return -1;
    }
    snprintf(st->build, sizeof st->build, "ok");
    return 0;
}

// Copy the step's nsa-train (its build folder is deleted after the step) to dst, executable:
// the step's run uses that copy, so its report's reproduce commands name a file that stays.
// 0, or -1 (dst removed; the reason in the log).
static int keep_trainer(const char *src, const char *dst, const char *log) {
    int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = -1;
    if (in >= 0) out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
    if (in >= 0 && out >= 0) {
        char buf[1 << 16];
        ssize_t n;
        rc = 0;
        while ((n = read(in, buf, sizeof buf)) != 0) {
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                rc = -1;
                break;
            }
            for (ssize_t off = 0; off < n;) {
                ssize_t w = write(out, buf + off, (size_t)(n - off));
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) {
                    rc = -1;
                    break;
                }
                off += w;
            }
            if (rc) break;
        }
        if (close(out)) rc = -1;
        out = -1;
    }
    const int e = errno;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (rc) {
        unlink(dst);
        log_line(log, "bisect: cannot keep %s as %s: %s (the run uses the build folder's, deleted after the step)", src, dst,
                 strerror(e));
    } else log_line(log, "bisect: kept %s as %s (the step's run uses it; its report's reproduce commands name it)", src, dst);
    return rc;
}

// The first line of a log that reports an error (a compiler's "file:line:col: error: ..."),
// trimmed, into out ("" when none).
static void first_error_line(const char *log, char *out, size_t n) {
    out[0] = '\0';
    char *text = read_file(log, NULL);
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        if (eol) *eol = '\0';
        if (strstr(line, "error:") || strstr(line, "fatal:") || strstr(line, "CMake Error")) {
            while (*line == ' ') line++;
            const char *src = strstr(line, "/src/");   // the worktree's path is temporary
            snprintf(out, n, "%s", src ? src + 5 : line);
            break;
        }
        line = eol ? eol + 1 : NULL;
    }
    free(text);
}

// A run that exited 2 without a summary.json stopped before judging any case: its
// inputs (this runner, the scenarios, the options) were rejected, which no commit can
// change — unless it was the step's trainer that failed to start.
static int run_rejected_inputs(const char *dir, const char *log) {
    char p[4500];
    snprintf(p, sizeof p, "%s/summary.json", dir);
    if (file_exists(p)) return 0;
    char *text = read_tail(log, 8192);
    int trainer = text && (strstr(text, "--print-env") || strstr(text, "the trainer"));
    free(text);
    return !trainer;
}

// Test one commit: build it, run the scenarios against it, keep the report. The
// verdict is in st->verdict; returns -2 when the run options were rejected (no commit
// can be judged), else 0.
static int run_step(Bisect *B, int idx, const char *role) {
    B->steps = xrealloc(B->steps, sizeof(Step) * (size_t)(B->n_steps + 1));
    Step *st = &B->steps[B->n_steps++];
    memset(st, 0, sizeof *st);
    st->idx = idx;
    st->role = role;
    st->run_exit = -1;
    const Commit *c = &B->R->c[idx];
    snprintf(st->rel, sizeof st->rel, "%02d_%s", B->n_steps, c->shrt);
    // the step's folder holds bisect's two logs and, in report/, the run's report (the
    // runner claims only an empty folder or an earlier report of its own)
    char dir[4200], rdir[4300], log[4400], runlog[4400], src[4400], bdir[4400];
    snprintf(dir, sizeof dir, "%s/%s", B->out, st->rel);
    snprintf(rdir, sizeof rdir, "%s/report", dir);
    snprintf(log, sizeof log, "%s/build.log", dir);
    snprintf(runlog, sizeof runlog, "%s/run.log", dir);
    mkdir_p(dir);
    step_paths(B, st, src, bdir, sizeof src);
    printf("[step %d] %s %s (%s)\n", B->n_steps, c->shrt, c->subject, role);
    fflush(stdout);

    int rc = build_step(B, st, src, bdir, log);
    int rejected = 0;
    if (rc == -2) st->verdict = BV_STOP;
    else if (rc == -1) st->verdict = BV_SKIP;
    else {
        StrList av = {0};
        strlist_add(&av, B->P->self);
        strlist_add(&av, "run");
        for (int i = 0; i < B->o->run.n; i++) strlist_add(&av, B->o->run.v[i]);
        if (B->o->profile < 0) {
            strlist_add(&av, "--profile");
            strlist_add(&av, PROFILE_NAMES[B->P->profile]);
        }
        char built[4500], trainer[4500];
        snprintf(built, sizeof built, "%s/nsa-train", bdir);
        snprintf(trainer, sizeof trainer, "%s/nsa-train", dir);
        if (keep_trainer(built, trainer, log)) snprintf(trainer, sizeof trainer, "%s", built);
        strlist_add(&av, "--trainer");
        strlist_add(&av, trainer);
        strlist_add(&av, "--out");
        strlist_add(&av, rdir);
        double t0 = mono_s();
        st->run_exit = spawn_wait(av.v, runlog, SIGINT, NULL, 0);
        st->run_s = mono_s() - t0;
        strlist_free(&av);
        switch (st->run_exit) {
        case HARNESS_EXIT_OK: st->verdict = BV_GOOD; break;
        case HARNESS_EXIT_FAIL: st->verdict = BV_BAD; break;
        case HARNESS_EXIT_INTERRUPTED: st->verdict = BV_STOP; break;
        default: st->verdict = g_stop ? BV_STOP : BV_SKIP; break;   // 2, 125, a crash of the runner
        }
        if (st->run_exit == HARNESS_EXIT_USAGE && run_rejected_inputs(rdir, runlog)) rejected = 1;
    }
    remove_worktree(B, bdir);
    char bt[32], rt[32];
    fmt_duration(bt, sizeof bt, st->build_s);
    fmt_duration(rt, sizeof rt, st->run_s);
    if (st->run_exit >= 0)
        printf("         build %s (%s) · run exit %d (%s) -> %s\n", st->build, bt, st->run_exit, rt, BV_NAMES[st->verdict]);
    else {
        char first_error[300] = "";
        first_error_line(log, first_error, sizeof first_error);
        printf("         %s (%s, %s/build.log%s%s) -> %s\n", st->build, bt, st->rel, first_error[0] ? ": " : "", first_error,
               BV_NAMES[st->verdict]);
    }
    fflush(stdout);
    if (rejected) {
        char *text = read_tail(runlog, 2048);
        fflush(stdout);
        cmd_log("bisect", LOG_ERROR, "the run rejected its inputs (the same at every commit), see %s:\n%s", runlog,
                text ? text : "");
        free(text);
        snprintf(B->why, sizeof B->why, "the run rejected its inputs (options or scenarios, the same at every commit): see `%s/run.log`",
                 st->rel);
        return -2;
    }
    return 0;
}

// ---- 5. search -------------------------------------------------------------------------------------

// The next commit to test between lo (known good) and hi (known bad): the untested one
// nearest to the midpoint, later ones first at equal distance; -1 when none is left.
static int pick_next(const Bisect *B) {
    int lo = B->lo, hi = B->hi, mid = lo + (hi - lo) / 2;
    for (int d = 0; d < hi - lo; d++) {
        int later = mid + d, earlier = mid - d;
        if (later > lo && later < hi && B->state[later] == BV_UNTESTED) return later;
        if (d && earlier > lo && earlier < hi && B->state[earlier] == BV_UNTESTED) return earlier;
    }
    return -1;
}

static int untested_between(const Bisect *B) {
    int n = 0;
    for (int i = B->lo + 1; i < B->hi; i++) n += B->state[i] == BV_UNTESTED;
    return n;
}

// Records a step's verdict in the search state.
static void note_verdict(Bisect *B, int idx, int verdict) {
    B->state[idx] = verdict;
    if (verdict == BV_GOOD && idx > B->lo && idx < B->hi) B->lo = idx;
    if (verdict == BV_BAD && idx < B->hi && idx > B->lo) B->hi = idx;
}

static void write_report(const Bisect *B, const char *result);

// GOOD must test good and BAD bad (unless --no-verify). 0, 2 (contradiction), 130, -2 rejected.
static int verify_ends(Bisect *B) {
    const int ends[2] = {0, B->R->n - 1}, want[2] = {BV_GOOD, BV_BAD};
    const char *flag[2] = {"--good", "--bad"};
    for (int e = 0; e < 2; e++) {
        if (g_stop) return HARNESS_EXIT_INTERRUPTED;
        if (run_step(B, ends[e], "verify") == -2) return -2;
        const Step *st = &B->steps[B->n_steps - 1];
        write_report(B, NULL);
        if (st->verdict == BV_STOP) return HARNESS_EXIT_INTERRUPTED;
        if (st->verdict == BV_SKIP) {
            printf("         %s %s could not be judged: assumed %s\n", flag[e], B->R->c[ends[e]].shrt, BV_NAMES[want[e]]);
            continue;
        }
        B->state[ends[e]] = st->verdict;
        if (st->verdict != want[e]) {
            cmd_log("bisect", LOG_ERROR, "%s %s tested %s, not %s (report %s/%s/report): choose another %s, or --no-verify to "
                                         "assume it", flag[e], B->R->c[ends[e]].shrt, BV_NAMES[st->verdict], BV_NAMES[want[e]], B->out,
                    st->rel, flag[e]);
            snprintf(B->why, sizeof B->why, "%s `%s` tested %s, not %s (report `%s/report/`)", flag[e], B->R->c[ends[e]].shrt,
                     BV_NAMES[st->verdict], BV_NAMES[want[e]], st->rel);
            return HARNESS_EXIT_USAGE;
        }
    }
    return HARNESS_EXIT_OK;
}

// Binary search. Returns 0 when the first bad commit is B->hi (lo + 1 == hi), 1 when
// skipped commits leave several candidates (lo+1 .. hi), 130 when interrupted, -2
// when the run rejected its inputs.
static int search(Bisect *B) {
    for (;;) {
        if (g_stop) return HARNESS_EXIT_INTERRUPTED;
        int next = pick_next(B);
        if (next < 0) break;
        int left = untested_between(B), steps = 0;
        while ((1 << steps) < left + 1) steps++;
        printf("bisect: %d commit%s left to test (about %d step%s)\n", left, left == 1 ? "" : "s", steps, steps == 1 ? "" : "s");
        if (run_step(B, next, "search") == -2) return -2;
        const Step *st = &B->steps[B->n_steps - 1];
        if (st->verdict == BV_STOP) {
            write_report(B, NULL);
            return HARNESS_EXIT_INTERRUPTED;
        }
        note_verdict(B, next, st->verdict);
        write_report(B, NULL);
    }
    return B->hi == B->lo + 1 ? HARNESS_EXIT_OK : HARNESS_EXIT_FAIL;
}

// ---- 6. report --------------------------------------------------------------------------------------

static const Step *step_of(const Bisect *B, int idx) {
    for (int i = B->n_steps - 1; i >= 0; i--)
        if (B->steps[i].idx == idx && (B->steps[i].verdict == BV_BAD || B->steps[i].verdict == BV_GOOD)) return &B->steps[i];
    return NULL;
}

// The findings of a step's report: one line per case that did not pass (summary.json's
// cases[].summary) and the RESULTS.md section of the first of them.
static void finding_of(const Bisect *B, const Step *st, Str *lines, Str *section) {
    char p[4400];
    snprintf(p, sizeof p, "%s/%s/report/summary.json", B->out, st->rel);
    json_t *sj = json_load_file(p, 0, NULL);
    char first[700] = "";
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(sj, "cases"), i, c) {
        const char *v = json_string_value(json_object_get(c, "verdict"));
        if (!v || !strcmp(v, "PASS") || !strcmp(v, "SKIP")) continue;
        const char *sc = json_string_value(json_object_get(c, "scenario")), *cs = json_string_value(json_object_get(c, "case"));
        const char *sum = json_string_value(json_object_get(c, "summary"));
        str_printf(lines, "- %s/%s **%s**: %s\n", sc ? sc : "?", cs ? cs : "?", v, sum ? sum : "");
        if (!first[0]) snprintf(first, sizeof first, "\n## %s · %s — %s", sc ? sc : "?", cs ? cs : "?", v);
    }
    json_array_foreach(json_object_get(sj, "invalid_scenarios"), i, c)
        str_printf(lines, "- %s **ERROR**: invalid scenario\n", json_string_value(json_object_get(c, "file")));
    json_decref(sj);
    if (!lines->len) str_printf(lines, "- (no failing case in %s/report/summary.json)\n", st->rel);
    snprintf(p, sizeof p, "%s/%s/report/RESULTS.md", B->out, st->rel);
    char *md = first[0] ? read_file(p, NULL) : NULL;
    char *at = md ? strstr(md, first) : NULL;
    if (at) {
        at++;
        char *end = strstr(at + 3, "\n## ");
        if (end) *end = '\0';
        chomp(at);
        str_add(section, at);
        str_add(section, "\n");
    }
    free(md);
}

static void step_table(const Bisect *B, Str *s) {
    str_add(s, "| step | commit | subject | build | run exit | verdict | report |\n|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < B->n_steps; i++) {
        const Step *st = &B->steps[i];
        const Commit *c = &B->R->c[st->idx];
        char bt[32], ex[16];
        fmt_duration(bt, sizeof bt, st->build_s);
        if (st->run_exit >= 0) snprintf(ex, sizeof ex, "%d", st->run_exit);
        else snprintf(ex, sizeof ex, "—");
        str_printf(s, "| %d | `%s` | ", i + 1, c->shrt);
        str_add_md_cell(s, c->subject);
        const char *why = !strcmp(st->role, "verify") ? " (verify)" : !strcmp(st->role, "finding") ? " (for its finding)" : "";
        str_printf(s, " | %s (%s) | %s | %s%s | `%s/` |\n", st->build, bt, ex, BV_NAMES[st->verdict], why, st->rel);
    }
}

// bisect.md: rewritten after every step (an interrupted bisect leaves a readable one).
// result: Markdown of the outcome, or NULL while running.
static void write_report(const Bisect *B, const char *result) {
    Str s = {0};
    const Repo *R = B->R;
    char wall[32];
    fmt_duration(wall, sizeof wall, mono_s() - B->t0);
    str_printf(&s, "# nsa-harness bisect — %s\n\n", B->started);
    str_printf(&s, "- repository `%s`: %d commit%s after good `%s` up to bad `%s` (%s)\n", R->top, R->n - 1,
               R->n == 2 ? "" : "s", R->c[0].shrt, R->c[R->n - 1].shrt,
               B->o->verify ? "GOOD and BAD tested first" : "--no-verify: GOOD assumed good and BAD bad");
    str_add(&s, str_c(&B->P->inputs_md));
    str_printf(&s, "- profile `%s` (%s); runner, scenarios, configs and baselines of `%s`\n", PROFILE_NAMES[B->P->profile],
               B->P->profile_why, harness_home());
    str_add(&s, "- each step: `git worktree add --detach`, `cmake");
    for (int i = 0; i < B->P->cmake_args.n; i++) str_printf(&s, " %s", B->P->cmake_args.v[i]);
    str_printf(&s, "`, `cmake --build --target nsa-train -j%d`, then `%s run", B->o->jobs, B->P->self);
    for (int i = 0; i < B->o->run.n; i++) str_printf(&s, " %s", B->o->run.v[i]);
    if (B->o->profile < 0) str_printf(&s, " --profile %s", PROFILE_NAMES[B->P->profile]);
    str_add(&s, " --trainer OUT/NN_SHA/nsa-train --out OUT/NN_SHA/report`; each step's nsa-train is kept in its folder "
                "(`NN_SHA/nsa-train`, built from commit SHA), so the reproduce commands in its report run as written\n");
    str_printf(&s, "- build settings from %s; ccache %s; MPI %s\n", B->P->settings_from, B->P->ccache[0] ? B->P->ccache : "not on the PATH",
               B->P->need_ranks ? "on (a selected case runs several ranks)" : "off (no selected case runs several ranks)");
    str_printf(&s, "- command `%s` · wall %s\n\n", B->command, wall);
    str_add(&s, "## Result\n\n");
    str_add(&s, result ? result : "(in progress, or interrupted: see the steps)\n");
    str_add(&s, "\n## Steps\n\n");
    step_table(B, &s);
    str_add(&s, "\n## Commits\n\n");
    for (int i = 0; i < R->n; i++) {
        const char *st = BV_NAMES[B->state[i]];
        if ((i == 0 || i == R->n - 1) && !step_of(B, i)) st = i == 0 ? "good (assumed)" : "bad (assumed)";
        str_printf(&s, "- `%s` %s — %s\n", R->c[i].shrt, R->c[i].subject, st);
    }
    char p[4200];
    snprintf(p, sizeof p, "%s/bisect.md", B->out);
    write_file_atomic(p, str_c(&s), s.len);
    str_free(&s);
}

// The outcome, printed and written: the first bad commit and its finding, or the
// candidates. rc: the search's result.
static void finish(Bisect *B, int rc) {
    const Repo *R = B->R;
    Str res = {0};
    if (rc == HARNESS_EXIT_OK) {
        const Commit *c = &R->c[B->hi];
        printf("\nfirst bad commit: %s %s\n", c->sha, c->subject);
        str_printf(&res, "**First bad commit:** `%s` %s\n\n", c->sha, c->subject);
        const Step *st = step_of(B, B->hi);
        if (st) {
            Str lines = {0}, section = {0};
            finding_of(B, st, &lines, &section);
            printf("finding (report %s/%s/report):\n%s", B->out, st->rel, str_c(&lines));
            if (section.len) printf("\n%s", str_c(&section));
            str_printf(&res, "Its report: `%s/report/`\n\n%s", st->rel, str_c(&lines));
            if (section.len) {   // its heading one level below this page's
                const char *body = section.p;
                if (!strncmp(body, "## ", 3)) body += 3;
                str_printf(&res, "\n### The first failing case's evidence: %s", body);
            }
            str_free(&lines);
            str_free(&section);
        } else {
            printf("(BAD was assumed bad and could not be judged: no finding to show)\n");
            str_add(&res, "(BAD was assumed bad and could not be judged: no finding to show)\n");
        }
    } else if (rc == HARNESS_EXIT_FAIL) {
        printf("\nthe first bad commit could not be isolated (skipped commits at the boundary);\n"
               "the first bad commit is one of:\n");
        str_add(&res, "The first bad commit could not be isolated (skipped commits at the boundary). It is one of:\n\n");
        for (int i = B->lo + 1; i <= B->hi; i++) {
            const char *why = i == B->hi ? (step_of(B, i) ? "bad" : "bad (assumed)") : BV_NAMES[B->state[i]];
            printf("  %s %s (%s)\n", R->c[i].sha, R->c[i].subject, why);
            str_printf(&res, "- `%s` %s (%s)\n", R->c[i].sha, R->c[i].subject, why);
        }
    } else if (rc == HARNESS_EXIT_INTERRUPTED) {
        printf("\nbisect interrupted\n");
        str_add(&res, "Interrupted: the search stopped; the steps so far are below.\n");
    } else if (B->why[0]) {
        printf("\nbisect stopped: %s\n", B->why);
        str_printf(&res, "Stopped (exit 2): %s.\n", B->why);
    }
    write_report(B, res.len ? str_c(&res) : NULL);
    str_free(&res);
    Str t = {0};
    step_table(B, &t);
    char wall[32];
    fmt_duration(wall, sizeof wall, mono_s() - B->t0);
    printf("\n%s\nbisect: %d step%s in %s; reports and bisect.md in %s\n", str_c(&t), B->n_steps, B->n_steps == 1 ? "" : "s",
           wall, B->out);
    if (B->o->keep)
        printf("bisect: --keep-worktrees: every step's worktree (NN_SHA/src) and build (NN_SHA/build) are in %s;\n"
               "  remove them with: git -C %s worktree remove --force %s/NN_SHA/src; rm -rf %s\n",
               B->tmp, R->top, B->tmp, B->tmp);
    str_free(&t);
}

// ---- the command ------------------------------------------------------------------------------------


// The output folder (created) and the temporary one. 0 or -1 (printed).
static int make_folders(Bisect *B) {
    char stamp[32];
    utc_stamp(stamp, sizeof stamp);
    if (B->o->out) snprintf(B->out, sizeof B->out, "%s", B->o->out);
    else snprintf(B->out, sizeof B->out, "%s/bisect_%s", harness_reports_dir(), stamp);
    if (mkdir_p(B->out)) {
        cmd_log("bisect", LOG_ERROR, "cannot create %s: %s", B->out, strerror(errno));
        return -1;
    }
    char *abs = realpath(B->out, NULL);
    if (abs) {
        snprintf(B->out, sizeof B->out, "%s", abs);
        free(abs);
    }
    const char *t = getenv("TMPDIR");
    snprintf(B->tmp, sizeof B->tmp, "%s/nsa-bisect.XXXXXX", t && t[0] ? t : "/tmp");
    if (!mkdtemp(B->tmp)) {
        cmd_log("bisect", LOG_ERROR, "cannot create a temporary folder %s: %s", B->tmp, strerror(errno));
        return -1;
    }
    return 0;
}

// Remove what is temporary: the worktree still registered (interrupted step), the
// temporary folder, and git's records of worktrees that are gone.
static void clean_up(Bisect *B) {
    remove_worktree(B, NULL);
    if (B->o->keep) return;   // finish() says where they are
    rm_rf(B->tmp);
    char *out = NULL;
    const char *prune[] = {"worktree", "prune", NULL};
    git_capture(B->R, NULL, prune, &out);
    free(out);
}

int cmd_bisect(int argc, char **argv) {
    Opts o;
    int prc = parse_options(argc, argv, &o);
    if (prc) return prc > 0 ? HARNESS_EXIT_OK : HARNESS_EXIT_USAGE;
    Repo R;
    if (load_revisions(&o, &R)) return HARNESS_EXIT_USAGE;
    Plan P;
    memset(&P, 0, sizeof P);
    self_paths(&P);
    decide_profile(&o, &P);
    if (check_scenarios(&o, &P) || plan_build(&P) || check_inputs(&o, &P)) return HARNESS_EXIT_USAGE;

    Bisect B;
    memset(&B, 0, sizeof B);
    B.o = &o;
    B.R = &R;
    B.P = &P;
    B.t0 = mono_s();
    utc_iso(B.started, sizeof B.started);
    {
        Str c = {0};
        str_add(&c, "nsa-harness bisect");
        for (int i = 0; i < argc; i++) str_printf(&c, " %s", argv[i]);
        snprintf(B.command, sizeof B.command, "%s", str_c(&c));
        str_free(&c);
    }
    B.state = xcalloc((size_t)R.n, sizeof(int));
    B.state[0] = BV_GOOD;
    B.state[R.n - 1] = BV_BAD;
    B.lo = 0;
    B.hi = R.n - 1;
    proc_on_interrupt(on_signal);
    if (make_folders(&B)) return HARNESS_EXIT_USAGE;
    plan_ccache_env(&P, B.tmp);

    printf("bisect: %d commit%s after %s (good) up to %s (bad) in %s; %s\n", R.n - 1, R.n == 2 ? "" : "s", R.c[0].shrt,
           R.c[R.n - 1].shrt, R.top,
           o.verify ? "GOOD and BAD are tested first (--no-verify: assumed)" : "GOOD assumed good, BAD assumed bad (--no-verify)");
    fputs(str_c(&P.inputs_line), stdout);
    printf("bisect: profile %s (%s); MPI %s; ccache %s; output %s\n", PROFILE_NAMES[P.profile], P.profile_why,
           P.need_ranks ? "on" : "off", P.ccache[0] ? "on" : "off (not on the PATH)", B.out);
    fflush(stdout);
    write_report(&B, NULL);

    int rc = o.verify ? verify_ends(&B) : HARNESS_EXIT_OK;
    if (rc == HARNESS_EXIT_OK) rc = search(&B);
    // the first bad commit's finding needs its report: BAD itself may not have run yet
    if (rc == HARNESS_EXIT_OK && !step_of(&B, B.hi) && !g_stop) {
        if (run_step(&B, B.hi, "finding") == -2) rc = -2;
        else {
            const Step *st = &B.steps[B.n_steps - 1];
            if (st->verdict == BV_STOP) rc = HARNESS_EXIT_INTERRUPTED;
            else if (st->verdict == BV_GOOD) {
                cmd_log("bisect", LOG_ERROR, "--bad %s tested good: no commit of the range fails (report %s/%s/report)", R.c[B.hi].shrt,
                        B.out, st->rel);
                snprintf(B.why, sizeof B.why, "--bad `%s` tested good: no commit of the range fails (report `%s/report/`)", R.c[B.hi].shrt,
                         st->rel);
                rc = HARNESS_EXIT_USAGE;
            }
        }
    }
    if (g_stop) rc = HARNESS_EXIT_INTERRUPTED;
    if (rc == -2) rc = HARNESS_EXIT_USAGE;
    clean_up(&B);
    finish(&B, rc);
    return rc;
}
