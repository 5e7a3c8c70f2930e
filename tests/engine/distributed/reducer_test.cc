// Reducer, in one process over a fake two-rank group whose peer contributes zeros: buckets in
// reverse registration order, launched in order during backward, gradients averaged when
// backward returns, the unfinished-reduction error, and find_unused_parameters' usage map.
#include "engine/distributed/reducer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"

namespace dpe {
namespace distributed {
namespace {

// Rank 0 of two; the peer's gradients are zeros (a sum leaves this rank's, an avg halves them) and
// its usage map is `peer_used`.
class FakeTwoRanks : public ProcessGroup {
 public:
  explicit FakeTwoRanks(std::vector<int64_t> peer_used = {})
      : ProcessGroup(0, 2), peer_used_(std::move(peer_used)) {
    start_communication();
  }
  ~FakeTwoRanks() override { stop_communication(); }
  std::string backend() const override { return "fake"; }

  std::vector<int64_t> reduced_numels() {
    std::lock_guard<std::mutex> lock(mu_);
    return numels_;
  }
  std::vector<ReduceOp> reduced_ops() {
    std::lock_guard<std::mutex> lock(mu_);
    return ops_;
  }

 protected:
  void run_all_reduce(Tensor& t, ReduceOp op) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      numels_.push_back(t.numel());
      ops_.push_back(op);
    }
    if (op == ReduceOp::kAvg) {
      float* d = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) d[i] *= 0.5f;
    } else if (op == ReduceOp::kMax) {
      int64_t* d = t.data<int64_t>();
      for (int64_t i = 0; i < t.numel(); ++i) d[i] = std::max(d[i], peer_used_.at(i));
    }
  }
  void run_broadcast(Tensor&, int) override {}
  void run_all_gather(const Tensor&, Tensor&) override {}
  void run_barrier() override {}

 private:
  std::vector<int64_t> peer_used_;
  std::mutex mu_;
  std::vector<int64_t> numels_;
  std::vector<ReduceOp> ops_;
};

Tensor param(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor t = Tensor::from_vector(std::move(values), Shape{n});
  t.requires_grad_();
  return t;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The first bucket closes at 1 MiB, later ones at bucket_cap_mb: with a tiny cap every
// parameter after a 1 MiB one gets its own bucket.
TEST(ReducerTest, BucketsFollowReverseRegistrationOrder) {
  auto group = std::make_shared<FakeTwoRanks>();
  Tensor a = param({1, 2}), b = param({3}), c = param(std::vector<float>(262144, 1.0f));
  ReducerOptions o;
  o.bucket_cap_mb = 1e-6;
  Reducer reducer({{"a", a}, {"b", b}, {"c", c}}, group, o);
  EXPECT_EQ(reducer.bucket_names(), (std::vector<std::vector<std::string>>{{"c"}, {"b"}, {"a"}}));
  ReducerOptions big;
  Reducer one({{"a", a}, {"b", b}}, group, big);
  EXPECT_EQ(one.bucket_names(), (std::vector<std::vector<std::string>>{{"b", "a"}}));
}

TEST(ReducerTest, BackwardAveragesEveryGradientAndLaunchesBucketsInOrder) {
  auto group = std::make_shared<FakeTwoRanks>();
  Tensor a = param({1, 2}), b = param({3, 4, 5});
  ReducerOptions o;
  o.bucket_cap_mb = 1e-6;  // the first bucket still takes both (it closes at 1 MiB)
  Reducer reducer({{"a", a}, {"b", b}}, group, o);
  Tensor x = Tensor::from_vector(std::vector<float>{10, 20}, Shape{2});
  Tensor loss = ops::add(ops::sum(ops::mul(a, x)), ops::sum(b));
  reducer.prepare_for_backward(Value(loss));
  backward(loss);
  // The peer's zeros halve the local gradients: d/da = x, d/db = 1. The buckets hold the
  // gradients divided by the world size and are summed, as PyTorch's reducer does.
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{5, 10}));
  EXPECT_EQ(b.grad().to_vector<float>(), (std::vector<float>{0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(group->reduced_ops(), (std::vector<ReduceOp>{ReduceOp::kSum}));
  const BackwardTrace trace = reducer.trace();
  EXPECT_TRUE(trace.finished);
  EXPECT_EQ(trace.hooks_fired, 2u);
  ASSERT_EQ(trace.launches.size(), 1u);
  EXPECT_EQ(group->reduced_numels(), (std::vector<int64_t>{5}));
  reducer.check_prior_reduction_finished();  // does not throw
}

// Without overlap (design note "when to overlap") every bucket goes at the last hook, in order, and
// the gradients are the same averages.
TEST(ReducerTest, WithoutOverlapEveryBucketStartsWhenBackwardEnds) {
  auto group = std::make_shared<FakeTwoRanks>();
  Tensor a = param({1, 2}), b = Tensor::ones({300000});  // b fills the first (1 MiB) bucket
  b.requires_grad_();
  ReducerOptions o;
  o.overlap = false;
  Reducer reducer({{"a", a}, {"b", b}}, group, o);
  Tensor x = Tensor::from_vector(std::vector<float>{10, 20}, Shape{2});
  Tensor loss = ops::add(ops::sum(ops::mul(a, x)), ops::sum(b));
  reducer.prepare_for_backward(Value(loss));
  backward(loss);
  const BackwardTrace trace = reducer.trace();
  ASSERT_EQ(trace.launches.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(trace.launches[k].bucket, k);
    EXPECT_EQ(trace.launches[k].hooks_fired, 2u);  // both at the last hook
  }
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{5, 10}));
  EXPECT_EQ(b.grad().to_vector<float>()[123], 0.5f);
}

