// atomic_file: a file written whole or not at all (design note "atomic save" in safetensors.h).
// The bytes go to a temporary file beside the target, which is renamed over it once complete, so
// a reader, or the next start after a crash, finds the previous file or the new one, never part of
// one. Used by save_safetensors, train's checkpoint manifest and the tools' --json/--svg outputs.
//
// Threading contract: an AtomicFile belongs to one thread at a time. The free functions keep no
// state; call them from any thread (writes to one target at once: each rename is atomic, the last
// wins).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "engine/core/error.h"

namespace dpe {

// The step of an atomic write that failed.
enum class AtomicFileStep { kCreate, kWrite, kSync, kClose, kRename };

// An atomic write's failure: its step, the target, the temporary file and errno's text, from which
// a caller may word its own message. what() is "cannot create a temporary file next to 'TARGET':
// WHY", "cannot write 'TEMPORARY': WHY" (write, sync, close) or "cannot rename 'TEMPORARY' to
// 'TARGET': WHY".
class AtomicFileError : public Error {
 public:
  AtomicFileError(AtomicFileStep step, std::string target, std::string temporary,
                  std::string reason);
  AtomicFileStep step() const { return step_; }
  const std::string& target() const { return target_; }
  const std::string& temporary() const { return temporary_; }
  const std::string& reason() const { return reason_; }

 private:
  AtomicFileStep step_;
  std::string target_, temporary_, reason_;
};

struct AtomicFileOptions {
  // fsync the file before its rename and its folder after it, so that the new file survives a
  // power cut; false for outputs a rerun makes again (the rename is atomic either way).
  bool sync = true;
  // Test seam: called with the temporary file's path once it is complete (synced and closed), just
  // before the rename. A test kills the process there; an exception from it aborts the write.
  std::function<void(const std::string& temporary)> before_rename;
};

// One atomic write: TARGET.tmp.XXXXXX (mkstemp's letters), mode 0644, removed on destruction
// unless commit() renamed it over the target. A crash leaves the temporary file beside an
// untouched target; the next writer makes a new one.
class AtomicFile {
 public:
  // Throws AtomicFileError (kCreate) when the folder takes no new file.
  explicit AtomicFile(std::string target, AtomicFileOptions options = {});
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends `size` bytes; throws AtomicFileError (kWrite), a full disk's included.
  void write(const void* data, size_t size);
  // Syncs and closes the file, renames it over the target, syncs the folder (best effort: the
  // new file is complete and in place either way). Throws AtomicFileError (kSync, kClose,
  // kRename); the target is then untouched.
  void commit();

  const std::string& target() const { return target_; }
  const std::string& temporary() const { return temporary_; }

 private:
  std::string target_, temporary_;
  AtomicFileOptions options_;
  int fd_ = -1;
  bool committed_ = false;
};

// Replaces `path` by `text` atomically (AtomicFile: create, write, commit).
void write_atomically(const std::string& path, const std::string& text,
                      const AtomicFileOptions& options = {});

// Writes all `size` bytes to `fd`, again after a short write or EINTR; false with errno set when
// a write fails.
bool write_all(int fd, const void* data, size_t size);

// fsyncs the folder `dir`, so that the renames in it survive a crash. Best effort: a folder that
// cannot be opened is left as it is.
void sync_directory(const std::string& dir);

// The folder `path` is in: "." for a bare name, "/" for a name in the root.
std::string directory_of(const std::string& path);

}  // namespace dpe
