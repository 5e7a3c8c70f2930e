// checkpoint_files: the names of the files of train's checkpoint set (design note "checkpoint set"
// in trainer.h) and the reads its writer, its recovery and its reader share: a file's size and
// CRC-32, a JSON file of the set.
//
// Threading contract: free functions without shared state; call them from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace dpe::tools {

std::string checkpoint_manifest_path(const std::string& dir);   // checkpoint.json
std::string model_checkpoint_path(const std::string& dir);      // model.safetensors
std::string optimizer_checkpoint_path(const std::string& dir);  // optimizer.safetensors
std::string training_state_path(const std::string& dir);        // training_state.json
std::string legacy_checkpoint_path(const std::string& dir);     // checkpoint.safetensors (older)
std::string metrics_path(const std::string& dir);               // metrics.jsonl

// training_state.json's format, and the older single file's. The manifest's format, the set's
// file names and the JSON limits: checkpoint_json.h.
inline constexpr const char* kTrainingStateFormat = "dpe-train-2";
inline constexpr const char* kLegacyFormat = "dpe-train-1";

// A file of the set as it is written, before the manifest names it: "model.safetensors.next.4".
std::string staged_name(const std::string& file, int64_t generation);

// The size of the regular file `path`; -1 when it is missing or not a regular file.
int64_t file_size(const std::string& path);

// The CRC-32 of a file (zlib's, the checksum of gzip and zip: any flipped bit, and any burst of
// up to 32, changes it), as 8 hex digits; read in 1 MiB pieces. Empty when it cannot be read.
std::string file_crc32(const std::string& path);

// A JSON file of the set: a DataError naming it when it is missing, unreadable, over 1 MiB or
// not a JSON object.
nlohmann::json read_json_object(const std::string& path);

}  // namespace dpe::tools
