// The autograd core: accumulation, no_grad, hooks, errors, and the multi-device engine.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/device/worker.h"
#include "engine/nn/module.h"

namespace dpe {
namespace {

const Device kH0 = Device::parse("host:0");
const Device kH1 = Device::parse("host:1");

Tensor leaf(std::vector<float> v, Device d = kH0) {
  const int64_t n = static_cast<int64_t>(v.size());
  Tensor t = Tensor::from_vector(v, {n}, d);
  t.requires_grad_();
  return t;
}

TEST(AutogradTest, GradientsAccumulateAcrossBackwardCalls) {
  Tensor x = leaf({1, 2, 3});
  backward(ops::sum(ops::mul(x, x)));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  backward(ops::sum(x));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 5, 7}));
}

TEST(AutogradTest, ATensorUsedTwiceSumsBothPaths) {
  Tensor x = leaf({1, 2});
  Tensor y = ops::add(ops::mul_scalar(x, 3), ops::mul(x, x));  // 3x + x^2
  backward(ops::sum(y));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 7}));
}

TEST(AutogradTest, NoGradRecordsNothing) {
  Tensor x = leaf({1, 2});
  Tensor y;
  {
    NoGradGuard guard;
    y = ops::mul(x, x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  EXPECT_THROW(backward(ops::sum(y)), Error);
}

TEST(AutogradTest, BackwardNeedsAScalar) {
  Tensor x = leaf({1, 2});
  try {
    backward(ops::mul(x, x));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only for scalar outputs"), std::string::npos);
  }
}

// A module with two parameters, to clear their gradients through Module::zero_grad.
class TwoParams : public Cloneable<TwoParams> {
 public:
  TwoParams() {
    register_parameter("a", Tensor::from_vector(std::vector<float>{1, 2}, {2}));
    register_parameter("b", Tensor::from_vector(std::vector<float>{3}, {1}));
  }
  Tensor forward(const Tensor& x) override {
    return ops::add(ops::sum(ops::mul(param("a"), x)), ops::sum(param("b")));
  }
  std::string repr() const override { return "TwoParams"; }
};

// A channels-last activation used twice gets two channels-last gradients (a residual block's
// input), and a third, contiguous, from an op whose gradient comes back so: the engine sums them
// whatever their layouts.
TEST(AutogradTest, GradientsOfAChannelsLastActivationAreSummed) {
  std::vector<float> v(2 * 3 * 2 * 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) - 11.5f;
  Tensor x = Tensor::from_vector(v, {2, 3, 2, 2}).contiguous(MemoryFormat::kChannelsLast);
  x.requires_grad_();
  const Tensor a = ops::relu(x);
  ASSERT_EQ(a.suggest_memory_format(), MemoryFormat::kChannelsLast);
  // Max pooling's gradient comes back channels last, the sum's contiguous.
  const Tensor pooled =
      ops::add(ops::sum(ops::max_pool2d(a, 2, 2, 0)), ops::sum(ops::max_pool2d(a, 2, 2, 0)));
  backward(ops::add(pooled, ops::sum(a)));
  const std::vector<float> g = x.grad().contiguous().to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    const bool window_max = i % 4 == 3;  // each plane's entries increase
    EXPECT_EQ(g[i], v[i] > 0 ? (window_max ? 3.0f : 1.0f) : 0.0f) << i;
  }
}

TEST(AutogradTest, ZeroGradClearsGradients) {
  TwoParams m;
  Tensor x = Tensor::from_vector(std::vector<float>{5, 6}, {2});
  backward(m(x));
  ASSERT_TRUE(m.find("a").grad().defined());
  m.zero_grad();
  for (const auto& [name, p] : m.named_parameters()) EXPECT_FALSE(p.grad().defined()) << name;
  // The next backward starts from nothing instead of accumulating onto the old gradient.
  backward(m(x));
  EXPECT_EQ(m.find("a").grad().to_vector<float>(), (std::vector<float>{5, 6}));
  EXPECT_EQ(m.find("b").grad().to_vector<float>(), (std::vector<float>{1}));
}

TEST(AutogradTest, PostAccumulateHookFiresOncePerLeafWithTheGradient) {
  Tensor a = leaf({1, 2}), b = leaf({3, 4});
  std::vector<std::string> fired;
  a.autograd().post_accumulate_hooks.push_back(
      [&](Tensor& t) { fired.push_back("a:" + std::to_string(t.grad().to_vector<float>()[0])); });
  b.autograd().post_accumulate_hooks.push_back([&](Tensor&) { fired.push_back("b"); });
  backward(ops::sum(ops::add(ops::mul(a, a), b)));
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_NE(std::find(fired.begin(), fired.end(), "a:2.000000"), fired.end());
}

// Waits until neither worker has a task left from an earlier test (a task signals its caller
// before the worker is done with it), so the caller's try_run_here cannot be refused by one.
void wait_until_idle(Worker& a, Worker& b) {
  while (a.pending() != 0 || b.pending() != 0) std::this_thread::yield();
}

// The caller would only wait, so it runs the root device's nodes itself (as that device's work);
// every other device's nodes run on that device's worker.
TEST(AutogradTest, MultiDeviceGraphRunsTheRootsDeviceOnTheCallerAndTheOthersOnTheirWorkers) {
  Tensor a = leaf({1, 2}, kH0), b = leaf({3, 4}, kH1);
  std::mutex mu;
  std::map<std::string, std::thread::id> thread_of;
  std::map<std::string, bool> as_device_work;
  auto record = [&](const std::string& name, Device d) {
    return [&, name, d](Tensor&) {
      std::lock_guard<std::mutex> lock(mu);
      thread_of[name] = std::this_thread::get_id();
      as_device_work[name] = Runtime::get().context(d).worker().on_worker_thread();
    };
  };
  a.autograd().post_accumulate_hooks.push_back(record("a", kH0));
  b.autograd().post_accumulate_hooks.push_back(record("b", kH1));
  Tensor y = ops::add(ops::sum(ops::to(ops::mul(a, a), kH1)), ops::sum(ops::mul(b, b)));
  wait_until_idle(Runtime::get().context(kH0).worker(), Runtime::get().context(kH1).worker());
  backward(y);  // y is on host:1
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{6, 8}));
  EXPECT_EQ(thread_of["b"], std::this_thread::get_id());
  EXPECT_NE(thread_of["a"], std::this_thread::get_id());
  EXPECT_TRUE(as_device_work["a"]);
  EXPECT_TRUE(as_device_work["b"]);
}

