// tests/harness/test_schedule.c — the scheduler of cases side by side (harness/exec/schedule.h):
// which job starts next, given the jobs' needs and states and the pool. Every rule is checked
// by a plan that breaks it if the rule is wrong: GPUs never over-held and a job's GPUs
// distinct, most GPUs first then plan order, a multi-GPU job not starved by 1-GPU jobs taking
// each GPU as it frees, references before the cases that compare with
// them, timing-sensitive (exclusive) jobs last and alone, cores never oversubscribed, -j 1 in
// plan order, a whole plan run to the end without a deadlock, and a machine of 8 GPUs.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "harness/exec/schedule.h"

static SchedPool pool_of(int gpus, int per_gpu, int cpus, int jobs) {
    SchedPool p;
    memset(&p, 0, sizeof p);
    p.n_gpus = gpus;
    p.per_gpu = per_gpu;
    p.n_cpus = cpus;
    p.max_running = jobs;
    return p;
}

static SchedJob job(int gpus, int cpus, int exclusive) {
    SchedJob j;
    memset(&j, 0, sizeof j);
    j.gpus = gpus;
    j.cpus = cpus;
    j.exclusive = exclusive;
    return j;
}

// start every job that may start now; returns how many started
static int start_all(SchedJob *jobs, int n, SchedPool *p) {
    int k = 0, j;
    while ((j = sched_pick(jobs, n, p)) >= 0) {
        sched_start(jobs, j, p);
        k++;
    }
    return k;
}

static void gpus_distinct_and_never_overheld(void **state) {
    (void)state;
    SchedJob jobs[6] = {job(1, 1, 0), job(2, 1, 0), job(1, 1, 0), job(1, 1, 0), job(2, 1, 0), job(1, 1, 0)};
    SchedPool p = pool_of(4, 1, 64, 8);
    sched_prepare(jobs, 6);
    start_all(jobs, 6, &p);
    int held[4] = {0}, running = 0;
    for (int j = 0; j < 6; j++) {
        if (jobs[j].state != SCHED_RUNNING) continue;
        running++;
        assert_int_equal(jobs[j].n_gpu_ids, jobs[j].gpus);
        for (int a = 0; a < jobs[j].n_gpu_ids; a++) {
            held[jobs[j].gpu_ids[a]]++;
            for (int b = a + 1; b < jobs[j].n_gpu_ids; b++) assert_int_not_equal(jobs[j].gpu_ids[a], jobs[j].gpu_ids[b]);
        }
    }
    for (int g = 0; g < 4; g++) assert_true(held[g] <= 1);
    // most GPUs first: the two 2-GPU jobs fill the 4 GPUs before any 1-GPU job
    assert_int_equal(jobs[1].state, SCHED_RUNNING);
    assert_int_equal(jobs[4].state, SCHED_RUNNING);
    assert_int_equal(running, 2);
    assert_int_equal(p.running, 2);
    // one ends: two 1-GPU jobs take its GPUs, the earliest first
    sched_finish(jobs, 1, &p);
    assert_int_equal(start_all(jobs, 6, &p), 2);
    assert_int_equal(jobs[0].state, SCHED_RUNNING);
    assert_int_equal(jobs[2].state, SCHED_RUNNING);
    assert_int_equal(jobs[3].state, SCHED_WAITING);
}

static void shared_gpus_keep_a_jobs_gpus_distinct(void **state) {
    (void)state;
    // two jobs a GPU, 2 GPUs: three 1-GPU jobs and a 2-GPU job
    SchedJob jobs[4] = {job(1, 1, 0), job(1, 1, 0), job(1, 1, 0), job(2, 1, 0)};
    SchedPool p = pool_of(2, 2, 64, 8);
    sched_prepare(jobs, 4);
    start_all(jobs, 4, &p);
    assert_int_equal(jobs[3].state, SCHED_RUNNING);   // most GPUs first
    assert_int_not_equal(jobs[3].gpu_ids[0], jobs[3].gpu_ids[1]);
    for (int g = 0; g < 2; g++) assert_true(p.gpu_busy[g] <= 2);
    // 4 slots, the 2-GPU job holds one on each: two 1-GPU jobs fit, one on each GPU (least shared)
    assert_int_equal(p.running, 3);
    assert_int_equal(p.gpu_busy[0], 2);
    assert_int_equal(p.gpu_busy[1], 2);
}

