// TCPStoreServer: accept, parse each request against the limits, answer.
#include "engine/distributed/tcp_store_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {

using namespace wire;  // NOLINT: the protocol's names read best unqualified here

namespace {

using Clock = std::chrono::steady_clock;

// Thrown by the server's parser: the request is malformed; reply with an error and hang up.
struct ProtocolError {
  std::string message;
};
// Thrown by the server's parser: the peer went away mid-request.
struct PeerGone {};
// Thrown by the server's parser: a request's announced bytes would take the store over its cap.
// The reply goes out at once; `unread` bytes the client is still sending are read and dropped
// (so that it gets to read the reply), then the connection is closed.
struct OverCap {
  std::string message;
  size_t unread;
};

// A client may take a second per MB (10^6 bytes) beyond request_timeout to send or take a value.
std::chrono::microseconds transfer_allowance(size_t bytes) {
  return std::chrono::microseconds(static_cast<int64_t>(bytes));
}

enum class Io { kOk, kClosed, kLate };

// Waits until fd is ready for `events` or `deadline` passes (none: as long as it takes).
Io wait_ready(int fd, short events, const std::optional<Clock::time_point>& deadline) {
  while (true) {
    int wait_ms = -1;
    if (deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left.count() <= 0) return Io::kLate;
      wait_ms = static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
    }
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return Io::kClosed;
    if (rc > 0) return Io::kOk;  // readable, writable, hung up or failed: the I/O call tells which
  }
}

// Reads exactly n bytes by `deadline`.
Io recv_by(int fd, void* buf, size_t n, const std::optional<Clock::time_point>& deadline) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const Io ready = wait_ready(fd, POLLIN, deadline);
    if (ready != Io::kOk) return ready;
    const ssize_t k = ::recv(fd, p, n, MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return Io::kClosed;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Io::kOk;
}

// Sends all n bytes by `deadline` (no SIGPIPE).
Io send_by(int fd, const char* p, size_t n, Clock::time_point deadline) {
  while (n > 0) {
    const Io ready = wait_ready(fd, POLLOUT, deadline);
    if (ready != Io::kOk) return ready;
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (k <= 0) return Io::kClosed;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return Io::kOk;
}

std::string handshake_late(std::chrono::milliseconds timeout, bool begun) {
  return std::string(begun ? "first request not completed" : "no request") + " within " +
         std::to_string(timeout.count()) +
         " ms of connecting (TCPStoreServerOptions::handshake_timeout); closing the connection";
}

// Sends an ERROR reply to a connection that is being turned away, before it is closed. Part of a
// request may still be unread: closing over unread data would send a reset that can destroy the
// reply before the client reads it, so our side is shut first and its bytes drained briefly.
void send_refusal(int fd, const std::string& message, std::chrono::milliseconds timeout) {
  Writer w;
  w.u8(kError).str("TCPStore server: " + message);
  send_by(fd, w.buf().data(), w.buf().size(), Clock::now() + timeout);
  ::shutdown(fd, SHUT_WR);
  char sink[4096];
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  while (wait_ready(fd, POLLIN, until) == Io::kOk &&
         ::recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
  }
}

// A message for the server's stderr: it may quote a client's key, so bytes outside printable ASCII
// are written as \xNN (no terminal escape sequences from a stranger).
std::string printable(const std::string& text) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      out += c;
    } else {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

// "127.0.0.1:5678", "[::1]:5678".
std::string address_of(const sockaddr_storage& ss, socklen_t len) {
  char host[NI_MAXHOST] = "?";
  char port[NI_MAXSERV] = "?";
  ::getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), port, sizeof(port),
                NI_NUMERICHOST | NI_NUMERICSERV);
  return ss.ss_family == AF_INET6 ? "[" + std::string(host) + "]:" + port
                                  : std::string(host) + ":" + port;
}

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

// Reads one request's fields from a connection, each length checked against its limit before
// what it claims is read, all of it by one deadline.
class TCPStoreServer::RequestReader {
 public:
  RequestReader(int fd, Clock::time_point first_byte, std::chrono::milliseconds timeout)
      : fd_(fd), deadline_(first_byte + timeout), timeout_(timeout) {}

