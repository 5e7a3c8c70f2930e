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

inline bool has(const std::string& out, const std::string& needle) {
  return out.find(needle) != std::string::npos;
}

}  // namespace dpe::test
