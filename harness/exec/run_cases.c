// harness/exec/run_cases.c — see run_cases.h.
#define _GNU_SOURCE
#include "harness/exec/run_cases.h"

#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness/core/check.h"
#include "harness/core/family.h"
#include "harness/report/outdir.h"
#include "harness/exec/proc.h"
#include "harness/exec/schedule.h"
#include "common/jsonutil.h"
#include "common/log.h"

// ---- filters -----------------------------------------------------------------------------------

static int filter_match(const char *pat, const char *scenario, const char *cname) {
    char full[512];
    snprintf(full, sizeof full, "%s/%s", scenario, cname);
    if (!has_glob_meta(pat)) return strstr(full, pat) != NULL;
    return fnmatch(pat, cname, 0) == 0 || fnmatch(pat, full, 0) == 0 || fnmatch(pat, scenario, 0) == 0;
}

int case_selected(const StrList *filters, const StrList *exact, const char *scenario, const char *cname) {
    if (filters->n == 0 && exact->n == 0) return 1;
    for (int f = 0; f < filters->n; f++)
        if (filter_match(filters->v[f], scenario, cname)) return 1;
    size_t sl = strlen(scenario);
    for (int e = 0; e < exact->n; e++)
        if (!strncmp(exact->v[e], scenario, sl) && exact->v[e][sl] == '/' && !strcmp(exact->v[e] + sl + 1, cname)) return 1;
    return 0;
}

// ---- a full disk ------------------------------------------------------------------------------
// The report folder's ballast (harness/report/outdir.h) keeps the space the next report write
// needs. After every report write it is resized for the report as it now is; when that
// fails, when a report write is refused, or when less than a case's minimum is left, the
// disk is full: no case starts after that (each is ERROR "not run: disk full ..."), and
// the final report is written from the ballast. So the report says why at any amount of
// free space, and a trainer filling the disk never eats the space the report needs.

enum { CASE_MIN_FREE = 64 * 1024 };   // a case's rank log alone sets aside up to 64 KiB

// The disk holding the report folder is full (what: how it showed): said once, on stderr
// and in the report (Report.disk_full); no case starts after it.
static void note_disk_full(Report *rp, const char *what) {
    if (rp->disk_full) return;
    char disk[4400];
    outdir_disk_name(rp->dir, disk, sizeof disk);
    long long fb = outdir_free_bytes(rp->dir);
    snprintf(rp->disk_full_why, sizeof rp->disk_full_why, "the disk holding %s is full (%lld KiB free: %s)", disk,
             fb > 0 ? fb / 1024 : 0, what);
    rp->disk_full = 1;
    rp->disk_full_after = rp->done;
    nsa_log(LOG_ERROR, "%s; no case starts after this one, the report lists those not run", rp->disk_full_why);
}

// After a report write while cases still run: the ballast fitted to the report, and room
// left for a case.
static void guard_disk(Report *rp) {
    if (rp->disk_full || rp->finished || rp->interrupted) return;
    if (outdir_reserve_fit(rp->dir)) {
        note_disk_full(rp, "the space the report needs could not be set aside");
        return;
    }
    long long fb = outdir_free_bytes(rp->dir);
    if (fb >= 0 && fb < CASE_MIN_FREE) note_disk_full(rp, "less than 64 KiB left for a case");
}

// Rewrite the report; when the disk refuses it, the disk is full: give up the ballast and
// try once more, so the report that says what the disk refused still fits, then take back
// what the ballast can. 0 or -1 (errno).
int run_write_report(Report *rp) {
    if (report_write(rp) == 0) {
        guard_disk(rp);
        return 0;
    }
    int e = errno;
    if (e == ENOSPC || e == EDQUOT) {
        note_disk_full(rp, "a report write was refused");
        if (outdir_release_reserve(rp->dir)) {
            const int rc = report_write(rp);
            e = errno;
            if (!rp->finished && !rp->interrupted) outdir_reserve_fit(rp->dir);   // for the final report
            errno = e;
            return rc;
        }
    }
    errno = e;
    return -1;
}

