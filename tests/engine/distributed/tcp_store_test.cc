// TCPStore: set/get/add/check/wait, timeouts that name the key, refusal of malformed and
// oversized requests (raw sockets) while other clients keep being served, lost-rank tracking, and
// the server's defences: reaping, accepting after EMFILE, the caps, chunked values, the token.
#include "engine/distributed/tcp_store.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/tcp_store_server.h"

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
  // Reads until the server closes the connection; false if it is still open at `deadline`.
  bool closed_by(std::chrono::steady_clock::time_point deadline, std::string* out) {
    return read_by(deadline, out, "");
  }
  // Reads until `text` is among what came, or the server closes the connection (true), or until
  // `deadline` (false).
  bool read_by(std::chrono::steady_clock::time_point deadline, std::string* out,
               const std::string& text) {
    char buf[4096];
    while (text.empty() || out->find(text) == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      const ssize_t k = ::recv(fd_, buf, sizeof(buf), 0);
      if (k <= 0) return true;
      out->append(buf, static_cast<size_t>(k));
    }
    return true;
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
  // An add past int64 is an error, not signed overflow, and changes nothing.
  EXPECT_EQ(client.add("big", INT64_MAX), INT64_MAX);
  EXPECT_NE(error_of([&] { client.add("big", 1); }).find("overflows int64"), std::string::npos);
  EXPECT_EQ(client.add("big", 0), INT64_MAX);
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

// --- The server's defences against hostile clients ---

int count_fds() {
  int n = 0;
  DIR* d = ::opendir("/proc/self/fd");
  while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n - 1;  // the directory's own fd
}

// A field of /proc/self/status ("Threads", "VmRSS" in kB).
long status_field(const std::string& name) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) == 0) return std::stol(line.substr(name.size() + 1));
  }
  return -1;
}

bool eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 1000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return cond();
}

// 2000 connect/close cycles (half polite, half dying without goodbye) leave no fds or threads
// behind: finished connections are closed and joined (it took 30 to 2030 fds).
TEST(TCPStoreServerTest, ReapsFinishedConnections) {
  TCPStoreServer server("127.0.0.1", 0);
  { TCPStore warm("127.0.0.1", server.port(), false, milliseconds(5000)); }
  ASSERT_TRUE(eventually([&] { return server.live_connections() == 0; }));
  const int fds = count_fds();
  const long threads = status_field("Threads");
  for (int i = 0; i < 2000; ++i) {
    if (i % 2 == 0) {
      TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
    } else {
      RawClient raw(server.port());
      raw.send(concat({{5}, u32(1), u32(1), {'k'}}));  // CHECK 'k', then hang up
    }
  }
  ASSERT_TRUE(eventually([&] { return server.live_connections() == 0; }));
  // The last connection is reaped when the next is accepted; one more cycle does that.
  { TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000)); }
  ASSERT_TRUE(eventually([&] { return server.live_connections() == 0; }));
  // A joined thread leaves /proc at once, one that has set `done` only once it exits: the last
  // connection's thread (not joined until the next accept) may still be exiting, and under TSan
  // exiting takes a while.
  EXPECT_TRUE(eventually([&] { return count_fds() <= fds + 1; })) << count_fds() << " > " << fds;
  EXPECT_TRUE(eventually([&] { return status_field("Threads") <= threads + 1; }))
      << status_field("Threads") << " threads, " << threads << " before";
}

// When accept() fails with EMFILE the server backs off and accepts again once fds are free, so
// ranks can still join after the shortage.
TEST(TCPStoreServerTest, KeepsAcceptingAfterRunningOutOfFds) {
  TCPStoreServer server("127.0.0.1", 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, static_cast<rlim_t>(count_fds() + 16));
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> fillers;
  for (int f; (f = ::dup(fd)) >= 0;) fillers.push_back(f);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server.port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int connected = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  std::this_thread::sleep_for(milliseconds(300));  // the server's accept() meets EMFILE
  for (int f : fillers) ::close(f);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &old), 0);
  ASSERT_EQ(connected, 0) << std::strerror(errno);
  const auto check = concat({{5}, u32(1), u32(1), {'k'}});
  ASSERT_EQ(::send(fd, check.data(), check.size(), MSG_NOSIGNAL), ssize_t(check.size()));
  unsigned char reply[5] = {9, 9, 9, 9, 9};
  size_t got = 0;
  while (got < sizeof(reply)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    const ssize_t k = ::recv(fd, reply + got, sizeof(reply) - got, 0);
    if (k <= 0) break;
    got += static_cast<size_t>(k);
  }
  ::close(fd);
  ASSERT_EQ(got, sizeof(reply)) << "the connection made while fds ran out was never served";
  EXPECT_EQ(reply[0], 0);  // OK, key absent
  TCPStore later("127.0.0.1", server.port(), false, milliseconds(5000));
  EXPECT_FALSE(later.check({"k"}));
}

