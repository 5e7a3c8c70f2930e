// libFuzzer target: read_safetensors on arbitrary bytes. A dpe::Error is the expected answer to a
// bad file; anything else (a crash, an ASan/UBSan report, another exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = dpe_fuzz::write_input(data, size);
  try {
    dpe::SafetensorsContents contents = dpe::read_safetensors(path);
    (void)contents;
  } catch (const dpe::Error&) {
  }
  return 0;
}
