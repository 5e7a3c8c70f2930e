// TCPStore client and server: see the design note "store protocol" in tcp_store.h.
#include "engine/distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <map>
#include <set>
#include <thread>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {

namespace {

enum Command : uint8_t {
  kSet = 1,
  kGet = 2,
  kAdd = 3,
  kWait = 4,
  kCheck = 5,
  kHello = 6,
  kBye = 7,
  kLost = 8,
};

enum Status : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

using Clock = std::chrono::steady_clock;

// Encodes fields little-endian, independent of the host's byte order.
class Writer {
 public:
  Writer& u8(uint8_t v) {
    buf_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& i64(int64_t v) {
    const uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) buf_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& bytes(const char* p, size_t n) {
    u32(static_cast<uint32_t>(n));
    buf_.insert(buf_.end(), p, p + n);
    return *this;
  }
  Writer& str(const std::string& s) { return bytes(s.data(), s.size()); }
  const std::vector<char>& buf() const { return buf_; }

 private:
  std::vector<char> buf_;
};

uint32_t decode_u32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

int64_t decode_i64(const unsigned char* p) {
  uint64_t u = 0;
  for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(p[i]) << (8 * i);
  return static_cast<int64_t>(u);
}

uint32_t clamp_ms(std::chrono::milliseconds t) {
  return static_cast<uint32_t>(std::clamp<int64_t>(t.count(), 0, 0x7fffffff));
}

bool send_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Reads exactly n bytes, blocking. False on EOF or error.
bool read_exact(int fd, void* buf, size_t n) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Thrown by the server's parser: the request is malformed; reply with an error and hang up.
struct ProtocolError {
  std::string message;
};
// Thrown by the server's parser: the peer went away mid-request.
struct PeerGone {};

}  // namespace

// ------------------------------------------------------------------------------------------
// Server
// ------------------------------------------------------------------------------------------

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
  static void reply(int fd, const Writer& w);
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
  if (n == 0 || n > TCPStore::kMaxKeyBytes) {
    throw ProtocolError{"key length " + std::to_string(n) + " is outside 1.." +
                        std::to_string(TCPStore::kMaxKeyBytes)};
  }
  std::string key(n, '\0');
  if (!read_exact(fd, key.data(), n)) throw PeerGone{};
  return key;
}

uint32_t TCPStoreServer::read_count(int fd) {
  const uint32_t n = read_u32(fd);
  if (n == 0 || n > TCPStore::kMaxKeysPerRequest) {
    throw ProtocolError{"key count " + std::to_string(n) + " is outside 1.." +
                        std::to_string(TCPStore::kMaxKeysPerRequest)};
  }
  return n;
}

void TCPStoreServer::reply(int fd, const Writer& w) {
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
      if (n > TCPStore::kMaxValueBytes) {
        throw ProtocolError{"value of " + std::to_string(n) + " bytes for key '" + key +
                            "' exceeds the limit of " + std::to_string(TCPStore::kMaxValueBytes)};
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

// ------------------------------------------------------------------------------------------
// Client
// ------------------------------------------------------------------------------------------

TCPStore::TCPStore(const std::string& host, int port, bool is_server,
                   std::chrono::milliseconds timeout)
    : host_(host), port_(port), timeout_(timeout) {
  DPE_CHECK(port >= 0 && port <= 65535, "TCPStore: port " << port << " is outside 0..65535");
  if (is_server) {
    server_ = std::make_unique<TCPStoreServer>(host, port);
    port_ = server_->port();
  } else {
    DPE_CHECK(port != 0, "TCPStore: a client needs the server's port, not 0");
  }
  connect_with_retry();
}

TCPStore::~TCPStore() {
  try {
    close();
  } catch (...) {
  }
  server_.reset();
}

void TCPStore::connect_with_retry() {
  const auto deadline = Clock::now() + timeout_;
  std::string last_error;
  auto backoff = std::chrono::milliseconds(10);
  while (true) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port_text = std::to_string(port_);
    const int rc = ::getaddrinfo(host_.c_str(), port_text.c_str(), &hints, &res);
    if (rc != 0) {
      last_error = gai_strerror(rc);
    } else {
      for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
        const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) continue;
        if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
          const int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          fd_ = fd;
          break;
        }
        last_error = std::strerror(errno);
        ::close(fd);
      }
      ::freeaddrinfo(res);
    }
    if (fd_ >= 0) return;
    if (Clock::now() + backoff > deadline) {
      DPE_THROW("TCPStore: could not connect to the store at "
                << host_ << ":" << port_ << " within " << timeout_.count() << " ms (last error: "
                << last_error << "); is rank 0 running and MASTER_ADDR/MASTER_PORT right?");
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
}

