// libFuzzer target: the optimizer state-key parser (optim::parse_state_key), which reads the keys
// of an optimizer's state dict from a checkpoint (SGD, Adam, ZeroRedundancyOptimizer and FSDP's
// loaders). Bytes 0-3 give the parameter count (little-endian, at most 2^32 - 1), the rest is the
// key. A dpe::Error is the expected answer to a bad key; an accepted key must have been
// "state.<i>.<field>" with i below the count, as its parts say.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/optim/optimizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const size_t count = static_cast<size_t>(data[0]) | static_cast<size_t>(data[1]) << 8 |
                       static_cast<size_t>(data[2]) << 16 | static_cast<size_t>(data[3]) << 24;
  const std::string key(reinterpret_cast<const char*>(data) + 4, size - 4);
  try {
    const auto [index, field] = dpe::optim::parse_state_key("fuzz", key, count);
    // The key, rebuilt from what the parser returned, up to leading zeros of the index.
    const std::string digits = key.substr(6, key.size() - 6 - field.size() - 1);
    if (index >= count || field.empty() || key.rfind("state.", 0) != 0 ||
        std::stoul(digits) != index || key != "state." + digits + "." + field) {
      std::abort();
    }
  } catch (const dpe::Error&) {
  }
  return 0;
}
