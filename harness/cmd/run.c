// harness/cmd/run.c — `nsa-harness run [SCENARIO...] [options]`: load and plan the scenarios,
// check the trainers, open the report folder, run the cases (harness/exec/run_cases.h) and
// write the reports after each.
//
// Exit codes (DESIGN 7): 0 every case passed (or was skipped); 1 a case FAIL,
// HANG or CRASH; 2 usage error, invalid scenario, or a case the trainer could not
// start (ERROR); 125 with --bisect instead of 2 (git bisect run: "skip this
// commit"); 130 interrupted (SIGINT/SIGTERM), which also makes git bisect stop.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/cmd/commands.h"
#include "harness/cmd/options.h"
#include "harness/core/home.h"
#include "harness/core/check.h"
#include "harness/core/counts.h"
#include "harness/report/outdir.h"
#include "harness/exec/proc.h"
#include "harness/exec/run_cases.h"
#include "harness/exec/schedule.h"
#include "harness/core/scenario_load.h"
#include "harness/exec/trainer_caps.h"
#include "common/exit_codes.h"
#include "common/jsonutil.h"
#include "common/log.h"

static const CmdOption RUN_ROWS[] = {
    {NULL, NULL, 0, 0, "usage: nsa-harness run [SCENARIO...] [options]\n\noptions:\n"},
    CMD_OPT_PROFILE,
    {"out", "DIR", OPT_OUT, 0, "report directory (default: <home>/reports/<UTC time>_<short sha>)"},
    {"filter", "GLOB", OPT_FILTER, 0,
     "run only cases whose name, scenario/case or scenario matches GLOB (fnmatch; without * ? [ a substring "
     "match); repeatable (any matches)"},
    {"case", "SCENARIO/CASE", OPT_CASE, 0,
     "run exactly this case (no pattern); repeatable, with --filter: either selects"},
    {"fault", "NAME[=ARG]", OPT_FAULT, 0,
     "inject a trainer fault into every case (nsa-train --list-faults); repeatable; a case whose trainer does not "
     "list it is a SKIP"},
    {"set", "KEY=VALUE", OPT_SET, 0,
     "a config override added to every case after the scenario's own (e.g. --set train.seed=7); repeatable"},
    {"timeout-scale", "X", OPT_TIMEOUT_SCALE, 0,
     "multiply every case's timeout_s and stall_s by X, a number with\n0 < X <= 1000 (default 1)"},
    {"trainer", "PATH", OPT_TRAINER, 0,
     "the nsa-train executable (default: the one beside nsa-harness); it gets --config FILE --set KEY=VALUE... "
     "(docs/trainer-protocol.md)"},
    {"trainer-cmd", "\"CMD\"", OPT_TRAINER_CMD, 0,
     "run another trainer: CMD is split into words as a shell would ('...', \"...\", no expansion; relative paths "
     "that exist are made absolute) and each case runs CMD... --config CASE/config.json --out CASE --rank R ... "
     "(the resolved config, no --set); not with --trainer. A scenario may name trainers itself (run.trainers, "
     "run.trainer, a matrix over run.trainer); \"nsa-train\" there is this run's default (--trainer, "
     "--trainer-cmd, --trainer-map)"},
    {"trainer-map", "MAP", OPT_TRAINER_MAP, 0,
     "run an unmodified PyTorch script through the probe (docs/trainer-maps.md): the trainer is the command PROBE "
     "--map MAP (PROBE: $NSA_PROBE, default <home>/probe/nsa-probe); the map is checked first (PROBE "
     "--check-map); where the probe cannot run (no torch) its cases are a SKIP saying why; not with --trainer or "
     "--trainer-cmd"},
    {"baselines", "DIR", OPT_BASELINES, 0,
     "golden baselines and performance floors to compare with (checks golden and perf_floor; default: "
     "<home>/golden/baselines)"},
    {"recording", NULL, OPT_RECORDING, 0, "what `baseline record` runs: golden and perf_floor compare nothing"},
    {"bisect", NULL, OPT_BISECT, 0, "for git bisect run: exit 125 (skip) where it would exit 2"},
    {"jobs", "N|auto", OPT_JOBS, 'j',
     "run up to N independent cases at a time (default 1); auto: --cases-per-gpu a GPU for the gpu profile on a "
     "GPU machine, else one per core. A case holds as many GPUs as it has ranks (CUDA_VISIBLE_DEVICES), its ranks "
     "share the cores (OMP_NUM_THREADS), a case waits for the cases it compares with, and timing-sensitive cases "
     "(perf floors, step-time growth, hang latency) run last, one at a time. Reports keep the plan's order"},
    {"cases-per-gpu", "N|auto", OPT_CASES_PER_GPU, 0,
     "cases that may share one GPU; auto (the default): one per 24 GiB of the smallest GPU's memory, 1 to 4 "
     "(80 GB H100: 3; H200: 4; 40 GB: 1)"},
    {"quiet", NULL, OPT_QUIET, 0, "no progress lines"},
    CMD_OPT_HELP,
    {NULL, NULL, 0, 0,
     "\n"
     "Every case writes <out>/<scenario>/<case>/: output.log env.json metrics.jsonl\n"
     "grad_trace.jsonl gate_stats.jsonl ranks/rank_R.log ranks/rank_R.fr (or ranks/rank_R.hb, a\n"
     "trainer's heartbeat file) stacks/rank_R.txt; config.json for a trainer given as a command.\n"},
};
const CmdOptions CMD_RUN_OPTIONS = {"run", "run", RUN_ROWS, (int)(sizeof RUN_ROWS / sizeof RUN_ROWS[0]), NULL};

void usage_run(FILE *f) { cmd_options_help(&CMD_RUN_OPTIONS, f); }

static volatile sig_atomic_t g_interrupted = 0;
static void on_signal(int sig) {
    (void)sig;
    g_interrupted = 1;
}

// ---- environment probes ----------------------------------------------------------------------

static void self_dir(char *out, size_t n) {
    char exe[4096];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l <= 0) {
        snprintf(out, n, ".");
        return;
    }
    exe[l] = '\0';
    path_dirname(exe, out, n);
}

