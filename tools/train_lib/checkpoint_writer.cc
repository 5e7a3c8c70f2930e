#include "tools/train_lib/checkpoint_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

namespace {

// Writes `text` into a new file `path` and fsyncs it; a failure removes the file.
void write_synced(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DPE_CHECK(fd >= 0, "cannot write '" << path << "': " << std::strerror(errno));
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
            ::fsync(fd) == 0;
  const std::string why = std::strerror(errno);
  ok = ::close(fd) == 0 && ok;
  if (!ok) ::unlink(path.c_str());
  DPE_CHECK(ok, "cannot write '" << path << "': " << why);
}

}  // namespace

void write_checkpoint(const std::string& dir, int64_t generation, const StateDict& model_state,
                      const StateDict& optimizer_state,
                      const nlohmann::ordered_json& training_state,
                      const std::function<void()>& before_commit, FILE* out) {
  ::mkdir(dir.c_str(), 0755);
  auto staged = [&](const char* file) { return dir + "/" + staged_name(file, generation); };
  SafetensorsSaveOptions model_options;
  model_options.metadata = {{"format", "pt"}};  // as safetensors.torch.save_file writes
  save_safetensors(staged(kModelFile), model_state, model_options);
  SafetensorsSaveOptions optimizer_options;
  optimizer_options.metadata = {{"optimizer", training_state.value("optimizer", "")}};
  save_safetensors(staged(kOptimizerFile), optimizer_state, optimizer_options);
  write_synced(staged(kTrainingStateFile), training_state.dump(2) + "\n");
  nlohmann::ordered_json files = nlohmann::ordered_json::object();
  nlohmann::ordered_json checksums = nlohmann::ordered_json::object();
  for (const char* file : kSetFiles) {
    files[file] = file_size(staged(file));
    checksums[file] = file_crc32(staged(file));
  }
  before_commit();
  nlohmann::ordered_json manifest = {{"format", kManifestFormat},
                                     {"generation", generation},
                                     {"files", files},
                                     {"crc32", checksums}};
  write_atomically(checkpoint_manifest_path(dir), manifest.dump(2) + "\n");
  for (const char* file : kSetFiles) {
    const std::string target = dir + "/" + file;
    DPE_CHECK(
        ::rename(staged(file).c_str(), target.c_str()) == 0,
        "cannot rename '" << staged(file) << "' to '" << target << "': " << std::strerror(errno));
  }
  sync_directory(dir);
  const std::string legacy = legacy_checkpoint_path(dir);
  if (::unlink(legacy.c_str()) == 0) {
    std::fprintf(out, "removed %s, superseded by %s\n", legacy.c_str(),
                 checkpoint_manifest_path(dir).c_str());
  }
}

}  // namespace dpe::tools
