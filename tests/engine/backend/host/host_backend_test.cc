#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // PyTorch's default ignore_index

const Device kHost0 = Device::parse("host:0");
const Device kHost1 = Device::parse("host:1");

Tensor floats(std::vector<float> v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// The message of the dpe::Error that `f` throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(HostBackendTest, HostDevicesShareOneRegisteredTableWithEveryPrim) {
  OpTable* table = find_op_table(DeviceType::kHost);
  ASSERT_NE(table, nullptr);
  for (int id = 0; id < static_cast<int>(PrimId::kCount); ++id) {
    EXPECT_TRUE(table->has(static_cast<PrimId>(id))) << id;  // the optional fused ones too
  }
  EXPECT_TRUE(supports<prim::BatchNormReluForwardTrain>(kHost1));
  Tensor x = Tensor::ones({4}), y = Tensor::empty({4});
  table->run(prim::ReluForward{x, y});  // the table computes what dispatch() would, unchecked
  EXPECT_EQ(y.to_vector<float>(), std::vector<float>(4, 1.0f));
}

// The host table declares channels-last kernels, so a host activation laid out channels last stays
// so through the ops that have them (prim::activation_format asks the table).
TEST(HostBackendTest, TheTableDeclaresChannelsLastKernels) {
  ASSERT_NE(find_op_table(DeviceType::kHost), nullptr);
  EXPECT_TRUE(find_op_table(DeviceType::kHost)->channels_last());
  const Tensor nhwc =
      Tensor::empty({2, 3, 4, 5}, DType::kFloat32, kHost1, MemoryFormat::kChannelsLast);
  EXPECT_EQ(prim::activation_format(nhwc), MemoryFormat::kChannelsLast);
  EXPECT_EQ(prim::activation_format(Tensor::empty({2, 3, 4, 5})), MemoryFormat::kContiguous);
  EXPECT_EQ(prim::activation_format(Tensor()), MemoryFormat::kContiguous);
}

TEST(HostBackendTest, LinearComputesAndNamesBothShapesOnMismatch) {
  Tensor x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = floats({1, 0, 0, 0, 1, 0}, {2, 3});
  Tensor bias = floats({10, 20}, {2});
  Tensor y = Tensor::empty({2, 2});
  dispatch(prim::LinearForward{x, w, bias, y});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{11, 22, 14, 25}));

  Tensor w_bad = Tensor::zeros({2, 4});
  const std::string msg = error_of([&] { dispatch(prim::LinearForward{x, w_bad, bias, y}); });
  EXPECT_TRUE(contains(msg, "linear:")) << msg;
  EXPECT_TRUE(contains(msg, "torch.Size([2, 3])")) << msg;
  EXPECT_TRUE(contains(msg, "torch.Size([2, 4])")) << msg;

  Tensor y_bad = Tensor::empty({3, 2});
  const std::string out_msg = error_of([&] { dispatch(prim::LinearForward{x, w, bias, y_bad}); });
  EXPECT_TRUE(contains(out_msg, "torch.Size([2, 2])") && contains(out_msg, "torch.Size([3, 2])"))
      << out_msg;

  // Undefined gradients are skipped.
  Tensor gy = Tensor::ones({2, 2}), gw = Tensor::empty({2, 3}), none;
  dispatch(prim::LinearBackward{x, w, gy, none, gw, none, 1.0f});
  EXPECT_EQ(gw.to_vector<float>(), (std::vector<float>{5, 7, 9, 5, 7, 9}));
}