// git sha (short) and dirty flag of the source tree at run time; 0 or -1 (not a git work tree
// of its own: the build's commit stands in).
static int git_state(char *sha, size_t n, int *dirty) {
    const char *head[] = {"rev-parse", "--short=7", "HEAD", NULL};
    char *out = cmd_source_git(head);
    if (!out || !out[0]) {
        free(out);
        return -1;
    }
    snprintf(sha, n, "%s", out);
    free(out);
    const char *status[] = {"status", "--porcelain", "--untracked-files=no", NULL};
    out = cmd_source_git(status);
    *dirty = out && out[0] != '\0';
    free(out);
    return 0;
}

// Everything `run`'s options and its trainer say, as cmd_run's stages pass it on.
typedef struct {
    int profile, bisect, quiet, recording;
    const char *out_dir, *trainer_arg, *trainer_cmd_arg, *trainer_map_arg, *baselines;
    Str shaping;   // the options that shaped the cases' configs and baselines (--set,
                   // --baselines, --trainer-map), for record commands
    Str replay;    // every option that shaped a case (also --timeout-scale, --trainer,
                   // --fault), for reproduce commands
    double scale;
    StrList files_in, filters, exact, faults, sets;
    int usage_rc;  // what "could not run" exits with: 2, or 125 under --bisect (git bisect's skip)
    char trainer[4200], harness[4200];
    char map[4200];          // --trainer-map's map, absolute ("" without it)
    char own[4200];          // the nsa-train beside nsa-harness (shared start weights, the fault vocabulary)
    TrainerSpec tdefault;    // the run's default trainer ("nsa-train"): the sibling, --trainer, --trainer-cmd
                             // or --trainer-map
    StrList cmd_words;       // --trainer-cmd's words, paths made absolute
    Str cmd_line;            // the same as a shell line (nested runs, reproduce commands)
    const TrainerSpec *used[64];   // every trainer the selected cases run (the default first)
    int n_used;
    json_t *env;   // the trainer's --print-env
    int gpus;
    int jobs;            // -j: cases at a time (0: auto, the machine's GPUs or cores)
    int cases_per_gpu;   // --cases-per-gpu
} RunOpts;

enum { GO_ON = -1 };   // a stage's "not done yet": cmd_run continues; any other value is the exit code

// "FLAG VALUE" added to a command line kept as shell words (reproduce and record commands)
static void add_words(Str *line, const char *flag, const char *v) {
    char *const words[] = {(char *)flag, (char *)v, NULL};
    if (line->len) str_add(line, " ");
    shell_join(line, words);
}

// a whole number from lo to hi, or "auto" (0); -1 for anything else
static long auto_or_count(const char *v, long lo, long hi) {
    if (!strcmp(v, "auto")) return 0;
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    return errno || !end || *end || end == v || n < lo || n > hi ? -1 : n;
}

// --trainer-cmd's value: its words, paths made absolute, and its shell line
static int apply_trainer_cmd(RunOpts *O, const char *v) {
    char err[200] = "";
    strlist_free(&O->cmd_words);
    if (trainer_split_words(v, &O->cmd_words, err, sizeof err) || O->cmd_words.n == 0) {
        cmd_log("run", LOG_ERROR, "--trainer-cmd '%s': %s", v,
                err[0] ? err : "expected a command (e.g. --trainer-cmd \"python3 my_trainer.py\")");
        return HARNESS_EXIT_USAGE;
    }
    char cwd[4096];
    if (getcwd(cwd, sizeof cwd)) trainer_absolutize(&O->cmd_words, cwd, 1);
    O->trainer_cmd_arg = v;
    str_free(&O->cmd_line);
    shell_join(&O->cmd_line, O->cmd_words.v);
    add_words(&O->replay, "--trainer-cmd", str_c(&O->cmd_line));
    return GO_ON;
}

// One option of run's table (RUN_ROWS) with its value v, or a SCENARIO (OPT_WORD). GO_ON, or
// the exit code of a bad value (said).
static int apply_run_option(void *ctx, int id, const char *flag, const char *v) {
    RunOpts *O = ctx;
    long n;
    switch (id) {
    case OPT_WORD: strlist_add(&O->files_in, v); break;
    case OPT_PROFILE:
        if ((O->profile = cmd_parse_profile(v)) < 0) {
            cmd_log("run", LOG_ERROR, "--profile %s: expected ci or gpu", v);
            return HARNESS_EXIT_USAGE;
        }
        break;
    case OPT_JOBS:
        if ((n = auto_or_count(v, 1, 1024)) < 0) {
            cmd_log("run", LOG_ERROR, "%s %s: expected auto or a whole number from 1 to 1024", flag, v);
            return HARNESS_EXIT_USAGE;
        }
        O->jobs = (int)n;
        break;
    case OPT_CASES_PER_GPU:
        if ((n = auto_or_count(v, 1, 64)) < 0) {
            cmd_log("run", LOG_ERROR, "--cases-per-gpu %s: expected auto or a whole number from 1 to 64", v);
            return HARNESS_EXIT_USAGE;
        }
        O->cases_per_gpu = (int)n;
        break;
    case OPT_OUT: O->out_dir = v; break;
    case OPT_FILTER: strlist_add(&O->filters, v); break;
    case OPT_CASE:
        if (!strchr(v, '/')) {
            cmd_log("run", LOG_ERROR, "--case '%s': expected SCENARIO/CASE (e.g. perf/batch=1)", v);
            return HARNESS_EXIT_USAGE;
        }
        strlist_add(&O->exact, v);
        break;
    case OPT_FAULT:
        if (!v[0] || v[0] == '=') {
            cmd_log("run", LOG_ERROR, "--fault '%s': expected NAME or NAME=ARG", v);
            return HARNESS_EXIT_USAGE;
        }
        strlist_add(&O->faults, v);
        add_words(&O->replay, flag, v);
        break;
    case OPT_SET: {
        const char *eq = strchr(v, '=');
        if (!eq || eq == v || !memchr(v, '.', (size_t)(eq - v))) {
            cmd_log("run", LOG_ERROR, "--set '%s': expected section.key=value (e.g. --set train.seed=7)", v);
            return HARNESS_EXIT_USAGE;
        }
        strlist_add(&O->sets, v);
        add_words(&O->shaping, flag, v);
        add_words(&O->replay, flag, v);
        break;
    }
    case OPT_BASELINES:
        if (!v[0]) {
            cmd_log("run", LOG_ERROR, "--baselines '': expected a folder");
            return HARNESS_EXIT_USAGE;
        }
        O->baselines = v;
        add_words(&O->shaping, flag, v);
        add_words(&O->replay, flag, v);
        break;
    case OPT_RECORDING: O->recording = 1; break;
    case OPT_TIMEOUT_SCALE: {
        char *end = NULL;
        O->scale = strtod(v, &end);
        if (!end || *end || !(O->scale > 0) || O->scale > 1000) {
            cmd_log("run", LOG_ERROR, "--timeout-scale %s: expected a number > 0 (at most 1000)", v);
            return HARNESS_EXIT_USAGE;
        }
        add_words(&O->replay, flag, v);
        break;
    }
    case OPT_TRAINER:
        O->trainer_arg = v;
        add_words(&O->replay, flag, v);
        break;
    case OPT_TRAINER_CMD: return apply_trainer_cmd(O, v);
    case OPT_TRAINER_MAP: O->trainer_map_arg = v; break;
    case OPT_BISECT: O->bisect = 1; break;
    case OPT_QUIET: O->quiet = 1; break;
    default: break;   // (no other row in RUN_ROWS)
    }
    return GO_ON;
}

