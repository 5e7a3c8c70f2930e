// libFuzzer target: the TCPStore server's request parser (TCPStoreServer::handle and its read_*
// helpers, tcp_store_server.cc) on arbitrary bytes. The parser is private and reads from a socket,
// so each input is sent as one client connection to a fresh server on 127.0.0.1 (port 0); the
// harness drains the replies until the server hangs up or goes quiet for 2 ms (a GET/WAIT of an
// absent key blocks until its deadline), resets the connection (the end of the input), then
// destroys the server, which wakes and joins every connection thread. A fresh server per input keeps inputs independent.
// Any crash, ASan/UBSan report, leak or hang (libFuzzer -timeout) is a finding.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <cstdint>
#include <cstdlib>

#include "engine/distributed/tcp_store_server.h"

namespace {

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) std::abort();
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::fprintf(stderr, "tcp_store_fuzz: harness: connect: %s\n", std::strerror(errno));
    std::abort();
  }
  // close() resets the connection: the client speaks first, so its side would otherwise sit in
  // TIME_WAIT for a minute, and at hundreds of inputs a second the ephemeral ports run out.
  const linger reset{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  return fd;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  dpe::distributed::TCPStoreServer server("127.0.0.1", 0);
  const int fd = connect_to(server.port());
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