// Beyond max_connections a client is told why and turned away; the others are served, and a slot
// freed by a closed connection is given to the next client.
TEST(TCPStoreServerTest, RefusesConnectionsBeyondTheCap) {
  TCPStoreServerOptions options;
  options.max_connections = 2;
  TCPStoreServer server("127.0.0.1", 0, options);
  auto a = std::make_unique<TCPStore>("127.0.0.1", server.port(), false, milliseconds(5000));
  TCPStore b("127.0.0.1", server.port(), false, milliseconds(5000));
  const std::string error =
      error_of([&] { TCPStore c("127.0.0.1", server.port(), false, milliseconds(5000)); });
  EXPECT_NE(error.find("too many connections"), std::string::npos) << error;
  EXPECT_NE(error.find("at most 2"), std::string::npos) << error;
  EXPECT_NE(error.find(std::to_string(server.port())), std::string::npos) << error;
  b.set("k", bytes("v"));
  a.reset();
  ASSERT_TRUE(eventually([&] { return server.live_connections() == 1; }));
  TCPStore d("127.0.0.1", server.port(), false, milliseconds(5000));
  EXPECT_EQ(text(d.get("k")), "v");
}

// A SET announcing 64 MiB that never sends them costs no memory (a value's bytes are written into
// memory as they arrive), and a large value sent in pieces arrives whole.
TEST(TCPStoreServerTest, ValuesAreReadAsTheyArriveNotAllocatedFromTheirLength) {
  TCPStoreServer server("127.0.0.1", 0);
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  const long rss_before = status_field("VmRSS");
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 8; ++i) {
    idle.push_back(std::make_unique<RawClient>(server.port()));
    idle.back()->send(concat({{1}, u32(2), {'k', static_cast<unsigned char>('0' + i)},
                              u32(TCPStore::kMaxValueBytes)}));
  }
  client.set("probe", bytes("p"));  // served meanwhile
  std::this_thread::sleep_for(milliseconds(300));
  const long grown_kb = status_field("VmRSS") - rss_before;
  EXPECT_LT(grown_kb, 32 * 1024) << "kB grown for 8 announced 64 MiB values with no data";
  idle.clear();
  std::vector<char> big((3u << 20) + 7);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  client.set("big", big);
  EXPECT_EQ(client.get("big"), big);
  EXPECT_FALSE(client.check({"k0"}));
}

// A value being received takes about its received bytes of memory: its buffer is allocated once,
// not grown (which left the smaller buffers it outgrew with the allocator, up to twice the value).
TEST(TCPStoreServerTest, AValueBeingReceivedTakesAboutItsBytes) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "a sanitizer's shadow memory counts in VmRSS several times over what is written";
#endif
  TCPStoreServer server("127.0.0.1", 0);
  const std::vector<unsigned char> part(48 << 20, 'x');
  const long rss_before = status_field("VmRSS");
  std::vector<std::unique_ptr<RawClient>> senders;
  for (int i = 0; i < 4; ++i) {
    senders.push_back(std::make_unique<RawClient>(server.port()));
    senders.back()->send(concat({{9},
                                 u32(0),
                                 {1},
                                 u32(2),
                                 {'k', static_cast<unsigned char>('0' + i)},
                                 u32(TCPStore::kMaxValueBytes)}));
    senders.back()->send(part);
  }
  std::this_thread::sleep_for(milliseconds(500));  // the last bytes sent are read
  const long grown_kb = status_field("VmRSS") - rss_before;
  EXPECT_LT(grown_kb, 4 * 48 * 1024 * 5 / 4) << "kB grown for 4 x 48 MiB received";
  EXPECT_EQ(server.bytes_in_transit(), 4 * (2 + size_t{TCPStore::kMaxValueBytes}));
}