TEST(HostBackendTest, RejectsMixedDevicesDtypesAndNonContiguousInputs) {
  Tensor a = Tensor::ones({2, 3}, kHost0);
  Tensor other = Tensor::ones({2, 3}, kHost1);
  Tensor out = Tensor::empty({2, 3}, DType::kFloat32, kHost0);
  const std::string dev = error_of([&] { dispatch(prim::Add{a, other, 1.0f, out}); });
  EXPECT_TRUE(contains(dev, "add: expected all tensors to be on the same device")) << dev;
  EXPECT_TRUE(contains(dev, "host:0") && contains(dev, "host:1")) << dev;

  Tensor labels = Tensor::zeros({2, 3}, DType::kInt64, kHost0);
  const std::string dt = error_of([&] { dispatch(prim::Mul{a, labels, out}); });
  EXPECT_TRUE(contains(dt, "mul: expected dtype float32 but got int64")) << dt;

  Tensor t = Tensor::ones({3, 2}).permute({1, 0});
  const std::string nc = error_of([&] { dispatch(prim::ReluForward{t, out}); });
  EXPECT_TRUE(contains(nc, "relu") && contains(nc, "contiguous")) << nc;

  Tensor wrong = Tensor::empty({3, 2});
  EXPECT_THROW(dispatch(prim::Scale{a, 2.0f, wrong}), Error);
}

TEST(HostBackendTest, Conv2dChecksChannelsAndOutputShape) {
  Tensor x = Tensor::ones({2, 3, 8, 8});
  Tensor w = Tensor::ones({4, 2, 3, 3});
  Tensor y = Tensor::empty({2, 4, 8, 8});
  const std::string msg = error_of([&] {
    dispatch(prim::Conv2dForward{x, w, Tensor(), {1, 1}, y});
  });
  EXPECT_TRUE(contains(msg, "conv2d:") && contains(msg, "torch.Size([4, 2, 3, 3])") &&
              contains(msg, "torch.Size([2, 3, 8, 8])"))
      << msg;

  Tensor w3 = Tensor::ones({4, 3, 3, 3});
  Tensor y_bad = Tensor::empty({2, 4, 6, 6});  // padding 1 keeps 8x8
  const std::string out = error_of([&] {
    dispatch(prim::Conv2dForward{x, w3, Tensor(), {1, 1}, y_bad});
  });
  EXPECT_TRUE(contains(out, "torch.Size([2, 4, 8, 8])") &&
              contains(out, "torch.Size([2, 4, 6, 6])"))
      << out;
  dispatch(prim::Conv2dForward{x, w3, Tensor(), {1, 1}, y});
  const std::vector<float> v = y.to_vector<float>();
  EXPECT_EQ(v[0], 12.0f);      // corner: 2x2 window over 3 channels
  EXPECT_EQ(v[8 + 1], 27.0f);  // interior: full 3x3 over 3 channels
}

TEST(HostBackendTest, MaxPoolWorkspaceIsInt64WithTheOutputShape) {
  Tensor x = floats({1, 5, 2, 0, 3, 4, 8, 7, 6}, {1, 1, 3, 3});
  Tensor y = Tensor::empty({1, 1, 1, 1});
  Tensor ws = Tensor::empty({1, 1, 1, 1}, DType::kInt64);
  dispatch(prim::MaxPool2dForward{x, {2, 2, 0}, y, ws});
  EXPECT_EQ(y.item(), 5.0f);
  EXPECT_EQ(ws.to_vector<int64_t>()[0], 1);
  Tensor ws_float = Tensor::empty({1, 1, 1, 1});
  EXPECT_THROW(dispatch(prim::MaxPool2dForward{x, {2, 2, 0}, y, ws_float}), Error);
  Tensor gx = Tensor::empty({1, 1, 3, 3});
  dispatch(prim::MaxPool2dBackward{Tensor::full({1, 1, 1, 1}, 2.0f), ws, {2, 2, 0}, gx});
  EXPECT_EQ(gx.to_vector<float>(), (std::vector<float>{0, 2, 0, 0, 0, 0, 0, 0, 0}));
}

