#include "tools/train_lib/checkpoint_recovery.h"

#include <dirent.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/io/json_nesting.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

namespace {

// `text` from `from` on is `n` characters (any count when n < 0, at least one) of `ok`.
bool all_chars(const std::string& text, size_t from, int n, int (*ok)(int)) {
  if (from > text.size() || (n >= 0 && text.size() - from != static_cast<size_t>(n)) ||
      text.size() == from) {
    return false;
  }
  for (size_t i = from; i < text.size(); ++i) {
    if (!ok(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// `name` is `prefix` and mkstemp's 6 letters or digits.
bool temporary_of(const std::string& name, const std::string& prefix) {
  return starts_with(name, prefix + ".tmp.") && all_chars(name, prefix.size() + 5, 6, isalnum);
}

// The manifest's generation when it is readable and names one; 0 otherwise (recovery only:
// resume checks everything).
int64_t manifest_generation(const std::string& dir) {
  const std::string path = checkpoint_manifest_path(dir);
  const int64_t size = file_size(path);
  if (size < 0 || static_cast<uint64_t>(size) > kMaxCheckpointJsonBytes) return 0;
  std::ifstream in(path, std::ios::binary);
  const std::string text(std::istreambuf_iterator<char>(in), {});
  if (json_nesting_depth(text, kMaxCheckpointJsonDepth) > kMaxCheckpointJsonDepth) return 0;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("generation") || !j["generation"].is_number_unsigned()) {
    return 0;
  }
  const uint64_t g = j["generation"].get<uint64_t>();
  return g >= 1 && g <= static_cast<uint64_t>(kMaxGeneration) ? static_cast<int64_t>(g) : 0;
}

}  // namespace

bool left_by_a_write(const std::string& name) {
  if (temporary_of(name, "checkpoint.safetensors") || temporary_of(name, "checkpoint.json")) {
    return true;
  }
  for (const char* file : kSetFiles) {
    const std::string prefix = std::string(file) + ".next.";
    if (!starts_with(name, prefix)) continue;
    const size_t dot = name.find('.', prefix.size());
    const std::string staged = name.substr(0, dot);
    if (!all_chars(staged, prefix.size(), -1, isdigit) || staged.size() > prefix.size() + 18) {
      return false;
    }
    return dot == std::string::npos || temporary_of(name, staged);
  }
  return false;
}

int64_t recover_checkpoint_dir(const std::string& dir, FILE* out) {
  const int64_t generation = manifest_generation(dir);
  if (generation > 0) {
    bool moved = false;
    for (const char* file : kSetFiles) {
      const std::string staged = dir + "/" + staged_name(file, generation);
      if (file_size(staged) < 0) continue;
      const std::string target = dir + "/" + file;
      DPE_CHECK(::rename(staged.c_str(), target.c_str()) == 0,
                "cannot rename '" << staged << "' to '" << target << "': " << std::strerror(errno));
      std::fprintf(out, "moved %s to %s, finishing checkpoint generation %lld (interrupted)\n",
                   staged.c_str(), target.c_str(), static_cast<long long>(generation));
      moved = true;
    }
    if (moved) sync_directory(dir);
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return generation + 1;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    if (left_by_a_write(e->d_name)) stale.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  for (const std::string& path : stale) {
    if (::unlink(path.c_str()) == 0) {
      std::fprintf(out, "removed %s, left by an interrupted checkpoint write\n", path.c_str());
    }
  }
  return generation + 1;
}

}  // namespace dpe::tools
