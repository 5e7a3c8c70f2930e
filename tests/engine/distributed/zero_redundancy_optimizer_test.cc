// ZeroRedundancyOptimizer: PyTorch's sorted-greedy partition; on 2 and 3 ranks (separate
// processes, Gloo) DDP with ZeRO(Adam) and ZeRO(SGD momentum) takes the same steps as DDP with
// the plain optimizer, holds only its shard's state, consolidates the plain optimizer's
// state_dict, loads it back, and names what is wrong (not consolidated, a bad entry).
#include "engine/distributed/zero_redundancy_optimizer.h"

#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/device/memory_category.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/spawn.h"
#include "engine/nn/activation.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"
#include "tests/engine/distributed/rank_test_util.h"
#include "tests/engine/distributed/store_server_process.h"

namespace dpe {
namespace {

using distributed::partition_parameters;
using distributed::spawn;
using distributed::ZeroRedundancyOptimizer;
using test::error_of;
using test::join_job;
using test::rel_error;

// The expected owners follow PyTorch's _partition_parameters by hand: sorted by numel descending
// (stable), each to the first least-loaded rank.
TEST(ZeroPartitionTest, MatchesPyTorchsSortedGreedyAssignment) {
  const std::vector<int64_t> numels{10, 50, 50, 3, 100, 7};
  // 2 ranks: 100->0, 50->1, 50->1, 10->0 (tie 100:100), 7->1, 3->1 (110:110 at the end).
  EXPECT_EQ(partition_parameters(numels, 2), (std::vector<int>{0, 1, 1, 1, 0, 1}));
  // 3 ranks: 100->0, 50->1, 50->2, 10->1, 7->2, 3->2.
  EXPECT_EQ(partition_parameters(numels, 3), (std::vector<int>{1, 1, 2, 2, 0, 2}));
  // More ranks than parameters: ranks 6 and 7 own nothing.
  EXPECT_EQ(partition_parameters(numels, 8), (std::vector<int>{3, 1, 2, 5, 0, 4}));
  EXPECT_EQ(partition_parameters(numels, 1), (std::vector<int>(6, 0)));
}

constexpr int64_t kGlobalBatch = 12;

// Sizes 320, 16, 192, 12, 120, 10: a partition with several parameters per rank.
std::shared_ptr<Module> make_model() {
  Generator g(5);
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Linear>(20, 16, g));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(16, 12, g));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Linear>(12, 10, g));
  return s;
}

// A different global batch for every step; this rank's slice of it.
std::pair<Tensor, Tensor> batch(int step, int rank, int n) {
  Generator data(100 + step);
  Tensor x = randn(Shape{kGlobalBatch, 20}, data);
  std::vector<int64_t> labels(kGlobalBatch);
  for (auto& l : labels) l = static_cast<int64_t>(data.next_u64() % 10);
  Tensor y = Tensor::from_vector(labels, Shape{kGlobalBatch});
  const int64_t local = kGlobalBatch / n;
  return {x.narrow(0, rank * local, local).contiguous(),
          y.narrow(0, rank * local, local).contiguous()};
}

// A model under DDP and its optimizer, stepped on the shared batches.
struct Run {
  std::shared_ptr<Module> model = make_model();
  std::shared_ptr<DistributedDataParallel> ddp;
  std::unique_ptr<optim::Optimizer> opt;
  int steps = 0;

  explicit Run(std::shared_ptr<distributed::ProcessGroup> group)
      : ddp(std::make_shared<DistributedDataParallel>(model, group)) {}

  float step(int rank, int n) {
    const auto [x, y] = batch(steps++, rank, n);
    Tensor loss = ops::cross_entropy((*ddp)(x), y);
    backward(loss);
    opt->step();
    opt->zero_grad();
    return distributed::reduce_value(loss.detach().clone()).item();
  }
};

void expect_same_parameters(Module& a, Module& b, const std::string& what) {
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double e = rel_error(pa[i].to_vector<float>(), pb[i].to_vector<float>());
    RANK_CHECK(e < 1e-6, what << ": parameter " << i << " relative error " << e);
  }
}

