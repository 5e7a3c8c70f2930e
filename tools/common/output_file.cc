#include "tools/common/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

void check_writable(const std::string& flag, const std::string& path) {
  DPE_TOOLS_CHECK(UsageError, !path.empty(), flag << " needs a path");
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    DPE_TOOLS_CHECK(UsageError, !S_ISDIR(st.st_mode),
                    flag << " " << path << " is a folder: give a file's path");
    if (!S_ISREG(st.st_mode)) {
      const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NONBLOCK);
      DPE_TOOLS_CHECK(UsageError, fd >= 0,
                      flag << " " << path << ": cannot write: " << std::strerror(errno));
      ::close(fd);
      return;
    }
  }
  try {
    AtomicFile probe(path);  // made where write_file_atomically makes its file, removed uncommitted
  } catch (const AtomicFileError& e) {
    DPE_TOOLS_CHECK(
        UsageError, false,
        flag << " " << path << ": cannot write into " << directory_of(path) << ": " << e.reason());
  }
}

void write_file_atomically(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    DPE_CHECK(fd >= 0, "cannot write " << path << ": " << std::strerror(errno));
    const bool ok = write_all(fd, text.data(), text.size());
    const std::string why = std::strerror(errno);
    ::close(fd);
    DPE_CHECK(ok, "cannot write " << path << ": " << why);
    return;
  }
  AtomicFileOptions options;
  options.sync = false;  // a result a rerun makes again: atomic, not durable
  try {
    write_atomically(path, text, options);
  } catch (const AtomicFileError& e) {
    if (e.step() == AtomicFileStep::kCreate) {
      DPE_THROW("cannot write " << path << ": cannot create a file in " << directory_of(path)
                                << ": " << e.reason());
    }
    DPE_THROW("cannot write " << path << ": " << e.reason());
  }
}

}  // namespace dpe::tools
