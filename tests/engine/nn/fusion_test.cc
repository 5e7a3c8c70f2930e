#include "engine/nn/fusion.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>

#include "engine/autograd/engine.h"
#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/pooling.h"
#include "engine/nn/sequential.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

const Device kHost0 = Device::parse("host:0");

// Two conv -> BatchNorm2d -> ReLU blocks, as the ConvNet's (without the pooling).
std::shared_ptr<nn::Sequential> two_blocks(Generator& g) {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv2d>(2, 4, 3, g, 1, 1));
  s->push_back(std::make_shared<nn::BatchNorm2d>(4));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::Conv2d>(4, 3, 3, g, 1, 1));
  s->push_back(std::make_shared<nn::BatchNorm2d>(3));
  s->push_back(std::make_shared<nn::ReLU>());
  return s;
}

// Every parameter's gradient and every buffer of `fused` equal `plain`'s, bit for bit.
void expect_same_grads_and_buffers(Module& fused, Module& plain) {
  for (const auto& [name, p] : fused.named_parameters()) {
    EXPECT_EQ(p.grad().to_vector<float>(), plain.find(name).grad().to_vector<float>()) << name;
  }
  for (const auto& [name, b] : fused.named_buffers()) {
    if (b.dtype() == DType::kInt64) {
      EXPECT_EQ(b.to_vector<int64_t>(), plain.find(name).to_vector<int64_t>()) << name;
    } else {
      EXPECT_EQ(b.to_vector<float>(), plain.find(name).to_vector<float>()) << name;
    }
  }
}

std::string grad_fn_name(const Tensor& t) { return t.grad_fn() ? t.grad_fn()->name() : ""; }

// y's backward fails the saved-tensor check (a tensor its graph saved was written in place), with
// PyTorch's message.
void expect_backward_catches_inplace_write(const Tensor& y) {
  try {
    backward(ops::sum(y));
    FAIL() << "expected the saved-tensor check to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("modified by an inplace operation"), std::string::npos)
        << e.what();
  }
}

// Runs one training step's forward and backward (loss = sum(y * w)) and returns y.
Tensor step(Module& model, const Tensor& x, const Tensor& w) {
  Tensor y = model.forward(x);
  backward(ops::sum(ops::mul(y, w)));
  return y;
}

// Host devices have every fused batch norm op's kernels: the layers fuse there, and the ops run
// fused (ops::has_fused_kernels is what both ask).
TEST(FusionTest, HostDevicesHaveTheFusedKernels) {
  for (const Device d : {Device::parse("host:0"), Device::parse("host:1")}) {
    EXPECT_TRUE(ops::has_fused_kernels(ops::BatchNormFusion::kRelu, d)) << d;
    EXPECT_TRUE(ops::has_fused_kernels(ops::BatchNormFusion::kAddRelu, d)) << d;
    EXPECT_TRUE(ops::has_fused_kernels(ops::BatchNormFusion::kReluMaxPool2d, d)) << d;
  }
}

TEST(FusionTest, SequentialFusesBatchNormAndReluWithTheUnfusedResults) {
  Generator g(1);
  auto fused = two_blocks(g);
  auto plain = fused->copy_to(kHost0);
  const Tensor x = randn({5, 2, 6, 6}, g), w = randn({5, 3, 6, 6}, g);

  const Tensor y = step(*fused, x, w);
  Tensor y_plain;
  {
    const nn::FusionScope off(false);
    y_plain = step(*plain, x, w);
  }
  EXPECT_TRUE(nn::fusion_enabled());  // the scope restored it
  // Fused: one node for batch norm and ReLU; unfused: the ReLU's own.
  EXPECT_EQ(grad_fn_name(y), fused->child("4").repr() + "+ReLU");
  EXPECT_EQ(grad_fn_name(y_plain), "relu");
  EXPECT_EQ(y.to_vector<float>(), y_plain.to_vector<float>());
  expect_same_grads_and_buffers(*fused, *plain);
  EXPECT_EQ(fused->find("1.num_batches_tracked").to_vector<int64_t>()[0], 1);

  // Evaluation runs the two ops (with the running statistics), as unfused.
  fused->eval();
  plain->eval();
  const Tensor e = fused->forward(x);
  EXPECT_EQ(grad_fn_name(e), "relu");
  EXPECT_EQ(e.to_vector<float>(), plain->forward(x).to_vector<float>());
}

