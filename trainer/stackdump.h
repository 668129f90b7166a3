// trainer/stackdump.h — native stack dumps on SIGUSR1 (stall) and on crashes.
//
// stackdump_install() sets handlers for SIGUSR1 and for SIGSEGV, SIGBUS, SIGFPE,
// SIGILL, SIGABRT. A dump is: a header line naming the rank, pid, signal and UTC
// time; the raw frames (address, module, module-relative address); the frames
// symbolized by addr2line (function and file:line, inlined frames too); then the
// flight recorder's state and its last 32 events when a recorder is open.
//   SIGUSR1 (the runner's "you are stalled, dump and exit"): dump the MAIN
//     thread's stack (a worker thread that receives it forwards it to the main
//     thread with tgkill), then _exit(NSA_EXIT_STALL_DUMP) = 138 = 128 + SIGUSR1.
//   SIGSEGV/SIGBUS/SIGFPE/SIGILL/SIGABRT: dump the faulting thread's stack, then
//     restore the default action and re-raise, so the exit status shows the signal.
// docs/diagnostics.md explains why the handler works the way it does
// (async-signal-safe work only; addr2line in a child process).
#ifndef NSA_TRAINER_STACKDUMP_H
#define NSA_TRAINER_STACKDUMP_H

#include "common/exit_codes.h"   // NSA_EXIT_STALL_DUMP (138 = 128 + SIGUSR1)

// stack_file: where dumps go (opened for append when a dump happens); NULL or ""
// = stderr. rank: for the header. Returns 0, or -1 if a handler could not be set
// (message on stderr).
int stackdump_install(const char *stack_file, int rank);

// Once the world is known: the stack files of the other ranks (n paths, NULL entries
// skipped; the array is kept, not copied). A stall dump then waits, after its own
// end-of-dump line, until every one of those files ends a dump too (at most
// SD_PEER_WAIT_MS), before it exits: a launcher such as mpirun tears the whole job down
// when the first rank exits, which cut the dumps of ranks still writing theirs (seen with
// 4 ranks on 2 cores: two of four stacks were their header alone). Only what a file gains
// after this call counts: an older run's dump at the end of a reused --stack-file does not
// end the wait.
void stackdump_set_peers(char **paths, int n);
#endif
