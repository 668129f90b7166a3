// harness/exec/schedule.h — which case runs next when several run at once (`nsa-harness run -j N`).
//
// A run is a list of jobs in the report's order (a planned case, or a whole scenario whose
// family creates its cases as it goes). Each job says what it needs: GPUs (a case of n ranks
// on the GPU holds n of them, no other case shares them), CPU cores (its trainer's OpenMP
// threads, every rank's), the cases it compares with (they finish first), and whether it must
// have the machine to itself (timing-sensitive: perf floors, step-time trends, hang latency).
// The pool is the machine: its GPUs, its cores and the most jobs at a time (-j).
//
// The rule (sched_pick): the exclusive jobs, and every job that compares with one, wait until
// everything else has finished and then run one at a time, in order. The others start as soon
// as their references have finished and what they need is free: of the jobs that fit, the
// one needing the most GPUs first, then the earliest in the report's order; while a job that
// may start needs more GPUs than are free, no job needing fewer GPUs starts (CPU jobs may):
// the GPUs it waits for are not taken by 1-GPU jobs the moment they free, one by one. A job needing more than the pool has is
// given every GPU of the pool (the runner SKIPs such a case before it gets here; one at a
// time it would run alone). With one job at a
// time (-j 1) the jobs simply run in order, nothing deferred. The choice depends
// only on the jobs' states, never on time, so a test can replay it.
#ifndef NSA_HARNESS_SCHEDULE_H
#define NSA_HARNESS_SCHEDULE_H

#define SCHED_MAX_GPUS 64

enum { SCHED_WAITING, SCHED_RUNNING, SCHED_DONE };

typedef struct {
    int gpus;           // GPUs it holds while it runs (0: none)
    int cpus;           // cores its ranks' threads take (>= 1)
    int exclusive;      // it runs with the machine to itself
    const int *deps;    // indices of jobs that finish before it starts (earlier jobs)
    int n_deps;
    // the scheduler's
    int state;          // SCHED_*
    int deferred;       // exclusive, or compares with a deferred job: runs in the last phase
    int gpu_ids[SCHED_MAX_GPUS];   // while running: the pool's GPUs it holds
    int n_gpu_ids;
} SchedJob;

typedef struct {
    int n_gpus;         // GPUs of the pool (0: a CPU run)
    int per_gpu;        // jobs that may share one GPU (>= 1; a job's GPUs are always distinct)
    int n_cpus;         // cores
    int max_running;    // -j
    // the scheduler's
    int gpu_busy[SCHED_MAX_GPUS];   // jobs on each GPU
    int gpu_blocked[SCHED_MAX_GPUS];   // the caller's: another run on the machine holds it (taken by no job)
    int cpus_used;
    int running;
} SchedPool;

// Mark deferred jobs (exclusive or depending on one); call once before the first pick.
void sched_prepare(SchedJob *jobs, int n);
// The next job to start now, or -1 (nothing fits, or everything has started).
int sched_pick(const SchedJob *jobs, int n, const SchedPool *pool);
// Job j starts: takes its GPUs (distinct ones, the least shared first, then the lowest index)
// and cores.
void sched_start(SchedJob *jobs, int j, SchedPool *pool);
// Job j has finished: gives back what it held.
void sched_finish(SchedJob *jobs, int j, SchedPool *pool);
// Job j could not start after all (what it was given is taken elsewhere): it waits again.
void sched_unstart(SchedJob *jobs, int j, SchedPool *pool);
// Every job has finished.
int sched_all_done(const SchedJob *jobs, int n);

// The cores this process may run on (its affinity mask; at least 1), or NSA_HARNESS_CPUS
// (a whole number from 1 to 4096) when set: the cores the runner divides among its cases.
int sched_online_cpus(void);
#endif