// A chain of 2 x 8 nodes on host:0 then 8 on host:1 takes one task per run of nodes on a device,
// not one per node: the caller runs host:1's chain (the root's device) itself and hands host:0's
// over once.
TEST(AutogradTest, MultiDeviceBackwardHandsOffOncePerRunOfNodesOnADevice) {
  Tensor a = leaf({1, 2}, kH0);
  Tensor h = a;
  for (int i = 0; i < 8; ++i) h = ops::mul(h, h);
  Tensor g = ops::to(h, kH1);
  for (int i = 0; i < 8; ++i) g = ops::add(g, g);
  Tensor y = ops::sum(g);
  Worker& w0 = Runtime::get().context(kH0).worker();
  Worker& w1 = Runtime::get().context(kH1).worker();
  wait_until_idle(w0, w1);
  const int64_t before0 = w0.handoffs(), before1 = w1.handoffs();
  backward(y);
  EXPECT_EQ(w0.handoffs() - before0, 1);
  EXPECT_EQ(w1.handoffs() - before1, 0);
  EXPECT_TRUE(a.grad().defined());
}

// While the root's device is busy with another task, its nodes go to its worker, behind that task.
TEST(AutogradTest, RootDeviceNodesWaitForItsWorkerWhenItIsBusy) {
  Tensor a = leaf({1, 2}, kH0), b = leaf({3, 4}, kH1);
  std::thread::id b_thread;
  b.autograd().post_accumulate_hooks.push_back(
      [&](Tensor&) { b_thread = std::this_thread::get_id(); });
  Tensor y = ops::add(ops::sum(ops::to(ops::mul(a, a), kH1)), ops::sum(ops::mul(b, b)));
  Worker& w1 = Runtime::get().context(kH1).worker();
  std::promise<std::thread::id> worker_id;
  // The blocker holds host:1 until backward, finding it busy, has queued work behind it.
  auto blocker = w1.submit([&] {
    worker_id.set_value(std::this_thread::get_id());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (w1.pending() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  const std::thread::id w1_thread = worker_id.get_future().get();
  std::thread backward_thread([&] { backward(y); });
  backward_thread.join();
  blocker.get();
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{6, 8}));
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{2, 4}));
  EXPECT_EQ(b_thread, w1_thread);
}

