// What a run computes with (tools/train_lib/model_and_optimizer.h): the model built by name from
// --seed (the image models with one input channel, a gpt model with the tokenizer's vocabulary),
// wrapped for the mode on its devices, and SGD or AdamW at the run's learning rate.
#include "tools/train_lib/model_and_optimizer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "engine/optim/adam.h"
#include "engine/optim/sgd.h"
#include "engine/parallel/data_parallel.h"
#include "tests/tools/train_lib/train_test_util.h"
#include "tools/common/train_distributed.h"

namespace dpe::tools {
namespace {

using train_test::small;
using train_test::tiny_gpt;
using train_test::expect_same_state;
using train_test::relative_difference;

TEST(ModelAndOptimizerTest, TheModelIsBuiltFromTheSeed) {
  TrainConfig c = resolve_defaults(small("convnet", "single"));
  const Distributed single = Distributed::single();
  const std::shared_ptr<Module> a = build_model(c, Data(), single);
  expect_same_state(build_model(c, Data(), single)->state_dict(), a->state_dict());
  c.seed = 1;
  EXPECT_GT(relative_difference(a->state_dict(), build_model(c, Data(), single)->state_dict()), 0);
  // Fashion-MNIST's images have one channel: the first convolution's weight is [C, 1, k, k].
  EXPECT_EQ(a->state_dict()[0].second.size(1), 1);
  // A gpt model's vocabulary is the tokenizer's.
  Data text;
  text.vocab_size = 300;
  const std::shared_ptr<Module> gpt =
      build_model(resolve_defaults(tiny_gpt("single")), text, single);
  EXPECT_EQ(gpt->state_dict()[0].first, "wte.weight");
  EXPECT_EQ(gpt->state_dict()[0].second.size(0), 300);
}

TEST(ModelAndOptimizerTest, EachModeWrapsTheModelOnItsDevices) {
  const Distributed single = Distributed::single();
  TrainConfig c = resolve_defaults(small("mlp", "single"));
  std::shared_ptr<Module> model = build_model(c, Data(), single);
  EXPECT_EQ(wrap_for_mode(c, model, single), model);
  EXPECT_EQ(compute_device(c), Device());
  c.mode = "dp";
  c.devices = 2;
  if (Runtime::get().device_count(DeviceType::kHost) < 2) set_host_device_count(2);
  EXPECT_EQ(compute_device(c), std::nullopt);  // the scatter sends each device its chunk
  const std::shared_ptr<Module> dp = wrap_for_mode(c, model, single);
  EXPECT_NE(dynamic_cast<DataParallel*>(dp.get()), nullptr);
  EXPECT_EQ(model->parameters()[0].device(), Device());  // device_ids[0]
}

TEST(ModelAndOptimizerTest, TheOptimizerIsTheRunsAtItsLearningRate) {
  const Distributed single = Distributed::single();
  TrainConfig c = resolve_defaults(small("mlp", "single"));
  const std::shared_ptr<Module> model = build_model(c, Data(), single);
  std::unique_ptr<optim::Optimizer> opt = make_optimizer(c, model->parameters(), 0.25f, single);
  EXPECT_NE(dynamic_cast<optim::SGD*>(opt.get()), nullptr);
  EXPECT_EQ(opt->lr(), 0.25f);
  c.optimizer = "adamw";
  opt = make_optimizer(c, model->parameters(), 0.5f, single);
  EXPECT_NE(dynamic_cast<optim::AdamW*>(opt.get()), nullptr);
  EXPECT_EQ(opt->lr(), 0.5f);
}

}  // namespace
}  // namespace dpe::tools
