// delay_bridge: joins two network interfaces at layer 2 and holds every frame a fixed time before
// passing it on, in both directions: a link with latency on kernels without netem, for the
// two-node test. Frames keep their order; each socket reads with PACKET_VNET_HDR, so TCP's
// segmentation-offloaded frames and partial checksums pass through as the kernel made them.
//   delay_bridge IFACE_A IFACE_B DELAY_MS      (runs until SIGTERM or SIGINT)
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

// A raw socket on `iface` that sees every frame on it (promiscuous) and not its own sends.
int open_port(const char* iface) {
  const int fd = ::socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (fd < 0) return -1;
  const int one = 1;
  if (::setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) != 0) return -1;
  ::setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
  sockaddr_ll addr{};
  addr.sll_family = AF_PACKET;
  addr.sll_protocol = htons(ETH_P_ALL);
  addr.sll_ifindex = static_cast<int>(::if_nametoindex(iface));
  if (addr.sll_ifindex == 0) return -1;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return -1;
  packet_mreq mr{};
  mr.mr_ifindex = addr.sll_ifindex;
  mr.mr_type = PACKET_MR_PROMISC;
  if (::setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) != 0) return -1;
  return fd;
}

struct Frame {
  Clock::time_point due;
  std::vector<char> bytes;  // virtio_net_hdr + the Ethernet frame
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: delay_bridge IFACE_A IFACE_B DELAY_MS\n");
    return 2;
  }
  const auto delay = std::chrono::microseconds(static_cast<int64_t>(std::atof(argv[3]) * 1000));
  int fds[2] = {open_port(argv[1]), open_port(argv[2])};
  for (int i = 0; i < 2; ++i) {
    if (fds[i] < 0) {
      std::fprintf(stderr, "delay_bridge: cannot open %s: %s\n", argv[1 + i], std::strerror(errno));
      return 1;
    }
  }
  std::signal(SIGTERM, on_signal);
  std::signal(SIGINT, on_signal);
  std::deque<Frame> queued[2];  // queued[i]: read from port i, to be written to the other
  std::vector<char> buf(1 << 17);
  while (!g_stop) {
    const Clock::time_point now = Clock::now();
    for (int i = 0; i < 2; ++i) {
      while (!queued[i].empty() && queued[i].front().due <= now) {
        const std::vector<char>& b = queued[i].front().bytes;
        // A frame the other side cannot take (its link down) is dropped, as a cable drops it.
        (void)::send(fds[1 - i], b.data(), b.size(), MSG_DONTWAIT);
        queued[i].pop_front();
      }
    }
    int timeout_ms = 50;
    for (int i = 0; i < 2; ++i) {
      if (queued[i].empty()) continue;
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(
          queued[i].front().due - now);
      timeout_ms = std::min(timeout_ms, static_cast<int>(std::max<int64_t>(wait.count(), 0)));
    }
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    if (::poll(p, 2, timeout_ms) < 0) {
      if (errno == EINTR) continue;
      std::perror("delay_bridge: poll");
      return 1;
    }
    for (int i = 0; i < 2; ++i) {
      if (!(p[i].revents & POLLIN)) continue;
      const ssize_t n = ::recv(fds[i], buf.data(), buf.size(), MSG_DONTWAIT);
      if (n <= 0) continue;
      queued[i].push_back({Clock::now() + delay, std::vector<char>(buf.begin(), buf.begin() + n)});
    }
  }
  return 0;
}
