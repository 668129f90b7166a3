// harness/exec/schedule.c — see schedule.h.
#define _GNU_SOURCE
#include "harness/exec/schedule.h"

#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

void sched_prepare(SchedJob *jobs, int n) {
    for (int j = 0; j < n; j++) {
        jobs[j].state = SCHED_WAITING;
        jobs[j].n_gpu_ids = 0;
        jobs[j].deferred = jobs[j].exclusive != 0;
        for (int d = 0; d < jobs[j].n_deps && !jobs[j].deferred; d++) {
            const int k = jobs[j].deps[d];
            if (k >= 0 && k < j) jobs[j].deferred = jobs[k].deferred;   // dependencies point back
        }
    }
}

static int deps_done(const SchedJob *jobs, int n, int j) {
    for (int d = 0; d < jobs[j].n_deps; d++) {
        const int k = jobs[j].deps[d];
        if (k >= 0 && k < n && jobs[k].state != SCHED_DONE) return 0;
    }
    return 1;
}

static int gpus_wanted(const SchedJob *job, const SchedPool *pool) {
    const int cap = pool->n_gpus < SCHED_MAX_GPUS ? pool->n_gpus : SCHED_MAX_GPUS;
    return job->gpus < 0 ? 0 : job->gpus > cap ? cap : job->gpus;
}

static int cpus_wanted(const SchedJob *job, const SchedPool *pool) {
    const int c = job->cpus < 1 ? 1 : job->cpus;
    return c > pool->n_cpus ? pool->n_cpus : c;
}

static int per_gpu(const SchedPool *pool) { return pool->per_gpu < 1 ? 1 : pool->per_gpu; }

// GPUs that can take one more job
static int gpus_free(const SchedPool *pool) {
    int n = 0;
    for (int g = 0; g < pool->n_gpus && g < SCHED_MAX_GPUS; g++)
        n += pool->gpu_busy[g] < per_gpu(pool) && !pool->gpu_blocked[g];
    return n;
}

int sched_pick(const SchedJob *jobs, int n, const SchedPool *pool) {
    if (pool->max_running <= 1) {   // one at a time: the report's order, nothing deferred
        if (pool->running > 0) return -1;
        for (int j = 0; j < n; j++)
            if (jobs[j].state == SCHED_WAITING) return j;
        return -1;
    }
    int phase_left = 0;   // jobs of the parallel phase not finished yet
    for (int j = 0; j < n; j++) phase_left += !jobs[j].deferred && jobs[j].state != SCHED_DONE;
    if (phase_left == 0) {   // the last phase: deferred jobs, alone and in order
        if (pool->running > 0) return -1;
        for (int j = 0; j < n; j++)
            if (jobs[j].state == SCHED_WAITING) return deps_done(jobs, n, j) ? j : -1;
        return -1;
    }
    if (pool->running >= (pool->max_running < 1 ? 1 : pool->max_running)) return -1;
    const int free_g = gpus_free(pool);
    // A job that needs more GPUs than are free now holds back every GPU job that needs fewer
    // (only CPU jobs may start): else 1-GPU jobs take each GPU the moment it frees and a
    // 2-GPU job never finds two free at once.
    int want_most = 0;
    for (int j = 0; j < n; j++)
        if (jobs[j].state == SCHED_WAITING && !jobs[j].deferred && deps_done(jobs, n, j) &&
            gpus_wanted(&jobs[j], pool) > want_most)
            want_most = gpus_wanted(&jobs[j], pool);
    const int reserved = want_most > free_g;
    int best = -1, best_g = -1;
    for (int j = 0; j < n; j++) {
        const SchedJob *job = &jobs[j];
        if (job->state != SCHED_WAITING || job->deferred || !deps_done(jobs, n, j)) continue;
        const int g = gpus_wanted(job, pool);
        if (g > free_g || (reserved && g > 0)) continue;
        // cores: a job never waits for cores when nothing else runs
        if (pool->running > 0 && pool->cpus_used + cpus_wanted(job, pool) > pool->n_cpus) continue;
        if (g > best_g) best = j, best_g = g;   // most GPUs first, then the earliest
    }
    return best;
}

void sched_start(SchedJob *jobs, int j, SchedPool *pool) {
    SchedJob *job = &jobs[j];
    const int g = gpus_wanted(job, pool);
    job->n_gpu_ids = 0;
    int taken[SCHED_MAX_GPUS] = {0};
    while (job->n_gpu_ids < g) {   // the least shared GPU not taken yet, the lowest index first
        int best = -1;
        for (int i = 0; i < pool->n_gpus && i < SCHED_MAX_GPUS; i++)
            if (!taken[i] && !pool->gpu_blocked[i] && pool->gpu_busy[i] < per_gpu(pool) &&
                (best < 0 || pool->gpu_busy[i] < pool->gpu_busy[best]))
                best = i;
        if (best < 0) break;
        taken[best] = 1;
        pool->gpu_busy[best]++;
        job->gpu_ids[job->n_gpu_ids++] = best;
    }
    pool->cpus_used += cpus_wanted(job, pool);
    pool->running++;
    job->state = SCHED_RUNNING;
}

static void give_back(SchedJob *job, SchedPool *pool) {
    for (int i = 0; i < job->n_gpu_ids; i++) pool->gpu_busy[job->gpu_ids[i]]--;
    pool->cpus_used -= cpus_wanted(job, pool);
    pool->running--;
}

void sched_finish(SchedJob *jobs, int j, SchedPool *pool) {
    SchedJob *job = &jobs[j];
    if (job->state != SCHED_RUNNING) return;
    give_back(job, pool);
    job->state = SCHED_DONE;
}

void sched_unstart(SchedJob *jobs, int j, SchedPool *pool) {
    SchedJob *job = &jobs[j];
    if (job->state != SCHED_RUNNING) return;
    give_back(job, pool);
    job->n_gpu_ids = 0;
    job->state = SCHED_WAITING;
}

int sched_all_done(const SchedJob *jobs, int n) {
    for (int j = 0; j < n; j++)
        if (jobs[j].state != SCHED_DONE) return 0;
    return 1;
}

int sched_online_cpus(void) {
    const char *e = getenv("NSA_HARNESS_CPUS");   // the cores to divide, when not all of them
    if (e && e[0]) {
        char *end = NULL;
        const long n = strtol(e, &end, 10);
        if (end && !*end && n >= 1 && n <= 4096) return (int)n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
