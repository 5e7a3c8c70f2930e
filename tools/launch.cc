// launch: torchrun for dpe programs. Starts --nproc_per_node workers of a program with RANK,
// LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, prefixes their output
// lines with their rank, and stops them all when one fails (or when the launcher is interrupted).
//
//   tools/dpe-launch --nproc_per_node=2 bazel-bin/tools/train --epochs 3
//
// Workers die with their launcher: each is sent SIGKILL when the launcher ends, however it ends
// (PR_SET_PDEATHSIG), kill -9 included. Unless DPE_STORE_TOKEN is already set, the launcher gives
// its workers a fresh random one, so only they can use the rendezvous store (README, "The
// rendezvous store: threat model"); --rdzv-timeout sets their DPE_RDZV_TIMEOUT.
//
// Exit status (tools/common/exit_codes.h): 0 when every worker exited with 0; 2 for a bad launcher
// flag; otherwise the exit code of the first worker that failed (128 + signal for a worker killed
// by a signal, 127 for a program that cannot be run), or 128 + the signal that stopped the
// launcher.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "tools/common/exit_codes.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  const int saved = errno;
  (void)!::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

struct Stream {
  int fd = -1;
  std::string partial;  // bytes after the last newline
  FILE* out = nullptr;  // the launcher's stdout or stderr
};

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool exited = false;
  int status = 0;
  Stream streams[2];
};

void emit(const std::string& prefix, const char* data, size_t n, FILE* out) {
  std::fwrite(prefix.data(), 1, prefix.size(), out);
  std::fwrite(data, 1, n, out);
  std::fflush(out);
}

// Writes each complete line of `s.partial` + `data` with the worker's prefix.
void forward(const Worker& w, Stream& s, const char* data, size_t n) {
  const std::string prefix = "[rank" + std::to_string(w.rank) + "]: ";
  s.partial.append(data, n);
  size_t start = 0;
  while (true) {
    const size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    emit(prefix, s.partial.data() + start, nl + 1 - start, s.out);
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // A line longer than this is passed on in pieces rather than buffered without bound.
  if (s.partial.size() > (1 << 16)) {
    emit(prefix, s.partial.data(), s.partial.size(), s.out);
    emit("", "\n", 1, s.out);
    s.partial.clear();
  }
}

void close_stream(const Worker& w, Stream& s) {
  if (s.fd < 0) return;
  if (!s.partial.empty()) {
    s.partial.push_back('\n');
    const std::string rest = std::move(s.partial);
    s.partial.clear();
    forward(w, s, rest.data(), rest.size());
  }
  ::close(s.fd);
  s.fd = -1;
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  }
  return "ended with status " + std::to_string(status);
}

// A finite number from lo to hi (CLI::Range lets nan through: every comparison with it is false).
CLI::Validator finite_range(double lo, double hi) {
  char bounds[64];
  std::snprintf(bounds, sizeof bounds, "%g to %g", lo, hi);
  const std::string shown = bounds;
  return CLI::Validator(
      [lo, hi, shown](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (!text.empty() && *end == '\0' && std::isfinite(v) && v >= lo && v <= hi) return "";
        return "'" + text + "' is not a number from " + shown;
      },
      "NUMBER in " + shown);
}

