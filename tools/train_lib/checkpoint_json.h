// checkpoint_json: the JSON files of train's checkpoint set (design note "checkpoint set" in
// trainer.h), text in, checked values out: checkpoint.json (the manifest) and
// training_state.json, and the metadata checks both layouts share. Every error is a DataError
// naming the file and the key; nothing here touches the disk, so tests/fuzz/checkpoint_json_fuzz.cc
// feeds it arbitrary bytes.
//
// Threading contract: free functions without shared state; call them from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/io/safetensors.h"

namespace dpe::tools {

inline constexpr const char* kManifestFormat = "dpe-checkpoint-1";
inline constexpr int64_t kMaxGeneration = 999999999999;
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kOptimizerFile = "optimizer.safetensors";
inline constexpr const char* kTrainingStateFile = "training_state.json";
inline constexpr const char* kSetFiles[] = {kModelFile, kOptimizerFile, kTrainingStateFile};
// The set's JSON files are a few hundred bytes and nest two deep (the manifest's "files"); larger
// or deeper input is refused before it is parsed, so a crafted file cannot exhaust the stack of
// the JSON parser or serializer.
inline constexpr size_t kMaxCheckpointJsonBytes = 1 << 20;
inline constexpr int kMaxCheckpointJsonDepth = 16;

// A checkpoint's metadata value as a message shows it: as it is when it is a short plain word
// (letters, digits, '.', '_', '-'), else quoted, cut at 40 characters, anything unprintable as
// '?'. The value comes from a file and may be anything, of any length.
std::string shown(const std::string& value);

// A whole-number metadata value between lo and hi: digits only (no sign, space or exponent); a
// DataError naming `path` and `key` otherwise.
int64_t metadata_int(const std::string& path, const std::string& key, const std::string& value,
                     int64_t lo, int64_t hi);

// The JSON object in `text`, the contents of `path`: a DataError naming it when the text is over
// kMaxCheckpointJsonBytes, nests deeper than kMaxCheckpointJsonDepth, or is not a JSON object.
nlohmann::json parse_checkpoint_json(const std::string& path, const std::string& text);

// The values of a JSON object as metadata strings, so that the checks of the single-file layout
// apply: strings as they are, whole numbers in decimal, anything else as its JSON text (which no
// check accepts: a quoted "3" is not a whole number).
SafetensorsMetadata as_metadata(const nlohmann::json& object);

// What a manifest says: its generation, each file's size and, when it records them (manifests
// written before did not), each file's CRC-32 as the manifest writes it (compared, not parsed).
struct CheckpointManifest {
  int64_t generation = 0;
  std::map<std::string, uint64_t> sizes;   // of each of kSetFiles
  std::map<std::string, std::string> crc32;  // empty: not recorded
};

// Checks the manifest `j` read from `path`: format kManifestFormat, generation from 1 to
// kMaxGeneration, "files" mapping exactly kSetFiles to sizes, "crc32" (when present) mapping each
// of them to a string. A DataError naming `path` and the key otherwise.
CheckpointManifest parse_manifest(const std::string& path, const nlohmann::json& j);

}  // namespace dpe::tools
