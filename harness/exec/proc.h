// harness/exec/proc.h — child processes of the runner: every child starts in its own
// process group (so the runner can signal everything it started at once and a
// terminal's Ctrl-C reaches only the runner), dies with the runner
// (PR_SET_PDEATHSIG), and is reaped; short helper commands run with a deadline.
#ifndef NSA_HARNESS_PROC_H
#define NSA_HARNESS_PROC_H
#include <stddef.h>
#include <sys/types.h>

// Start argv[0] (a path, or a name looked up on PATH) with stdout and stderr appended to log_path (or
// inherited when NULL), stdin from /dev/null, extra environment entries
// ("NAME=value", n_env of them) added. The child leads a new process group
// (pgid = pid). Returns the pid, or -1 with errno.
pid_t proc_spawn(char *const argv[], const char *log_path, char *const *env, int n_env);

// Run argv to completion within timeout_s, capturing its stdout (stderr is
// discarded). Returns the exit status as from waitpid (0 = success), -1 if it
// could not start, -2 if it timed out (then killed). *out (malloc'd, may be
// empty) receives stdout.
int proc_capture(char *const argv[], double timeout_s, char **out);
// The same with stderr captured too, interleaved with stdout (for a tool's error message).
int proc_capture_all(char *const argv[], double timeout_s, char **out);

// Send sig to the whole process group of pgid; ignores "no such process".
void proc_kill_group(pid_t pgid, int sig);
// Wait up to timeout_s for pid to end. Returns 1 with *status if it ended, 0 if
// not (yet).
int proc_wait(pid_t pid, double timeout_s, int *status);
// Reap any other ended children (the runner is a child subreaper, so orphans of
// its trainers land here). While cases run side by side it does nothing: reaping any
// child could take another case's exit status; the runner calls proc_reap_orphans_now
// when no case runs.
void proc_reap_orphans(void);
void proc_reap_orphans_now(void);
// Cases run side by side (1) or not (0): from now on every child started is registered
// until reaped, and proc_kill_children spares registered children and their process
// groups (harness/exec/run_cases.h).
void proc_share_children(int on);
// A child was reaped by its owner's own waitpid: no longer registered.
void proc_forget(pid_t pid);
// SIGKILL every process whose parent is this one (Linux /proc) and reap them: with
// the runner a child subreaper, that includes the orphans of a finished case —
// also those that left its process group (setsid) — but never a registered child of
// another case running beside it, nor its process group. Returns how many were killed.
int proc_kill_children(void);
// Make this process a child subreaper (Linux); no-op elsewhere.
void proc_become_subreaper(void);

// The path of an executable named `name` on $PATH (a name holding '/' is taken as
// it is), into out. Returns 0, or -1 when none is found.
int proc_which(const char *name, char *out, size_t n);
// handler for SIGINT, SIGTERM and SIGHUP (no SA_RESTART: a blocking wait returns), and
// SIGPIPE ignored: what a command that stops cleanly on Ctrl-C installs
void proc_on_interrupt(void (*handler)(int));

// Is pid a live (not zombie) process? (Linux /proc)
int proc_alive(pid_t pid);
// "SIGSEGV" etc.
const char *proc_signal_name(int sig);
// Is there a live process whose command line contains `needle`? (Linux /proc; for tests.)
int proc_any_with_cmdline(const char *needle);
#endif
