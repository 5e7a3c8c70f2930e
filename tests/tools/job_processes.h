// job_processes: the fault tests' handle on a running job (a launcher or mpirun and its workers):
// start it with its output in a file, find its workers by an environment variable, wait for it
// with a deadline, and check that no process and no listening port outlives it.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace dpe::test {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::string test_tmpdir() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

// Runs argv[0] (found on PATH) with `env` added, stdout and stderr into `out_path`, in a process
// group of its own (so a failed test can kill everything it started); returns its pid.
inline pid_t start_job(const std::vector<std::string>& argv, const std::string& out_path,
                       const std::map<std::string, std::string>& env = {}) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<std::string> args = argv;
    std::vector<char*> raw;
    for (auto& a : args) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execvp(raw[0], raw.data());
    ::_exit(126);
  }
  ::setpgid(pid, pid);
  return pid;
}

// /proc/PID/stat's fields after the command: state, ppid.
inline bool proc_stat(int pid, char* state, int* ppid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream rest(line.substr(paren + 2));
  return static_cast<bool>(rest >> *state >> *ppid);
}

// Whether `pid` runs: a zombie (exited, not yet reaped) does not.
inline bool alive(int pid) {
  char state = 0;
  int ppid = 0;
  return proc_stat(pid, &state, &ppid) && state != 'Z';
}

inline std::string env_of(int pid, const std::string& name) {
  const std::string all = slurp("/proc/" + std::to_string(pid) + "/environ");
  const std::string key = name + "=";
  size_t at = 0;
  while (at < all.size()) {
    const size_t end = all.find('\0', at);
    const std::string entry =
        all.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (entry.rfind(key, 0) == 0) return entry.substr(key.size());
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return "";
}

// The live descendants of `root` whose environment has `variable`, by its value (a rank).
inline std::map<int, int> workers_by(int root, const std::string& variable) {
  std::map<int, std::vector<int>> children;
  if (DIR* d = ::opendir("/proc")) {
    while (dirent* e = ::readdir(d)) {
      const int pid = std::atoi(e->d_name);
      char state = 0;
      int ppid = 0;
      if (pid > 0 && proc_stat(pid, &state, &ppid) && state != 'Z') children[ppid].push_back(pid);
    }
    ::closedir(d);
  }
  std::map<int, int> found;
  std::vector<int> todo = {root};
  while (!todo.empty()) {
    const int p = todo.back();
    todo.pop_back();
    for (int c : children[p]) {
      todo.push_back(c);
      const std::string value = env_of(c, variable);
      if (!value.empty()) found[std::atoi(value.c_str())] = c;
    }
  }
  return found;
}

// Waits for `pid` to exit, at most `limit`; its exit code (128 + signal when killed), or -1 when
// it ran past the limit (its process group is then killed).
inline int wait_exit(pid_t pid, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return -1;
}

// Waits until `pred` holds, at most `limit`; whether it did.
template <typename Pred>
bool wait_until(Pred pred, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Whether a process listens on 127.0.0.1:port (a bind with SO_REUSEADDR, as the store's server
// does, fails only then: connections left in TIME_WAIT do not count).
inline bool port_listened(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return !bound;
}

}  // namespace dpe::test