// Progress (the "run" line before a case, a terminal's live line): the run's elapsed time,
// an estimate of the time left and the verdicts so far, "2 m 05 s elapsed, ETA ~3 m 10 s;
// 12 PASS, 1 SKIP". The estimate: each case not run yet takes the mean time of its
// scenario's cases run so far (of every case run so far, for a scenario not started; a
// bisection not started counts two steps, its least), divided among the cases that run
// side by side; none before the first case ends.
static void progress_tally(const Report *rp, int side_by_side, Str *out) {
    char t[32];
    fmt_duration(t, sizeof t, mono_s() - rp->t0);
    str_printf(out, "%s elapsed", t);
    double all_s = 0, left_s = 0;
    int all_n = 0, counts[V_COUNT] = {0};
    for (int i = 0; i < rp->n_runs; i++)
        for (int k = 0; k < rp->runs[i].done; k++) {
            const CaseResult *r = &rp->runs[i].results[k];
            counts[r->verdict]++;
            if (r->verdict != V_SKIP) all_s += r->wall_s, all_n++;
        }
    if (all_n) {
        for (int i = 0; i < rp->n_runs; i++) {
            const ScenarioRun *sr = &rp->runs[i];
            const FamilyDef *fam = family_find(sr->s->family);
            double sum = 0;
            int n = 0;
            for (int k = 0; k < sr->done; k++)
                if (sr->results[k].verdict != V_SKIP) sum += sr->results[k].wall_s, n++;
            const int left = fam && fam->execute ? (sr->done ? sr->n - sr->done : 2 * sr->planned_bases) : sr->n - sr->done;
            left_s += left * (n ? sum / n : all_s / all_n);
        }
        fmt_duration(t, sizeof t, left_s / (side_by_side > 1 ? side_by_side : 1));   // cases side by side: the
        str_printf(out, ", ETA ~%s", t);                                              // time spread over them
    }
    int any = 0;
    for (int v = 0; v < V_COUNT; v++)
        if (counts[v]) str_printf(out, "%s%d %s", any++ ? ", " : "; ", counts[v], VERDICT_NAMES[v]);
}

// ---- what a case needs -------------------------------------------------------------------------

void run_case_needs(const Scenario *s, const Case *c, const char *profile, int gpus_here, int *gpus, int *exclusive,
                    int *ranks) {
    const int W = c->run.world_size > 0 ? c->run.world_size : 1;
    *ranks = W;
    *gpus = gpus_here > 0 && s->requires_gpus > 0 ? W : 0;   // one per rank (a scenario's requires.gpus
                                                               // is what its largest case needs)
    *exclusive = 0;
    for (int i = 0; i < s->n_checks; i++) *exclusive |= check_judges_time(s->checks[i].kind, s->checks[i].params);
    const FamilyDef *fam = family_find(s->family);
    if (fam && fam->needs) fam->needs(s, c, profile, gpus_here, gpus, exclusive, ranks);
}

// ---- the run -----------------------------------------------------------------------------------

typedef struct CaseRunState CaseRunState;

// One unit the scheduler starts: a planned case, or a whole scenario whose family creates its
// cases as it runs (k = -1).
typedef struct {
    CaseRunState *run;
    int index;            // in run->jobs (= its SchedJob)
    ScenarioRun *sr;
    int k;                // the planned case, or -1
    int step;             // its step of the plan (a family's job: the step of its first base)
    int sub;              // the cases its family created under the current base so far
    const Case *base;     // that base
    RunCtx ctx;           // the run's, with this job's GPUs, threads and progress
    char gpus[512];       // CUDA_VISIBLE_DEVICES for it, "" when it holds no GPU
    int lock_fd[2 * SCHED_MAX_GPUS + 1];   // while it runs: its locks shared with other runs (below)
    int n_lock_fd;
    int deps_at, n_deps;  // its references: run->deps[deps_at .. deps_at + n_deps)
    pthread_t thread;
    int has_thread;
} Job;

struct CaseRunState {
    const RunCasesOpts *o;
    Report *rp;
    int planned;          // steps of the plan (console "[k/N]")
    int parallel;         // jobs > 1
    Job *jobs;
    SchedJob *sj;
    int n_jobs;
    int *deps;
    SchedPool pool;
    int base_threads;     // OpenMP threads of a rank when cases run side by side
    StrList gpu_names;    // the runner's CUDA_VISIBLE_DEVICES entries (empty: the devices' indices)
    pthread_mutex_t lock; // guards the report, the console and the scheduler's state
    pthread_cond_t changed;
};

static void lock(CaseRunState *R) { pthread_mutex_lock(&R->lock); }
static void unlock(CaseRunState *R) { pthread_mutex_unlock(&R->lock); }

