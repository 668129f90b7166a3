// harness/core/check.h — the checks a scenario can list, one small struct of
// callbacks each (in the manner of nccl-tests' test engine): validate the
// check's parameters when the scenario is loaded, say which trainer diagnostics
// it needs, and evaluate a finished case into findings. Each check is a file of
// harness/checks/ named as its key (harness/checks/growth.c: `growth`), listed in the
// registry of checks (harness/checks/checks.c); the loader and the runner know a check
// only through this struct.
#ifndef NSA_HARNESS_CHECKS_H
#define NSA_HARNESS_CHECKS_H
#include <jansson.h>
#include <stddef.h>

#include "harness/core/result.h"
#include "harness/core/registry.h"
#include "harness/core/scenario.h"

// Trainer diagnostics a check reads (nsa-train flags the runner then passes):
// --trace-grads, --gate-stats, --dump-step CASE/step1.safetensors, --dump-acts.
enum { NEED_GRAD_TRACE = 1u, NEED_GATE_STATS = 2u, NEED_DUMP = 4u, NEED_DUMP_ACTS = 8u };

typedef struct {
    const char *name;      // as written in "check": ...
    const char *summary;   // one line, for `nsa-harness list --checks` and the docs
    unsigned needs;        // NEED_* bits
    // Problems with the parameters (the check's object at jpath, e.g. "checks[1]").
    // Runs once per expanded profile, so it may look at s->cases.
    void (*validate)(const Scenario *s, const json_t *params, const char *jpath, Problems *ps);
    // Evaluate a case that ran to completion (or stopped with an anomaly): add
    // findings with result_finding(). sr holds the scenario's finished cases, for
    // checks that compare a case with a reference case.
    void (*evaluate)(const json_t *params, CaseResult *r, const ScenarioRun *sr);
    int cross_case;        // takes "reference": the case (glob) it compares with
    // Optional: trainer diagnostics its parameters ask for beyond `needs` (dump_match: the
    // activations, --dump-acts, when one of its "tensors" globs starts with "acts.").
    unsigned (*needs_of)(const json_t *params);
    // Optional: it judges wall-clock time with these parameters (perf_floor; growth of a
    // time metric): its case runs with the machine to itself. Without it: never.
    int (*judges_time)(const json_t *params);
    // Optional, for a check that reads the step dump: the tensors it reads, added to the
    // --dump-tensors list `globs` with check_glob_list_add; 0 when it reads the whole dump.
    // Without it a check that needs the dump reads all of it (golden).
    int (*dump_tensors)(const json_t *params, Str *globs);
} CheckDef;

// (the registry finds a part by its first member)
_Static_assert(offsetof(CheckDef, name) == 0, "a CheckDef begins with its name");

// The registry of checks (harness/checks/checks.c: CHECKS), in `list --checks` order.
extern Registry check_registry;

// Helpers for a check's validate/evaluate (harness/core/check.c):
// unknown keys of the check's object are problems (known: NULL-terminated, "check" first)
void check_only_keys(const Scenario *s, const json_t *params, const char *jpath, const char *const *known,
                     Problems *ps);
// A number parameter in (lo, hi], or per profile {"ci": x, "gpu": y} (the profile
// being expanded or run picks); def when absent. ps NULL: evaluate time, no problems.
double check_num_param(const Scenario *s, const json_t *params, const char *jpath, const char *key, double def,
                       double lo, double hi, Problems *ps);

const CheckDef *check_find(const char *name);   // NULL: no such check
const CheckDef *check_at(int i);   // NULL past the end
const char *check_names(void);     // "finite, grad_arrival, ..."
// glob appended to the comma-separated list out unless it is there already
void check_glob_list_add(Str *out, const char *glob);
// How close reference candidate q is to case c: the axes on which their labels agree
// first (a reference per precision picks the one of c's precision), then the length of
// their names' common prefix (the generated cases of a GC bisection). Higher is closer.
int check_reference_score(const Scenario *s, const Case *c, const Case *q);
// The union of the needs of a scenario's checks.
unsigned checks_needs(const Scenario *s);
// The step dump's tensors the scenario reads, as the comma-separated globs of the trainer's
// --dump-tensors, into out: the union of every dump_match's `tensors` (its "!" globs only
// narrow) and of what the scenario's family report reads of the dump (ddp_onestep: grads.*).
// Returns 1, or 0 with out empty where no filter applies: no check reads the dump, or one
// reads all of it (golden; a dump_match without `tensors` or with "!" globs only), or a glob
// holds a comma.
int checks_dump_select(const Scenario *s, Str *out);
// A check that judges wall-clock time (perf_floor; growth of ms, step_ms or tok_per_s): kind
// is the check's name, params its JSON object. Its case runs with the machine to itself.
int check_judges_time(const char *kind, const json_t *params);
// The "reference" case glob of a cross-case check, or NULL.
const char *check_reference(const CheckSpec *cs);
// Does case name `name` serve as the reference of any of the scenario's checks?
int is_reference_case(const Scenario *s, const char *name);
// Is case index `ref` the reference that case index `c` is compared with by one of the
// scenario's checks (the closest match of its glob, as the check chooses it)?
int is_reference_of(const Scenario *s, int ref, int c);
#endif
