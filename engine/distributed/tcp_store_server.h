// TCPStoreServer: the server side of TCPStore (rank 0 serves it; tcp_store.h is the client): a
// key-value map, blocking GET/WAIT answered within the client's timeout, counters, and the ranks
// whose connection dropped without a goodbye. Protocol: design note "store protocol", tcp_store.h.
//
// Threading contract: constructed and destroyed by one thread. It runs an accept thread plus one
// thread per connection; the destructor stops and joins them all. port() may be called from any
// thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/distributed/tcp_store_wire.h"

namespace dpe {
namespace distributed {

// Listens on host:port (port 0: a free port chosen by the kernel, see port()).
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, int port);
  ~TCPStoreServer();
  int port() const { return port_; }

 private:
  struct Connection {
    int fd = -1;
    std::thread thread;
  };

  void accept_loop();
  void serve(int fd);
  void handle(int fd, uint8_t cmd, int* rank, bool* bye);

  // Parsing helpers: each checks its limit before reading what the peer claims.
  static uint32_t read_u32(int fd);
  static int64_t read_i64(int fd);
  static std::string read_key(int fd);
  static uint32_t read_count(int fd);
  static void reply(int fd, const wire::Writer& w);
  static void reply_error(int fd, const std::string& message);

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread accept_thread_;

  std::mutex conn_mu_;
  std::list<Connection> connections_;

  std::mutex mu_;  // guards data_ and lost_
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
  std::set<int> lost_;
};

}  // namespace distributed
}  // namespace dpe