// The reports show a scenario's cases up to the first one not finished (result.h: done).
static void publish(CaseRunState *R, ScenarioRun *sr, CaseResult *r) {
    r->finished = 1;
    r->ctx = NULL;   // (the case's context ends with its job; the report never reads it)
    R->rp->done++;
    while (sr->done < sr->n && sr->results[sr->done].finished) sr->done++;
}

static void step_label(const Job *jb, char *at, size_t n) {
    if (jb->sub) snprintf(at, n, "[%d/%d·%d]", jb->step, jb->run->planned, jb->sub);
    else snprintf(at, n, "[%d/%d]", jb->step, jb->run->planned);
}

// Run case k of sr (a trainer case, or the family's own kind), print its line, rewrite the
// report. The case itself runs unlocked; it compares only with cases finished before it
// started (its references: the scheduler started it after them).
static void run_one(Job *jb, ScenarioRun *sr, int k) {
    CaseRunState *R = jb->run;
    Report *rp = R->rp;
    FILE *con = R->o->con;
    lock(R);
    CaseResult *r = &sr->results[k];
    const FamilyDef *fam = family_find(sr->s->family);
    jb->ctx.index = jb->step;
    jb->ctx.total = R->planned;
    jb->ctx.sub = jb->sub;
    char at[48];
    step_label(jb, at, sizeof at);
    if (rp->disk_full) {   // nothing starts on a full disk: said per case, the report written at the end
        r->verdict = V_ERROR;
        snprintf(r->summary, sizeof r->summary, "not run: disk full — %.700s", rp->disk_full_why);
        publish(R, sr, r);
        if (con) fprintf(con, "%s %-5s %s/%s: %s\n", at, VERDICT_NAMES[r->verdict], sr->s->name, r->c->name, r->summary);
        unlock(R);
        return;
    }
    Str tally = {0};
    progress_tally(rp, R->pool.max_running, &tally);
    jb->ctx.tally = str_c(&tally);
    if (con && (!R->o->tty || R->parallel)) {
        if (jb->gpus[0]) fprintf(con, "%s run   %s/%s on GPU %s  (%s)\n", at, sr->s->name, r->c->name, jb->gpus, str_c(&tally));
        else fprintf(con, "%s run   %s/%s  (%s)\n", at, sr->s->name, r->c->name, str_c(&tally));
        fflush(con);
    }
    r->verdict = V_PASS;
    r->summary[0] = '\0';
    // what its cross-case checks see: the cases of its scenario finished now. A family that
    // creates its cases as it runs is one job: only this thread changes its run.
    ScenarioRun view = *sr;
    const ScenarioRun *seen = fam->execute ? sr : &view;
    unlock(R);
    if (fam->run_case) fam->run_case(&jb->ctx, r);
    else run_case(&jb->ctx, r, seen);
    lock(R);
    jb->ctx.tally = NULL;
    str_free(&tally);
    r = &sr->results[k];
    publish(R, sr, r);
    if (con) {
        char t[32];
        fmt_duration(t, sizeof t, r->wall_s);
        fprintf(con, "%s %-5s %s/%s (%s): %s\n", at, VERDICT_NAMES[r->verdict], sr->s->name, r->c->name, t, r->summary);
        fflush(con);
    }
    if (run_write_report(rp)) nsa_log(LOG_ERROR, "cannot write the report in %s: %s", rp->dir, strerror(errno));
    unlock(R);
}

