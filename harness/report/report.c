// harness/report/report.c — see report.h. The shape of RESULTS.md follows
// shared/examples/RESULTS.example.md: verdicts first, a diagnosis that cites
// evidence, then the families' tables and plots, then the evidence of every
// case that did not pass, then the environment.
#define _POSIX_C_SOURCE 200809L
#include "harness/report/report.h"
#include "harness/core/counts.h"
#include "harness/report/diagnosis.h"
#include "harness/report/regression_table.h"
#include "harness/report/report_in.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"

int report_row_verdict(const Report *rp, const ScenarioRun *sr, int k, const char **summary) {
    const CaseResult *r = &sr->results[k];
    if (k < sr->done) {
        if (summary) *summary = r->summary;
        return r->verdict;
    }
    const int stopped = rp->finished || rp->interrupted;
    if (summary) *summary = stopped ? (r->summary[0] ? r->summary : "not run") : "not run yet";
    return stopped ? V_SKIP : V_PENDING;
}

void report_counts(const Report *rp, int counts[V_COUNT]) {
    memset(counts, 0, sizeof(int) * V_COUNT);
    for (int i = 0; i < rp->n_runs; i++)
        for (int k = 0; k < rp->runs[i].n; k++) counts[report_row_verdict(rp, &rp->runs[i], k, NULL)]++;
    counts[V_ERROR] += rp->n_invalid;
}

static void counts_line(Str *md, const Report *rp) {
    int c[V_COUNT];
    report_counts(rp, c);
    int total = 0;
    for (int v = 0; v < V_COUNT; v++) total += c[v];
    Str steps = {0};   // an adaptive family's steps beyond its planned cases (harness/core/counts.h)
    if (counts_steps(rp->runs, rp->n_runs, &steps)) {
        total = counts_planned(rp->runs, rp->n_runs, NULL, NULL) + rp->n_invalid;
        str_printf(md, "**%d case%s (%s)", total, total == 1 ? "" : "s", str_c(&steps) + 2);
    } else str_printf(md, "**%d case%s", total, total == 1 ? "" : "s");
    str_free(&steps);
    for (int v = 0; v < V_COUNT; v++)
        if (c[v]) str_printf(md, " · %d %s", c[v], VERDICT_NAMES[v]);
    str_add(md, "**");
}

static const char *verdict_md(int v) {
    static const char *const bold[V_COUNT] = {"PASS", "**FAIL**", "**HANG**", "**CRASH**", "SKIP", "**ERROR**", "PENDING"};
    return bold[v];
}

// ---- RESULTS.md ---------------------------------------------------------------------------

