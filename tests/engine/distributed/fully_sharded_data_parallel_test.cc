// FullyShardedDataParallel with 2 and 3 ranks in separate processes on 127.0.0.1, one host device
// each, on a small GPT wrapped per transformer block: several Adam steps of FULL_SHARD and
// SHARD_GRAD_OP, with and without activation checkpointing, equal DDP's (losses, every parameter),
// as ZeRO-1 with checkpointing does; each rank keeps 1/world of the parameters;
// the full state dict is the unwrapped model's and loads back; the optimizer's state converts to
// the plain optimizer's layout and back; the errors for a unit that missed gradients and for
// parameters read outside forward.
#include "engine/distributed/fully_sharded_data_parallel.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/distributed/zero_redundancy_optimizer.h"
#include "engine/nn/checkpoint.h"
#include "engine/nn/linear.h"
#include "engine/optim/adam.h"
#include "models/gpt.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

using distributed::spawn;
using test::error_of;
using test::join_job;
using models::Gpt;
using models::GptConfig;
using models::lm_loss;

GptConfig tiny_gpt() {
  GptConfig c;
  c.name = "tiny";
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 37;  // 37 * 16 + ... : no unit divides evenly by 2 or 3 ranks
  return c;
}

std::shared_ptr<Gpt> make_gpt(uint64_t seed) {
  Generator gen;
  gen.manual_seed(seed);
  return std::make_shared<Gpt>(tiny_gpt(), gen);
}


// This rank's batch of step `step`: different on every rank and step.
std::pair<Tensor, Tensor> batch(int rank, int step) {
  Generator gen;
  gen.manual_seed(1000 + 17 * rank + step);
  std::vector<int64_t> tokens(2 * 8), targets(2 * 8);
  for (auto& t : tokens) t = static_cast<int64_t>(gen.next_u64() % 37);
  for (auto& t : targets) t = static_cast<int64_t>(gen.next_u64() % 37);
  return {Tensor::from_vector(tokens, Shape{2, 8}), Tensor::from_vector(targets, Shape{2, 8})};
}

float train_step(Module& model, optim::Optimizer& opt, int rank, int step) {
  const auto [x, y] = batch(rank, step);
  Tensor loss = lm_loss(model(x), y);
  backward(loss);
  opt.step();
  opt.zero_grad();
  return loss.item();
}

optim::AdamOptions adam_options() {
  optim::AdamOptions o;
  o.lr = 1e-2f;
  o.weight_decay = 0.01f;
  o.adamw = true;
  return o;
}

void expect_close(const StateDict& got, const StateDict& want, float tol, const std::string& what) {
  RANK_CHECK(got.size() == want.size(), what << ": " << got.size() << " vs " << want.size()
                                             << " entries");
  for (size_t i = 0; i < got.size(); ++i) {
    RANK_CHECK(got[i].first == want[i].first,
               what << ": entry " << i << " is " << got[i].first << ", expected " << want[i].first);
    RANK_CHECK(got[i].second.shape() == want[i].second.shape(), what << ": " << got[i].first);
    if (got[i].second.dtype() == DType::kInt64) {
      RANK_CHECK(got[i].second.to_vector<int64_t>() == want[i].second.to_vector<int64_t>(),
                 what << ": " << got[i].first);
      continue;
    }
    const auto a = got[i].second.to_vector<float>(), b = want[i].second.to_vector<float>();
    for (size_t j = 0; j < a.size(); ++j) {
      RANK_CHECK(std::abs(a[j] - b[j]) <= tol * (1.0f + std::abs(b[j])),
                 what << ": " << got[i].first << "[" << j << "] " << a[j] << " vs " << b[j]);
    }
  }
}

class FsdpTest : public ::testing::TestWithParam<int> {};