namespace {

// Client-side read with a deadline, so a silent server cannot hang the caller.
void client_read(int fd, void* buf, size_t n, Clock::time_point deadline, const std::string& host,
                 int port, const std::string& what) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    DPE_CHECK(left > 0,
              "TCPStore: no reply from the store at " << host << ":" << port << " to " << what);
    pollfd pfd{fd, POLLIN, 0};
    const int rc = ::poll(&pfd, 1, static_cast<int>(std::min<int64_t>(left, 1 << 30)));
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) continue;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    DPE_CHECK(k > 0, "TCPStore: lost connection to the store server at "
                         << host << ":" << port << " (rank 0) during " << what);
    p += k;
    n -= static_cast<size_t>(k);
  }
}

}  // namespace

// Sends `msg` and reads the reply's status and payload. Returns the payload of an OK reply;
// sets *timed_out for a TIMEOUT reply; throws the server's message for an ERROR reply.
std::vector<char> TCPStore::request(const std::vector<char>& msg,
                                    std::chrono::milliseconds reply_within, const std::string& what,
                                    bool* timed_out) {
  DPE_CHECK(fd_ >= 0, "TCPStore: " << what << " after close()");
  DPE_CHECK(send_all(fd_, msg.data(), msg.size()),
            "TCPStore: lost connection to the store server at " << host_ << ":" << port_
                                                                << " (rank 0) during " << what);
  // The server answers blocking requests itself when their timeout ends; the margin covers a
  // busy machine.
  const auto deadline = Clock::now() + reply_within + std::chrono::seconds(10);
  uint8_t status = 0;
  client_read(fd_, &status, 1, deadline, host_, port_, what);
  if (timed_out != nullptr) *timed_out = status == kTimeout;
  const uint8_t cmd = static_cast<uint8_t>(msg[0]);
  if (status == kTimeout) return {};
  unsigned char len_bytes[4];
  if (status == kError) {
    client_read(fd_, len_bytes, 4, deadline, host_, port_, what);
    std::string text(std::min<uint32_t>(decode_u32(len_bytes), 1 << 16), '\0');
    client_read(fd_, text.data(), text.size(), deadline, host_, port_, what);
    DPE_THROW("TCPStore: " << what << " failed: " << text);
  }
  DPE_CHECK(status == kOk, "TCPStore: malformed reply (status " << int(status) << ") to " << what);
  std::vector<char> payload;
  if (cmd == kGet) {
    client_read(fd_, len_bytes, 4, deadline, host_, port_, what);
    const uint32_t n = decode_u32(len_bytes);
    DPE_CHECK(n <= kMaxValueBytes, "TCPStore: reply of " << n << " bytes to " << what);
    payload.resize(n);
    client_read(fd_, payload.data(), n, deadline, host_, port_, what);
  } else if (cmd == kAdd) {
    payload.resize(8);
    client_read(fd_, payload.data(), 8, deadline, host_, port_, what);
  } else if (cmd == kCheck) {
    payload.resize(4);
    client_read(fd_, payload.data(), 4, deadline, host_, port_, what);
  } else if (cmd == kLost) {
    client_read(fd_, len_bytes, 4, deadline, host_, port_, what);
    const uint32_t n = decode_u32(len_bytes);
    DPE_CHECK(n <= (1u << 24), "TCPStore: malformed reply to " << what);
    payload.resize(size_t{n} * 8);
    client_read(fd_, payload.data(), payload.size(), deadline, host_, port_, what);
  }
  return payload;
}

void TCPStore::set(const std::string& key, const std::vector<char>& value) {
  DPE_CHECK(!key.empty() && key.size() <= kMaxKeyBytes,
            "TCPStore: set: key length " << key.size() << " is outside 1.." << kMaxKeyBytes);
  DPE_CHECK(value.size() <= kMaxValueBytes, "TCPStore: set: value of "
                                                << value.size() << " bytes for key '" << key
                                                << "' exceeds the limit of " << kMaxValueBytes);
  Writer w;
  w.u8(kSet).str(key).bytes(value.data(), value.size());
  std::lock_guard<std::mutex> lock(mu_);
  request(w.buf(), std::chrono::milliseconds(0), "set('" + key + "')", nullptr);
}