// A 2-GPU job whose reference finishes while 1-GPU jobs hold the GPUs: the GPUs that free are
// kept for it (no 1-GPU job takes them, a CPU job may run meanwhile), and it starts as soon as
// two are free. Without the hold each freed GPU goes to the next 1-GPU job and it never starts.
static void multi_gpu_job_not_starved(void **state) {
    (void)state;
    // 0-3: 1-GPU jobs, 4: 2-GPU job comparing with 0, 5-9: more 1-GPU jobs, 10: a CPU job
    SchedJob jobs[11];
    for (int j = 0; j < 11; j++) jobs[j] = job(1, 1, 0);
    jobs[4] = job(2, 1, 0);
    jobs[10] = job(0, 1, 0);
    const int dep0[] = {0};
    jobs[4].deps = dep0;
    jobs[4].n_deps = 1;
    SchedPool p = pool_of(4, 1, 64, 16);
    sched_prepare(jobs, 11);
    assert_int_equal(start_all(jobs, 11, &p), 5);   // 0-3 on the GPUs, the CPU job beside them
    assert_int_equal(jobs[10].state, SCHED_RUNNING);
    sched_finish(jobs, 10, &p);
    sched_finish(jobs, 0, &p);                     // job 4 may start now, one GPU is free
    assert_int_equal(start_all(jobs, 11, &p), 0);  // ... and kept for it
    assert_int_equal(jobs[5].state, SCHED_WAITING);
    sched_finish(jobs, 2, &p);                     // a second GPU: job 4 takes both
    assert_int_equal(start_all(jobs, 11, &p), 1);
    assert_int_equal(jobs[4].state, SCHED_RUNNING);
    assert_int_equal(jobs[4].n_gpu_ids, 2);
    sched_finish(jobs, 1, &p);                     // nothing needs two any more: 1-GPU jobs again
    assert_int_equal(start_all(jobs, 11, &p), 1);
    assert_int_equal(jobs[5].state, SCHED_RUNNING);
}

static void references_first(void **state) {
    (void)state;
    SchedJob jobs[3] = {job(1, 1, 0), job(1, 1, 0), job(1, 1, 0)};
    const int dep0[] = {0};
    jobs[1].deps = dep0;
    jobs[1].n_deps = 1;
    jobs[2].deps = dep0;
    jobs[2].n_deps = 1;
    SchedPool p = pool_of(4, 1, 64, 4);
    sched_prepare(jobs, 3);
    assert_int_equal(start_all(jobs, 3, &p), 1);   // only the reference, although GPUs are free
    assert_int_equal(jobs[0].state, SCHED_RUNNING);
    sched_finish(jobs, 0, &p);
    assert_int_equal(start_all(jobs, 3, &p), 2);
}