// gradient_as_bucket_view: a linear layer writes its gradients straight into their slots, divided
// by the world size (design note "gradient destinations"); the peer's zeros leave halves.
struct LinearCase {
  Tensor w = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{0.5f, -0.5f}, Shape{2});
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, -1, 0, 4}, Shape{2, 3});
  LinearCase() {
    w.requires_grad_();
    b.requires_grad_();
  }
  Tensor loss() const { return ops::sum(ops::linear(x, w, b)); }
  // d sum / dw[o, i] = sum over rows of x[:, i]; d sum / db[o] = rows.
  std::vector<float> w_grad(float scale) const {
    return {0 * scale, 2 * scale, 7 * scale, 0 * scale, 2 * scale, 7 * scale};
  }
};

ReducerOptions bucket_view() {
  ReducerOptions o;
  o.gradient_as_bucket_view = true;
  return o;
}

TEST(ReducerTest, BucketViewGradientsArriveInTheirSlotsAlreadyDivided) {
  auto group = std::make_shared<FakeTwoRanks>();
  LinearCase c;
  Reducer reducer({{"w", c.w}, {"b", c.b}}, group, bucket_view());
  for (int step = 0; step < 2; ++step) {  // the second after zero_grad (set to none)
    Tensor loss = c.loss();
    reducer.prepare_for_backward(Value(loss));
    backward(loss);
    EXPECT_EQ(reducer.trace().written_in_place, 2u) << step;
    EXPECT_EQ(c.w.grad().to_vector<float>(), c.w_grad(0.5f)) << step;
    EXPECT_EQ(c.b.grad().to_vector<float>(), (std::vector<float>{1, 1})) << step;
    EXPECT_EQ(c.w.autograd().grad_destination, nullptr);  // disarmed when backward ended
    c.w.set_grad(Tensor());
    c.b.set_grad(Tensor());
  }
  // A forward whose backward never ran, then a step: the same halves.
  reducer.prepare_for_backward(Value(c.loss()));
  Tensor loss = c.loss();
  reducer.prepare_for_backward(Value(loss));
  backward(loss);
  EXPECT_EQ(c.w.grad().to_vector<float>(), c.w_grad(0.5f));
  // Without zero_grad the next gradient adds to the slot (no destination for a leaf with a
  // .grad), then the sum is divided: (g/2 + g) / 2 with the peer's zeros.
  loss = c.loss();
  reducer.prepare_for_backward(Value(loss));
  backward(loss);
  EXPECT_EQ(reducer.trace().written_in_place, 0u);
  EXPECT_EQ(c.w.grad().to_vector<float>(), c.w_grad(0.75f));
}