// The fused batch norm + ReLU + pooling keeps window codes, a byte each: a window wider than 16
// is refused by name, not pooled into codes that wrap.
TEST(HostBackendTest, FusedPoolingRefusesWindowsWiderThanSixteen) {
  Tensor x = Tensor::ones({2, 1, 17, 17});
  Tensor g = Tensor::ones({1}), beta = Tensor::zeros({1}), mean = Tensor::empty({1}),
         var = Tensor::empty({1});
  Tensor y = Tensor::empty({2, 1, 1, 1});
  Tensor codes = Tensor::empty(prim::window_code_words(y.shape()), DType::kInt64);
  const Pool2dParams p{17, 17, 0};
  try {
    dispatch(prim::BatchNormReluMaxPoolForwardTrain{x, g, beta, 1e-5f, p, y, codes, mean, var});
    FAIL() << "expected kernel 17 to be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 17 has no window codes"), std::string::npos)
        << e.what();
  }
}

TEST(HostBackendTest, BatchNormNeedsMoreThanOneValuePerChannelWhenTraining) {
  Tensor x = Tensor::ones({1, 4});
  Tensor g = Tensor::ones({4}), beta = Tensor::zeros({4});
  Tensor y = Tensor::empty({1, 4}), mean = Tensor::empty({4}), var = Tensor::empty({4});
  const std::string msg = error_of([&] {
    dispatch(prim::BatchNormForwardTrain{x, g, beta, 1e-5f, y, mean, var});
  });
  EXPECT_TRUE(contains(msg, "expected more than 1 value per channel when training")) << msg;
  Tensor g_bad = Tensor::ones({3});
  Tensor x2 = floats({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor y2 = Tensor::empty({2, 4});
  const std::string shape = error_of([&] {
    dispatch(prim::BatchNormForwardTrain{x2, g_bad, beta, 1e-5f, y2, mean, var});
  });
  EXPECT_TRUE(contains(shape, "torch.Size([4])") && contains(shape, "torch.Size([3])")) << shape;
  dispatch(prim::BatchNormForwardTrain{x2, g, beta, 1e-5f, y2, mean, var});
  EXPECT_EQ(mean.to_vector<float>(), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(var.to_vector<float>(), (std::vector<float>{4, 4, 4, 4}));  // biased
}

// The fused batch norm + ReLU checks as the plain one does, naming itself, and its backward
// checks the bias it reads for the ReLU's mask.
TEST(HostBackendTest, BatchNormReluNamesItselfInItsErrors) {
  Tensor g = Tensor::ones({4}), beta = Tensor::zeros({4});
  Tensor mean = Tensor::empty({4}), var = Tensor::empty({4});
  Tensor one_row = Tensor::ones({1, 4}), y1 = Tensor::empty({1, 4});
  const std::string single = error_of([&] {
    dispatch(prim::BatchNormReluForwardTrain{one_row, g, beta, 1e-5f, y1, mean, var});
  });
  EXPECT_TRUE(contains(single, "batch_norm_relu: expected more than 1 value per channel"))
      << single;
  Tensor x = floats({1, -2, 3, -4, 5, 6, -7, 8}, {2, 4}), y = Tensor::empty({2, 4});
  dispatch(prim::BatchNormReluForwardTrain{x, g, beta, 1e-5f, y, mean, var});
  const std::vector<float> want{0, 0, 1, 0, 1, 1, 0, 1};  // +-1 per channel, clipped below
  const std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << i;
  Tensor gx = Tensor::empty({2, 4}), gg = Tensor::empty({4}), gb = Tensor::empty({4});
  Tensor beta_bad = Tensor::zeros({3});
  const std::string bias = error_of([&] {
    dispatch(prim::BatchNormReluBackward{x, Tensor::ones({2, 4}), g, beta_bad, mean, var, 1e-5f, gx,
                                         gg, gb});
  });
  EXPECT_TRUE(contains(bias, "batch_norm_relu_backward") && contains(bias, "bias")) << bias;
  dispatch(
      prim::BatchNormReluBackward{x, Tensor::ones({2, 4}), g, beta, mean, var, 1e-5f, gx, gg, gb});
  EXPECT_EQ(gb.to_vector<float>(), (std::vector<float>{1, 1, 1, 1}));  // one positive per channel
}

TEST(HostBackendTest, NllLossNamesTheBadTargetAndTheBatchMismatch) {
  Tensor logp = Tensor::zeros({2, 10});
  Tensor out = Tensor::empty({});
  Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, 12}, {2});
  EXPECT_EQ(error_of([&] {
              dispatch(prim::NllLossForward{logp, bad, kIgnoreIndex, out});
            }),
            "nll_loss: target 12 is out of bounds for 10 classes");
  Tensor three = Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3});
  const std::string msg = error_of([&] {
    dispatch(prim::NllLossForward{logp, three, kIgnoreIndex, out});
  });
  EXPECT_TRUE(contains(msg, "expected input batch_size (2) to match target batch_size (3)")) << msg;
  Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 2}, {2});
  Tensor lp = floats({0, -1, 0,  0, 0, -3, 0, 0, 0, 0,  //
                      0, 0,  -3, 0, 0, 0,  0, 0, 0, 0},
                     {2, 10});
  dispatch(prim::NllLossForward{lp, good, kIgnoreIndex, out});
  EXPECT_FLOAT_EQ(out.item(), 2.0f);
}

