// The TCPStore wire format (design note "store protocol", tcp_store.h): command and status bytes,
// little-endian field encoding, the limits the server checks, and blocking socket helpers shared
// by the server and the client.
//
// Threading contract: free functions and a value type; a socket is used by one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpe {
namespace distributed {
namespace wire {

constexpr uint32_t kMaxKeyBytes = 4096;
constexpr uint32_t kMaxValueBytes = 64u << 20;
constexpr uint32_t kMaxKeysPerRequest = 4096;
constexpr uint32_t kMaxTokenBytes = 1024;
// A SET's value is read in chunks of this size as it arrives, never allocated from its length.
constexpr uint32_t kValueChunkBytes = 64u << 10;

enum Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kCheck = 5,
  kHello = 6,
  kBye = 7,
  kLost = 8,
  kAuth = 9,  // AUTH token: the first request of every client (empty token: none configured)
};

enum Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

// Encodes fields little-endian, independent of the host's byte order.
class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u32(uint32_t v);
  Writer& i64(int64_t v);
  // A u32 length, then the bytes.
  Writer& bytes(const char* p, size_t n);
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  const std::vector<char>& buf() const { return buf_; }

 private:
  std::vector<char> buf_;
};

uint32_t decode_u32(const unsigned char* p);
int64_t decode_i64(const unsigned char* p);
// A timeout as the u32 milliseconds the wire carries (negative: 0; capped at 2^31 - 1).
uint32_t clamp_ms(std::chrono::milliseconds t);

// Sends all n bytes (no SIGPIPE). False when the peer is gone.
bool send_all(int fd, const char* p, size_t n);
// Reads exactly n bytes, blocking. False on EOF or error.
bool read_exact(int fd, void* buf, size_t n);

}  // namespace wire
}  // namespace distributed
}  // namespace dpe
