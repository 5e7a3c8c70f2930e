// Nodes and record(): the saved-tensor version check (PyTorch's "modified by an inplace
// operation"), on every kind of in-place write the engine makes.
#include "engine/autograd/node.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "engine/optim/sgd.h"

namespace dpe {
namespace {

Tensor param(const Shape& shape, float value, const std::string& name) {
  Tensor t = Tensor::full(shape, value);
  t.requires_grad_();
  t.autograd().name = name;
  return t;
}

// The message of the error backward(loss) throws ("" when it does not throw).
std::string backward_error(const Tensor& loss) {
  try {
    backward(loss);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(SavedTensorTest, AWeightWrittenInPlaceAfterTheForwardStopsTheBackward) {
  Tensor w = param({2, 3}, 0.5f, "fc.weight");
  const Tensor x = Tensor::ones({4, 3});
  Tensor loss = ops::sum(ops::linear(x, w, Tensor(), "fc"));
  const uint64_t v = w.version();
  w.fill_(1.0f);
  const std::string msg = backward_error(loss);
  EXPECT_TRUE(contains(msg,
                       "one of the variables needed for gradient computation has been "
                       "modified by an inplace operation"))
      << msg;
  EXPECT_TRUE(contains(msg, "[float32 torch.Size([2, 3]) on host:0] (fc.weight)")) << msg;
  EXPECT_TRUE(contains(msg, "which fc saved for its backward")) << msg;
  EXPECT_TRUE(contains(
      msg, "is at version " + std::to_string(v + 1) + "; expected version " + std::to_string(v)))
      << msg;
  EXPECT_FALSE(w.grad().defined());  // nothing was accumulated
}

TEST(SavedTensorTest, AWriteThroughAViewCountsForTheWholeStorage) {
  Tensor w = param({4, 2}, 1.0f, "w");
  const Tensor x = Tensor::ones({3, 4});
  Tensor loss = ops::sum(ops::matmul(x, w));
  w.narrow(0, 1, 1).detach().fill_(0.0f);  // one row, through a detached view
  EXPECT_TRUE(contains(backward_error(loss), "modified by an inplace operation"));
}

TEST(SavedTensorTest, AnOptimizerStepBetweenForwardAndBackwardIsCaught) {
  Tensor w = param({2, 2}, 1.0f, "w");
  optim::SGD sgd({w}, optim::SgdOptions{0.1f});
  Tensor loss = ops::sum(ops::linear(Tensor::ones({1, 2}), w, Tensor()));
  backward(ops::sum(ops::linear(Tensor::ones({1, 2}), w, Tensor())));  // a grad for the step
  sgd.step();
  EXPECT_TRUE(contains(backward_error(loss), "(w), which linear saved"));
}

TEST(SavedTensorTest, ASavedOutputWrittenInPlaceIsCaughtToo) {
  Tensor x = param({3}, -1.0f, "x");
  Tensor y = ops::relu(x);  // relu's backward reads its output
  Tensor loss = ops::sum(y);
  y.fill_(2.0f);
  EXPECT_TRUE(contains(backward_error(loss), "which relu saved"));
}

TEST(SavedTensorTest, WritesToTensorsNoBackwardReadsAreFine) {
  // add's backward reads neither input, and a label's version only matters to nll_loss.
  Tensor a = param({3}, 1.0f, "a");
  Tensor b = Tensor::full({3}, 2.0f);
  Tensor loss = ops::sum(ops::add(a, b));
  b.fill_(5.0f);
  EXPECT_EQ(backward_error(loss), "");
  EXPECT_EQ(a.grad().to_vector<float>(), std::vector<float>(3, 1.0f));
}

TEST(SavedTensorTest, ALabelChangedBeforeTheBackwardIsCaught) {
  Tensor logits = param({2, 3}, 0.0f, "logits");
  Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 2}, {2});
  Tensor loss = ops::cross_entropy(logits, target);
  Tensor nll = ops::nll_loss(ops::log_softmax(logits), target);
  target.fill_(1.0f);
  EXPECT_TRUE(contains(backward_error(loss), "which cross_entropy saved"));
  EXPECT_TRUE(contains(backward_error(nll), "which nll_loss saved"));
}

TEST(SavedTensorTest, RecordKeepsTheVersionAtRecordTime) {
  Tensor t = Tensor::zeros({2});
  t.fill_(1.0f);
  const SavedTensor saved(t);
  EXPECT_EQ(saved.version, t.version());
  EXPECT_NO_THROW(check_saved_versions("op", {saved}));
  t.bump_version();
  EXPECT_THROW(check_saved_versions("op", {saved}), Error);
}

TEST(NodeMemoryCategoryTest, BackwardRunsUnderItsForwardsCategoryAndGradientsAreTagged) {
  const Device dev = Device::parse("host:1");
  Allocator& a = Runtime::get().context(dev).allocator();
  auto at_peak = [&](MemoryCategory c) {
    return a.stats().peak_by_category[static_cast<size_t>(c)];
  };
  Tensor x = Tensor::ones({1024}, dev);
  x.requires_grad_();
  Tensor y;
  {
    MemoryCategoryScope scope(MemoryCategory::kOutputGradients);  // as a loss computed in a scope
    y = ops::mul(x, x);
  }
  EXPECT_EQ(y.memory_category(), MemoryCategory::kOutputGradients);
  const Tensor loss = ops::sum(y);
  a.reset_peak();
  const int64_t before = at_peak(MemoryCategory::kOutputGradients);
  backward(loss);
  // mul's backward made x-sized gradients under its forward's category, not "other".
  EXPECT_GE(at_peak(MemoryCategory::kOutputGradients), before + 4096);
  EXPECT_EQ(x.grad().memory_category(), MemoryCategory::kGradients);
}

// A leaf may say what its .grad counts as (a sharded module's views pass theirs on at once), both
// when the gradient is taken as it is and when it is copied.
TEST(NodeTest, ALeafsGradCategoryIsItsOwn) {
  for (bool shared : {false, true}) {
    Tensor x = Tensor::ones({8});
    x.requires_grad_();
    x.autograd().grad_category = MemoryCategory::kCommunication;
    // x + x: one gradient, the engine's own; x * 2 seen twice: a sum the engine holds.
    const Tensor loss = shared ? ops::sum(ops::add(x, x)) : ops::sum(ops::mul(x, x));
    backward(loss);
    EXPECT_EQ(x.grad().memory_category(), MemoryCategory::kCommunication) << shared;
  }
}

// PyTorch's validate_outputs: a node whose backward hands back a gradient in another floating
// dtype than its input's has it cast, for a leaf (AccumulateGrad) and for an inner node alike.
TEST(NodeTest, EveryGradientArrivesInItsInputsDtype) {
  Tensor w = param({4}, 0.5f, "w");                            // float32 leaf
  Tensor h = Tensor::full({4}, 1.25f).to(DType::kBFloat16);  // bfloat16 leaf
  h.requires_grad_();
  Tensor hw = ops::to(h, DType::kFloat32);  // an inner node's input of dtype bfloat16
  Tensor out = Tensor::full({4}, 0.0f);
  // The probe's backward returns bfloat16 for w and float32 for hw's (float32) input: the wrong
  // dtype for w only.
  record("probe", {w, hw}, {&out}, [](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{g[0].to(DType::kBFloat16), g[0]};
  });
  backward(ops::sum(out));
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(w.grad().to_vector<float>(), std::vector<float>(4, 1.0f));
  ASSERT_TRUE(h.grad().defined());
  EXPECT_EQ(h.grad().dtype(), DType::kBFloat16);
}

}  // namespace
}  // namespace dpe
