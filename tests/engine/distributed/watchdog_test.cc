// The collective watchdog without processes: heartbeats' text, which ranks find_stalls names
// (silent, behind, never seen; never those in the collective or past it), the sentences, and
// Watchdogs of several ranks in one process sharing a board in memory: a rank whose heartbeats
// stop is named, a rank that falls behind is named, a silent board names the rank that serves
// it, the watchdog ends the process past its expiry, and a ProcessGroup's collectives get
// sequence numbers the watchdog publishes.
#include "engine/distributed/watchdog.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/process_group.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {
namespace {

using std::chrono::milliseconds;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Heartbeats in memory. A frozen rank's publishes are dropped (a stopped process); a down board
// fails every request (a stopped store server).
class MemoryBoard : public HeartbeatBoard {
 public:
  void publish(int rank, const Heartbeat& h) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) DPE_THROW("no reply from the test board");
    if (frozen_.count(rank) == 0) beats_[rank] = h;
  }
  std::optional<Heartbeat> read(int rank) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (down_) DPE_THROW("no reply from the test board");
    const auto it = beats_.find(rank);
    if (it == beats_.end()) return std::nullopt;
    return it->second;
  }
  std::string where() const override { return "the test board"; }
  int served_by() const override { return 0; }

  void freeze(int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    frozen_.insert(rank);
  }
  void go_down() {
    std::lock_guard<std::mutex> lock(mu_);
    down_ = true;
  }
  // Waits until `rank` has published a heartbeat for which `pred` holds.
  template <typename Pred>
  Heartbeat wait_for(int rank, Pred pred) {
    for (int i = 0; i < 2000; ++i) {
      if (auto h = read(rank); h && pred(*h)) return *h;
      std::this_thread::sleep_for(milliseconds(5));
    }
    ADD_FAILURE() << "rank " << rank << " never published the heartbeat waited for";
    return {};
  }

 private:
  std::mutex mu_;
  std::map<int, Heartbeat> beats_;
  std::set<int> frozen_;
  bool down_ = false;
};

// A diagnosis compares two readings 3 periods apart: 300 ms, long enough for a live rank's
// thread to beat on a busy machine.
WatchdogOptions fast(milliseconds timeout = milliseconds(1000)) {
  WatchdogOptions o;
  o.timeout = timeout;
  o.period = milliseconds(100);
  return o;
}

Heartbeat beat(int64_t beat, int64_t completed, int64_t in_flight, std::string op = "") {
  return Heartbeat{beat, completed, in_flight, std::move(op)};
}

TEST(HeartbeatTest, TextRoundTrip) {
  const Heartbeat h = beat(12, 41, 42, "all_reduce(sum)");
  const auto back = decode_heartbeat(encode_heartbeat(h));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->beat, 12);
  EXPECT_EQ(back->completed, 41);
  EXPECT_EQ(back->in_flight, 42);
  EXPECT_EQ(back->op, "all_reduce(sum)");
  const auto idle = decode_heartbeat(encode_heartbeat(beat(3, 7, 0)));
  ASSERT_TRUE(idle.has_value());
  EXPECT_EQ(idle->in_flight, 0);
  EXPECT_EQ(idle->op, "");
}

TEST(HeartbeatTest, MalformedTextIsNone) {
  for (const char* text : {"", "1 2", "a b c", "1 -2 3 x", "-1 0 0"}) {
    EXPECT_FALSE(decode_heartbeat(text).has_value()) << text;
  }
}

TEST(FindStallsTest, NamesSilentBehindAndUnseenRanksOnly) {
  // Rank 0 waits in collective #7.
  const std::vector<std::optional<Heartbeat>> earlier = {
      std::nullopt,                 // 0: self
      beat(3, 5, 6, "broadcast"),   // 1: stopped in #6
      beat(4, 6, 0),                // 2: busy after #6
      beat(1, 6, 7, "all_reduce"),  // 3: waiting in #7 too
      std::nullopt,                 // 4: never published
      beat(9, 7, 0),                // 5: done with #7 (and stopped since)
      beat(2, 6, 7, "all_reduce"),  // 6: was in #7
  };
  const std::vector<std::optional<Heartbeat>> later = {
      std::nullopt,
      beat(3, 5, 6, "broadcast"),
      beat(6, 6, 0),
      beat(2, 6, 7, "all_reduce"),
      std::nullopt,
      beat(9, 7, 0),
      beat(2, 6, 7, "all_reduce"),  // 6: stopped inside #7
  };
  const std::vector<Stall> stalls = find_stalls(0, 7, earlier, later);
  ASSERT_EQ(stalls.size(), 4u);
  EXPECT_EQ(stalls[0].rank, 1);
  EXPECT_EQ(stalls[0].kind, StallKind::kSilent);
  EXPECT_EQ(stalls[0].last.in_flight, 6);
  EXPECT_EQ(stalls[1].rank, 2);
  EXPECT_EQ(stalls[1].kind, StallKind::kBehind);
  EXPECT_EQ(stalls[2].rank, 4);
  EXPECT_EQ(stalls[2].kind, StallKind::kNeverSeen);
  EXPECT_EQ(stalls[3].rank, 6);
  EXPECT_EQ(stalls[3].kind, StallKind::kSilent);
}

