// harness/report/diagnosis.c — see diagnosis.h.
#define _POSIX_C_SOURCE 200809L
#include "harness/report/diagnosis.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/nsa_names.h"
#include "harness/artifacts/pystack.h"
#include "harness/core/home.h"
#include "harness/report/plot.h"

int family_count_verdict(const ScenarioRun *sr, int v) {
    int n = 0;
    for (int i = 0; i < sr->n; i++) n += sr->results[i].verdict == v;
    return n;
}

// The label of case i on the axis named `axis`, or NULL.
const char *family_label_on(const ScenarioRun *sr, int i, const char *axis) {
    for (int a = 0; a < sr->s->n_axes; a++)
        if (!strcmp(sr->s->axes[a].name, axis)) return sr->results[i].c->labels[a];
    return NULL;
}

void family_names_list(Str *s, const json_t *arr, int max) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if ((int)i == max) {
            str_printf(s, ", … (%zu more)", json_array_size(arr) - i);
            return;
        }
        if (json_is_string(v)) str_printf(s, "%s`%s`", i ? ", " : "", json_string_value(v));
        else str_printf(s, "%s%lld", i ? ", " : "", (long long)json_integer_value(v));
    }
}

// Frames that say how the stack was taken, how the thread waits or how the C library
// ends a process (abort on a corrupted heap: raise, abort, __libc_message,
// malloc_printerr), not where the program is: skipped when naming where a stack "stops".
static int uninteresting(const char *fn) {
    while (!strncmp(fn, "__GI_", 5)) fn += 5;   // glibc's internal aliases
    while (*fn == '_') fn++;
    static const char *const skip[] = {"libc_pause", "pause", "nanosleep", "clock_nanosleep", "restore_rt", "raise",
                                       "abort", "pthread_kill", "sleep", "usleep", "stackdump_", "on_fatal_signal",
                                       "on_stall_signal", "futex", "poll", "epoll_wait", "syscall", "sched_yield",
                                       "libc_message", "malloc_printerr", "fortify_fail", "chk_fail",
                                       "nap", "??", NULL};   // nap: the trainer's own polling sleep
    for (int i = 0; skip[i]; i++)
        if (!strncmp(fn, skip[i], strlen(skip[i]))) return 1;
    return 0;
}

// A frame of a shared library (the C library, libgcc, libgomp, libstdc++, MPI, CUDA...),
// by its module: "[libc.so.6]" in the symbolized section, "/usr/lib/.../libgomp.so.1 + 0x.."
// in the raw one. The trainer's own code is its executable (nsa-train), never a ".so".
static int library_frame(const char *ln) {
    const char *m = strrchr(ln, '[');   // symbolized: "... [module]"
    const char *end = m ? strchr(m, ']') : NULL;
    char mod[256];
    if (m && end) snprintf(mod, sizeof mod, "%.*s", (int)(end - m - 1), m + 1);
    else {   // raw: "0x...  /path/libX.so.N + 0x...": the file name of the path
        const char *plus = strstr(ln, " + "), *base = ln;
        for (const char *c = ln; plus && c < plus; c++)
            if (*c == '/' || *c == ' ') base = c + 1;
        snprintf(mod, sizeof mod, "%.*s", plus ? (int)(plus - base) : (int)strlen(base), base);
    }
    return strstr(mod, ".so") != NULL || !strncmp(mod, "ld-linux", 8) || !strncmp(mod, "linux-vdso", 10);
}

// The first frame of a stack file worth naming, as "function (file:line)" with
// the source directory stripped; a Python trainer's (faulthandler) from its Current
// thread block (harness/artifacts/pystack.h); else from the symbolized section when there is one,
// else the raw "module + offset". The first frame of the trainer's own code: a crash
// inside a library (free() aborting on a heap that an overflow corrupted, a segfault in
// libgomp) names where our code called it; only a stack with no frame of our code names
// the library's. 0 or -1.
static int top_frame(const char *stack_path, char *out, size_t n) {
    char *text = read_file(stack_path, NULL);
    if (!text) return -1;
    if (pystack_top(text, harness_home(), out, n) == 0) {   // a Python trainer's faulthandler dump
        free(text);
        return 0;
    }
    int found = -1, symbolized = strstr(text, "symbolized") != NULL, in_sym = 0;
    char lib[1400] = "";   // the first frame worth naming, in a library: named if no frame of ours is
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln && found < 0; ln = strtok_r(NULL, "\n", &save)) {
        if (strstr(ln, "symbolized")) in_sym = 1;
        if (symbolized && !in_sym) continue;
        while (*ln == ' ') ln++;
        if (ln[0] != '#') continue;
        char *p = ln + 1;
        while (*p >= '0' && *p <= '9') p++;
        while (*p == ' ') p++;
        const int in_lib = library_frame(p);
        char name[1400];
        if (symbolized) {
            // "func at file:line (discriminator k)  [module]"
            char fn[256] = "", loc[1024] = "";
            char *at = strstr(p, " at ");
            if (!at) continue;
            snprintf(fn, sizeof fn, "%.*s", (int)(at - p), p);
            if (uninteresting(fn)) continue;
            snprintf(loc, sizeof loc, "%s", at + 4);
            char *cut = strstr(loc, " (discriminator");
            if (!cut) cut = strstr(loc, "  [");
            if (cut) *cut = '\0';
            const char *rel = loc;
            size_t sl = strlen(harness_home());
            if (sl && !strncmp(loc, harness_home(), sl) && loc[sl] == '/') rel = loc + sl + 1;
            snprintf(name, sizeof name, "%s (%s)", fn, rel);
        } else {
            snprintf(name, sizeof name, "%s", p);
        }
        if (in_lib) {
            if (!lib[0]) snprintf(lib, sizeof lib, "%s", name);
            continue;
        }
        snprintf(out, n, "%s", name);
        found = 0;
    }
    if (found < 0 && lib[0]) {
        snprintf(out, n, "%s", lib);
        found = 0;
    }
    free(text);
    return found;
}

