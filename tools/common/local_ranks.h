// The ranks of one DDP job as child processes of this one, on this machine: what //tools:bench
// and //tools:demo use to set DDP beside DataParallel without a launcher.
//
// Threading contract: callable from a process that runs threads (device workers, OpenMP): argv
// and environments are built before fork(), and a child calls only execve and _exit.
#pragma once

#include <string>
#include <vector>

namespace dpe::tools {

// This program's path (/proc/self/exe), to re-execute it as the ranks; empty if unreadable.
std::string self_executable();

// A TCP port on 127.0.0.1 that the kernel says is free now; rank 0 binds it a moment later (a
// small, accepted race).
int free_local_port();

// Runs `world` copies of `argv` (argv[0]: the program's path) as ranks 0..world-1 of one job:
// RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT (a free port) set, one host
// device with one compute thread each (DPE_HOST_DEVICES=1, DPE_HOST_THREADS=1,
// OMP_NUM_THREADS=1), the rest of this environment inherited. Children die with this process
// (PR_SET_PDEATHSIG). Waits for all of them; returns how many did not exit with 0.
int run_local_ranks(const std::vector<std::string>& argv, int world);

// The same job started by Open MPI's mpirun (found on PATH) for the "mpi" backend: `world` ranks
// on this machine, unbound (--bind-to none, as run_local_ranks' children), one host device with
// one compute thread each; root may run it (OMPI_ALLOW_RUN_AS_ROOT). mpirun dies with this
// process and takes its ranks with it. Returns 0 when every rank exited with 0, else 1.
int run_mpi_ranks(const std::vector<std::string>& argv, int world);

}  // namespace dpe::tools