// Two conv -> BatchNorm2d -> ReLU -> MaxPool2d blocks, as the ConvNet's: the first with 2x2
// windows, the second with ResNet's stem pooling (3x3, stride 2, padding 1).
std::shared_ptr<nn::Sequential> two_pooled_blocks(Generator& g) {
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv2d>(2, 4, 3, g, 1, 1));
  s->push_back(std::make_shared<nn::BatchNorm2d>(4));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::MaxPool2d>(2));
  s->push_back(std::make_shared<nn::Conv2d>(4, 3, 3, g, 1, 1));
  s->push_back(std::make_shared<nn::BatchNorm2d>(3));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::MaxPool2d>(3, 2, 1));
  return s;
}

// The three as one node, with the unfused results bit for bit (outputs, every gradient, the
// running statistics), in both layouts; in evaluation the three ops.
TEST(FusionTest, SequentialFusesBatchNormReluAndMaxPoolWithTheUnfusedResults) {
  for (const MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    SCOPED_TRACE(format == MemoryFormat::kContiguous ? "contiguous" : "channels last");
    Generator g(5);
    auto fused = two_pooled_blocks(g);
    auto plain = fused->copy_to(kHost0);
    const Tensor x = randn({6, 2, 12, 10}, g).contiguous(format);
    const Tensor w = randn({6, 3, 3, 3}, g);

    const Tensor y = step(*fused, x, w);
    Tensor y_plain;
    {
      const nn::FusionScope off(false);
      y_plain = step(*plain, x, w);
    }
    EXPECT_EQ(grad_fn_name(y), fused->child("5").repr() + "+ReLU+MaxPool2d");
    EXPECT_EQ(grad_fn_name(y_plain), "max_pool2d");
    EXPECT_EQ(y.shape(), y_plain.shape());
    EXPECT_EQ(y.to_vector<float>(), y_plain.to_vector<float>());
    expect_same_grads_and_buffers(*fused, *plain);
    EXPECT_EQ(fused->find("1.num_batches_tracked").to_vector<int64_t>()[0], 1);

    fused->eval();
    plain->eval();
    const Tensor e = fused->forward(x);
    EXPECT_EQ(grad_fn_name(e), "max_pool2d");
    EXPECT_EQ(e.to_vector<float>(), plain->forward(x).to_vector<float>());
  }
}

// A residual block's end, relu(bn(conv(x)) + x), as ResNet calls it.
struct ResidualEnd : Cloneable<ResidualEnd> {
  explicit ResidualEnd(Generator& g) {
    register_module("conv", std::make_shared<nn::Conv2d>(3, 3, 3, g, 1, 1));
    register_module("bn", std::make_shared<nn::BatchNorm2d>(3));
    register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor forward(const Tensor& x) override {
    return nn::forward_batch_norm_add_relu(child("bn"), child("relu"), child("conv").forward(x), x);
  }
  std::string repr() const override { return "ResidualEnd"; }
};

// The batch norm, the residual sum and the ReLU as one node, with the ops' results bit for bit
// (output, the parameters' and the input's gradients, which take the residual's, and the running
// statistics), in both layouts; in evaluation the three ops.
TEST(FusionTest, ResidualSumAndReluFuseWithTheUnfusedResults) {
  for (const MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    SCOPED_TRACE(format == MemoryFormat::kContiguous ? "contiguous" : "channels last");
    Generator g(7);
    ResidualEnd fused(g), plain(g);
    plain.load_state_dict(fused.state_dict());
    Tensor x = randn({5, 3, 6, 7}, g).contiguous(format);
    Tensor x_plain = x.detach().clone().contiguous(format);
    x.requires_grad_();
    x_plain.requires_grad_();
    const Tensor w = randn({5, 3, 6, 7}, g);

    const Tensor y = step(fused, x, w);
    Tensor y_plain;
    {
      const nn::FusionScope off(false);
      y_plain = step(plain, x_plain, w);
    }
    EXPECT_EQ(grad_fn_name(y), fused.child("bn").repr() + "+add+ReLU");
    EXPECT_EQ(grad_fn_name(y_plain), "relu");
    EXPECT_EQ(y.to_vector<float>(), y_plain.to_vector<float>());
    EXPECT_EQ(x.grad().to_vector<float>(), x_plain.grad().to_vector<float>());
    expect_same_grads_and_buffers(fused, plain);
    // Not vacuous: the ReLU clips some outputs and passes others.
    const auto values = y.to_vector<float>();
    const auto zeros = std::count(values.begin(), values.end(), 0.0f);
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, static_cast<int64_t>(values.size()));

    fused.eval();
    plain.eval();
    const Tensor e = fused.forward(x);
    EXPECT_EQ(grad_fn_name(e), "relu");
    EXPECT_EQ(e.to_vector<float>(), plain.forward(x).to_vector<float>());
  }
}

