// init_process_group and the helpers: RANK/SLURM/OMPI parsing, clear errors for a missing
// MASTER_ADDR or the nccl backend, and 2- and 3-rank jobs through env://, tcp://, file:// and a
// caller's store, using reduce_value, barrier, is_main_process and destroy_process_group; a
// rendezvous that times out (DPE_RDZV_TIMEOUT) naming the missing rank, with progress lines.
#include "engine/distributed/distributed.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <string>

#include "engine/core/error.h"
#include "engine/distributed/spawn.h"
#include "engine/distributed/tcp_store.h"
#include "engine/tensor/tensor.h"
#include "tests/engine/distributed/store_server_process.h"
#include "tests/util/free_port.h"

namespace dpe {
namespace distributed {
namespace {

using std::chrono::milliseconds;

#define RANK_CHECK(cond, msg) \
  DPE_CHECK(cond, __FILE__ << ":" << __LINE__ << ": " << #cond << ": " << msg)

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::optional<DistEnv> parse(const std::map<std::string, std::string>& vars) {
  return dist_env_from_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

using test::free_port;

TEST(DistEnvTest, ReadsTorchrunSlurmAndOpenMpiVariables) {
  EXPECT_FALSE(parse({}).has_value());
  auto env = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->source, "RANK");

  env = parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->source, "SLURM");

  env = parse({{"OMPI_COMM_WORLD_RANK", "2"},
               {"OMPI_COMM_WORLD_SIZE", "3"},
               {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 3);
  EXPECT_EQ(env->source, "OMPI");

  // RANK wins over SLURM (a torchrun job inside an allocation), SLURM over OMPI.
  env = parse({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"SLURM_PROCID", "7"}, {"SLURM_NTASKS", "8"}});
  EXPECT_EQ(env->rank, 1);
  env = parse({{"SLURM_PROCID", "7"},
               {"SLURM_NTASKS", "8"},
               {"OMPI_COMM_WORLD_RANK", "0"},
               {"OMPI_COMM_WORLD_SIZE", "1"}});
  EXPECT_EQ(env->rank, 7);
  // No LOCAL_RANK: 0.
  EXPECT_EQ(parse({{"RANK", "0"}, {"WORLD_SIZE", "1"}})->local_rank, 0);
}

TEST(DistEnvTest, MalformedValuesNameTheVariable) {
  EXPECT_NE(error_of([] {
              parse({{"RANK", "two"}, {"WORLD_SIZE", "4"}});
            }).find("RANK='two'"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse({{"RANK", "0"}}); }).find("WORLD_SIZE is not"), std::string::npos);
  const std::string too_big = error_of([] {
    parse({{"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "4"}});
  });
  EXPECT_NE(too_big.find("SLURM_PROCID=4 is not below SLURM_NTASKS=4"), std::string::npos)
      << too_big;
}

TEST(InitProcessGroupTest, ClearErrorsBeforeAnyRendezvous) {
  ::unsetenv("MASTER_ADDR");
  ::unsetenv("MASTER_PORT");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  const std::string no_master = error_of([] { init_process_group("gloo", "env://", 1, 0); });
  EXPECT_NE(no_master.find("MASTER_ADDR"), std::string::npos) << no_master;
  const std::string no_rank = error_of([] { init_process_group("gloo", "env://"); });
  EXPECT_NE(no_rank.find("RANK"), std::string::npos) << no_rank;
  const std::string nccl = error_of([] { init_process_group("nccl", "env://", 1, 0); });
  EXPECT_NE(nccl.find("nccl backend requires CUDA devices"), std::string::npos) << nccl;
  // (The mpi backend is tested by mpi_process_group_test: here it would start MPI's threads in a
  // process whose later tests fork.)
  const std::string unknown = error_of([] { init_process_group("ucc", "env://", 1, 0); });
  EXPECT_NE(unknown.find("unknown backend 'ucc' (expected gloo, mpi or nccl)"), std::string::npos)
      << unknown;
  const std::string method = error_of([] { init_process_group("gloo", "redis://x", 1, 0); });
  EXPECT_NE(method.find("unsupported init_method"), std::string::npos) << method;
  EXPECT_FALSE(is_initialized());
  EXPECT_NE(error_of([] { default_group(); }).find("not initialized"), std::string::npos);
}

TEST(InitProcessGroupTest, HelpersAnswerForOneProcessWithoutAGroup) {
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_world_size(), 1);
  EXPECT_TRUE(is_main_process());
  barrier();
  destroy_process_group();  // a no-op
  // Tensors in a child: this process never starts the device runtime's threads before a fork.
  spawn(
      [](int) {
        Tensor loss = Tensor::scalar(2.5f);
        RANK_CHECK(reduce_value(loss, true).item() == 2.5f, "");
      },
      1);
}

// The body every rank of a job runs once its default group is up.
void check_job(int rank, int n) {
  RANK_CHECK(is_initialized(), "");
  RANK_CHECK(get_rank() == rank && get_world_size() == n, get_rank() << "/" << get_world_size());
  RANK_CHECK(is_main_process() == (rank == 0), "");
  RANK_CHECK(default_group()->backend() == "gloo", "");
  Tensor loss = Tensor::scalar(float(rank + 1));
  const float avg = reduce_value(loss, /*average=*/true).item();
  RANK_CHECK(std::abs(avg - (n + 1) / 2.0f) < 1e-6f, avg);
  RANK_CHECK(loss.item() == avg, "reduce_value works in place, as dist.all_reduce does");
  Tensor count = Tensor::scalar(1.0f);
  RANK_CHECK(reduce_value(count, /*average=*/false).item() == float(n), "");
  barrier();
  const std::string twice = error_of([] { init_process_group("gloo", "env://", 1, 0); });
  RANK_CHECK(twice.find("already initialized") != std::string::npos, twice);
  destroy_process_group();
  RANK_CHECK(!is_initialized() && get_world_size() == 1, "");
}

TEST(InitProcessGroupTest, EnvMethodWithThreeRanks) {
  const int port = free_port();
  spawn(
      [&](int rank) {
        ::setenv("MASTER_ADDR", "127.0.0.1", 1);
        ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", "3", 1);
        ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        auto group = init_process_group("gloo", "env://", -1, -1, milliseconds(10000));
        RANK_CHECK(group == default_group(), "");
        RANK_CHECK(get_local_rank() == rank, get_local_rank());
        check_job(rank, 3);
      },
      3);
}

// Rank 0 serves the store; when it dies, rank 1's next collective names it.
TEST(InitProcessGroupTest, LosingRankZeroIsNamed) {
  const int port = free_port();
  spawn(
      [&](int rank) {
        init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), 2, rank,
                           milliseconds(5000));
        Tensor v = Tensor::scalar(1.0f);
        reduce_value(v, false);
        if (rank == 0) ::_exit(0);
        const std::string error = error_of([&] {
          for (int k = 0; k < 3; ++k) reduce_value(v, false);
        });
        RANK_CHECK(error.find("lost connection to rank 0") != std::string::npos, error);
      },
      2);
}

TEST(InitProcessGroupTest, SlurmVariablesWithTcpMethod) {
  const int port = free_port();
  spawn(
      [&](int rank) {
        ::unsetenv("RANK");
        ::unsetenv("WORLD_SIZE");
        ::setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
        ::setenv("SLURM_NTASKS", "2", 1);
        ::setenv("SLURM_LOCALID", "0", 1);
        init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), -1, -1,
                           milliseconds(10000));
        check_job(rank, 2);
      },
      2);
}

TEST(InitProcessGroupTest, FileMethodWithTwoRanks) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp ? tmp : "/tmp") + "/file_store_" + std::to_string(::getpid());
  spawn(
      [&](int rank) {
        init_process_group("gloo", "file://" + dir, 2, rank, milliseconds(10000));
        check_job(rank, 2);
      },
      2);
}

