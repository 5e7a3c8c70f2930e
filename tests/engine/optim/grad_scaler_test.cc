#include "engine/optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/optim/sgd.h"
#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

constexpr float kInf = std::numeric_limits<float>::infinity();

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one containing '" << part << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(GradScalerTest, PyTorchDefaults) {
  GradScaler s;
  EXPECT_EQ(s.get_scale(), 65536.0f);
  EXPECT_EQ(s.growth_tracker(), 0);
  const StateDict st = s.state_dict();
  ASSERT_EQ(st.size(), 5u);
  EXPECT_EQ(st[0].first, "scale");
  EXPECT_EQ(st[1].second.item(), 2.0f);
  EXPECT_EQ(st[2].second.item(), 0.5f);
  EXPECT_EQ(st[3].second.to_vector<int64_t>()[0], 2000);
  EXPECT_EQ(st[4].first, "_growth_tracker");
}

TEST(GradScalerTest, ScaledBackwardThenStepIsTheUnscaledStep) {
  // loss = sum(w * x): dloss/dw = x. Scaled by 2^16 in backward, unscaled before the step.
  Tensor w = param({1.0f, -2.0f, 0.5f});
  const Tensor x = Tensor::from_vector(std::vector<float>{0.25f, 3.0f, -1.0f}, {3});
  SGD opt({w}, SgdOptions{0.1f});
  GradScaler scaler;
  Tensor scaled = scaler.scale(ops::sum(ops::mul(w, x)));
  EXPECT_FLOAT_EQ(scaled.item(), 65536.0f * (0.25f - 6.0f - 0.5f));
  backward(scaled);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{16384.0f, 196608.0f, -65536.0f}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{0.25f, 3.0f, -1.0f}));
  const std::vector<float> got = w.to_vector<float>();
  EXPECT_FLOAT_EQ(got[0], 1.0f - 0.1f * 0.25f);
  EXPECT_FLOAT_EQ(got[1], -2.0f - 0.1f * 3.0f);
  EXPECT_FLOAT_EQ(got[2], 0.5f + 0.1f);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScalerTest, AnOverflowOnAnyDeviceSkipsTheStepAndBacksOff) {
  for (const float bad : {kInf, -kInf, std::nanf("")}) {
    Tensor a = param({1.0f, 2.0f});
    Tensor b = Tensor::from_vector(std::vector<float>{3.0f}, {1}, Device::parse("host:1"));
    b.requires_grad_();
    SGD opt({a, b}, SgdOptions{1.0f});
    GradScaler scaler;
    set_grad(a, {4.0f, 8.0f});
    set_grad(b, {bad});
    EXPECT_FALSE(scaler.step(opt));
    EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.0f, 2.0f}));  // not stepped
    EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3.0f}));
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 32768.0f);
    EXPECT_EQ(scaler.growth_tracker(), 0);
  }
}

TEST(GradScalerTest, GrowsAfterGrowthIntervalCleanStepsAndNotPastFloatMax) {
  Tensor w = param({1.0f});
  SGD opt({w}, SgdOptions{0.0f});
  GradScaler scaler(GradScalerOptions{1024.0f, 2.0f, 0.5f, 3});
  for (int i = 0; i < 3; ++i) {
    set_grad(w, {1.0f});
    scaler.step(opt);
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 2048.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // A scale whose growth overflows stays where it is.
  GradScaler top(GradScalerOptions{std::numeric_limits<float>::max(), 2.0f, 0.5f, 1});
  set_grad(w, {1.0f});
  top.step(opt);
  top.update();
  EXPECT_EQ(top.get_scale(), std::numeric_limits<float>::max());
}

TEST(GradScalerTest, UnscaleOnceStepOnceUpdateAfterAStep) {
  Tensor w = param({1.0f});
  SGD opt({w}, SgdOptions{1.0f});
  GradScaler scaler(GradScalerOptions{4.0f});
  expect_error([&] { scaler.update(); }, "no inf checks were recorded");
  set_grad(w, {8.0f});
  scaler.unscale_(opt);
  EXPECT_EQ(w.grad().to_vector<float>(), (std::vector<float>{2.0f}));
  expect_error([&] { scaler.unscale_(opt); }, "already called on this optimizer");
  EXPECT_TRUE(scaler.step(opt));  // does not unscale again
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{-1.0f}));
  expect_error([&] { scaler.step(opt); }, "already called on this optimizer");
  expect_error([&] { scaler.unscale_(opt); }, "after step()");
  scaler.update();
  set_grad(w, {4.0f});
  EXPECT_TRUE(scaler.step(opt));  // a new step after update()
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{-2.0f}));
}

