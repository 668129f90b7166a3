// harness/families.h — scenario families: what a family adds on top of its
// checks. Each family reads the results of all its cases together and writes
// (1) diagnosis items that walk the decision tree of the evidence and (2) a
// report section with its tables and plots.
#ifndef NSA_HARNESS_FAMILIES_H
#define NSA_HARNESS_FAMILIES_H
#include "harness/result.h"
#include "harness/scenario.h"
#include "harness/util.h"

// The results of one scenario's cases (one per case, in case order; cases not
// run yet have verdict V_SKIP and no artifacts).
typedef struct {
    const Scenario *s;
    CaseResult *results;
    int n;
    int done;          // how many have finished
} ScenarioRun;

typedef struct {
    const char *name;
    const char *summary;
    // Markdown list items ("- ...\n") for the Diagnosis section; nothing when
    // everything passed and there is nothing worth saying.
    void (*diagnose)(const ScenarioRun *sr, Str *md);
    // A "## <scenario> — ..." section with tables and plots (image files written
    // under report_dir/<scenario>/); may write nothing.
    void (*section)(const ScenarioRun *sr, const char *report_dir, Str *md);
} FamilyDef;

const FamilyDef *family_find(const char *name);
const FamilyDef *family_at(int i);
const char *family_names(void);

// Shared by every family: diagnosis of HANG / CRASH / ERROR cases and a loss plot.
void diagnose_generic(const ScenarioRun *sr, Str *md);
void section_loss_plot(const ScenarioRun *sr, const char *report_dir, Str *md);
#endif