static void env_summary(Str *md, const Report *rp) {
    const json_t *env = rp->env;
    if (!env) return;
    const json_t *b = json_object_get(env, "build"), *h = json_object_get(env, "host");
    const json_t *cu = json_object_get(env, "cuda");
    str_add(md, "\n## Environment\n\n");
    if (h)
        str_printf(md, "- host `%s`, %s, %lld cores, %.1f GiB; %s\n",
                   json_string_value(json_object_get(h, "hostname")) ? json_string_value(json_object_get(h, "hostname")) : "?",
                   json_string_value(json_object_get(h, "cpu_model")) ? json_string_value(json_object_get(h, "cpu_model")) : "?",
                   (long long)json_integer_value(json_object_get(h, "cores")),
                   json_number_value(json_object_get(h, "memory_bytes")) / (1024.0 * 1024 * 1024),
                   json_string_value(json_object_get(h, "kernel")) ? json_string_value(json_object_get(h, "kernel")) : "");
    if (b)
        str_printf(md, "- build: `%s`%s, %s, %s\n",
                   json_string_value(json_object_get(b, "git_sha")) ? json_string_value(json_object_get(b, "git_sha")) : "?",
                   json_is_true(json_object_get(b, "git_dirty")) ? " (dirty)" : "",
                   json_string_value(json_object_get(b, "build_type")) ? json_string_value(json_object_get(b, "build_type")) : "?",
                   json_string_value(json_object_get(b, "c_compiler")) ? json_string_value(json_object_get(b, "c_compiler")) : "?");
    if (cu && json_is_object(cu)) {
        const json_t *devs = json_object_get(cu, "devices");
        str_printf(md, "- CUDA runtime %s, driver %s, %zu device(s)",
                   json_string_value(json_object_get(cu, "runtime")) ? json_string_value(json_object_get(cu, "runtime")) : "?",
                   json_string_value(json_object_get(cu, "driver")) ? json_string_value(json_object_get(cu, "driver")) : "?",
                   json_array_size(devs));
        size_t i;
        json_t *d;
        json_array_foreach(devs, i, d) str_printf(md, "%s %s", i ? "," : ":", json_string_value(json_object_get(d, "name")));
        str_add(md, "\n");
    } else {
        str_add(md, "- no CUDA device in use\n");
    }
    const json_t *mpi = json_object_get(env, "mpi");
    if (json_is_string(mpi)) str_printf(md, "- MPI: %s\n", json_string_value(mpi));
    str_add(md, "- full snapshot: `env.json` · per case: `<scenario>/<case>/env.json` · JUnit: `junit.xml` · "
                "machine-readable: `summary.json`\n");
}

// A case that never started because the disk was full (harness/exec/run_cases.c: run_one).
static int not_run_disk_full(const Report *rp, const CaseResult *r) {
    return rp->disk_full && r->verdict == V_ERROR && !strncmp(r->summary, "not run: disk full", 18);
}

// The header and one row per case of a scenario run (report_row_verdict: run or not).
static void verdict_rows(const Report *rp, const ScenarioRun *sr, Str *md, int with_time) {
    str_add(md, with_time ? "| scenario | case | verdict | time | evidence |\n|---|---|---|---|---|\n"
                          : "| scenario | case | verdict | evidence |\n|---|---|---|---|\n");
    for (int k = 0; k < sr->n; k++) {
        const CaseResult *r = &sr->results[k];
        const char *summary;
        const int v = report_row_verdict(rp, sr, k, &summary);
        str_add(md, "| ");
        str_add_md_cell(md, sr->s->name);
        str_add(md, " | ");
        str_add_md_cell(md, r->c->name);
        str_printf(md, " | %s | ", verdict_md(v));
        if (with_time) {
            char t[32] = "—";
            if (k < sr->done && r->verdict != V_SKIP && !not_run_disk_full(rp, r)) fmt_duration(t, sizeof t, r->wall_s);
            str_printf(md, "%s | ", t);
        }
        str_add_md_cell(md, summary);
        str_add(md, " |\n");
    }
}

// The verdict tables (RESULTS.md with the time column, the GitHub step summary without):
// the invalid scenario files first, then per scenario its name, what it checks (its
// description) and file, and its cases' rows. heading: "###" in RESULTS.md.
static void verdict_table(const Report *rp, Str *md, int with_time, const char *heading) {
    if (rp->n_invalid) {
        str_printf(md, "%s invalid scenario files\n\nNot run: each names its first problem (all of them under "
                       "*Invalid scenarios*).\n\n", heading);
        str_add(md, with_time ? "| scenario | case | verdict | time | evidence |\n|---|---|---|---|---|\n"
                              : "| scenario | case | verdict | evidence |\n|---|---|---|---|\n");
    }
    for (int i = 0; i < rp->n_invalid; i++) {
        str_add(md, "| ");
        str_add_md_cell(md, rp->invalid[i].file);
        str_printf(md, " | — | **ERROR** |%s invalid scenario: ", with_time ? " — |" : "");
        const char *p = rp->invalid[i].problems, *nl = strchr(p, '\n');
        Str first = {0};
        str_addn(&first, p, nl ? (size_t)(nl - p) : strlen(p));
        str_add_md_cell(md, str_c(&first));
        str_free(&first);
        int n = 0;
        for (const char *q = p; *q; q++) n += *q == '\n';
        if (n > 1) str_printf(md, " (+%d more)", n - 1);
        str_add(md, " |\n");
    }
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        if (rp->n_invalid || i) str_add(md, "\n");
        str_printf(md, "%s %s\n\n", heading, sr->s->name);
        // what the scenario checks, in its own words (its "description"), and where it is
        str_add_md_cell(md, sr->s->description ? sr->s->description : "");
        str_printf(md, " (`%s`, family %s)\n\n", sr->s->path, sr->s->family);
        if (sr->n) verdict_rows(rp, sr, md, with_time);
        else str_printf(md, "No case of it in this run (no '%s' profile, or none the filters select).\n", rp->profile);
    }
}