TEST(InitProcessGroupTest, CallersStoreWithThreeRanks) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto store = std::make_shared<TCPStore>("127.0.0.1", port, false, milliseconds(10000));
        init_process_group("gloo", store, 3, rank, milliseconds(10000));
        // A second, independent group over the same store.
        auto other = new_process_group("gloo", store, 3, rank, milliseconds(10000), "other_pg");
        Tensor t = Tensor::scalar(float(rank));
        other->all_reduce(t, ReduceOp::kMax);
        RANK_CHECK(t.item() == 2.0f, t.item());
        check_job(rank, 3);
      },
      3);
}

// DPE_RDZV_TIMEOUT bounds the rendezvous; while it waits a rank prints, every
// DPE_RDZV_LOG_INTERVAL, who is missing, and the timeout's error names the missing rank. Rank 0
// waits for a rank 1 that never comes; a rank 1 waits for a rank 0 that never serves.
// A rank started with another world size than rank 0's fails naming both sizes, rather than with
// a rendezvous timeout (which the message would be after waiting for ranks that never come).
TEST(InitProcessGroupTest, WorldSizeMismatchIsNamed) {
  const int port = free_port();
  spawn(
      [&](int rank) {
        // Rank 0 waits for the rank of its own size that never comes: a short rendezvous.
        ::setenv("DPE_RDZV_TIMEOUT", "3", 1);
        const std::string error = error_of([&] {
          init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), rank == 0 ? 2 : 3,
                             rank);
        });
        if (rank == 1) {
          RANK_CHECK(error.find("rank 1 was started with world size 3, but rank 0 of the store at "
                                "127.0.0.1:" + std::to_string(port) + " has world size 2") !=
                         std::string::npos,
                     error);
        }
      },
      2);
}

