// libFuzzer target: the JSON files of train's checkpoint set (tools/train_lib/checkpoint_json.h)
// on arbitrary bytes. The first input byte picks the file, the rest is its text:
//   odd   checkpoint.json: parse_checkpoint_json, then parse_manifest
//   even  training_state.json: parse_checkpoint_json, as_metadata, and metadata_int on the whole
//         numbers train reads from it (generation, epoch, context, global_step)
// A dpe::Error (tools::DataError) is the expected answer to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/error.h"
#include "tools/train_lib/checkpoint_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] & 1) {
      const nlohmann::json j = dpe::tools::parse_checkpoint_json("checkpoint.json", text);
      (void)dpe::tools::parse_manifest("checkpoint.json", j);
    } else {
      const nlohmann::json j = dpe::tools::parse_checkpoint_json("training_state.json", text);
      const dpe::SafetensorsMetadata m = dpe::tools::as_metadata(j);
      for (const char* key : {"generation", "epoch", "context", "global_step"}) {
        const auto it = m.find(key);
        if (it == m.end()) continue;
        (void)dpe::tools::shown(it->second);
        (void)dpe::tools::metadata_int("training_state.json", key, it->second, 0,
                                       999999999999999999);
      }
    }
  } catch (const dpe::Error&) {
  }
  return 0;
}