  // A pending connection's first request must also be whole by its handshake deadline.
  void handshake_by(Clock::time_point deadline, std::chrono::milliseconds timeout) {
    handshake_deadline_ = deadline;
    handshake_timeout_ = timeout;
  }

  void read(void* buf, size_t n) {
    const bool handshake = handshake_deadline_ && *handshake_deadline_ < deadline_;
    switch (recv_by(fd_, buf, n, handshake ? *handshake_deadline_ : deadline_)) {
      case Io::kOk:
        return;
      case Io::kClosed:
        throw PeerGone{};
      case Io::kLate:
        if (handshake) throw ProtocolError{handshake_late(handshake_timeout_, true)};
        throw ProtocolError{
            "request not completed within " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count()) +
            " ms of its first byte (TCPStoreServerOptions::request_timeout, plus a second per MB "
            "of a value); closing the connection"};
    }
  }
  uint32_t u32() {
    unsigned char b[4];
    read(b, 4);
    return decode_u32(b);
  }
  int64_t i64() {
    unsigned char b[8];
    read(b, 8);
    return decode_i64(b);
  }
  // A key, its bytes counted in `reservation` before they are read.
  std::string key(Reservation& reservation) {
    const uint32_t n = u32();
    if (n == 0 || n > kMaxKeyBytes) {
      throw ProtocolError{"key length " + std::to_string(n) + " is outside 1.." +
                          std::to_string(kMaxKeyBytes)};
    }
    reservation.grow(n, "a key of " + std::to_string(n) + " bytes", n);
    std::string key(n, '\0');
    read(key.data(), n);
    return key;
  }
  uint32_t count() {
    const uint32_t n = u32();
    if (n == 0 || n > kMaxKeysPerRequest) {
      throw ProtocolError{"key count " + std::to_string(n) + " is outside 1.." +
                          std::to_string(kMaxKeysPerRequest)};
    }
    return n;
  }
  // Reads and drops n bytes.
  void skip(size_t n) {
    char sink[4096];
    while (n > 0) {
      const size_t k = std::min(n, sizeof(sink));
      read(sink, k);
      n -= k;
    }
  }
  // A value takes longer to arrive: `more` on top of the deadline.
  void allow(std::chrono::microseconds more) {
    deadline_ += more;
    timeout_ += more;
  }

 private:
  int fd_;
  Clock::time_point deadline_;
  std::chrono::microseconds timeout_;
  std::optional<Clock::time_point> handshake_deadline_;
  std::chrono::milliseconds handshake_timeout_{0};
};

TCPStoreServer::TCPStoreServer(const std::string& host, int port, TCPStoreServerOptions options)
    : options_(std::move(options)) {
  DPE_CHECK(options_.max_connections >= 1, "TCPStore: max_connections must be at least 1");
  DPE_CHECK(options_.max_pending_connections >= 1,
            "TCPStore: max_pending_connections must be at least 1");
  DPE_CHECK(options_.token.size() <= kMaxTokenBytes,
            "TCPStore: the token has " << options_.token.size() << " bytes, over the limit of "
                                       << kMaxTokenBytes);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port_text = std::to_string(port);
  const int rc =
      ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res);
  DPE_CHECK(rc == 0,
            "TCPStore: cannot resolve " << host << ":" << port << ": " << gai_strerror(rc));
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  DPE_CHECK(listen_fd_ >= 0,
            "TCPStore: cannot listen on " << host << ":" << port << ": " << last_error);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  port_ = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                   : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  accept_thread_ = std::thread([this] { accept_loop(); });
}

