// harness/pystack.h — where a Python trainer's stack dump stops (docs/trainer-protocol.md
// "Signals and stack dumps"): the text Python's faulthandler writes,
//   Current thread 0x00007f... (most recent call first):
//     File "/src/adapters/torch/nsa_torch/faults.py", line 42 in fault_hang
//     File "/src/adapters/torch/nsa_torch/main.py", line 310 in train
// (other threads: "Thread 0x... (most recent call first):").
#ifndef NSA_HARNESS_PYSTACK_H
#define NSA_HARNESS_PYSTACK_H
#include <stddef.h>

// The first frame of the `Current thread` block (the thread the signal handler ran in: the
// main thread), else of the first block, as "FUNC (PATH:N)" with PATH relative to src_root
// when under it. Frames of the dump itself (a function whose name says signal, handler,
// faulthandler or stack dump) are passed over. 0, or -1 when text holds no Python stack.
int pystack_top(const char *text, const char *src_root, char *out, size_t n);
#endif
