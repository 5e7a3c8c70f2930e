// libFuzzer target: the IDX readers (read_idx_images, read_idx_labels) on arbitrary bytes, plain
// or gzip (the readers detect gzip themselves). The first input byte picks the reader, the rest is
// the file. A dpe::Error is the expected answer to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/data/fashion_mnist.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0];
  const std::string& path = dpe_fuzz::write_input(data + 1, size - 1);
  try {
    if (selector & 1) {
      dpe::Tensor labels = dpe::read_idx_labels(path);
      (void)labels;
    } else {
      dpe::Tensor images = dpe::read_idx_images(path, /*normalize=*/(selector & 2) != 0);
      (void)images;
    }
  } catch (const dpe::Error&) {
  }
  return 0;
}