void expect_same_state(const StateDict& got, const StateDict& want, const std::string& what) {
  RANK_CHECK(got.size() == want.size(), what << ": " << got.size() << " vs " << want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    RANK_CHECK(got[k].first == want[k].first, what << ": key " << k << " is '" << got[k].first
                                                    << "', expected '" << want[k].first << "'");
    const Tensor& g = got[k].second;
    const Tensor& w = want[k].second;
    RANK_CHECK(g.dtype() == w.dtype() && g.shape() == w.shape(), what << ": " << want[k].first);
    if (w.dtype() == DType::kInt64) {
      RANK_CHECK(g.to_vector<int64_t>() == w.to_vector<int64_t>(), what << ": " << want[k].first);
    } else {
      const double e = rel_error(g.to_vector<float>(), w.to_vector<float>());
      RANK_CHECK(e < 1e-6, what << ": " << want[k].first << " relative error " << e);
    }
  }
}

using Factory = ZeroRedundancyOptimizer::OptimizerFactory;

Factory adam_factory() {
  return [](std::vector<Tensor> p) {
    optim::AdamOptions o;
    o.lr = 0.01f;
    return std::make_unique<optim::Adam>(std::move(p), o);
  };
}

Factory sgd_factory() {
  return [](std::vector<Tensor> p) {
    optim::SgdOptions o;
    o.lr = 0.05f;
    o.momentum = 0.9f;
    return std::make_unique<optim::SGD>(std::move(p), o);
  };
}

// ZeRO over `factory` against the factory's plain optimizer: equal losses and parameters after
// 1 and 4 steps, each rank's state only its shard's, the consolidated state equal to the plain
// one on every rank it is consolidated to, and a fresh ZeRO that loads it continues as the plain
// optimizer does.
void run_equivalence(int n, const Factory& factory) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, n);
        Run plain(group), zero(group);
        plain.opt = factory(plain.model->parameters());
        zero.opt = std::make_unique<ZeroRedundancyOptimizer>(zero.model->parameters(), factory,
                                                              group);
        auto& z = static_cast<ZeroRedundancyOptimizer&>(*zero.opt);
        for (int s = 1; s <= 4; ++s) {
          const float lp = plain.step(rank, n), lz = zero.step(rank, n);
          RANK_CHECK(std::abs(lp - lz) <= 1e-6f * std::abs(lp), "step " << s << ": loss " << lz
                                                                        << " vs " << lp);
          expect_same_parameters(*zero.model, *plain.model, "step " + std::to_string(s));
        }

        // Only this rank's shard has state, all of it optimizer-state memory.
        const auto params = zero.model->parameters();
        int64_t shard_numel = 0, total_numel = 0;
        for (size_t i : z.shard(rank)) shard_numel += params[i].numel();
        for (const Tensor& p : params) total_numel += p.numel();
        int64_t state_floats = 0, plain_floats = 0;
        if (z.local_optimizer()) {
          for (const auto& [name, t] : z.local_optimizer()->state_dict()) {
            if (t.dtype() != DType::kFloat32) continue;  // Adam's step counts, made on demand
            RANK_CHECK(t.memory_category() == MemoryCategory::kOptimizerState, name);
            state_floats += t.numel();
          }
        }
        for (const auto& [name, t] : plain.opt->state_dict()) {
          if (t.dtype() == DType::kFloat32) plain_floats += t.numel();
        }
        // Adam holds two moments a parameter, SGD one buffer: the same factor for both.
        RANK_CHECK(state_floats * total_numel == plain_floats * shard_numel,
                   state_floats << " state floats for a shard of " << shard_numel << " of "
                                << total_numel << " (plain: " << plain_floats << ")");
        RANK_CHECK(shard_numel < total_numel, "rank " << rank << " holds every parameter");

        // The consolidated state, to every rank in turn, equals the plain optimizer's.
        const std::string error = error_of([&] { z.state_dict(); });
        RANK_CHECK(error.find("Optimizer state has not been consolidated on this rank. Please "
                              "call `consolidate_state_dict(to=" +
                              std::to_string(rank) + ")` on all ranks") != std::string::npos,
                   error);
        StateDict full;
        for (int to = 0; to < n; ++to) {
          z.consolidate_state_dict(to);
          if (to == rank) full = z.state_dict();
          RANK_CHECK((to == rank) == error_of([&] { z.state_dict(); }).empty(), "to " << to);
        }
        expect_same_state(full, plain.opt->state_dict(), "consolidated");

        // A fresh ZeRO on a copy of the model loads it and continues as the plain optimizer.
        Run loaded(group);
        const auto from = zero.model->parameters();
        auto to_params = loaded.model->parameters();
        for (size_t i = 0; i < from.size(); ++i) to_params[i].copy_(from[i]);
        loaded.opt = std::make_unique<ZeroRedundancyOptimizer>(to_params, factory, group);
        loaded.opt->load_state_dict(full);
        loaded.steps = zero.steps;
        for (int s = 0; s < 2; ++s) {
          const float lp = plain.step(rank, n), lz = zero.step(rank, n), ll = loaded.step(rank, n);
          RANK_CHECK(lz == lp && ll == lp, "after loading: " << ll << ", " << lz << " vs " << lp);
          expect_same_parameters(*loaded.model, *plain.model, "loaded");
          expect_same_parameters(*zero.model, *plain.model, "continued");
        }
        // A step makes the consolidation stale.
        RANK_CHECK(!error_of([&] { z.state_dict(); }).empty(), "state_dict after a step");
        distributed::destroy_process_group();
      },
      n);
}