// The Diagnosis section's body: the generic rules and every family's, over the
// cases that ran (RESULTS.md and the GitHub step summary).
static void diagnosis_md(const Report *rp, Str *md) {
    Str dg = {0};
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        ScenarioRun part = *sr;
        part.n = sr->done;   // only what ran
        diagnose_generic(&part, &dg);
        const FamilyDef *fam = family_find(sr->s->family);
        if (fam && fam->diagnose) fam->diagnose(&part, &dg);
    }
    if (rp->n_invalid)
        str_printf(&dg, "- %d scenario file%s could not be run: %s (details under *Invalid scenarios*).\n", rp->n_invalid,
                   rp->n_invalid == 1 ? "" : "s", "fix the positions named there");
    if (dg.len) str_add(md, str_c(&dg));
    else {
        int c[V_COUNT];
        report_counts(rp, c);
        if (c[V_FAIL] + c[V_HANG] + c[V_CRASH] + c[V_ERROR] == 0)
            str_add(md, "Nothing to diagnose: every case that ran passed.\n");
        else str_add(md, "No rule of the decision tree matched; see the evidence per case below.\n");
    }
    str_free(&dg);
}

// "`PATH` (nsa-train 1a2b3c4, protocol 1)": which trainer ran, from env.json's runner
// section (its --protocol-info answer; protocol 0 when it gave none)
static void trainer_line(Str *md, const Report *rp) {
    const json_t *runner = json_object_get(rp->env, "runner");
    const char *path = json_string_value(json_object_get(runner, "trainer"));
    if (!path) return;
    const json_t *tp = json_object_get(runner, "trainer_protocol");
    const json_t *info = json_object_get(tp, "info");
    const char *name = json_string_value(json_object_get(info, "trainer"));
    const char *version = json_string_value(json_object_get(info, "version"));
    str_printf(md, " · trainer `%s`", path);
    if (name) str_printf(md, " (%s %.7s, protocol %d)", name, version ? version : "?", (int)json_integer_value(json_object_get(tp, "protocol")));
    else str_add(md, " (protocol 0: no --protocol-info)");
    // the trainers scenarios name (run.trainers): each by its name, command and answer
    const char *tname;
    json_t *t;
    json_object_foreach(json_object_get(runner, "trainers"), tname, t) {
        if (!strcmp(tname, "nsa-train")) continue;
        const json_t *ttp = json_object_get(t, "trainer_protocol"), *ti = json_object_get(ttp, "info");
        Str cmd = {0};
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(t, "command"), i, w) str_printf(&cmd, "%s%s", i ? " " : "", json_string_value(w));
        str_printf(md, " · trainer %s `%s`", tname, str_c(&cmd));
        str_free(&cmd);
        const char *tn = json_string_value(json_object_get(ti, "trainer"));
        const char *tv = json_string_value(json_object_get(ti, "version"));
        if (tn) str_printf(md, " (%s %.7s, protocol %d)", tn, tv ? tv : "?", (int)json_integer_value(json_object_get(ttp, "protocol")));
        else str_add(md, " (protocol 0: no --protocol-info)");
    }
}

