// harness/core/family.h — scenario families: what a family adds on top of its
// checks. Each family reads the results of all its cases together and writes
// (1) diagnosis items that walk the decision tree of the evidence and (2) a
// report section with its tables and plots. Each family is a file of harness/families/
// named as its key (harness/families/gc_bisection.c: `gc_bisection`), listed in the
// registry of families (harness/families/families.c); the loader, the runner and the
// reports know a family only through this struct, and never test a family's name.
#ifndef NSA_HARNESS_FAMILIES_H
#define NSA_HARNESS_FAMILIES_H
#include <stddef.h>

#include "harness/core/registry.h"
#include "harness/core/result.h"
#include "harness/core/scenario.h"
#include "common/util.h"

struct RunCtx;   // how the run was asked for (harness/exec/runner.h)

// What a family's execute hook gets: the run it appends to and a way to run one
// more case derived from a base case.
typedef struct FamilyExec FamilyExec;
struct FamilyExec {
    ScenarioRun *sr;
    const Case *const *bases;   // the scenario's cases that --filter selected
    int n_bases;
    // Run `base` plus `extra` overrides as a new case named `name` (its report
    // folder too); appended to sr, reported, and its index in sr->results returned.
    int (*run_variant)(FamilyExec *fx, const Case *base, const char *name, const Override *extra, int n_extra);
    int (*interrupted)(FamilyExec *fx);   // the user pressed Ctrl-C: stop planning
    void *priv;                 // the caller's state
};

typedef struct {
    const char *name;
    const char *summary;
    // Markdown list items ("- ...\n") for the Diagnosis section; nothing when
    // everything passed and there is nothing worth saying.
    void (*diagnose)(const ScenarioRun *sr, Str *md);
    // A "## <scenario> — ..." section with tables and plots (image files written
    // under report_dir/<scenario>/); may write nothing.
    void (*section)(const ScenarioRun *sr, const char *report_dir, Str *md);
    // Optional: run the scenario itself — adaptively, creating cases as it goes
    // (GC bisection). Without it every selected case runs once, in order.
    void (*execute)(FamilyExec *fx);
    // Optional: run one case another way than as a trainer (the self-test runs a
    // nested nsa-harness).
    void (*run_case)(const struct RunCtx *ctx, CaseResult *r);
    // Optional: NULL-terminated names of the cases the family creates, so checks
    // may name them as their "reference" (e.g. "ckpt=off").
    const char *const *(*generated_names)(void);
    // Optional: the family's files have a schema of their own (the self-test's
    // detections). Reads ld->s->root (whose "family" names this family) into the
    // scenario's name, description, profiles and cases for ld->profile, reporting
    // every problem at its position (scenario_problem); 0, or -1 with problems.
    // Without it, the scenario schema of docs/scenarios.md applies.
    int (*load)(ScenarioLoader *ld);
    // Optional: what a case needs when cases run side by side (harness/exec/run_cases.h), beyond
    // what its scenario says (GPUs for its ranks, exclusive for a timing check): e.g. the
    // self-test's nested run holds the GPUs its scenario needs. profile: the run's;
    // gpus_here: the run's usable GPUs. Called before any case starts, in the runner's thread.
    void (*needs)(const Scenario *s, const Case *c, const char *profile, int gpus_here, int *gpus, int *exclusive,
                  int *ranks);
    // Optional: a glob of the step-1 dump's tensors the family's own report reads beyond its
    // checks' (ddp_onestep's diagnosis reads every gradient): kept in a --dump-tensors selection.
    const char *dump_reads;
} FamilyDef;

// (the registry finds a part by its first member)
_Static_assert(offsetof(FamilyDef, name) == 0, "a FamilyDef begins with its name");

// The registry of families (harness/families/families.c: FAMILIES), in `list --families` order.
extern Registry family_registry;

const FamilyDef *family_find(const char *name);   // NULL: no such family
const FamilyDef *family_at(int i);                // NULL past the end
const char *family_names(void);                   // "branch_isolation, gate_init, ..."
#endif
