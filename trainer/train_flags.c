// trainer/train_flags.c — see train_flags.h.
#include "trainer/train_flags.h"

#include <getopt.h>
#include <string.h>

// Every flag of nsa-train, in --help's order. The text rows between them are --help's
// headings and the paragraphs that belong to no single flag.
const TrainFlag TRAIN_FLAGS[] = {
    {NULL, NULL, 0,
     "usage: nsa-train --config FILE [options]\n"
     "\n"
     "Trains the NSA decoder described by a JSON config (configs/*.json, docs/config.md)\n"
     "and prints one line per step: step, loss, grad norm, lr, ms, tok/s.\n"
     "\n"
     "options:\n"},
    {"config", "FILE", FLAG_CONFIG, "model/training config (required)"},
    {"set", "KEY=VALUE", FLAG_SET,
     "override a config value, e.g. --set nsa.w=64 --set train.checkpoint_layers=[0,2] (VALUE is JSON; anything "
     "that is not JSON is taken as a string); repeatable"},
    {"steps", "N", FLAG_STEPS, "same as --set train.steps=N"},
    {"backend", "NAME", FLAG_BACKEND, "same as --set train.backend=NAME (cpu, cpu64, cuda)"},
    {"out", "DIR", FLAG_OUT,
     "write metrics.jsonl (and anomaly.json) here (default runs, below the current directory: created; .gitignore "
     "covers it in the source tree)"},
    {"save", "FILE", FLAG_SAVE,
     "write a checkpoint (safetensors, a digest64 checksum per tensor) at the end of the run; FILE's directory must "
     "exist and be writable (checked at start: exit 2)"},
    {"save-every", "N", FLAG_SAVE_EVERY, "with --save: also every N steps"},
    {"resume", "FILE", FLAG_RESUME,
     "continue from a checkpoint (weights, AdamW state, data position); every tensor is verified against its "
     "checksum (a corrupt one is named, exit 1); a checkpoint of another config is exit 2 naming the keys that "
     "differ (train.steps and name may differ); one already at train.steps (or --stop-after) is 'nothing to do', "
     "exit 0"},
    {"init-weights", "FILE", FLAG_INIT_WEIGHTS,
     "start from the parameters in FILE (safetensors: every parameter of the config by its name and shape, F32 or "
     "F64, cast to the master precision) instead of the seeded init; a missing, extra, misshapen or non-float "
     "tensor is exit 2 naming it and FILE. Every rank loads the same file (docs/diagnostics.md, \"Start weights\")"},
    {"write-init", "FILE", FLAG_WRITE_INIT,
     "write the step-0 parameters (F32; F64 on backend cpu64) under their names to FILE and exit 0 without data "
     "or training (needs only --config and --set)"},
    {"allow-config-change", NULL, FLAG_ALLOW_CONFIG_CHANGE,
     "with --resume: resume a checkpoint of another config anyway (the differing keys are printed as a warning)"},
    {"stop-after", "N", FLAG_STOP_AFTER, "stop after step N (the LR schedule still spans train.steps)"},
    {"dump-step", "FILE", FLAG_DUMP_STEP,
     "write step 1's batch, logits, loss and every gradient (safetensors; logits F32, F64 on the fp64 backend)"},
    {"dump-acts", NULL, FLAG_DUMP_ACTS,
     "with --dump-step: also every layer's forward activations (acts.blocks.L.*)"},
    {"dump-tensors", "GLOBS", FLAG_DUMP_TENSORS,
     "with --dump-step: only the tensors matching one of these comma-separated fnmatch globs (e.g. 'grads.*', "
     "'logits,acts.blocks.0.*'), the others not even copied from the device; inputs, targets, loss and the "
     "metadata always"},
    {"threads", "N", FLAG_THREADS, "CPU threads, 1 to 1024 (default: all cores)"},
    {"check-config", NULL, FLAG_CHECK_CONFIG, "validate the config, print it as canonical JSON, exit"},
    {"devices", NULL, FLAG_DEVICES, "print the CUDA devices this build can use, exit"},
    {"quiet", NULL, FLAG_QUIET, "no per-step lines"},
    {"log-file", "FILE", FLAG_LOG_FILE,
     "redirect this process's stdout and stderr to FILE (appended, line-buffered)"},
    {"help", NULL, FLAG_HELP, "this text (also -h)"},
    {NULL, NULL, 0,
     "\n"
     "data parallel (docs/ddp.md): mpirun -np W nsa-train ... --transport mpi|nccl, or without MPI:\n"
     "  RANK=R WORLD_SIZE=W MASTER_ADDR=A MASTER_PORT=P nsa-train ... --transport nccl (torchrun, Kubernetes),\n"
     "  srun -n W nsa-train ... --transport nccl (Slurm)\n"},
    {"transport", "T", FLAG_TRANSPORT,
     "none (default: one process), mpi (host buffers; the CPU path and the A/B transport; MPI only), nccl (GPU "
     "buffers, cuda backend). One GPU per rank (device = local rank)"},
    {"bootstrap", "B", FLAG_BOOTSTRAP,
     "where rank/world/local rank come from (default auto, or $NSA_BOOTSTRAP): auto = an MPI launcher's variables "
     "(OMPI_COMM_WORLD_RANK, PMIX_RANK, PMI_RANK) > RANK/WORLD_SIZE (env) > SLURM_PROCID (slurm); mpi, env, slurm "
     "force one. env and slurm meet at a TCP rendezvous on MASTER_ADDR:MASTER_PORT (Slurm: the first host of the "
     "node list, port MASTER_PORT or 20000 + SLURM_JOB_ID % 10000); nccl only"},
    {"rdzv-timeout", "S", FLAG_RDZV_TIMEOUT,
     "seconds the rendezvous waits for every rank (default: --comm-timeout, or $NSA_RDZV_TIMEOUT); a rank that "
     "never arrives is [COMM-TIMEOUT] naming it, exit 4"},
    {"check-world", NULL, FLAG_CHECK_WORLD,
     "join the world (bootstrap and rendezvous; no GPU, no config needed), broadcast rank 0's bytes, allgather "
     "every rank's record, print one [WORLD] line, exit 0"},
    {"comm-timeout", "S", FLAG_COMM_TIMEOUT,
     "seconds a collective may take before the rank reports [COMM-TIMEOUT] and exits 4 (default 300, or "
     "$NSA_COMM_TIMEOUT)"},
    {NULL, NULL, 0,
     "  every path flag (--out, --log-file, --flight-recorder, --stack-file, --dump-step, --save, --resume,\n"
     "  --init-weights, --write-init)\n"
     "  replaces %r by the rank, e.g. --log-file OUT/ranks/rank_%r.log\n"
     "\n"
     "diagnostics (docs/diagnostics.md; each off by default and free when off):\n"},
    {"rank", "R", FLAG_RANK,
     "this process's rank (default 0): in every trace, targets the rank faults; under --transport mpi|nccl the "
     "world's rank is used (a different --rank is an error)"},
    {"trace-grads", NULL, FLAG_TRACE_GRADS,
     "gradient-arrival trace: OUT/grad_trace.jsonl (one line per step) and [GRAD-TRACE] step=S rank=R arrived=N "
     "missing=M lines on stdout"},
    {"gate-stats", NULL, FLAG_GATE_STATS,
     "per-layer gate statistics of each step's first forward: OUT/gate_stats.jsonl"},
    {"flight-recorder", "FILE", FLAG_FLIGHT_RECORDER,
     "memory-mapped recorder of phase/step/layer/op, heartbeat and the last 256 events, readable by another "
     "process while this one runs or hangs"},
    {"show-flight-recorder", "FILE", FLAG_SHOW_FLIGHT_RECORDER,
     "print a recorder file (state and events) as JSON, exit"},
    {"stack-file", "FILE", FLAG_STACK_FILE,
     "where stack dumps go (default stderr): SIGUSR1 dumps the main thread's stack and the flight recorder and "
     "exits 138; SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT dump the faulting thread's stack and re-raise the signal"},
    {"fault", "NAME[=ARG]", FLAG_FAULT, "inject a fault (repeatable); --list-faults describes them"},
    {"list-faults", NULL, FLAG_LIST_FAULTS, "list the faults: name, argument, what it breaks, who catches it; exit"},
    {"print-env", NULL, FLAG_PRINT_ENV, "print build/CUDA/host/env facts (and --config's) as JSON, exit"},
    {"protocol-info", NULL, FLAG_PROTOCOL_INFO,
     "print the trainer protocol's handshake (protocol version, build, supported backends, transports, faults, "
     "diagnostics...) as one JSON line, exit (docs/trainer-protocol.md)"},
    {NULL, NULL, 0,
     "\n"
     "exit codes: 0 ok, 1 runtime failure, 2 usage or invalid config, 3 non-finite value\n"
     "(the first non-finite tensor is named on stderr and in OUT/anomaly.json), 4 a collective did not\n"
     "complete within --comm-timeout (data parallel; [COMM-TIMEOUT] names the collective and its bucket), or\n"
     "the rendezvous did not complete ([COMM-TIMEOUT]/[COMM-ERROR] name the missing ranks or rank 0's address),\n"
     "5 static_graph: the used parameters differ across ranks or from the recorded step ([DDP] names them),\n"
     "6 an artifact could not be written (disk full, I/O error: metrics.jsonl, traces, anomaly.json, the\n"
     "dump, a checkpoint, the flight recorder); stderr has one line [IO-ERROR] file=PATH errno=N TEXT,\n"
     "138 stall dump after SIGUSR1; a crash ends by its signal (shell status 128+signal)\n"},
};
const int TRAIN_N_FLAGS = (int)(sizeof TRAIN_FLAGS / sizeof TRAIN_FLAGS[0]);

