// tests/harness/test_options.c — the subcommands' option tables (harness/cmd/options.h): every
// table's rows (unique names, help text for each, --help in each, short forms that are their
// ids), the --help each writes (every option of its table named), and the parser on a table
// of its own: options in order with the value as the next word whatever it looks like, -jN,
// plain words, and exit 2 for an unknown option, an abbreviation, --flag=VALUE, "--" and a
// missing value; a command's own handler for words that are no option; two parses in one
// process.
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness/cmd/options.h"
#include "common/exit_codes.h"

// ---- the tables ----------------------------------------------------------------------------------

static void tables_rows(void **state) {
    (void)state;
    int n_tables = 0;
    for (const CmdOptions *t; (t = cmd_options_at(n_tables)); n_tables++) {
        assert_non_null(t->command);
        assert_non_null(t->help_of);
        int has_help = 0;
        for (int i = 0; i < t->n_rows; i++) {
            const CmdOption *r = &t->rows[i];
            assert_non_null(r->help);
            assert_true(r->help[0] != '\0');
            if (!r->name) continue;   // a text row
            assert_true(r->name[0] != '\0' && r->name[0] != '-');
            assert_true(r->id >= OPT_HELP);
            assert_true(!r->arg || r->arg[0]);
            assert_true(!r->short_name || r->short_name == r->id);   // getopt_long returns the letter
            has_help |= r->id == OPT_HELP;
            for (int k = 0; k < i; k++) {   // a name and an id once per table
                const CmdOption *q = &t->rows[k];
                if (!q->name) continue;
                if (!strcmp(q->name, r->name) || q->id == r->id) fail_msg("%s: --%s twice", t->command, r->name);
            }
            assert_ptr_equal(cmd_option_find(t, r->name), r);
        }
        if (!has_help) fail_msg("%s: no --help row", t->command);
    }
    assert_int_equal(n_tables, 8);
    assert_null(cmd_options_at(-1));
}

static void tables_help_lists_every_option(void **state) {
    (void)state;
    for (int k = 0; cmd_options_at(k); k++) {
        const CmdOptions *t = cmd_options_at(k);
        const CmdOptions *h = t->help_from ? t->help_from : t;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        cmd_options_help(h, f);
        fclose(f);
        assert_non_null(strstr(text, "usage: nsa-harness"));
        assert_null(strstr(text, "<home>"));   // replaced by the data folder
        for (int i = 0; i < t->n_rows; i++) {
            const CmdOption *r = &t->rows[i];
            if (!r->name) continue;
            char want[96];
            snprintf(want, sizeof want, "--%s", r->name);
            if (!strstr(text, want)) fail_msg("help of %s does not list %s", t->command, want);
        }
        for (const char *line = text; *line; line = strchr(line, '\n') + 1) {   // wrapped within its width
            size_t n = strcspn(line, "\n");
            if (n > CMD_HELP_WIDTH && memchr(line, ' ', n) && !strstr(line, "/")) fail_msg("%.*s: too long", (int)n, line);
            if (!line[n]) break;
        }
        free(text);
    }
}

// ---- the parser, on a table of its own --------------------------------------------------------------

static const CmdOption ROWS[] = {
    {NULL, NULL, 0, 0, "usage: nsa-harness demo [WORD...] [options]\n"},
    {"out", "DIR", OPT_OUT, 0, "where"},
    {"quiet", NULL, OPT_QUIET, 0, "no lines"},
    {"jobs", "N", OPT_JOBS, 'j', "how many"},
    CMD_OPT_HELP,
};
static const CmdOptions DEMO = {"demo", "demo", ROWS, (int)(sizeof ROWS / sizeof ROWS[0]), NULL};

typedef struct {
    char seen[1024];   // "id:flag=value;" per call
    int stop_at;       // the id whose value "bad" is a usage error
} Seen;

static int record(void *ctx, int id, const char *flag, const char *value) {
    Seen *s = ctx;
    size_t n = strlen(s->seen);
    snprintf(s->seen + n, sizeof s->seen - n, "%d:%s=%s;", id, flag, value ? value : "-");
    return id == s->stop_at && value && !strcmp(value, "bad") ? HARNESS_EXIT_USAGE : CMD_GO_ON;
}

static int parse(Seen *s, CmdUnknownFn unknown, int argc, ...) {
    char *argv[16];
    va_list ap;
    va_start(ap, argc);
    for (int i = 0; i < argc; i++) argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    memset(s->seen, 0, sizeof s->seen);
    return cmd_options_parse(&DEMO, argc, argv, record, unknown, s);
}

