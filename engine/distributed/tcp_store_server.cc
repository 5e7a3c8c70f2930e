// TCPStoreServer: accept, parse each request against the limits, answer.
#include "engine/distributed/tcp_store_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

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

}  // namespace

TCPStoreServer::TCPStoreServer(const std::string& host, int port) {
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
    std::lock_guard<std::mutex> lock(conn_mu_);
    for (auto& c : connections_) ::shutdown(c.fd, SHUT_RDWR);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    cv_.notify_all();
  }
  for (auto& c : connections_) {
    c.thread.join();
    ::close(c.fd);
  }
}

void TCPStoreServer::accept_loop() {
  while (!stop_) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    std::lock_guard<std::mutex> lock(conn_mu_);
    if (stop_) {
      ::close(fd);
      return;
    }
    connections_.push_back(Connection{fd, std::thread()});
    connections_.back().thread = std::thread([this, fd] { serve(fd); });
  }
}

void TCPStoreServer::serve(int fd) {
  int rank = -1;
  bool bye = false;
  try {
    while (!stop_ && !bye) {
      uint8_t cmd = 0;
      if (!read_exact(fd, &cmd, 1)) break;
      handle(fd, cmd, &rank, &bye);
    }
  } catch (const ProtocolError& e) {
    reply_error(fd, e.message);
  } catch (const PeerGone&) {
  }
  // The fd stays open until the destructor, so it is never reused while shutdown() may target it.
  ::shutdown(fd, SHUT_RDWR);
  if (rank >= 0 && !bye && !stop_) {
    std::lock_guard<std::mutex> lock(mu_);
    lost_.insert(rank);
  }
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

void TCPStoreServer::handle(int fd, uint8_t cmd, int* rank, bool* bye) {
  Writer w;
  switch (cmd) {
    case kSet: {
      const std::string key = read_key(fd);
      const uint32_t n = read_u32(fd);
      if (n > kMaxValueBytes) {
        throw ProtocolError{"value of " + std::to_string(n) + " bytes for key '" + key +
                            "' exceeds the limit of " + std::to_string(kMaxValueBytes)};
      }
      std::vector<char> value(n);
      if (n > 0 && !read_exact(fd, value.data(), n)) throw PeerGone{};
      {
        std::lock_guard<std::mutex> lock(mu_);
        data_[key] = std::move(value);
        cv_.notify_all();
      }
      reply(fd, w.u8(kOk));
      return;
    }
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
      value += delta;
      const std::string text = std::to_string(value);
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
