// MpiProcessGroup with 1, 2 and 3 ranks started by mpirun (Open MPI, as a user would): all_reduce
// (sum, avg, max, min; float32 and int64), broadcast, all_gather, barrier, asynchronous
// all-reduces in submission order, two groups at once, argument errors, init_process_group("mpi")
// with MPI's rank and size, a launcher's environment that disagrees with MPI, and a rank that dies
// ending the job instead of hanging it.
//
// The test binary is its own rank program: `mpi_process_group_test --rank-case NAME` runs one
// case's rank body (exit 0 when every check passed); each TEST runs mpirun on it and checks the
// exit code and the output.
#include "engine/distributed/mpi_process_group.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/distributed.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/tools/run_tool.h"

namespace dpe {
namespace distributed {
namespace {

std::string g_self;  // this binary, for mpirun

using test::error_of;
using test::expect_values;

// --- the rank bodies ---

void all_reduce_case() {
  MpiProcessGroup pg;
  test::expect_all_reduce_ops(pg);
  // mpirun put every rank on this machine; Open MPI's waits spin (DDP's "when to overlap").
  RANK_CHECK(pg.local_size() == pg.size(), "local size " << pg.local_size());
  RANK_CHECK(pg.waits_spin(), "MPI's waits spin");
}

void broadcast_and_all_gather_case() {
  MpiProcessGroup pg;
  test::expect_broadcast_and_all_gather(pg);
  test::expect_flat_collectives(pg);
}

void barrier_case() {
  MpiProcessGroup pg;
  // Rank 0 arrives late; nobody may leave the barrier before it arrives.
  if (pg.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto start = std::chrono::steady_clock::now();
  pg.barrier();
  const double waited =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (pg.rank() != 0) RANK_CHECK(waited > 200, "left the barrier after " << waited << " ms");
}

void async_and_two_groups_case() {
  MpiProcessGroup a, b;
  const int n = a.size(), rank = a.rank();
  // Asynchronous all-reduces in submission order, and a second group's collectives between them.
  std::vector<Tensor> ts;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 8; ++k) {
    ts.push_back(Tensor::full({1000 * (k + 1)}, float(rank + k)));
    works.push_back(a.all_reduce_async(ts.back()));
  }
  Tensor other = Tensor::full({10}, 1.0f);
  b.all_reduce(other);
  expect_values(other.narrow(0, 0, 1), {float(n)}, "second group");
  for (int k = 0; k < 8; ++k) {
    works[k]->wait();
    const float expected = n * (n - 1) / 2.0f + float(n * k);
    RANK_CHECK(ts[k].to_vector<float>().back() == expected, "async " << k);
  }
}

void one_rank_and_argument_errors_case() {
  MpiProcessGroup pg;
  RANK_CHECK(pg.size() == 1 && pg.rank() == 0, "a job without mpirun is a world of one");
  RANK_CHECK(pg.backend() == "mpi", pg.backend());
  test::expect_one_rank_and_argument_errors(pg);
}

void init_process_group_case() {
  auto group = init_process_group("mpi");
  RANK_CHECK(group->backend() == "mpi", group->backend());
  RANK_CHECK(get_rank() == group->rank() && get_world_size() == group->size(), "helpers");
  const char* env_rank = std::getenv("OMPI_COMM_WORLD_RANK");
  RANK_CHECK(env_rank != nullptr && std::atoi(env_rank) == get_rank(), "MPI's rank");
  Tensor v = reduce_value(Tensor::full({1}, float(get_rank())), /*average=*/false);
  RANK_CHECK(v.to_vector<float>()[0] == get_world_size() * (get_world_size() - 1) / 2.0f,
             "reduce_value");
  barrier();
  destroy_process_group();
}

// The default group is never destroyed: MPI is finalised at exit after its thread has stopped,
// and the job ends cleanly.
void default_group_held_until_exit_case() {
  auto group = init_process_group("mpi");
  Tensor t = Tensor::full({1 << 16}, 1.0f);
  for (int k = 0; k < 20; ++k) group->all_reduce_async(t);
  group->barrier();
  std::cout << "rank " << group->rank() << " leaves with its group\n";
}

void environment_mismatch_case() {
  // As if tools/dpe-launch had started two ranks of a job that MPI sees as a world of one.
  ::setenv("RANK", "1", 1);
  ::setenv("WORLD_SIZE", "2", 1);
  const std::string e = error_of([] { init_process_group("mpi"); });
  RANK_CHECK(e.find("MPI says rank 0 of 1") != std::string::npos, e);
  RANK_CHECK(e.find("mpirun") != std::string::npos, e);
  std::cout << "mismatch refused\n";
}

void dead_rank_case() {
  MpiProcessGroup pg;
  Tensor t = Tensor::ones({1000});
  pg.all_reduce(t);
  if (pg.rank() == 1) {
    std::cout << "rank 1 dies" << std::endl;
    ::_exit(7);  // mid-job, no MPI_Finalize
  }
  for (int k = 0; k < 100; ++k) pg.all_reduce(t);  // never completes: rank 1 is gone
  std::cout << "rank " << pg.rank() << " finished without rank 1" << std::endl;
}

const std::map<std::string, std::function<void()>>& cases() {
  static const std::map<std::string, std::function<void()>> c = {
      {"all_reduce", all_reduce_case},
      {"broadcast_and_all_gather", broadcast_and_all_gather_case},
      {"barrier", barrier_case},
      {"async_and_two_groups", async_and_two_groups_case},
      {"one_rank_and_argument_errors", one_rank_and_argument_errors_case},
      {"init_process_group", init_process_group_case},
      {"environment_mismatch", environment_mismatch_case},
      {"default_group_held_until_exit", default_group_held_until_exit_case},
      {"dead_rank", dead_rank_case},
  };
  return c;
}

// --- the tests: mpirun on this binary ---

// mpirun as a user on one machine would run it; root in containers and CI needs the two
// variables, more ranks than cores needs --oversubscribe.
int mpirun(int ranks, const std::string& rank_case, std::string* output) {
  const std::string env = test::mpirun_env() + " OMPI_MCA_btl=self,vader";
  const std::string args = "--oversubscribe --bind-to none -np " + std::to_string(ranks) + " " +
                           g_self + " --rank-case " + rank_case;
  const int rc = test::run_tool("mpirun", args, output, env);
  std::cout << "mpirun -np " << ranks << " (" << rank_case << "): exit " << rc << "\n" << *output;
  return rc;
}

class MpiProcessGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(MpiProcessGroupTest, AllReduce) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "all_reduce", &out), 0) << out;
}