TCPStoreServer::~TCPStoreServer() {
  stop_ = true;
  // shutdown() wakes the blocked accept() and recv() calls; the fds are closed after the joins.
  ::shutdown(listen_fd_, SHUT_RDWR);
  accept_thread_.join();
  ::close(listen_fd_);
  {
    // A connection's fd is closed by its own thread under conn_mu_ (then -1), so this never
    // shuts down an fd that was reused.
    std::lock_guard<std::mutex> lock(conn_mu_);
    for (auto& c : connections_)
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  for (auto& c : connections_) c.thread.join();
}

size_t TCPStoreServer::bytes_in_transit() {
  std::lock_guard<std::mutex> lock(mu_);
  return in_transit_;
}

void TCPStoreServer::Reservation::grow(size_t n, const std::string& what, size_t unread) {
  std::unique_lock<std::mutex> lock(server_->mu_);
  const size_t cap = server_->options_.max_stored_bytes;
  const size_t stored = server_->stored_bytes_;
  const size_t in_transit = server_->in_transit_;
  if (n > cap - stored - in_transit) {  // the invariant stored + in_transit <= cap: no wrap
    lock.unlock();
    throw OverCap{what + " would take the store over its limit of " + std::to_string(cap) +
                      " bytes (it holds " + std::to_string(stored) + " bytes and " +
                      std::to_string(in_transit) +
                      " more are on their way; TCPStoreServerOptions::max_stored_bytes); "
                      "closing the connection",
                  unread};
  }
  server_->in_transit_ += n;
  bytes_ += n;
}

void TCPStoreServer::Reservation::release() {
  if (bytes_ == 0) return;
  std::lock_guard<std::mutex> lock(server_->mu_);
  server_->in_transit_ -= take_locked();
}

size_t TCPStoreServer::live_connections() {
  std::lock_guard<std::mutex> lock(conn_mu_);
  size_t n = 0;
  for (const auto& c : connections_) n += c.done ? 0 : 1;
  return n;
}

void TCPStoreServer::reap_finished() {
  std::list<Connection> finished;
  {
    std::lock_guard<std::mutex> lock(conn_mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      auto next = std::next(it);
      if (it->done) finished.splice(finished.end(), connections_, it);
      it = next;
    }
  }
  // Their threads set `done` as their last step, so these joins return at once.
  for (auto& c : finished) c.thread.join();
}

void TCPStoreServer::accept_loop() {
  bool warned_accept = false;
  while (!stop_) {
    sockaddr_storage addr{};
    socklen_t addr_len = sizeof(addr);
    const int fd =
        ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &addr_len, SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (stop_ || err == EINVAL || err == EBADF || err == ENOTSOCK) return;  // shut down
      if (err == EINTR || err == ECONNABORTED) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM or a network error: give finished connections back, wait
      // a little, and go on accepting, so the ranks that come later can still join.
      if (!warned_accept) {
        std::cerr << "TCPStore server on port " << port_
                  << ": accept failed: " << std::strerror(err) << " (" << live_connections()
                  << " live connections); retrying every 50 ms" << std::endl;
        warned_accept = true;
      }
      reap_finished();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    const std::string peer = address_of(addr, addr_len);
    reap_finished();
    std::unique_lock<std::mutex> lock(conn_mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    size_t pending = 0;
    for (const auto& c : connections_) pending += !c.done && !c.admitted && !c.displaced;
    if (pending >= options_.max_pending_connections) displace_pending_locked();
    Connection c;
    c.fd = fd;
    c.peer = peer;
    connections_.push_back(std::move(c));
    const auto conn = std::prev(connections_.end());
    const auto accepted = Clock::now();
    conn->thread =
        std::thread([this, conn, fd, peer, accepted] { serve(conn, fd, peer, accepted); });
  }
}

void TCPStoreServer::displace_pending_locked() {
  // The oldest pending connection that has sent nothing; failing that (all of them are sending
  // slowly), the oldest pending one.
  std::list<Connection>::iterator oldest = connections_.end();
  std::list<Connection>::iterator oldest_silent = connections_.end();
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->done || it->admitted || it->displaced || it->fd < 0) continue;
    if (oldest == connections_.end()) oldest = it;
    char byte;
    if (!it->spoke && ::recv(it->fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) < 0 &&
        (errno == EAGAIN || errno == EWOULDBLOCK)) {
      oldest_silent = it;
      break;
    }
  }
  const auto victim = oldest_silent != connections_.end() ? oldest_silent : oldest;
  if (victim == connections_.end()) return;
  victim->displaced = true;
  // Its thread's read returns at once; it tells the client why and closes.
  ::shutdown(victim->fd, SHUT_RD);
  if (!warned_pending_) {
    std::cerr << "TCPStore server on port " << port_ << ": " << options_.max_pending_connections
              << " connections have not sent their first request; dropping the oldest idle one "
                 "for each newcomer (TCPStoreServerOptions::max_pending_connections)"
              << std::endl;
    warned_pending_ = true;
  }
}