// FamilyExec.run_variant: a new case from a base case, appended and run.
static int fx_run_variant(FamilyExec *fx, const Case *base, const char *name, const Override *extra, int n_extra) {
    Job *jb = fx->priv;
    CaseRunState *R = jb->run;
    ScenarioRun *sr = fx->sr;
    Case *c = xcalloc(1, sizeof(Case));
    char err[4096] = "";
    int bad = scenario_derive_case(sr->s, base, name, extra, n_extra, c, err, sizeof err);
    lock(R);   // the report reads sr->results: grown under the lock
    if (sr->n == sr->cap) {
        sr->cap *= 2;
        sr->results = xrealloc(sr->results, sizeof(CaseResult) * (size_t)sr->cap);
    }
    sr->owned = xrealloc(sr->owned, sizeof(Case *) * (size_t)(sr->n_owned + 1));
    sr->owned[sr->n_owned++] = c;
    int k = sr->n++;
    CaseResult *r = &sr->results[k];
    result_init(r, sr->s, c);
    r->is_reference = is_reference_case(sr->s, c->name);
    snprintf(r->rel_dir, sizeof r->rel_dir, "%s/%s", sr->s->name, c->dir);
    R->rp->total++;
    if (base != jb->base) {   // the first case of another base: its planned step
        if (jb->base) jb->step++;
        jb->base = base;
        jb->sub = 0;
    }
    jb->sub++;
    if (bad) {   // the family asked for a config the loader rejects
        r->verdict = V_ERROR;
        snprintf(r->summary, sizeof r->summary, "invalid derived case: %s", err);
        publish(R, sr, r);
        run_write_report(R->rp);
        unlock(R);
        return k;
    }
    unlock(R);
    run_one(jb, sr, k);
    return k;
}

static int fx_interrupted(FamilyExec *fx) {
    const Job *jb = fx->priv;
    return *jb->run->o->interrupted != 0;
}

// A job: its case, or its scenario's family creating and running its cases.
static void job_execute(Job *jb) {
    CaseRunState *R = jb->run;
    if (jb->k >= 0) {
        run_one(jb, jb->sr, jb->k);
        return;
    }
    ScenarioRun *sr = jb->sr;
    const FamilyDef *fam = family_find(sr->s->family);
    const Case **bases = xcalloc((size_t)sr->s->n_cases + 1, sizeof(Case *));
    int nb = 0;
    for (int c = 0; c < sr->s->n_cases; c++)
        if (case_selected(R->o->filters, R->o->exact, sr->s->name, sr->s->cases[c].name)) bases[nb++] = &sr->s->cases[c];
    lock(R);
    R->rp->total -= nb;   // replaced by the cases the family creates
    unlock(R);
    FamilyExec fx = {sr, bases, nb, fx_run_variant, fx_interrupted, jb};
    fam->execute(&fx);
    free(bases);
}

static void release_locks(Job *jb);   // (other runs on this machine, below)

static void *job_thread(void *arg) {
    Job *jb = arg;
    CaseRunState *R = jb->run;
    job_execute(jb);
    lock(R);
    release_locks(jb);
    sched_finish(R->sj, jb->index, &R->pool);
    pthread_cond_broadcast(&R->changed);
    unlock(R);
    return NULL;
}

// ---- planning the jobs -------------------------------------------------------------------------

// A job for every planned case (a family's whole scenario for one that creates its cases), in
// the report's order, with what it needs; a case depends on its scenario's reference cases.
static void plan_jobs(CaseRunState *R) {
    const RunCasesOpts *o = R->o;
    Report *rp = R->rp;
    int cap = 0;
    for (int i = 0; i < rp->n_runs; i++) cap += rp->runs[i].n + 1;
    R->jobs = xcalloc((size_t)cap + 1, sizeof(Job));
    R->sj = xcalloc((size_t)cap + 1, sizeof(SchedJob));
    // every non-reference case depends on each reference case of its scenario: that many entries
    size_t dcap = 1;
    for (int i = 0; i < rp->n_runs; i++) {
        size_t refs = 0;
        for (int k = 0; k < rp->runs[i].n; k++) refs += rp->runs[i].results[k].is_reference != 0;
        dcap += refs * (size_t)rp->runs[i].n;
    }
    R->deps = xcalloc(dcap, sizeof(int));
    int nd = 0, step = 1;
    for (int i = 0; i < rp->n_runs; i++) {
        ScenarioRun *sr = &rp->runs[i];
        const FamilyDef *fam = family_find(sr->s->family);
        const int first = R->n_jobs;
        for (int k = fam->execute ? -1 : 0; fam->execute ? k < 0 : k < sr->n; k++) {
            Job *jb = &R->jobs[R->n_jobs];
            SchedJob *sj = &R->sj[R->n_jobs];
            jb->run = R;
            jb->index = R->n_jobs++;
            jb->sr = sr;
            jb->k = k;
            jb->step = step;
            step += fam->execute ? sr->planned_bases : 1;
            jb->ctx = *o->ctx;
            // what it needs: a family's job as its first case (each runs alone in it)
            const Case *c = k >= 0 ? sr->results[k].c : sr->s->n_cases ? &sr->s->cases[0] : NULL;
            int gpus = 0, excl = 0, ranks = 1;
            if (c) run_case_needs(sr->s, c, o->ctx->profile, o->ctx->gpus, &gpus, &excl, &ranks);
            const int per_rank = R->base_threads * ranks <= R->pool.n_cpus ? R->base_threads
                                 : R->pool.n_cpus / ranks > 0 ? R->pool.n_cpus / ranks : 1;
            sj->gpus = gpus;
            sj->cpus = per_rank * ranks;
            sj->exclusive = excl;
            jb->ctx.threads = R->parallel ? per_rank : 0;
            if (R->parallel) jb->ctx.tty = 0;
            // its references: the reference cases of its scenario (they run first)
            jb->deps_at = nd;
            if (k >= 0 && !sr->results[k].is_reference)
                for (int q = first; q < jb->index; q++)
                    if (R->jobs[q].k >= 0 && sr->results[R->jobs[q].k].is_reference) R->deps[nd++] = q;
            jb->n_deps = nd - jb->deps_at;
        }
    }
    for (int j = 0; j < R->n_jobs; j++) {
        R->sj[j].deps = R->deps + R->jobs[j].deps_at;
        R->sj[j].n_deps = R->jobs[j].n_deps;
    }
    sched_prepare(R->sj, R->n_jobs);
}

