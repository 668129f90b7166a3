// tests/trainer/test_stackdump.c — a stall dump's wait for the other ranks' dumps
// (trainer/stackdump.c, stackdump_set_peers). A forked child installs the handlers with
// one peer stack file, raises SIGUSR1, writes its dump and then waits, at most
// SD_PEER_WAIT_MS (1.5 s), until the peer file ends a dump too:
//   - a peer file that already ended with an older run's dump when the peers were set (a
//     reused --stack-file is opened for append) does not count: the child waits the whole
//     bound (before the fix it stopped at once, and a launcher could then kill the peers
//     mid-dump);
//   - an end-of-dump line the peer file gains afterwards ends the wait at once;
//   - a peer file replaced by a shorter one counts from its start.
// Timing margins (the test is RUN_SERIAL): "waits the bound" is >= 1.0 s of the 1.5 s;
// "ends at once" is < 1.3 s after the line lands, against 20 ms polls.
#define _POSIX_C_SOURCE 200809L   // mkdtemp, strdup, nanosleep
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/exit_codes.h"
#include "common/util.h"
#include "trainer/stackdump.h"

#define TEST_TMPDIR_TAG "stackdump"
#include "tests/trainer/test_tmpdir.h"

static const char END_LINE[] = "--- end of stall dump: exiting with status 138 ---\n";

static void write_file(const char *path, const char *mode, const char *text) {
    FILE *f = fopen(path, mode);
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}
static int file_has(const char *path, const char *needle) {
    char *text = read_file(path, NULL);
    const int has = text && strstr(text, needle);
    free(text);
    return has;
}

// the child: rank 0 with stack file `own` and the one peer file `peer`, stalled
static void child_dump(const char *own, const char *peer) {
    setenv("NSA_ADDR2LINE", "none", 1);   // the fallback symbolizer: no addr2line runs
    if (stackdump_install(own, 0)) _exit(3);
    static char *peers[1];
    peers[0] = strdup(peer);
    stackdump_set_peers(peers, 1);
    raise(SIGUSR1);
    _exit(4);   // not reached: the handler exits with 138
}

// forks the child; returns once its own file ends its dump (the wait has begun), with
// the child's pid; fails the test after 20 s
static pid_t start_child(const char *own, const char *peer) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) child_dump(own, peer);
    const double t0 = mono_s();
    while (!file_has(own, "--- end of stall dump")) {
        assert_true(mono_s() - t0 < 20.0);
        const struct timespec nap = {0, 2000000L};
        nanosleep(&nap, NULL);
    }
    return pid;
}
// seconds from now until the child exits with 138
static double exit_138_after(pid_t pid) {
    const double t0 = mono_s();
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), NSA_EXIT_STALL_DUMP);
    return mono_s() - t0;
}
// the files <tag>_rank_0.txt (the child's) and <tag>_rank_1.txt (its peer), the peer holding
// an older run's dump of `frames` frame lines, ended or not; then the child, waiting
static pid_t older_run_then_child(const char *tag, int frames, int ended, char *own, char *peer, size_t n) {
    char name[64];
    snprintf(name, sizeof name, "%s_rank_0.txt", tag);
    path_in_dir(own, n, name);
    snprintf(name, sizeof name, "%s_rank_1.txt", tag);
    path_in_dir(peer, n, name);
    write_file(peer, "w", "nsa-train rank 1 pid 1: SIGUSR1 (stall dump) at an older run\n");
    for (int i = 0; i < frames; i++) write_file(peer, "a", "  #0 some frame of an older run's dump, long enough\n");
    if (ended) write_file(peer, "a", END_LINE);
    return start_child(own, peer);
}

static void test_stale_peer_dump_does_not_count(void **state) {
    (void)state;
    char own[512], peer[512];
    pid_t pid = older_run_then_child("stale", 0, 1, own, peer, sizeof own);
    const double waited = exit_138_after(pid);
    printf("      waited %.2f s after its own dump with only an older dump in the peer file\n", waited);
    assert_true(waited >= 1.0);
}

static void test_new_peer_dump_ends_the_wait(void **state) {
    (void)state;
    char own[512], peer[512];
    pid_t pid = older_run_then_child("new", 0, 1, own, peer, sizeof own);
    int st;
    assert_int_equal(waitpid(pid, &st, WNOHANG), 0);   // still waiting for the peer
    write_file(peer, "a", "nsa-train rank 1 pid 2: SIGUSR1 (stall dump) at this run\n");
    write_file(peer, "a", END_LINE);
    const double after = exit_138_after(pid);
    printf("      exited %.3f s after the peer's new dump ended\n", after);
    assert_true(after < 1.3);
}

static void test_replaced_peer_file_counts_from_its_start(void **state) {
    (void)state;
    char own[512], peer[512], tmp[520];
    // an older file, longer than the new dump will be, not ended
    pid_t pid = older_run_then_child("repl", 40, 0, own, peer, sizeof own);
    int st;
    assert_int_equal(waitpid(pid, &st, WNOHANG), 0);
    snprintf(tmp, sizeof tmp, "%s.new", peer);
    write_file(tmp, "w", END_LINE);
    assert_int_equal(rename(tmp, peer), 0);
    const double after = exit_138_after(pid);
    printf("      exited %.3f s after the peer file was replaced by a short one that ends a dump\n", after);
    assert_true(after < 1.3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stale_peer_dump_does_not_count),
        cmocka_unit_test(test_new_peer_dump_ends_the_wait),
        cmocka_unit_test(test_replaced_peer_file_counts_from_its_start),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