// A node whose backward throws, to check error propagation across workers.
class ThrowingNode : public Node {
 public:
  explicit ThrowingNode(Device d) : Node("ThrowingNode", d, 1) {}
  std::vector<Tensor> apply(const std::vector<Tensor>&) override {
    throw std::runtime_error("injected failure");
  }
};

TEST(AutogradTest, AFailingNodeOnOneDeviceGivesOneErrorNamingItAndTheEngineStaysUsable) {
  Tensor a = leaf({1, 2}, kH0);
  Tensor moved = ops::to(a, kH1);
  // Splice a throwing node between `moved` and its consumer.
  auto bad = std::make_shared<ThrowingNode>(kH1);
  bad->next_edges().push_back(gradient_edge(moved));
  Tensor fake = moved.detach();
  fake.autograd().requires_grad = true;
  fake.autograd().grad_fn = bad;
  try {
    backward(ops::sum(fake));
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("ThrowingNode on host:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("injected failure"), std::string::npos) << msg;
  }
  // A following backward works.
  Tensor b = leaf({1, 1}, kH1);
  backward(ops::add(ops::sum(ops::to(a, kH1)), ops::sum(b)));
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{1, 1}));
}

TEST(AutogradTest, BackwardFromAWorkerOfAnotherDeviceIsRefusedNotDeadlocked) {
  Tensor a = leaf({1, 2}, kH0);
  Tensor y = ops::add(ops::sum(ops::to(a, kH1)), ops::sum(ops::to(a, kH1)));
  auto f = Runtime::get().context(kH1).worker().submit([&] { backward(y); });
  EXPECT_THROW(f.get(), Error);
}

TEST(AutogradTest, SingleDeviceBackwardMayRunOnThatDevicesWorker) {
  Tensor a = leaf({1, 2}, kH1);
  Runtime::get().context(kH1).worker().run([&] { backward(ops::sum(ops::mul(a, a))); });
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST(OpsErrorsTest, MismatchedDevicesAndShapesAreNamed) {
  Tensor a = leaf({1, 2}, kH0), b = leaf({1, 2}, kH1);
  try {
    ops::add(a, b);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("host:0 and host:1"), std::string::npos) << e.what();
  }
  try {
    ops::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}), Tensor(), "Linear(in_features=5)");
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("Linear(in_features=5)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("torch.Size([2, 3])"), std::string::npos) << msg;
    EXPECT_NE(msg.find("torch.Size([4, 5])"), std::string::npos) << msg;
  }
}

TEST(OpsErrorsTest, LabelOutOfRangeNamesLabelAndClassCount) {
  Tensor logits = Tensor::zeros({2, 10});
  Tensor target = Tensor::from_vector(std::vector<int64_t>{3, 12}, {2});
  try {
    ops::cross_entropy(logits, target);
    FAIL();
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("12"), std::string::npos) << msg;
    EXPECT_NE(msg.find("10 classes"), std::string::npos) << msg;
  }
}

TEST(OpsErrorsTest, NonFiniteLossIsDetectableWithOneCall) {
  EXPECT_TRUE(ops::all_finite(Tensor::scalar(1.0f)));
  EXPECT_FALSE(ops::all_finite(Tensor::scalar(std::nanf(""))));
  EXPECT_FALSE(ops::all_finite(Tensor::full({3}, INFINITY)));
}