// ---- other runs on this machine ---------------------------------------------------------------
// Runs side by side on one machine (the main job's two runs, two CI jobs on one runner) share
// its GPUs through lock files in $NSA_HARNESS_LOCK_DIR (else $TMPDIR, else /tmp): while a case
// runs, it holds each of its GPUs' file exclusively (nsa-harness-gpu-<CUDA_VISIBLE_DEVICES entry
// or index>.lock, flock) and the machine's (nsa-harness-machine.lock) shared — a
// timing-sensitive case exclusively, so it has the machine to itself across runs too. A GPU
// another run holds is busy here until it lets go; with --cases-per-gpu N above 1 the GPUs' files
// are held shared, and each case also holds one of the GPU's N slot files exclusively
// (nsa-harness-gpu-<id>-slot<k>.lock, k < N): runs that share GPUs share them with each other
// too, never more than N cases on a GPU in all (N of the run allowing the most). Every run on
// GPUs takes them, one case at a time too (its case holds the GPUs its ranks use, from 0); a
// run on the CPU takes none, nor does a folder where no lock file can be made.

static void lock_path(char *p, size_t n, const char *name, const char *ext) {
    const char *dir = getenv("NSA_HARNESS_LOCK_DIR");
    if (!dir || !dir[0]) dir = getenv("TMPDIR");
    if (!dir || dir[0] != '/') dir = "/tmp";
    snprintf(p, n, "%s/nsa-harness-%s.%s", dir, name, ext);
}

// Fairness: a run that finds a lock held marks that it waits (nsa-harness-NAME.want: its pid,
// rewritten at every try); a run about to take that lock leaves it to the waiter while the
// mark is fresh (2 s) and names another live process. So runs alternate on a GPU instead of
// one taking it again the moment it lets go, and a timing-sensitive case waiting for the
// machine is not starved by the other run's cases.
static int other_waits(const char *name) {
    char p[4400];
    lock_path(p, sizeof p, name, "want");
    struct stat st;
    if (stat(p, &st) != 0) return 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if ((double)(now.tv_sec - st.st_mtim.tv_sec) + 1e-9 * (double)(now.tv_nsec - st.st_mtim.tv_nsec) > 2.0) return 0;
    char *text = read_file(p, NULL);
    const long pid = text ? strtol(text, NULL, 10) : 0;
    free(text);
    return pid > 0 && pid != (long)getpid() && kill((pid_t)pid, 0) == 0;
}

static void mark_wait(const char *name) {
    char p[4400], line[32];
    lock_path(p, sizeof p, name, "want");
    snprintf(line, sizeof line, "%ld\n", (long)getpid());
    write_file_atomic(p, line, strlen(line));   // (best effort)
}

static void clear_wait(const char *name) {
    char p[4400];
    lock_path(p, sizeof p, name, "want");
    char *text = read_file(p, NULL);
    if (text && strtol(text, NULL, 10) == (long)getpid()) unlink(p);
    free(text);
}