// What the options say together: one trainer, the map's path, NSA_HARNESS_CPUS. GO_ON or 2.
static int run_check_options(RunOpts *O) {
    O->usage_rc = O->bisect ? HARNESS_EXIT_BISECT_SKIP : HARNESS_EXIT_USAGE;
    if (O->trainer_arg && O->trainer_cmd_arg) {
        cmd_log("run", LOG_ERROR, "--trainer %s and --trainer-cmd '%s': give one (--trainer: an nsa-train-like "
                                  "executable; --trainer-cmd: a command speaking docs/trainer-protocol.md)",
                O->trainer_arg, O->trainer_cmd_arg);
        return HARNESS_EXIT_USAGE;
    }
    if (O->trainer_map_arg && (O->trainer_arg || O->trainer_cmd_arg)) {
        cmd_log("run", LOG_ERROR, "--trainer-map %s and %s %s: give one (--trainer-map: a PyTorch script "
                                  "through the probe, docs/trainer-maps.md)", O->trainer_map_arg,
                O->trainer_arg ? "--trainer" : "--trainer-cmd", O->trainer_arg ? O->trainer_arg : O->trainer_cmd_arg);
        return HARNESS_EXIT_USAGE;
    }
    if (O->trainer_map_arg) {   // the map's absolute path: nested runs and other folders work
        if (trainer_map_path(".", O->trainer_map_arg, O->map, sizeof O->map)) {
            cmd_log("run", LOG_ERROR, "--trainer-map %s: %s", O->trainer_map_arg,
                    is_dir(O->trainer_map_arg) ? "a folder, not a trainer map file" : "no such file (docs/trainer-maps.md)");
            return HARNESS_EXIT_USAGE;
        }
        add_words(&O->replay, "--trainer-map", O->map);
        // a map trainer's baselines are recorded through its map too: record commands name it
        add_words(&O->shaping, "--trainer-map", O->map);
    }
    const char *hc = getenv("NSA_HARNESS_CPUS");   // the cores cases side by side divide (schedule.h)
    if (hc && hc[0]) {
        char *end = NULL;
        errno = 0;
        const long n = strtol(hc, &end, 10);
        if (errno || !end || *end || n < 1 || n > 4096) {
            cmd_log("run", LOG_ERROR, "NSA_HARNESS_CPUS=%s: expected a whole number from 1 to 4096", hc);
            return HARNESS_EXIT_USAGE;
        }
    }
    return GO_ON;
}

// run's options, in order. Returns GO_ON, or the exit code of --help and of a bad option.
static int run_parse_options(int argc, char **argv, RunOpts *O) {
    int rc = cmd_options_parse(&CMD_RUN_OPTIONS, argc, argv, apply_run_option, NULL, O);
    return rc != CMD_GO_ON ? rc : run_check_options(O);
}

