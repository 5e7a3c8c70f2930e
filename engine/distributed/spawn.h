// spawn: torch.multiprocessing.spawn for dpe. Forks nprocs processes that each run fn(rank) and
// waits for them; the first failure stops the others and comes back as a dpe::Error naming the
// rank, its pid, and the exception message or exit status.
//
// Threading contract: call spawn from a single-threaded process (no TCPStore server, device
// workers or OpenMP team started yet): fork() copies only the calling thread, so a lock another
// thread held would never be released in the child. spawn checks it (/proc/self/task) and throws
// otherwise. Each child ends with _exit() once fn returns, so no destructors of the parent's
// objects run in it.
#pragma once

#include <chrono>
#include <functional>

namespace dpe {
namespace distributed {

struct SpawnOptions {
  // How long the other children get to exit after SIGTERM, once one has failed, before SIGKILL.
  std::chrono::milliseconds grace = std::chrono::seconds(5);
};

// Runs fn(0) .. fn(nprocs - 1), each in its own child process, and returns when all have exited
// with status 0. A child fails when fn throws (the message is passed back to the parent) or exits
// otherwise (exit code, signal). Throws dpe::Error at once when the caller runs other threads.
void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options = {});

}  // namespace distributed
}  // namespace dpe
