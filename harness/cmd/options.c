// harness/cmd/options.c — the option tables' parser and --help (see options.h).
#define _GNU_SOURCE
#include "harness/cmd/options.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "harness/core/home.h"
#include "common/exit_codes.h"

const CmdOptions *cmd_options_at(int i) {
    static const CmdOptions *const all[] = {&CMD_RUN_OPTIONS,     &CMD_LIST_OPTIONS,
                                            &CMD_VALIDATE_OPTIONS, &CMD_SHOW_OPTIONS,
                                            &CMD_BASELINE_RECORD_OPTIONS, &CMD_BASELINE_SHOW_OPTIONS,
                                            &CMD_COMPARE_OPTIONS,  &CMD_BISECT_OPTIONS};
    return i >= 0 && i < (int)(sizeof all / sizeof all[0]) ? all[i] : NULL;
}

void cmd_log(const char *command, LogLevel level, const char *fmt, ...) {
    const int saved = errno;
    char *msg = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&msg, fmt, ap) < 0) msg = NULL;
    va_end(ap);
    const char *m = msg ? msg : fmt;
    const size_t n = strlen(m);
    char *line = NULL;
    int len = asprintf(&line, "%s %s: %s%s%s", nsa_log_program(), command,
                       level == LOG_WARN ? "warning: " : level == LOG_NOTE ? "note: " : "", m,
                       n && m[n - 1] == '\n' ? "" : "\n");
    fflush(stderr);
    if (len > 0 && write(2, line, (size_t)len) < 0) { /* stderr gone: nothing to tell */ }
    free(line);
    free(msg);
    errno = saved;
}

const CmdOption *cmd_option_find(const CmdOptions *t, const char *name) {
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].name && !strcmp(t->rows[i].name, name)) return &t->rows[i];
    return NULL;
}

static const CmdOption *short_find(const CmdOptions *t, char c) {
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].name && c && t->rows[i].short_name == c) return &t->rows[i];
    return NULL;
}

struct option *cmd_options_getopt(const CmdOptions *t) {
    struct option *opts = calloc((size_t)t->n_rows + 1, sizeof *opts);
    int n = 0;
    for (int i = 0; i < t->n_rows; i++) {
        const CmdOption *r = &t->rows[i];
        if (r->name) opts[n++] = (struct option){r->name, r->arg ? required_argument : no_argument, NULL, r->id};
    }
    return opts;   // calloc: the zero row after them
}

// getopt_long's optstring: plain words in order ('-'), ':' for a missing value, the short forms
static void optstring_of(const CmdOptions *t, char *out, size_t n) {
    size_t k = (size_t)snprintf(out, n, "-:");
    for (int i = 0; i < t->n_rows && k + 3 < n; i++) {
        const CmdOption *r = &t->rows[i];
        if (!r->name || !r->short_name) continue;
        out[k++] = r->short_name;
        if (r->arg) out[k++] = ':';
    }
    out[k] = '\0';
}

// Whether `word`, the next word of the command line, may go to getopt_long: a plain word
// ("-" is one), "--" followed by the full name of a row, or a row's short form (with its
// value attached when it takes one: -j4). 0 for anything else.
static int word_ok(const CmdOptions *t, const char *word) {
    if (word[0] != '-' || !word[1]) return 1;
    if (word[1] == '-') return word[2] && cmd_option_find(t, word + 2) != NULL;
    const CmdOption *r = short_find(t, word[1]);
    return r && (!word[2] || r->arg);
}

