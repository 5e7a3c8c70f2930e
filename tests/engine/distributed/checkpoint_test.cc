// Seed 004's demo_checkpoint with 2 and 3 ranks: rank 0 saves the DDP model's state dict, every
// rank loads it onto its own device into a differently initialised model; a failed save is an
// error on every rank; scaled_lr.
#include "engine/distributed/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "models/toy_model.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

using distributed::spawn;
using distributed::TCPStore;
using test::error_of;
using test::join_job;

std::string temp_path(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp ? tmp : "/tmp") + "/" + name + "_" + std::to_string(::getpid());
}

class CheckpointTest : public ::testing::TestWithParam<int> {};

TEST_P(CheckpointTest, SaveOnRankZeroLoadOnEveryRank) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  const std::string path = temp_path("ddp_checkpoint_" + std::to_string(n)) + ".safetensors";
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, n);
        const Device device;  // this process's one host device
        Generator g(rank + 1);
        auto model = std::make_shared<models::ToyModel>(g);
        DistributedDataParallel ddp(model, group);
        // One step, so the saved values are not just the broadcast initialisation.
        optim::SGD sgd(ddp.parameters(), optim::SgdOptions{});
        Generator data(8 + rank);
        backward(ops::mse_loss(ddp(randn({20, 10}, data)), randn({20, 5}, data)));
        sgd.step();
        distributed::save_on_main(path, ddp.state_dict(), group, {{"epoch", "1"}});
        RANK_CHECK(::access(path.c_str(), R_OK) == 0, "the file exists once save_on_main returns");

        const StateDict loaded = distributed::load_everywhere(path, device);
        RANK_CHECK(loaded.size() == ddp.state_dict().size(), loaded.size());
        RANK_CHECK(loaded.front().first == "module.net1.weight", loaded.front().first);
        Generator other(100 + rank);
        auto fresh = std::make_shared<models::ToyModel>(other);
        DistributedDataParallel ddp2(fresh);  // the default group
        ddp2.load_state_dict(loaded);
        for (const auto& [name, t] : ddp.state_dict()) {
          RANK_CHECK(ddp2.find(name).device() == device, name);
          RANK_CHECK(ddp2.find(name).to_vector<float>() == t.to_vector<float>(), name);
        }
        // The unwrapped model reads the same file without the prefix.
        models::ToyModel bare(other);
        bare.load_state_dict(strip_prefix(loaded));
        group->barrier();  // everyone has read it before rank 0 removes it
        if (rank == 0) ::unlink(path.c_str());
      },
      n);
}

INSTANTIATE_TEST_SUITE_P(Ranks, CheckpointTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(CheckpointFailureTest, AFailedSaveIsAnErrorOnEveryRank) {
  test::StoreServerProcess server;
  const int port = server.port();
  const std::string path = temp_path("no_such_dir") + "/model.safetensors";
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        Tensor t = Tensor::ones({2});
        const std::string e = error_of([&] { distributed::save_on_main(path, {{"w", t}}, group); });
        if (rank == 0) {
          RANK_CHECK(e.find("save_on_main (rank 0)") != std::string::npos, e);
          RANK_CHECK(e.find(path) != std::string::npos, e);
        } else {
          RANK_CHECK(e.find("rank 0 failed to write " + path) != std::string::npos, e);
        }
      },
      2);
}

TEST(ScaledLrTest, MultipliesByTheWorldSize) {
  EXPECT_FLOAT_EQ(distributed::scaled_lr(0.01f, 4), 0.04f);
  EXPECT_FLOAT_EQ(distributed::scaled_lr(0.01f), 0.01f);  // no group: one process
  EXPECT_NE(error_of([] { distributed::scaled_lr(0.1f, 0); }).find("world size 0"),
            std::string::npos);
}

}  // namespace
}  // namespace dpe