void diagnose_generic(const ScenarioRun *sr, Str *md) {
    for (int i = 0; i < sr->n; i++) {
        const CaseResult *r = &sr->results[i];
        if (r->verdict == V_HANG) {
            for (int k = 0; k < r->n_ranks; k++) {
                const RankResult *rk = &r->ranks[k];
                if (!rk->stalled) continue;
                str_printf(md, "- **%s · %s HANG**: rank %d stalled", sr->s->name, r->c->name, rk->rank);
                if (rk->have_state) {
                    str_printf(md, " in phase `%s` at step %d", rk->phase, rk->step);
                    if (rk->layer >= 0) str_printf(md, ", layer %d", rk->layer);
                    if (rk->op[0]) str_printf(md, ", op `%s`", rk->op);
                    if (rk->coll_enqueued || rk->coll_completed)
                        str_printf(md, ", collective seq enqueued %lld / started %lld / completed %lld", rk->coll_enqueued,
                                   rk->coll_started, rk->coll_completed);
                } else {
                    str_add(md, " before its flight recorder appeared (start-up)");
                }
                str_printf(md, "; no heartbeat for %.1f s", rk->heartbeat_age_s);
                char fr[1400];
                if (rk->dumped && top_frame(rk->stack_path, fr, sizeof fr) == 0)
                    str_printf(md, "; its stack stops in `%s`", fr);
                else if (!rk->dumped)
                    str_add(md, "; it did not answer SIGUSR1 with a stack (killed)");
                str_add(md, ".\n");
            }
        } else if (r->verdict == V_CRASH) {
            const RankResult *rk = r->n_ranks ? &r->ranks[0] : NULL;
            for (int k = 0; k < r->n_ranks; k++)
                if (r->ranks[k].term_signal || (r->ranks[k].exited && r->ranks[k].exit_code)) {
                    rk = &r->ranks[k];
                    break;
                }
            str_printf(md, "- **%s · %s CRASH**: %s", sr->s->name, r->c->name, r->summary);
            char fr[1400];
            if (rk && top_frame(rk->stack_path, fr, sizeof fr) == 0) str_printf(md, "; the stack stops in `%s`", fr);
            str_add(md, ".\n");
        } else if (r->verdict == V_ERROR) {
            str_printf(md, "- **%s · %s ERROR**: %s.\n", sr->s->name, r->c->name, r->summary);
        }
    }
}

void family_metric_plot(const ScenarioRun *sr, const char *report_dir, Str *md, const char *metric,
                        const char *file, const char *title, const char *ylabel, double scale) {
    PlotSeries *ser = xcalloc((size_t)sr->n + 1, sizeof(PlotSeries));
    double **buf = xcalloc((size_t)sr->n + 1, sizeof(double *));
    int ns = 0, maxn = 0;
    for (int i = 0; i < sr->n; i++) {
        const json_t *m = sr->results[i].metrics;
        if (!m || json_array_size(m) == 0) continue;
        int n = (int)json_array_size(m);
        buf[i] = xcalloc((size_t)2 * n, sizeof(double));
        for (int k = 0; k < n; k++) {
            const json_t *rec = json_array_get(m, (size_t)k);
            buf[i][k] = json_number_or(rec, "step", k + 1);
            buf[i][n + k] = json_number_or(rec, metric, NAN) * scale;
        }
        ser[ns++] = (PlotSeries){sr->results[i].c->name, buf[i], buf[i] + n, n};
        if (n > maxn) maxn = n;
    }
    if (ns && maxn >= 2) {
        char dir[4096], path[4400], t[300];
        snprintf(dir, sizeof dir, "%s/%s", report_dir, sr->s->name);
        mkdir_p(dir);
        snprintf(path, sizeof path, "%s/%s", dir, file);
        snprintf(t, sizeof t, "%s: %s", sr->s->name, title);
        if (plot_lines(path, t, "step", ylabel, ser, ns) == 0)
            str_printf(md, "\n![%s, %s](%s/%s)\n", title, sr->s->name, sr->s->name, file);
    }
    for (int i = 0; i < sr->n; i++) free(buf[i]);
    free(buf);
    free(ser);
}

void section_loss_plot(const ScenarioRun *sr, const char *report_dir, Str *md) {
    family_metric_plot(sr, report_dir, md, "loss", "loss.svg", "training loss", "loss", 1.0);
}