// A case's trainer by the name the scenarios use ("nsa-train": the run's default): the one
// that ran it, else the one it names (a case not run yet, or not shown yet: shown = 0).
static const char *case_trainer(const CaseResult *r, int shown) {
    if (shown && r->trainer[0]) return r->trainer;
    return r->c && r->c->run.trainer[0] ? r->c->run.trainer : "nsa-train";
}

// "## Trainers": which trainer ran each case, when the cases ran more than one trainer
// (run.trainers with run.trainer or a matrix over it); nothing when one trainer ran them
// all (the header names it).
static void trainers_section(Str *md, const Report *rp) {
    const char *first = NULL;
    int several = 0;
    for (int i = 0; i < rp->n_runs && !several; i++)
        for (int k = 0; k < rp->runs[i].n && !several; k++) {
            const char *t = case_trainer(&rp->runs[i].results[k], k < rp->runs[i].done);
            if (!first) first = t;
            else several = strcmp(first, t) != 0;
        }
    if (!several) return;
    str_add(md, "\n## Trainers\n\nWhich trainer ran each case (`nsa-train`: the run's default; the others are the "
                "scenarios' `run.trainers`, their commands in the header and in env.json `runner.trainers`).\n\n"
                "| scenario | case | trainer |\n|---|---|---|\n");
    for (int i = 0; i < rp->n_runs; i++)
        for (int k = 0; k < rp->runs[i].n; k++) {
            const CaseResult *r = &rp->runs[i].results[k];
            str_add(md, "| ");
            str_add_md_cell(md, rp->runs[i].s->name);
            str_add(md, " | ");
            str_add_md_cell(md, r->c->name);
            str_printf(md, " | `%s` |\n", case_trainer(r, k < rp->runs[i].done));
        }
}

static char *results_md(const Report *rp) {
    Str md = {0};
    str_printf(&md, "# nsa-harness results — %s · %s%s\n\n", rp->started, rp->sha, rp->dirty ? " (dirty)" : "");
    counts_line(&md, rp);
    char wall[32];
    fmt_duration(wall, sizeof wall, mono_s() - rp->t0);
    str_printf(&md, " · profile `%s` · %s · wall %s", rp->profile, rp->device, wall);
    trainer_line(&md, rp);
    str_printf(&md, " · command `%s`\n", rp->command);
    if (rp->faults && rp->faults[0])
        str_printf(&md, "\n> **Fault injection active** in every case: `%s` (nsa-train --list-faults). Failures below "
                        "are what this run provoked on purpose.\n", rp->faults);
    if (rp->disk_full) {
        int not_run = 0;
        for (int i = 0; i < rp->n_runs; i++)
            for (int k = 0; k < rp->runs[i].done; k++) not_run += not_run_disk_full(rp, &rp->runs[i].results[k]);
        str_printf(&md, "\n> **Disk full**: %s, found after %d of %d cases. No case started after that: %d case%s "
                        "not run (ERROR \"not run: disk full\"). Free some space on that disk, or give `--out` a "
                        "folder on another one, and run again.\n",
                   rp->disk_full_why, rp->disk_full_after, rp->total, not_run, not_run == 1 ? " is" : "s are");
    }
    if (rp->interrupted)
        str_printf(&md, "\n> **Interrupted** by the user after %d of %d cases; the cases not run are listed as SKIP.\n",
                   rp->done, rp->total);
    else if (!rp->finished)
        str_printf(&md, "\n> **Partial report**: %d of %d cases done so far (rewritten after every case; if the run "
                        "was killed, this is where it stopped).\n", rp->done, rp->total);

    str_add(&md, "\n## Verdicts\n\n");
    verdict_table(rp, &md, 1, "###");
    trainers_section(&md, rp);

    str_add(&md, "\n## Diagnosis\n\n");
    diagnosis_md(rp, &md);

    // family sections (tables, plots)
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        const FamilyDef *fam = family_find(sr->s->family);
        ScenarioRun part = *sr;
        part.n = sr->done;
        if (fam && fam->section && part.n > 0) fam->section(&part, rp->dir, &md);
    }

    // evidence per case that did not pass
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        for (int k = 0; k < sr->done; k++) {
            const CaseResult *r = &sr->results[k];
            if (r->verdict == V_PASS || r->verdict == V_SKIP) continue;
            if (not_run_disk_full(rp, r)) continue;   // the header says it
            str_printf(&md, "\n## %s · %s — %s\n\n", sr->s->name, r->c->name, VERDICT_NAMES[r->verdict]);
            if (r->verdict != V_FAIL) {   // a FAIL's evidence starts with its findings, which say it
                str_add(&md, "- ");
                str_add(&md, r->summary);
                str_add(&md, "\n");
            }
            str_add(&md, str_c(&r->evidence));
            str_printf(&md, "- artifacts: `%s/` · reproduce: `%s`\n", r->rel_dir, r->repro);
        }
    }
    if (rp->n_invalid) {
        str_add(&md, "\n## Invalid scenarios\n");
        for (int i = 0; i < rp->n_invalid; i++) {
            str_printf(&md, "\n`%s`:\n\n```\n%s", rp->invalid[i].file, rp->invalid[i].problems);
            if (md.len && md.p[md.len - 1] != '\n') str_add(&md, "\n");
            str_add(&md, "```\n");
        }
    }
    env_summary(&md, rp);
    str_add(&md, "\n## Reproduce one case\n\n`nsa-harness run SCENARIO.json --profile PROFILE --filter 'CASE'` "
                 "(each failing case above lists its exact command); `nsa-harness show DIR` prints this summary again.\n");
    return str_take(&md);
}

