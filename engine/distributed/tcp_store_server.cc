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

// Compares without an early exit, so the time taken does not tell how much of a guess was right.
bool same_token(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// Sends an ERROR reply to a connection that is being turned away, then closes it. The client's
// first request may still be unread: closing over unread data would send a reset that can destroy
// the reply before the client reads it, so our side is shut first and its bytes drained briefly.
void refuse(int fd, const std::string& message) {
  Writer w;
  w.u8(kError).str("TCPStore server: " + message);
  send_all(fd, w.buf().data(), w.buf().size());
  ::shutdown(fd, SHUT_WR);
  pollfd p{fd, POLLIN, 0};
  char sink[4096];
  if (::poll(&p, 1, 100) > 0) (void)::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
  ::close(fd);
}

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port, TCPStoreServerOptions options)
    : options_(std::move(options)) {
  DPE_CHECK(options_.max_connections >= 1, "TCPStore: max_connections must be at least 1");
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
  bool warned_cap = false;
  while (!stop_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      if (stop_ || err == EINVAL || err == EBADF || err == ENOTSOCK) return;  // shut down
      if (err == EINTR || err == ECONNABORTED) continue;
      // EMFILE, ENFILE, ENOBUFS, ENOMEM or a network error: give finished connections back, wait
      // a little, and go on accepting, so the ranks that come later can still join.
      if (!warned_accept) {
        std::cerr << "TCPStore server on port " << port_ << ": accept failed: "
                  << std::strerror(err) << " (" << live_connections()
                  << " live connections); retrying every 50 ms" << std::endl;
        warned_accept = true;
      }
      reap_finished();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    reap_finished();
    std::unique_lock<std::mutex> lock(conn_mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    size_t live = 0;
    for (const auto& c : connections_) live += c.done ? 0 : 1;
    if (live >= options_.max_connections) {
      lock.unlock();
      if (!warned_cap) {
        std::cerr << "TCPStore server on port " << port_ << ": refusing connections beyond "
                  << options_.max_connections << " live ones" << std::endl;
        warned_cap = true;
      }
      refuse(fd, "too many connections: the store serves at most " +
                     std::to_string(options_.max_connections) +
                     " at once (TCPStoreServerOptions::max_connections)");
      continue;
    }
    connections_.push_back(Connection{fd, false, std::thread()});
    const auto conn = std::prev(connections_.end());
    conn->thread = std::thread([this, conn, fd] { serve(conn, fd); });
  }
}

void TCPStoreServer::serve(std::list<Connection>::iterator conn, int fd) {
  int rank = -1;
  bool bye = false;
  bool authenticated = options_.token.empty();
  try {
    while (!stop_ && !bye) {
      uint8_t cmd = 0;
      if (!read_exact(fd, &cmd, 1)) break;
      if (cmd == kAuth) {
        const uint32_t n = read_u32(fd);
        if (n > kMaxTokenBytes) {
          throw ProtocolError{"token length " + std::to_string(n) + " exceeds the limit of " +
                              std::to_string(kMaxTokenBytes)};
        }
        std::string token(n, '\0');
        if (n > 0 && !read_exact(fd, token.data(), n)) throw PeerGone{};
        if (!options_.token.empty() && !same_token(token, options_.token)) {
          throw ProtocolError{token.empty()
                                  ? "authentication failed: this store requires a token "
                                    "(DPE_STORE_TOKEN) and the client sent none"
                                  : "authentication failed: wrong token (DPE_STORE_TOKEN)"};
        }
        authenticated = true;
        Writer w;
        reply(fd, w.u8(kOk));
        continue;
      }
      if (!authenticated) {
        throw ProtocolError{"authentication required: this store has a token (DPE_STORE_TOKEN) "
                            "and the client's first request was not AUTH"};
      }
      handle(fd, cmd, &rank, &bye);
    }
  } catch (const ProtocolError& e) {
    reply_error(fd, e.message);
  } catch (const PeerGone&) {
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

uint32_t TCPStoreServer::read_u32(int fd) {
  unsigned char b[4];
  if (!read_exact(fd, b, 4)) throw PeerGone{};
  return decode_u32(b);
}

int64_t TCPStoreServer::read_i64(int fd) {
  unsigned char b[8];
  if (!read_exact(fd, b, 8)) throw PeerGone{};
  return decode_i64(b);
}

std::string TCPStoreServer::read_key(int fd) {
  const uint32_t n = read_u32(fd);
  if (n == 0 || n > kMaxKeyBytes) {
    throw ProtocolError{"key length " + std::to_string(n) + " is outside 1.." +
                        std::to_string(kMaxKeyBytes)};
  }
  std::string key(n, '\0');
  if (!read_exact(fd, key.data(), n)) throw PeerGone{};
  return key;
}

uint32_t TCPStoreServer::read_count(int fd) {
  const uint32_t n = read_u32(fd);
  if (n == 0 || n > kMaxKeysPerRequest) {
    throw ProtocolError{"key count " + std::to_string(n) + " is outside 1.." +
                        std::to_string(kMaxKeysPerRequest)};
  }
  return n;
}

void TCPStoreServer::reply(int fd, const wire::Writer& w) {
  if (!send_all(fd, w.buf().data(), w.buf().size())) throw PeerGone{};
}

void TCPStoreServer::reply_error(int fd, const std::string& message) {
  Writer w;
  w.u8(kError).str("TCPStore server: " + message);
  send_all(fd, w.buf().data(), w.buf().size());
}

size_t TCPStoreServer::growth_locked(const std::string& key, size_t value_bytes) const {
  const auto it = data_.find(key);
  if (it == data_.end()) return key.size() + value_bytes;
  return value_bytes - it->second.size();  // wraps below zero; added to stored_bytes_ it is exact
}

// SET key value: the value is read in chunks as it arrives, so an announced length costs nothing
// until its bytes come. A value that would take the store over max_stored_bytes is read and
// dropped, and answered with an ERROR; the connection stays usable.
void TCPStoreServer::handle_set(int fd) {
  const std::string key = read_key(fd);
  const uint32_t n = read_u32(fd);
  if (n > kMaxValueBytes) {
    throw ProtocolError{"value of " + std::to_string(n) + " bytes for key '" + key +
                        "' exceeds the limit of " + std::to_string(kMaxValueBytes)};
  }
  const auto over_limit = [&] {
    const size_t total = stored_bytes_ + growth_locked(key, n);
    return total > options_.max_stored_bytes && total > stored_bytes_;
  };
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    keep = !over_limit();
  }
  std::vector<char> value;
  std::vector<char> discard;
  for (uint32_t got = 0; got < n;) {
    const uint32_t k = std::min(n - got, kValueChunkBytes);
    char* dst = nullptr;
    if (keep) {
      value.resize(size_t{got} + k);
      dst = value.data() + got;
    } else {
      discard.resize(kValueChunkBytes);
      dst = discard.data();
    }
    if (!read_exact(fd, dst, k)) throw PeerGone{};
    got += k;
  }
  Writer w;
  std::unique_lock<std::mutex> lock(mu_);
  if (keep && !over_limit()) {
    stored_bytes_ += growth_locked(key, n);
    data_[key] = std::move(value);
    cv_.notify_all();
    lock.unlock();
    reply(fd, w.u8(kOk));
    return;
  }
  const size_t stored = stored_bytes_;
  lock.unlock();
  reply(fd, w.u8(kError).str("TCPStore server: set('" + key + "'): " + std::to_string(n) +
                             " more bytes would take the store over its limit of " +
                             std::to_string(options_.max_stored_bytes) + " bytes (it holds " +
                             std::to_string(stored) +
                             "; TCPStoreServerOptions::max_stored_bytes)"));
}

void TCPStoreServer::handle(int fd, uint8_t cmd, int* rank, bool* bye) {
  Writer w;
  switch (cmd) {
    case kSet:
      handle_set(fd);
      return;
    case kGet: {
      const std::string key = read_key(fd);
      const auto deadline = Clock::now() + std::chrono::milliseconds(read_u32(fd));
      std::unique_lock<std::mutex> lock(mu_);
      const bool found = cv_.wait_until(lock, deadline, [&] { return stop_ || data_.count(key); });
      if (stop_) throw PeerGone{};
      if (found) {
        const auto& v = data_[key];
        w.u8(kOk).bytes(v.data(), v.size());
      } else {
        w.u8(kTimeout);
      }
      lock.unlock();
      reply(fd, w);
      return;
    }
    case kAdd: {
      const std::string key = read_key(fd);
      const int64_t delta = read_i64(fd);
      std::unique_lock<std::mutex> lock(mu_);
      int64_t value = 0;
      auto it = data_.find(key);
      if (it != data_.end()) {
        const std::string text(it->second.begin(), it->second.end());
        char* end = nullptr;
        value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0') {
          lock.unlock();
          // A semantic error, not a malformed message: the connection stays open.
          reply(fd, w.u8(kError).str("TCPStore server: add: key '" + key +
                                     "' holds a value that is not an integer"));
          return;
        }
      }
      if (__builtin_add_overflow(value, delta, &value)) {  // found by tests/fuzz (signed UB)
        lock.unlock();
        reply(fd, w.u8(kError).str("TCPStore server: add: key '" + key + "' + " +
                                   std::to_string(delta) + " overflows int64"));
        return;
      }
      const std::string text = std::to_string(value);
      const size_t total = stored_bytes_ + growth_locked(key, text.size());
      if (total > options_.max_stored_bytes && total > stored_bytes_) {
        lock.unlock();
        reply(fd, w.u8(kError).str("TCPStore server: add('" + key + "'): the store holds " +
                                   std::to_string(stored_bytes_) + " bytes, at its limit of " +
                                   std::to_string(options_.max_stored_bytes) +
                                   " (TCPStoreServerOptions::max_stored_bytes)"));
        return;
      }
      stored_bytes_ = total;
      data_[key] = std::vector<char>(text.begin(), text.end());
      cv_.notify_all();
      lock.unlock();
      reply(fd, w.u8(kOk).i64(value));
      return;
    }
    case kWait:
    case kCheck: {
      const uint32_t n = read_count(fd);
      std::vector<std::string> keys;
      for (uint32_t i = 0; i < n; ++i) keys.push_back(read_key(fd));
      const auto all_present = [&] {
        for (const auto& k : keys)
          if (!data_.count(k)) return false;
        return true;
      };
      std::unique_lock<std::mutex> lock(mu_);
      bool ok = false;
      if (cmd == kWait) {
        const auto deadline = Clock::now() + std::chrono::milliseconds(read_u32(fd));
        ok = cv_.wait_until(lock, deadline, [&] { return stop_ || all_present(); });
        if (stop_) throw PeerGone{};
        w.u8(ok ? kOk : kTimeout);
      } else {
        w.u8(kOk).u32(all_present() ? 1 : 0);
      }
      lock.unlock();
      reply(fd, w);
      return;
    }
    case kHello: {
      const int64_t r = read_i64(fd);
      if (r < 0 || r > (1 << 24)) throw ProtocolError{"rank " + std::to_string(r) + " is invalid"};
      *rank = static_cast<int>(r);
      reply(fd, w.u8(kOk));
      return;
    }
    case kBye:
      *bye = true;
      reply(fd, w.u8(kOk));
      return;
    case kLost: {
      std::unique_lock<std::mutex> lock(mu_);
      w.u8(kOk).u32(static_cast<uint32_t>(lost_.size()));
      for (int r : lost_) w.i64(r);
      lock.unlock();
      reply(fd, w);
      return;
    }
    default:
      throw ProtocolError{"unknown command byte " + std::to_string(cmd)};
  }
}

}  // namespace distributed
}  // namespace dpe