void TCPStoreServer::admit(std::list<Connection>::iterator conn) {
  std::lock_guard<std::mutex> lock(conn_mu_);
  size_t admitted = 0;
  for (const auto& c : connections_) admitted += !c.done && c.admitted;
  if (admitted >= options_.max_connections) {
    if (!warned_cap_.exchange(true)) {
      std::cerr << "TCPStore server on port " << port_ << ": refusing connections beyond "
                << options_.max_connections << " live ones" << std::endl;
    }
    throw ProtocolError{"too many connections: the store serves at most " +
                        std::to_string(options_.max_connections) +
                        " at once (TCPStoreServerOptions::max_connections)"};
  }
  conn->admitted = true;
}

void TCPStoreServer::serve(std::list<Connection>::iterator conn, int fd, const std::string& peer,
                           Clock::time_point accepted) {
  int rank = -1;
  bool bye = false;
  bool admitted = false;
  const auto handshake_deadline = accepted + options_.handshake_timeout;
  const auto displaced = [&] {
    std::lock_guard<std::mutex> lock(conn_mu_);
    return conn->displaced;
  };
  try {
    while (!stop_ && !bye) {
      // Between requests an admitted connection may be idle as long as it likes.
      uint8_t cmd = 0;
      const Io first =
          recv_by(fd, &cmd, 1, admitted ? std::nullopt : std::optional(handshake_deadline));
      if (first == Io::kLate) {
        throw ProtocolError{handshake_late(options_.handshake_timeout, false)};
      }
      if (first == Io::kClosed) throw PeerGone{};
      RequestReader in(fd, Clock::now(), options_.request_timeout);
      if (!admitted) {
        in.handshake_by(handshake_deadline, options_.handshake_timeout);
        std::lock_guard<std::mutex> lock(conn_mu_);
        conn->spoke = true;
      }
      if (!admitted && !options_.token.empty() && cmd != kAuth) {
        throw ProtocolError{
            "authentication required: this store has a token (DPE_STORE_TOKEN) "
            "and the client's first request was not AUTH"};
      }
      Request req(this, cmd);
      try {
        read_request(in, req);
      } catch (const OverCap& e) {
        req.reservation.release();
        Writer w;
        w.u8(kError).str("TCPStore server: " + e.message);
        if (send_by(fd, w.buf().data(), w.buf().size(), Clock::now() + options_.request_timeout) ==
            Io::kOk) {
          try {
            in.skip(e.unread);
          } catch (const ProtocolError&) {
            // The rest never came: close all the same.
          }
        }
        if (!warned_refusal_.exchange(true)) {
          std::cerr << "TCPStore server on port " << port_ << ": closed the connection from "
                    << peer << ": " << printable(e.message) << " (further ones are not reported)"
                    << std::endl;
        }
        throw PeerGone{};
      }
      if (cmd == kAuth && !options_.token.empty() && !same_token(req.token, options_.token)) {
        throw ProtocolError{req.token.empty()
                                ? "authentication failed: this store requires a token "
                                  "(DPE_STORE_TOKEN) and the client sent none"
                                : "authentication failed: wrong token (DPE_STORE_TOKEN)"};
      }
      if (!admitted) {
        if (displaced()) throw PeerGone{};
        admit(conn);
        admitted = true;
      }
      if (cmd == kAuth) {
        Writer w;
        reply(fd, w.u8(kOk));
        continue;
      }
      execute(fd, req, &rank, &bye);
    }
  } catch (const ProtocolError& e) {
    send_refusal(fd, e.message, options_.request_timeout);
    if (!warned_refusal_.exchange(true)) {
      std::cerr << "TCPStore server on port " << port_ << ": closed the connection from " << peer
                << ": " << printable(e.message) << " (further ones are not reported)" << std::endl;
    }
  } catch (const PeerGone&) {
    if (!admitted && !stop_ && displaced()) {
      send_refusal(fd,
                   "dropped: " + std::to_string(options_.max_pending_connections) +
                       " connections were waiting to send their first request "
                       "(TCPStoreServerOptions::max_pending_connections) and this one had sent "
                       "nothing for the longest",
                   options_.request_timeout);
    }
  }
  if (rank >= 0 && !bye && !stop_) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_.insert(rank);
  }
  // Last step: close under conn_mu_ (the destructor's shutdown() never meets a reused fd), then
  // the accept loop may join this thread and drop the entry.
  std::lock_guard<std::mutex> lock(conn_mu_);
  ::close(fd);
  conn->fd = -1;
  conn->done = true;
}