// ---- summary.json -------------------------------------------------------------------------------

static json_t *summary_json(const Report *rp) {
    int c[V_COUNT];
    report_counts(rp, c);
    json_t *counts = json_object();
    for (int v = 0; v < V_COUNT; v++) json_object_set_new(counts, VERDICT_NAMES[v], json_integer(c[v]));
    json_t *cases = json_array();
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        for (int k = 0; k < sr->n; k++) {
            const CaseResult *r = &sr->results[k];
            int ran = k < sr->done && !not_run_disk_full(rp, r);   // a case the full disk kept from starting did not run
            const char *summary;
            const int v = report_row_verdict(rp, sr, k, &summary);
            json_t *o = json_object();
            json_object_set_new(o, "scenario", json_string(sr->s->name));
            json_object_set_new(o, "scenario_file", json_string(sr->s->path));
            json_object_set_new(o, "family", json_string(sr->s->family));
            json_object_set_new(o, "case", json_string(r->c->name));
            json_object_set_new(o, "verdict", json_string(VERDICT_NAMES[v]));
            // a case not shown yet (still running beside others, harness/exec/run_cases.h) is its plan
            // only: what it is filling in now is read once it has finished
            const int shown = k < sr->done;
            if (shown && r->trainer[0]) json_object_set_new(o, "trainer", json_string(r->trainer));
            json_object_set_new(o, "ran", json_boolean(ran));
            json_object_set_new(o, "time_s", json_real(ran ? r->wall_s : 0));
            json_object_set_new(o, "summary", json_string(summary));
            json_object_set_new(o, "dir", json_string(r->rel_dir));
            // what a baseline is keyed and checked by (baseline record reads these)
            json_object_set_new(o, "config_digest", json_string(r->c->cfg.digest));
            json_object_set_new(o, "backend", json_string(r->c->cfg.backend));
            json_object_set_new(o, "precision", json_string(r->c->cfg.precision));
            json_t *checks = json_array();
            for (int ci = 0; ci < sr->s->n_checks; ci++) json_array_append_new(checks, json_string(sr->s->checks[ci].kind));
            json_object_set_new(o, "checks", checks);
            json_object_set_new(o, "reproduce", json_string(shown ? r->repro : ""));
            json_t *fs = json_array();
            for (int f = 0; shown && f < r->n_findings; f++)
                json_array_append_new(fs, json_pack("{s:s,s:b,s:s}", "check", r->findings[f].check, "ok",
                                                    r->findings[f].ok, "summary", r->findings[f].summary));
            json_object_set_new(o, "findings", fs);
            json_t *rks = json_array();
            for (int q = 0; shown && q < r->n_ranks; q++) {
                const RankResult *rk = &r->ranks[q];
                json_t *x = json_pack("{s:i,s:i,s:b,s:i,s:i,s:b,s:b}", "rank", rk->rank, "pid", rk->pid, "exited",
                                      rk->exited, "exit_code", rk->exit_code, "signal", rk->term_signal, "stalled",
                                      rk->stalled, "stack_dumped", rk->dumped);
                if (x && rk->have_state) {
                    json_object_set_new(x, "phase", json_string(rk->phase));
                    json_object_set_new(x, "step", json_integer(rk->step));
                    json_object_set_new(x, "layer", json_integer(rk->layer));
                    json_object_set_new(x, "op", json_string(rk->op));
                    json_object_set_new(x, "heartbeat_age_s", json_real(rk->heartbeat_age_s));
                    json_object_set_new(x, "coll_enqueued", json_integer(rk->coll_enqueued));
                    json_object_set_new(x, "coll_started", json_integer(rk->coll_started));
                    json_object_set_new(x, "coll_completed", json_integer(rk->coll_completed));
                }
                if (x) json_array_append_new(rks, x);
            }
            json_object_set_new(o, "ranks", rks);
            json_object_set(o, "facts", shown && r->facts ? r->facts : json_object());
            json_array_append_new(cases, o);
        }
    }
    json_t *inv = json_array();
    for (int i = 0; i < rp->n_invalid; i++) {
        json_t *probs = json_array();
        char *copy = xstrdup(rp->invalid[i].problems), *save = NULL;
        for (char *ln = strtok_r(copy, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save))
            json_array_append_new(probs, json_string(ln));
        free(copy);
        json_array_append_new(inv, json_pack("{s:s,s:o}", "file", rp->invalid[i].file, "problems", probs));
    }
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string(SUMMARY_FORMAT));
    json_object_set_new(root, "started", json_string(rp->started));
    json_object_set_new(root, "finished", json_boolean(rp->finished));
    json_object_set_new(root, "interrupted", json_boolean(rp->interrupted));
    json_object_set_new(root, "cases_done", json_integer(rp->done));
    json_object_set_new(root, "cases_total", json_integer(rp->total));
    json_object_set_new(root, "wall_s", json_real(mono_s() - rp->t0));
    json_object_set_new(root, "git", json_pack("{s:s,s:b}", "sha", rp->sha, "dirty", rp->dirty));
    json_object_set_new(root, "profile", json_string(rp->profile));
    json_object_set_new(root, "faults", json_string(rp->faults ? rp->faults : ""));
    json_object_set_new(root, "command", json_string(rp->command));
    json_object_set_new(root, "device", json_string(rp->device));
    json_object_set_new(root, "exit_code", (rp->finished || rp->interrupted) ? json_integer(rp->exit_code) : json_null());
    json_object_set_new(root, "disk_full", rp->disk_full ? json_pack("{s:s,s:i}", "why", rp->disk_full_why, "after_cases",
                                                                     rp->disk_full_after)
                                                         : json_null());
    json_object_set_new(root, "counts", counts);
    json_object_set_new(root, "cases", cases);
    json_object_set_new(root, "invalid_scenarios", inv);
    return root;
}

