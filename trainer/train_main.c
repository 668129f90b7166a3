// trainer/train_main.c — the nsa-train command line.
//
//   nsa-train --config FILE [--set KEY=VALUE]... [--steps N] [options]
//
// Exit codes: 0 ok, 1 runtime failure (also: rank 0 cannot listen on the rendezvous
// port), 2 usage or invalid config (also: invalid launcher variables, ranks that disagree
// at the rendezvous), 3 non-finite value (anomaly record written), 4 a data-parallel
// collective did not complete within --comm-timeout (or the rendezvous within
// --rdzv-timeout, or a peer's connection was lost), 5 static_graph's used-parameter set differs
// across ranks or steps, 6 an artifact could not be written ([IO-ERROR] line),
// 138 stall dump after SIGUSR1; a crash ends
// by its signal after the crash dump. See `nsa-train --help`, docs/diagnostics.md
// for the diagnostics flags and docs/ddp.md for data parallel.
//
// The flags are one table, trainer/train_flags.c (getopt_long's options and --help are
// made from it); run_command and apply_flag below act on each by its id.
#define _POSIX_C_SOURCE 200809L   // setenv, open, dup2, mkdir
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "trainer/comm.h"
#include "common/config.h"
#include "trainer/envinfo.h"
#include "trainer/faults.h"
#include "trainer/flightrec.h"
#include "trainer/protocol.h"
#include "trainer/stackdump.h"
#include "trainer/timing.h"
#include "trainer/train.h"
#include "trainer/train_flags.h"
#include "common/exit_codes.h"
#include "common/log.h"
#include "common/util.h"

#ifdef NSA_HAVE_CUDA
int nsa_cuda_describe(char *buf, size_t n);   // kernels/cuda/cuda_probe.cu
#endif

