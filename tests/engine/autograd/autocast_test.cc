// torch.autocast in dpe (engine/autograd/autocast.h): which dtype each list's ops run in, read
// from the op trace; the cast cache; gradients in the parameters' float32; promotion; refusals;
// (the state carried to other threads: tests/engine/parallel/autocast_propagation_test).
#include "engine/autograd/autocast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>

#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/tensor/random.h"
#include "engine/trace/op_trace.h"

namespace dpe {
namespace {

// The dtype each traced op (by name) last computed in.
std::map<std::string, DType> op_dtypes(const std::vector<TraceEvent>& events) {
  std::map<std::string, DType> out;
  for (const TraceEvent& e : events) {
    if (e.kind == TraceKind::kOp) out[e.name] = e.dtype;
  }
  return out;
}

TEST(AutocastTest, EachListRunsInItsDtype) {
  Generator gen(1);
  const Tensor x = randn({8, 16}, gen), w = randn({4, 16}, gen).requires_grad_();
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 3, 0, 1, 2, 3}, {8});
  OpTrace trace;
  Tensor logits, loss, mm, sm, ln, total;
  {
    autocast amp(DeviceType::kHost);
    logits = ops::linear(x, w, Tensor());
    loss = ops::cross_entropy(logits, target);
    mm = ops::matmul(x, ops::reshape(x, {16, 8}));
    sm = ops::softmax(ops::reshape(logits, {1, 8, 4}), false);
    ln = ops::layer_norm(logits, Tensor(), Tensor(), 1e-5f);
    total = ops::sum(logits);
  }
  const std::map<std::string, DType> ran = op_dtypes(trace.stop());
  EXPECT_EQ(logits.dtype(), DType::kBFloat16);
  EXPECT_EQ(mm.dtype(), DType::kBFloat16);
  EXPECT_EQ(ran.at("linear"), DType::kBFloat16);
  EXPECT_EQ(ran.at("matmul"), DType::kBFloat16);
  for (const Tensor* t : {&loss, &sm, &ln, &total}) EXPECT_EQ(t->dtype(), DType::kFloat32);
  for (const char* op : {"softmax", "layer_norm", "sum"}) EXPECT_EQ(ran.at(op), DType::kFloat32);
  EXPECT_EQ(ran.at("to"), DType::kFloat32);  // the float32 list's casts up
  // Outside the guard everything is float32 again.
  EXPECT_EQ(ops::linear(x, w, Tensor()).dtype(), DType::kFloat32);
  EXPECT_FALSE(autocast_state(DeviceType::kHost).enabled);
}