static int lock_file(const char *name, int op) {   // its fd, -1: held elsewhere, -2: no lock file
    char p[4400];
    lock_path(p, sizeof p, name, "lock");
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return -2;
    if (flock(fd, op | LOCK_NB) == 0) return fd;
    const int busy = errno == EWOULDBLOCK;
    close(fd);
    return busy ? -1 : -2;
}

static void release_locks(Job *jb) {
    for (int i = 0; i < jb->n_lock_fd; i++) close(jb->lock_fd[i]);
    jb->n_lock_fd = 0;
}

// The machine's lock and the job's GPUs' (as sched_start gave them). 0; -1: the machine is
// another run's now; -2: a GPU is (marked blocked in the pool). Nothing held on failure.
static int take_locks(CaseRunState *R, Job *jb) {
    const SchedJob *sj = &R->sj[jb->index];
    jb->n_lock_fd = 0;
    if (other_waits("machine")) return -1;
    int fd = lock_file("machine", sj->deferred ? LOCK_EX : LOCK_SH);
    if (fd == -1) {
        mark_wait("machine");
        return -1;
    }
    clear_wait("machine");
    if (fd >= 0) jb->lock_fd[jb->n_lock_fd++] = fd;
    for (int i = 0; i < sj->n_gpu_ids; i++) {
        const int g = sj->gpu_ids[i];
        char name[96];
        if (g < R->gpu_names.n) snprintf(name, sizeof name, "gpu-%.80s", R->gpu_names.v[g]);
        else snprintf(name, sizeof name, "gpu-%d", g);
        for (char *c = name; *c; c++)
            if (*c == '/') *c = '_';
        fd = other_waits(name) ? -1 : lock_file(name, R->pool.per_gpu > 1 ? LOCK_SH : LOCK_EX);   // (--cases-per-gpu: shared)
        if (fd >= 0 && R->pool.per_gpu > 1) {   // and one of its per_gpu slots: the cases on a GPU bounded across runs
            int slot_fd = -1;
            for (int k = 0; k < R->pool.per_gpu && slot_fd == -1; k++) {
                char slot[128];
                snprintf(slot, sizeof slot, "%s-slot%d", name, k);
                slot_fd = lock_file(slot, LOCK_EX);
            }
            if (slot_fd >= 0) jb->lock_fd[jb->n_lock_fd++] = slot_fd;
            else if (slot_fd == -1) {   // every slot is another case's (of another run: the pool counts its own)
                close(fd);
                fd = -1;
            }
        }
        if (fd == -1) {
            if (!other_waits(name)) mark_wait(name);
            R->pool.gpu_blocked[g] = 1;
            release_locks(jb);
            return -2;
        }
        clear_wait(name);
        if (fd >= 0) jb->lock_fd[jb->n_lock_fd++] = fd;
    }
    return 0;
}

// The GPUs a job was given, as its trainers' CUDA_VISIBLE_DEVICES (one case at a time too: the
// GPUs its locks hold are the ones it uses).
static void name_gpus(CaseRunState *R, Job *jb) {
    const SchedJob *sj = &R->sj[jb->index];
    jb->gpus[0] = '\0';
    if (sj->n_gpu_ids == 0) return;
    size_t used = 0;
    for (int i = 0; i < sj->n_gpu_ids; i++) {
        const int g = sj->gpu_ids[i];
        char one[64];
        if (g < R->gpu_names.n) snprintf(one, sizeof one, "%s", R->gpu_names.v[g]);
        else snprintf(one, sizeof one, "%d", g);
        used += (size_t)snprintf(jb->gpus + used, sizeof jb->gpus - used, "%s%s", i ? "," : "", one);
        if (used >= sizeof jb->gpus) break;
    }
    jb->ctx.cuda_devices = jb->gpus;
}

// The runner's own CUDA_VISIBLE_DEVICES, entry by entry (a case's GPU i is its entry i).
static void read_visible(StrList *out) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (!v || !v[0]) return;
    char *copy = xstrdup(v), *save = NULL;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) strlist_add(out, t);
    free(copy);
}

