// TCPStore client: see the design note "store protocol" in tcp_store.h.
#include "engine/distributed/tcp_store.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#include "engine/core/error.h"
#include "engine/distributed/tcp_store_server.h"
#include "engine/distributed/tcp_store_wire.h"

namespace dpe {
namespace distributed {

using namespace wire;  // NOLINT: the protocol's names read best unqualified here

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

TCPStore::TCPStore(const std::string& host, int port, bool is_server,
                   std::chrono::milliseconds timeout)
    : TCPStore(host, port, is_server, TCPStoreOptions{timeout, std::nullopt, {}, {}}) {}

TCPStore::TCPStore(const std::string& host, int port, bool is_server, TCPStoreOptions options)
    : host_(host),
      port_(port),
      timeout_(options.timeout),
      progress_period_(options.progress_period) {
  DPE_CHECK(port >= 0 && port <= 65535, "TCPStore: port " << port << " is outside 0..65535");
  if (options.token.has_value()) {
    token_ = *options.token;
  } else if (const char* env = std::getenv("DPE_STORE_TOKEN")) {
    token_ = env;
  }
  DPE_CHECK(token_.size() <= kMaxTokenBytes, "TCPStore: the token (DPE_STORE_TOKEN) has "
                                                 << token_.size() << " bytes, over the limit of "
                                                 << kMaxTokenBytes);
  if (is_server) {
    options.server.token = token_;
    server_ = std::make_unique<TCPStoreServer>(host, port, options.server);
    port_ = server_->port();
  } else {
    DPE_CHECK(port != 0, "TCPStore: a client needs the server's port, not 0");
  }
  connect_with_retry();
  try {
    authenticate();
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

void TCPStore::authenticate() {
  Writer w;
  w.u8(kAuth).str(token_);
  std::lock_guard<std::mutex> lock(mu_);
  request(w.buf(), std::chrono::milliseconds(0),
          "joining the store at " + host_ + ":" + std::to_string(port_), nullptr);
}

TCPStore::~TCPStore() {
  try {
    close();
  } catch (...) {
  }
  server_.reset();
}

void TCPStore::connect_with_retry() {
  const auto start = Clock::now();
  const auto deadline = start + timeout_;
  auto next_progress = start + progress_period_;
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
    if (progress_period_.count() > 0 && Clock::now() >= next_progress) {
      const auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      std::cerr << "TCPStore: still waiting for the store at " << host_ << ":" << port_
                << " (rank 0) after " << waited.count() << " s; giving up after "
                << std::chrono::duration_cast<std::chrono::seconds>(timeout_).count()
                << " s (last error: " << last_error << ")" << std::endl;
      next_progress += progress_period_;
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
  std::string names;
  for (const auto& k : keys) names += (names.empty() ? "'" : ", '") + k + "'";
  DPE_CHECK(try_wait(keys, timeout),
            "TCPStore: wait for keys " << names << " timed out after " << timeout.count() << " ms");
}

bool TCPStore::try_wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  if (keys.empty()) return true;
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
  return !timed_out;
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