// cross_entropy runs as one op on host devices (no [N, C] log-probabilities in memory): its loss
// and the logits' gradient are nll_loss(log_softmax)'s to rounding, for the language model's
// [B, T, V] logits with an ignored target.
TEST(CrossEntropyTest, FusedOpMatchesLogSoftmaxThenNllLoss) {
  const int64_t b = 2, t = 3, v = 50;
  std::vector<float> values(b * t * v);
  for (size_t i = 0; i < values.size(); ++i) values[i] = std::sin(0.37f * i) * 4.0f;
  Tensor fused_in = Tensor::from_vector(values, {b, t, v}).requires_grad_();
  Tensor apart_in = Tensor::from_vector(values, {b, t, v}).requires_grad_();
  Tensor target = Tensor::from_vector(std::vector<int64_t>{4, -100, 49, 0, 17, 30}, {b, t});

  Tensor fused = ops::cross_entropy(fused_in, target);
  ASSERT_NE(fused.grad_fn(), nullptr);
  EXPECT_EQ(fused.grad_fn()->name(), "cross_entropy");
  Tensor apart =
      ops::nll_loss(ops::log_softmax(ops::reshape(apart_in, {b * t, v})), target.reshape({b * t}));
  EXPECT_NEAR(fused.item(), apart.item(), 1e-5);
  backward(fused);
  backward(apart);
  const auto gf = fused_in.grad().to_vector<float>(), ga = apart_in.grad().to_vector<float>();
  ASSERT_EQ(gf.size(), ga.size());
  for (size_t i = 0; i < gf.size(); ++i) EXPECT_NEAR(gf[i], ga[i], 1e-6) << i;
  // The ignored position's row gets no gradient.
  for (int64_t j = 0; j < v; ++j) EXPECT_EQ(gf[v + j], 0.0f) << j;
}

// A weight passed transposed (GPT-2's Conv1D: W [in, out] as W.t()) runs as stored: the same
// output and gradients as the contiguous [out, in] weight, and the parameter's gradient is dense
// [in, out], kept as .grad without a copy.
TEST(LinearTest, TransposedWeightRunsAsStored) {
  const int64_t n = 5, in = 7, out = 3;
  std::vector<float> xv(n * in), wv(in * out), bv(out);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.7f * i);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.3f * i);
  for (size_t i = 0; i < bv.size(); ++i) bv[i] = 0.1f * i;
  std::vector<float> wv_t(out * in);  // the same weight as [out, in]
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) wv_t[o * in + i] = wv[i * out + o];
  }
  Tensor x = Tensor::from_vector(xv, {n, in});
  Tensor w_stored = Tensor::from_vector(wv, {in, out}).requires_grad_();
  Tensor w_plain = Tensor::from_vector(wv_t, {out, in}).requires_grad_();
  Tensor b1 = Tensor::from_vector(bv, {out}).requires_grad_();
  Tensor b2 = Tensor::from_vector(bv, {out}).requires_grad_();

  Tensor y1 = ops::linear(x, ops::permute(w_stored, {1, 0}), b1, "conv1d");
  Tensor y2 = ops::linear(x, w_plain, b2, "linear");
  const auto v1 = y1.to_vector<float>(), v2 = y2.to_vector<float>();
  for (size_t i = 0; i < v1.size(); ++i) EXPECT_NEAR(v1[i], v2[i], 1e-5) << i;
  backward(ops::sum(ops::mul(y1, y1)));
  backward(ops::sum(ops::mul(y2, y2)));

  const Tensor g = w_stored.grad();
  ASSERT_TRUE(g.defined());
  EXPECT_EQ(g.shape(), Shape({in, out}));
  EXPECT_TRUE(g.is_contiguous());
  const auto g1 = g.to_vector<float>(), g2 = w_plain.grad().to_vector<float>();
  for (int64_t i = 0; i < in; ++i) {
    for (int64_t o = 0; o < out; ++o) EXPECT_NEAR(g1[i * out + o], g2[o * in + i], 1e-4);
  }
  const auto gb1 = b1.grad().to_vector<float>(), gb2 = b2.grad().to_vector<float>();
  for (int64_t o = 0; o < out; ++o) EXPECT_NEAR(gb1[o], gb2[o], 1e-4);
}

}  // namespace
}  // namespace dpe