TEST(FindStallsTest, EveryoneInTheCollectiveIsNoStall) {
  const std::vector<std::optional<Heartbeat>> earlier = {beat(1, 2, 3), beat(1, 2, 3)};
  const std::vector<std::optional<Heartbeat>> later = {beat(2, 2, 3), beat(5, 2, 3)};
  EXPECT_TRUE(find_stalls(0, 3, earlier, later).empty());
  EXPECT_TRUE(find_stalls(1, 3, earlier, later).empty());
}

TEST(DescribeStallsTest, Sentences) {
  const std::string one =
      describe_stalls({Stall{1, StallKind::kSilent, beat(3, 5, 6, "broadcast(root=0)")}}, 7, 2.5,
                      "the store at h:1");
  EXPECT_TRUE(has(one,
                  "rank 1 stopped answering (its heartbeat did not advance in 2.5 s: "
                  "stopped, hung, or its host is gone; last seen in collective #6 "
                  "(broadcast(root=0)))"))
      << one;
  const std::string many = describe_stalls(
      {Stall{1, StallKind::kSilent, {}}, Stall{2, StallKind::kBehind, beat(5, 6, 0)},
       Stall{3, StallKind::kSilent, {}}, Stall{4, StallKind::kNeverSeen, {}}},
      7, 1.0, "the store at h:1");
  EXPECT_TRUE(has(many, "ranks 1 and 3 stopped answering (their heartbeats")) << many;
  EXPECT_TRUE(has(many,
                  "rank 2 has not reached collective #7: it is alive but last completed "
                  "collective #6 and is in none"))
      << many;
  EXPECT_TRUE(has(many, "rank 4 has published no heartbeat on the store at h:1")) << many;
  const std::string none = describe_stalls({}, 7, 1.0, "b");
  EXPECT_TRUE(has(none, "the connection between the ranks is stuck")) << none;
}

// Three ranks in collective #2; rank 1 stops (its heartbeats stop) before entering it.
TEST(WatchdogTest, NamesTheRankWhoseHeartbeatStopped) {
  auto board = std::make_shared<MemoryBoard>();
  std::vector<std::unique_ptr<Watchdog>> ranks;
  for (int r = 0; r < 3; ++r) ranks.push_back(std::make_unique<Watchdog>(r, 3, board, fast()));
  for (auto& w : ranks) w->begin(1, "all_reduce(sum)");
  for (auto& w : ranks) w->end(1);
  board->wait_for(1, [](const Heartbeat& h) { return h.completed == 1; });
  board->freeze(1);
  ranks[0]->begin(2, "all_reduce(sum)");
  ranks[2]->begin(2, "all_reduce(sum)");
  board->wait_for(2, [](const Heartbeat& h) { return h.in_flight == 2; });
  EXPECT_EQ(ranks[0]->in_flight(), 2);
  const std::string why = ranks[0]->diagnose();
  EXPECT_TRUE(has(why, "rank 1 stopped answering")) << why;
  EXPECT_TRUE(has(why, "last seen after collective #1")) << why;
  EXPECT_FALSE(has(why, "rank 2")) << why;
  const std::string from_two = ranks[2]->diagnose();
  EXPECT_TRUE(has(from_two, "rank 1 stopped answering")) << from_two;
  EXPECT_FALSE(has(from_two, "rank 0")) << from_two;
}

// Rank 1 beats on but never enters collective #2 (a long evaluation, a hang in its own code).
TEST(WatchdogTest, NamesTheRankThatFellBehind) {
  auto board = std::make_shared<MemoryBoard>();
  Watchdog r0(0, 2, board, fast()), r1(1, 2, board, fast());
  r0.begin(1, "barrier");
  r1.begin(1, "barrier");
  r0.end(1);
  r1.end(1);
  r0.begin(2, "broadcast(root=0)");
  board->wait_for(1, [](const Heartbeat& h) { return h.completed == 1; });
  const std::string why = r0.diagnose();
  EXPECT_TRUE(has(why,
                  "rank 1 has not reached collective #2: it is alive but last completed "
                  "collective #1 and is in none"))
      << why;
  EXPECT_FALSE(has(why, "stopped answering")) << why;
  EXPECT_EQ(r1.diagnose(), "no collective in flight");
}

