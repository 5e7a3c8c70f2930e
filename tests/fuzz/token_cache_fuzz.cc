// libFuzzer target: the token cache's readers (engine/data/token_cache.h, tokenizer.h) on
// arbitrary bytes, the files a cache directory may hold after a crash, a disk error or a user's
// copy. The first input byte picks the reader, the rest is the file:
//   % 3 == 0  read_token_file (<name>-<key>.tokens) against a vocabulary of 32 000
//   % 3 == 1  read_token_cache_record (<name>-<key>.json): nullopt for anything it does not take
//   % 3 == 2  Tokenizer::load (<name>-<key>.model, SentencePiece's protobuf), then a round of
//             encode and decode when it loads
// A dpe::Error is the expected answer to a bad file; anything else is a finding.
#include <cstddef>
#include <cstdint>

#include "engine/core/error.h"
#include "engine/data/token_cache.h"
#include "engine/data/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t selector = data[0] % 3;
  const std::string& path = dpe_fuzz::write_input(data + 1, size - 1);
  try {
    if (selector == 0) {
      dpe::Tensor train, validation;
      dpe::read_token_file(path, 32000, &train, &validation);
    } else if (selector == 1) {
      (void)dpe::read_token_cache_record(path);
    } else {
      const dpe::Tokenizer tokenizer = dpe::Tokenizer::load(path);
      const std::vector<int64_t> ids = tokenizer.encode("Hello, world.\nA second line.");
      (void)tokenizer.decode(ids);
    }
  } catch (const dpe::Error&) {
  }
  return 0;
}