void run_cases_all(const RunCasesOpts *o) {
    CaseRunState R;
    memset(&R, 0, sizeof R);
    R.o = o;
    R.rp = o->rp;
    R.parallel = o->jobs > 1;
    pthread_mutex_init(&R.lock, NULL);
    pthread_cond_init(&R.changed, NULL);
    read_visible(&R.gpu_names);
    const int per_gpu = o->cases_per_gpu > 0 ? o->cases_per_gpu : 1;
    R.pool.n_gpus = o->ctx->gpus < SCHED_MAX_GPUS ? o->ctx->gpus : SCHED_MAX_GPUS;
    R.pool.per_gpu = per_gpu;
    R.pool.n_cpus = sched_online_cpus();
    R.pool.max_running = o->jobs > 0 ? o->jobs : 1;
    R.base_threads = R.pool.n_cpus / R.pool.max_running > 0 ? R.pool.n_cpus / R.pool.max_running : 1;
    for (int i = 0; i < R.rp->n_runs; i++) R.planned += family_find(R.rp->runs[i].s->family)->execute
                                                              ? R.rp->runs[i].planned_bases : R.rp->runs[i].n;
    plan_jobs(&R);
    if (R.parallel) proc_share_children(1);   // no case reaps another's processes
    lock(&R);
    for (;;) {
        int j, elsewhere = 0;   // something waits for what another run on the machine holds
        memset(R.pool.gpu_blocked, 0, sizeof R.pool.gpu_blocked);
        while (!*o->interrupted && (j = sched_pick(R.sj, R.n_jobs, &R.pool)) >= 0) {
            sched_start(R.sj, j, &R.pool);
            Job *jb = &R.jobs[j];
            if (R.pool.n_gpus > 0) {   // (a run on GPUs, one case at a time or several)
                const int taken = take_locks(&R, jb);
                if (taken) {   // another run holds the machine (stop picking) or a GPU (pick again)
                    sched_unstart(R.sj, j, &R.pool);
                    elsewhere = 1;
                    if (taken == -1) break;
                    continue;
                }
            }
            name_gpus(&R, jb);
            if (!R.parallel) {   // one at a time: in this thread, in the report's order
                unlock(&R);
                job_execute(jb);
                lock(&R);
                release_locks(jb);
                sched_finish(R.sj, j, &R.pool);
                continue;
            }
            if (pthread_create(&jb->thread, NULL, job_thread, jb) == 0) jb->has_thread = 1;
            else {   // no thread to be had: run it here
                unlock(&R);
                job_execute(jb);
                lock(&R);
                release_locks(jb);
                sched_finish(R.sj, j, &R.pool);
            }
        }
        if (R.pool.running == 0) {
            if (R.parallel) proc_reap_orphans_now();
            if (*o->interrupted || sched_all_done(R.sj, R.n_jobs)) break;
            if (elsewhere) {   // nothing of ours runs: wait for the other run to let go
                unlock(&R);
                struct timespec nap = {0, 200 * 1000 * 1000};
                nanosleep(&nap, NULL);
                lock(&R);
                continue;
            }
            // (nothing runs and nothing can start: the plan's dependencies cannot hold; never
            // expected, as references come first; run the rest in order rather than wait)
            if (sched_pick(R.sj, R.n_jobs, &R.pool) < 0)
                for (int q = 0; q < R.n_jobs; q++) R.sj[q].deferred = 1, R.sj[q].n_deps = 0;
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 200 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&R.changed, &R.lock, &ts);
    }
    unlock(&R);
    for (int j = 0; j < R.n_jobs; j++)
        if (R.jobs[j].has_thread) pthread_join(R.jobs[j].thread, NULL);
    if (R.parallel) {
        proc_share_children(0);
        proc_reap_orphans_now();
    }
    // an interrupted run: the cases after a hole were finished but not shown; now they are
    // (the hole: SKIP "not run: interrupted", as every case not started)
    for (int i = 0; i < R.rp->n_runs; i++) {
        ScenarioRun *sr = &R.rp->runs[i];
        int last = -1;
        for (int k = 0; k < sr->n; k++)
            if (sr->results[k].finished) last = k;
        for (int k = sr->done; k <= last; k++)
            if (!sr->results[k].finished) {
                sr->results[k].verdict = V_SKIP;
                snprintf(sr->results[k].summary, sizeof sr->results[k].summary, "not run: interrupted");
                sr->results[k].finished = 1;
            }
        while (sr->done < sr->n && sr->results[sr->done].finished) sr->done++;
    }
    strlist_free(&R.gpu_names);
    free(R.jobs);
    free(R.sj);
    free(R.deps);
    pthread_cond_destroy(&R.changed);
    pthread_mutex_destroy(&R.lock);
}
