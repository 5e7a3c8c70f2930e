#include "tools/cost_model/topology_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"
#include "tools/common/exit_codes.h"

namespace dpe::sim {

namespace {

std::string shown_bytes(uint64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (uint64_t{1} << 20) && bytes % (uint64_t{1} << 20) == 0) {
    s += " (" + std::to_string(bytes >> 20) + " MiB)";
  }
  return s;
}

}  // namespace

NodeTopology read_topology_file(const std::string& path, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DPE_TOOLS_CHECK(tools::UsageError, fd >= 0,
                  "--topology: cannot open " << path << ": " << std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    DPE_TOOLS_CHECK(tools::UsageError, false,
                    "--topology: " << path << " is a folder, not a file of nvidia-smi topo -m "
                                      "output");
  }
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      DPE_TOOLS_CHECK(tools::DataError, false, "--topology: cannot read " << path << ": " << why);
    }
    if (got == 0) break;
    if (text.size() + static_cast<uint64_t>(got) > max_bytes) {
      ::close(fd);
      DPE_TOOLS_CHECK(tools::DataError, false,
                      "--topology: " << path << " holds more than " << shown_bytes(max_bytes)
                                     << ", the limit of a topology file (nvidia-smi topo -m prints "
                                        "a few KB): give the output of nvidia-smi topo -m");
    }
    text.append(buffer, static_cast<size_t>(got));
  }
  ::close(fd);
  try {
    return parse_topology(text);
  } catch (const Error& e) {
    throw tools::DataError("--topology: " + path + ": " + e.what());
  }
}

}  // namespace dpe::sim
