// spawn: fork the ranks, collect the first failure, stop the rest.
#include "engine/distributed/spawn.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {

namespace {

struct Child {
  pid_t pid = -1;
  int error_fd = -1;  // read end: the child's exception message
  std::string error;  // what was read from it
  bool done = false;
  int status = 0;
};

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  size_t n = text.size();
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return;
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void drain(Child& c) {
  if (c.error_fd < 0) return;
  char buf[4096];
  while (true) {
    const ssize_t k = ::read(c.error_fd, buf, sizeof(buf));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    if (c.error.size() < (1 << 16)) c.error.append(buf, static_cast<size_t>(k));
  }
  ::close(c.error_fd);
  c.error_fd = -1;
}

// The threads of this process, from /proc (Linux); 0 when it cannot be read.
int thread_count() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return 0;
  int n = 0;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with status " + std::to_string(status);
}

}  // namespace

void spawn(const std::function<void(int rank)>& fn, int nprocs, SpawnOptions options) {
  DPE_CHECK(nprocs >= 1, "spawn: nprocs " << nprocs << " must be at least 1");
  // fork() copies only the calling thread: a lock another thread held (the allocator's, a
  // store server's) would stay locked forever in the child.
  // A thread that was just joined leaves /proc/self/task a moment after its join returns (the
  // kernel releases it after waking the joiner): give such threads up to 200 ms to go.
  int threads = thread_count();
  for (int i = 0; i < 20 && threads > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    threads = thread_count();
  }
  DPE_CHECK(threads <= 1,
            "spawn: the calling process runs "
                << threads
                << " threads; fork() would copy only the calling one, and the children could "
                   "deadlock on a lock another thread held. Call spawn before starting threads "
                   "(a TCPStore server, device workers, OpenMP) or run them in a child process");
  std::fflush(nullptr);
  std::cout.flush();
  std::cerr.flush();
  std::vector<Child> children(static_cast<size_t>(nprocs));
  for (int rank = 0; rank < nprocs; ++rank) {
    int fds[2];
    DPE_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "spawn: pipe failed: " << std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      for (auto& c : children)
        if (c.pid > 0) ::kill(c.pid, SIGKILL);
      DPE_THROW("spawn: fork of rank " << rank << " failed: " << std::strerror(err));
    }
    if (pid == 0) {
      ::close(fds[0]);
      for (int r = 0; r < rank; ++r) ::close(children[r].error_fd);
      int code = 0;
      try {
        fn(rank);
      } catch (const std::exception& e) {
        // Capped below the pipe's capacity: the parent reads it only after the child has exited.
        write_all(fds[1], std::string(e.what()).substr(0, 32768));
        code = 1;
      } catch (...) {
        write_all(fds[1], "unknown exception");
        code = 1;
      }
      std::fflush(nullptr);
      std::cout.flush();
      std::cerr.flush();
      ::_exit(code);
    }
    ::close(fds[1]);
    children[rank].pid = pid;
    children[rank].error_fd = fds[0];
  }

  // Polls each child's pid (not waitpid(-1)), so children the caller forked elsewhere are left
  // alone.
  int failed = -1;
  auto kill_deadline = std::chrono::steady_clock::time_point::max();
  int running = nprocs;
  while (running > 0) {
    bool reaped = false;
    for (int r = 0; r < nprocs; ++r) {
      Child& c = children[r];
      if (c.done) continue;
      int status = 0;
      const pid_t pid = ::waitpid(c.pid, &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
      reaped = true;
      c.done = true;
      c.status = pid < 0 ? 0 : status;
      --running;
      drain(c);
      const bool ok = pid < 0 || (WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (!ok && failed < 0) {
        failed = r;
        for (auto& other : children)
          if (!other.done) ::kill(other.pid, SIGTERM);
        kill_deadline = std::chrono::steady_clock::now() + options.grace;
      }
    }
    if (std::chrono::steady_clock::now() >= kill_deadline) {
      for (auto& c : children)
        if (!c.done) ::kill(c.pid, SIGKILL);
      kill_deadline = std::chrono::steady_clock::time_point::max();
    }
    if (!reaped && running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (auto& c : children) drain(c);
  if (failed >= 0) {
    const Child& c = children[failed];
    DPE_THROW("spawn: process rank " << failed << " (pid " << c.pid << ") "
                                     << describe_status(c.status) << (c.error.empty() ? "" : ": ")
                                     << c.error);
  }
}

}  // namespace distributed
}  // namespace dpe