// The board's server is rank 0's process: when the board does not answer, rank 0 is named.
TEST(WatchdogTest, ASilentBoardNamesTheRankThatServesIt) {
  auto board = std::make_shared<MemoryBoard>();
  Watchdog r1(1, 2, board, fast());
  r1.begin(1, "all_reduce(sum)");
  board->go_down();
  const std::string why = r1.diagnose();
  EXPECT_TRUE(has(why,
                  "rank 0 stopped answering: the test board, which it serves, does not "
                  "reply"))
      << why;
  EXPECT_TRUE(has(why, "no reply from the test board")) << why;
}

// Past its expiry (MPI: the timeout) the watchdog prints why and ends the process through
// `terminate`: two ranks, rank 1 stopped, rank 0 in collective #1 for good.
void stall_past_expiry() {
  auto board = std::make_shared<MemoryBoard>();
  WatchdogOptions o = fast(milliseconds(300));
  o.period = milliseconds(20);
  o.expiry = o.timeout;
  o.backend = "mpi";
  o.terminate = [] { ::_exit(7); };
  Watchdog r0(0, 2, board, o);
  Watchdog r1(1, 2, board, o);
  board->wait_for(1, [](const Heartbeat& h) { return h.beat > 0; });
  board->freeze(1);
  r0.begin(1, "all_reduce(sum)");
  std::this_thread::sleep_for(std::chrono::seconds(30));
  ::_exit(0);
}

TEST(WatchdogDeathTest, EndsTheProcessPastTheExpiry) {
  ::testing::FLAGS_gtest_death_test_style = "threadsafe";
  EXPECT_EXIT(stall_past_expiry(), ::testing::ExitedWithCode(7),
              "mpi all_reduce\\(sum\\) \\(rank 0 of 2\\): collective #1 has not completed after "
              ".* s \\(timeout 0.3 s\\): rank 1 stopped answering .*the watchdog ends this "
              "process");
}

// The expiry counts from each collective's start: collectives that each end well within it never
// end the process, however long they take together.
TEST(WatchdogTest, CollectivesThatEachCompleteInTimeEndNothing) {
  auto board = std::make_shared<MemoryBoard>();
  WatchdogOptions o = fast(milliseconds(300));
  o.period = milliseconds(20);
  o.expiry = o.timeout;
  o.terminate = [] { ::_exit(7); };
  Watchdog r0(0, 1, board, o);
  for (int64_t seq = 1; seq <= 30; ++seq) {
    r0.begin(seq, "barrier");
    std::this_thread::sleep_for(milliseconds(20));
    r0.end(seq);
  }
  const Heartbeat h = board->wait_for(0, [](const Heartbeat& b) { return b.completed == 30; });
  EXPECT_EQ(h.in_flight, 0);
}

// A group with collectives that do nothing, except a barrier that waits to be released.
class FakeGroup : public ProcessGroup {
 public:
  FakeGroup() : ProcessGroup(0, 1) { start_communication(); }
  ~FakeGroup() override { stop_communication(); }
  std::string backend() const override { return "fake"; }
  std::promise<void> release;

 protected:
  void run_all_reduce(Tensor&, ReduceOp) override {}
  void run_broadcast(Tensor&, int) override {}
  void run_all_gather(const Tensor&, Tensor&) override {}
  void run_barrier() override { release.get_future().wait(); }
};

TEST(WatchdogTest, AGroupsCollectivesAreNumberedAndPublished) {
  auto board = std::make_shared<MemoryBoard>();
  FakeGroup group;
  group.set_watchdog(std::make_shared<Watchdog>(0, 1, board, fast()));
  Tensor t = Tensor::scalar(1.0f);
  for (int k = 0; k < 3; ++k) group.all_reduce(t);
  group.broadcast(t, 0);
  Heartbeat h = board->wait_for(0, [](const Heartbeat& b) { return b.completed == 4; });
  EXPECT_EQ(h.in_flight, 0);
  std::thread waiter([&] { group.barrier(); });
  h = board->wait_for(0, [](const Heartbeat& b) { return b.in_flight == 5; });
  EXPECT_EQ(h.op, "barrier");
  EXPECT_EQ(h.completed, 4);
  group.release.set_value();
  waiter.join();
  h = board->wait_for(0, [](const Heartbeat& b) { return b.completed == 5; });
  EXPECT_EQ(h.in_flight, 0);
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
