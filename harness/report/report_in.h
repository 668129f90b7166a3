// harness/report/report_in.h — a report read back: a report folder (or its summary.json), as
// `show` and `compare` take it, its summary.json read through common/util's reader (a
// regular file of at most 64 MiB) and checked against the format report.c writes. Both
// commands use this one loader, so they accept and refuse the same files: `{}`, another
// program's JSON or a wrongly typed key is exit 2 naming the file, the place
// (file:line:col) and what is wrong, never a report of nulls.
#ifndef NSA_HARNESS_REPORT_IN_H
#define NSA_HARNESS_REPORT_IN_H
#include <jansson.h>
#include <stddef.h>

// summary.json's "format": what report.c writes and what a reader accepts
#define SUMMARY_FORMAT "nsa-harness-summary-1"

typedef struct {
    const char *arg;         // as given
    char dir[4096];          // the report folder: case dirs are relative to it
    char summary[4200];      // its summary.json
    char *text;              // the file's text (positions of semantic errors)
    json_t *root;
    const json_t *cases;     // root["cases"], an array of objects
} ReportIn;

// Load and check ARG (a report folder, or a summary.json file). Checked: the root is an
// object with "format": SUMMARY_FORMAT and "cases", an array of objects each with the
// strings scenario, case and dir, a verdict that is a verdict name or null, facts an
// object; the other keys report.c writes (started, git, profile, device, faults,
// finished, interrupted, exit_code, counts, invalid_scenarios, disk_full), where present, of the
// type it writes. 0, or -1 with the message in err: "FILE:line:col: key: what is wrong",
// or "ARG: why" when there is no file to read.
int report_in_load(ReportIn *r, const char *arg, char *err, size_t errlen);
void report_in_free(ReportIn *r);
// root[key] when it is a string, else NULL
const char *report_in_str(const json_t *o, const char *key);
#endif
