// TCPStore: set/get/add/check/wait, timeouts that name the key, refusal of malformed and
// oversized requests (raw sockets) while other clients keep being served, and lost-rank tracking.
#include "engine/distributed/tcp_store.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {
namespace {

using std::chrono::milliseconds;

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }
std::string text(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A raw client for sending what TCPStore never would.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  }
  ~RawClient() { ::close(fd_); }
  void send(const std::vector<unsigned char>& b) {
    ASSERT_EQ(::send(fd_, b.data(), b.size(), MSG_NOSIGNAL), static_cast<ssize_t>(b.size()));
  }
  // Everything the server sends until it closes the connection (or 10 s pass).
  std::string read_until_closed() {
    std::string out;
    char buf[4096];
    while (true) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) break;
      const ssize_t k = ::recv(fd_, buf, sizeof(buf), 0);
      if (k <= 0) break;
      out.append(buf, static_cast<size_t>(k));
    }
    return out;
  }
  void close() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

std::vector<unsigned char> u32(uint32_t v) {
  return {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
          static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
}

std::vector<unsigned char> concat(std::initializer_list<std::vector<unsigned char>> parts) {
  std::vector<unsigned char> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST(TCPStoreTest, SetGetAddCheck) {
  TCPStore server("127.0.0.1", 0, /*is_server=*/true, milliseconds(5000));
  ASSERT_GT(server.port(), 0);
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  client.set("alpha", bytes("one"));
  EXPECT_EQ(text(server.get("alpha")), "one");
  client.set("alpha", bytes(""));
  EXPECT_EQ(text(client.get("alpha")), "");
  EXPECT_EQ(client.add("counter", 2), 2);
  EXPECT_EQ(server.add("counter", -5), -3);
  EXPECT_EQ(text(client.get("counter")), "-3");
  EXPECT_TRUE(client.check({"alpha", "counter"}));
  EXPECT_FALSE(client.check({"alpha", "absent"}));
  // add on a value that is no integer is an error that leaves the connection usable.
  client.set("word", bytes("abc"));
  EXPECT_NE(error_of([&] { client.add("word", 1); }).find("not an integer"), std::string::npos);
  EXPECT_EQ(text(client.get("alpha")), "");
}

TEST(TCPStoreTest, WaitAndGetBlockUntilAnotherClientSets) {
  TCPStore server("127.0.0.1", 0, true, milliseconds(10000));
  TCPStore waiter("127.0.0.1", server.port(), false, milliseconds(10000));
  std::thread setter([&] {
    TCPStore client("127.0.0.1", server.port(), false, milliseconds(10000));
    client.set("a", bytes("1"));
    client.set("b", bytes("2"));
  });
  waiter.wait({"a", "b"});
  EXPECT_EQ(text(waiter.get("b")), "2");
  setter.join();
}

TEST(TCPStoreTest, GetAndWaitTimeOutNamingTheKey) {
  TCPStore server("127.0.0.1", 0, true, milliseconds(150));
  const std::string get_error = error_of([&] { server.get("missing_key"); });
  EXPECT_NE(get_error.find("missing_key"), std::string::npos) << get_error;
  EXPECT_NE(get_error.find("150 ms"), std::string::npos) << get_error;
  const std::string wait_error = error_of([&] { server.wait({"other_key"}, milliseconds(100)); });
  EXPECT_NE(wait_error.find("other_key"), std::string::npos) << wait_error;
  EXPECT_NE(wait_error.find("100 ms"), std::string::npos) << wait_error;
  // The connection still works after a timeout.
  server.set("k", bytes("v"));
  EXPECT_EQ(text(server.get("k")), "v");
}

TEST(TCPStoreTest, ClientGivesUpConnectingAfterItsTimeout) {
  int port = 0;
  {
    TCPStore gone("127.0.0.1", 0, true, milliseconds(1000));
    port = gone.port();
  }
  const std::string error =
      error_of([&] { TCPStore client("127.0.0.1", port, false, milliseconds(200)); });
  EXPECT_NE(error.find("could not connect"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(port)), std::string::npos) << error;
}

// Each malformed request gets an error reply (status byte 2) and a closed connection.
void expect_refused(int port, const std::vector<unsigned char>& request, const std::string& what) {
  RawClient raw(port);
  raw.send(request);
  const std::string reply = raw.read_until_closed();
  ASSERT_FALSE(reply.empty()) << what;
  EXPECT_EQ(reply[0], 2) << what;
  EXPECT_NE(reply.find(what), std::string::npos) << reply;
}

TEST(TCPStoreTest, RefusesMalformedAndOversizedRequestsAndKeepsServing) {
  TCPStore server("127.0.0.1", 0, true, milliseconds(5000));
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  client.set("before", bytes("x"));

  expect_refused(server.port(), {99}, "unknown command byte 99");
  // SET with a key length of 1 GiB: refused from the header alone.
  expect_refused(server.port(), concat({{1}, u32(1u << 30)}), "key length 1073741824");
  expect_refused(server.port(), concat({{1}, u32(0)}), "key length 0");
  // SET with a valid key and a value of 1 GiB that is never sent: refused, nothing allocated.
  expect_refused(server.port(), concat({{1}, u32(1), {'k'}, u32(1u << 30)}), "exceeds the limit");
  // WAIT with a million keys.
  expect_refused(server.port(), concat({{4}, u32(1000000)}), "key count 1000000");
  expect_refused(server.port(), concat({{5}, u32(0)}), "key count 0");

  // A peer that hangs up halfway through a request is simply dropped.
  {
    RawClient raw(server.port());
    raw.send(concat({{1}, u32(5), {'a', 'b'}}));
    raw.close();
  }
  // The well-behaved client was served all along.
  client.set("after", bytes("y"));
  EXPECT_EQ(text(client.get("before")), "x");
  EXPECT_EQ(text(server.get("after")), "y");
  EXPECT_FALSE(client.check({"k"}));
}

TEST(TCPStoreTest, RecordsRanksWhoseConnectionDropsWithoutGoodbye) {
  TCPStore server("127.0.0.1", 0, true, milliseconds(5000));
  {
    TCPStore polite("127.0.0.1", server.port(), false, milliseconds(5000));
    polite.register_rank(1);
  }  // says goodbye
  {
    RawClient raw(server.port());
    raw.send(concat({{6}, u32(4), u32(0)}));  // HELLO rank 4 (i64)
    char status = 0;
    (void)status;
    raw.close();  // dies without goodbye
  }
  std::vector<int> lost;
  for (int i = 0; i < 500 && lost.empty(); ++i) {
    lost = server.lost_ranks();
    if (lost.empty()) std::this_thread::sleep_for(milliseconds(10));
  }
  EXPECT_EQ(lost, std::vector<int>{4});
}

TEST(TCPStoreTest, RefusesOversizedKeysOnTheClientSide) {
  TCPStore server("127.0.0.1", 0, true, milliseconds(5000));
  const std::string long_key(TCPStore::kMaxKeyBytes + 1, 'k');
  EXPECT_NE(error_of([&] { server.set(long_key, bytes("v")); }).find("key length"),
            std::string::npos);
  EXPECT_NE(error_of([&] { server.set("", bytes("v")); }).find("key length 0"), std::string::npos);
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