// A hook registered before DDP runs before the reducer's: it must see the plain gradient, so that
// parameter gets no destination (and is divided on its way into the bucket as usual).
TEST(ReducerTest, AHookBeforeTheReducersSeesThePlainGradient) {
  auto group = std::make_shared<FakeTwoRanks>();
  LinearCase c;
  std::vector<float> seen;
  c.w.autograd().post_accumulate_hooks.emplace_back(
      [&seen](Tensor& p) { seen = p.grad().to_vector<float>(); });
  Reducer reducer({{"w", c.w}, {"b", c.b}}, group, bucket_view());
  Tensor loss = c.loss();
  reducer.prepare_for_backward(Value(loss));
  EXPECT_EQ(c.w.autograd().grad_destination, nullptr);
  EXPECT_NE(c.b.autograd().grad_destination, nullptr);
  backward(loss);
  EXPECT_EQ(seen, c.w_grad(1.0f));
  EXPECT_EQ(c.w.grad().to_vector<float>(), c.w_grad(0.5f));
  EXPECT_EQ(reducer.trace().written_in_place, 1u);  // the bias only
}

// find_unused_parameters: a parameter the outputs do not reach gets no destination (a gradient
// that reaches it anyway, from a loss term outside the outputs, must not land in its slot).
TEST(ReducerTest, AParameterTheOutputsDoNotReachGetsNoDestination) {
  auto group = std::make_shared<FakeTwoRanks>(std::vector<int64_t>{1, 1, 0});
  LinearCase c;
  Tensor extra = param({3});
  ReducerOptions o = bucket_view();
  o.find_unused_parameters = true;
  Reducer reducer({{"w", c.w}, {"b", c.b}, {"extra", extra}}, group, o);
  Tensor out = ops::linear(c.x, c.w, c.b);
  reducer.prepare_for_backward(Value(out));
  EXPECT_NE(c.w.autograd().grad_destination, nullptr);
  EXPECT_EQ(extra.autograd().grad_destination, nullptr);
  backward(ops::sum(out));
  EXPECT_EQ(c.w.grad().to_vector<float>(), c.w_grad(0.5f));
}

TEST(ReducerTest, LocalSizeComesFromTheLaunchersEnvironment) {
  FakeTwoRanks group;
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_EQ(group.local_size(), 2);  // every rank, without a word from the launcher
  ::setenv("LOCAL_WORLD_SIZE", "1", 1);
  EXPECT_EQ(group.local_size(), 1);  // two nodes of one rank each
  for (const char* bad : {"0", "3", "two", "1x", ""}) {
    ::setenv("LOCAL_WORLD_SIZE", bad, 1);
    EXPECT_EQ(group.local_size(), 2) << bad;
  }
  ::unsetenv("LOCAL_WORLD_SIZE");
  EXPECT_FALSE(group.waits_spin());
}

TEST(ReducerTest, AParameterWithoutGradientLeavesTheReductionUnfinished) {
  auto group = std::make_shared<FakeTwoRanks>();
  Tensor a = param({1}), unused = param({2});
  Reducer reducer({{"a", a}, {"unused", unused}}, group, ReducerOptions{});
  Tensor loss = ops::sum(a);
  reducer.prepare_for_backward(Value(loss));
  backward(loss);
  EXPECT_FALSE(reducer.trace().finished);
  EXPECT_TRUE(group->reduced_numels().empty());  // the only bucket never became ready
  const std::string error = error_of([&] { reducer.check_prior_reduction_finished(); });
  EXPECT_NE(error.find("Expected to have finished reduction in the prior iteration"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("did not receive grad for rank 0: unused"), std::string::npos) << error;
}

// find_unused_parameters: an unused parameter is marked ready at the first hook; it keeps an
// undefined .grad only when no rank used it.
TEST(ReducerTest, FindUnusedParametersUsesTheGlobalUsageMap) {
  for (int64_t peer_uses_it : {0, 1}) {
    auto group = std::make_shared<FakeTwoRanks>(std::vector<int64_t>{1, peer_uses_it});
    Tensor a = param({1}), unused = param({2});
    ReducerOptions o;
    o.find_unused_parameters = true;
    Reducer reducer({{"a", a}, {"unused", unused}}, group, o);
    Tensor loss = ops::sum(a);
    reducer.prepare_for_backward(Value(loss));
    backward(loss);
    const BackwardTrace trace = reducer.trace();
    EXPECT_TRUE(trace.finished);
    EXPECT_EQ(trace.unused_marked, 1u);
    EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{0.5f}));
    EXPECT_EQ(unused.grad().defined(), peer_uses_it == 1) << "peer uses it: " << peer_uses_it;
  }
}

}  // namespace
}  // namespace distributed
}  // namespace dpe