// A convolution runs in bfloat16; batch norm (apart and fused) and max pooling, which have no
// 16-bit kernels, read its output in float32 (dpe's float32 entries), with float32 gradients
// back through the casts.
TEST(AutocastTest, ConvolutionLowersAndBatchNormAndPoolingReadFloat32) {
  Generator gen(3);
  Tensor x = randn({2, 16, 6, 6}, gen).requires_grad_();
  Tensor w = randn({16, 16, 3, 3}, gen).requires_grad_();
  Tensor gamma = Tensor::ones({16}).requires_grad_(), beta = Tensor::zeros({16});
  Tensor mean = Tensor::zeros({16}), var = Tensor::ones({16});
  OpTrace trace;
  Tensor conv, bn, bn_relu, bn_pool, pool;
  {
    autocast guard(DeviceType::kHost);
    conv = ops::conv2d(x, w, Tensor(), 1, 1);
    bn = ops::batch_norm(conv, gamma, beta, mean, var, true, 0.1f, 1e-5f);
    bn_relu = ops::batch_norm_relu(conv, gamma, beta, mean, var, true, 0.1f, 1e-5f);
    bn_pool = ops::batch_norm_relu_max_pool2d(conv, gamma, beta, mean, var, true, 0.1f, 1e-5f, 2);
    pool = ops::max_pool2d(conv, 2);
  }
  const std::map<std::string, DType> ran = op_dtypes(trace.stop());
  EXPECT_EQ(conv.dtype(), DType::kBFloat16);
  EXPECT_EQ(ran.at("conv2d"), DType::kBFloat16);
  for (const Tensor* t : {&bn, &bn_relu, &bn_pool, &pool}) EXPECT_EQ(t->dtype(), DType::kFloat32);
  EXPECT_EQ(ran.at("max_pool2d"), DType::kFloat32);
  backward(ops::add(ops::add(ops::sum(bn), ops::sum(bn_relu)),
                    ops::add(ops::sum(bn_pool), ops::sum(pool))));
  EXPECT_EQ(x.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(w.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(gamma.grad().dtype(), DType::kFloat32);
}

// cross_entropy on the float32 list reads bfloat16 logits through its kernels' conversion rather
// than a float32 copy: no cast of the logits, and the same loss and gradient as the copy gives.
TEST(AutocastTest, CrossEntropyReadsBfloat16LogitsWithoutAFloat32Copy) {
  Generator gen(6);
  Tensor logits = randn({16, 50}, gen).to(DType::kBFloat16).requires_grad_();
  const Tensor target = Tensor::from_vector(std::vector<int64_t>(16, 3), {16});
  OpTrace trace;
  Tensor fused;
  {
    autocast amp(DeviceType::kHost);
    fused = ops::cross_entropy(logits, target);
  }
  const std::vector<TraceEvent> events = trace.stop();
  for (const TraceEvent& e : events) EXPECT_NE(e.name, "to") << "a cast of the logits";
  EXPECT_EQ(fused.dtype(), DType::kFloat32);
  backward(fused);
  const Tensor g_fused = logits.grad();
  logits.set_grad(Tensor());
  Tensor copied = ops::cross_entropy(ops::to(logits, DType::kFloat32), target);
  backward(copied);
  EXPECT_EQ(fused.item(), copied.item());
  ASSERT_EQ(g_fused.dtype(), DType::kBFloat16);
  EXPECT_EQ(g_fused.to(DType::kFloat32).to_vector<float>(),
            logits.grad().to(DType::kFloat32).to_vector<float>());
}

TEST(AutocastTest, AParameterIsCastOncePerForwardAndGetsAFloat32Gradient) {
  Generator gen(2);
  const Tensor x = randn({4, 8}, gen);
  Tensor w = randn({8, 8}, gen).requires_grad_();
  Tensor y32 = ops::sum(ops::linear(ops::linear(x, w, Tensor()), w, Tensor()));
  backward(y32);
  const std::vector<float> g32 = w.grad().to_vector<float>();
  w.set_grad(Tensor());
  OpTrace trace;
  {
    autocast amp(DeviceType::kHost);
    Tensor y = ops::sum(ops::linear(ops::linear(x, w, Tensor()), w, Tensor()));
    backward(y);
  }
  int weight_casts = 0;
  for (const TraceEvent& e : trace.stop()) {
    weight_casts +=
        e.name == "to" && !e.backward && e.dtype == DType::kBFloat16 && e.shapes[0][0] == w.numel();
  }
  EXPECT_EQ(weight_casts, 1);  // the cache served the second linear
  ASSERT_EQ(w.grad().dtype(), DType::kFloat32);
  const std::vector<float> g16 = w.grad().to_vector<float>();
  double diff = 0, ref = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    diff += (g16[i] - g32[i]) * (g16[i] - g32[i]);
    ref += g32[i] * g32[i];
  }
  EXPECT_LT(std::sqrt(diff / ref), 0.02);  // bfloat16's 8 bits over two products
}

TEST(AutocastTest, PromotionRefusalsAndTheDtypeItTakes) {
  const Tensor a = Tensor::full({3}, 1.5f), b = Tensor::full({3}, 2.0f).to(DType::kBFloat16);
  EXPECT_EQ(ops::add(a, b).dtype(), DType::kFloat32);  // type promotion, autocast or not
  EXPECT_EQ(ops::mul(b, b).dtype(), DType::kBFloat16);
  {
    autocast amp(DeviceType::kHost);
    EXPECT_EQ(ops::cat({a.view({1, 3}), b.view({1, 3})}, 0).dtype(), DType::kFloat32);
  }
  EXPECT_THROW(autocast(DeviceType::kHost, DType::kFloat32), Error);
  // An op with no 16-bit kernel on a 16-bit tensor outside autocast: refused, naming op, dtype
  // and device (only autocast casts, and only at its lists' ops).
  const Tensor img = Tensor::zeros({1, 1, 4, 4}).to(DType::kBFloat16);
  try {
    ops::max_pool2d(img, 2);
    FAIL() << "a bfloat16 max pooling ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_pool2d: host:0 has no bfloat16 kernel for it (host "
                                         "devices run it in float32)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dpe