void TCPStoreServer::read_request(RequestReader& in, Request& req) {
  switch (req.cmd) {
    case kAuth: {
      const uint32_t n = in.u32();
      if (n > kMaxTokenBytes) {
        throw ProtocolError{"token length " + std::to_string(n) + " exceeds the limit of " +
                            std::to_string(kMaxTokenBytes)};
      }
      req.token.resize(n);
      in.read(req.token.data(), n);
      return;
    }
    case kSet: {
      req.key = in.key(req.reservation);
      const uint32_t n = in.u32();
      if (n > kMaxValueBytes) {
        throw ProtocolError{"value of " + std::to_string(n) + " bytes for key '" + req.key +
                            "' exceeds the limit of " + std::to_string(kMaxValueBytes)};
      }
      in.allow(transfer_allowance(n));
      req.reservation.grow(n, "set('" + req.key + "'): a value of " + std::to_string(n) + " bytes",
                           n);
      // Reserved against the cap, the buffer is allocated once at its full size (growing it as
      // bytes arrived left the freed smaller buffers with the allocator: up to twice the value);
      // its pages are written, and so take memory, in chunks as the bytes arrive.
      req.value.reserve(n);
      for (uint32_t got = 0; got < n;) {
        const uint32_t k = std::min(n - got, kValueChunkBytes);
        req.value.resize(size_t{got} + k);
        in.read(req.value.data() + got, k);
        got += k;
      }
      return;
    }
    case kGet:
      req.key = in.key(req.reservation);
      req.timeout_ms = in.u32();
      return;
    case kAdd:
      req.key = in.key(req.reservation);
      req.number = in.i64();
      return;
    case kWait:
    case kCheck: {
      const uint32_t n = in.count();
      for (uint32_t i = 0; i < n; ++i) req.keys.push_back(in.key(req.reservation));
      if (req.cmd == kWait) req.timeout_ms = in.u32();
      return;
    }
    case kHello: {
      req.number = in.i64();
      if (req.number < 0 || req.number > (1 << 24)) {
        throw ProtocolError{"rank " + std::to_string(req.number) + " is invalid"};
      }
      return;
    }
    case kBye:
    case kLost:
      return;
    default:
      throw ProtocolError{"unknown command byte " + std::to_string(req.cmd)};
  }
}

void TCPStoreServer::reply(int fd, const wire::Writer& w) const {
  const auto deadline =
      Clock::now() + options_.request_timeout + transfer_allowance(w.buf().size());
  if (send_by(fd, w.buf().data(), w.buf().size(), deadline) != Io::kOk) throw PeerGone{};
}

void TCPStoreServer::reply_error(int fd, const std::string& message) const {
  Writer w;
  w.u8(kError).str("TCPStore server: " + message);
  send_by(fd, w.buf().data(), w.buf().size(), Clock::now() + options_.request_timeout);
}

size_t TCPStoreServer::growth_locked(const std::string& key, size_t value_bytes) const {
  const auto it = data_.find(key);
  if (it == data_.end()) return key.size() + value_bytes;
  return value_bytes - it->second.size();  // wraps below zero; added to stored_bytes_ it is exact
}

// SET key value. Its bytes were reserved as they were announced, so storing it keeps the store
// within its cap (a replaced value's bytes are given back): the reservation becomes the growth.
void TCPStoreServer::execute_set(int fd, Request& req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_transit_ -= req.reservation.take_locked();
    stored_bytes_ += growth_locked(req.key, req.value.size());
    data_[req.key] = std::move(req.value);
    cv_.notify_all();
  }
  Writer w;
  reply(fd, w.u8(kOk));
}