// Three AdamW steps of both strategies, with and without activation checkpointing (every block
// recomputed in backward, the checkpoint inside each FSDP unit), against DDP on the same
// per-rank batches.
TEST_P(FsdpTest, EqualsDdpForBothStrategies) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto pg = join_job(port, rank, n);
        auto ddp_model = make_gpt(7);
        DistributedDataParallel ddp(ddp_model, pg);
        optim::Adam ddp_adam(ddp_model->parameters(), adam_options());
        std::vector<float> ddp_losses;
        for (int s = 0; s < 3; ++s) ddp_losses.push_back(train_step(ddp, ddp_adam, rank, s));
        for (const auto& [strategy, checkpointed] :
             {std::pair{ShardingStrategy::kFullShard, false},
              std::pair{ShardingStrategy::kShardGradOp, false},
              std::pair{ShardingStrategy::kFullShard, true},
              std::pair{ShardingStrategy::kShardGradOp, true}}) {
          const std::string what = std::string(sharding_strategy_name(strategy)) +
                                   (checkpointed ? " + activation checkpointing" : "");
          FullyShardedDataParallelOptions o;
          o.sharding_strategy = strategy;
          o.auto_wrap_policy = models::is_gpt_block;
          // Rank-dependent seeds: the construction must take rank 0's parameters.
          auto gpt = make_gpt(7 + 100 * rank);
          if (checkpointed) {
            RANK_CHECK(nn::apply_activation_checkpointing(*gpt, models::is_gpt_block) == 2,
                       "two blocks checkpointed");
          }
          FullyShardedDataParallel fsdp(gpt, pg, o);
          RANK_CHECK((fsdp.unit_names() == std::vector<std::string>{"", "h.0", "h.1"}),
                     what << ": units");
          int64_t total = 0, kept = 0;
          for (const auto& [name, p] : make_gpt(7)->named_parameters()) total += p.numel();
          for (const Tensor& p : fsdp.parameters()) kept += p.numel();
          RANK_CHECK(kept * n >= total && kept * n < total + 3 * n,
                     what << ": this rank keeps " << kept << " of " << total << " elements");
          optim::Adam adam(fsdp.parameters(), adam_options());
          for (int s = 0; s < 3; ++s) {
            const float loss = train_step(fsdp, adam, rank, s);
            RANK_CHECK(std::abs(loss - ddp_losses[s]) <= 1e-5f * std::abs(ddp_losses[s]),
                       what << ": step " << s << " loss " << loss << " vs DDP " << ddp_losses[s]);
          }
          expect_close(fsdp.full_state_dict(), ddp_model->state_dict(), 1e-5f,
                       what + " parameters");
          expect_close(fsdp.full_optim_state_dict(adam.state_dict()), ddp_adam.state_dict(),
                       1e-4f, what + " optimizer state");
        }
      },
      n);
}

// ZeRO-1 (ZeroRedundancyOptimizer under DDP) with every block checkpointed takes DDP's steps: the
// same losses, and the same parameters and consolidated optimizer state after three steps.
TEST_P(FsdpTest, ZeroOneWithCheckpointingEqualsDdp) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto pg = join_job(port, rank, n);
        auto plain = make_gpt(7);
        DistributedDataParallel ddp(plain, pg);
        optim::Adam adam(plain->parameters(), adam_options());
        auto sharded = make_gpt(7);
        RANK_CHECK(nn::apply_activation_checkpointing(*sharded, models::is_gpt_block) == 2,
                   "two blocks checkpointed");
        DistributedDataParallel zero_ddp(sharded, pg);
        distributed::ZeroRedundancyOptimizer zero(
            sharded->parameters(),
            [](std::vector<Tensor> shard) {
              return std::make_unique<optim::Adam>(std::move(shard), adam_options());
            },
            pg);
        for (int s = 0; s < 3; ++s) {
          const float want = train_step(ddp, adam, rank, s);
          const float got = train_step(zero_ddp, zero, rank, s);
          RANK_CHECK(std::abs(got - want) <= 1e-5f * std::abs(want),
                     "step " << s << " loss " << got << " vs DDP " << want);
        }
        expect_close(sharded->state_dict(), plain->state_dict(), 1e-5f, "ZeRO-1 parameters");
        zero.consolidate_state_dict(0);
        if (rank == 0) {
          expect_close(zero.state_dict(), adam.state_dict(), 1e-4f, "ZeRO-1 optimizer state");
        }
      },
      n);
}