const TrainFlag *train_flag_find(const char *name) {
    for (int i = 0; i < TRAIN_N_FLAGS; i++)
        if (TRAIN_FLAGS[i].name && !strcmp(TRAIN_FLAGS[i].name, name)) return &TRAIN_FLAGS[i];
    return NULL;
}

const struct option *train_flags_getopt(void) {
    static struct option opts[sizeof TRAIN_FLAGS / sizeof TRAIN_FLAGS[0] + 1];
    if (!opts[0].name) {
        int n = 0;
        for (int i = 0; i < TRAIN_N_FLAGS; i++) {
            const TrainFlag *f = &TRAIN_FLAGS[i];
            if (!f->name) continue;
            opts[n++] = (struct option){f->name, f->arg ? required_argument : no_argument, NULL, f->id};
        }
        opts[n] = (struct option){0, 0, 0, 0};
    }
    return opts;
}

int train_flag_word_ok(const char *word) {
    if (word[0] != '-') return 1;
    if (!strcmp(word, "-h")) return 1;
    return word[1] == '-' && train_flag_find(word + 2) != NULL;
}

// text wrapped at spaces to TRAIN_HELP_WIDTH, every line after the first indented to
// TRAIN_HELP_INDENT; the first line starts at column `col`
static void put_wrapped(FILE *f, const char *text, int col) {
    const char *p = text;
    while (*p) {
        size_t room = (size_t)(col < TRAIN_HELP_WIDTH - 40 ? TRAIN_HELP_WIDTH - col : 40), n = strlen(p);
        if (n > room) {   // the last space within the room (a longer word goes on one line)
            size_t cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) cut = strcspn(p, " ");
            n = cut;
        }
        fprintf(f, "%.*s\n", (int)n, p);
        p += n;
        while (*p == ' ') p++;
        if (*p) fprintf(f, "%*s", TRAIN_HELP_INDENT, "");
        col = TRAIN_HELP_INDENT;
    }
}

void train_flags_help(FILE *f) {
    for (int i = 0; i < TRAIN_N_FLAGS; i++) {
        const TrainFlag *r = &TRAIN_FLAGS[i];
        if (!r->name) {
            fputs(r->help, f);
            continue;
        }
        char head[64];
        snprintf(head, sizeof head, "--%s%s%s", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
        // the name in a column of its own; a longer one pushes its text to the right
        int col = fprintf(f, "  %-*s  ", TRAIN_HELP_INDENT - 4, head);
        put_wrapped(f, r->help, col);
    }
}
