// tests/trainer/test_train_flags.c — nsa-train's flag table (trainer/train_flags.c) and the
// tagged stderr lines (common/log.h):
//   - every flag has a unique name and id, a value name only when it takes a value, a text;
//     getopt_long's array has exactly the table's flags with the right has_arg;
//   - --help shows every flag at the start of a line, once, and no line past the width;
//   - which words go to getopt_long: only full names, "-h" and plain words;
//   - nsa_log's formats: "<program>: ", "warning: ", "note: ", one newline, a long line whole,
//     errno unchanged.
#define _GNU_SOURCE   // open_memstream
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "trainer/train_flags.h"

static void test_table_rows(void **state) {
    (void)state;
    int named = 0;
    for (int i = 0; i < TRAIN_N_FLAGS; i++) {
        const TrainFlag *f = &TRAIN_FLAGS[i];
        assert_non_null(f->help);
        assert_true(f->help[0] != 0);
        if (!f->name) continue;
        named++;
        assert_true(strlen(f->name) > 1 && f->name[0] != '-');
        assert_ptr_equal(train_flag_find(f->name), f);
        if (f->arg) assert_true(f->arg[0] >= 'A' && f->arg[0] <= 'Z');   // FILE, N, KEY=VALUE, ...
        for (int j = i + 1; j < TRAIN_N_FLAGS; j++) {
            if (!TRAIN_FLAGS[j].name) continue;
            assert_string_not_equal(f->name, TRAIN_FLAGS[j].name);
            assert_int_not_equal(f->id, TRAIN_FLAGS[j].id);
        }
    }
    assert_true(named >= 30);
    const struct option *o = train_flags_getopt();
    int n = 0;
    for (; o[n].name; n++) {
        const TrainFlag *f = train_flag_find(o[n].name);
        assert_non_null(f);
        assert_int_equal(o[n].val, f->id);
        assert_int_equal(o[n].has_arg, f->arg ? required_argument : no_argument);
        assert_null(o[n].flag);
    }
    assert_int_equal(n, named);
    assert_null(train_flag_find("conf"));
    assert_null(train_flag_find(""));
}

static void test_help_lists_every_flag(void **state) {
    (void)state;
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    train_flags_help(f);
    fclose(f);
    assert_true(strncmp(text, "usage: nsa-train --config FILE", 30) == 0);
    for (int i = 0; i < TRAIN_N_FLAGS; i++) {
        const TrainFlag *r = &TRAIN_FLAGS[i];
        if (!r->name) continue;
        char head[96];
        snprintf(head, sizeof head, "\n  --%s%s%s ", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
        const char *at = strstr(text, head);
        assert_non_null(at);
        assert_null(strstr(at + 1, head));   // once
    }
    for (const char *line = text; *line;) {   // no line past the width
        const char *nl = strchr(line, '\n');
        assert_non_null(nl);
        assert_true(nl - line <= TRAIN_HELP_WIDTH);
        line = nl + 1;
    }
    free(text);
}

static void test_words(void **state) {
    (void)state;
    assert_true(train_flag_word_ok("--config"));
    assert_true(train_flag_word_ok("--allow-config-change"));
    assert_true(train_flag_word_ok("-h"));
    assert_true(train_flag_word_ok("configs/tiny.json"));   // a plain word: getopt_long returns it
    assert_true(train_flag_word_ok(""));
    assert_false(train_flag_word_ok("--conf"));              // an abbreviation
    assert_false(train_flag_word_ok("--steps=3"));
    assert_false(train_flag_word_ok("--"));
    assert_false(train_flag_word_ok("-"));
    assert_false(train_flag_word_ok("-x"));
    assert_false(train_flag_word_ok("-hx"));
    assert_false(train_flag_word_ok("-config"));
    assert_false(train_flag_word_ok("---config"));
}

// what nsa_log writes to stderr while fn runs, into out (NUL-terminated)
static void capture(void (*fn)(void), char *out, size_t n) {
    char path[] = "/tmp/nsa_log_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    fn();
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    ssize_t k = pread(fd, out, n - 1, 0);
    out[k > 0 ? k : 0] = 0;
    close(fd);
    unlink(path);
}

static void say_levels(void) {
    nsa_log_set_program("nsa-train");
    nsa_log(LOG_ERROR, "--threads %s: expected a whole number from 1 to %d", "0", 1024);
    nsa_log(LOG_STATUS, "rank %d: joined", 1);
    nsa_log(LOG_WARN, "WORLD_SIZE=%d is set", 2);
    nsa_log(LOG_NOTE, "--resume %s: no config", "ck");
    nsa_log(LOG_ERROR, "ends with a newline\n");
    errno = ENOSPC;
    nsa_log(LOG_ERROR, "errno stays");
}

static void test_log_levels(void **state) {
    (void)state;
    char got[4096];
    capture(say_levels, got, sizeof got);
    assert_string_equal(got,
                        "nsa-train: --threads 0: expected a whole number from 1 to 1024\n"
                        "nsa-train: rank 1: joined\n"
                        "nsa-train: warning: WORLD_SIZE=2 is set\n"
                        "nsa-train: note: --resume ck: no config\n"
                        "nsa-train: ends with a newline\n"
                        "nsa-train: errno stays\n");
    assert_string_equal(nsa_log_program(), "nsa-train");
}

static int g_errno_after;
static void say_long(void) {
    char big[5000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    errno = EIO;
    nsa_log(LOG_WARN, "%s|end", big);
    g_errno_after = errno;
}

static void test_log_long_line(void **state) {
    (void)state;
    char got[8192];
    capture(say_long, got, sizeof got);
    assert_int_equal(g_errno_after, EIO);
    assert_int_equal(strlen(got), strlen("nsa-train: warning: ") + 4999 + strlen("|end\n"));
    assert_true(strncmp(got, "nsa-train: warning: xxx", 23) == 0);
    assert_string_equal(got + strlen(got) - 5, "|end\n");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_rows),
        cmocka_unit_test(test_help_lists_every_flag),
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_log_levels),
        cmocka_unit_test(test_log_long_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
