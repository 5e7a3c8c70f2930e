// DistributedDataParallel over NCCL, one GPU per rank: one DDP step equals one single-process step
// on the global batch (the Gloo test's check, on CUDA), on 2 ranks where there are 2 GPUs and on
// one rank (the reducer's buckets all-reduced by NCCL over a world of one) on a single GPU. NCCL
// refuses two ranks on one GPU, so logical devices (DPE_CUDA_LOGICAL_DEVICES) do not count.
// Skips without a GPU.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/device/runtime.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/distributed/tcp_store.h"
#include "engine/optim/sgd.h"
#include "models/mlp.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

// CUDA must not be initialised in a process that forks ranks, so a child counts the GPUs.
int count_gpus_in_a_child() {
  const pid_t pid = fork();
  if (pid == 0) _exit(std::min(Runtime::get().device_count(DeviceType::kCuda), 100));
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

std::vector<std::vector<float>> grads_after_step(Module& model, Module& inner, const Tensor& x,
                                                 const Tensor& y) {
  optim::SgdOptions o;
  o.lr = 0.05f;
  optim::SGD sgd(inner.parameters(), o);
  backward(ops::cross_entropy(model(x), y));
  std::vector<std::vector<float>> out;
  for (const Tensor& p : inner.parameters()) out.push_back(p.grad().to_vector<float>());
  return out;
}

TEST(DdpNcclTest, OneStepEqualsOneProcessOnTheGlobalBatch) {
  if (const char* logical = std::getenv("DPE_CUDA_LOGICAL_DEVICES"); logical && *logical)
    GTEST_SKIP() << "DPE_CUDA_LOGICAL_DEVICES=" << logical << ": NCCL needs one GPU per rank";
  const int world = std::min(count_gpus_in_a_child(), 2);
  if (world < 1) GTEST_SKIP() << "no CUDA device to run on";
  const int64_t per_rank = 8 / world;
  test::StoreServerProcess server;
  const int port = server.port();
  distributed::spawn(
      [&](int rank) {
        // What the launcher would set: the group reads LOCAL_RANK to pick cuda:LOCAL_RANK.
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        const Device gpu(DeviceType::kCuda, rank);
        auto store = std::make_shared<distributed::TCPStore>("127.0.0.1", port, false,
                                                             std::chrono::seconds(30));
        auto group =
            distributed::init_process_group("nccl", store, world, rank, std::chrono::seconds(30));
        Generator data(7);
        Tensor x = randn({8, 784}, data, gpu);
        std::vector<int64_t> labels(8);
        for (auto& l : labels) l = static_cast<int64_t>(data.next_u64() % 10);
        Tensor y = Tensor::from_vector(labels, {8}, gpu);
        Generator g0(100);
        auto single = std::make_shared<models::Mlp>(g0);
        single->to(gpu);
        const auto ref = grads_after_step(*single, *single, x, y);
        Generator gr(100 + rank);
        auto model = std::make_shared<models::Mlp>(gr);
        model->to(gpu);
        DistributedDataParallel ddp(model, group);
        const auto got =
            grads_after_step(ddp, *model, x.narrow(0, per_rank * rank, per_rank).contiguous(),
                             y.narrow(0, per_rank * rank, per_rank).contiguous());
        for (size_t i = 0; i < ref.size(); ++i) {
          const double e = test::rel_error(got[i], ref[i]);
          RANK_CHECK(e < 1e-5, "gradient " << i << " relative error " << e);
        }
        distributed::destroy_process_group();
      },
      world);
}

}  // namespace
}  // namespace dpe