static void exclusive_last_and_alone(void **state) {
    (void)state;
    // job 1 is timing-sensitive, job 3 compares with it: both wait for the rest, then run alone
    SchedJob jobs[4] = {job(1, 1, 0), job(1, 1, 1), job(1, 1, 0), job(1, 1, 0)};
    const int dep1[] = {1};
    jobs[3].deps = dep1;
    jobs[3].n_deps = 1;
    SchedPool p = pool_of(4, 1, 64, 4);
    sched_prepare(jobs, 4);
    assert_true(jobs[1].deferred && jobs[3].deferred && !jobs[0].deferred && !jobs[2].deferred);
    assert_int_equal(start_all(jobs, 4, &p), 2);   // 0 and 2
    assert_int_equal(jobs[1].state, SCHED_WAITING);
    sched_finish(jobs, 0, &p);
    assert_int_equal(start_all(jobs, 4, &p), 0);   // 2 still runs: the exclusive one waits
    sched_finish(jobs, 2, &p);
    assert_int_equal(start_all(jobs, 4, &p), 1);
    assert_int_equal(jobs[1].state, SCHED_RUNNING);   // alone
    assert_int_equal(jobs[3].state, SCHED_WAITING);
    sched_finish(jobs, 1, &p);
    assert_int_equal(start_all(jobs, 4, &p), 1);
    assert_int_equal(jobs[3].state, SCHED_RUNNING);
}

static void cores_never_oversubscribed(void **state) {
    (void)state;
    // CPU jobs: 8 cores, jobs of 4, 4, 2 rank-threads and one of 8; -j 8
    SchedJob jobs[4] = {job(0, 4, 0), job(0, 4, 0), job(0, 2, 0), job(0, 8, 0)};
    SchedPool p = pool_of(0, 1, 8, 8);
    sched_prepare(jobs, 4);
    assert_int_equal(start_all(jobs, 4, &p), 2);   // 4 + 4: the machine is full
    assert_int_equal(p.cpus_used, 8);
    sched_finish(jobs, 0, &p);
    assert_int_equal(start_all(jobs, 4, &p), 1);   // the 2-core job fits, the 8-core one does not
    assert_int_equal(jobs[2].state, SCHED_RUNNING);
    sched_finish(jobs, 1, &p);
    sched_finish(jobs, 2, &p);
    assert_int_equal(start_all(jobs, 4, &p), 1);   // alone it always starts
    assert_int_equal(p.cpus_used, 8);
}

static void one_at_a_time_in_plan_order(void **state) {
    (void)state;
    SchedJob jobs[4] = {job(1, 1, 1), job(2, 1, 0), job(1, 1, 0), job(0, 1, 0)};
    SchedPool p = pool_of(4, 1, 8, 1);
    sched_prepare(jobs, 4);
    for (int want = 0; want < 4; want++) {
        assert_int_equal(sched_pick(jobs, 4, &p), want);   // neither deferred nor reordered
        sched_start(jobs, want, &p);
        assert_int_equal(sched_pick(jobs, 4, &p), -1);
        sched_finish(jobs, want, &p);
    }
    assert_true(sched_all_done(jobs, 4));
}

static void a_whole_plan_ends(void **state) {
    (void)state;
    // 40 jobs of mixed needs (more GPUs than the pool, exclusives, references), finished in a
    // scrambled order: every one starts exactly once and the plan ends
    enum { N = 40 };
    SchedJob jobs[N];
    static int deps[N];
    for (int j = 0; j < N; j++) {
        jobs[j] = job(j % 7 == 0 ? 8 : j % 3, 1 + j % 5, j % 11 == 5);
        deps[j] = j - 1 - j % 4;
        if (j % 4 == 2 && deps[j] >= 0) {
            jobs[j].deps = &deps[j];
            jobs[j].n_deps = 1;
        }
    }
    SchedPool p = pool_of(4, 1, 6, 5);
    sched_prepare(jobs, N);
    int started = 0, rounds = 0;
    while (!sched_all_done(jobs, N) && rounds++ < 10 * N) {
        started += start_all(jobs, N, &p);
        assert_true(p.running > 0);   // something always runs until the end: no deadlock
        assert_true(p.running <= 5);
        int exclusive_running = 0;
        for (int j = 0; j < N; j++) exclusive_running |= jobs[j].state == SCHED_RUNNING && jobs[j].deferred;
        if (exclusive_running) assert_int_equal(p.running, 1);
        int victim = -1;   // finish the running job of the highest index, then the lowest
        for (int j = 0; j < N; j++)
            if (jobs[j].state == SCHED_RUNNING && (victim < 0 || (rounds % 2 ? j > victim : j < victim))) victim = j;
        sched_finish(jobs, victim, &p);
    }
    assert_true(sched_all_done(jobs, N));
    assert_int_equal(started, N);
    assert_int_equal(p.running, 0);
    assert_int_equal(p.cpus_used, 0);
    for (int g = 0; g < 4; g++) assert_int_equal(p.gpu_busy[g], 0);
}