// A nested run's trainer environment, asked once per outer run. The selftest family runs
// every detection as a nested `nsa-harness run` with the same trainer (harness/families/selftest.c),
// and each asked the trainer's --print-env again: a torch import (~1.3 s) per detection for
// the PyTorch trainer, a CUDA build's start for nsa-train. The outer run names a folder of
// its own in NSA_HARNESS_ENV_CACHE: the first nested run keeps its trainer's answer there,
// under the trainer's command line and CUDA_VISIBLE_DEVICES, and the later ones read it. Only an answer that is a
// JSON object is kept: a trainer that cannot answer is asked again by every run.
static void env_cache_file(const TrainerSpec *t, char *out, size_t n) {
    const char *dir = getenv("NSA_HARNESS_ENV_CACHE");
    out[0] = '\0';
    if (!dir || dir[0] != '/' || !t->display) return;
    unsigned long long h = 1469598103934665603ULL;   // FNV-1a of the command line
    for (const char *p = t->display; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    // and of the GPUs it may see: a nested run of a case that holds two of four GPUs
    // (run -j) must not read the devices an outer run's trainer saw
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    h = (h ^ 0xffu) * 1099511628211ULL;
    for (const char *p = vis ? vis : "(unset)"; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    snprintf(out, n, "%s/%016llx_%d.json", dir, h, t->is_cmd);
}

// `T... --print-env`: its JSON object, or NULL (quiet: nothing said, else the reason on stderr).
static json_t *trainer_print_env(const TrainerSpec *t, int quiet) {
    char cache[4200];
    env_cache_file(t, cache, sizeof cache);
    if (cache[0]) {
        json_t *kept = json_load_path(cache, 0, NULL);
        if (json_is_object(kept)) return kept;
        json_decref(kept);
    }
    StrList av = {0};
    trainer_spec_argv(t, &av);
    strlist_add(&av, "--print-env");
    char *env_text = NULL;
    int prc = proc_capture(av.v, 120, &env_text);
    strlist_free(&av);
    json_t *env = prc == 0 ? json_loads(env_text, 0, NULL) : NULL;
    const int printed = env_text && env_text[0];
    free(env_text);
    if (env && json_is_object(env)) {
        if (cache[0]) {   // written whole, then renamed: a sibling never reads half of it
            char tmp[4300];
            snprintf(tmp, sizeof tmp, "%s.%d.tmp", cache, (int)getpid());
            if (json_dump_file(env, tmp, JSON_COMPACT) == 0) {
                if (rename(tmp, cache) != 0) unlink(tmp);
            } else unlink(tmp);
        }
        return env;
    }
    json_decref(env);
    if (quiet) return NULL;
    // (the run's default trainer: a scenario's asks quietly and SKIPs its cases)
    const char *which = t->is_cmd ? "--trainer-cmd" : "--trainer";
    if (prc == 0)
        cmd_log("run", LOG_ERROR, "the trainer %s printed %s for --print-env, not its JSON environment "
                                  "(docs/trainer-protocol.md; see %s)", t->display, printed ? "something else" : "nothing", which);
    else
        cmd_log("run", LOG_ERROR, "`%s --print-env` failed (%s %d): is the trainer built and runnable (see %s)?",
                t->display, prc > 0 && WIFSIGNALED(prc) ? "signal" : "exit status",
                prc > 0 ? (WIFSIGNALED(prc) ? WTERMSIG(prc) : WEXITSTATUS(prc)) : prc, which);
    return NULL;
}

// Why a scenario's trainer cannot run here, for its cases' SKIP: its --print-env again, with
// its stderr, whose first line says what is missing ("no python with torch: apt-get install ...").
static void trainer_unusable_reason(const TrainerSpec *t, char *why, size_t n) {
    StrList av = {0};
    trainer_spec_argv(t, &av);
    strlist_add(&av, "--print-env");
    char *out = NULL;
    int rc = proc_capture_all(av.v, 120, &out);
    strlist_free(&av);
    const char *line = out ? out + strspn(out, " \t\n") : "";
    snprintf(why, n, "the trainer %s cannot run here: `%s --print-env` %s %d%s%.*s", trainer_spec_label(t), t->display,
             rc > 0 && WIFSIGNALED(rc) ? "got signal" : rc == -2 ? "timed out" : "exited",
             rc > 0 ? (WIFSIGNALED(rc) ? WTERMSIG(rc) : WEXITSTATUS(rc)) : rc, line[0] ? ": " : "",
             (int)strcspn(line, "\n"), line);
    free(out);
}

// A map trainer's map, checked by its probe before any case (trainer_caps_check_map): 0, or
// -1 with the probe's lines (MAP:line:col: message) and why on stderr.
static int check_trainer_map(const TrainerSpec *t, const char *what) {
    Str lines = {0};
    char why[1200];
    const int bad = trainer_caps_check_map(t, &lines, why, sizeof why);
    if (bad) {
        fputs(str_c(&lines), stderr);
        cmd_log("run", LOG_ERROR, "%s %s: %s", what, t->map, why);
    }
    str_free(&lines);
    return bad;
}

// The run's default trainer given by a map (--trainer-map) whose --print-env fails (no python
// with torch here): its cases are a SKIP quoting why, as a scenario's trainer's are, so a
// machine without torch shows them. The report's device line and the default profile then
// come from the runner's own nsa-train (or nothing). Returns the run's environment object.
static json_t *default_trainer_unusable(RunOpts *O) {
    char why[700];
    trainer_unusable_reason(&O->tdefault, why, sizeof why);
    cmd_log("run", LOG_STATUS, "%s: its cases are skipped", why);
    trainer_caps_mark_unusable(&O->tdefault, why);
    json_t *env = NULL;
    if (access(O->own, X_OK) == 0) {
        char *const w[] = {O->own, NULL};
        TrainerSpec own;
        trainer_spec_init(&own, "nsa-train", w, 0);
        env = trainer_print_env(&own, 1);
        trainer_spec_free(&own);
    }
    if (!env) env = json_object();
    json_object_set_new(env, "trainer_cannot_run",
                        json_sprintf("%s (this environment is the runner's own nsa-train's, if any)", why));
    return env;
}

// The run's default trainer: an executable that prints its JSON environment (it knows the
// build, CUDA devices, versions). Sets O->env, O->gpus and the profile when none was given.
// A trainer given by a map: its map is checked first (exit 2 when the probe rejects it).
// Returns GO_ON or the exit code.
static int run_check_trainer(RunOpts *O) {
    char here[4096];
    self_dir(here, sizeof here);
    snprintf(O->harness, sizeof O->harness, "%s/nsa-harness", here);
    snprintf(O->own, sizeof O->own, "%s/nsa-train", here);
    if (O->map[0]) {
        trainer_spec_init_map(&O->tdefault, "nsa-train", O->map);
        snprintf(O->trainer, sizeof O->trainer, "%s", path_basename(O->map));   // its report name
        if (check_trainer_map(&O->tdefault, "--trainer-map")) return O->usage_rc;
    } else if (O->trainer_cmd_arg) {
        snprintf(O->trainer, sizeof O->trainer, "%s", str_c(&O->cmd_line));
        trainer_spec_init(&O->tdefault, "nsa-train", O->cmd_words.v, 1);
    } else {
        if (O->trainer_arg) snprintf(O->trainer, sizeof O->trainer, "%s", O->trainer_arg);
        else snprintf(O->trainer, sizeof O->trainer, "%s/nsa-train", here);
        if (access(O->trainer, X_OK) != 0) {
            nsa_log(LOG_ERROR, "the trainer %s is not an executable: %s (build it, or pass --trainer PATH)",
                    O->trainer, strerror(errno));
            return O->usage_rc;
        }
        char *const w[] = {O->trainer, NULL};
        trainer_spec_init(&O->tdefault, "nsa-train", w, 0);
    }
    json_t *env = trainer_print_env(&O->tdefault, O->map[0] != 0);
    const int unusable = !env && O->map[0];
    if (unusable) env = default_trainer_unusable(O);
    if (!env) return O->usage_rc;
    O->env = env;
    // the protocol handshake (docs/trainer-protocol.md): asked once per trainer; a case needing
    // a feature its trainer does not list is a SKIP naming it (runner.c)
    const TrainerCaps *caps = trainer_caps_of(&O->tdefault);
    if (!unusable) trainer_caps_set_env(&O->tdefault, env);
    if (caps->bad_answer)
        cmd_log("run", LOG_WARN, "the trainer %s: %s", O->trainer, caps->note);
    O->used[O->n_used++] = &O->tdefault;
    O->gpus = (int)json_array_size(json_object_get(json_object_get(env, "cuda"), "devices"));
    if (O->profile < 0) O->profile = O->gpus > 0 ? PROFILE_GPU : PROFILE_CI;
    return GO_ON;
}

// `T... --fault VALUE --list-faults`: 0, or -1 with the trainer's complaint on stderr.
static int trainer_accepts_fault(const RunOpts *O, const TrainerSpec *t, const char *fault) {
    StrList av = {0};
    trainer_spec_argv(t, &av);
    strlist_add(&av, "--fault");
    strlist_add(&av, fault);
    strlist_add(&av, "--list-faults");
    char *fout = NULL;
    int frc = proc_capture_all(av.v, 60, &fout);
    strlist_free(&av);
    if (frc == 0) {
        free(fout);
        return 0;
    }
    char *line = fout ? strstr(fout, "nsa-train: ") : NULL;
    if (line) line += 11;
    else if (fout && fout[strspn(fout, " \t\n")]) line = fout + strspn(fout, " \t\n");
    if (line) line[strcspn(line, "\n")] = '\0';
    cmd_log("run", LOG_ERROR, "--fault %s: %s%s%s%s", fault,
            line ? line : "the trainer rejects it (nsa-train --list-faults lists the faults)",
            t == &O->tdefault ? "" : " (trainer ", t == &O->tdefault ? "" : t->name, t == &O->tdefault ? "" : ")");
    free(fout);
    return -1;
}

// Every trainer the selected cases run (a scenario's run.trainers): its map when it has one
// (the probe's --check-map: exit 2 when rejected), its --print-env and its handshake, once
// each; then every --fault, checked by each trainer that lists it (a trainer without it SKIPs
// the cases), or by the runner's own nsa-train when none does (a misspelt fault is exit 2
// before any case). Returns GO_ON or the exit code.
static int run_check_trainers(RunOpts *O, const Report *rp) {
    for (int i = 0; i < rp->n_runs; i++) {
        const Scenario *s = rp->runs[i].s;
        for (int c = 0; c < s->n_cases; c++) {
            if (!case_selected(&O->filters, &O->exact, s->name, s->cases[c].name) && !is_reference_case(s, s->cases[c].name))
                continue;
            const char *name = s->cases[c].run.trainer;
            const TrainerSpec *t = name[0] && strcmp(name, "nsa-train") ? scenario_trainer(s, name) : NULL;
            if (!t) continue;
            int seen = 0;
            for (int u = 0; u < O->n_used; u++) seen |= !strcmp(O->used[u]->display, t->display);
            if (seen || O->n_used == (int)(sizeof O->used / sizeof O->used[0])) continue;
            if (t->map) {   // its map, checked by the probe before any case
                char what[1200];
                snprintf(what, sizeof what, "%s: run.trainers.%s", s->path, t->name);
                if (check_trainer_map(t, what)) return O->usage_rc;
            }
            json_t *env = trainer_print_env(t, 1);
            if (!env) {   // not usable here (the PyTorch adapter without torch): its cases SKIP saying why
                char why[700];
                trainer_unusable_reason(t, why, sizeof why);
                cmd_log("run", LOG_STATUS, "%s: the cases of %s that it runs are skipped", why, s->path);
                trainer_caps_mark_unusable(t, why);
                O->used[O->n_used++] = t;
                continue;
            }
            trainer_caps_set_env(t, env);
            json_decref(env);
            const TrainerCaps *caps = trainer_caps_of(t);
            if (caps->bad_answer)
                cmd_log("run", LOG_WARN, "the trainer %s (%s): %s", t->name, t->display, caps->note);
            O->used[O->n_used++] = t;
        }
    }
    for (int f = 0; f < O->faults.n; f++) {
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(O->faults.v[f], "="), O->faults.v[f]);
        int checked = 0;
        for (int u = 0; u < O->n_used; u++) {
            const TrainerCaps *tc = trainer_caps_of(O->used[u]);
            if (tc->unusable[0] || !trainer_caps_has(tc, "faults", name)) continue;   // its cases SKIP
            checked = 1;
            if (trainer_accepts_fault(O, O->used[u], O->faults.v[f])) return O->usage_rc;
        }
        if (checked) continue;
        // no trainer of the run lists it: nsa-train's parser says whether it exists at all
        if (access(O->own, X_OK) != 0) {
            cmd_log("run", LOG_ERROR, "--fault %s: no trainer of the run lists it in --protocol-info", O->faults.v[f]);
            return O->usage_rc;
        }
        char *const w[] = {O->own, NULL};
        TrainerSpec own;
        trainer_spec_init(&own, "nsa-train", w, 0);
        const int bad = trainer_accepts_fault(O, &own, O->faults.v[f]);
        trainer_spec_free(&own);
        if (bad) return O->usage_rc;
    }
    return GO_ON;
}

// The plan of one valid scenario: the cases the filters select, plus the reference cases
// they compare with (each its own: the closest match of the check's glob, not every case
// the glob matches); references run first. A family that creates its cases while it runs
// counts one case per base.
// A case whose matrix value its axis lists in "if_supported" (docs/scenarios.md "matrix"),
// when its trainer does not list that value in --protocol-info: not part of the run (no
// SKIP). 1 with why filled ("need transport 'gloo', which nsa-train does not support").
static int case_left_out(const RunOpts *O, const Scenario *s, const Case *c, char *why, size_t n) {
    if (!c->if_feature[0]) return 0;
    const char *name = c->run.trainer;
    const TrainerSpec *t = name[0] && strcmp(name, "nsa-train") ? scenario_trainer(s, name) : NULL;
    if (!t) t = &O->tdefault;
    const TrainerCaps *tc = trainer_caps_of(t);
    if (trainer_caps_has(tc, c->if_feature, c->if_value)) return 0;
    const char *self = json_string_value(json_object_get(tc->info, "trainer"));
    snprintf(why, n, "need %s '%s', which the trainer (%.60s) does not support (--protocol-info)", c->if_what,
             c->if_value, self ? self : t->name);
    return 1;
}

static void run_plan_scenario(const RunOpts *O, Report *rp, ScenarioRun *sr) {
    const Scenario *s = sr->s;
    const StrList *filters = &O->filters, *exact = &O->exact;
    sr->cap = s->n_cases + 16;
    sr->results = xcalloc((size_t)sr->cap, sizeof(CaseResult));
    char *take = xcalloc((size_t)s->n_cases + 1, 1);
    for (int c = 0; c < s->n_cases; c++) {
        take[c] = case_selected(filters, exact, s->name, s->cases[c].name);
    }
    for (int c = 0; c < s->n_cases; c++)
        if (!take[c] && (filters->n || exact->n) && is_reference_case(s, s->cases[c].name))
            for (int o = 0; o < s->n_cases; o++) take[c] |= take[o] && o != c && is_reference_of(s, c, o);
    for (int c = 0; c < s->n_cases; c++)
        if (take[c] && case_left_out(O, s, &s->cases[c], sr->left_out_why, sizeof sr->left_out_why)) {
            take[c] = 0;
            sr->n_left_out++;
        }
    const FamilyDef *fam = family_find(s->family);
    int bases = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int c = 0; c < s->n_cases; c++) {
            if (!take[c] || is_reference_case(s, s->cases[c].name) != (pass == 0)) continue;
            if (fam->execute) {   // the family creates its cases while it runs
                bases++;
                continue;
            }
            CaseResult *r = &sr->results[sr->n++];
            result_init(r, s, &s->cases[c]);
            r->is_reference = is_reference_case(s, s->cases[c].name);
            r->verdict = V_SKIP;
            snprintf(r->summary, sizeof r->summary, "not run yet");
            snprintf(r->rel_dir, sizeof r->rel_dir, "%s/%s", s->name, s->cases[c].dir);
        }
    free(take);
    if (fam->execute) rp->total += bases;   // at least one case per base; more as it runs
    sr->planned_bases = bases;
    if (!s->has_profile[O->profile] && filters->n == 0 && exact->n == 0) {
        // a scenario without this profile: say so rather than silently run nothing
        int other = -1;
        for (int p = 0; p < PROFILE_COUNT; p++)
            if (p != O->profile && s->has_profile[p]) other = p;
        nsa_log(LOG_STATUS, "%s has no '%s' profile: not part of this run%s%s%s", s->path,
                PROFILE_NAMES[O->profile], other >= 0 ? " (--profile " : "", other >= 0 ? PROFILE_NAMES[other] : "",
                other >= 0 ? " runs it)" : "");
    }
    rp->total += sr->n;
}

