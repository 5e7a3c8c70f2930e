#include "tools/common/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "engine/core/error.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

namespace {

// The folder `path` is in ("." for a bare name).
std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// A new temporary file beside `path` (path.tmp.XXXXXX); its descriptor, or -1 with errno set.
int make_temporary(const std::string& path, std::string* tmp) {
  *tmp = path + ".tmp.XXXXXX";
  return ::mkstemp(tmp->data());
}

bool write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t k = ::write(fd, text.data() + done, text.size() - done);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    done += static_cast<size_t>(k);
  }
  return true;
}

}  // namespace

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
  std::string probe;
  const int fd = make_temporary(path, &probe);
  DPE_TOOLS_CHECK(UsageError, fd >= 0,
                  flag << " " << path << ": cannot write into " << folder_of(path) << ": "
                       << std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
}

void write_file_atomically(const std::string& path, const std::string& text) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
    DPE_CHECK(fd >= 0, "cannot write " << path << ": " << std::strerror(errno));
    const bool ok = write_all(fd, text);
    const std::string why = std::strerror(errno);
    ::close(fd);
    DPE_CHECK(ok, "cannot write " << path << ": " << why);
    return;
  }
  std::string tmp;
  const int fd = make_temporary(path, &tmp);
  DPE_CHECK(fd >= 0, "cannot write " << path << ": cannot create a file in " << folder_of(path)
                                     << ": " << std::strerror(errno));
  bool ok = write_all(fd, text);
  std::string why = std::strerror(errno);
  if (::close(fd) != 0 && ok) {
    ok = false;
    why = std::strerror(errno);
  }
  ::chmod(tmp.c_str(), 0644);  // mkstemp makes 0600; results are for reading
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    why = std::strerror(errno);
  }
  if (!ok) ::unlink(tmp.c_str());
  DPE_CHECK(ok, "cannot write " << path << ": " << why);
}

}  // namespace dpe::tools
