// harness/artifacts/pystack.h — where a Python trainer's stack dump stops (docs/trainer-protocol.md
// "Signals and stack dumps"): the text Python's faulthandler writes,
//   Current thread 0x00007f... (most recent call first):
//     File "/src/adapters/torch/nsa_torch/faults.py", line 42 in fault_hang
//     File "/src/adapters/torch/nsa_torch/main.py", line 310 in train
// (other threads: "Thread 0x... (most recent call first):").
#ifndef NSA_HARNESS_PYSTACK_H
#define NSA_HARNESS_PYSTACK_H
#include <stddef.h>

#include "common/util.h"

// The innermost frame of the trainer's own code in the `Current thread` block (the thread
// the signal handler ran in: the main thread; else the first block), as "FUNC (PATH:N)" with
// PATH relative to src_root when under it. Library frames (Python's own, site-packages,
// dist-packages: where it waits, e.g. threading's wait or torch's all_reduce; runpy; the
// probe's, a PATH containing /nsa_probe/, except its fault_hang and fault_crash) are passed
// over when an own frame follows; so are frames of the dump itself (a function whose name
// says signal, sigusr, handler, faulthandler, stack dump). 0, or -1 when text holds no
// Python stack.
int pystack_top(const char *text, const char *src_root, char *out, size_t n);

// The last `Traceback (most recent call last):` block of text (a Python program's output,
// e.g. a rank's log): from that line to its exception line (the first unindented line after
// it, "RuntimeError: boom"), appended to block; more than max_lines lines keep the first and
// the last ones with a line saying how many were left out. The exception line into exc.
// 0, or -1 when text holds no complete traceback.
int pystack_traceback(const char *text, int max_lines, Str *block, char *exc, size_t n);
#endif