int cmd_options_parse(const CmdOptions *t, int argc, char **argv, CmdOptionFn fn, CmdUnknownFn unknown, void *ctx) {
    // getopt_long's argv: a program name, then the arguments (its argv[0] is skipped)
    char **av = calloc((size_t)argc + 2, sizeof *av);
    char prog[64];
    snprintf(prog, sizeof prog, "nsa-harness %s", t->command);
    av[0] = prog;
    for (int i = 0; i < argc; i++) av[i + 1] = argv[i];
    struct option *opts = cmd_options_getopt(t);
    char optstring[64];
    optstring_of(t, optstring, sizeof optstring);
    const int ac = argc + 1;
    int rc = CMD_GO_ON;
    opterr = 0;   // the messages are ours
    optind = 0;   // (0: glibc starts afresh, as a second parse in one process needs)
    for (int first = 1; rc == CMD_GO_ON; first = 0) {
        const int at = first ? 1 : optind;
        const char *word = at < ac ? av[at] : NULL;
        if (word && !word_ok(t, word)) {   // an abbreviation, --flag=VALUE, -x, --
            const int took = unknown ? unknown(ctx, word, at + 1 < ac ? av[at + 1] : NULL) : 0;
            if (took > 0) {
                if (first) (void)getopt_long(1, av, optstring, opts, NULL);   // initialise getopt's state
                optind = at + took;
                continue;
            }
            cmd_log(t->command, LOG_ERROR, "unknown option '%s' (see nsa-harness help %s)", word, t->help_of);
            rc = HARNESS_EXIT_USAGE;
            break;
        }
        const int id = getopt_long(ac, av, optstring, opts, NULL);
        if (id == -1) break;
        if (id == '?') {   // what getopt_long refused (word_ok let through what it takes)
            cmd_log(t->command, LOG_ERROR, "unknown option '%s' (see nsa-harness help %s)", word ? word : "?",
                    t->help_of);
            rc = HARNESS_EXIT_USAGE;
        } else if (id == ':') {
            cmd_log(t->command, LOG_ERROR, "%s needs a value (see nsa-harness help %s)", word, t->help_of);
            rc = HARNESS_EXIT_USAGE;
        } else if (id == OPT_HELP) {
            cmd_options_help(t->help_from ? t->help_from : t, stdout);
            rc = HARNESS_EXIT_OK;
        } else {
            // the option as messages name it: "--out", or "-j" also for -j4
            char flag[80];
            if (id != OPT_WORD && word && word[1] != '-') snprintf(flag, sizeof flag, "-%c", word[1]);
            else snprintf(flag, sizeof flag, "%.79s", id == OPT_WORD || !word ? "" : word);
            rc = fn(ctx, id, flag, optarg);
        }
    }
    free(opts);
    free(av);
    return rc;
}

// ---- --help ------------------------------------------------------------------------------------

// text with every "<home>" replaced by the runner's data folder (malloc'd)
static char *with_home(const char *text) {
    const char *home = harness_home();
    size_t n = strlen(text) + 1;
    for (const char *p = strstr(text, "<home>"); p; p = strstr(p + 6, "<home>")) n += strlen(home);
    char *out = malloc(n), *o = out;
    for (const char *p = text; *p;) {
        if (!strncmp(p, "<home>", 6)) {
            o = stpcpy(o, home);
            p += 6;
        } else *o++ = *p++;
    }
    *o = '\0';
    return out;
}

// text wrapped at spaces to CMD_HELP_WIDTH, every line after the first indented to
// CMD_HELP_INDENT; the first line starts at column `col`. A '\n' in the text ends a line
// there (what belongs together on one line: "0 < X <= 1000").
static void put_wrapped(FILE *f, const char *text, int col) {
    const char *p = text;
    while (*p) {
        size_t room = (size_t)(col < CMD_HELP_WIDTH - 40 ? CMD_HELP_WIDTH - col : 40), n = strcspn(p, "\n");
        if (n > room) {   // the last space within the room (a longer word goes on one line)
            size_t cut = room;
            while (cut > 0 && p[cut] != ' ') cut--;
            if (cut == 0) cut = strcspn(p, " \n");
            n = cut;
        }
        fprintf(f, "%.*s\n", (int)n, p);
        p += n;
        if (*p == '\n') p++;
        while (*p == ' ') p++;
        if (*p) fprintf(f, "%*s", CMD_HELP_INDENT, "");
        col = CMD_HELP_INDENT;
    }
}

void cmd_options_help(const CmdOptions *t, FILE *f) {
    for (int i = 0; i < t->n_rows; i++) {
        const CmdOption *r = &t->rows[i];
        char *text = with_home(r->help);
        if (!r->name) {
            fputs(text, f);
            free(text);
            continue;
        }
        char head[96];
        snprintf(head, sizeof head, "%s%s--%s%s%s", r->short_name ? (char[]){'-', r->short_name, 0} : "",
                 r->short_name ? ", " : "", r->name, r->arg ? " " : "", r->arg ? r->arg : "");
        // the name in a column of its own; a longer one pushes its text to the right
        int col = fprintf(f, "  %-*s  ", CMD_HELP_INDENT - 4, head);
        put_wrapped(f, text, col);
        free(text);
    }
}