// Load every scenario: the valid ones are planned and run, the invalid ones are reported
// as ERROR. Returns GO_ON or the exit code.
static int run_load_scenarios(const RunOpts *O, Report *rp) {
    StrList files = {0};
    if (cmd_collect_scenarios(&files, O->files_in.v, O->files_in.n)) return O->usage_rc;
    if (files.n == 0) {
        nsa_log(LOG_ERROR, "no scenario files found");
        return O->usage_rc;
    }
    rp->profile = PROFILE_NAMES[O->profile];
    Scenario *scen = xcalloc((size_t)files.n, sizeof(Scenario));
    rp->runs = xcalloc((size_t)files.n, sizeof(ScenarioRun));
    rp->invalid = xcalloc((size_t)files.n, sizeof(InvalidScenario));
    for (int i = 0; i < files.n; i++) {
        Problems ps = {0};
        Scenario *s = &scen[rp->n_runs];
        if (scenario_load(s, files.v[i], O->profile, 0, (const char *const *)O->sets.v, O->sets.n, &ps) == 0) {
            for (int k = 0; k < rp->n_runs; k++)
                if (!strcmp(rp->runs[k].s->name, s->name))
                    problems_add(&ps, 0, 0, "%s: scenario name '%s' is already used by %s", files.v[i], s->name,
                                 rp->runs[k].s->path);
        }
        if (ps.n) {
            if (s->root) scenario_free(s);
            InvalidScenario *iv = &rp->invalid[rp->n_invalid++];
            snprintf(iv->file, sizeof iv->file, "%s", files.v[i]);
            iv->problems = cmd_problems_text(&ps);
            fputs(iv->problems, stderr);
            problems_free(&ps);
            continue;
        }
        ScenarioRun *sr = &rp->runs[rp->n_runs++];
        sr->s = s;
        run_plan_scenario(O, rp, sr);
    }
    if ((O->filters.n || O->exact.n) && rp->total == 0 && rp->n_invalid == 0) {
        nsa_log(LOG_ERROR, "no case matches the --filter pattern(s) or --case name(s)");
        return O->usage_rc;
    }
    return GO_ON;
}

