#include "tools/train_lib/checkpoint_json.h"

#include <cctype>
#include <cstdlib>
#include <iterator>

#include "engine/io/json_nesting.h"
#include "tools/common/exit_codes.h"

namespace dpe::tools {

std::string shown(const std::string& value) {
  constexpr size_t kMax = 40;
  bool plain = !value.empty() && value.size() <= kMax;
  for (char ch : value) {
    plain = plain &&
            (std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-');
  }
  if (plain) return value;
  std::string v = value.substr(0, kMax);
  for (char& ch : v) {
    if (!std::isprint(static_cast<unsigned char>(ch))) ch = '?';
  }
  std::string out = "'" + v + (value.size() > kMax ? "...'" : "'");
  if (value.size() > kMax) out += " (" + std::to_string(value.size()) + " bytes)";
  return out;
}

int64_t metadata_int(const std::string& path, const std::string& key, const std::string& value,
                     int64_t lo, int64_t hi) {
  bool digits = !value.empty() && value.size() <= 18;
  for (char ch : value) digits = digits && ch >= '0' && ch <= '9';
  const int64_t v = digits ? std::strtoll(value.c_str(), nullptr, 10) : -1;
  DPE_TOOLS_CHECK(DataError, digits && v >= lo && v <= hi,
                  "checkpoint '" << path << "': metadata '" << key << "' is " << shown(value)
                                 << ", not a whole number from " << lo << " to " << hi);
  return v;
}

nlohmann::json parse_checkpoint_json(const std::string& path, const std::string& text) {
  DPE_TOOLS_CHECK(DataError, text.size() <= kMaxCheckpointJsonBytes,
                  "checkpoint '" << path << "' is " << text.size() << " bytes, over the "
                                 << kMaxCheckpointJsonBytes
                                 << "-byte limit (not written by dpe train)");
  DPE_TOOLS_CHECK(
      DataError, json_nesting_depth(text, kMaxCheckpointJsonDepth) <= kMaxCheckpointJsonDepth,
      "checkpoint '" << path << "' nests deeper than " << kMaxCheckpointJsonDepth
                     << " levels (corrupt, or not written by dpe train)");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  DPE_TOOLS_CHECK(DataError, j.is_object(),
                  "checkpoint '" << path
                                 << "' is not a JSON object (corrupt, or not written by "
                                    "dpe train)");
  return j;
}

SafetensorsMetadata as_metadata(const nlohmann::json& object) {
  SafetensorsMetadata m;
  for (const auto& [key, value] : object.items()) {
    const bool number = key == "epoch" || key == "generation" || key == "context" || key == "seed";
    if (value.is_number_unsigned()) {
      m[key] = std::to_string(value.get<uint64_t>());
    } else if (value.is_string() && !number) {
      m[key] = value.get<std::string>();
    } else {
      m[key] = value.dump();
    }
  }
  return m;
}

CheckpointManifest parse_manifest(const std::string& path, const nlohmann::json& j) {
  const SafetensorsMetadata m = as_metadata(j);
  auto entry = [&](const std::string& key) {
    auto it = m.find(key);
    DPE_TOOLS_CHECK(DataError, it != m.end(),
                    "checkpoint '" << path << "' has no '" << key
                                   << "' entry: not written by dpe train");
    return it->second;
  };
  DPE_TOOLS_CHECK(DataError, entry("format") == kManifestFormat,
                  "checkpoint '" << path << "': metadata 'format' is " << shown(entry("format"))
                                 << ", not " << kManifestFormat);
  CheckpointManifest manifest;
  manifest.generation = metadata_int(path, "generation", entry("generation"), 1, kMaxGeneration);
  entry("files");
  const nlohmann::json& files = j["files"];
  bool well_formed = files.is_object() && files.size() == std::size(kSetFiles);
  for (const char* file : kSetFiles) {
    well_formed = well_formed && files.contains(file) && files[file].is_number_unsigned();
  }
  DPE_TOOLS_CHECK(DataError, well_formed,
                  "checkpoint '" << path
                                 << "': metadata 'files' must map model.safetensors, "
                                    "optimizer.safetensors and training_state.json to their sizes "
                                    "in bytes, and nothing else");
  for (const char* file : kSetFiles) manifest.sizes[file] = files[file].get<uint64_t>();
  if (j.contains("crc32")) {
    const nlohmann::json& checksums = j["crc32"];
    for (const char* file : kSetFiles) {
      DPE_TOOLS_CHECK(DataError,
                      checksums.is_object() && checksums.contains(file) &&
                          checksums[file].is_string(),
                      "checkpoint '" << path << "': metadata 'crc32' must map " << file
                                     << " to its CRC-32 (8 hex digits)");
      manifest.crc32[file] = checksums[file].get<std::string>();
    }
  }
  return manifest;
}

}  // namespace dpe::tools
