#include "engine/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace dpe {

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string message(AtomicFileStep step, const std::string& target, const std::string& temporary,
                    const std::string& reason) {
  switch (step) {
    case AtomicFileStep::kCreate:
      return "cannot create a temporary file next to '" + target + "': " + reason;
    case AtomicFileStep::kWrite:
    case AtomicFileStep::kSync:
    case AtomicFileStep::kClose:
      return "cannot write '" + temporary + "': " + reason;
    case AtomicFileStep::kRename:
      return "cannot rename '" + temporary + "' to '" + target + "': " + reason;
  }
  return reason;
}

}  // namespace

AtomicFileError::AtomicFileError(AtomicFileStep step, std::string target, std::string temporary,
                                 std::string reason)
    : Error(message(step, target, temporary, reason)),
      step_(step),
      target_(std::move(target)),
      temporary_(std::move(temporary)),
      reason_(std::move(reason)) {}

AtomicFile::AtomicFile(std::string target, AtomicFileOptions options)
    : target_(std::move(target)),
      temporary_(target_ + ".tmp.XXXXXX"),
      options_(std::move(options)) {
  fd_ = ::mkostemp(temporary_.data(), O_CLOEXEC);
  if (fd_ < 0) throw AtomicFileError(AtomicFileStep::kCreate, target_, temporary_, errno_text());
  // mkstemp creates 0600; the file is as readable as any other the user writes.
  ::fchmod(fd_, 0644);
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temporary_.c_str());
}

void AtomicFile::write(const void* data, size_t size) {
  if (!write_all(fd_, data, size)) {
    throw AtomicFileError(AtomicFileStep::kWrite, target_, temporary_, errno_text());
  }
}

void AtomicFile::commit() {
  if (options_.sync && ::fsync(fd_) != 0) {
    throw AtomicFileError(AtomicFileStep::kSync, target_, temporary_, errno_text());
  }
  const int closed = ::close(fd_);
  fd_ = -1;
  if (closed != 0) throw AtomicFileError(AtomicFileStep::kClose, target_, temporary_, errno_text());
  if (options_.before_rename) options_.before_rename(temporary_);
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    throw AtomicFileError(AtomicFileStep::kRename, target_, temporary_, errno_text());
  }
  committed_ = true;
  if (options_.sync) sync_directory(directory_of(target_));
}

void write_atomically(const std::string& path, const std::string& text,
                      const AtomicFileOptions& options) {
  AtomicFile file(path, options);
  file.write(text.data(), text.size());
  file.commit();
}

bool write_all(int fd, const void* data, size_t size) {
  const char* bytes = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t k = ::write(fd, bytes + done, size - done);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return false;
    if (k == 0) {
      errno = EIO;  // a write of nothing would loop forever
      return false;
    }
    done += static_cast<size_t>(k);
  }
  return true;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace dpe
