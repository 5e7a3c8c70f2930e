// Activation checkpointing under DistributedDataParallel, 2 ranks in separate processes: a tiny GPT
// whose blocks are checkpointed (dropout on, so the seed replay runs) ends 2 SGD steps with the
// parameters of the same DDP run without checkpointing, with find_unused_parameters off and on
// (the checkpoint node's edges keep every parameter reachable) and with gradients as bucket views.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/nn/checkpoint.h"
#include "engine/optim/sgd.h"
#include "models/gpt.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

using test::join_job;
using test::rel_error;

models::GptConfig tiny_gpt() {
  models::GptConfig c = models::gpt_config("gpt-small");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 50;
  c.dropout = 0.1f;
  return c;
}

// Parameters after 2 DDP steps on this rank's share of fixed batches.
std::vector<std::vector<float>> two_steps(std::shared_ptr<distributed::ProcessGroup> group,
                                          int rank, bool checkpointed, bool find_unused,
                                          bool as_view) {
  Generator gen(100);
  auto model = std::make_shared<models::Gpt>(tiny_gpt(), gen);
  if (checkpointed) {
    RANK_CHECK(nn::apply_activation_checkpointing(*model, models::is_gpt_block) == 2, "");
  }
  DistributedDataParallelOptions o;
  o.find_unused_parameters = find_unused;
  o.gradient_as_bucket_view = as_view;
  DistributedDataParallel ddp(model, group, o);
  optim::SgdOptions so;
  so.lr = 0.1f;
  optim::SGD sgd(model->parameters(), so);
  Generator data(7 + rank);
  for (int step = 0; step < 2; ++step) {
    std::vector<int64_t> ids(3 * 9);
    for (auto& t : ids) t = static_cast<int64_t>(data.next_u64() % 50);
    const Tensor all = Tensor::from_vector(ids, {3, 9});
    const Tensor x = all.narrow(1, 0, 8).contiguous(), y = all.narrow(1, 1, 8).contiguous();
    sgd.zero_grad();
    backward(models::lm_loss(ddp(x), y));
    sgd.step();
  }
  std::vector<std::vector<float>> out;
  for (const Tensor& p : model->parameters()) out.push_back(p.to_vector<float>());
  return out;
}

TEST(ActivationCheckpointingDdpTest, TwoRanksEndWhereTheyEndWithoutCheckpointing) {
  test::StoreServerProcess server;
  const int port = server.port();
  distributed::spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        for (bool find_unused : {false, true}) {
          for (bool as_view : {false, true}) {
            const auto want = two_steps(group, rank, false, find_unused, as_view);
            const auto got = two_steps(group, rank, true, find_unused, as_view);
            RANK_CHECK(got.size() == want.size(), "");
            for (size_t i = 0; i < want.size(); ++i) {
              const double e = rel_error(got[i], want[i]);
              RANK_CHECK(e < 1e-6, "find_unused_parameters=" << find_unused << " as_view="
                                                             << as_view << ": parameter " << i
                                                             << " relative error " << e);
            }
          }
        }
        distributed::destroy_process_group();
      },
      2);
}

}  // namespace
}  // namespace dpe