static void parser_in_order(void **state) {
    (void)state;
    Seen s = {.stop_at = -1};
    char want[256];
    assert_int_equal(parse(&s, NULL, 7, "a", "--out", "-x", "--quiet", "-j4", "-", "b"), CMD_GO_ON);
    snprintf(want, sizeof want, "1:=a;%d:--out=-x;%d:--quiet=-;%d:-j=4;1:=-;1:=b;", OPT_OUT, OPT_QUIET, OPT_JOBS);
    assert_string_equal(s.seen, want);
    // a second parse in the same process starts afresh
    assert_int_equal(parse(&s, NULL, 3, "--jobs", "2", "c"), CMD_GO_ON);
    snprintf(want, sizeof want, "%d:--jobs=2;1:=c;", OPT_JOBS);
    assert_string_equal(s.seen, want);
    assert_int_equal(parse(&s, NULL, 2, "-j", "3"), CMD_GO_ON);
    snprintf(want, sizeof want, "%d:-j=3;", OPT_JOBS);
    assert_string_equal(s.seen, want);
    assert_int_equal(parse(&s, NULL, 0), CMD_GO_ON);
    assert_string_equal(s.seen, "");
}

static void parser_usage_errors(void **state) {
    (void)state;
    Seen s = {.stop_at = OPT_OUT};
    assert_int_equal(parse(&s, NULL, 2, "a", "--bogus"), HARNESS_EXIT_USAGE);      // unknown
    assert_string_equal(s.seen, "1:=a;");                                         // nothing after it
    assert_int_equal(parse(&s, NULL, 2, "--qui", "a"), HARNESS_EXIT_USAGE);       // an abbreviation
    assert_int_equal(parse(&s, NULL, 1, "--out=x"), HARNESS_EXIT_USAGE);          // --flag=VALUE
    assert_int_equal(parse(&s, NULL, 2, "--", "a"), HARNESS_EXIT_USAGE);          // "--"
    assert_int_equal(parse(&s, NULL, 1, "-x"), HARNESS_EXIT_USAGE);               // an unknown short form
    assert_int_equal(parse(&s, NULL, 1, "-qj"), HARNESS_EXIT_USAGE);              // no clusters
    assert_int_equal(parse(&s, NULL, 1, "-hj"), HARNESS_EXIT_USAGE);
    assert_int_equal(parse(&s, NULL, 2, "a", "--out"), HARNESS_EXIT_USAGE);       // a missing value
    assert_string_equal(s.seen, "1:=a;");
    assert_int_equal(parse(&s, NULL, 1, "-j"), HARNESS_EXIT_USAGE);
    assert_int_equal(parse(&s, NULL, 3, "--out", "bad", "z"), HARNESS_EXIT_USAGE);   // the command's own verdict
    char want[64];
    snprintf(want, sizeof want, "%d:--out=bad;", OPT_OUT);
    assert_string_equal(s.seen, want);
}

// a command that takes words the table does not know (bisect forwards them): "-k V" as two
static int take_k(void *ctx, const char *word, const char *next) {
    Seen *s = ctx;
    size_t n = strlen(s->seen);
    int two = !strcmp(word, "-k") && next;
    if (strcmp(word, "-k") && strcmp(word, "--other")) return 0;
    snprintf(s->seen + n, sizeof s->seen - n, "U:%s%s%s;", word, two ? " " : "", two ? next : "");
    return two ? 2 : 1;
}

static void parser_unknown_handler(void **state) {
    (void)state;
    Seen s = {.stop_at = -1};
    char want[256];
    assert_int_equal(parse(&s, take_k, 6, "-k", "v", "--quiet", "--other", "w", "--out=x"), HARNESS_EXIT_USAGE);
    snprintf(want, sizeof want, "U:-k v;%d:--quiet=-;U:--other;1:=w;", OPT_QUIET);
    assert_string_equal(s.seen, want);
    assert_int_equal(parse(&s, take_k, 3, "a", "-k", "--out"), CMD_GO_ON);   // the handler took --out as -k's value
    assert_string_equal(s.seen, "1:=a;U:-k --out;");
    assert_int_equal(parse(&s, take_k, 2, "--other", "--out"), HARNESS_EXIT_USAGE);   // then --out without a value
    assert_string_equal(s.seen, "U:--other;");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tables_rows),
        cmocka_unit_test(tables_help_lists_every_option),
        cmocka_unit_test(parser_in_order),
        cmocka_unit_test(parser_usage_errors),
        cmocka_unit_test(parser_unknown_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
