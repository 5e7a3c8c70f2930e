#include "tools/common/local_ranks.h"

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

// Null-terminated pointers into `strings`, as exec takes them (built before fork: a child of a
// threaded process only calls exec and _exit).
std::vector<char*> exec_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// Forks a child that receives `death_signal` when this process dies (and does not start if this
// process is already gone), and execs `argv` with `env` (argv[0] looked up on PATH when it has
// no '/'). Returns the child's pid, or -1 when fork failed.
pid_t start_child(const std::vector<char*>& argv, const std::vector<char*>& env, int death_signal) {
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, death_signal);
    if (getppid() != parent) _exit(126);
    execvpe(argv[0], argv.data(), env.data());
    _exit(127);
  }
  return pid;
}

// Waits for `pid` (through EINTR); its exit code, or -1 when it did not exit normally.
int wait_exit_code(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
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
  const std::vector<char*> argv_ptrs = exec_strings(argv);
  std::vector<std::vector<char*>> env_ptrs;
  for (const auto& env : envs) env_ptrs.push_back(exec_strings(env));
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = start_child(argv_ptrs, env_ptrs[static_cast<size_t>(rank)], SIGKILL);
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      DPE_THROW("run_local_ranks: fork failed for rank " << rank << " of " << world);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : pids) failed += wait_exit_code(pid) != 0;
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
  // SIGTERM, not SIGKILL, when this process dies: mpirun then ends its ranks before it goes.
  const pid_t pid = start_child(exec_strings(args), exec_strings(env), SIGTERM);
  DPE_CHECK(pid >= 0, "run_mpi_ranks: fork failed");
  const int code = wait_exit_code(pid);
  DPE_CHECK(code != 127, "run_mpi_ranks: cannot run mpirun (install Debian's openmpi-bin)");
  return code == 0 ? 0 : 1;
}

}  // namespace dpe::tools