// Keys and values beyond max_stored_bytes are refused with a message naming the limit; a value is
// counted in full while it arrives, and once stored only its growth over the value it replaces.
TEST(TCPStoreServerTest, CapsStoredBytes) {
  TCPStoreServerOptions options;
  options.max_stored_bytes = 1000;
  TCPStoreServer server("127.0.0.1", 0, options);
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  client.set("a", std::vector<char>(400, 'x'));  // 401 bytes
  {
    // 401 + 601 > 1000: refused, and that connection closed.
    TCPStore refused("127.0.0.1", server.port(), false, milliseconds(5000));
    const std::string error = error_of([&] { refused.set("b", std::vector<char>(600, 'y')); });
    EXPECT_NE(error.find("set('b'): a value of 600 bytes"), std::string::npos) << error;
    EXPECT_NE(error.find("limit of 1000 bytes"), std::string::npos) << error;
    EXPECT_NE(error_of([&] { refused.check({"a"}); }), "");
  }
  EXPECT_FALSE(client.check({"b"}));
  client.set("a", std::vector<char>(550, 'z'));  // 401 + 551 in transit fit; 551 stay
  EXPECT_EQ(client.get("a").size(), 550u);
  client.set("c", std::vector<char>(441, 'c'));  // 551 + 442 = 993
  // An ADD beyond the cap is refused and its connection stays usable.
  const std::string add_error = error_of([&] { client.add("counter", 1); });
  EXPECT_NE(add_error.find("limit of 1000"), std::string::npos) << add_error;
  EXPECT_EQ(client.get("a").size(), 550u);
  client.set("a", bytes("small"));         // 993 + 6 in transit fit; 993 - 545 = 448 stay
  EXPECT_EQ(client.add("counter", 1), 1);  // 456
  // Replacing c's 441 bytes with 560 would grow the store to 575 bytes, but while they arrive the
  // 560 count in full: 456 + 561 > 1000.
  TCPStore late("127.0.0.1", server.port(), false, milliseconds(5000));
  EXPECT_NE(error_of([&] { late.set("c", std::vector<char>(560, 'c')); }).find("limit of 1000"),
            std::string::npos);
}

// With a token, a client that presents another (or none) is refused before it can do anything:
// a stray HELLO cannot claim rank 1 and have it marked lost. The right token, given or read from
// DPE_STORE_TOKEN, is served normally.
TEST(TCPStoreServerTest, AWrongTokenIsRefusedAndDoesNotAffectRanks) {
  TCPStoreOptions good;
  good.timeout = milliseconds(5000);
  good.token = "s3cret-token";
  TCPStore server("127.0.0.1", 0, true, good);
  TCPStore rank1("127.0.0.1", server.port(), false, good);
  rank1.register_rank(1);

  TCPStoreOptions wrong = good;
  wrong.token = "guess";
  const std::string wrong_error =
      error_of([&] { TCPStore c("127.0.0.1", server.port(), false, wrong); });
  EXPECT_NE(wrong_error.find("wrong token"), std::string::npos) << wrong_error;
  EXPECT_EQ(wrong_error.find("s3cret"), std::string::npos) << wrong_error;
  TCPStoreOptions none = good;
  none.token = "";
  const std::string none_error =
      error_of([&] { TCPStore c("127.0.0.1", server.port(), false, none); });
  EXPECT_NE(none_error.find("requires a token"), std::string::npos) << none_error;

  // A raw HELLO claiming rank 1, then a hang-up without goodbye.
  {
    RawClient raw(server.port());
    raw.send(concat({{6}, u32(1), u32(0)}));
    const std::string reply = raw.read_until_closed();
    ASSERT_FALSE(reply.empty());
    EXPECT_EQ(reply[0], 2);
    EXPECT_NE(reply.find("authentication required"), std::string::npos) << reply;
  }
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_TRUE(server.lost_ranks().empty());
  rank1.set("still", bytes("here"));
  EXPECT_EQ(text(server.get("still")), "here");

  ::setenv("DPE_STORE_TOKEN", "s3cret-token", 1);
  const std::string env_error = error_of([&] {
    TCPStore from_env("127.0.0.1", server.port(), false, milliseconds(5000));
    from_env.check({"still"});
  });
  ::unsetenv("DPE_STORE_TOKEN");
  EXPECT_EQ(env_error, "");
}