// 128 random bits as 32 hex digits, from the kernel's generator; empty if it cannot be read.
std::string random_token() {
  unsigned char bytes[16];
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t k = ::read(fd, bytes + got, sizeof bytes - got);
    if (k <= 0 && errno != EINTR) break;
    if (k > 0) got += static_cast<size_t>(k);
  }
  ::close(fd);
  if (got < sizeof bytes) return "";
  static const char kHex[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token.push_back(kHex[b >> 4]);
    token.push_back(kHex[b & 15]);
  }
  return token;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dpe-launch: starts one process per device, like torchrun.\n"
      "Usage: dpe-launch [options] program [program arguments...]"};
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  double grace_s = 5.0;
  double rdzv_timeout_s = 0;
  app.add_option("--nproc_per_node,--nproc-per-node", nproc_per_node,
                 "processes (workers) on this node, one per device")
      ->check(CLI::Range(1, 4096));
  app.add_option("--nnodes", nnodes, "number of nodes")->check(CLI::Range(1, 1 << 16));
  app.add_option("--node_rank,--node-rank", node_rank, "rank of this node, 0..nnodes-1")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--master_addr,--master-addr", master_addr,
                 "address of the node that runs rank 0 (it serves the rendezvous store)");
  app.add_option("--master_port,--master-port", master_port, "port of the rendezvous store")
      ->check(CLI::Range(1, 65535));
  app.add_option("--grace", grace_s,
                 "seconds the other workers get after SIGTERM, once one has failed, before "
                 "SIGKILL")
      ->check(finite_range(0, 3600));
  CLI::Option* rdzv_timeout =
      app.add_option("--rdzv-timeout,--rdzv_timeout", rdzv_timeout_s,
                     "seconds the workers wait for each other at the rendezvous (sets their "
                     "DPE_RDZV_TIMEOUT; default: that variable, else 30 minutes)")
          ->check(finite_range(0.001, 1e8));
  // Everything from the program on is the program's: its flags are not the launcher's.
  app.prefix_command();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? dpe::tools::kExitOk : dpe::tools::kExitUsage;
  }
  std::vector<std::string> command = app.remaining();
  if (command.empty()) {
    std::cerr << "dpe-launch: no program given\n" << app.help();
    return dpe::tools::kExitUsage;
  }
  if (node_rank >= nnodes) {
    std::cerr << "dpe-launch: --node_rank " << node_rank << " must be below --nnodes " << nnodes
              << "\n";
    return dpe::tools::kExitUsage;
  }
  char rdzv_timeout_text[32] = "";
  if (rdzv_timeout->count() > 0) {
    std::snprintf(rdzv_timeout_text, sizeof rdzv_timeout_text, "%.17g", rdzv_timeout_s);
  }
  // One node, no token given: a fresh secret for this job's store. Several nodes must share one,
  // so there the user sets DPE_STORE_TOKEN (the launchers of different nodes cannot agree on a
  // random one).
  std::string store_token;
  if (const char* t = std::getenv("DPE_STORE_TOKEN"); t == nullptr && nnodes == 1) {
    store_token = random_token();
    if (store_token.empty()) {
      std::fprintf(stderr, "dpe-launch: cannot read /dev/urandom for DPE_STORE_TOKEN: %s\n",
                   std::strerror(errno));
      return dpe::tools::kExitFailure;
    }
  }
  const int world_size = nproc_per_node * nnodes;
  // Under `bazel run`, paths on the command line (the program, its files) are the user's.
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY"); wd != nullptr && *wd != '\0') {
    if (::chdir(wd) != 0) std::perror("dpe-launch: chdir to BUILD_WORKING_DIRECTORY");
  }
  // The node's cores are shared by its workers: each device computes with its share.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string threads_per_worker =
      std::to_string(std::max(1u, cores / static_cast<unsigned>(nproc_per_node)));

  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    std::perror("dpe-launch: pipe");
    return dpe::tools::kExitFailure;
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGCHLD, &sa, nullptr);

  std::vector<Worker> workers(static_cast<size_t>(nproc_per_node));
  std::fflush(nullptr);
  const pid_t launcher_pid = ::getpid();
  for (int local = 0; local < nproc_per_node; ++local) {
    Worker& w = workers[local];
    w.local_rank = local;
    w.rank = nproc_per_node * node_rank + local;
    int out_pipe[2];
    int err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      std::perror("dpe-launch: pipe");
      return dpe::tools::kExitFailure;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("dpe-launch: fork");
      for (auto& o : workers)
        if (o.pid > 0) ::kill(o.pid, SIGKILL);
      return dpe::tools::kExitFailure;
    }
    if (pid == 0) {
      // Die with the launcher, kill -9 included. The launcher may have died between fork and
      // prctl, before the signal was armed: then this process was already re-parented.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher_pid) ::_exit(1);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      ::sigaction(SIGCHLD, &dfl, nullptr);
      ::setenv("RANK", std::to_string(w.rank).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(local).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(nproc_per_node).c_str(), 1);
      ::setenv("GROUP_RANK", std::to_string(node_rank).c_str(), 1);
      ::setenv("MASTER_ADDR", master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(master_port).c_str(), 1);
      // Each worker drives one host device; several workers on one node share its cores.
      ::setenv("DPE_HOST_DEVICES", "1", 0);
      ::setenv("DPE_HOST_THREADS", threads_per_worker.c_str(), 0);
      if (nproc_per_node > 1) ::setenv("OMP_NUM_THREADS", "1", 0);
      if (!store_token.empty()) ::setenv("DPE_STORE_TOKEN", store_token.c_str(), 0);
      if (rdzv_timeout_text[0] != '\0') ::setenv("DPE_RDZV_TIMEOUT", rdzv_timeout_text, 1);
      std::vector<char*> args;
      for (auto& a : command) args.push_back(a.data());
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "dpe-launch: cannot run '%s': %s\n", args[0], std::strerror(errno));
      std::fflush(stderr);
      ::_exit(127);
    }
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    w.pid = pid;
    w.streams[0] = Stream{out_pipe[0], "", stdout};
    w.streams[1] = Stream{err_pipe[0], "", stderr};
  }

  using Clock = std::chrono::steady_clock;
  int failed = -1;      // index of the first worker that failed
  int stop_signal = 0;  // the signal that stopped the launcher
  auto kill_deadline = Clock::time_point::max();
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(grace_s * 1000));
  const auto stop_all = [&](int sig) {
    for (auto& w : workers)
      if (!w.exited) ::kill(w.pid, sig);
  };

  while (true) {
    bool open_streams = false;
    bool running = false;
    for (auto& w : workers) {
      running = running || !w.exited;
      for (auto& s : w.streams) open_streams = open_streams || s.fd >= 0;
    }
    if (!running && !open_streams) break;

    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, Stream*>> owners;
    fds.push_back(pollfd{g_signal_pipe[0], POLLIN, 0});
    owners.emplace_back(nullptr, nullptr);
    for (auto& w : workers) {
      for (auto& s : w.streams) {
        if (s.fd < 0) continue;
        fds.push_back(pollfd{s.fd, POLLIN, 0});
        owners.emplace_back(&w, &s);
      }
    }
    // Once every worker has exited, a grandchild may still hold a pipe open: don't wait on it.
    const int timeout_ms = running ? 100 : 200;
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      std::perror("dpe-launch: poll");
      stop_all(SIGKILL);
      return dpe::tools::kExitFailure;
    }
    if (rc == 0 && !running) {
      for (auto& w : workers)
        for (auto& s : w.streams) close_stream(w, s);
      continue;
    }
    for (size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      if (owners[i].first == nullptr) {
        unsigned char sig = 0;
        while (::read(g_signal_pipe[0], &sig, 1) == 1) {
          if ((sig == SIGINT || sig == SIGTERM) && stop_signal == 0) {
            stop_signal = sig;
            std::fprintf(stderr, "dpe-launch: received %s; stopping the workers\n", strsignal(sig));
            stop_all(SIGTERM);
            kill_deadline = Clock::now() + grace;
          }
        }
        continue;
      }
      char buf[65536];
      const ssize_t k = ::read(fds[i].fd, buf, sizeof(buf));
      if (k > 0) {
        forward(*owners[i].first, *owners[i].second, buf, static_cast<size_t>(k));
      } else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
        close_stream(*owners[i].first, *owners[i].second);
      }
    }
    // Reap the workers that have exited.
    for (size_t i = 0; i < workers.size(); ++i) {
      Worker& w = workers[i];
      if (w.exited) continue;
      int status = 0;
      const pid_t pid = ::waitpid(w.pid, &status, WNOHANG);
      if (pid == 0 || (pid < 0 && errno == EINTR)) continue;
      w.exited = true;
      w.status = status;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok && failed < 0 && stop_signal == 0) {
        failed = static_cast<int>(i);
        std::fprintf(stderr, "dpe-launch: worker rank %d (pid %d) %s; stopping the others\n",
                     w.rank, static_cast<int>(w.pid), describe(status).c_str());
        stop_all(SIGTERM);
        kill_deadline = Clock::now() + grace;
      }
    }
    if (Clock::now() >= kill_deadline) {
      for (auto& w : workers) {
        if (w.exited) continue;
        std::fprintf(stderr,
                     "dpe-launch: worker rank %d (pid %d) did not stop after SIGTERM; "
                     "sending SIGKILL\n",
                     w.rank, static_cast<int>(w.pid));
        ::kill(w.pid, SIGKILL);
      }
      kill_deadline = Clock::time_point::max();
    }
  }

  if (stop_signal != 0) return 128 + stop_signal;
  if (failed >= 0) {
    const Worker& w = workers[failed];
    std::fprintf(stderr, "dpe-launch: worker rank %d (pid %d) %s\n", w.rank,
                 static_cast<int>(w.pid), describe(w.status).c_str());
    const int code = exit_code_of(w.status);
    return code == 0 ? dpe::tools::kExitFailure : code;
  }
  return 0;
}