// GET key, waiting up to the request's timeout for the key to be set.
void TCPStoreServer::execute_get(int fd, const Request& req) {
  Writer w;
  const auto deadline = Clock::now() + std::chrono::milliseconds(req.timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  const bool found = cv_.wait_until(lock, deadline, [&] { return stop_ || data_.count(req.key); });
  if (stop_) throw PeerGone{};
  if (found) {
    const auto& v = data_[req.key];
    w.u8(kOk).bytes(v.data(), v.size());
  } else {
    w.u8(kTimeout);
  }
  lock.unlock();
  reply(fd, w);
}

// ADD key n: the key's integer (0 when absent) plus n, stored as decimal text and returned. A value
// that is not an integer, an overflow or the store's cap is an ERROR reply, and the connection
// stays open (a semantic error, not a malformed message).
void TCPStoreServer::execute_add(int fd, Request& req) {
  Writer w;
  const std::string& key = req.key;
  std::unique_lock<std::mutex> lock(mu_);
  in_transit_ -= req.reservation.take_locked();  // the key is counted by its growth below
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string text(it->second.begin(), it->second.end());
    char* end = nullptr;
    value = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') {
      lock.unlock();
      reply(fd, w.u8(kError).str("TCPStore server: add: key '" + key +
                                 "' holds a value that is not an integer"));
      return;
    }
  }
  if (__builtin_add_overflow(value, req.number, &value)) {  // found by tests/fuzz (signed UB)
    lock.unlock();
    reply(fd, w.u8(kError).str("TCPStore server: add: key '" + key + "' + " +
                               std::to_string(req.number) + " overflows int64"));
    return;
  }
  const std::string text = std::to_string(value);
  const size_t growth = growth_locked(key, text.size());
  const size_t total = stored_bytes_ + growth;
  if (total + in_transit_ > options_.max_stored_bytes && total > stored_bytes_) {
    const size_t stored = stored_bytes_, in_transit = in_transit_;
    lock.unlock();
    reply(fd, w.u8(kError).str("TCPStore server: add('" + key + "'): the store holds " +
                               std::to_string(stored) + " bytes and " + std::to_string(in_transit) +
                               " more are on their way, at its limit of " +
                               std::to_string(options_.max_stored_bytes) +
                               " (TCPStoreServerOptions::max_stored_bytes)"));
    return;
  }
  stored_bytes_ = total;
  data_[key] = std::vector<char>(text.begin(), text.end());
  cv_.notify_all();
  lock.unlock();
  reply(fd, w.u8(kOk).i64(value));
}

// WAIT keys (until all are set or the timeout passes) and CHECK keys (whether all are set now).
void TCPStoreServer::execute_wait_or_check(int fd, const Request& req) {
  Writer w;
  const auto all_present = [&] {
    for (const auto& k : req.keys)
      if (!data_.count(k)) return false;
    return true;
  };
  const auto deadline = Clock::now() + std::chrono::milliseconds(req.timeout_ms);
  std::unique_lock<std::mutex> lock(mu_);
  if (req.cmd == kWait) {
    const bool ok = cv_.wait_until(lock, deadline, [&] { return stop_ || all_present(); });
    if (stop_) throw PeerGone{};
    w.u8(ok ? kOk : kTimeout);
  } else {
    w.u8(kOk).u32(all_present() ? 1 : 0);
  }
  lock.unlock();
  reply(fd, w);
}

// LOST: the ranks (from their HELLO) whose connections closed without BYE, in order.
void TCPStoreServer::execute_lost(int fd) {
  Writer w;
  std::unique_lock<std::mutex> lock(mu_);
  w.u8(kOk).u32(static_cast<uint32_t>(lost_.size()));
  for (int r : lost_) w.i64(r);
  lock.unlock();
  reply(fd, w);
}

void TCPStoreServer::execute(int fd, Request& req, int* rank, bool* bye) {
  Writer w;
  switch (req.cmd) {
    case kSet:
      execute_set(fd, req);
      return;
    case kGet:
      execute_get(fd, req);
      return;
    case kAdd:
      execute_add(fd, req);
      return;
    case kWait:
    case kCheck:
      execute_wait_or_check(fd, req);
      return;
    case kHello:
      *rank = static_cast<int>(req.number);
      reply(fd, w.u8(kOk));
      return;
    case kBye:
      *bye = true;
      reply(fd, w.u8(kOk));
      return;
    case kLost:
      execute_lost(fd);
      return;
    default:
      throw ProtocolError{"unknown command byte " + std::to_string(req.cmd)};
  }
}

}  // namespace distributed
}  // namespace dpe