// A client that sends part of a request and keeps the socket open blocks no one: the server
// never waits for a request's bytes while it holds the store's lock. The half-sent request (a WAIT
// without its timeout field) is answered with an ERROR naming the deadline and its connection is
// closed once request_timeout has passed since its first byte.
TEST(TCPStoreServerTest, AHalfSentRequestBlocksNoOneAndTimesOut) {
  TCPStoreServerOptions options;
  options.request_timeout = milliseconds(1000);
  TCPStoreServer server("127.0.0.1", 0, options);
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  RawClient half(server.port());
  half.send(concat({{4}, u32(1), u32(1), {'k'}}));  // WAIT 1 key 'k', then no timeout field
  std::this_thread::sleep_for(milliseconds(200));   // the server reads the partial request
  const auto sent = std::chrono::steady_clock::now();
  auto others = std::async(std::launch::async, [&] {
    client.set("k", bytes("v"));
    TCPStore late("127.0.0.1", server.port(), false, milliseconds(5000));
    return text(late.get("k"));
  });
  const bool served = others.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  EXPECT_TRUE(served) << "a half-sent WAIT froze the other clients";
  if (!served) half.close();  // unblocks the server so the test can end
  EXPECT_EQ(others.get(), "v");
  if (!served) return;
  const std::string reply = half.read_until_closed();
  const auto closed_after = std::chrono::steady_clock::now() - sent;
  ASSERT_FALSE(reply.empty()) << "the half-sent connection was never answered";
  EXPECT_EQ(reply[0], 2);
  EXPECT_NE(reply.find("request not completed within 1000 ms of its first byte"), std::string::npos)
      << reply;
  // Not before its deadline (counted from the first byte, 200 ms before `sent`).
  EXPECT_GE(closed_after, milliseconds(700));
  EXPECT_LT(closed_after, std::chrono::seconds(10));
}

// Idle connections that never authenticate (more of them than the store serves clients) do not
// lock out a rank: they wait in a pool of their own, the oldest idle one giving way to a newcomer,
// and each is closed when it has sent no request within handshake_timeout. With a token and
// without one (where any first request counts).
TEST(TCPStoreServerTest, IdleConnectionsCannotLockOutARank) {
  for (const std::string token : {"s3cret-token", ""}) {
    SCOPED_TRACE("token '" + token + "'");
    TCPStoreServerOptions options;
    options.token = token;
    options.max_connections = 16;
    options.max_pending_connections = 8;
    options.handshake_timeout = milliseconds(1000);
    TCPStoreServer server("127.0.0.1", 0, options);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::unique_ptr<RawClient>> idle;
    for (int i = 0; i < 40; ++i) idle.push_back(std::make_unique<RawClient>(server.port()));
    std::this_thread::sleep_for(milliseconds(200));  // the server has accepted them
    TCPStoreOptions rank;
    rank.timeout = milliseconds(5000);
    rank.token = token;
    const std::string error = error_of([&] {
      TCPStore client("127.0.0.1", server.port(), false, rank);
      client.set("k", bytes("v"));
      EXPECT_EQ(text(client.get("k")), "v");
    });
    EXPECT_EQ(error, "");
    for (auto& raw : idle) {
      std::string reply;
      EXPECT_TRUE(raw->closed_by(start + std::chrono::seconds(20), &reply))
          << "an idle connection was never closed";
      if (!reply.empty()) {
        EXPECT_EQ(reply[0], 2) << reply;
      }
    }
  }
}

