// TCPStoreServer: the server side of TCPStore (rank 0 serves it; tcp_store.h is the client): a
// key-value map, blocking GET/WAIT answered within the client's timeout, counters, and the ranks
// whose connection dropped without a goodbye. Protocol: design note "store protocol", tcp_store.h.
//
// Limits (docs/distributed.md, "The rendezvous store: threat model"): at most max_connections
// admitted connections (the extra get an ERROR reply naming the limit and are closed), at most
// max_pending_connections not yet admitted (design note "admission"), at most max_stored_bytes of
// keys and values stored or in transit (design note "bytes in transit"; an ADD beyond it gets an
// ERROR reply and its connection stays usable), values written into memory in kValueChunkBytes
// chunks as they arrive, finished connections reaped (fd closed, thread joined) whenever a new one
// is accepted. With a token, a connection whose first request is not AUTH with that token is
// refused, so it can neither read, write nor claim a rank.
//
// Design note "requests are read whole": a connection's thread reads a request completely
// (read_request, no lock held) before it executes it under the store's lock (execute), so a client
// that stops halfway through a request delays no one else. Once a request's first byte has
// arrived the rest must follow within request_timeout (plus a second per MB of a SET's value);
// otherwise the client gets an ERROR naming the deadline and its connection is closed. A reply must
// be taken within the same allowance. Between requests a connection may stay idle for as long as
// it likes (a rank waits in a barrier for hours).
//
// Design note "bytes in transit": the bytes of a request count against max_stored_bytes from the
// moment their length arrives, before they do: every key, and a SET's value in full (even one that
// replaces a value; once stored, only its growth stays counted). A request whose announced bytes
// would take stored plus in-transit bytes over the cap gets an ERROR naming the cap and the sizes
// at once; what it still sends of that field is read and dropped, then its connection is closed.
// Its bytes are given back when the request is done, fails or times out, so stored_bytes_ +
// in_transit_ never exceeds the cap, and many half-sent values cannot hold more memory than it.
//
// Design note "admission": a new connection is pending until its first request has arrived whole:
// with a token, an AUTH with that token; without one, any request. Only then is it admitted and
// counted against max_connections. Pending connections have a pool of their own, so idle ones
// cannot take the places of the ranks: each must complete its first request within
// handshake_timeout of being accepted, and when max_pending_connections are pending a newcomer
// displaces the oldest that has sent nothing (it gets an ERROR saying why, then is closed). A rank
// sends AUTH as soon as it connects, so it is never the one that has sent nothing for long.
//
// Threading contract: constructed and destroyed by one thread. It runs an accept thread plus one
// thread per connection; the destructor stops and joins them all. port(), live_connections() and
// bytes_in_transit() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "engine/distributed/tcp_store_wire.h"

namespace dpe {
namespace distributed {

struct TCPStoreServerOptions {
  // Admitted connections (design note "admission").
  size_t max_connections = 1024;
  // Connections not admitted yet, and how long one may take to send its first request whole.
  size_t max_pending_connections = 256;
  std::chrono::milliseconds handshake_timeout = std::chrono::seconds(5);
  size_t max_stored_bytes = size_t{1} << 30;
  // How long the rest of a request may take once its first byte has arrived (a SET gets a second
  // more per MB of its value), and a reply to be taken by the client.
  std::chrono::milliseconds request_timeout = std::chrono::seconds(5);
  // Empty: no authentication (PyTorch's TCPStore). Otherwise every client must present it.
  std::string token;
};

// Listens on host:port (port 0: a free port chosen by the kernel, see port()).
class TCPStoreServer {
 public:
  TCPStoreServer(const std::string& host, int port, TCPStoreServerOptions options = {});
  ~TCPStoreServer();
  int port() const { return port_; }
  // Connections being served now (finished ones are not counted, reaped or not).
  size_t live_connections();
  // Bytes of requests being received now (design note "bytes in transit").
  size_t bytes_in_transit();

