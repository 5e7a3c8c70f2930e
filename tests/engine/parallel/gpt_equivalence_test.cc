// The GPT under DataParallel: one training step on 2 and 3 host devices (uneven chunks included)
// equals the one-device step on the same tokens — loss, every gradient (the tied wte's included,
// summed over the embedding and the head on every replica) and every updated parameter.
#include <gtest/gtest.h>

#include "engine/autograd/engine.h"
#include "engine/backend/host/host_devices.h"
#include "engine/device/runtime.h"
#include "engine/parallel/data_parallel.h"
#include "models/gpt.h"
#include "tests/engine/parallel/equivalence.h"

namespace dpe::models {
namespace {

GptConfig tiny() {
  GptConfig c = gpt_config("gpt-small");
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  c.block_size = 8;
  c.vocab_size = 50;
  return c;
}

test::StepResult lm_step(Module& model, Module& inner, const Tensor& tokens,
                         const Tensor& targets) {
  optim::SgdOptions o;
  o.lr = 0.05f;
  o.momentum = 0.9f;
  optim::SGD sgd(inner.parameters(), o);
  const Tensor loss = lm_loss(model(tokens), targets);
  backward(loss);
  test::StepResult r;
  r.loss = loss.item();
  for (auto& [n, p] : inner.named_parameters()) r.grads.emplace_back(n, p.grad().clone());
  sgd.step();
  for (auto& [n, p] : inner.named_parameters()) r.params.emplace_back(n, p.clone());
  return r;
}

TEST(GptDataParallelTest, OneStepEqualsTheSingleDeviceStep) {
  for (int n : {2, 3}) {
    set_host_device_count(n);
    const auto devices = Runtime::get().devices(DeviceType::kHost);
    Generator gen(7);
    std::vector<int64_t> ids(5 * 9);  // batch 5: uneven chunks on 2 and 3 devices
    for (auto& t : ids) t = static_cast<int64_t>(gen.next_u64() % 50);
    const Tensor all = Tensor::from_vector(ids, {5, 9});
    const Tensor tokens = all.narrow(1, 0, 8).contiguous(),
                 targets = all.narrow(1, 1, 8).contiguous();

    Generator g1(3);
    auto single = std::make_shared<Gpt>(tiny(), g1);
    auto original = single->copy_to(devices[0]);
    const test::StepResult ref = lm_step(*single, *single, tokens, targets);
    DataParallel dp(original, devices);
    const test::StepResult got = lm_step(dp, *original, tokens, targets);
    test::expect_same(got, ref, devices[0], "gpt on " + std::to_string(n) + " devices");
  }
}

}  // namespace
}  // namespace dpe::models
