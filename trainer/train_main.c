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
#define _POSIX_C_SOURCE 200809L   // setenv, open, dup2, mkdir
#include <errno.h>
#include <fcntl.h>
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
#include "common/exit_codes.h"
#include "common/util.h"

#ifdef NSA_HAVE_CUDA
int nsa_cuda_describe(char *buf, size_t n);   // kernels/cuda/cuda_probe.cu
#endif

static void usage(FILE *f) {
    fprintf(f,
        "usage: nsa-train --config FILE [options]\n"
        "\n"
        "Trains the NSA decoder described by a JSON config (configs/*.json, docs/config.md)\n"
        "and prints one line per step: step, loss, grad norm, lr, ms, tok/s.\n"
        "\n"
        "options:\n"
        "  --config FILE        model/training config (required)\n"
        "  --set KEY=VALUE      override a config value, e.g. --set nsa.w=64 --set train.checkpoint_layers=[0,2]\n"
        "                       (VALUE is JSON; anything that is not JSON is taken as a string); repeatable\n"
        "  --steps N            same as --set train.steps=N\n"
        "  --backend NAME       same as --set train.backend=NAME (cpu, cpu64, cuda)\n"
        "  --out DIR            write metrics.jsonl (and anomaly.json) here (default runs, below the current\n"
        "                       directory: created; .gitignore covers it in the source tree)\n"
        "  --save FILE          write a checkpoint (safetensors, a digest64 checksum per tensor) at the end of\n"
        "                       the run; FILE's directory must exist and be writable (checked at start: exit 2)\n"
        "  --save-every N       with --save: also every N steps\n"
        "  --resume FILE        continue from a checkpoint (weights, AdamW state, data position); every tensor\n"
        "                       is verified against its checksum (a corrupt one is named, exit 1); a checkpoint\n"
        "                       of another config is exit 2 naming the keys that differ (train.steps and name\n"
        "                       may differ); one already at train.steps (or --stop-after) is 'nothing to do', exit 0\n"
        "  --init-weights FILE  start from the parameters in FILE (safetensors: every parameter of the config by its\n"
        "                       name and shape, F32 or F64, cast to the master precision) instead of the seeded init;\n"
        "                       a missing, extra, misshapen or non-float tensor is exit 2 naming it and FILE. Every\n"
        "                       rank loads the same file (docs/diagnostics.md, \"Start weights\")\n"
        "  --write-init FILE    write the step-0 parameters (F32; F64 on backend cpu64) under their names to FILE and\n"
        "                       exit 0 without data or training (needs only --config and --set)\n"
        "  --allow-config-change  with --resume: resume a checkpoint of another config anyway (the differing\n"
        "                       keys are printed as a warning)\n"
        "  --stop-after N       stop after step N (the LR schedule still spans train.steps)\n"
        "  --dump-step FILE     write step 1's batch, logits, loss and every gradient (safetensors;\n"
        "                       logits F32, F64 on the fp64 backend)\n"
        "  --dump-acts          with --dump-step: also every layer's forward activations (acts.blocks.L.*)\n"
        "  --dump-tensors GLOBS  with --dump-step: only the tensors matching one of these comma-separated\n"
        "                       fnmatch globs (e.g. 'grads.*', 'logits,acts.blocks.0.*'), the others not even\n"
        "                       copied from the device; inputs, targets, loss and the metadata always\n"
        "  --threads N          CPU threads, 1 to 1024 (default: all cores)\n"
        "  --check-config       validate the config, print it as canonical JSON, exit\n"
        "  --devices            print the CUDA devices this build can use, exit\n"
        "  --quiet              no per-step lines\n"
        "  --log-file FILE      redirect this process's stdout and stderr to FILE (appended, line-buffered)\n"
        "  --help               this text\n"
        "\n"
        "data parallel (docs/ddp.md): mpirun -np W nsa-train ... --transport mpi|nccl, or without MPI:\n"
        "  RANK=R WORLD_SIZE=W MASTER_ADDR=A MASTER_PORT=P nsa-train ... --transport nccl (torchrun, Kubernetes),\n"
        "  srun -n W nsa-train ... --transport nccl (Slurm)\n"
        "  --transport T        none (default: one process), mpi (host buffers; the CPU path and the A/B\n"
        "                       transport; MPI only), nccl (GPU buffers, cuda backend). One GPU per rank\n"
        "                       (device = local rank)\n"
        "  --bootstrap B        where rank/world/local rank come from (default auto, or $NSA_BOOTSTRAP): auto =\n"
        "                       an MPI launcher's variables (OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK) > RANK/\n"
        "                       WORLD_SIZE (env) > SLURM_PROCID (slurm); mpi, env, slurm force one. env and slurm\n"
        "                       meet at a TCP rendezvous on MASTER_ADDR:MASTER_PORT (Slurm: the first host of the\n"
        "                       node list, port MASTER_PORT or 20000 + SLURM_JOB_ID %% 10000); nccl only\n"
        "  --rdzv-timeout S     seconds the rendezvous waits for every rank (default: --comm-timeout, or\n"
        "                       $NSA_RDZV_TIMEOUT); a rank that never arrives is [COMM-TIMEOUT] naming it, exit 4\n"
        "  --check-world        join the world (bootstrap and rendezvous; no GPU, no config needed), broadcast\n"
        "                       rank 0's bytes, allgather every rank's record, print one [WORLD] line, exit 0\n"
        "  --comm-timeout S     seconds a collective may take before the rank reports [COMM-TIMEOUT] and\n"
        "                       exits 4 (default 300, or $NSA_COMM_TIMEOUT)\n"
        "  every path flag (--out, --log-file, --flight-recorder, --stack-file, --dump-step, --save, --resume,\n"
        "  --init-weights, --write-init)\n"
        "  replaces %%r by the rank, e.g. --log-file OUT/ranks/rank_%%r.log\n"
        "\n"
        "diagnostics (docs/diagnostics.md; each off by default and free when off):\n"
        "  --rank R             this process's rank (default 0): in every trace, targets the rank faults;\n"
        "                       under --transport mpi|nccl the world's rank is used (a different --rank is an error)\n"
        "  --trace-grads        gradient-arrival trace: OUT/grad_trace.jsonl (one line per step) and\n"
        "                       [GRAD-TRACE] step=S rank=R arrived=N missing=M lines on stdout\n"
        "  --gate-stats         per-layer gate statistics of each step's first forward: OUT/gate_stats.jsonl\n"
        "  --flight-recorder FILE  memory-mapped recorder of phase/step/layer/op, heartbeat and the last\n"
        "                       256 events, readable by another process while this one runs or hangs\n"
        "  --show-flight-recorder FILE  print a recorder file (state and events) as JSON, exit\n"
        "  --stack-file FILE    where stack dumps go (default stderr): SIGUSR1 dumps the main thread's\n"
        "                       stack and the flight recorder and exits 138; SIGSEGV/SIGBUS/SIGFPE/SIGILL/\n"
        "                       SIGABRT dump the faulting thread's stack and re-raise the signal\n"
        "  --fault NAME[=ARG]   inject a fault (repeatable); --list-faults describes them\n"
        "  --list-faults        list the faults: name, argument, what it breaks, who catches it; exit\n"
        "  --print-env          print build/CUDA/host/env facts (and --config's) as JSON, exit\n"
        "  --protocol-info      print the trainer protocol's handshake (protocol version, build, supported\n"
        "                       backends, transports, faults, diagnostics...) as one JSON line, exit\n"
        "                       (docs/trainer-protocol.md)\n"
        "\n"
        "exit codes: 0 ok, 1 runtime failure, 2 usage or invalid config, 3 non-finite value\n"
        "(the first non-finite tensor is named on stderr and in OUT/anomaly.json), 4 a collective did not\n"
        "complete within --comm-timeout (data parallel; [COMM-TIMEOUT] names the collective and its bucket), or\n"
        "the rendezvous did not complete ([COMM-TIMEOUT]/[COMM-ERROR] name the missing ranks or rank 0's address),\n"
        "5 static_graph: the used parameters differ across ranks or from the recorded step ([DDP] names them),\n"
        "6 an artifact could not be written (disk full, I/O error: metrics.jsonl, traces, anomaly.json, the\n"
        "dump, a checkpoint, the flight recorder); stderr has one line [IO-ERROR] file=PATH errno=N TEXT,\n"
        "138 stall dump after SIGUSR1; a crash ends by its signal (shell status 128+signal)\n");
}

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
        fprintf(stderr, "nsa-train: --log-file %s: %s\n", path, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    if (dup2(fd, STDOUT_FILENO) < 0 || dup2(fd, STDERR_FILENO) < 0) {
        fprintf(stderr, "nsa-train: --log-file %s: dup2: %s\n", path, strerror(errno));
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
        fprintf(stderr, "nsa-train: %s %s: expected a non-negative integer\n", flag, s);
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

// The flags. Returns GO_ON, or the exit code of --help, --devices, --list-faults,
// --show-flight-recorder and of a bad flag.
static int parse_args(int argc, char **argv, MainArgs *A) {
    TrainOpts *o = &A->opts;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE                                                                   \
    if (!v) { fprintf(stderr, "nsa-train: %s needs a value (see --help)\n", a); return NSA_EXIT_USAGE; } \
    i++
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(stdout); return NSA_EXIT_OK; }
        else if (!strcmp(a, "--config")) { NEED_VALUE; A->config_path = v; }
        else if (!strcmp(a, "--set")) { NEED_VALUE; A->sets[A->n_sets++] = v; }
        else if (!strcmp(a, "--steps") || !strcmp(a, "--backend")) {
            NEED_VALUE;
            size_t n = strlen(v) + 32;
            char *s = xmalloc(n);
            snprintf(s, n, "train.%s=%s", a + 2, v);
            A->owned[A->n_owned++] = s;
            A->sets[A->n_sets++] = s;
        }
        else if (!strcmp(a, "--out")) { NEED_VALUE; o->out_dir = v; }
        else if (!strcmp(a, "--save")) { NEED_VALUE; o->save = v; }
        else if (!strcmp(a, "--save-every")) { NEED_VALUE; if (parse_int(a, v, &o->save_every)) return NSA_EXIT_USAGE; }
        else if (!strcmp(a, "--resume")) { NEED_VALUE; o->resume = v; }
        else if (!strcmp(a, "--init-weights")) { NEED_VALUE; o->init_weights = v; }
        else if (!strcmp(a, "--write-init")) { NEED_VALUE; o->write_init = v; }
        else if (!strcmp(a, "--allow-config-change")) o->allow_config_change = 1;
        else if (!strcmp(a, "--stop-after")) { NEED_VALUE; if (parse_int(a, v, &o->stop_after)) return NSA_EXIT_USAGE; }
        else if (!strcmp(a, "--dump-step")) { NEED_VALUE; o->dump_step = v; }
        else if (!strcmp(a, "--dump-acts")) o->dump_acts = 1;
        else if (!strcmp(a, "--dump-tensors")) { NEED_VALUE; o->dump_tensors = v; }
        else if (!strcmp(a, "--threads")) {   // one message, saying what it got and the range
            NEED_VALUE;
            char *end = NULL;
            long t = strtol(v, &end, 10);
            if (!*v || *end || t < 1 || t > NSA_MAX_THREADS) {
                fprintf(stderr, "nsa-train: --threads %s: expected a whole number from 1 to %d\n", v, NSA_MAX_THREADS);
                return NSA_EXIT_USAGE;
            }
            A->threads = (int)t;
        }
        else if (!strcmp(a, "--check-config")) A->check_only = 1;
        else if (!strcmp(a, "--devices")) {
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
        else if (!strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--rank")) {
            NEED_VALUE;
            if (parse_int(a, v, &o->rank)) return NSA_EXIT_USAGE;
            A->rank_given = 1;
        }
        else if (!strcmp(a, "--transport")) {
            NEED_VALUE;
            if ((A->transport = comm_transport_parse(v)) < 0) {
                fprintf(stderr, "nsa-train: --transport %s: expected none, mpi or nccl\n", v);
                return NSA_EXIT_USAGE;
            }
        }
        else if (!strcmp(a, "--comm-timeout") || !strcmp(a, "--rdzv-timeout")) {
            NEED_VALUE;
            char *end = NULL;
            double *t = a[2] == 'c' ? &A->comm_timeout : &A->rdzv_timeout;
            *t = strtod(v, &end);
            if (!*v || *end || !(*t > 0) || *t > 1e7) {
                fprintf(stderr, "nsa-train: %s %s: expected a number of seconds > 0\n", a, v);
                return NSA_EXIT_USAGE;
            }
        }
        else if (!strcmp(a, "--bootstrap")) {
            NEED_VALUE;
            if ((A->bootstrap = comm_bootstrap_parse(v)) == -2) {
                fprintf(stderr, "nsa-train: --bootstrap %s: expected auto, mpi, env or slurm\n", v);
                return NSA_EXIT_USAGE;
            }
            A->bootstrap_given = 1;
        }
        else if (!strcmp(a, "--check-world")) A->check_world = 1;
        else if (!strcmp(a, "--log-file")) { NEED_VALUE; A->log_file = v; }
        else if (!strcmp(a, "--trace-grads")) o->trace_grads = 1;
        else if (!strcmp(a, "--gate-stats")) o->gate_stats = 1;
        else if (!strcmp(a, "--flight-recorder")) { NEED_VALUE; o->flight_recorder = v; }
        else if (!strcmp(a, "--stack-file")) { NEED_VALUE; A->stack_file = v; }
        else if (!strcmp(a, "--fault")) {
            NEED_VALUE;
            char ferr[1024];
            if (faults_parse(A->faults, v, ferr, sizeof ferr)) {
                fprintf(stderr, "nsa-train: %s\n", ferr);
                return NSA_EXIT_USAGE;
            }
        }
        else if (!strcmp(a, "--list-faults")) { faults_list(stdout); return NSA_EXIT_OK; }
        else if (!strcmp(a, "--print-env")) A->print_env = 1;
        else if (!strcmp(a, "--protocol-info")) return protocol_info_print(stdout) ? NSA_EXIT_RUNTIME : NSA_EXIT_OK;
        else if (!strcmp(a, "--show-flight-recorder")) {
            NEED_VALUE;
            return flightrec_show(v) ? NSA_EXIT_RUNTIME : NSA_EXIT_OK;
        }
        else {
            fprintf(stderr, "nsa-train: unknown option '%s' (see --help)\n", a);
            return NSA_EXIT_USAGE;
        }
#undef NEED_VALUE
    }
    // no --out: runs/ below the current directory (created), said once, rather than the
    // current directory itself (a source tree would collect metrics.jsonl at its root)
    if (!o->out_dir) {
        o->out_dir = "runs";
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
        fprintf(stderr, "nsa-train: %s=%s: expected a number of seconds > 0\n", name, e);
        return -1;
    }
    return 0;
}

// What the flags did not say: the timeouts and the bootstrap from the environment,
// and the combinations checked before any world exists. Returns GO_ON or the exit code.
static int resolve_defaults(MainArgs *A) {
    if (A->opts.dump_tensors && !A->opts.dump_step) {
        fprintf(stderr, "nsa-train: --dump-tensors %s selects the step dump's tensors: it needs --dump-step FILE\n",
                A->opts.dump_tensors);
        return NSA_EXIT_USAGE;
    }
    const char *dt = A->opts.dump_tensors;
    if (dt && (!dt[0] || dt[0] == ',' || dt[strlen(dt) - 1] == ',' || strstr(dt, ",,"))) {
        fprintf(stderr, "nsa-train: --dump-tensors '%s': expected comma-separated globs of tensor names, none empty "
                        "(e.g. 'grads.*' or 'logits,grads.*')\n", dt);
        return NSA_EXIT_USAGE;
    }
    if (A->opts.dump_acts && !A->opts.dump_step) {
        fprintf(stderr, "nsa-train: --dump-acts adds the activations to the step dump: it needs --dump-step FILE\n");
        return NSA_EXIT_USAGE;
    }
    if (A->opts.init_weights && A->opts.resume) {
        fprintf(stderr, "nsa-train: --init-weights %s and --resume %s both say where the weights come from: give one\n",
                A->opts.init_weights, A->opts.resume);
        return NSA_EXIT_USAGE;
    }
    if (A->opts.write_init && A->opts.resume) {
        fprintf(stderr, "nsa-train: --write-init %s writes the step-0 parameters: it does not take --resume %s\n",
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
            fprintf(stderr, "nsa-train: NSA_BOOTSTRAP=%s: expected auto, mpi, env or slurm\n", getenv("NSA_BOOTSTRAP"));
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
        fprintf(stderr, "nsa-train: --transport %s: %s\n", comm_transport_name(A->transport), why);
        return NSA_EXIT_USAGE;
    }
    int wrc = comm_world_setup(world, A->transport, A->bootstrap, A->check_world, err, errn);
    if (wrc) {
        fprintf(stderr, "nsa-train: %s\n", err);
        return finish(world, wrc);
    }
    if (world->bootstrap != COMM_BOOT_NONE) {
        if (A->rank_given && A->opts.rank != world->rank) {
            if (world->bootstrap == COMM_BOOT_MPI)
                fprintf(stderr, "nsa-train: --rank %d conflicts with the MPI rank %d (under --transport %s the MPI rank "
                        "is used; leave --rank out)\n", A->opts.rank, world->rank, comm_transport_name(A->transport));
            else
                fprintf(stderr, "nsa-train: --rank %d conflicts with the rank %d of the %s bootstrap (%s; leave --rank "
                        "out)\n", A->opts.rank, world->rank, comm_bootstrap_name(world->bootstrap), world->source);
            return finish(world, NSA_EXIT_USAGE);
        }
        A->opts.rank = world->rank;
        setvbuf(stdout, NULL, _IOLBF, 0);   // launchers forward a pipe: lines, not blocks
    } else if (A->bootstrap_given && A->bootstrap != COMM_BOOT_AUTO) {
        fprintf(stderr, "nsa-train: --bootstrap %s: there is no world to join with --transport none (add --transport "
                "nccl, or --check-world)\n", comm_bootstrap_name(A->bootstrap));
        return NSA_EXIT_USAGE;
    } else {
        const char *ws = getenv("WORLD_SIZE");
        if (ws && atoi(ws) > 1 && !getenv("OMPI_COMM_WORLD_RANK"))
            fprintf(stderr, "nsa-train: warning: WORLD_SIZE=%s is set but --transport is none: this process trains "
                    "alone (pass --transport nccl to join the world, docs/ddp.md)\n", ws);
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
        fprintf(stderr, "%s%s\n", err[0] == '[' ? "" : "nsa-train: ", err);
        return finish(world, wrc);
    }
    // the other ranks' stack files (%r in --stack-file): a stall dump lets theirs finish
    // before this rank exits (trainer/stackdump.h)
    if (A->stack_file && strstr(A->stack_file, "%r") && world->world > 1 && !A->check_world) {
        A->p_peer_stacks = calloc((size_t)world->world, sizeof(char *));
        if (!A->p_peer_stacks) return finish(world, NSA_EXIT_RUNTIME);
        A->n_peer_stacks = world->world;
        for (int r = 0; r < world->world; r++)
            if (r != A->opts.rank) A->p_peer_stacks[r] = subst_rank(A->stack_file, r);
        stackdump_set_peers(A->p_peer_stacks, world->world);
    }
    if (world->rdzv && world->world > 1 && !A->check_world)
        fprintf(stderr, "nsa-train: rank %d: joined a world of %d at %s:%d (bootstrap %s, local rank %d of %d) in %.0f ms\n",
                world->rank, world->world, world->rdzv_addr, world->rdzv_port, comm_bootstrap_name(world->bootstrap),
                world->local_rank, world->local_size, world->join_ms);
    if (A->check_world) {
        char line[16384];
        if ((wrc = comm_world_check(world, A->comm_timeout, line, sizeof line, err, errn))) {
            fprintf(stderr, "%s%s\n", err[0] == '[' ? "" : "nsa-train: ", err);
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
        fprintf(stderr, "nsa-train: --config FILE is required (see --help)\n");
        return finish(world, NSA_EXIT_USAGE);
    }
    if (o->save_every && !o->save) {
        fprintf(stderr, "nsa-train: --save-every needs --save FILE\n");
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
        fprintf(stderr, "nsa-train: --allow-config-change applies to --resume FILE, which is not given\n");
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
        fprintf(stderr, "nsa-train: %s\n", terr);
        free_rank_paths(&A);
        return finish(&world, NSA_EXIT_USAGE);
    }
    if (A.out_defaulted && A.opts.rank == 0 && !A.opts.quiet)
        printf("nsa-train: writing metrics.jsonl to %s/ (no --out given)\n", A.opts.out_dir);
    rc = train_run(&A.opts);
    free_rank_paths(&A);
    return finish(&world, rc);
}
