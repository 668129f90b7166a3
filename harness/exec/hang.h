// harness/exec/hang.h — the evidence of a hang laid side by side: every rank of
// the case answered SIGUSR1 with its stack and flight recorder; this reads them
// together. Which collective sequence number each rank reached; the oldest
// collective the waiting ranks are in (its name, step and, for a gradient bucket,
// the bucket's parameters from buckets.jsonl); which rank never enqueued it, where it
// is instead (phase, step, layer, the first frame of its stack); which were waiting.
#ifndef NSA_HARNESS_HANG_H
#define NSA_HARNESS_HANG_H
#include "harness/core/result.h"

// From a mapped recorder (trainer/flightrec.h): the oldest collective enqueued and not
// completed, into rk->wait_*.
struct FrHeader;
void hang_read_wait(const volatile void *fr_header, RankResult *rk);
// rk->stack_top from its stack file (the first frame in nsa-train's own code).
void hang_read_stack_top(RankResult *rk);
// Markdown: the side-by-side table and the conclusion, into ev; facts into r->facts
// (hang_wait_seq, hang_wait_collective, hang_waiting_ranks, hang_never_joined,
// hang_bucket_params). r->buckets must be read.
void hang_forensics(CaseResult *r, Str *ev);
#endif