class ZeroEquivalenceTest : public ::testing::TestWithParam<int> {};

TEST_P(ZeroEquivalenceTest, AdamEqualsPlainAdam) { run_equivalence(GetParam(), adam_factory()); }

TEST_P(ZeroEquivalenceTest, SgdMomentumEqualsPlainSgd) {
  run_equivalence(GetParam(), sgd_factory());
}

INSTANTIATE_TEST_SUITE_P(Ranks, ZeroEquivalenceTest, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

// A model of two parameters on three ranks: rank 2 owns nothing, yet joins every broadcast;
// a scheduler's lr reaches the local optimizers.
TEST(ZeroEmptyShardTest, ARankWithoutParametersStillTakesPart) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 3);
        auto make = [] {
          Generator g(3);
          return std::make_shared<nn::Linear>(20, 10, g);
        };
        auto plain_model = make(), zero_model = make();
        DistributedDataParallel plain_ddp(plain_model, group), zero_ddp(zero_model, group);
        auto plain = sgd_factory()(plain_model->parameters());
        ZeroRedundancyOptimizer zero(zero_model->parameters(), sgd_factory(), group);
        RANK_CHECK(zero.shard(2).empty() && (rank == 2) == (zero.local_optimizer() == nullptr),
                   "");
        RANK_CHECK(zero.lr() == 0.05f, zero.lr());
        for (int s = 0; s < 3; ++s) {
          plain->set_lr(0.05f / (s + 1));
          zero.set_lr(0.05f / (s + 1));
          for (auto* m : {&plain_ddp, &zero_ddp}) {
            const auto [x, y] = batch(s, rank, 3);
            backward(ops::cross_entropy((*m)(x), y));
          }
          plain->step();
          zero.step();
          plain->zero_grad();
          zero.zero_grad();
          expect_same_parameters(*zero_model, *plain_model, "step " + std::to_string(s));
        }
        zero.consolidate_state_dict(2);  // the rank without a shard receives everything
        if (rank == 2) expect_same_state(zero.state_dict(), plain->state_dict(), "on rank 2");
        distributed::destroy_process_group();
      },
      3);
}

// A bad entry fails on its owner with the global key and index; a malformed key on every rank.
TEST(ZeroLoadTest, ErrorsNameTheGlobalKey) {
  test::StoreServerProcess server;
  const int port = server.port();
  spawn(
      [&](int rank) {
        auto group = join_job(port, rank, 2);
        auto model = make_model();
        const auto params = model->parameters();
        ZeroRedundancyOptimizer zero(params, adam_factory(), group);
        // Parameter 2 (192 elements) is rank 1's largest: its local parameter 0.
        RANK_CHECK(zero.owner(2) == 1 && zero.shard(1) == (std::vector<size_t>{2, 4, 1, 5}),
                   "owner " << zero.owner(2));
        const StateDict bad{
            {"state.2.exp_avg", Tensor::zeros(Shape{3})},
            {"state.2.exp_avg_sq", Tensor::zeros(params[2].shape())},
            {"state.2.step", Tensor::from_vector(std::vector<int64_t>{1}, Shape{})}};
        const std::string e = error_of([&] { zero.load_state_dict(bad); });
        if (rank == 1) {
          RANK_CHECK(e.find("'state.2.exp_avg' is float32 torch.Size([3]), not float32 "
                            "torch.Size([12, 16]) as parameter 2") != std::string::npos &&
                         e.find("rank 1") != std::string::npos,
                     e);
        } else {
          RANK_CHECK(e.empty(), e);
        }
        const std::string m =
            error_of([&] { zero.load_state_dict({{"state.x.step", Tensor::zeros(Shape{1})}}); });
        RANK_CHECK(m.find("unexpected key 'state.x.step'") != std::string::npos, m);
        distributed::destroy_process_group();
      },
      2);
}

}  // namespace
}  // namespace dpe
