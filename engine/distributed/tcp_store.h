// TCPStore: the client of the key-value store that ranks rendezvous through, served by rank 0 on
// MASTER_ADDR:MASTER_PORT (PyTorch's TCPStore). It implements gloo::rendezvous::Store, so Gloo's
// connectFullMesh exchanges addresses through it, and adds counters and rank liveness.
//
// Design note "store protocol": every request is a command byte followed by length-prefixed
// fields (u32/i64 little-endian): SET key value, GET key timeout_ms, ADD key delta,
// WAIT n keys timeout_ms, CHECK n keys, HELLO rank, BYE, LOST, AUTH token (every client's first
// request; the server refuses the connection when it has a token and this is not it). Replies start
// with a status byte (OK, TIMEOUT, ERROR + message). The server checks each length against its
// limit (kMaxKeyBytes, kMaxValueBytes, kMaxKeysPerRequest) and reserves it against the store's byte
// cap before it reads or allocates what the length claims; a malformed or oversized request gets an
// ERROR reply and its connection is closed, while the other connections keep being served; so does
// a request left half-sent past its deadline (tcp_store_server.h, design notes "requests are read
// whole", "bytes in transit" and "admission"). Blocking (GET, WAIT) happens on the server, bounded
// by the timeout the client sends, so a reply always comes back. The format is tcp_store_wire.h,
// the server tcp_store_server.h.
//
// Threading contract: every method of TCPStore may be called from any thread (requests on the
// one client connection are serialised). The server runs an accept thread plus one thread per
// connection; the destructor stops and joins them all.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/distributed/tcp_store_server.h"
#include "engine/distributed/tcp_store_wire.h"

namespace dpe {
namespace distributed {

struct TCPStoreOptions {
  // How long a client retries connecting, and the default for get() and wait().
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // The shared secret (docs/distributed.md, "The rendezvous store: threat model"). nullopt: the
  // environment variable DPE_STORE_TOKEN, or none when it is unset or empty. A server with a token
  // refuses clients without it; a server without one accepts every client, as PyTorch's TCPStore.
  std::optional<std::string> token;
  // The server's limits, when is_server (its token is the one above).
  TCPStoreServerOptions server;
  // While a client retries connecting, a line on stderr every this long naming the address it
  // waits for. 0: silent.
  std::chrono::milliseconds progress_period{0};
};

class TCPStore : public gloo::rendezvous::Store {
 public:
  static constexpr uint32_t kMaxKeyBytes = wire::kMaxKeyBytes;
  static constexpr uint32_t kMaxValueBytes = wire::kMaxValueBytes;
  static constexpr uint32_t kMaxKeysPerRequest = wire::kMaxKeysPerRequest;

  // is_server: serve the store on host:port (port 0: a free port chosen by the kernel, see
  // port()), then connect to it like every client. Clients retry connecting until `timeout`.
  // `timeout` is also the default for get() and wait().
  TCPStore(const std::string& host, int port, bool is_server,
           std::chrono::milliseconds timeout = std::chrono::seconds(30));
  TCPStore(const std::string& host, int port, bool is_server, TCPStoreOptions options);
  ~TCPStore() override;
  TCPStore(const TCPStore&) = delete;
  TCPStore& operator=(const TCPStore&) = delete;

  int port() const { return port_; }
  const std::string& host() const { return host_; }

  // --- gloo::rendezvous::Store ---
  void set(const std::string& key, const std::vector<char>& value) override;
  // Waits up to the constructor's `timeout` for the key; throws dpe::Error naming the key and the
  // timeout.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  // As wait(), but a timeout returns false instead of throwing (other failures still throw).
  bool try_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // Adds `delta` to the counter at `key` (absent: 0) and returns the new value. The counter is
  // stored as decimal text, so get() reads it too.
  int64_t add(const std::string& key, int64_t delta);
  // True when every key is present; never blocks.
  bool check(const std::vector<std::string>& keys);

  // Liveness: tells the server this client is `rank`. If the connection then closes without
  // close() (the process died), the server records the rank as lost; lost_ranks() lists them.
  void register_rank(int rank);
  std::vector<int> lost_ranks();
  // Says goodbye to the server (a clean exit) and closes the connection. Idempotent.
  void close();

 private:
  std::vector<char> request(const std::vector<char>& msg, std::chrono::milliseconds reply_within,
                            const std::string& what, bool* timed_out);
  void connect_with_retry();
  void authenticate();

  std::string host_;
  int port_;
  std::chrono::milliseconds timeout_;
  std::string token_;
  std::chrono::milliseconds progress_period_;
  std::unique_ptr<TCPStoreServer> server_;
  std::mutex mu_;  // guards fd_ and the request/reply sequence on it
  int fd_ = -1;
};

}  // namespace distributed
}  // namespace dpe