// Bytes still on their way count against max_stored_bytes from the moment a request announces
// them: a SET whose value would take stored plus in-transit bytes over the cap is refused at once
// with an ERROR naming the cap and the size, and its connection closed. A reservation is given
// back when its connection goes away, and when a stalled request reaches its deadline.
TEST(TCPStoreServerTest, BytesInTransitCountAgainstTheCap) {
  using std::chrono::steady_clock;
  TCPStoreServerOptions options;
  options.max_stored_bytes = 1 << 20;
  options.request_timeout = milliseconds(10000);
  TCPStoreServer server("127.0.0.1", 0, options);
  constexpr uint32_t kAnnounced = 400 << 10;
  const std::vector<unsigned char> part(100 << 10, 'x');
  // AUTH (no token), then a SET of a 400 KiB value of which 100 KiB are sent.
  const auto start_set = [&](RawClient& raw, char name) {
    raw.send(concat({{9}, u32(0)}));
    raw.send(concat({{1}, u32(2), {'k', static_cast<unsigned char>(name)}, u32(kAnnounced)}));
    raw.send(part);
  };
  auto first = std::make_unique<RawClient>(server.port());
  RawClient second(server.port());
  start_set(*first, '0');
  start_set(second, '1');
  const size_t two = 2 * (2 + size_t{kAnnounced});
  ASSERT_TRUE(eventually([&] { return server.bytes_in_transit() == two; }))
      << server.bytes_in_transit();

  RawClient third(server.port());
  start_set(third, '2');
  std::string reply;
  const std::string refusal =
      "set('k2'): a value of 409600 bytes would take the store over its limit of 1048576 bytes "
      "(it holds 0 bytes and " +
      std::to_string(two + 2) + " more are on their way";  // its key's 2 bytes too
  EXPECT_TRUE(third.read_by(steady_clock::now() + std::chrono::seconds(10), &reply, refusal));
  ASSERT_GE(reply.size(), 2u) << "a SET over the cap was not refused";
  EXPECT_EQ(reply[0], 0);  // AUTH's OK
  EXPECT_EQ(reply[1], 2);  // ERROR
  EXPECT_NE(reply.find(refusal), std::string::npos) << reply;
  EXPECT_TRUE(eventually([&] { return server.bytes_in_transit() == two; }))
      << server.bytes_in_transit();
  // A real client's value is refused the same way, and reads the reply though it sent it whole.
  {
    TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
    const std::string error =
        error_of([&] { client.set("small", std::vector<char>(300 << 10, 'y')); });
    EXPECT_NE(error.find("a value of 307200 bytes would take the store over its limit of 1048576"),
              std::string::npos)
        << error;
  }
  first.reset();  // its reservation is given back
  ASSERT_TRUE(eventually([&] { return server.bytes_in_transit() == two / 2; }))
      << server.bytes_in_transit();
  TCPStore client("127.0.0.1", server.port(), false, milliseconds(5000));
  client.set("small", std::vector<char>(300 << 10, 'y'));
  EXPECT_EQ(client.get("small").size(), 300u << 10);
  // The refused connection is closed; the second, which never sends the rest, is closed at its
  // deadline and its bytes given back.
  EXPECT_TRUE(third.closed_by(steady_clock::now() + std::chrono::seconds(30), &reply));
  reply.clear();
  EXPECT_TRUE(second.closed_by(steady_clock::now() + std::chrono::seconds(30), &reply));
  EXPECT_NE(reply.find("request not completed within 10409 ms of its first byte"),
            std::string::npos)
      << reply;
  EXPECT_TRUE(eventually([&] { return server.bytes_in_transit() == 0; }));
  EXPECT_FALSE(client.check({"k0"}) || client.check({"k1"}) || client.check({"k2"}));
}

// The server's stderr quotes a refused client's key with its control bytes escaped, so a stranger
// cannot write terminal escape sequences into rank 0's log.
TEST(TCPStoreServerTest, ItsLogEscapesTheBytesOfAClient) {
  TCPStoreServerOptions options;
  options.max_stored_bytes = 64;
  testing::internal::CaptureStderr();
  {
    TCPStoreServer server("127.0.0.1", 0, options);
    RawClient raw(server.port());
    // AUTH, then a SET of 100 bytes at the key ESC "]0;x" BEL: over the cap.
    raw.send(concat({{9},
                     u32(0),
                     {1},
                     u32(5),
                     {0x1b, ']', '0', ';', 'x'},
                     u32(100),
                     std::vector<unsigned char>(100, 'v')}));
    std::string reply;
    EXPECT_TRUE(raw.closed_by(std::chrono::steady_clock::now() + std::chrono::seconds(10), &reply));
    EXPECT_NE(reply.find("a value of 100 bytes"), std::string::npos) << reply;
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("set('\\x1b]0;x'): a value of 100 bytes"), std::string::npos) << log;
  EXPECT_EQ(log.find('\x1b'), std::string::npos) << log;
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
