#include "tools/local_ranks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"

extern char** environ;

namespace dpe::tools {

namespace {

using EnvVars = std::vector<std::pair<std::string, std::string>>;

// One host device with one compute thread per rank, as the bench and demo run their ranks.
const EnvVars kOneThreadDevice{
    {"DPE_HOST_DEVICES", "1"}, {"DPE_HOST_THREADS", "1"}, {"OMP_NUM_THREADS", "1"}};

// This process's environment without the variables named in `set` or `drop`, then `set`.
std::vector<std::string> environment_with(const EnvVars& set,
                                          const std::vector<std::string>& drop = {}) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = std::find(drop.begin(), drop.end(), name) != drop.end();
    for (const auto& [k, v] : set) replaced = replaced || k == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [k, v] : set) env.push_back(k + "=" + v);
  return env;
}

}  // namespace

std::string self_executable() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

int free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  DPE_CHECK(fd >= 0, "free_local_port: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  DPE_CHECK(ok, "free_local_port: could not find a free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

int run_local_ranks(const std::vector<std::string>& argv, int world) {
  DPE_CHECK(!argv.empty() && world >= 1,
            "run_local_ranks: needs a program and at least one rank, got world " << world);
  const int port = free_local_port();
  std::vector<std::vector<std::string>> envs;
  for (int rank = 0; rank < world; ++rank) {
    EnvVars vars{
        {"RANK", std::to_string(rank)},        {"LOCAL_RANK", std::to_string(rank)},
        {"WORLD_SIZE", std::to_string(world)}, {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", std::to_string(port)},
    };
    vars.insert(vars.end(), kOneThreadDevice.begin(), kOneThreadDevice.end());
    envs.push_back(environment_with(vars));
  }
  std::vector<char*> argv_ptrs;
  for (const std::string& a : argv) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<std::vector<char*>> env_ptrs(envs.size());
  for (size_t r = 0; r < envs.size(); ++r) {
    for (const std::string& e : envs[r]) env_ptrs[r].push_back(const_cast<char*>(e.c_str()));
    env_ptrs[r].push_back(nullptr);
  }
  const pid_t parent = getpid();
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      DPE_THROW("run_local_ranks: fork failed for rank " << rank << " of " << world);
    }
    if (pid == 0) {
      // Die with the parent; if it is already gone, do not start.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs[static_cast<size_t>(rank)].data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  return failed;
}

int run_mpi_ranks(const std::vector<std::string>& argv, int world) {
  DPE_CHECK(!argv.empty() && world >= 1,
            "run_mpi_ranks: needs a program and at least one rank, got world " << world);
  std::vector<std::string> args{"mpirun", "--oversubscribe",    "--bind-to", "none",
                                "-np",    std::to_string(world)};
  args.insert(args.end(), argv.begin(), argv.end());
  // mpirun hands its environment to the ranks it starts on this machine. A launcher's variables
  // would contradict MPI's ranks (init_process_group refuses that): they are dropped.
  EnvVars vars = kOneThreadDevice;
  vars.insert(vars.end(),
              {{"OMPI_ALLOW_RUN_AS_ROOT", "1"}, {"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1"}});
  std::vector<std::string> env =
      environment_with(vars, {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"});
#if defined(__SANITIZE_ADDRESS__)
  // Sanitized test runs: the ranks go without leak detection (tests/tools/run_tool.h says why).
  for (std::string& v : env) {
    if (v.rfind("ASAN_OPTIONS=", 0) == 0) v += ":detect_leaks=0";
  }
#endif
  std::vector<char*> argv_ptrs, env_ptrs;
  for (const std::string& a : args) argv_ptrs.push_back(const_cast<char*>(a.c_str()));
  argv_ptrs.push_back(nullptr);
  for (const std::string& e : env) env_ptrs.push_back(const_cast<char*>(e.c_str()));
  env_ptrs.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  DPE_CHECK(pid >= 0, "run_mpi_ranks: fork failed");
  if (pid == 0) {
    // SIGTERM, not SIGKILL: mpirun then ends its ranks before it goes.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);
    execvpe("mpirun", argv_ptrs.data(), env_ptrs.data());
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  DPE_CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 127),
            "run_mpi_ranks: cannot run mpirun (install Debian's openmpi-bin)");
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}

}  // namespace dpe::tools
