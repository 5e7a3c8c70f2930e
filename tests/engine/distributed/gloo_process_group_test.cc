// GlooProcessGroup with 2 and 3 ranks in separate processes on 127.0.0.1: all_reduce (sum, avg,
// max, min; float32 and int64), broadcast, all_gather, barrier, asynchronous all-reduces in
// submission order, argument errors, and a lost or silent rank turning into an error, not a hang.
//
// The test process serves the TCPStore (port 0: the kernel picks a free port) and forks the
// ranks with spawn(); a check that fails in a rank throws, and spawn reports it with the rank.
#include "engine/distributed/gloo_process_group.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/spawn.h"
#include "engine/distributed/tcp_store.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace distributed {
namespace {

using std::chrono::milliseconds;

struct Rank {
  std::shared_ptr<TCPStore> store;
  std::shared_ptr<GlooProcessGroup> pg;
};

Rank join(int port, int rank, int size, milliseconds timeout = milliseconds(10000)) {
  Rank r;
  r.store = std::make_shared<TCPStore>("127.0.0.1", port, false, timeout);
  r.store->register_rank(rank);
  GlooOptions options;
  options.timeout = timeout;
  r.pg = std::make_shared<GlooProcessGroup>(r.store, rank, size, options);
  return r;
}

using test::error_of;
using test::expect_values;

class GlooProcessGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooProcessGroupTest, AllReduce) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        Rank r = join(port, rank, n);
        RANK_CHECK(r.pg->rank() == rank && r.pg->size() == n, "rank/size");
        test::expect_all_reduce_ops(*r.pg);
      },
      n);
}

TEST_P(GlooProcessGroupTest, BroadcastAndAllGather) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        Rank r = join(port, rank, n);
        test::expect_broadcast_and_all_gather(*r.pg);
        test::expect_flat_collectives(*r.pg);
      },
      n);
}

TEST_P(GlooProcessGroupTest, BarrierWaitsForEveryRank) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        Rank r = join(port, rank, n);
        // The last rank arrives late; no rank may pass the barrier before it has set its key.
        if (rank == n - 1) std::this_thread::sleep_for(milliseconds(200));
        r.store->set("arrived/" + std::to_string(rank), {'1'});
        r.pg->barrier();
        std::vector<std::string> keys;
        for (int q = 0; q < n; ++q) keys.push_back("arrived/" + std::to_string(q));
        RANK_CHECK(r.store->check(keys), "passed the barrier before every rank arrived");
      },
      n);
}

TEST_P(GlooProcessGroupTest, AsyncAllReducesCompleteInSubmissionOrder) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        Rank r = join(port, rank, n);
        // Same sizes, different values: a mismatch between ranks would give wrong sums.
        std::vector<Tensor> tensors;
        std::vector<std::shared_ptr<Work>> works;
        for (int k = 0; k < 12; ++k) {
          tensors.push_back(Tensor::full({1000}, float(100 * k + rank)));
          works.push_back(r.pg->all_reduce_async(tensors.back(), ReduceOp::kSum));
        }
        // A synchronous collective queued behind them runs after them.
        Tensor last = Tensor::full({1000}, 1.0f);
        r.pg->all_reduce(last);
        for (int k = 0; k < 12; ++k) RANK_CHECK(works[k]->is_completed(), "work " << k);
        for (int k = 11; k >= 0; --k) {
          works[k]->wait();
          const float expected = 100.0f * k * n + n * (n - 1) / 2.0f;
          expect_values(tensors[k].narrow(0, 0, 2), {expected, expected},
                        "async all_reduce " + std::to_string(k));
        }
        expect_values(last.narrow(0, 0, 1), {float(n)}, "sync after async");
      },
      n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooProcessGroupTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(GlooProcessGroupSingleTest, OneRankAndArgumentErrors) {
  test::StoreServerProcess server;
  const int port = server.port();
  // In a child too, so this process never starts the device runtime's threads before a fork.
  spawn(
      [&](int rank) {
        GlooOptions options;
        options.timeout = milliseconds(5000);
        auto store = std::make_shared<TCPStore>("127.0.0.1", port, false);
        GlooProcessGroup pg(store, 0, 1, options);
        test::expect_one_rank_and_argument_errors(pg);
      },
      1);
}

// Rank 2 dies (no goodbye to the store) in the middle of an all-reduce of 16 MiB; ranks 0 and 1
// get an error naming it instead of hanging, and the group stays failed.
TEST(GlooProcessGroupFailureTest, ARankLostMidCollectiveIsNamed) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        // Gloo notices a closed connection at once when a receive from it is pending, otherwise
        // when its timeout ends: either way the error names rank 2.
        Rank r = join(port, rank, 3, milliseconds(3000));
        Tensor small = Tensor::ones({1000});
        r.pg->all_reduce(small);
        Tensor big = Tensor::ones({4 << 20});
        if (rank == 2) {
          r.pg->all_reduce_async(big);
          std::this_thread::sleep_for(milliseconds(5));
          ::_exit(0);  // dies mid-collective: no destructor, no goodbye
        }
        const std::string error = error_of([&] {
          for (int k = 0; k < 3; ++k) r.pg->all_reduce(big);
        });
        RANK_CHECK(error.find("lost connection to rank 2") != std::string::npos, error);
        RANK_CHECK(error.find("rank " + std::to_string(rank) + " of 3") != std::string::npos,
                   error);
        const std::string again = error_of([&] { r.pg->barrier(); });
        RANK_CHECK(again.find("failed earlier") != std::string::npos, again);
        // Stay alive until both survivors have checked, so neither sees the other leave.
        r.store->set("checked/" + std::to_string(rank), {'1'});
        r.store->wait({"checked/0", "checked/1"}, milliseconds(30000));
      },
      3);
}

// Rank 1 is alive but never joins the collective: rank 0 times out with an error.
TEST(GlooProcessGroupFailureTest, ASilentRankTimesOut) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        Rank r = join(port, rank, 2, milliseconds(500));
        if (rank == 1) {
          r.store->wait({"done/0"}, milliseconds(20000));
          return;
        }
        Tensor t = Tensor::ones({10});
        const std::string error = error_of([&] { r.pg->all_reduce(t); });
        RANK_CHECK(error.find("gloo all_reduce(sum) (rank 0 of 2)") != std::string::npos, error);
        RANK_CHECK(error.find("timed out after 500 ms") != std::string::npos, error);
        r.store->set("done/0", {'1'});
      },
      2);
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
