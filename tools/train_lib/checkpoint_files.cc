#include "tools/train_lib/checkpoint_files.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

#include "tools/common/exit_codes.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

std::string checkpoint_manifest_path(const std::string& dir) { return dir + "/checkpoint.json"; }
std::string model_checkpoint_path(const std::string& dir) { return dir + "/model.safetensors"; }
std::string optimizer_checkpoint_path(const std::string& dir) {
  return dir + "/optimizer.safetensors";
}
std::string training_state_path(const std::string& dir) { return dir + "/training_state.json"; }
std::string legacy_checkpoint_path(const std::string& dir) {
  return dir + "/checkpoint.safetensors";
}
std::string metrics_path(const std::string& dir) { return dir + "/metrics.jsonl"; }

std::string staged_name(const std::string& file, int64_t generation) {
  return file + ".next." + std::to_string(generation);
}

int64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
}

std::string file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in.good()) return "";
  std::vector<char> buffer(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) {
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), static_cast<uInt>(in.gcount()));
  }
  if (in.bad()) return "";
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc & 0xffffffffUL));
  return hex;
}

nlohmann::json read_json_object(const std::string& path) {
  const int64_t size = file_size(path);
  DPE_TOOLS_CHECK(DataError, size >= 0, "checkpoint '" << path << "' is missing");
  DPE_TOOLS_CHECK(DataError, static_cast<uint64_t>(size) <= kMaxCheckpointJsonBytes,
                  "checkpoint '" << path << "' is " << size << " bytes, over the "
                                 << kMaxCheckpointJsonBytes
                                 << "-byte limit (not written by dpe train)");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  DPE_TOOLS_CHECK(DataError, in.good() || in.eof(), "cannot read checkpoint '" << path << "'");
  return parse_checkpoint_json(path, text);
}

}  // namespace dpe::tools
