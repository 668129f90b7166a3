// trainer/timing.c — NSA_TRAIN_TIMING: where nsa-train's time goes (see timing.h).
#define _POSIX_C_SOURCE 200809L   // clock_gettime, CLOCK_BOOTTIME (linux/time.h via time.h)
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/envparse.h"
#include "common/log.h"
#include "common/util.h"
#include "trainer/ioerr.h"
#include "trainer/timing.h"

#ifndef CLOCK_BOOTTIME
#define CLOCK_BOOTTIME 7   // Linux; the kernel's starttime counts from boot, suspend included
#endif

#define TM_MAXPARTS 24

static struct {
    int on;
    double exec_to_main;     // seconds, or -1 when /proc says nothing
    double mark[TM_COUNT];   // CLOCK_MONOTONIC seconds (0: not reached)
    // steps
    int steps;
    double first, first_fwd, first_bwd;
    double later_sum, later_min, later_max;
    // the backend's parts
    const Backend *be;
    // the model's graph counters (copied by timing_model)
    int have_model, seq;
    int captures, replays, eager, failures, graphs, lanes;
    size_t nodes;
    double capture_s;
} T;

// The process's start time relative to now, in seconds (exec→main when called at main's start):
// /proc/self/stat field 22 (starttime, clock ticks since boot) against CLOCK_BOOTTIME. -1 when
// either is unavailable.
static double since_process_start(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    if (!f) return -1;
    char buf[1024];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');   // the command name may hold spaces and parentheses
    if (!p) return -1;
    p++;
    // fields 3..22 follow: state is field 3, starttime field 22 (19 fields after state)
    unsigned long long start = 0;
    int field = 2;
    char *save = NULL;
    char *q = strtok_r((char *)p, " ", &save);
    while (q) {
        field++;
        if (field == 22) {
            start = strtoull(q, NULL, 10);
            break;
        }
        q = strtok_r(NULL, " ", &save);
    }
    long hz = sysconf(_SC_CLK_TCK);
    struct timespec ts;
    if (field != 22 || hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts)) return -1;
    double now = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    double d = now - (double)start / (double)hz;
    return d >= 0 ? d : 0;
}

int timing_init(char *err, size_t errlen) {
    memset(&T, 0, sizeof T);
    T.mark[TM_MAIN] = mono_s();
    int on = 0;
    if (nsa_env_int("NSA_TRAIN_TIMING", 0, 1, &on, err, errlen) < 0) return -1;
    T.on = on;
    T.exec_to_main = on ? since_process_start() : -1;
    return 0;
}

int timing_on(void) { return T.on; }

void timing_mark(int which) {
    if (which >= 0 && which < TM_COUNT) T.mark[which] = mono_s();
}

void timing_step(double secs, double fwd, double bwd) {
    if (T.steps++ == 0) {
        T.first = secs;
        T.first_fwd = fwd;
        T.first_bwd = bwd;
        return;
    }
    T.later_sum += secs;
    if (T.steps == 2 || secs < T.later_min) T.later_min = secs;
    if (T.steps == 2 || secs > T.later_max) T.later_max = secs;
}

void timing_backend(const Backend *be) { T.be = be; }

void timing_model(const Model *m) {
    T.have_model = 1;
    T.seq = m->cfg.prefill == NSA_PREFILL_SEQUENTIAL;
    T.captures = m->seq_graph.captures;
    T.replays = m->seq_graph.replays;
    T.eager = m->seq_graph.eager;
    T.failures = m->seq_graph.failures;
    T.graphs = m->seq_graph.n;
    T.lanes = m->seq_graph.lanes > 1 ? m->seq_graph.lanes : 1;
    T.nodes = m->seq_graph.nodes;
    T.capture_s = m->seq_graph.capture_s;
}

// the span between two marks, or -1 when either was not reached
static double span(int a, int b) {
    return T.mark[a] > 0 && T.mark[b] > 0 ? T.mark[b] - T.mark[a] : -1;
}

// "name 0.123 s" (or "name -" when not measured), appended
static void put(Str *s, const char *name, double secs, int *first) {
    str_printf(s, "%s%s ", *first ? "" : ", ", name);
    *first = 0;
    if (secs < 0) str_printf(s, "-");
    else str_printf(s, secs < 0.0995 ? "%.3f s" : "%.2f s", secs);
}

static void jset(json_t *o, const char *k, double v) {
    json_object_set_new(o, k, v < 0 ? json_null() : json_real(v));
}