// A residual laid out otherwise than x (contiguous beside a channels-last x) and one that needs no
// gradient: the ops' results, and x's gradient without the residual's.
TEST(FusionTest, AResidualInAnotherLayoutOrWithoutGradientFuses) {
  Generator g(10);
  nn::BatchNorm2d bn(4), bn_apart(4);
  nn::ReLU relu;
  Tensor x = randn({3, 4, 5, 5}, g).contiguous(MemoryFormat::kChannelsLast);
  Tensor x_apart = x.detach().clone().contiguous(MemoryFormat::kChannelsLast);
  x.requires_grad_();
  x_apart.requires_grad_();
  const Tensor residual = randn({3, 4, 5, 5}, g), w = randn({3, 4, 5, 5}, g);
  const Tensor y = nn::forward_batch_norm_add_relu(bn, relu, x, residual);
  backward(ops::sum(ops::mul(y, w)));
  Tensor y_apart;
  {
    const nn::FusionScope off(false);
    y_apart = nn::forward_batch_norm_add_relu(bn_apart, relu, x_apart, residual);
    backward(ops::sum(ops::mul(y_apart, w)));
  }
  EXPECT_EQ(grad_fn_name(y), bn.repr() + "+add+ReLU");
  EXPECT_EQ(y.to_vector<float>(), y_apart.to_vector<float>());
  EXPECT_EQ(x.grad().to_vector<float>(), x_apart.grad().to_vector<float>());
  expect_same_grads_and_buffers(bn, bn_apart);
  EXPECT_FALSE(residual.grad().defined());
}