TEST(HostBackendTest, ScalarsArgmaxAndFiniteness) {
  Tensor x = floats({1, 9, 3, 7, 2, 0}, {2, 3});
  Tensor s = Tensor::empty({});
  dispatch(prim::SumAll{x, s});
  EXPECT_EQ(s.item(), 22.0f);
  Tensor idx = Tensor::empty({2}, DType::kInt64);
  dispatch(prim::ArgmaxRows{x, idx});
  EXPECT_EQ(idx.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  Tensor idx_float = Tensor::empty({2});
  EXPECT_THROW(dispatch(prim::ArgmaxRows{x, idx_float}), Error);
  EXPECT_TRUE(dispatch(prim::AllFinite{x}));
  EXPECT_FALSE(dispatch(prim::AllFinite{Tensor::full({3}, INFINITY)}));
}

TEST(HostBackendTest, OptimizerStepsUpdateInPlaceAndCheckBuffers) {
  auto sgd = [](float lr, float momentum) {
    return SgdStepParams{lr, momentum, 0.0f, 0.0f, false};
  };
  const AdamStepParams adam_lr{0.1f, 0.9, 0.999, 1e-8f, 0.0f, false};
  Tensor p = Tensor::ones({3}), g = Tensor::full({3}, 0.5f), buf;
  const uint64_t v = p.version();
  dispatch(prim::SgdStep{p, g, buf, sgd(0.1f, 0.0f), true});
  EXPECT_FLOAT_EQ(p.to_vector<float>()[0], 0.95f);
  EXPECT_GT(p.version(), v);
  EXPECT_THROW(dispatch(prim::SgdStep{p, g, buf, sgd(0.1f, 0.9f), true}), Error);
  Tensor m = Tensor::zeros({3}), sq = Tensor::zeros({3});
  dispatch(prim::AdamStep{p, g, m, sq, adam_lr, 1});
  EXPECT_NEAR(p.to_vector<float>()[0], 0.85f, 1e-6);  // the first Adam step moves by lr
}

TEST(HostBackendTest, DevicesRunInParallelEachWithItsOwnContext) {
  // Two host devices driving convolutions at once from their own threads: no shared state.
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> results(2);
  for (int d = 0; d < 2; ++d) {
    threads.emplace_back([d, &results] {
      const Device dev(DeviceType::kHost, d);
      Tensor x = Tensor::ones({2, 1, 6, 6}, dev), w = Tensor::ones({2, 1, 3, 3}, dev);
      Tensor y = Tensor::empty({2, 2, 4, 4}, DType::kFloat32, dev);
      for (int i = 0; i < 20; ++i) dispatch(prim::Conv2dForward{x, w, Tensor(), {1, 0}, y});
      results[d] = y.to_vector<float>();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(results[0][0], 9.0f);
}

}  // namespace
}  // namespace dpe