TEST(GradScalerTest, RefusesBfloat16AutocastAnd16BitGradients) {
  Tensor w = param({1.0f, 2.0f});
  GradScaler scaler;
  {
    autocast guard(DeviceType::kHost, DType::kBFloat16);
    expect_error([&] { scaler.scale(ops::sum(w)); }, "needs no loss scaling");
  }
  {
    autocast guard(DeviceType::kHost, DType::kFloat16);
    EXPECT_EQ(scaler.scale(ops::sum(w)).item(), 3.0f * 65536.0f);
  }
  Tensor h = Tensor::from_vector(std::vector<float>{1.0f, 2.0f}, {2}).to(DType::kFloat16);
  h.requires_grad_();
  Tensor f = param({5.0f});
  set_grad(f, {65536.0f});
  h.set_grad(Tensor::from_vector(std::vector<float>{1.0f, 1.0f}, {2}).to(DType::kFloat16));
  SGD opt({f, h}, SgdOptions{1.0f});
  expect_error([&] { scaler.unscale_(opt); }, "parameter 1's gradient is float16");
  EXPECT_EQ(f.grad().to_vector<float>(), (std::vector<float>{65536.0f}));  // untouched
}

TEST(GradScalerTest, DisabledIsThePlainStep) {
  Tensor w = param({1.0f});
  SGD opt({w}, SgdOptions{1.0f});
  GradScalerOptions o;
  o.enabled = false;
  GradScaler scaler(o);
  const Tensor loss = ops::sum(w);
  EXPECT_EQ(scaler.scale(loss).item(), 1.0f);
  set_grad(w, {kInf});
  EXPECT_TRUE(scaler.step(opt));  // no check when disabled, as PyTorch's
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  EXPECT_TRUE(scaler.state_dict().empty());
}

TEST(GradScalerTest, StateDictRoundTripsAndBadEntriesChangeNothing) {
  Tensor w = param({1.0f});
  SGD opt({w}, SgdOptions{0.0f});
  GradScaler a(GradScalerOptions{256.0f, 4.0f, 0.25f, 10});
  set_grad(w, {1.0f});
  a.step(opt);
  a.update();
  GradScaler b;
  b.load_state_dict(a.state_dict());
  EXPECT_EQ(b.get_scale(), 256.0f);
  EXPECT_EQ(b.growth_tracker(), 1);
  const StateDict st = b.state_dict();
  EXPECT_EQ(st[1].second.item(), 4.0f);
  EXPECT_EQ(st[3].second.to_vector<int64_t>()[0], 10);

  StateDict bad = a.state_dict();
  bad[0].second = Tensor::from_vector(std::vector<float>{-1.0f}, Shape{});
  GradScaler c;
  expect_error([&] { c.load_state_dict(bad); }, "init_scale must be finite and > 0");
  bad = a.state_dict();
  bad[4].second = Tensor::from_vector(std::vector<int64_t>{10}, Shape{});
  expect_error([&] { c.load_state_dict(bad); }, "'_growth_tracker' is 10");
  bad = a.state_dict();
  bad.emplace_back("scales", bad[0].second);
  expect_error([&] { c.load_state_dict(bad); }, "unexpected key 'scales'");
  EXPECT_EQ(c.get_scale(), 65536.0f);
  EXPECT_EQ(c.growth_tracker(), 0);
}

TEST(GradScalerTest, RefusesBadOptions) {
  expect_error([] { GradScaler s(GradScalerOptions{0.0f}); }, "init_scale");
  expect_error([] { GradScaler s(GradScalerOptions{1.0f, 1.0f}); }, "growth_factor");
  expect_error([] { GradScaler s(GradScalerOptions{1.0f, 2.0f, 1.0f}); }, "backoff_factor");
  expect_error([] { GradScaler s(GradScalerOptions{1.0f, 2.0f, 0.5f, 0}); }, "growth_interval");
}

}  // namespace
}  // namespace dpe::optim