std::vector<char> TCPStore::get(const std::string& key) { return get(key, timeout_); }

std::vector<char> TCPStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  DPE_CHECK(!key.empty() && key.size() <= kMaxKeyBytes,
            "TCPStore: get: key length " << key.size() << " is outside 1.." << kMaxKeyBytes);
  Writer w;
  w.u8(kGet).str(key).u32(clamp_ms(timeout));
  bool timed_out = false;
  std::lock_guard<std::mutex> lock(mu_);
  auto value = request(w.buf(), timeout, "get('" + key + "')", &timed_out);
  DPE_CHECK(!timed_out, "TCPStore: get('" << key << "') timed out after " << timeout.count()
                                          << " ms: no rank has set the key");
  return value;
}

void TCPStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TCPStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  if (keys.empty()) return;
  DPE_CHECK(keys.size() <= kMaxKeysPerRequest,
            "TCPStore: wait: " << keys.size() << " keys exceed " << kMaxKeysPerRequest);
  Writer w;
  w.u8(kWait).u32(static_cast<uint32_t>(keys.size()));
  std::string names;
  for (const auto& k : keys) {
    DPE_CHECK(!k.empty() && k.size() <= kMaxKeyBytes,
              "TCPStore: wait: key length " << k.size() << " is outside 1.." << kMaxKeyBytes);
    w.str(k);
    names += (names.empty() ? "'" : ", '") + k + "'";
  }
  w.u32(clamp_ms(timeout));
  bool timed_out = false;
  std::lock_guard<std::mutex> lock(mu_);
  request(w.buf(), timeout, "wait(" + names + ")", &timed_out);
  DPE_CHECK(!timed_out,
            "TCPStore: wait for keys " << names << " timed out after " << timeout.count() << " ms");
}

int64_t TCPStore::add(const std::string& key, int64_t delta) {
  DPE_CHECK(!key.empty() && key.size() <= kMaxKeyBytes,
            "TCPStore: add: key length " << key.size() << " is outside 1.." << kMaxKeyBytes);
  Writer w;
  w.u8(kAdd).str(key).i64(delta);
  std::lock_guard<std::mutex> lock(mu_);
  const auto payload =
      request(w.buf(), std::chrono::milliseconds(0), "add('" + key + "')", nullptr);
  return decode_i64(reinterpret_cast<const unsigned char*>(payload.data()));
}

bool TCPStore::check(const std::vector<std::string>& keys) {
  if (keys.empty()) return true;
  DPE_CHECK(keys.size() <= kMaxKeysPerRequest,
            "TCPStore: check: " << keys.size() << " keys exceed " << kMaxKeysPerRequest);
  Writer w;
  w.u8(kCheck).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    DPE_CHECK(!k.empty() && k.size() <= kMaxKeyBytes,
              "TCPStore: check: key length " << k.size() << " is outside 1.." << kMaxKeyBytes);
    w.str(k);
  }
  std::lock_guard<std::mutex> lock(mu_);
  const auto payload = request(w.buf(), std::chrono::milliseconds(0), "check", nullptr);
  return decode_u32(reinterpret_cast<const unsigned char*>(payload.data())) != 0;
}

void TCPStore::register_rank(int rank) {
  Writer w;
  w.u8(kHello).i64(rank);
  std::lock_guard<std::mutex> lock(mu_);
  request(w.buf(), std::chrono::milliseconds(0), "register_rank(" + std::to_string(rank) + ")",
          nullptr);
}

std::vector<int> TCPStore::lost_ranks() {
  Writer w;
  w.u8(kLost);
  std::lock_guard<std::mutex> lock(mu_);
  const auto payload = request(w.buf(), std::chrono::milliseconds(0), "lost_ranks", nullptr);
  std::vector<int> ranks;
  for (size_t i = 0; i + 8 <= payload.size(); i += 8) {
    ranks.push_back(
        static_cast<int>(decode_i64(reinterpret_cast<const unsigned char*>(payload.data() + i))));
  }
  return ranks;
}

void TCPStore::close() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  Writer w;
  w.u8(kBye);
  try {
    request(w.buf(), std::chrono::milliseconds(0), "close", nullptr);
  } catch (const Error&) {
    // The server is gone already; nothing to say goodbye to.
  }
  ::close(fd_);
  fd_ = -1;
}

}  // namespace distributed
}  // namespace dpe
