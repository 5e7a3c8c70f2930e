// libFuzzer target: the TCPStore server's request parser and executor (TCPStoreServer::serve,
// read_request with its RequestReader, execute; tcp_store_server.cc) on arbitrary bytes. The
// parser is private and reads from a socket, so each input is sent as one client connection to a
// fresh server on 127.0.0.1 (port 0), whose cap on stored and in-transit bytes is small enough
// (16 KiB) for an input to reach it (design note "bytes in transit"); the
// harness drains the replies until the server hangs up or goes quiet for 2 ms (a GET/WAIT of an
// absent key blocks until its deadline), resets the connection (the end of the input), then
// destroys the server, which wakes and joins every connection thread. A fresh server per input
// keeps inputs independent. Any crash, ASan/UBSan report, leak or hang (libFuzzer -timeout) is a
// finding.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "engine/core/error.h"
#include "engine/distributed/tcp_store_server.h"

namespace {

// Loopback ports are a resource the machine shares: under another load (a CI machine running other
// jobs, ports held in TIME_WAIT by them) connect() or the server's bind() can fail for a while with
// EADDRNOTAVAIL/EADDRINUSE. That says nothing about the parser, so the harness retries for about
// 2 s, and if the machine still refuses, skips the input with a "harness: skipped" line (which
// build_and_run.sh counts and prints) instead of calling it a finding.
constexpr int kAttempts = 60;

void back_off(int attempt) { ::usleep(static_cast<useconds_t>(1000 * std::min(attempt + 1, 100))); }

// A client socket connected to 127.0.0.1:port, or -1 with errno set.
int try_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    return -1;
  }
  // close() resets the connection: the client speaks first, so its side would otherwise sit in
  // TIME_WAIT for a minute, and at hundreds of inputs a second the ephemeral ports run out.
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  return fd;
}

int connect_to(int port) {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    const int fd = try_connect(port);
    if (fd >= 0) return fd;
    back_off(attempt);
  }
  if (errno == ECONNREFUSED) {
    // The server's constructor returned, so it listens: seconds of refusals are its doing.
    std::fprintf(stderr, "tcp_store_fuzz: harness: connect: %s\n", std::strerror(errno));
    std::abort();
  }
  std::fprintf(stderr, "tcp_store_fuzz: harness: skipped an input: connect: %s\n",
               std::strerror(errno));
  return -1;
}

std::unique_ptr<dpe::distributed::TCPStoreServer> start_server() {
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    try {
      dpe::distributed::TCPStoreServerOptions options;
      options.max_stored_bytes = 16 << 10;
      return std::make_unique<dpe::distributed::TCPStoreServer>("127.0.0.1", 0, options);
    } catch (const dpe::Error& e) {
      if (attempt + 1 == kAttempts) {
        std::fprintf(stderr, "tcp_store_fuzz: harness: skipped an input: server: %s\n", e.what());
      }
    }
    back_off(attempt);
  }
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto server = start_server();
  if (!server) return 0;
  const int fd = connect_to(server->port());
  if (fd < 0) return 0;
  // Send while draining replies, so neither side can block on a full socket buffer.
  size_t sent = 0;
  char buf[65536];
  while (true) {
    pollfd p{fd, static_cast<short>(POLLIN | (sent < size ? POLLOUT : 0)), 0};
    // No shutdown(SHUT_WR): a FIN from this side lets the server's socket end in TIME_WAIT (a
    // minute each), and at ~1,500 inputs a second they use up the ephemeral ports until connect
    // fails. The input ends with the reset close() sends instead, which leaves nothing behind.
    if (sent == size) break;
    if (::poll(&p, 1, 1000) <= 0) break;
    if (p.revents & POLLIN) {
      if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;  // the server hung up early
    }
    if (p.revents & POLLOUT) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    if (p.revents & (POLLERR | POLLHUP)) break;
  }
  while (true) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 2) <= 0) break;
    if (::recv(fd, buf, sizeof(buf), 0) <= 0) break;
  }
  ::close(fd);
  return 0;
}
