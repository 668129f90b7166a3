// harness/exec/launch.h — how the ranks of a case start: the runner's launchers
// (scenario run.launcher; docs/scenarios.md "run", docs/ddp.md "Launchers").
//
//   trainer  one rank, no transport (launcher "local", world_size 1, transport "none"):
//            nsa-train itself.
//   mpirun   launcher "local" with several ranks or a transport: mpirun on this host
//            (--oversubscribe --bind-to none); launcher "mpirun": mpirun over run.hosts,
//            written as a hostfile in the case folder. Variables reach every rank by -x.
//   srun     launcher "srun": srun --ntasks W inside a Slurm allocation (SLURM_JOB_ID set);
//            --export=ALL carries the environment, --kill-on-bad-exit ends the step when a
//            rank dies. The trainer bootstraps from Slurm's variables (transport nccl) or
//            MPI (transport mpi, srun's PMI: launcher_args ["--mpi=pmix"] where needed).
//   env      launcher "env": W processes started by the runner itself, each with the
//            torchrun-style variables RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//            MASTER_ADDR=127.0.0.1, MASTER_PORT (a port free when the case starts) and
//            NSA_RDZV_TOKEN (unique to the case): the trainer's env bootstrap, no MPI.
//            Transport "gloo" (torch.distributed's host collectives) always starts so.
//
// Every launcher gets the scenario's variables and the runner's pass-through list
// (NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_SOCKET_IFNAME, NCCL_NVLS_ENABLE, OMP_NUM_THREADS,
// NSA_COMM_TIMEOUT). Every process the runner starts leads its own process group, so one
// signal reaches a launcher and what it started on this host.
#ifndef NSA_HARNESS_LAUNCH_H
#define NSA_HARNESS_LAUNCH_H
#include <stddef.h>
#include <sys/types.h>

#include "harness/core/scenario.h"
#include "common/util.h"

typedef enum { LAUNCH_TRAINER, LAUNCH_MPIRUN, LAUNCH_SRUN, LAUNCH_ENV } LaunchKind;

typedef struct {
    LaunchKind kind;
    int world;             // ranks
    int n;                 // processes the runner started: 1 (trainer, mpirun, srun) or world (env)
    pid_t *pid;            // [n] each leads its own process group; -1: did not start
    int *status;           // [n] waitpid status, where done[i]
    int *done;             // [n] reaped
    StrList env;           // "NAME=value" added to every process's environment
    StrList argv;          // the command: nsa-train / mpirun / srun ... (env: rank 0's; the others
                           // differ only in their variables)
    Str command;           // the command as a shell line (env: the variables of rank 0 first)
    char log[2300];        // where the launcher's own output goes: launcher.log (mpirun, srun);
                           // the trainer's and env's ranks start on ranks/rank_R.log
    char hostfile[2300];   // launcher mpirun: the hostfile written into the case folder
    int port;              // env: MASTER_PORT
    char token[128];       // env: NSA_RDZV_TOKEN, unique to the case (a stray rank of another case is refused)
    char case_dir[2100];
} Launch;

LaunchKind launch_kind(const RunSpec *run);
const char *launch_kind_name(LaunchKind k);   // "trainer" (the trainer alone), "mpirun", "srun", "env"
// Do the ranks get per-rank paths (%r) and a transport? (every kind but the trainer alone)
int launch_is_multi(LaunchKind k);
// May ranks run on another host? (mpirun over a hostfile, srun): then the runner signals
// them through the launcher (mpirun and srun forward SIGUSR1/SIGTERM to every rank) and
// judges a remote rank's heartbeat by when it last changed, not by its clock.
int launch_may_be_remote(LaunchKind k);

// Can this machine start the case's launcher? 0, or -1 with the SKIP reason in why
// (mpirun or srun not on $PATH, srun outside an allocation).
int launch_available(const RunSpec *run, char *why, size_t n);

// Build the case's command without starting it. trainer_argv: nsa-train and its arguments,
// per-rank paths written with %r (the trainer replaces it by its rank); case_dir: the case
// folder (hostfile, launcher.log, ranks/rank_R.log); env: "NAME=value" entries for every
// process (the scenario's and the runner's), copied. env: MASTER_PORT is chosen here.
// Returns 0, or -1 with err (the hostfile could not be written, no free port).
int launch_prepare(Launch *L, const RunSpec *run, char *const *trainer_argv, const char *case_dir, char *const *env,
                   int n_env, char *err, size_t errlen);
// Start what launch_prepare built. Returns 0 with every process started, or -1 with err
// (what did start is stopped and reaped).
int launch_exec(Launch *L, char *err, size_t errlen);
// Reap what ended, without waiting. Returns 1 once every process has ended.
int launch_poll(Launch *L);
// Wait up to timeout_s for every process to end. Returns 1 if they all did.
int launch_wait(Launch *L, double timeout_s);
// sig to every process group the runner started.
void launch_signal(const Launch *L, int sig);
// The launcher's exit status as a shell would say it (128 + signal): mpirun's, srun's or the
// trainer's; env: the first non-zero of the ranks' (0 if all were 0).
int launch_exit_status(const Launch *L);
// env: how rank k ended (waitpid status) if it was reaped; 0 if not known.
int launch_rank_status(const Launch *L, int k, int *status);
void launch_free(Launch *L);

// A TCP port of this host that nothing listens on now (bind to port 0 and ask); -1 on error.
int launch_free_port(void);
#endif