void timing_report(const char *dir, int rank) {
    if (!T.on) return;
    const double now = mono_s();
    const double start = T.exec_to_main >= 0 ? T.mark[TM_MAIN] - T.exec_to_main : T.mark[TM_MAIN];
    const char *pn[TM_MAXPARTS];
    double ps[TM_MAXPARTS];
    int np = T.be && T.be->startup_times ? T.be->startup_times(pn, ps, TM_MAXPARTS) : 0;

    json_t *j = json_object();
    Str s = {0};
    int first = 1;
    str_printf(&s, "timing: ");
    put(&s, "exec→main", T.exec_to_main, &first);
    jset(j, "exec_to_main_s", T.exec_to_main);
    put(&s, "args+config", span(TM_MAIN, TM_CONFIG), &first);
    jset(j, "args_config_s", span(TM_MAIN, TM_CONFIG));
    put(&s, "backend init", span(TM_CONFIG, TM_BACKEND), &first);
    jset(j, "backend_init_s", span(TM_CONFIG, TM_BACKEND));
    json_t *parts = json_object();
    if (np > 0) {
        str_printf(&s, " (");
        for (int i = 0; i < np; i++) {
            str_printf(&s, "%s%s %.3f", i ? ", " : "", pn[i], ps[i]);
            json_object_set_new(parts, pn[i], json_real(ps[i]));
        }
        str_printf(&s, ")");
    }
    json_object_set_new(j, "backend_parts_s", parts);
    put(&s, "model alloc", span(TM_BACKEND, TM_MODEL), &first);
    jset(j, "model_alloc_s", span(TM_BACKEND, TM_MODEL));
    put(&s, "weight init", span(TM_MODEL, TM_WEIGHTS), &first);
    jset(j, "weight_init_s", span(TM_MODEL, TM_WEIGHTS));
    put(&s, "optimizer state", span(TM_WEIGHTS, TM_OPTIM), &first);
    jset(j, "optimizer_state_s", span(TM_WEIGHTS, TM_OPTIM));
    put(&s, "data", span(TM_OPTIM, TM_DATA), &first);
    jset(j, "data_s", span(TM_OPTIM, TM_DATA));
    put(&s, "first step", T.steps ? T.first : -1, &first);
    jset(j, "first_step_s", T.steps ? T.first : -1);
    if (T.steps) {
        str_printf(&s, " (forward %.3f, backward %.3f, update %.3f)", T.first_fwd, T.first_bwd,
                   T.first - T.first_fwd - T.first_bwd);
        json_t *fp = json_object();
        json_object_set_new(fp, "forward", json_real(T.first_fwd));
        json_object_set_new(fp, "backward", json_real(T.first_bwd));
        json_object_set_new(fp, "update", json_real(T.first - T.first_fwd - T.first_bwd));
        json_object_set_new(j, "first_step_parts_s", fp);
    }
    const int later = T.steps > 1 ? T.steps - 1 : 0;
    const double mean = later ? T.later_sum / later : -1;
    str_printf(&s, ", later steps ");
    if (later) str_printf(&s, mean < 0.0995 ? "%.4f s mean (%d)" : "%.3f s mean (%d)", mean, later);
    else str_printf(&s, "- (0)");
    jset(j, "later_steps_mean_s", mean);
    jset(j, "later_steps_min_s", later ? T.later_min : -1);
    jset(j, "later_steps_max_s", later ? T.later_max : -1);
    json_object_set_new(j, "later_steps", json_integer(later));
    if (T.have_model && T.seq) {
        str_printf(&s, ", sequential prefill: %d eager, %d recorded (%d graph%s, %zu nodes, %d lane%s, %.2f s to "
                   "record), %d replayed%s", T.eager, T.captures, T.graphs, T.graphs == 1 ? "" : "s", T.nodes, T.lanes,
                   T.lanes == 1 ? "" : "s", T.capture_s, T.replays, T.failures ? ", recording failed" : "");
        json_t *g = json_object();
        json_object_set_new(g, "eager", json_integer(T.eager));
        json_object_set_new(g, "captures", json_integer(T.captures));
        json_object_set_new(g, "graphs", json_integer(T.graphs));
        json_object_set_new(g, "nodes", json_integer((json_int_t)T.nodes));
        json_object_set_new(g, "lanes", json_integer(T.lanes));
        json_object_set_new(g, "capture_s", json_real(T.capture_s));
        json_object_set_new(g, "replays", json_integer(T.replays));
        json_object_set_new(g, "failures", json_integer(T.failures));
        json_object_set_new(j, "sequential_graph", g);
    }
    first = 0;
    put(&s, "finish", span(TM_LOOP, TM_FINISH), &first);
    jset(j, "finish_s", span(TM_LOOP, TM_FINISH));
    put(&s, "total", now - start, &first);
    jset(j, "total_s", now - start);
    nsa_log(LOG_STATUS, "%s", str_c(&s));
    fflush(stderr);
    if (dir) {
        char path[1200];
        if (rank == 0) snprintf(path, sizeof path, "%s/timing.json", dir);
        else snprintf(path, sizeof path, "%s/timing.rank%d.json", dir, rank);
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
        if (txt) {
            size_t n = strlen(txt);
            char *t2 = xmalloc(n + 2);
            memcpy(t2, txt, n);
            t2[n] = '\n';
            t2[n + 1] = 0;
            if (write_file_atomic(path, t2, n + 1)) io_error(path, errno);
            free(t2);
            free(txt);
        }
    }
    json_decref(j);
    str_free(&s);
}
