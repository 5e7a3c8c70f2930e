// user_path: resolves a path given on the command line against the directory the user ran
// `bazel run` from (BUILD_WORKING_DIRECTORY), not the runfiles directory bazel runs tools in.
#pragma once

#include <cstdlib>
#include <string>

namespace dpe::tools {

inline std::string user_path(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  const char* wd = std::getenv("BUILD_WORKING_DIRECTORY");
  return wd != nullptr && *wd != '\0' ? std::string(wd) + "/" + path : path;
}

}  // namespace dpe::tools