 private:
  // Guarded by conn_mu_.
  struct Connection {
    int fd = -1;  // -1 once serve() has closed it
    bool done = false;
    bool admitted = false;   // design note "admission"
    bool spoke = false;      // its first request has begun to arrive
    bool displaced = false;  // pushed out of the pending pool by a newcomer; its reads are shut
    std::string peer;        // "address:port" of the client
    std::thread thread;
  };
  // Bytes of a request being read (keys, a value), counted against max_stored_bytes until the
  // request is done (design note "bytes in transit"). Released on destruction.
  class Reservation {
   public:
    explicit Reservation(TCPStoreServer* server) : server_(server) {}
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation() { release(); }
    // Reserves n more bytes, or throws (naming `what`, the sizes and the cap) when they would take
    // stored plus in-transit bytes over max_stored_bytes; `unread` bytes of the request are still
    // to come after the refusal.
    void grow(size_t n, const std::string& what, size_t unread);
    void release();
    // With mu_ held: forgets the bytes and returns how many there were.
    size_t take_locked() { return std::exchange(bytes_, 0); }

   private:
    TCPStoreServer* server_;
    size_t bytes_ = 0;
  };
  // One request as read from the wire; which fields are set depends on `cmd`.
  struct Request {
    explicit Request(TCPStoreServer* server, uint8_t command) : cmd(command), reservation(server) {}
    uint8_t cmd = 0;
    std::string key;                // SET, GET, ADD
    std::vector<std::string> keys;  // WAIT, CHECK
    std::vector<char> value;        // SET
    int64_t number = 0;             // ADD's delta, HELLO's rank
    uint32_t timeout_ms = 0;        // GET, WAIT
    std::string token;              // AUTH
    Reservation reservation;        // the bytes of key(s) and value
  };
  class RequestReader;

  void accept_loop();
  void reap_finished();  // joins the threads of finished connections and drops them
  // With conn_mu_ held: makes room in the pending pool for one more connection.
  void displace_pending_locked();
  void serve(std::list<Connection>::iterator conn, int fd, const std::string& peer,
             std::chrono::steady_clock::time_point accepted);
  // Counts the connection against max_connections, or throws when they are all taken.
  void admit(std::list<Connection>::iterator conn);
  // Reads the rest of a request whose command byte `cmd` has arrived; takes no lock.
  void read_request(RequestReader& in, Request& req);
  void execute(int fd, Request& req, int* rank, bool* bye);
  void execute_set(int fd, Request& req);
  void execute_get(int fd, const Request& req);
  void execute_add(int fd, Request& req);
  void execute_wait_or_check(int fd, const Request& req);
  void execute_lost(int fd);
  // Bytes that storing `value_bytes` at `key` adds (a replaced value's bytes are given back).
  size_t growth_locked(const std::string& key, size_t value_bytes) const;

  // Sends a reply, allowing the client request_timeout (plus a second per MB) to take it.
  void reply(int fd, const wire::Writer& w) const;
  void reply_error(int fd, const std::string& message) const;

  const TCPStoreServerOptions options_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> warned_refusal_{false};  // the first connection closed for a bad request
  std::atomic<bool> warned_cap_{false};      // the first refusal for max_connections
  bool warned_pending_ = false;              // the first displacement (guarded by conn_mu_)
  std::thread accept_thread_;

  std::mutex conn_mu_;
  std::list<Connection> connections_;

  std::mutex mu_;  // guards data_, stored_bytes_, in_transit_ and lost_
  std::condition_variable cv_;
  std::map<std::string, std::vector<char>> data_;
  size_t stored_bytes_ = 0;  // keys plus values in data_
  // Reserved by requests being read. stored_bytes_ + in_transit_ <= max_stored_bytes always.
  size_t in_transit_ = 0;
  std::set<int> lost_;
};

}  // namespace distributed
}  // namespace dpe