// ---- junit.xml ----------------------------------------------------------------------------------------

static void xml_attr(Str *x, const char *name, const char *value) {
    str_printf(x, " %s=\"", name);
    str_add_xml(x, value);
    str_add(x, "\"");
}

static char *junit_xml(const Report *rp) {
    Str x = {0};
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    int c[V_COUNT];
    report_counts(rp, c);
    int tests = 0;
    for (int v = 0; v < V_COUNT; v++) tests += c[v];
    str_add(&x, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites");
    xml_attr(&x, "name", "nsa-harness");
    str_printf(&x, " tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\"", tests,
               c[V_FAIL] + c[V_HANG] + c[V_CRASH], c[V_ERROR], c[V_SKIP] + c[V_PENDING], mono_s() - rp->t0);
    xml_attr(&x, "timestamp", rp->started);
    str_add(&x, ">\n");
    for (int i = 0; i < rp->n_runs; i++) {
        const ScenarioRun *sr = &rp->runs[i];
        int f = 0, e = 0, sk = 0;
        double t = 0;
        for (int k = 0; k < sr->n; k++) {
            int v = report_row_verdict(rp, sr, k, NULL);
            f += v == V_FAIL || v == V_HANG || v == V_CRASH;
            e += v == V_ERROR;
            sk += v == V_SKIP || v == V_PENDING;
            if (k < sr->done) t += sr->results[k].wall_s;
        }
        str_add(&x, "  <testsuite");
        xml_attr(&x, "name", sr->s->name);
        str_printf(&x, " tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\"", sr->n, f, e, sk, t);
        xml_attr(&x, "timestamp", rp->started);
        xml_attr(&x, "hostname", host);
        xml_attr(&x, "file", sr->s->path);
        str_add(&x, ">\n    <properties>\n");
        str_add(&x, "      <property name=\"profile\"");
        xml_attr(&x, "value", rp->profile);
        str_add(&x, "/>\n      <property name=\"family\"");
        xml_attr(&x, "value", sr->s->family);
        str_add(&x, "/>\n      <property name=\"git_sha\"");
        xml_attr(&x, "value", rp->sha);
        str_add(&x, "/>\n    </properties>\n");
        for (int k = 0; k < sr->n; k++) {
            const CaseResult *r = &sr->results[k];
            const char *summary;
            const int v = report_row_verdict(rp, sr, k, &summary);
            str_add(&x, "    <testcase");
            xml_attr(&x, "classname", sr->s->name);
            xml_attr(&x, "name", r->c->name);
            str_printf(&x, " time=\"%.3f\">\n", k < sr->done ? r->wall_s : 0.0);
            if (v == V_SKIP || v == V_PENDING) {   // JUnit has no "pending": skipped, saying so
                str_add(&x, "      <skipped");
                xml_attr(&x, "message", v == V_PENDING ? "pending: the run has not reached this case yet" : summary);
                str_add(&x, "/>\n");
            } else if (r->verdict != V_PASS) {
                const char *tag = r->verdict == V_ERROR ? "error" : "failure";
                str_printf(&x, "      <%s", tag);
                Str msg = {0};
                str_printf(&msg, "%s: %s", VERDICT_NAMES[r->verdict], r->summary);
                xml_attr(&x, "message", str_c(&msg));
                str_free(&msg);
                xml_attr(&x, "type", VERDICT_NAMES[r->verdict]);
                str_add(&x, ">");
                str_add_xml(&x, str_c(&r->evidence));
                str_printf(&x, "reproduce: %s\n", r->repro);
                str_printf(&x, "</%s>\n", tag);
            }
            if (k < sr->done && r->verdict != V_SKIP && r->n_ranks > 0) {
                char *tail = read_tail(r->ranks[0].log_path, 4000);
                if (tail) {
                    str_add(&x, "      <system-out>");
                    str_add_xml(&x, tail);
                    str_add(&x, "</system-out>\n");
                }
                free(tail);
            }
            str_add(&x, "    </testcase>\n");
        }
        str_add(&x, "  </testsuite>\n");
    }
    for (int i = 0; i < rp->n_invalid; i++) {
        str_add(&x, "  <testsuite");
        xml_attr(&x, "name", rp->invalid[i].file);
        str_add(&x, " tests=\"1\" failures=\"0\" errors=\"1\" skipped=\"0\" time=\"0\"");
        xml_attr(&x, "timestamp", rp->started);
        xml_attr(&x, "hostname", host);
        str_add(&x, ">\n    <testcase");
        xml_attr(&x, "classname", rp->invalid[i].file);
        xml_attr(&x, "name", "load");
        str_add(&x, " time=\"0\">\n      <error");
        const char *p = rp->invalid[i].problems, *nl = strchr(p, '\n');
        Str first = {0};
        str_add(&first, "invalid scenario: ");
        str_addn(&first, p, nl ? (size_t)(nl - p) : strlen(p));
        xml_attr(&x, "message", str_c(&first));
        str_free(&first);
        xml_attr(&x, "type", "ERROR");
        str_add(&x, ">");
        str_add_xml(&x, p);
        str_add(&x, "</error>\n    </testcase>\n  </testsuite>\n");
    }
    str_add(&x, "</testsuites>\n");
    return str_take(&x);
}

// ---- writing -------------------------------------------------------------------------------------------

int report_write(const Report *rp) {
    char path[2200];
    int rc = 0;
    char *md = results_md(rp);
    snprintf(path, sizeof path, "%s/RESULTS.md", rp->dir);
    rc |= write_file_atomic(path, md, strlen(md));
    free(md);
    json_t *sj = summary_json(rp);
    char *js = json_dumps(sj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(sj);
    if (js) {
        Str s = {0};
        str_add(&s, js);
        str_add(&s, "\n");
        snprintf(path, sizeof path, "%s/summary.json", rp->dir);
        rc |= write_file_atomic(path, str_c(&s), s.len);
        str_free(&s);
        free(js);
    } else rc = -1;
    char *xml = junit_xml(rp);
    snprintf(path, sizeof path, "%s/junit.xml", rp->dir);
    rc |= write_file_atomic(path, xml, strlen(xml));
    free(xml);
    return rc ? -1 : 0;
}

int report_github_summary(const Report *rp) {
    const char *p = getenv("GITHUB_STEP_SUMMARY");
    if (!p || !p[0]) return 0;
    FILE *f = fopen(p, "a");
    if (!f) return -1;
    Str md = {0};
    str_printf(&md, "## nsa-harness · %s%s · profile `%s`\n\n", rp->sha, rp->dirty ? " (dirty)" : "", rp->profile);
    counts_line(&md, rp);
    str_add(&md, "\n\n");
    verdict_table(rp, &md, 0, "####");
    // what CI readers need without opening the artifact: the diagnosis and, when the
    // run compared cases with baselines or floors, the regression table
    str_add(&md, "\n### Diagnosis\n\n");
    diagnosis_md(rp, &md);
    Str reg = {0};
    ScenarioRun *done = xcalloc((size_t)rp->n_runs + 1, sizeof(ScenarioRun));
    for (int i = 0; i < rp->n_runs; i++) {
        done[i] = rp->runs[i];
        done[i].n = rp->runs[i].done;
    }
    regression_table(done, rp->n_runs, &reg);
    free(done);
    if (reg.len) str_printf(&md, "\n### Regression against baselines and floors\n\n%s", str_c(&reg));
    str_free(&reg);
    str_printf(&md, "\nFull report: `%s/RESULTS.md`\n\n", rp->dir);
    int rc = fputs(str_c(&md), f) < 0 ? -1 : 0;
    rc |= fclose(f);
    str_free(&md);
    return rc;
}