TEST_P(MpiProcessGroupTest, BroadcastAndAllGather) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "broadcast_and_all_gather", &out), 0) << out;
}

TEST_P(MpiProcessGroupTest, BarrierWaitsForEveryRank) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "barrier", &out), 0) << out;
}

TEST_P(MpiProcessGroupTest, AsyncAllReducesCompleteInOrderBesideASecondGroup) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "async_and_two_groups", &out), 0) << out;
}

TEST_P(MpiProcessGroupTest, InitProcessGroupTakesMpisRankAndSize) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "init_process_group", &out), 0) << out;
}

TEST_P(MpiProcessGroupTest, AGroupHeldUntilExitEndsTheJobCleanly) {
  std::string out;
  EXPECT_EQ(mpirun(GetParam(), "default_group_held_until_exit", &out), 0) << out;
  EXPECT_TRUE(test::has(out, "rank 0 leaves with its group")) << out;
}

INSTANTIATE_TEST_SUITE_P(Ranks, MpiProcessGroupTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// Without mpirun a process is a world of one (MPI's singleton start).
TEST(MpiProcessGroupSingleTest, OneRankAndArgumentErrors) {
  std::string out;
  const int rc = test::run_tool(g_self, "--rank-case one_rank_and_argument_errors", &out);
  EXPECT_EQ(rc, 0) << out;
}

TEST(MpiProcessGroupSingleTest, ALauncherEnvironmentThatDisagreesWithMpiIsRefused) {
  std::string out;
  EXPECT_EQ(test::run_tool(g_self, "--rank-case environment_mismatch", &out), 0) << out;
  EXPECT_TRUE(test::has(out, "mismatch refused")) << out;
}

// A rank that exits mid-job ends the job: mpirun reports it and ends the others, nobody hangs
// (the test's own timeout would catch a hang).
TEST(MpiProcessGroupFailureTest, ADeadRankEndsTheJob) {
  std::string out;
  const int rc = mpirun(3, "dead_rank", &out);
  EXPECT_NE(rc, 0) << out;
  EXPECT_TRUE(test::has(out, "rank 1 dies")) << out;
  EXPECT_FALSE(test::has(out, "finished without rank 1")) << out;
}

}  // namespace
}  // namespace distributed
}  // namespace dpe

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--rank-case") == 0) {
    const auto& c = dpe::distributed::cases();
    const auto it = c.find(argv[2]);
    if (it == c.end()) {
      std::cerr << "unknown rank case " << argv[2] << "\n";
      return 2;
    }
    try {
      it->second();
    } catch (const std::exception& e) {
      std::cerr << "rank case " << argv[2] << " failed: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  testing::InitGoogleTest(&argc, argv);
  dpe::distributed::g_self = argv[0];
  return RUN_ALL_TESTS();
}
