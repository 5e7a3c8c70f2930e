#include "tools/train_lib/checkpoint_reader.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tools/common/exit_codes.h"
#include "tools/train_lib/checkpoint_files.h"
#include "tools/train_lib/checkpoint_json.h"

namespace dpe::tools {

namespace {

// The most optimizer steps a checkpoint may record (metadata_int reads up to 18 digits).
constexpr int64_t kMaxGlobalStep = 999999999999999999;

// Checks a checkpoint's training metadata against the run and returns where it leaves the run.
// `path` is the file the values come from (messages name it and the key). The single-file layout
// (`legacy`) may lack 'format' and 'optimizer' (early checkpoints: SGD's); checkpoints written
// before the steps were counted lack 'global_step', which only --max-steps needs.
Position check_training_state(const std::string& path, const SafetensorsMetadata& metadata,
                              const TrainConfig& c, bool language_model, bool legacy) {
  auto meta = [&](const std::string& key) {
    auto it = metadata.find(key);
    DPE_TOOLS_CHECK(
        DataError, it != metadata.end(),
        "checkpoint '" << path << "' has no '" << key << "' entry: not written by dpe train");
    return it->second;
  };
  const std::string format = legacy ? kLegacyFormat : kTrainingStateFormat;
  if (!legacy || metadata.count("format")) {
    DPE_TOOLS_CHECK(DataError, meta("format") == format,
                    "checkpoint '" << path << "': metadata 'format' is " << shown(meta("format"))
                                   << ", not " << format);
  }
  DPE_TOOLS_CHECK(
      DataError, meta("model") == c.model,
      "checkpoint '" << path << "' holds a " << shown(meta("model")) << " model, not " << c.model);
  const std::string saved_opt =
      legacy && !metadata.count("optimizer") ? std::string("sgd") : meta("optimizer");
  DPE_TOOLS_CHECK(DataError, saved_opt == c.optimizer,
                  "checkpoint '" << path << "' holds " << shown(saved_opt) << " state, not "
                                 << c.optimizer
                                 << (saved_opt == "sgd" || saved_opt == "adamw"
                                         ? " (pass --optimizer " + saved_opt + ")"
                                         : std::string()));
  if (language_model) {
    const int64_t context = metadata_int(path, "context", meta("context"), 1, int64_t{1} << 20);
    DPE_TOOLS_CHECK(DataError, context == c.context,
                    "checkpoint '" << path << "' was trained with --context " << context << ", not "
                                   << c.context << " (the data order depends on the windows)");
  }
  if (!legacy) {
    // The samplers' order is a function of the seed and the epoch: the position to resume from.
    const std::string& s = meta("seed");
    bool digits = !s.empty() && s.size() <= 20;
    for (char ch : s) digits = digits && ch >= '0' && ch <= '9';
    const unsigned long long seed = digits ? std::strtoull(s.c_str(), nullptr, 10) : 0;
    DPE_TOOLS_CHECK(DataError, digits && std::to_string(seed) == s,
                    "checkpoint '" << path << "': metadata 'seed' is " << shown(s)
                                   << ", not a whole number from 0 to 2^64-1");
    DPE_TOOLS_CHECK(DataError, seed == c.seed,
                    "checkpoint '" << path << "' was trained with --seed " << seed << ", not "
                                   << c.seed << " (the data order depends on it)");
  }
  Position at;
  at.epoch = static_cast<int>(metadata_int(path, "epoch", meta("epoch"), 0, kMaxEpochs - 1));
  if (metadata.count("global_step")) {
    at.global_step = metadata_int(path, "global_step", meta("global_step"), 0, kMaxGlobalStep);
  }
  DPE_TOOLS_CHECK(DataError, at.global_step >= 0 || c.max_steps == 0,
                  "checkpoint '" << path
                                 << "' has no 'global_step' entry (it was written before the "
                                    "run's steps were counted), so --max-steps cannot count the "
                                    "steps before it; resume without --max-steps");
  return at;
}

// Runs `load`; a plain dpe::Error from it (the reader's, the state dicts') becomes a DataError
// naming `path`; out of memory stays what it is.
template <typename F>
auto naming(const std::string& path, F load) {
  try {
    return load();
  } catch (const DataError&) {
    throw;
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw DataError(msg.find(path) != std::string::npos ? msg
                                                        : "checkpoint '" + path + "': " + msg);
  }
}

// The single-file layout (checkpoint.safetensors: the model's tensors, the optimizer's prefixed
// "optimizer.", training metadata), read when a directory has no manifest.
Position resume_legacy(const TrainConfig& c, bool language_model, const StateIo& io) {
  const std::string path = legacy_checkpoint_path(c.checkpoint_dir);
  return naming(path, [&] {
    SafetensorsContents ck = read_safetensors(path, Device());
    const Position at = check_training_state(path, ck.metadata, c, language_model, /*legacy=*/true);
    StateDict model_state, optim_state;
    for (auto& [k, v] : ck.tensors) {
      if (k.rfind("optimizer.", 0) == 0)
        optim_state.emplace_back(k.substr(10), v);
      else
        model_state.emplace_back(k, v);
    }
    io.load_model(model_state);
    io.load_optimizer(optim_state);
    return at;
  });
}

// The set named by checkpoint.json (design note "checkpoint set"): the manifest first (format,
// generation, each file's size), then training_state.json (of the manifest's generation), then
// the two state dicts. Every value is checked before use; messages name the file and the key.
Position resume_set(const TrainConfig& c, bool language_model, const StateIo& io) {
  const std::string& dir = c.checkpoint_dir;
  const std::string manifest_path = checkpoint_manifest_path(dir);
  const CheckpointManifest manifest =
      parse_manifest(manifest_path, read_json_object(manifest_path));
  const int64_t generation = manifest.generation;
  for (const char* file : kSetFiles) {
    const std::string path = dir + "/" + file;
    const int64_t size = file_size(path);
    const uint64_t recorded = manifest.sizes.at(file);
    DPE_TOOLS_CHECK(DataError, size >= 0 && static_cast<uint64_t>(size) == recorded,
                    "checkpoint '" << path << "' "
                                   << (size < 0 ? std::string("is missing")
                                                : "is " + std::to_string(size) + " bytes")
                                   << ", but '" << manifest_path << "' (metadata 'files') records "
                                   << recorded << " bytes (truncated, or replaced since)");
  }
  // The files' CRC-32, which a manifest written before it was recorded does not have: a flipped
  // bit would otherwise be trained on.
  for (const auto& [file, expected] : manifest.crc32) {
    const std::string path = dir + "/" + file;
    const std::string actual = file_crc32(path);
    DPE_TOOLS_CHECK(DataError, actual == expected,
                    "checkpoint '" << path << "' has CRC-32 " << actual << ", but '"
                                   << manifest_path << "' (metadata 'crc32') records "
                                   << shown(expected)
                                   << " (the file changed since it was written: a flipped bit, "
                                      "a disk error, or another writer)");
  }
  const std::string state_path = training_state_path(dir);
  const SafetensorsMetadata state = as_metadata(read_json_object(state_path));
  const auto g = state.find("generation");
  DPE_TOOLS_CHECK(
      DataError, g != state.end(),
      "checkpoint '" << state_path << "' has no 'generation' entry: not written by dpe train");
  DPE_TOOLS_CHECK(
      DataError, metadata_int(state_path, "generation", g->second, 1, kMaxGeneration) == generation,
      "checkpoint '" << state_path << "': metadata 'generation' is " << g->second << ", but '"
                     << manifest_path << "' names generation " << generation
                     << " (the files are not one set)");
  const Position at = check_training_state(state_path, state, c, language_model, /*legacy=*/false);
  const std::string model_path = model_checkpoint_path(dir);
  naming(model_path, [&] {
    io.load_model(read_safetensors(model_path, Device()).tensors);
    return 0;
  });
  const std::string optimizer_path = optimizer_checkpoint_path(dir);
  naming(optimizer_path, [&] {
    io.load_optimizer(read_safetensors(optimizer_path, Device()).tensors);
    return 0;
  });
  return at;
}

}  // namespace

bool has_checkpoint(const std::string& dir) {
  return ::access(checkpoint_manifest_path(dir).c_str(), F_OK) == 0 ||
         ::access(legacy_checkpoint_path(dir).c_str(), F_OK) == 0;
}

Position resume(const TrainConfig& c, bool language_model, const StateIo& io, std::string* from) {
  const std::string manifest = checkpoint_manifest_path(c.checkpoint_dir);
  const std::string legacy = legacy_checkpoint_path(c.checkpoint_dir);
  if (::access(manifest.c_str(), F_OK) != 0 && ::access(legacy.c_str(), F_OK) == 0) {
    *from = legacy;
    return resume_legacy(c, language_model, io);
  }
  DPE_TOOLS_CHECK(DataError, ::access(manifest.c_str(), F_OK) == 0,
                  "no checkpoint to resume from: '" << manifest << "' does not exist (nor '"
                                                    << legacy
                                                    << "', the older single-file layout)");
  *from = manifest;
  return resume_set(c, language_model, io);
}

}  // namespace dpe::tools
