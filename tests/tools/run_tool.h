// run_tool: runs a tool's binary through the shell, as a user would, for the CLI tests: its exit
// code, and its stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace dpe::test {

// Runs `binary args` with `env` ("NAME=value ..." for the shell) before it; returns the exit code
// (-1 when killed by a signal) and fills `output`.
inline int run_tool(const std::string& binary, const std::string& args, std::string* output,
                    const std::string& env = "") {
  const std::string cmd = env + " " + binary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 512> buf{};
  output->clear();
  while (fgets(buf.data(), buf.size(), p) != nullptr) *output += buf.data();
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The environment for running mpirun from a test: as root (containers, CI) Open MPI wants both
// variables. In sanitized builds the ranks run without leak detection: Open MPI's own threads
// allocate blocks LeakSanitizer cannot attribute (no frame pointers), reported as leaks at exit;
// every other sanitizer check stays on, and leaks stay checked in every process mpirun did not
// start.
inline std::string mpirun_env() {
  std::string env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1";
#if defined(__SANITIZE_ADDRESS__)
  env += " ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\"";
#endif
  return env;
}

inline bool has(const std::string& out, const std::string& needle) {
  return out.find(needle) != std::string::npos;
}

}  // namespace dpe::test
