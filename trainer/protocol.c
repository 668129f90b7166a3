// trainer/protocol.c — see protocol.h; the protocol itself is docs/trainer-protocol.md.
//
// Where each list comes from (nothing here is a second copy of a list kept elsewhere,
// except the diagnostics vocabulary below, the protocol's own names):
//   backends, precisions  the pairs the config loader accepts (config_backend_at,
//                         config_precision_at, config_backend_allows), kept when this build
//                         can run them: backend_get() for the CPU backends; the cuda pairs
//                         only with NSA_HAVE_CUDA (backend_get would initialise a device)
//   transports            comm_transport_name/comm_transport_built (trainer/comm.c)
//   bootstraps            comm_bootstrap_name; mpi only when the mpi transport is built
//   ddp_modes             config_ddp_mode_name (common/config.c's table)
//   prefill               config_prefill_name (common/config.c's table)
//   data                  config_data_name (common/config.c's table: the data.kind values)
//   faults                the fault table (trainer/faults.c: faults_name), row by row
//   diagnostics           the protocol's names for nsa-train's diagnostics flags
#include "trainer/protocol.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "kernels/ops.h"
#include "trainer/comm.h"
#include "trainer/faults.h"
#include "nsa_build_info.h"   // generated: NSA_BUILD_GIT_SHA

// The protocol's names of the diagnostics nsa-train implements (docs/trainer-protocol.md
// "Diagnostics"): the flag or file each stands for.
static const char *const DIAGNOSTICS[] = {
    "trace_grads",       // --trace-grads: OUT/grad_trace.jsonl
    "gate_stats",        // --gate-stats: OUT/gate_stats.jsonl
    "dump_step",         // --dump-step FILE: step 1's batch, logits, loss, gradients (safetensors)
    "dump_acts",         // --dump-acts: the activations in the step dump too
    "dump_tensors",      // --dump-tensors GLOBS: only those tensors in the step dump
    "flight_recorder",   // --flight-recorder FILE: the memory-mapped liveness record
    "stack_dump",        // --stack-file FILE: SIGUSR1 -> stack dump, exit 138; crash dumps
    "log_file",          // --log-file FILE: stdout and stderr appended to FILE
    "anomaly",           // exit 3 with OUT/anomaly.json naming the first non-finite tensor
    "buckets",           // data parallel: OUT/buckets.jsonl, [DDP] lines, exit 5
    "init_weights",      // --init-weights FILE: start from these parameters (--write-init FILE writes them)
};

static int has_name(const json_t *arr, const char *s) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) if (!strcmp(json_string_value(v), s)) return 1;
    return 0;
}

static void add_unique(json_t *arr, const char *s) {
    if (!has_name(arr, s)) json_array_append_new(arr, json_string(s));
}

// Every (backend, precision) pair the config loader accepts and this build can run.
static void backends(json_t *feat) {
    json_t *b = json_array(), *p = json_array();
    for (int i = 0; config_backend_at(i); i++)
        for (int j = 0; config_precision_at(j); j++) {
            const char *be = config_backend_at(i), *pr = config_precision_at(j);
            if (!config_backend_allows(be, pr)) continue;
#ifndef NSA_HAVE_CUDA
            if (!strcmp(be, "cuda")) continue;   // asking backend_get would probe for a device
#endif
            if (strcmp(be, "cuda") && !backend_get(be, pr, NULL)) continue;
            add_unique(b, be);
            add_unique(p, pr);
        }
    json_object_set_new(feat, "backends", b);
    json_object_set_new(feat, "precisions", p);
}

// COMM_NONE, COMM_MPI, ... as long as a value's name parses back to it
static json_t *transports(void) {
    json_t *a = json_array();
    for (int t = COMM_NONE; comm_transport_parse(comm_transport_name(t)) == t; t++)
        if (comm_transport_built(t, NULL)) json_array_append_new(a, json_string(comm_transport_name(t)));
    return a;
}

// COMM_BOOT_MPI, ENV, SLURM: where a rank learns rank/world/local rank; mpi needs MPI
static json_t *bootstraps(void) {
    json_t *a = json_array();
    for (int b = COMM_BOOT_MPI; comm_bootstrap_parse(comm_bootstrap_name(b)) == b; b++)
        if (b != COMM_BOOT_MPI || comm_transport_built(COMM_MPI, NULL))
            json_array_append_new(a, json_string(comm_bootstrap_name(b)));
    return a;
}

static json_t *ddp_modes(void) {
    json_t *a = json_array();
    for (int m = 0; strcmp(config_ddp_mode_name(m), "?"); m++) json_array_append_new(a, json_string(config_ddp_mode_name(m)));
    return a;
}

static json_t *prefill_modes(void) {
    json_t *a = json_array();
    for (int v = 0; strcmp(config_prefill_name(v), "?"); v++) json_array_append_new(a, json_string(config_prefill_name(v)));
    return a;
}

// data.kind: every value the config loader accepts (trainer/data.c implements each)
static json_t *data_kinds(void) {
    json_t *a = json_array();
    for (int v = 0; strcmp(config_data_name(v), "?"); v++) json_array_append_new(a, json_string(config_data_name(v)));
    return a;
}

// The names of the fault table, row by row.
static json_t *fault_names(void) {
    json_t *a = json_array();
    for (int i = 0; faults_name(i); i++) json_array_append_new(a, json_string(faults_name(i)));
    return a;
}

char *protocol_info_json(void) {
    json_t *root = json_object(), *feat = json_object();
    json_object_set_new(root, "protocol", json_integer(NSA_TRAINER_PROTOCOL));
    json_object_set_new(root, "trainer", json_string("nsa-train"));
    json_object_set_new(root, "version", json_string(NSA_BUILD_GIT_SHA));
    backends(feat);
    json_object_set_new(feat, "transports", transports());
    json_object_set_new(feat, "bootstraps", bootstraps());
    json_object_set_new(feat, "ddp_modes", ddp_modes());
    json_object_set_new(feat, "prefill", prefill_modes());
    json_object_set_new(feat, "data", data_kinds());
    json_object_set_new(feat, "faults", fault_names());
    json_t *d = json_array();
    for (size_t i = 0; i < sizeof DIAGNOSTICS / sizeof DIAGNOSTICS[0]; i++) json_array_append_new(d, json_string(DIAGNOSTICS[i]));
    json_object_set_new(feat, "diagnostics", d);
    json_object_set_new(root, "features", feat);
    char *js = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return js;
}

int protocol_info_print(FILE *out) {
    char *js = protocol_info_json();
    if (!js) return -1;
    int rc = fprintf(out, "%s\n", js) < 0 || fflush(out) ? -1 : 0;
    free(js);
    return rc;
}