// With the ops apart the residual is made after the batch norm's forward, as torchvision's
// Bottleneck orders them; fused, before the op. Either way it is made once.
TEST(FusionTest, TheResidualIsMadeAfterTheBatchNormWhenApart) {
  Generator g(11);
  nn::BatchNorm2d bn(2);
  nn::ReLU relu;
  const Tensor x = randn({2, 2, 3, 3}, g);
  for (const bool fuse : {true, false}) {
    const nn::FusionScope scope(fuse);
    const int64_t counted = bn.find("num_batches_tracked").to_vector<int64_t>()[0];
    int calls = 0;
    int64_t seen = -1;
    nn::forward_batch_norm_add_relu(bn, relu, x, [&] {
      ++calls;
      seen = bn.find("num_batches_tracked").to_vector<int64_t>()[0];
      return x;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_EQ(seen, fuse ? counted : counted + 1) << (fuse ? "fused" : "apart");
  }
}

// A residual of another shape is refused as the sum apart refuses it, naming both shapes.
TEST(FusionTest, TheFusedResidualSumChecksTheResidual) {
  nn::BatchNorm2d bn(3);
  nn::ReLU relu;
  Generator g(8);
  const Tensor x = randn({4, 3, 2, 2}, g);
  try {
    nn::forward_batch_norm_add_relu(bn, relu, x, randn({4, 3, 2, 3}, g));
    FAIL() << "expected the shape check to fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[4, 3, 2, 3]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 3, 2, 2]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::forward_batch_norm_add_relu(bn, relu, x, Tensor()), Error);
  // Refused before anything is counted or updated.
  EXPECT_EQ(bn.find("num_batches_tracked").to_vector<int64_t>()[0], 0);
  EXPECT_EQ(bn.find("running_mean").to_vector<float>(), std::vector<float>(3, 0.0f));
}

// The fused residual node saves its output (the ReLU's mask, as relu's node does): writing the
// output in place between forward and backward is caught, with PyTorch's message.
TEST(FusionTest, TheFusedResidualNodeChecksTheOutputItSaved) {
  nn::BatchNorm2d bn(3);
  nn::ReLU relu;
  Generator g(9);
  Tensor x = randn({4, 3, 2, 2}, g);
  x.requires_grad_();
  Tensor y = nn::forward_batch_norm_add_relu(bn, relu, x, randn({4, 3, 2, 2}, g));
  y.fill_(1.0f);
  expect_backward_catches_inplace_write(y);
}

// A window wider than 16 has no window codes (kernels/op_params.h): the three run as the ops
// apart, with the same results.
TEST(FusionTest, PoolingWindowsWiderThanSixteenRunApart) {
  Generator g(6);
  nn::Sequential s({std::make_shared<nn::BatchNorm2d>(2), std::make_shared<nn::ReLU>(),
                    std::make_shared<nn::MaxPool2d>(17)});
  auto plain = s.copy_to(kHost0);
  Tensor x = randn({2, 2, 18, 18}, g);
  const Tensor y = s.forward(x);
  EXPECT_EQ(grad_fn_name(y), "max_pool2d");
  EXPECT_EQ(y.shape(), Shape({2, 2, 1, 1}));
  const nn::FusionScope off(false);
  EXPECT_EQ(y.to_vector<float>(), plain->forward(x).to_vector<float>());
}

// Only a MaxPool2d right after the pair joins it; a module between (a second ReLU here) keeps
// the pair alone.
TEST(FusionTest, OnlyAnAdjacentMaxPoolJoinsThePair) {
  nn::BatchNorm2d bn(3);
  nn::ReLU relu;
  nn::MaxPool2d pool(2);
  EXPECT_TRUE(nn::fuses_batch_norm_relu_max_pool(bn, relu, pool));
  EXPECT_FALSE(nn::fuses_batch_norm_relu_max_pool(bn, pool, relu));
  EXPECT_FALSE(nn::fuses_batch_norm_relu_max_pool(bn, relu, relu));
  Generator g(4);
  Tensor x = randn({4, 3, 4, 4}, g);
  x.requires_grad_();
  nn::Sequential s({std::make_shared<nn::BatchNorm2d>(3), std::make_shared<nn::ReLU>(),
                    std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(2)});
  const Tensor y = s.forward(x);
  EXPECT_EQ(grad_fn_name(y), "max_pool2d");
  EXPECT_EQ(y.shape(), Shape({4, 3, 2, 2}));
}

// The fused node saves batch norm's bias (it recomputes the ReLU's mask from it): writing the bias
// in place between forward and backward is caught, with PyTorch's message.
TEST(FusionTest, TheFusedNodeChecksTheBiasItSaved) {
  nn::BatchNorm2d bn(3);
  nn::ReLU relu;
  Generator g(3);
  Tensor x = randn({4, 3, 2, 2}, g);
  x.requires_grad_();
  const Tensor y = nn::forward_batch_norm_relu(bn, relu, x);
  bn.find("bias").fill_(0.5f);
  expect_backward_catches_inplace_write(y);
}

// A subclass in either place keeps its own forward: only the exact classes fuse.
struct CountingReLU : nn::ReLU {
  Tensor forward(const Tensor& x) override {
    ++calls;
    return nn::ReLU::forward(x);
  }
  int calls = 0;
};

TEST(FusionTest, OnlyTheExactClassesFuse) {
  auto relu = std::make_shared<CountingReLU>();
  nn::Sequential s({std::make_shared<nn::BatchNorm2d>(3), relu});
  EXPECT_FALSE(nn::fuses_batch_norm_relu(s.child("0"), *relu));
  Generator g(2);
  Tensor x = randn({4, 3, 2, 2}, g);
  x.requires_grad_();
  const Tensor y = s.forward(x);
  EXPECT_EQ(relu->calls, 1);
  EXPECT_EQ(grad_fn_name(y), "relu");

  nn::BatchNorm2d bn(3);
  nn::ReLU plain_relu;
  EXPECT_TRUE(nn::fuses_batch_norm_relu(bn, plain_relu));
  EXPECT_FALSE(nn::fuses_batch_norm_relu(plain_relu, bn));  // the order matters
  EXPECT_EQ(grad_fn_name(nn::forward_batch_norm_relu(bn, plain_relu, x)), bn.repr() + "+ReLU");
}

}  // namespace
}  // namespace dpe
