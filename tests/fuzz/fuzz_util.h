// Helpers shared by the fuzz targets: the input written to a temporary file the readers open.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dpe_fuzz {

// One temporary file per process (libFuzzer runs one input at a time), rewritten for each input.
inline const std::string& write_input(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    // A file in memory (/dev/shm) runs about 7x as many inputs a second as one on disk.
    const char* dir = std::getenv("FUZZ_TMPDIR");
    if (dir == nullptr || *dir == '\0') dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : nullptr;
    if (dir == nullptr) dir = std::getenv("TMPDIR");
    if (dir == nullptr || *dir == '\0') dir = "/tmp";
    return std::string(dir) + "/dpe_fuzz_input_" + std::to_string(::getpid());
  }();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace dpe_fuzz