// A rank of another job that reaches a store without a token fails at once naming both job ids
// (TORCHELASTIC_RUN_ID) and the store, before it registers, whatever its world size; no id is an
// id of its own. Process 0 is job-a's rank 0; processes 1 to 3 claim to be rank 1 of other jobs.
TEST(InitProcessGroupTest, AnotherJobsRankIsRefusedByATokenlessStore) {
  const int port = free_port();
  const std::string store = "the store at 127.0.0.1:" + std::to_string(port);
  spawn(
      [&](int process) {
        ::unsetenv("DPE_STORE_TOKEN");
        // Rank 0 waits for a rank 1 of its own job that never comes.
        ::setenv("DPE_RDZV_TIMEOUT", process == 0 ? "5" : "20", 1);
        if (process == 3) {
          ::unsetenv("TORCHELASTIC_RUN_ID");
        } else {
          ::setenv("TORCHELASTIC_RUN_ID", process == 0 ? "job-a" : "job-b", 1);
        }
        const int world_size = process == 2 ? 3 : 2;
        const std::string error = error_of([&] {
          init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), world_size,
                             process == 0 ? 0 : 1);
        });
        if (process == 0) return;
        const std::string mine =
            process == 3 ? "none (TORCHELASTIC_RUN_ID unset)" : std::string("'job-b'");
        RANK_CHECK(error.find("rank 1 belongs to job " + mine) != std::string::npos, error);
        RANK_CHECK(error.find("but " + store + " serves job 'job-a' (rank 0's)") !=
                       std::string::npos,
                   error);
        RANK_CHECK(!is_initialized(), "");
      },
      4);
}

TEST(InitProcessGroupTest, RendezvousTimeoutNamesTheMissingRank) {
  const int port = free_port();
  const int dead_port = free_port();
  spawn(
      [&](int) {
        ::setenv("DPE_RDZV_TIMEOUT", "x", 1);
        const std::string bad = error_of([&] {
          init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), 2, 0);
        });
        RANK_CHECK(bad.find("DPE_RDZV_TIMEOUT='x'") != std::string::npos, bad);
        ::setenv("DPE_RDZV_TIMEOUT", "1.5", 1);
        ::setenv("DPE_RDZV_LOG_INTERVAL", "0.4", 1);

        testing::internal::CaptureStderr();
        const auto start = std::chrono::steady_clock::now();
        const std::string error = error_of([&] {
          init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(port), 2, 0);
        });
        const auto took = std::chrono::steady_clock::now() - start;
        const std::string log = testing::internal::GetCapturedStderr();
        RANK_CHECK(error.find("rendezvous timed out after 1500 ms: rank 1 of 2 has not reached "
                              "the store at 127.0.0.1:" + std::to_string(port)) !=
                       std::string::npos,
                   error);
        RANK_CHECK(took < std::chrono::seconds(10), "took too long");
        RANK_CHECK(log.find("rank 0 waiting for rank 1 of 2") != std::string::npos, log);
        RANK_CHECK(!is_initialized(), "");

        testing::internal::CaptureStderr();
        const std::string error1 = error_of([&] {
          init_process_group("gloo", "tcp://127.0.0.1:" + std::to_string(dead_port), 2, 1);
        });
        const std::string log1 = testing::internal::GetCapturedStderr();
        RANK_CHECK(error1.find("could not connect to the store at 127.0.0.1:" +
                               std::to_string(dead_port) + " within 1500 ms") != std::string::npos,
                   error1);
        RANK_CHECK(log1.find("still waiting for the store at 127.0.0.1:" +
                             std::to_string(dead_port) + " (rank 0)") != std::string::npos,
                   log1);
      },
      1);
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