// `path` with every "%r" replaced by the rank (malloc'd; NULL stays NULL).
static char *subst_rank(const char *path, int rank) {
    if (!path) return NULL;
    size_t n = strlen(path), cap = n + 1;
    for (const char *p = strstr(path, "%r"); p; p = strstr(p + 2, "%r")) cap += 12;
    char *out = xmalloc(cap), *o = out;
    for (const char *p = path; *p;) {
        if (p[0] == '%' && p[1] == 'r') {
            o += snprintf(o, cap - (size_t)(o - out), "%d", rank);
            p += 2;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}

// --log-file: this process's stdout and stderr go to FILE (appended, never
// truncated: several ranks may share one), stdout line-buffered, stderr unbuffered.
static int redirect_log(const char *path) {
    mkdir_p_parent(path);   // a failure shows in the open below
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) {
        nsa_log(LOG_ERROR, "--log-file %s: %s", path, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) {
        nsa_log(LOG_ERROR, "--log-file %s: dup2: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    setvbuf(stdout, NULL, _IOLBF, 0);
    setvbuf(stderr, NULL, _IONBF, 0);
    return 0;
}

// --threads' maximum, the same on every machine (a command line that runs on one runs on
// all): no CPU has as many cores (a thread per core is the default; more only make the
// kernels wait for each other), and it is far below where libgomp fails: its team start
// takes stack in proportion to the thread count, and --threads 100000 overflowed the main
// thread's 8 MiB stack (SIGSEGV in GOMP_parallel).
#define NSA_MAX_THREADS 1024

static int parse_int(const char *flag, const char *s, int *out) {
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000000L) {
        nsa_log(LOG_ERROR, "%s %s: expected a non-negative integer", flag, s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

// Leave the process: a clean run finalizes MPI; any failure exits without
// MPI_Finalize (another rank may be stuck in a collective: finalize could hang).
static int finish(CommWorld *w, int rc) {
    fflush(stdout);
    fflush(stderr);
    if (rc == NSA_EXIT_OK) comm_world_finalize(w);
    else if (w->mpi_initialized) exit(rc);
    return rc;
}

// Everything the command line and the environment set, as main's stages pass it on.
typedef struct {
    TrainOpts opts;
    const char *config_path, *stack_file, *log_file;
    int check_only, threads, print_env, rank_given, transport;
    int bootstrap, bootstrap_given, check_world;
    int out_defaulted;   // no --out: runs/ (said once before training)
    double comm_timeout, rdzv_timeout;
    const char **sets;   // --set KEY=VALUE (and --steps/--backend as train.* sets)
    char **owned;        // the sets built here (freed after config_load)
    int n_sets, n_owned;
    Faults *faults;
    // every path flag with %r replaced by this rank (malloc'd)
    char *p_log, *p_stack, *p_fr, *p_out, *p_dump, *p_save, *p_resume, *p_init, *p_winit;
    char **p_peer_stacks;   // [world] the other ranks' stack files (this rank's entry NULL), or NULL
    int n_peer_stacks;
} MainArgs;

enum { GO_ON = -1 };   // a stage's "not done yet": main continues; any other value is the exit code

// The flags that answer and exit as soon as they are read, before the flags after them:
// --help, --devices, --list-faults, --protocol-info, --show-flight-recorder. Returns their
// exit code, or GO_ON for any other flag.
static int run_command(int id, const char *v) {
    switch (id) {
    case FLAG_HELP: train_flags_help(stdout); return NSA_EXIT_OK;
    case FLAG_DEVICES: {
#ifdef NSA_HAVE_CUDA
        char buf[2048];
        int n = nsa_cuda_describe(buf, sizeof buf);
        printf("%s\n", buf);
        return n > 0 ? NSA_EXIT_OK : NSA_EXIT_RUNTIME;
#else
        printf("this build has no CUDA support (CUDA toolkit not found at configure time)\n");
        return NSA_EXIT_RUNTIME;
#endif
    }
    case FLAG_LIST_FAULTS: faults_list(stdout); return NSA_EXIT_OK;
    case FLAG_PROTOCOL_INFO: return protocol_info_print(stdout) ? NSA_EXIT_RUNTIME : NSA_EXIT_OK;
    case FLAG_SHOW_FLIGHT_RECORDER: return flightrec_show(v) ? NSA_EXIT_RUNTIME : NSA_EXIT_OK;
    }
    return GO_ON;
}

// --comm-timeout and --rdzv-timeout: seconds, > 0 and at most 1e7. 0, or -1 after the message.
static int parse_seconds(const char *flag, const char *v, double *t) {
    char *end = NULL;
    *t = strtod(v, &end);
    if (!*v || *end || !(*t > 0) || *t > 1e7) {
        nsa_log(LOG_ERROR, "%s %s: expected a number of seconds > 0", flag, v);
        return -1;
    }
    return 0;
}

// One flag of the table (trainer/train_flags.c) with its value v (NULL for a switch), as
// `flag` ("--steps") names it in messages. Returns GO_ON, or the exit code of a bad value.
static int apply_flag(MainArgs *A, TrainFlagId id, const char *flag, const char *v) {
    TrainOpts *o = &A->opts;
    switch (id) {   // every TrainFlagId (no default: -Wswitch names a flag of the table left out here)
    case FLAG_HELP:
    case FLAG_DEVICES:
    case FLAG_LIST_FAULTS:
    case FLAG_PROTOCOL_INFO:
    case FLAG_SHOW_FLIGHT_RECORDER: break;   // answered by run_command
    case FLAG_CONFIG: A->config_path = v; break;
    case FLAG_SET: A->sets[A->n_sets++] = v; break;
    case FLAG_STEPS:
    case FLAG_BACKEND: {   // train.steps=N, train.backend=NAME: the config loader judges the value
        size_t n = strlen(v) + 32;
        char *s = xmalloc(n);
        snprintf(s, n, "train.%s=%s", flag + 2, v);
        A->owned[A->n_owned++] = s;
        A->sets[A->n_sets++] = s;
        break;
    }
    case FLAG_OUT: o->out_dir = v; break;
    case FLAG_SAVE: o->save = v; break;
    case FLAG_SAVE_EVERY: if (parse_int(flag, v, &o->save_every)) return NSA_EXIT_USAGE; break;
    case FLAG_RESUME: o->resume = v; break;
    case FLAG_INIT_WEIGHTS: o->init_weights = v; break;
    case FLAG_WRITE_INIT: o->write_init = v; break;
    case FLAG_ALLOW_CONFIG_CHANGE: o->allow_config_change = 1; break;
    case FLAG_STOP_AFTER: if (parse_int(flag, v, &o->stop_after)) return NSA_EXIT_USAGE; break;
    case FLAG_DUMP_STEP: o->dump_step = v; break;
    case FLAG_DUMP_ACTS: o->dump_acts = 1; break;
    case FLAG_DUMP_TENSORS: o->dump_tensors = v; break;
    case FLAG_THREADS: {   // one message, saying what it got and the range
        char *end = NULL;
        long t = strtol(v, &end, 10);
        if (!*v || *end || t < 1 || t > NSA_MAX_THREADS) {
            nsa_log(LOG_ERROR, "--threads %s: expected a whole number from 1 to %d", v, NSA_MAX_THREADS);
            return NSA_EXIT_USAGE;
        }
        A->threads = (int)t;
        break;
    }
    case FLAG_CHECK_CONFIG: A->check_only = 1; break;
    case FLAG_QUIET: o->quiet = 1; break;
    case FLAG_LOG_FILE: A->log_file = v; break;
    case FLAG_TRANSPORT:
        if ((A->transport = comm_transport_parse(v)) < 0) {
            nsa_log(LOG_ERROR, "--transport %s: expected none, mpi or nccl", v);
            return NSA_EXIT_USAGE;
        }
        break;
    case FLAG_BOOTSTRAP:
        if ((A->bootstrap = comm_bootstrap_parse(v)) == -2) {
            nsa_log(LOG_ERROR, "--bootstrap %s: expected auto, mpi, env or slurm", v);
            return NSA_EXIT_USAGE;
        }
        A->bootstrap_given = 1;
        break;
    case FLAG_RDZV_TIMEOUT: if (parse_seconds(flag, v, &A->rdzv_timeout)) return NSA_EXIT_USAGE; break;
    case FLAG_COMM_TIMEOUT: if (parse_seconds(flag, v, &A->comm_timeout)) return NSA_EXIT_USAGE; break;
    case FLAG_CHECK_WORLD: A->check_world = 1; break;
    case FLAG_RANK:
        if (parse_int(flag, v, &o->rank)) return NSA_EXIT_USAGE;
        A->rank_given = 1;
        break;
    case FLAG_TRACE_GRADS: o->trace_grads = 1; break;
    case FLAG_GATE_STATS: o->gate_stats = 1; break;
    case FLAG_FLIGHT_RECORDER: o->flight_recorder = v; break;
    case FLAG_STACK_FILE: A->stack_file = v; break;
    case FLAG_FAULT: {
        char ferr[1024];
        if (faults_parse(A->faults, v, ferr, sizeof ferr)) {
            nsa_log(LOG_ERROR, "%s", ferr);
            return NSA_EXIT_USAGE;
        }
        break;
    }
    case FLAG_PRINT_ENV: A->print_env = 1; break;
    }
    return GO_ON;
}

// The flags, in order, through getopt_long and the table of trainer/train_flags.c: a
// value is the next word whatever it looks like (--set -x), a word that is no flag of
// the table is an unknown option. Returns GO_ON, or the exit code of a command that
// answers at once (run_command) and of a bad flag or value.
static int parse_args(int argc, char **argv, MainArgs *A) {
    const struct option *opts = train_flags_getopt();
    opterr = 0;   // the messages are ours
    optind = 1;
    for (;;) {
        const char *word = optind < argc ? argv[optind] : NULL;
        if (word && !train_flag_word_ok(word)) {   // an abbreviation, --flag=VALUE, -x, --
            nsa_log(LOG_ERROR, "unknown option '%s' (see --help)", word);
            return NSA_EXIT_USAGE;
        }
        int id = getopt_long(argc, argv, TRAIN_FLAGS_OPTSTRING, opts, NULL);
        if (id == -1) break;
        if (id == 1 || id == '?') {   // a plain word (nsa-train takes none), or what getopt_long refused
            nsa_log(LOG_ERROR, "unknown option '%s' (see --help)", id == 1 ? optarg : word ? word : "?");
            return NSA_EXIT_USAGE;
        }
        if (id == ':') {
            nsa_log(LOG_ERROR, "%s needs a value (see --help)", word);
            return NSA_EXIT_USAGE;
        }
        int rc = run_command(id, optarg);
        if (rc == GO_ON) rc = apply_flag(A, (TrainFlagId)id, word, optarg);
        if (rc != GO_ON) return rc;
    }
    // no --out: runs/ below the current directory (created), said once, rather than the
    // current directory itself (a source tree would collect metrics.jsonl at its root)
    if (!A->opts.out_dir) {
        A->opts.out_dir = "runs";
        A->out_defaulted = 1;
    }
    return GO_ON;
}

// A timeout from the environment when its flag was not given: NAME=seconds, > 0 (and
// at most 1e7 when `capped`). Returns 0, or -1 after the message.
static int env_seconds(const char *name, double *t, int capped) {
    const char *e = getenv(name);
    char *end = NULL;
    *t = e ? strtod(e, &end) : 0;
    if (e && (!*e || *end || !(*t > 0) || (capped && *t > 1e7))) {
        nsa_log(LOG_ERROR, "%s=%s: expected a number of seconds > 0", name, e);
        return -1;
    }
    return 0;
}

// What the flags did not say: the timeouts and the bootstrap from the environment,
// and the combinations checked before any world exists. Returns GO_ON or the exit code.
static int resolve_defaults(MainArgs *A) {
    if (A->opts.dump_tensors && !A->opts.dump_step) {
        nsa_log(LOG_ERROR, "--dump-tensors %s selects the step dump's tensors: it needs --dump-step FILE",
                A->opts.dump_tensors);
        return NSA_EXIT_USAGE;
    }
    const char *dt = A->opts.dump_tensors;
    if (dt && (!dt[0] || dt[0] == ',' || dt[strlen(dt) - 1] == ',' || strstr(dt, ",,"))) {
        nsa_log(LOG_ERROR, "--dump-tensors '%s': expected comma-separated globs of tensor names, none empty "
                        "(e.g. 'grads.*' or 'logits,grads.*')", dt);
        return NSA_EXIT_USAGE;
    }
    if (A->opts.dump_acts && !A->opts.dump_step) {
        nsa_log(LOG_ERROR, "--dump-acts adds the activations to the step dump: it needs --dump-step FILE");
        return NSA_EXIT_USAGE;
    }
    if (A->opts.init_weights && A->opts.resume) {
        nsa_log(LOG_ERROR, "--init-weights %s and --resume %s both say where the weights come from: give one",
                A->opts.init_weights, A->opts.resume);
        return NSA_EXIT_USAGE;
    }
    if (A->opts.write_init && A->opts.resume) {
        nsa_log(LOG_ERROR, "--write-init %s writes the step-0 parameters: it does not take --resume %s",
                A->opts.write_init, A->opts.resume);
        return NSA_EXIT_USAGE;
    }
    if (A->comm_timeout <= 0) {
        if (env_seconds("NSA_COMM_TIMEOUT", &A->comm_timeout, 0)) return NSA_EXIT_USAGE;
        if (A->comm_timeout <= 0) A->comm_timeout = 300;
    }
    if (A->rdzv_timeout <= 0) {
        if (env_seconds("NSA_RDZV_TIMEOUT", &A->rdzv_timeout, 1)) return NSA_EXIT_USAGE;
        if (A->rdzv_timeout <= 0) A->rdzv_timeout = A->comm_timeout;
    }
    if (!A->bootstrap_given && getenv("NSA_BOOTSTRAP") && *getenv("NSA_BOOTSTRAP")) {
        if ((A->bootstrap = comm_bootstrap_parse(getenv("NSA_BOOTSTRAP"))) == -2) {
            nsa_log(LOG_ERROR, "NSA_BOOTSTRAP=%s: expected auto, mpi, env or slurm", getenv("NSA_BOOTSTRAP"));
            return NSA_EXIT_USAGE;
        }
    }
    return GO_ON;
}

// Data parallel: the process learns its rank first (MPI_Init for the mpi bootstrap; the
// launcher's variables for env/slurm), so that %r in the paths, the log file and the
// stack dumps know the rank; the env/slurm rendezvous comes later (join_world), after
// the log file. Returns GO_ON or the exit code.
static int setup_world(MainArgs *A, CommWorld *world, char *err, size_t errn) {
    const char *why = NULL;
    if (!comm_transport_built(A->transport, &why)) {
        nsa_log(LOG_ERROR, "--transport %s: %s", comm_transport_name(A->transport), why);
        return NSA_EXIT_USAGE;
    }
    int wrc = comm_world_setup(world, A->transport, A->bootstrap, A->check_world, err, errn);
    if (wrc) {
        nsa_log(LOG_ERROR, "%s", err);
        return finish(world, wrc);
    }
    if (world->bootstrap != COMM_BOOT_NONE) {
        if (A->rank_given && A->opts.rank != world->rank) {
            if (world->bootstrap == COMM_BOOT_MPI)
                nsa_log(LOG_ERROR, "--rank %d conflicts with the MPI rank %d (under --transport %s the MPI rank "
                        "is used; leave --rank out)", A->opts.rank, world->rank, comm_transport_name(A->transport));
            else
                nsa_log(LOG_ERROR, "--rank %d conflicts with the rank %d of the %s bootstrap (%s; leave --rank "
                        "out)", A->opts.rank, world->rank, comm_bootstrap_name(world->bootstrap), world->source);
            return finish(world, NSA_EXIT_USAGE);
        }
        A->opts.rank = world->rank;
        setvbuf(stdout, NULL, _IOLBF, 0);   // launchers forward a pipe: lines, not blocks
    } else if (A->bootstrap_given && A->bootstrap != COMM_BOOT_AUTO) {
        nsa_log(LOG_ERROR, "--bootstrap %s: there is no world to join with --transport none (add --transport "
                "nccl, or --check-world)", comm_bootstrap_name(A->bootstrap));
        return NSA_EXIT_USAGE;
    } else {
        const char *ws = getenv("WORLD_SIZE");
        if (ws && atoi(ws) > 1 && !getenv("OMPI_COMM_WORLD_RANK"))
            nsa_log(LOG_WARN, "WORLD_SIZE=%s is set but --transport is none: this process trains "
                    "alone (pass --transport nccl to join the world, docs/ddp.md)", ws);
    }
    A->opts.world = world;
    A->opts.comm_timeout_s = A->comm_timeout;
    return GO_ON;
}

// every path flag accepts %r = this rank
static void substitute_rank(MainArgs *A) {
    TrainOpts *o = &A->opts;
    A->p_log = subst_rank(A->log_file, o->rank);
    A->p_stack = subst_rank(A->stack_file, o->rank);
    A->p_fr = subst_rank(o->flight_recorder, o->rank);
    A->p_out = subst_rank(o->out_dir, o->rank);
    A->p_dump = subst_rank(o->dump_step, o->rank);
    A->p_save = subst_rank(o->save, o->rank);
    A->p_resume = subst_rank(o->resume, o->rank);
    A->p_init = subst_rank(o->init_weights, o->rank);
    A->p_winit = subst_rank(o->write_init, o->rank);
    o->flight_recorder = A->p_fr;
    o->out_dir = A->p_out;
    o->dump_step = A->p_dump;
    o->save = A->p_save;
    o->resume = A->p_resume;
    o->init_weights = A->p_init;
    o->write_init = A->p_winit;
}

static void free_rank_paths(MainArgs *A) {
    stackdump_set_peers(NULL, 0);
    for (int r = 0; r < A->n_peer_stacks; r++) free(A->p_peer_stacks[r]);
    free(A->p_peer_stacks);
    A->p_peer_stacks = NULL;
    A->n_peer_stacks = 0;
    free(A->p_log); free(A->p_stack); free(A->p_fr); free(A->p_out); free(A->p_dump); free(A->p_save); free(A->p_resume);
    free(A->p_init); free(A->p_winit);
}

// A failure to join or check the world: a [COMM-TIMEOUT]/[COMM-ERROR] line as it is (the
// runner reads those), anything else as nsa-train's error.
static void say_world_error(const char *err) {
    if (err[0] == '[') fprintf(stderr, "%s\n", err);
    else nsa_log(LOG_ERROR, "%s", err);
}

// The log file, the stall/crash handlers, the env/slurm rendezvous, and --check-world.
// Returns GO_ON or the exit code.
static int join_world(MainArgs *A, CommWorld *world, char *err, size_t errn) {
    int wrc;
    if (A->p_log && redirect_log(A->p_log)) return finish(world, NSA_EXIT_USAGE);
    // stall/crash handlers first: a rank can be stalled or crash from here on (after
    // MPI_Init, which installs handlers of its own that these replace)
    if (stackdump_install(A->p_stack, A->opts.rank)) return finish(world, NSA_EXIT_RUNTIME);
    // env/slurm: the rendezvous (bounded by --rdzv-timeout; nothing to do for mpi, nor for
    // --print-env / --check-config, which need no world)
    if (!A->print_env && !A->check_only && (wrc = comm_world_join(world, A->rdzv_timeout, err, errn))) {
        say_world_error(err);
        return finish(world, wrc);
    }
    // the other ranks' stack files (%r in --stack-file): a stall dump lets theirs finish
    // before this rank exits (trainer/stackdump.h)
    if (A->stack_file && strstr(A->stack_file, "%r") && world->world > 1 && !A->check_world) {
        A->p_peer_stacks = xcalloc((size_t)world->world, sizeof(char *));
        A->n_peer_stacks = world->world;
        for (int r = 0; r < world->world; r++)
            if (r != A->opts.rank) A->p_peer_stacks[r] = subst_rank(A->stack_file, r);
        stackdump_set_peers(A->p_peer_stacks, world->world);
    }
    if (world->rdzv && world->world > 1 && !A->check_world)
        nsa_log(LOG_STATUS, "rank %d: joined a world of %d at %s:%d (bootstrap %s, local rank %d of %d) in %.0f ms",
                world->rank, world->world, world->rdzv_addr, world->rdzv_port, comm_bootstrap_name(world->bootstrap),
                world->local_rank, world->local_size, world->join_ms);
    if (A->check_world) {
        char line[16384];
        if ((wrc = comm_world_check(world, A->comm_timeout, line, sizeof line, err, errn))) {
            say_world_error(err);
            return finish(world, wrc);
        }
        puts(line);
        return finish(world, NSA_EXIT_OK);
    }
    return GO_ON;
}

// The config (--config with its --set overrides), and the commands that only print it
// or the environment. Returns GO_ON or the exit code.
static int load_config(MainArgs *A, CommWorld *world, char *err, size_t errn) {
    TrainOpts *o = &A->opts;
    if (A->print_env && !A->config_path) {
        char *js = envinfo_json(NULL);
        puts(js);
        free(js);
        return finish(world, NSA_EXIT_OK);
    }
    if (!A->config_path) {
        nsa_log(LOG_ERROR, "--config FILE is required (see --help)");
        return finish(world, NSA_EXIT_USAGE);
    }
    if (o->save_every && !o->save) {
        nsa_log(LOG_ERROR, "--save-every needs --save FILE");
        return finish(world, NSA_EXIT_USAGE);
    }
    if (config_load(&o->cfg, A->config_path, A->sets, A->n_sets, err, errn)) {
        fputs(err, stderr);
        if (err[0] && err[strlen(err) - 1] != '\n') fputc('\n', stderr);
        return finish(world, NSA_EXIT_USAGE);
    }
    for (int i = 0; i < A->n_owned; i++) free(A->owned[i]);
    free(A->owned);
    free(A->sets);
    if (o->allow_config_change && !o->resume) {
        nsa_log(LOG_ERROR, "--allow-config-change applies to --resume FILE, which is not given");
        free_rank_paths(A);
        return finish(world, NSA_EXIT_USAGE);
    }
    if (A->print_env) {
        char *js = envinfo_json(&o->cfg);
        puts(js);
        free(js);
        return finish(world, NSA_EXIT_OK);
    }
    if (A->check_only) {
        char *js = config_to_json(&o->cfg);   // ends with a newline
        fputs(js, stdout);
        free(js);
        return finish(world, NSA_EXIT_OK);
    }
    return GO_ON;
}

int main(int argc, char **argv) {
    static MainArgs A;
    static Faults faults;
    static CommWorld world;
    char err[8192], terr[256];
    nsa_log_set_program("nsa-train");   // every tagged stderr line (common/log.h)
    // NSA_TRAIN_TIMING=1 (trainer/timing.h): main's time first; a value other than 0 or 1 is a
    // usage error, said where a run would start (--help and the other commands still answer)
    const int timing_bad = timing_init(terr, sizeof terr) < 0;
    A.transport = COMM_NONE;
    A.bootstrap = COMM_BOOT_AUTO;
    A.faults = &faults;
    faults_init(&faults);
    A.sets = xcalloc((size_t)argc + 2, sizeof(char *));
    A.owned = xcalloc((size_t)argc + 2, sizeof(char *));
    int rc;
    if ((rc = parse_args(argc, argv, &A)) != GO_ON) return rc;
    if ((rc = resolve_defaults(&A)) != GO_ON) return rc;
    if ((rc = setup_world(&A, &world, err, sizeof err)) != GO_ON) return rc;
    substitute_rank(&A);
    if ((rc = join_world(&A, &world, err, sizeof err)) != GO_ON) return rc;
    if ((rc = load_config(&A, &world, err, sizeof err)) != GO_ON) return rc;
#ifdef _OPENMP
    // several ranks on one node share its cores: without --threads each takes its share
    if (A.threads <= 0 && world.local_size > 1 && !getenv("OMP_NUM_THREADS")) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        A.threads = (int)(cores / world.local_size);
        if (A.threads < 1) A.threads = 1;
    }
    if (A.threads > 0) omp_set_num_threads(A.threads);
#endif
    if (faults.n_active) A.opts.faults = &faults;
    if (timing_bad) {
        nsa_log(LOG_ERROR, "%s", terr);
        free_rank_paths(&A);
        return finish(&world, NSA_EXIT_USAGE);
    }
    if (A.out_defaulted && A.opts.rank == 0 && !A.opts.quiet)
        printf("nsa-train: writing metrics.jsonl to %s/ (no --out given)\n", A.opts.out_dir);
    rc = train_run(&A.opts);
    free_rank_paths(&A);
    return finish(&world, rc);
}
