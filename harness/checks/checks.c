// harness/checks/checks.c — the registry of checks: every check of this folder, in the order
// `nsa-harness list --checks` shows them. Each check reads the artifacts the trainer wrote
// (metrics.jsonl, grad_trace.jsonl, gate_stats.jsonl, anomaly.json, the step dump; formats in
// docs/diagnostics.md) and records findings: a one-line summary for the verdict table and
// Markdown details for the evidence section.
#include "harness/checks/checks.h"

static const void *const CHECKS[] = {
    &check_finite, &check_grad_arrival, &check_gate_init, &check_loss_decrease, &check_parity,
    &check_dump_match, &check_growth, &check_golden, &check_perf_floor,
};

Registry check_registry = {"check", CHECKS, (int)(sizeof CHECKS / sizeof CHECKS[0]), {0}};