// A machine of 8 GPUs (-j auto: 3 cases a GPU): the 8-rank case (the NCCL hang of 8 ranks) takes
// all 8, distinct, and runs beside nothing on the GPUs but keeps every GPU at most per_gpu deep;
// then the 4-, 2- and 1-GPU cases fill the GPUs, most GPUs first, never more than 3 a GPU.
static void eight_gpus(void **state) {
    (void)state;
    enum { N = 12 };
    SchedJob jobs[N] = {job(1, 1, 0), job(2, 1, 0), job(8, 1, 0), job(4, 1, 0), job(1, 1, 0), job(2, 1, 0),
                        job(1, 1, 0), job(1, 1, 0), job(4, 1, 0), job(2, 1, 0), job(1, 1, 0), job(0, 1, 0)};
    SchedPool p = pool_of(8, 3, 128, 24);
    sched_prepare(jobs, N);
    start_all(jobs, N, &p);
    // most GPUs first: the 8-rank case, then the two 4-GPU ones beside it (3 a GPU)
    assert_int_equal(jobs[2].state, SCHED_RUNNING);
    assert_int_equal(jobs[3].state, SCHED_RUNNING);
    assert_int_equal(jobs[8].state, SCHED_RUNNING);
    assert_int_equal(jobs[2].n_gpu_ids, 8);
    int seen[8] = {0};
    for (int a = 0; a < 8; a++) seen[jobs[2].gpu_ids[a]]++;
    for (int g = 0; g < 8; g++) assert_int_equal(seen[g], 1);   // all 8, each once
    int started = 0, rounds = 0;
    for (int j = 0; j < N; j++) started += jobs[j].state == SCHED_RUNNING;
    while (!sched_all_done(jobs, N) && rounds++ < 10 * N) {
        for (int g = 0; g < 8; g++) assert_true(p.gpu_busy[g] <= 3);
        for (int j = 0; j < N; j++) {
            if (jobs[j].state != SCHED_RUNNING) continue;
            assert_int_equal(jobs[j].n_gpu_ids, jobs[j].gpus);
            for (int a = 0; a < jobs[j].n_gpu_ids; a++)
                for (int b = a + 1; b < jobs[j].n_gpu_ids; b++) assert_int_not_equal(jobs[j].gpu_ids[a], jobs[j].gpu_ids[b]);
        }
        int victim = -1;   // the earliest running job ends
        for (int j = 0; j < N && victim < 0; j++)
            if (jobs[j].state == SCHED_RUNNING) victim = j;
        assert_true(victim >= 0);   // no deadlock
        sched_finish(jobs, victim, &p);
        started += start_all(jobs, N, &p);
    }
    assert_true(sched_all_done(jobs, N));
    assert_int_equal(started, N);
    for (int g = 0; g < 8; g++) assert_int_equal(p.gpu_busy[g], 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(gpus_distinct_and_never_overheld),
        cmocka_unit_test(shared_gpus_keep_a_jobs_gpus_distinct),
        cmocka_unit_test(multi_gpu_job_not_starved),
        cmocka_unit_test(references_first),
        cmocka_unit_test(exclusive_last_and_alone),
        cmocka_unit_test(cores_never_oversubscribed),
        cmocka_unit_test(one_at_a_time_in_plan_order),
        cmocka_unit_test(a_whole_plan_ends),
        cmocka_unit_test(eight_gpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