// The full state dicts load into a differently initialised FSDP (and its optimizer), which then
// takes the same next step as the original.
TEST_P(FsdpTest, FullStateDictsRoundTrip) {
  const int n = GetParam();
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto pg = join_job(port, rank, n);
        FullyShardedDataParallelOptions o;
        o.auto_wrap_policy = models::is_gpt_block;
        FullyShardedDataParallel a(make_gpt(3), pg, o);
        optim::Adam adam_a(a.parameters(), adam_options());
        train_step(a, adam_a, rank, 0);
        const StateDict model = a.full_state_dict();
        const StateDict optimizer = a.full_optim_state_dict(adam_a.state_dict());
        RANK_CHECK(model.size() == make_gpt(3)->state_dict().size(), "model keys");

        FullyShardedDataParallel b(make_gpt(99), pg, o);
        optim::Adam adam_b(b.parameters(), adam_options());
        b.load_full_state_dict(model);
        adam_b.load_state_dict(b.shard_optim_state_dict(optimizer));
        const float la = train_step(a, adam_a, rank, 1), lb = train_step(b, adam_b, rank, 1);
        RANK_CHECK(la == lb, "loss after loading " << lb << " vs " << la);
        expect_close(b.full_state_dict(), a.full_state_dict(), 0.0f, "after a step");

        StateDict wrong = model;
        wrong.pop_back();
        wrong.emplace_back("h.9.bogus", Tensor::zeros({1}));
        const std::string e = error_of([&] { b.load_full_state_dict(wrong); });
        RANK_CHECK(e.find("missing key: ln_f.bias") != std::string::npos &&
                       e.find("unexpected key: h.9.bogus") != std::string::npos,
                   e);
        const std::string e2 = error_of(
            [&] { b.shard_optim_state_dict({{"state.999.exp_avg", Tensor::zeros({1})}}); });
        RANK_CHECK(e2.find("state.999.exp_avg") != std::string::npos, e2);
      },
      n);
}

// Uses one of its two layers: "unused" never receives a gradient.
class HalfUsed : public Cloneable<HalfUsed> {
 public:
  explicit HalfUsed(Generator& gen) {
    register_module("used", std::make_shared<nn::Linear>(4, 4, gen));
    register_module("unused", std::make_shared<nn::Linear>(4, 4, gen));
  }
  Tensor forward(const Tensor& x) override { return child("used").forward(x); }
  std::string repr() const override { return "HalfUsed"; }
};

// A unit whose parameters only partly reached the loss makes the next forward throw, naming the
// unit and the parameter; a parameter read outside forward and backward names the released
// storage; forward under no_grad frees what it gathered.
TEST(FsdpErrors, MissedGradientsAndReleasedParameters) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto pg = join_job(port, rank, 2);
        auto gpt = make_gpt(5);
        FullyShardedDataParallelOptions o;
        o.auto_wrap_policy = models::is_gpt_block;
        FullyShardedDataParallel fsdp(gpt, pg, o);
        std::string e = error_of([&] { gpt->find("h.0.mlp.c_fc.weight").to_vector<float>(); });
        RANK_CHECK(e.find("released") != std::string::npos, e);
        {
          NoGradGuard no_grad;
          fsdp(batch(rank, 0).first);
        }
        e = error_of([&] { gpt->find("wte.weight").to_vector<float>(); });
        RANK_CHECK(e.find("released") != std::string::npos, "after a no_grad forward: " << e);

        Generator gen;
        gen.manual_seed(1);
        FullyShardedDataParallel half(std::make_shared<HalfUsed>(gen), pg);
        const Tensor x = Tensor::full({2, 4}, 1.0f);
        backward(ops::sum(half(x)));
        e = error_of([&] { half(x); });
        RANK_CHECK(e.find("unit '<root>' received gradients for 2 of its 4 parameters") !=
                           std::string::npos &&
                       e.find("unused.weight") != std::string::npos,
                   e);
      },
      2);
}

INSTANTIATE_TEST_SUITE_P(Ranks, FsdpTest, ::testing::Values(2, 3));

}  // namespace
}  // namespace dpe
