// The TCPStore wire format: fields are little-endian whatever the host, lengths prefix bytes,
// timeouts are clamped to what a u32 carries, and the socket helpers report a closed peer.
#include "engine/distributed/tcp_store_wire.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace dpe {
namespace distributed {
namespace wire {
namespace {

std::vector<unsigned char> bytes_of(const Writer& w) {
  return std::vector<unsigned char>(w.buf().begin(), w.buf().end());
}

TEST(TcpStoreWireTest, FieldsAreLittleEndian) {
  Writer w;
  w.u8(kWait).u32(0x01020304u).i64(-2);
  EXPECT_EQ(bytes_of(w), (std::vector<unsigned char>{4, 4, 3, 2, 1, 0xfe, 0xff, 0xff, 0xff, 0xff,
                                                     0xff, 0xff, 0xff}));
  EXPECT_EQ(decode_u32(bytes_of(w).data() + 1), 0x01020304u);
  EXPECT_EQ(decode_i64(bytes_of(w).data() + 5), -2);
}

TEST(TcpStoreWireTest, StringsCarryTheirLength) {
  Writer w;
  w.str("key").bytes("", 0);
  EXPECT_EQ(bytes_of(w), (std::vector<unsigned char>{3, 0, 0, 0, 'k', 'e', 'y', 0, 0, 0, 0}));
}

TEST(TcpStoreWireTest, TimeoutsAreClampedToWhatTheWireCarries) {
  EXPECT_EQ(clamp_ms(std::chrono::milliseconds(-5)), 0u);
  EXPECT_EQ(clamp_ms(std::chrono::milliseconds(1234)), 1234u);
  EXPECT_EQ(clamp_ms(std::chrono::hours(24 * 365)), 0x7fffffffu);
}

TEST(TcpStoreWireTest, SocketHelpersMoveBytesAndReportAClosedPeer) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  const std::string text = "hello";
  ASSERT_TRUE(send_all(fds[0], text.data(), text.size()));
  char got[5];
  ASSERT_TRUE(read_exact(fds[1], got, sizeof(got)));
  EXPECT_EQ(std::string(got, sizeof(got)), text);
  ASSERT_TRUE(send_all(fds[0], "ab", 2));
  ::close(fds[0]);
  char more[3];
  EXPECT_FALSE(read_exact(fds[1], more, sizeof(more)));  // two bytes, then EOF
  EXPECT_FALSE(send_all(fds[1], "x", 1));                // the peer is gone: no SIGPIPE
  ::close(fds[1]);
}

}  // namespace
}  // namespace wire
}  // namespace distributed
}  // namespace dpe
