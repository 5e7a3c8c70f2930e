// StateIo (tools/train_lib/state_io.h): a run that is not sharded reads and loads the bare model's
// and its optimizer's state dicts, under their own names whatever wraps the model, and is not
// collective. (FSDP's collective state dicts are checked by //tests/tools:train_sharded_cli_test.)
#include "tools/train_lib/state_io.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/nn/linear.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "engine/tensor/random.h"
#include "tests/tools/train_lib/train_test_util.h"

namespace dpe::tools {
namespace {

using train_test::expect_same_state;
using train_test::keys_of;

// A Linear(3, 2) seeded by `seed` and its SGD with momentum, one step taken, so that the
// optimizer holds state.
struct Stepped {
  explicit Stepped(uint64_t seed) : gen(seed), model(std::make_shared<nn::Linear>(3, 2, gen)) {
    optim::SgdOptions o;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    opt = std::make_unique<optim::SGD>(model->parameters(), o);
    backward(ops::mse_loss(model->forward(randn({4, 3}, gen)), randn({4, 2}, gen)));
    opt->step();
  }
  Generator gen;
  std::shared_ptr<Module> model;
  std::unique_ptr<optim::Optimizer> opt;
};

TEST(StateIoTest, ARunThatIsNotShardedReadsAndLoadsTheBareState) {
  Stepped saved(1);
  const StateIo io = state_io(*saved.model, *saved.model, *saved.opt);
  EXPECT_FALSE(io.collective);
  expect_same_state(io.model_state(), saved.model->state_dict());
  EXPECT_EQ(keys_of(io.optimizer_state()),
            (std::vector<std::string>{"state.0.momentum_buffer", "state.1.momentum_buffer"}));
  Stepped loaded(2);
  const StateIo into = state_io(*loaded.model, *loaded.model, *loaded.opt);
  into.load_model(io.model_state());
  into.load_optimizer(io.optimizer_state());
  expect_same_state(loaded.model->state_dict(), saved.model->state_dict());
  expect_same_state(loaded.opt->state_dict(), saved.opt->state_dict());
}

// DataParallel runs the forward; the files keep the bare model's names (no "module." prefix).
TEST(StateIoTest, AWrapperLeavesTheBareModelsNames) {
  Stepped saved(1);
  DataParallel net(saved.model, std::vector<Device>{Device()});
  const StateIo io = state_io(*saved.model, net, *saved.opt);
  EXPECT_FALSE(io.collective);
  EXPECT_EQ(keys_of(io.model_state()), (std::vector<std::string>{"weight", "bias"}));
}

// with_grad_scaler: the scaler's entries beside the optimizer's under grad_scaler., read back
// into the scaler and kept from the optimizer; a state without them leaves the scaler as it was.
TEST(StateIoTest, AGradScalerTravelsBesideTheOptimizer) {
  Stepped a(1), b(2);
  optim::GradScaler sa(optim::GradScalerOptions{1024.0f}), sb;
  const StateIo io_a = with_grad_scaler(state_io(*a.model, *a.model, *a.opt), sa);
  const StateIo io_b = with_grad_scaler(state_io(*b.model, *b.model, *b.opt), sb);
  const StateDict saved = io_a.optimizer_state();
  std::vector<std::string> keys = keys_of(saved);
  EXPECT_NE(std::find(keys.begin(), keys.end(), "grad_scaler.scale"), keys.end());
  EXPECT_NE(std::find(keys.begin(), keys.end(), "state.0.momentum_buffer"), keys.end());
  io_b.load_optimizer(saved);
  EXPECT_EQ(sb.get_scale(), 1024.0f);
  expect_same_state(b.opt->state_dict(), a.opt->state_dict());
  optim::GradScaler fresh;
  with_grad_scaler(state_io(*b.model, *b.model, *b.opt), fresh)
      .load_optimizer(a.opt->state_dict());  // an fp32 run's checkpoint
  EXPECT_EQ(fresh.get_scale(), 65536.0f);
}

}  // namespace
}  // namespace dpe::tools