// The report's one-line device summary, from the trainer's environment.
static void run_describe_device(const RunOpts *O, Report *rp) {
    const json_t *env = O->env, *cuda = json_object_get(env, "cuda");
    if (O->gpus > 0) {
        const json_t *d0 = json_array_get(json_object_get(cuda, "devices"), 0);
        snprintf(rp->device, sizeof rp->device, "%d× %s · CUDA %s / driver %s", O->gpus,
                 json_string_value(json_object_get(d0, "name")) ? json_string_value(json_object_get(d0, "name")) : "GPU",
                 json_string_value(json_object_get(cuda, "runtime")) ? json_string_value(json_object_get(cuda, "runtime")) : "?",
                 json_string_value(json_object_get(cuda, "driver")) ? json_string_value(json_object_get(cuda, "driver")) : "?");
    } else {
        const json_t *h = json_object_get(env, "host");
        snprintf(rp->device, sizeof rp->device, "CPU: %s, %lld cores (no CUDA device)",
                 json_string_value(json_object_get(h, "cpu_model")) ? json_string_value(json_object_get(h, "cpu_model")) : "?",
                 (long long)json_integer_value(json_object_get(h, "cores")));
    }
}

// The top-level env.json: the trainer's environment, the runner's command and settings,
// mpirun's and nvidia-smi's first lines.
static void run_write_env(const RunOpts *O, const Report *rp, int argc, char **argv) {
    json_t *env = O->env;
    json_t *runner = json_object();
    json_t *cmd = json_array();
    json_array_append_new(cmd, json_string("nsa-harness"));
    json_array_append_new(cmd, json_string("run"));
    for (int i = 0; i < argc; i++) json_array_append_new(cmd, json_string(argv[i]));
    json_object_set_new(runner, "command", cmd);
    char cwd[4096] = "";
    if (getcwd(cwd, sizeof cwd)) json_object_set_new(runner, "cwd", json_string(cwd));
    json_object_set_new(runner, "started", json_string(rp->started));
    json_object_set_new(runner, "profile", json_string(rp->profile));
    json_object_set_new(runner, "report_dir", json_string(rp->dir));
    json_object_set_new(runner, "trainer", json_string(O->trainer));
    json_object_set_new(runner, "git", json_pack("{s:s,s:b}", "sha", rp->sha, "dirty", rp->dirty));
    json_object_set_new(runner, "timeout_scale", json_real(O->scale));
    json_t *fl = json_array();
    for (int i = 0; i < O->faults.n; i++) json_array_append_new(fl, json_string(O->faults.v[i]));
    json_object_set_new(runner, "faults", fl);
    json_object_set_new(runner, "trainer_protocol", trainer_caps_json(trainer_caps_of(&O->tdefault)));
    // every trainer the cases run, by the name the scenarios use ("nsa-train": the default)
    json_t *tr = json_object();
    for (int u = 0; u < O->n_used; u++) {
        const TrainerSpec *t = O->used[u];
        json_t *words = json_array();
        for (int i = 0; i < t->words.n; i++) json_array_append_new(words, json_string(t->words.v[i]));
        json_t *one = json_object();
        json_object_set_new(one, "command", words);
        json_object_set_new(one, "form", json_string(t->is_cmd ? "command" : "path"));
        if (t->map) json_object_set_new(one, "map", json_string(t->map));
        json_object_set_new(one, "trainer_protocol", trainer_caps_json(trainer_caps_of(t)));
        json_object_set_new(tr, t->name, one);
    }
    json_object_set_new(runner, "trainers", tr);
    json_object_set_new(env, "runner", runner);
    char *const mv[] = {"mpirun", "--version", NULL};
    char *mpi = cmd_first_line(mv);
    if (!json_object_get(env, "mpi") || json_is_null(json_object_get(env, "mpi")))
        json_object_set_new(env, "mpi", mpi ? json_string(mpi) : json_null());
    free(mpi);
    char *const nv[] = {"nvidia-smi", "--query-gpu=name,uuid,memory.total,driver_version", "--format=csv,noheader", NULL};
    char *smi = cmd_first_line(nv);
    json_object_set_new(env, "nvidia_smi", smi ? json_string(smi) : json_null());
    free(smi);
    char *js = json_dumps(env, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    char p[2200];
    snprintf(p, sizeof p, "%s/env.json", rp->dir);
    Str s = {0};
    str_add(&s, js ? js : "{}");
    str_add(&s, "\n");
    write_file_atomic(p, str_c(&s), s.len);
    str_free(&s);
    free(js);
}

// The report folder (claimed: *lock_fd holds it), its env.json and its first report.
// Returns GO_ON or the exit code.
static int run_open_report(const RunOpts *O, Report *rp, int argc, char **argv, int *lock_fd) {
    char sha[48] = "nogit";
    int dirty = 0;
    if (git_state(sha, sizeof sha, &dirty)) {
        const char *bs = json_string_value(json_object_get(json_object_get(O->env, "build"), "git_sha"));
        if (bs) snprintf(sha, sizeof sha, "%.12s", bs);
    }
    snprintf(rp->sha, sizeof rp->sha, "%s", sha);
    rp->dirty = dirty;
    char stamp[32];
    utc_stamp(stamp, sizeof stamp);
    if (O->out_dir) snprintf(rp->dir, sizeof rp->dir, "%s", O->out_dir);
    else snprintf(rp->dir, sizeof rp->dir, "%s/%s_%s", harness_reports_dir(), stamp, sha);
    char err[4600];
    if (outdir_claim(rp->dir, lock_fd, err, sizeof err)) {
        cmd_log("run", LOG_ERROR, "%s", err);
        return O->usage_rc;
    }
    utc_iso(rp->started, sizeof rp->started);
    rp->t0 = mono_s();
    Str c = {0};
    str_add(&c, "nsa-harness run");
    for (int i = 0; i < argc; i++) str_printf(&c, " %s", argv[i]);
    rp->command = str_take(&c);
    run_describe_device(O, rp);
    run_write_env(O, rp, argc, argv);
    rp->env = O->env;
    Str f = {0};
    for (int i = 0; i < O->faults.n; i++) str_printf(&f, "%s%s", i ? ", " : "", O->faults.v[i]);
    rp->faults = str_take(&f);
    if (run_write_report(rp)) {   // not even the first report fits beside the ballast and in it
        cmd_log("run", LOG_ERROR, "--out %s: cannot write the report: %s%s%s", rp->dir, strerror(errno),
                rp->disk_full ? "; " : "", rp->disk_full ? rp->disk_full_why : "");
        outdir_abandon(rp->dir);   // no half report left behind
        return O->usage_rc;
    }
    return GO_ON;
}

// --cases-per-gpu auto: one case per 24 GiB of the smallest GPU's memory, 1 to 4 (a GPU whose
// memory is not known: 1). A short case's GPU time is a small part of its wall time (process
// start, CUDA context, weights, the step-1 dump): cases side by side on one GPU keep it busy.
// The largest cases of the gpu profile (m7c_125m at S = 2048, batch 2, with the step dump)
// hold a few GiB; perf's batch-16 cases run alone.
#define GIB_PER_CASE 24.0
static int auto_cases_per_gpu(const json_t *env) {
    const json_t *devs = json_object_get(json_object_get(env, "cuda"), "devices"), *d;
    size_t i;
    double least = -1;
    json_array_foreach(devs, i, d) {
        const json_t *mb = json_object_get(d, "memory_bytes");
        if (!json_is_number(mb)) return 1;
        const double gib = json_number_value(mb) / (1024.0 * 1024.0 * 1024.0);
        if (least < 0 || gib < least) least = gib;
    }
    const int n = least > 0 ? (int)(least / GIB_PER_CASE) : 1;
    return n < 1 ? 1 : n > 4 ? 4 : n;
}

// Run every planned case (and the cases families create), until done or interrupted.
static void run_cases(RunOpts *O, Report *rp, FILE *con, int tty) {
    proc_on_interrupt(on_signal);
    proc_become_subreaper();
    RunCtx ctx = {O->trainer, O->harness, rp->dir, rp->profile, O->scale, (const char *const *)O->faults.v, O->faults.n,
                  O->gpus, &g_interrupted, con, tty, 0, rp->total, 0, O->baselines, O->recording, rp->device,
                  str_c(&O->shaping), str_c(&O->replay), &O->tdefault,
                  O->trainer_cmd_arg ? str_c(&O->cmd_line) : NULL, O->own, O->map[0] ? O->map : NULL, NULL, NULL, 0};
    if (con) {   // the plan, as `list` counts it (harness/core/counts.h), and what is not part of it
        Str plan = {0};
        counts_planned(rp->runs, rp->n_runs, NULL, &plan);
        fprintf(con, "nsa-harness: %s, profile %s, report %s\n", str_c(&plan), rp->profile, rp->dir);
        for (int i = 0; i < rp->n_runs; i++)
            if (rp->runs[i].n_left_out)
                fprintf(con, "nsa-harness: not part of this run: %d case%s of %s (they %s)\n", rp->runs[i].n_left_out,
                        rp->runs[i].n_left_out == 1 ? "" : "s", rp->runs[i].s->name, rp->runs[i].left_out_why);
        str_free(&plan);
    }
    // -j auto: every GPU (times --cases-per-gpu) for the gpu profile on a GPU machine, else every core
    const int on_gpus = ctx.gpus > 0 && !strcmp(rp->profile, "gpu");
    if (O->cases_per_gpu == 0) O->cases_per_gpu = auto_cases_per_gpu(O->env);
    if (O->jobs == 0) O->jobs = on_gpus ? ctx.gpus * O->cases_per_gpu : sched_online_cpus();
    RunCasesOpts ro = {rp, &ctx, con, tty, &O->filters, &O->exact, O->jobs, O->cases_per_gpu, &g_interrupted};
    if (con && O->jobs > 1) {
        if (on_gpus)
            fprintf(con, "nsa-harness: up to %d cases at a time over %d GPU%s (%d a GPU), %d cores; timing-sensitive "
                         "cases last, one at a time\n", O->jobs, ctx.gpus, ctx.gpus == 1 ? "" : "s", O->cases_per_gpu,
                    sched_online_cpus());
        else
            fprintf(con, "nsa-harness: up to %d cases at a time over %d cores; timing-sensitive cases last, one at a "
                         "time\n", O->jobs, sched_online_cpus());
    }
    run_cases_all(&ro);
}

// The exit code from the verdicts, the final report and the closing lines.
static int run_report(const RunOpts *O, Report *rp, FILE *con, int lock_fd) {
    int counts[V_COUNT];
    report_counts(rp, counts);
    int rc = HARNESS_EXIT_OK;
    if (counts[V_FAIL] + counts[V_HANG] + counts[V_CRASH]) rc = HARNESS_EXIT_FAIL;
    if (counts[V_ERROR]) rc = O->usage_rc;
    if (g_interrupted) {
        rp->interrupted = 1;
        rc = HARNESS_EXIT_INTERRUPTED;
        // cases never started: SKIP "not run"
        for (int i = 0; i < rp->n_runs; i++) {
            ScenarioRun *sr = &rp->runs[i];
            for (int k = sr->done; k < sr->n; k++) snprintf(sr->results[k].summary, sizeof sr->results[k].summary, "not run: interrupted");
        }
    } else rp->finished = 1;
    rp->exit_code = rc;
    // the final report; on a full disk from the ballast. If it cannot be written even so,
    // the one on disk is the last complete one, and the run says so rather than announce a
    // file it never wrote
    if (rp->disk_full) outdir_release_reserve(rp->dir);
    const int report_failed = run_write_report(rp) != 0;
    const int report_errno = errno;
    report_github_summary(rp);
    if (con) {
        Str line = {0};
        for (int v = 0; v < V_COUNT; v++)
            if (counts[v]) str_printf(&line, "%s%d %s", line.len ? ", " : "", counts[v], VERDICT_NAMES[v]);
        Str steps = {0};   // more verdicts than planned cases: say where they came from (harness/core/counts.h)
        if (counts_steps(rp->runs, rp->n_runs, &steps)) {
            Str plan = {0};
            str_printf(&plan, "%d cases", counts_planned(rp->runs, rp->n_runs, NULL, NULL) + rp->n_invalid);
            fprintf(con, "nsa-harness: %s (%s%s)%s\n", str_c(&line), str_c(&plan), str_c(&steps), g_interrupted ? " (interrupted)" : "");
            str_free(&plan);
        } else
            fprintf(con, "nsa-harness: %s%s\n", line.len ? str_c(&line) : "no cases", g_interrupted ? " (interrupted)" : "");
        str_free(&steps);
        if (rp->disk_full) fprintf(con, "nsa-harness: disk full: %s\n", rp->disk_full_why);
        if (!report_failed) fprintf(con, "RESULTS: %s/RESULTS.md\n", rp->dir);
        str_free(&line);
    }
    if (report_failed) {
        nsa_log(LOG_ERROR, "could not write the final report in %s: %s; RESULTS.md there is the last one "
                           "written (it says partial)", rp->dir, strerror(report_errno));
        if (rc == HARNESS_EXIT_OK) rc = O->usage_rc;
    }
    outdir_release_reserve(rp->dir);
    if (lock_fd >= 0) close(lock_fd);   // the folder is free for the next run
    return rc;
}

// nsa-harness run: parse options, check the trainer, load and plan the scenarios, open
// the report, run the cases, report. (The process exits after: the OS frees the rest.)
int cmd_run(int argc, char **argv) {
    RunOpts O = {.profile = -1, .baselines = harness_path("golden/baselines"), .scale = 1.0, .jobs = 1,
                 .cases_per_gpu = 0};
    int rc;
    if ((rc = run_parse_options(argc, argv, &O)) != GO_ON) return rc;
    if ((rc = run_check_trainer(&O)) != GO_ON) return rc;
    Report rp;
    memset(&rp, 0, sizeof rp);
    if ((rc = run_load_scenarios(&O, &rp)) != GO_ON) return rc;
    if ((rc = run_check_trainers(&O, &rp)) != GO_ON) return rc;
    int lock_fd = -1;
    if ((rc = run_open_report(&O, &rp, argc, argv, &lock_fd)) != GO_ON) return rc;
    const int tty = !O.quiet && isatty(fileno(stdout));
    FILE *con = O.quiet ? NULL : stdout;
    run_cases(&O, &rp, con, tty);
    return run_report(&O, &rp, con, lock_fd);
}

