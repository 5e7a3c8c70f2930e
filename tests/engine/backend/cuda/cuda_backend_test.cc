// The CUDA backend against the host backend: every op, forward and backward, on the same random
// inputs; each 16-bit kernel against the host's and a float64 reference, and an autocast forward
// and backward against the host's; its argument and label errors; the caching allocator's
// statistics and out-of-memory error. Skips without a GPU (cuda_unavailable_test covers that
// case).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "engine/autograd/autocast.h"
#include "engine/autograd/engine.h"
#include "engine/autograd/ops.h"
#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace {

constexpr int64_t kIgnoreIndex = -100;  // PyTorch's default ignore_index

const Device kHost0 = Device::parse("host:0");
const Device kCuda0 = Device::parse("cuda:0");

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

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Runtime::get().device_count(DeviceType::kCuda) == 0) {
      GTEST_SKIP() << "no CUDA device: " << Runtime::get().device_status(DeviceType::kCuda);
    }
  }

  // Uniform values in [lo, hi) on host:0.
  Tensor random(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(static_cast<size_t>(shape.numel()));
    for (float& x : v) x = dist(rng_);
    return Tensor::from_vector(v, shape);
  }
  Tensor labels(int64_t n, int64_t classes) {
    std::uniform_int_distribution<int64_t> dist(0, classes - 1);
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t& x : v) x = dist(rng_);
    return Tensor::from_vector(v, Shape{n});
  }
  static Tensor dev(const Tensor& t) { return t.defined() ? t.to(kCuda0) : Tensor(); }
  static Tensor empty_like(const Tensor& t, Device d) {
    return Tensor::empty(t.shape(), t.dtype(), d);
  }

  // |gpu - host| <= atol + rtol * |host| elementwise.
  static void expect_close(const Tensor& on_gpu, const Tensor& on_host, const std::string& what,
                           float atol = 1e-4f, float rtol = 1e-4f) {
    ASSERT_EQ(on_gpu.shape(), on_host.shape()) << what;
    const std::vector<float> g = on_gpu.to_vector<float>();
    const std::vector<float> h = on_host.to_vector<float>();
    for (size_t i = 0; i < h.size(); ++i) {
      if (std::isnan(h[i])) {
        EXPECT_TRUE(std::isnan(g[i])) << what << " [" << i << "]";
        continue;
      }
      ASSERT_NEAR(g[i], h[i], atol + rtol * std::fabs(h[i])) << what << " [" << i << "]";
    }
  }

  std::mt19937 rng_{1234};
};

TEST_F(CudaBackendTest, ElementwiseMatchesHost) {
  const Shape s{7, 33};
  Tensor a = random(s), b = random(s), gy = random(s);
  Tensor ha = empty_like(a, kHost0), ga = empty_like(a, kCuda0);
  dispatch(prim::Add{a, b, -0.5f, ha});
  dispatch(prim::Add{dev(a), dev(b), -0.5f, ga});
  expect_close(ga, ha, "add");
  dispatch(prim::Mul{a, b, ha});
  dispatch(prim::Mul{dev(a), dev(b), ga});
  expect_close(ga, ha, "mul");
  dispatch(prim::Scale{a, 3.0f, ha});
  dispatch(prim::Scale{dev(a), 3.0f, ga});
  expect_close(ga, ha, "scale");
  dispatch(prim::ReluForward{a, ha});
  dispatch(prim::ReluForward{dev(a), ga});
  expect_close(ga, ha, "relu");
  Tensor hgx = empty_like(a, kHost0), ggx = empty_like(a, kCuda0);
  dispatch(prim::ReluBackward{ha, gy, hgx});
  dispatch(prim::ReluBackward{ga, dev(gy), ggx});
  expect_close(ggx, hgx, "relu_backward");

  Tensor x = random(s, -6.0f, 6.0f);
  dispatch(prim::GeluForward{x, ha});
  dispatch(prim::GeluForward{dev(x), ga});
  expect_close(ga, ha, "gelu", 1e-5f, 1e-5f);
  dispatch(prim::GeluBackward{x, gy, hgx});
  dispatch(prim::GeluBackward{dev(x), dev(gy), ggx});
  expect_close(ggx, hgx, "gelu_backward", 1e-5f, 1e-5f);
}

TEST_F(CudaBackendTest, ReductionsMatchHost) {
  Tensor x = random({1000, 37});
  Tensor hs = Tensor::empty({}), gs = Tensor::empty({}, DType::kFloat32, kCuda0);
  dispatch(prim::SumAll{x, hs});
  dispatch(prim::SumAll{dev(x), gs});
  EXPECT_NEAR(gs.item(), hs.item(), 1e-3);

  // Ties keep the first maximum; a NaN wins.
  std::vector<float> v = {1, 3, 3, 0, 5, 5, 5, 5, 0, std::nanf(""), 9, std::nanf("")};
  Tensor m = Tensor::from_vector(v, {3, 4});
  Tensor hi = Tensor::empty({3}, DType::kInt64), gi = Tensor::empty({3}, DType::kInt64, kCuda0);
  dispatch(prim::ArgmaxRows{m, hi});
  dispatch(prim::ArgmaxRows{dev(m), gi});
  EXPECT_EQ(gi.to_vector<int64_t>(), hi.to_vector<int64_t>());
  Tensor wide = random({5, 3000});
  Tensor hw = Tensor::empty({5}, DType::kInt64), gw = Tensor::empty({5}, DType::kInt64, kCuda0);
  dispatch(prim::ArgmaxRows{wide, hw});
  dispatch(prim::ArgmaxRows{dev(wide), gw});
  EXPECT_EQ(gw.to_vector<int64_t>(), hw.to_vector<int64_t>());

  EXPECT_TRUE(dispatch(prim::AllFinite{dev(x)}));
  std::vector<float> bad(100, 1.0f);
  bad[77] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(dispatch(prim::AllFinite{dev(Tensor::from_vector(bad, {100}))}));
  bad[77] = std::nanf("");
  EXPECT_FALSE(dispatch(prim::AllFinite{dev(Tensor::from_vector(bad, {100}))}));
}

TEST_F(CudaBackendTest, LinearAndMatmulMatchHost) {
  Tensor x = random({9, 17}), w = random({5, 17}), b = random({5}), gy = random({9, 5});
  for (bool bias : {true, false}) {
    Tensor bb = bias ? b : Tensor();
    Tensor hy = Tensor::empty({9, 5}), gyy = Tensor::empty({9, 5}, DType::kFloat32, kCuda0);
    dispatch(prim::LinearForward{x, w, bb, hy});
    dispatch(prim::LinearForward{dev(x), dev(w), dev(bb), gyy});
    expect_close(gyy, hy, "linear");
  }
  Tensor hgx = empty_like(x, kHost0), hgw = empty_like(w, kHost0), hgb = empty_like(b, kHost0);
  Tensor ggx = empty_like(x, kCuda0), ggw = empty_like(w, kCuda0), ggb = empty_like(b, kCuda0);
  dispatch(prim::LinearBackward{x, w, gy, hgx, hgw, hgb, 0.25f});
  dispatch(prim::LinearBackward{dev(x), dev(w), dev(gy), ggx, ggw, ggb, 0.25f});
  expect_close(ggx, hgx, "linear grad_input");
  expect_close(ggw, hgw, "linear grad_weight");
  expect_close(ggb, hgb, "linear grad_bias");

  // The weight stored [in, out] (GPT-2's Conv1D): the same products from the other layout.
  Tensor wt = w.permute({1, 0}).contiguous(), hyt = Tensor::empty({9, 5});
  Tensor gyt = Tensor::empty({9, 5}, DType::kFloat32, kCuda0);
  dispatch(prim::LinearForward{x, wt, b, hyt, true});
  dispatch(prim::LinearForward{dev(x), dev(wt), dev(b), gyt, true});
  expect_close(gyt, hyt, "linear, weight [in, out]");
  Tensor hgwt = empty_like(wt, kHost0), ggwt = empty_like(wt, kCuda0);
  dispatch(prim::LinearBackward{x, wt, gy, hgx, hgwt, hgb, 0.25f, true});
  dispatch(prim::LinearBackward{dev(x), dev(wt), dev(gy), ggx, ggwt, ggb, 0.25f, true});
  expect_close(ggx, hgx, "linear grad_input, weight [in, out]");
  expect_close(ggwt, hgwt, "linear grad_weight [in, out]");

  Tensor a = random({6, 11}), c = random({11, 4});
  Tensor hc = Tensor::empty({6, 4}), gc = Tensor::empty({6, 4}, DType::kFloat32, kCuda0);
  dispatch(prim::Matmul{a, c, hc});
  dispatch(prim::Matmul{dev(a), dev(c), gc});
  expect_close(gc, hc, "matmul");

  // GPT-2's attention shapes (batch x heads, T, head dim) with every transpose combination.
  for (int flags = 0; flags < 4; ++flags) {
    const bool ta = flags & 1, tb = flags & 2;
    const int64_t batch = 6, m = 33, k = 64, n = 17;
    Tensor x1 = random(ta ? Shape{batch, k, m} : Shape{batch, m, k});
    Tensor x2 = random(tb ? Shape{batch, n, k} : Shape{batch, k, n});
    Tensor hb = Tensor::empty({batch, m, n}),
           gb = Tensor::empty({batch, m, n}, DType::kFloat32, kCuda0);
    dispatch(prim::Bmm{x1, x2, ta, tb, hb});
    dispatch(prim::Bmm{dev(x1), dev(x2), ta, tb, gb});
    expect_close(gb, hb, "bmm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
  }
}

TEST_F(CudaBackendTest, Conv2dMatchesHost) {
  struct Case {
    Conv2dParams p;
    bool bias;
  };
  for (const Case& k : {Case{{1, 1}, true}, Case{{2, 0}, false}, Case{{2, 2}, true}}) {
    Tensor x = random({3, 4, 9, 10}), w = random({6, 4, 3, 3}), b = random({6});
    Tensor bb = k.bias ? b : Tensor();
    const int64_t ho = (9 + 2 * k.p.padding - 3) / k.p.stride + 1;
    const int64_t wo = (10 + 2 * k.p.padding - 3) / k.p.stride + 1;
    const Shape ys{3, 6, ho, wo};
    Tensor hy = Tensor::empty(ys), gyy = Tensor::empty(ys, DType::kFloat32, kCuda0);
    dispatch(prim::Conv2dForward{x, w, bb, k.p, hy});
    dispatch(prim::Conv2dForward{dev(x), dev(w), dev(bb), k.p, gyy});
    expect_close(gyy, hy, "conv2d", 1e-3f, 1e-3f);

    Tensor gy = random(ys);
    Tensor hgx = empty_like(x, kHost0), hgw = empty_like(w, kHost0), hgb = empty_like(b, kHost0);
    Tensor ggx = empty_like(x, kCuda0), ggw = empty_like(w, kCuda0), ggb = empty_like(b, kCuda0);
    dispatch(prim::Conv2dBackward{x, w, gy, k.p, hgx, hgw, hgb});
    dispatch(prim::Conv2dBackward{dev(x), dev(w), dev(gy), k.p, ggx, ggw, ggb});
    expect_close(ggx, hgx, "conv2d grad_input", 1e-3f, 1e-3f);
    expect_close(ggw, hgw, "conv2d grad_weight", 1e-3f, 1e-3f);
    expect_close(ggb, hgb, "conv2d grad_bias", 1e-3f, 1e-3f);
  }
}

TEST_F(CudaBackendTest, MaxPool2dMatchesHostIncludingIndices) {
  for (const Pool2dParams& p :
       {Pool2dParams{2, 2, 0}, Pool2dParams{3, 2, 1}, Pool2dParams{3, 1, 0}}) {
    Tensor x = random({2, 3, 8, 9});
    const int64_t ho = (8 + 2 * p.padding - p.kernel) / p.stride + 1;
    const int64_t wo = (9 + 2 * p.padding - p.kernel) / p.stride + 1;
    const Shape ys{2, 3, ho, wo};
    Tensor hy = Tensor::empty(ys), hi = Tensor::empty(ys, DType::kInt64);
    Tensor gyy = Tensor::empty(ys, DType::kFloat32, kCuda0);
    Tensor gi = Tensor::empty(ys, DType::kInt64, kCuda0);
    dispatch(prim::MaxPool2dForward{x, p, hy, hi});
    dispatch(prim::MaxPool2dForward{dev(x), p, gyy, gi});
    expect_close(gyy, hy, "max_pool2d", 0.0f, 0.0f);
    EXPECT_EQ(gi.to_vector<int64_t>(), hi.to_vector<int64_t>());

    Tensor gy = random(ys);
    Tensor hgx = empty_like(x, kHost0), ggx = empty_like(x, kCuda0);
    dispatch(prim::MaxPool2dBackward{gy, hi, p, hgx});
    dispatch(prim::MaxPool2dBackward{dev(gy), gi, p, ggx});
    expect_close(ggx, hgx, "max_pool2d_backward", 1e-6f, 1e-6f);
  }
}

TEST_F(CudaBackendTest, BatchNormMatchesHost) {
  for (const Shape& s : {Shape{8, 5}, Shape{4, 3, 6, 7}}) {
    const int64_t c = s[1];
    Tensor x = random(s, -2.0f, 3.0f), gamma = random({c}), beta = random({c});
    Tensor gy = random(s);
    Tensor hy = empty_like(x, kHost0), hm = Tensor::empty({c}), hv = Tensor::empty({c});
    Tensor gyy = empty_like(x, kCuda0), gm = empty_like(hm, kCuda0), gv = empty_like(hv, kCuda0);
    dispatch(prim::BatchNormForwardTrain{x, gamma, beta, 1e-5f, hy, hm, hv});
    dispatch(prim::BatchNormForwardTrain{dev(x), dev(gamma), dev(beta), 1e-5f, gyy, gm, gv});
    expect_close(gyy, hy, "batch_norm train");
    expect_close(gm, hm, "batch_norm mean");
    expect_close(gv, hv, "batch_norm var");

    dispatch(prim::BatchNormForwardEval{x, gamma, beta, hm, hv, 1e-5f, hy});
    dispatch(prim::BatchNormForwardEval{dev(x), dev(gamma), dev(beta), gm, gv, 1e-5f, gyy});
    expect_close(gyy, hy, "batch_norm eval");

    Tensor hgx = empty_like(x, kHost0), hgg = Tensor::empty({c}), hgb = Tensor::empty({c});
    Tensor ggx = empty_like(x, kCuda0), ggg = empty_like(hgg, kCuda0),
           ggb = empty_like(hgb, kCuda0);
    dispatch(prim::BatchNormBackward{x, gy, gamma, hm, hv, 1e-5f, hgx, hgg, hgb});
    dispatch(prim::BatchNormBackward{dev(x), dev(gy), dev(gamma), gm, gv, 1e-5f, ggx, ggg, ggb});
    expect_close(ggx, hgx, "batch_norm grad_input", 1e-3f, 1e-3f);
    expect_close(ggg, hgg, "batch_norm grad_weight", 1e-3f, 1e-3f);
    expect_close(ggb, hgb, "batch_norm grad_bias", 1e-3f, 1e-3f);

    // No fused batch norm + ReLU kernel on CUDA: the prim names itself and the device type.
    const std::string fused = error_of([&] {
      dispatch(prim::BatchNormReluForwardTrain{dev(x), dev(gamma), dev(beta), 1e-5f, gyy, gm, gv});
    });
    EXPECT_TRUE(contains(fused, "batch_norm_relu: cuda devices have no kernel for it")) << fused;

    // SyncBatchNorm's building blocks.
    Tensor hs = Tensor::empty({c}), hq = Tensor::empty({c});
    Tensor gs = empty_like(hs, kCuda0), gq = empty_like(hq, kCuda0);
    dispatch(prim::ChannelSums{x, hs, hq});
    dispatch(prim::ChannelSums{dev(x), gs, gq});
    expect_close(gs, hs, "channel_sums sum", 1e-3f, 1e-4f);
    expect_close(gq, hq, "channel_sums sumsq", 1e-3f, 1e-4f);
    dispatch(prim::ChannelGradSums{x, gy, hm, hs, hq});
    dispatch(prim::ChannelGradSums{dev(x), dev(gy), gm, gs, gq});
    expect_close(gs, hs, "channel_grad_sums sum_dy", 1e-3f, 1e-4f);
    expect_close(gq, hq, "channel_grad_sums sum_dy_xmu", 1e-3f, 1e-4f);
    Tensor invstd = random({c}, 0.5f, 2.0f), mg = random({c}), mgx = random({c});
    dispatch(prim::BatchNormElemt{x, hm, invstd, gamma, beta, hy});
    dispatch(prim::BatchNormElemt{dev(x), gm, dev(invstd), dev(gamma), dev(beta), gyy});
    expect_close(gyy, hy, "batch_norm_elemt");
    dispatch(prim::BatchNormBackwardElemt{x, gy, hm, invstd, gamma, mg, mgx, hgx});
    dispatch(prim::BatchNormBackwardElemt{dev(x), dev(gy), gm, dev(invstd), dev(gamma), dev(mg),
                                          dev(mgx), ggx});
    expect_close(ggx, hgx, "batch_norm_backward_elemt");
  }
}

TEST_F(CudaBackendTest, EmbeddingMatchesHostAndNamesTheBadIndex) {
  // Many repeated indices: the CUDA gradient accumulates them with atomics.
  Tensor w = random({50, 130}), index = labels(3000, 50), gy = random({3000, 130});
  Tensor hy = Tensor::empty({3000, 130}), gyy = Tensor::empty({3000, 130}, DType::kFloat32, kCuda0);
  dispatch(prim::EmbeddingForward{w, index, hy});
  dispatch(prim::EmbeddingForward{dev(w), dev(index), gyy});
  expect_close(gyy, hy, "embedding", 0.0f, 0.0f);
  Tensor hgw = empty_like(w, kHost0), ggw = empty_like(w, kCuda0);
  dispatch(prim::EmbeddingBackward{index, gy, hgw});
  dispatch(prim::EmbeddingBackward{dev(index), dev(gy), ggw});
  expect_close(ggw, hgw, "embedding_backward", 1e-4f, 1e-4f);

  Tensor bad = dev(Tensor::from_vector(std::vector<int64_t>{1, 50, -1}, {3}));
  Tensor y3 = Tensor::empty({3, 130}, DType::kFloat32, kCuda0);
  EXPECT_EQ(error_of([&] {
              dispatch(prim::EmbeddingForward{dev(w), bad, y3});
            }),
            "embedding: index 50 is out of range for 50 rows");
  EXPECT_EQ(error_of([&] {
              dispatch(prim::EmbeddingBackward{bad, y3, ggw});
            }),
            "embedding: index 50 is out of range for 50 rows");
}

TEST_F(CudaBackendTest, LayerNormMatchesHost) {
  // 768: GPT-2's width; 1000 rows: more chunks than one in the parameter-gradient reduction.
  for (const Shape& s : {Shape{5, 7}, Shape{4, 250, 768}, Shape{3, 33}}) {
    const int64_t d = s[s.rank() - 1], rows = s.numel() / d;
    Tensor x = random(s, -2.0f, 3.0f), gamma = random({d}), beta = random({d}), gy = random(s);
    for (bool affine : {true, false}) {
      Tensor g = affine ? gamma : Tensor(), b = affine ? beta : Tensor();
      Tensor hy = empty_like(x, kHost0), hm = Tensor::empty({rows}), hr = Tensor::empty({rows});
      Tensor gyy = empty_like(x, kCuda0), gm = empty_like(hm, kCuda0), gr = empty_like(hr, kCuda0);
      dispatch(prim::LayerNormForward{x, g, b, 1e-5f, hy, hm, hr});
      dispatch(prim::LayerNormForward{dev(x), dev(g), dev(b), 1e-5f, gyy, gm, gr});
      expect_close(gyy, hy, "layer_norm");
      expect_close(gm, hm, "layer_norm mean");
      expect_close(gr, hr, "layer_norm rstd");
      Tensor hgx = empty_like(x, kHost0), ggx = empty_like(x, kCuda0);
      Tensor hgg = affine ? Tensor::empty({d}) : Tensor(),
             hgb = affine ? Tensor::empty({d}) : Tensor();
      Tensor ggg = affine ? empty_like(hgg, kCuda0) : Tensor();
      Tensor ggb = affine ? empty_like(hgb, kCuda0) : Tensor();
      dispatch(prim::LayerNormBackward{x, gy, g, hm, hr, hgx, hgg, hgb});
      dispatch(prim::LayerNormBackward{dev(x), dev(gy), dev(g), gm, gr, ggx, ggg, ggb});
      expect_close(ggx, hgx, "layer_norm grad_input", 1e-4f, 1e-3f);
      if (affine) {
        expect_close(ggg, hgg, "layer_norm grad_weight", 1e-3f, 1e-3f);
        expect_close(ggb, hgb, "layer_norm grad_bias", 1e-3f, 1e-3f);
      }
    }
  }
}

TEST_F(CudaBackendTest, SoftmaxWithAndWithoutCausalMaskMatchesHost) {
  // Square, more keys than queries, more queries than keys (all-masked rows), and wider than a
  // block (1024 keys: each thread loops).
  for (const Shape& s : {Shape{4, 12, 12}, Shape{2, 3, 9}, Shape{2, 6, 4}, Shape{2, 3, 5, 1024}}) {
    Tensor x = random(s, -8.0f, 8.0f), gy = random(s);
    for (bool causal : {false, true}) {
      Tensor hy = empty_like(x, kHost0), gyy = empty_like(x, kCuda0);
      dispatch(prim::SoftmaxForward{x, causal, hy});
      dispatch(prim::SoftmaxForward{dev(x), causal, gyy});
      expect_close(gyy, hy, std::string("softmax causal=") + (causal ? "1" : "0"), 1e-6f, 1e-5f);
      Tensor hgx = empty_like(x, kHost0), ggx = empty_like(x, kCuda0);
      dispatch(prim::SoftmaxBackward{hy, gy, hgx});
      dispatch(prim::SoftmaxBackward{gyy, dev(gy), ggx});
      expect_close(ggx, hgx, "softmax_backward", 1e-6f, 1e-4f);
    }
  }
}

TEST_F(CudaBackendTest, LogSoftmaxAndNllLossMatchHost) {
  Tensor x = random({13, 10}, -5.0f, 5.0f), gy = random({13, 10});
  Tensor hy = empty_like(x, kHost0), gyy = empty_like(x, kCuda0);
  dispatch(prim::LogSoftmaxForward{x, hy});
  dispatch(prim::LogSoftmaxForward{dev(x), gyy});
  expect_close(gyy, hy, "log_softmax");
  Tensor hgx = empty_like(x, kHost0), ggx = empty_like(x, kCuda0);
  dispatch(prim::LogSoftmaxBackward{hy, gy, hgx});
  dispatch(prim::LogSoftmaxBackward{gyy, dev(gy), ggx});
  expect_close(ggx, hgx, "log_softmax_backward");

  Tensor t = labels(13, 10);
  Tensor hl = Tensor::empty({}), gl = Tensor::empty({}, DType::kFloat32, kCuda0);
  dispatch(prim::NllLossForward{hy, t, kIgnoreIndex, hl});
  dispatch(prim::NllLossForward{gyy, dev(t), kIgnoreIndex, gl});
  EXPECT_NEAR(gl.item(), hl.item(), 1e-5);
  Tensor gout = Tensor::scalar(0.7f);
  dispatch(prim::NllLossBackward{gout, t, kIgnoreIndex, hgx});
  dispatch(prim::NllLossBackward{dev(gout), dev(t), kIgnoreIndex, ggx});
  expect_close(ggx, hgx, "nll_loss_backward", 0.0f, 1e-6f);

  // ignore_index: an out-of-range -100 and an in-range class are both skipped and not counted;
  // all ignored gives NaN on both.
  for (int64_t ignore : {int64_t{-100}, int64_t{3}}) {
    std::vector<int64_t> tv = t.to_vector<int64_t>();
    for (size_t i = 0; i < tv.size(); i += 3) tv[i] = ignore;
    Tensor ti = Tensor::from_vector(tv, {13});
    dispatch(prim::NllLossForward{hy, ti, ignore, hl});
    dispatch(prim::NllLossForward{gyy, dev(ti), ignore, gl});
    EXPECT_NEAR(gl.item(), hl.item(), 1e-5) << "ignore_index " << ignore;
    dispatch(prim::NllLossBackward{gout, ti, ignore, hgx});
    dispatch(prim::NllLossBackward{dev(gout), dev(ti), ignore, ggx});
    expect_close(ggx, hgx, "nll_loss_backward with ignore_index", 0.0f, 1e-6f);
  }
  Tensor all = Tensor::from_vector(std::vector<int64_t>(13, -100), {13});
  dispatch(prim::NllLossForward{gyy, dev(all), -100, gl});
  EXPECT_TRUE(std::isnan(gl.item()));
}

TEST_F(CudaBackendTest, NllLossNamesTheBadLabelAsTheHostDoes) {
  Tensor logp = dev(random({3, 10}));
  Tensor target = dev(Tensor::from_vector(std::vector<int64_t>{1, 12, -1}, {3}));
  Tensor out = Tensor::empty({}, DType::kFloat32, kCuda0);
  const std::string msg = error_of([&] {
    dispatch(prim::NllLossForward{logp, target, kIgnoreIndex, out});
  });
  EXPECT_EQ(msg, "nll_loss: target 12 is out of bounds for 10 classes");
  Tensor gx = Tensor::empty({3, 10}, DType::kFloat32, kCuda0);
  Tensor gout = dev(Tensor::scalar(1.0f));
  const std::string back = error_of([&] {
    dispatch(prim::NllLossBackward{gout, target, kIgnoreIndex, gx});
  });
  EXPECT_EQ(back, "nll_loss: target 12 is out of bounds for 10 classes");
  // The device is still usable afterwards.
  Tensor ok = dev(Tensor::from_vector(std::vector<int64_t>{1, 2, 3}, {3}));
  EXPECT_NO_THROW(dispatch(prim::NllLossForward{logp, ok, kIgnoreIndex, out}));
}

TEST_F(CudaBackendTest, DropoutMaskIsDeterministicAndMatchesTheHostHash) {
  Tensor hm = Tensor::empty({4097});
  Tensor g1 = Tensor::empty({4097}, DType::kFloat32, kCuda0);
  Tensor g2 = Tensor::empty({4097}, DType::kFloat32, kCuda0);
  dispatch(prim::DropoutMask{0.3f, 42, hm});
  dispatch(prim::DropoutMask{0.3f, 42, g1});
  dispatch(prim::DropoutMask{0.3f, 42, g2});
  EXPECT_EQ(g1.to_vector<float>(), g2.to_vector<float>());
  EXPECT_EQ(g1.to_vector<float>(), hm.to_vector<float>());
  const std::string msg = error_of([&] { dispatch(prim::DropoutMask{1.5f, 1, g1}); });
  EXPECT_TRUE(contains(msg, "dropout: probability has to be between 0 and 1")) << msg;
}

TEST_F(CudaBackendTest, OptimizerStepsMatchHost) {
  const Shape s{257};
  Tensor grad = random(s);
  for (bool nesterov : {false, true}) {
    const SgdStepParams sgd{0.1f, 0.9f, 0.0f, 1e-2f, nesterov};
    Tensor hp = random(s), hb = Tensor::zeros(s);
    Tensor gp = dev(hp), gb = dev(hb);
    for (int step = 0; step < 3; ++step) {
      dispatch(prim::SgdStep{hp, grad, hb, sgd, step == 0});
      dispatch(prim::SgdStep{gp, dev(grad), gb, sgd, step == 0});
    }
    expect_close(gp, hp, "sgd param");
    expect_close(gb, hb, "sgd momentum_buffer");
  }
  for (bool adamw : {false, true}) {
    const AdamStepParams adam{1e-2f, 0.9, 0.999, 1e-8f, 0.1f, adamw};
    Tensor hp = random(s), hm = Tensor::zeros(s), hv = Tensor::zeros(s);
    Tensor gp = dev(hp), gm = dev(hm), gv = dev(hv);
    for (int64_t step = 1; step <= 3; ++step) {
      dispatch(prim::AdamStep{hp, grad, hm, hv, adam, step});
      dispatch(prim::AdamStep{gp, dev(grad), gm, gv, adam, step});
    }
    expect_close(gp, hp, "adam param");
    expect_close(gm, hm, "adam exp_avg");
    expect_close(gv, hv, "adam exp_avg_sq");
  }
}

TEST_F(CudaBackendTest, ArgumentErrorsMatchTheHostBackend) {
  Tensor x = random({2, 3}), w = random({2, 4}), y = Tensor::empty({2, 2});
  const std::string h = error_of([&] { dispatch(prim::LinearForward{x, w, Tensor(), y}); });
  Tensor gyy = empty_like(y, kCuda0);
  const std::string g = error_of([&] {
    dispatch(prim::LinearForward{dev(x), dev(w), Tensor(), gyy});
  });
  EXPECT_FALSE(g.empty());
  EXPECT_EQ(g, h);
  const std::string mixed = error_of([&] { dispatch(prim::Add{dev(x), x, 1.0f, gyy}); });
  EXPECT_TRUE(contains(mixed, "expected all tensors to be on the same device")) << mixed;
}

// --- 16-bit kernels ---

// The bound of tests/kernels/host/lowp_test_util.h, which the host's 16-bit kernels are held to:
// the output's rounding (2^-8 relative for bfloat16, 2^-11 for float16), plus float32
// accumulation over `terms` products (terms * 2^-23 of the sum of their magnitudes, doubled), plus
// half of float16's smallest subnormal for an output that small.
double lowp_bound(DType dt, double ref, double abs_sum, int64_t terms) {
  const double unit = dt == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;
  return unit * std::fabs(ref) + 2.0 * static_cast<double>(terms) * 0x1p-23 * abs_sum +
         (dt == DType::kFloat16 ? 0x1p-25 : 1e-30);
}

// A float64 reference: each element's exact value from the same 16-bit inputs, and the sum of the
// magnitudes of the terms it adds up (`terms` of them at most).
struct LowpRef {
  std::vector<double> value, abs_sum;
  int64_t terms = 1;
};

// ref[i, j] = alpha * (sum over p < k of a(i, p) * b(p, j), + bias[j] when given), the product of
// an [m, k] and a [k, n] matrix read through `a` and `b`.
template <class A, class B>
LowpRef gemm_ref(int64_t m, int64_t n, int64_t k, A a, B b, const std::vector<double>* bias,
                 double alpha = 1.0) {
  LowpRef r;
  r.terms = k + (bias != nullptr ? 1 : 0);
  r.value.assign(static_cast<size_t>(m * n), 0.0);
  r.abs_sum = r.value;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = bias != nullptr ? (*bias)[j] : 0.0;
      double sa = std::fabs(s);
      for (int64_t p = 0; p < k; ++p) {
        s += a(i, p) * b(p, j);
        sa += std::fabs(a(i, p) * b(p, j));
      }
      r.value[i * n + j] = alpha * s;
      r.abs_sum[i * n + j] = std::fabs(alpha) * sa;
    }
  }
  return r;
}

// r transposed as a [rows, cols] matrix (the gradient of a weight stored [in, out]).
LowpRef transposed(const LowpRef& r, int64_t rows, int64_t cols) {
  LowpRef t = r;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      t.value[j * rows + i] = r.value[i * cols + j];
      t.abs_sum[j * rows + i] = r.abs_sum[i * cols + j];
    }
  }
  return t;
}

std::string lowp_name(DType dt, const std::string& what) { return dtype_name(dt) + (" " + what); }

class CudaBackendLowpTest : public CudaBackendTest, public ::testing::WithParamInterface<DType> {
 protected:
  // A 16-bit tensor on host:0 (uniform values in [lo, hi) rounded to the dtype) and its values.
  struct Lowp {
    Tensor t;
    std::vector<double> v;
  };
  Lowp random_lowp(const Shape& shape, float lo = -1.0f, float hi = 1.0f) {
    Lowp out;
    out.t = random(shape, lo, hi).to(GetParam());
    out.v = widened(out.t);
    return out;
  }
  // Every value of a floating tensor on any device, exactly (16-bit values are exact in double).
  static std::vector<double> widened(const Tensor& t) {
    const std::vector<float> f = t.to(kHost0).to(DType::kFloat32).to_vector<float>();
    return std::vector<double>(f.begin(), f.end());
  }
  Tensor empty16(const Shape& s, Device d) const { return Tensor::empty(s, GetParam(), d); }

  // The 16-bit results of one prim on cuda:0 and on host:0 (its 16-bit host kernel), each within
  // lowp_bound of the float64 reference, so within twice that of each other.
  void expect_lowp_close(const Tensor& on_gpu, const Tensor& on_host, const LowpRef& ref,
                         const std::string& what) const {
    const DType dt = GetParam();
    ASSERT_EQ(on_gpu.dtype(), dt) << what;
    ASSERT_TRUE(on_gpu.device().is_cuda()) << what;
    const std::vector<double> g = widened(on_gpu), h = widened(on_host);
    ASSERT_EQ(g.size(), ref.value.size()) << what;
    ASSERT_EQ(h.size(), ref.value.size()) << what;
    for (size_t i = 0; i < g.size(); ++i) {
      const double b = lowp_bound(dt, ref.value[i], ref.abs_sum[i], ref.terms);
      ASSERT_LE(std::fabs(g[i] - ref.value[i]), b)
          << lowp_name(dt, what) << " [" << i << "] on cuda:0: " << g[i] << " against "
          << ref.value[i];
      ASSERT_LE(std::fabs(h[i] - ref.value[i]), b)
          << lowp_name(dt, what) << " [" << i << "] on host:0: " << h[i] << " against "
          << ref.value[i];
      ASSERT_LE(std::fabs(g[i] - h[i]), 2.0 * b)
          << lowp_name(dt, what) << " [" << i << "]: cuda:0 " << g[i] << ", host:0 " << h[i];
    }
  }

  // Bit for bit (an operation rounded once from the same float32 value on both devices).
  void expect_lowp_equal(const Tensor& on_gpu, const Tensor& on_host,
                         const std::string& what) const {
    ASSERT_EQ(on_gpu.dtype(), GetParam()) << what;
    ASSERT_EQ(on_host.dtype(), GetParam()) << what;
    EXPECT_EQ(widened(on_gpu), widened(on_host)) << lowp_name(GetParam(), what);
  }
};

TEST_P(CudaBackendLowpTest, LinearMatchesHostAndFloat64) {
  const int64_t n = 33, in = 70, out = 29;
  const float scale = 0.25f;  // DDP's 1/world on the parameters' gradients
  const Lowp x = random_lowp({n, in}), w = random_lowp({out, in}), b = random_lowp({out});
  const Lowp gy = random_lowp({n, out});
  const auto at_x = [&](int64_t i, int64_t p) { return x.v[i * in + p]; };
  const auto at_w_t = [&](int64_t p, int64_t j) { return w.v[j * in + p]; };  // w^T [in, out]
  for (bool bias : {true, false}) {
    Tensor bb = bias ? b.t : Tensor();
    Tensor hy = empty16({n, out}, kHost0), gyy = empty16({n, out}, kCuda0);
    dispatch(prim::LinearForward{x.t, w.t, bb, hy});
    dispatch(prim::LinearForward{dev(x.t), dev(w.t), dev(bb), gyy});
    expect_lowp_close(gyy, hy, gemm_ref(n, out, in, at_x, at_w_t, bias ? &b.v : nullptr),
                      bias ? "linear" : "linear without bias");
  }
  const LowpRef rgx = gemm_ref(
      n, in, out, [&](int64_t i, int64_t p) { return gy.v[i * out + p]; },
      [&](int64_t p, int64_t j) { return w.v[p * in + j]; }, nullptr);
  const LowpRef rgw = gemm_ref(
      out, in, n, [&](int64_t i, int64_t p) { return gy.v[p * out + i]; }, at_x, nullptr, scale);
  const std::vector<double> ones(static_cast<size_t>(n), 1.0);
  const LowpRef rgb = gemm_ref(
      1, out, n, [&](int64_t, int64_t p) { return ones[p]; },
      [&](int64_t p, int64_t j) { return gy.v[p * out + j]; }, nullptr, scale);
  Tensor hgx = empty16({n, in}, kHost0), hgw = empty16({out, in}, kHost0);
  Tensor hgb = empty16({out}, kHost0);
  Tensor ggx = empty16({n, in}, kCuda0), ggw = empty16({out, in}, kCuda0);
  Tensor ggb = empty16({out}, kCuda0);
  dispatch(prim::LinearBackward{x.t, w.t, gy.t, hgx, hgw, hgb, scale});
  dispatch(prim::LinearBackward{dev(x.t), dev(w.t), dev(gy.t), ggx, ggw, ggb, scale});
  expect_lowp_close(ggx, hgx, rgx, "linear grad_input");
  expect_lowp_close(ggw, hgw, rgw, "linear grad_weight");
  expect_lowp_close(ggb, hgb, rgb, "linear grad_bias");
  // Each gradient alone.
  Tensor none;
  Tensor ggx_alone = empty16({n, in}, kCuda0), ggb_alone = empty16({out}, kCuda0);
  dispatch(prim::LinearBackward{dev(x.t), dev(w.t), dev(gy.t), ggx_alone, none, none, scale});
  dispatch(prim::LinearBackward{dev(x.t), dev(w.t), dev(gy.t), none, none, ggb_alone, scale});
  EXPECT_EQ(widened(ggx_alone), widened(ggx));
  EXPECT_EQ(widened(ggb_alone), widened(ggb));

  // The weight stored [in, out] (GPT-2's Conv1D).
  const Tensor wt = w.t.permute({1, 0}).contiguous();
  Tensor hyt = empty16({n, out}, kHost0), gyt = empty16({n, out}, kCuda0);
  dispatch(prim::LinearForward{x.t, wt, b.t, hyt, true});
  dispatch(prim::LinearForward{dev(x.t), dev(wt), dev(b.t), gyt, true});
  expect_lowp_close(gyt, hyt, gemm_ref(n, out, in, at_x, at_w_t, &b.v), "linear, weight [in, out]");
  Tensor hgwt = empty16({in, out}, kHost0), ggwt = empty16({in, out}, kCuda0);
  dispatch(prim::LinearBackward{x.t, wt, gy.t, hgx, hgwt, hgb, scale, true});
  dispatch(prim::LinearBackward{dev(x.t), dev(wt), dev(gy.t), ggx, ggwt, ggb, scale, true});
  expect_lowp_close(ggx, hgx, rgx, "linear grad_input, weight [in, out]");
  expect_lowp_close(ggwt, hgwt, transposed(rgw, out, in), "linear grad_weight [in, out]");
  expect_lowp_close(ggb, hgb, rgb, "linear grad_bias, weight [in, out]");
}

TEST_P(CudaBackendLowpTest, MatmulAndBmmMatchHostAndFloat64) {
  const int64_t m = 37, k = 70, n = 29;
  const Lowp a = random_lowp({m, k}), c = random_lowp({k, n});
  Tensor hc = empty16({m, n}, kHost0), gc = empty16({m, n}, kCuda0);
  dispatch(prim::Matmul{a.t, c.t, hc});
  dispatch(prim::Matmul{dev(a.t), dev(c.t), gc});
  expect_lowp_close(gc, hc,
                    gemm_ref(
                        m, n, k, [&](int64_t i, int64_t p) { return a.v[i * k + p]; },
                        [&](int64_t p, int64_t j) { return c.v[p * n + j]; }, nullptr),
                    "matmul");

  // Attention-like shapes with every transpose combination.
  const int64_t batch = 3, bm = 17, bk = 64, bn = 9;
  for (int flags = 0; flags < 4; ++flags) {
    const bool ta = flags & 1, tb = flags & 2;
    const Lowp x1 = random_lowp(ta ? Shape{batch, bk, bm} : Shape{batch, bm, bk});
    const Lowp x2 = random_lowp(tb ? Shape{batch, bn, bk} : Shape{batch, bk, bn});
    Tensor hb = empty16({batch, bm, bn}, kHost0), gb = empty16({batch, bm, bn}, kCuda0);
    dispatch(prim::Bmm{x1.t, x2.t, ta, tb, hb});
    dispatch(prim::Bmm{dev(x1.t), dev(x2.t), ta, tb, gb});
    LowpRef ref;
    for (int64_t i = 0; i < batch; ++i) {
      const double* p1 = x1.v.data() + i * bm * bk;
      const double* p2 = x2.v.data() + i * bk * bn;
      const LowpRef one = gemm_ref(
          bm, bn, bk, [&](int64_t r, int64_t p) { return ta ? p1[p * bm + r] : p1[r * bk + p]; },
          [&](int64_t p, int64_t col) { return tb ? p2[col * bk + p] : p2[p * bn + col]; },
          nullptr);
      ref.value.insert(ref.value.end(), one.value.begin(), one.value.end());
      ref.abs_sum.insert(ref.abs_sum.end(), one.abs_sum.begin(), one.abs_sum.end());
      ref.terms = one.terms;
    }
    expect_lowp_close(gb, hb, ref,
                      "bmm trans_a=" + std::to_string(ta) + " trans_b=" + std::to_string(tb));
  }
}

TEST_P(CudaBackendLowpTest, ElementwiseMatchesHostBitForBitAndFloat64) {
  const Shape s{300, 257};  // more elements than one grid-stride pass covers per thread
  const Lowp a = random_lowp(s, -3.0f, 3.0f), b = random_lowp(s, -3.0f, 3.0f);
  const size_t count = a.v.size();
  Tensor ha = empty16(s, kHost0), ga = empty16(s, kCuda0);
  LowpRef ref;
  ref.value.resize(count);
  ref.abs_sum.resize(count);
  const auto check = [&](const std::string& what, auto f, auto magnitude) {
    for (size_t i = 0; i < count; ++i) {
      ref.value[i] = f(a.v[i], b.v[i]);
      ref.abs_sum[i] = magnitude(a.v[i], b.v[i]);
    }
    expect_lowp_equal(ga, ha, what);
    expect_lowp_close(ga, ha, ref, what);
  };
  // alpha and the scale are powers of two: the product is exact, so a contracted (fused
  // multiply-add) sum and a separate one round to the same value on either device.
  dispatch(prim::Add{a.t, b.t, -0.5f, ha});
  dispatch(prim::Add{dev(a.t), dev(b.t), -0.5f, ga});
  check(
      "add", [](double p, double q) { return p - 0.5 * q; },
      [](double p, double q) { return std::fabs(p) + std::fabs(0.5 * q); });
  dispatch(prim::Mul{a.t, b.t, ha});
  dispatch(prim::Mul{dev(a.t), dev(b.t), ga});
  check(
      "mul", [](double p, double q) { return p * q; },
      [](double p, double q) { return std::fabs(p * q); });
  dispatch(prim::Scale{a.t, 0.125f, ha});
  dispatch(prim::Scale{dev(a.t), 0.125f, ga});
  check(
      "scale", [](double p, double) { return 0.125 * p; },
      [](double p, double) { return std::fabs(0.125 * p); });
  dispatch(prim::ReluForward{a.t, ha});
  dispatch(prim::ReluForward{dev(a.t), ga});
  check(
      "relu", [](double p, double) { return p > 0 ? p : 0.0; },
      [](double p, double) { return 0.0; });
  dispatch(prim::ReluBackward{a.t, b.t, ha});
  dispatch(prim::ReluBackward{dev(a.t), dev(b.t), ga});
  check(
      "relu_backward", [](double p, double q) { return p > 0 ? q : 0.0; },
      [](double p, double q) { return 0.0; });
}

TEST_P(CudaBackendLowpTest, GeluIsTheFloat32KernelRoundedOnceAndMatchesHost) {
  const DType dt = GetParam();
  const Shape s{40, 129};
  const Lowp x = random_lowp(s, -4.0f, 4.0f), g = random_lowp(s);
  const size_t count = x.v.size();
  Tensor hy = empty16(s, kHost0), gy = empty16(s, kCuda0);
  Tensor hgx = empty16(s, kHost0), ggx = empty16(s, kCuda0);
  dispatch(prim::GeluForward{x.t, hy});
  dispatch(prim::GeluForward{dev(x.t), gy});
  dispatch(prim::GeluBackward{x.t, g.t, hgx});
  dispatch(prim::GeluBackward{dev(x.t), dev(g.t), ggx});

  // Bit for bit the float32 CUDA kernel on the widened inputs, rounded once (here on the host).
  Tensor x32 = dev(x.t).to(DType::kFloat32), g32 = dev(g.t).to(DType::kFloat32);
  Tensor y32 = Tensor::empty(s, DType::kFloat32, kCuda0);
  Tensor gx32 = Tensor::empty(s, DType::kFloat32, kCuda0);
  dispatch(prim::GeluForward{x32, y32});
  dispatch(prim::GeluBackward{x32, g32, gx32});
  EXPECT_EQ(widened(gy), widened(y32.to(kHost0).to(dt))) << lowp_name(dt, "gelu");
  EXPECT_EQ(widened(ggx), widened(gx32.to(kHost0).to(dt))) << lowp_name(dt, "gelu_backward");

  // The float32 formula's own error (a few float32 ulps of its terms) beside the rounding.
  constexpr double kC = 0.7978845608028654, kCubic = 0.044715;
  LowpRef fwd, bwd;
  for (LowpRef* r : {&fwd, &bwd}) {
    r->value.resize(count);
    r->abs_sum.resize(count);
    r->terms = 16;
  }
  for (size_t i = 0; i < count; ++i) {
    const double v = x.v[i], t = std::tanh(kC * (v + kCubic * v * v * v));
    fwd.value[i] = 0.5 * v * (1.0 + t);
    fwd.abs_sum[i] = 1.0 + std::fabs(v);
    bwd.value[i] =
        g.v[i] * (0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * kC * (1.0 + 3.0 * kCubic * v * v));
    bwd.abs_sum[i] = std::fabs(g.v[i]) * (1.0 + v * v) * (1.0 + std::fabs(v));
  }
  expect_lowp_close(gy, hy, fwd, "gelu");
  expect_lowp_close(ggx, hgx, bwd, "gelu_backward");
}

// Every output and gradient of conv(x, w) + b with output gradient gy, NCHW, in float64.
struct ConvRefs {
  LowpRef y, gx, gw, gb;
};
ConvRefs conv_refs(const Conv2dShape& s, const std::vector<double>& x, const std::vector<double>& w,
                   const std::vector<double>* b, const std::vector<double>& gy) {
  ConvRefs r;
  const auto init = [](LowpRef& ref, int64_t size, int64_t terms) {
    ref.value.assign(static_cast<size_t>(size), 0.0);
    ref.abs_sum = ref.value;
    ref.terms = terms;
  };
  init(r.y, s.n * s.o * s.ho * s.wo, s.c * s.kh * s.kw + 1);
  init(r.gx, s.n * s.c * s.h * s.w, s.o * s.kh * s.kw);
  init(r.gw, s.o * s.c * s.kh * s.kw, s.n * s.ho * s.wo);
  init(r.gb, s.o, s.n * s.ho * s.wo);
  const auto add = [](LowpRef& ref, int64_t i, double term) {
    ref.value[i] += term;
    ref.abs_sum[i] += std::fabs(term);
  };
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t o = 0; o < s.o; ++o) {
      for (int64_t oh = 0; oh < s.ho; ++oh) {
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t yi = ((n * s.o + o) * s.ho + oh) * s.wo + ow;
          if (b != nullptr) add(r.y, yi, (*b)[o]);
          add(r.gb, o, gy[yi]);
          for (int64_t c = 0; c < s.c; ++c) {
            for (int64_t i = 0; i < s.kh; ++i) {
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ih = oh * s.stride - s.padding + i;
                const int64_t iw = ow * s.stride - s.padding + j;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t xi = ((n * s.c + c) * s.h + ih) * s.w + iw;
                const int64_t wi = ((o * s.c + c) * s.kh + i) * s.kw + j;
                add(r.y, yi, x[xi] * w[wi]);
                add(r.gx, xi, gy[yi] * w[wi]);
                add(r.gw, wi, gy[yi] * x[xi]);
              }
            }
          }
        }
      }
    }
  }
  return r;
}

TEST_P(CudaBackendLowpTest, Conv2dMatchesHostAndFloat64) {
  struct Case {
    int64_t n, c, hw, o, k;
    Conv2dParams p;
    bool bias;
  };
  // A first layer of one channel, the ConvNet's second layer's 16 channels strided, a 1x1.
  for (const Case& cs : {Case{3, 1, 10, 8, 5, {1, 2}, true}, Case{2, 16, 8, 16, 3, {2, 1}, false},
                         Case{2, 4, 9, 6, 3, {1, 1}, true}, Case{2, 32, 5, 16, 1, {1, 0}, true}}) {
    const std::string what = "conv2d c=" + std::to_string(cs.c) + " k=" + std::to_string(cs.k) +
                             " stride=" + std::to_string(cs.p.stride);
    const int64_t out_hw = (cs.hw + 2 * cs.p.padding - cs.k) / cs.p.stride + 1;
    const Conv2dShape s{cs.n, cs.c,        cs.hw,        cs.hw,  cs.o,  cs.k,
                        cs.k, cs.p.stride, cs.p.padding, out_hw, out_hw};
    const Lowp x = random_lowp({s.n, s.c, s.h, s.w}), w = random_lowp({s.o, s.c, s.kh, s.kw});
    const Lowp b = random_lowp({s.o}), gy = random_lowp({s.n, s.o, s.ho, s.wo});
    const ConvRefs r = conv_refs(s, x.v, w.v, cs.bias ? &b.v : nullptr, gy.v);
    Tensor bb = cs.bias ? b.t : Tensor();
    const Shape ys{s.n, s.o, s.ho, s.wo};
    Tensor hy = empty16(ys, kHost0), gyy = empty16(ys, kCuda0);
    dispatch(prim::Conv2dForward{x.t, w.t, bb, cs.p, hy});
    dispatch(prim::Conv2dForward{dev(x.t), dev(w.t), dev(bb), cs.p, gyy});
    expect_lowp_close(gyy, hy, r.y, what);

    Tensor hgx = empty16(x.t.shape(), kHost0), hgw = empty16(w.t.shape(), kHost0);
    Tensor hgb = empty16({s.o}, kHost0);
    Tensor ggx = empty16(x.t.shape(), kCuda0), ggw = empty16(w.t.shape(), kCuda0);
    Tensor ggb = empty16({s.o}, kCuda0);
    dispatch(prim::Conv2dBackward{x.t, w.t, gy.t, cs.p, hgx, hgw, hgb});
    dispatch(prim::Conv2dBackward{dev(x.t), dev(w.t), dev(gy.t), cs.p, ggx, ggw, ggb});
    expect_lowp_close(ggx, hgx, r.gx, what + " grad_input");
    expect_lowp_close(ggw, hgw, r.gw, what + " grad_weight");
    expect_lowp_close(ggb, hgb, r.gb, what + " grad_bias");
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaBackendLowpTest,
                         ::testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// torch.autocast("cuda", bfloat16) on a Linear-ReLU-Linear with an MSE loss, forward and
// backward, on cuda:0 against the same on host:0: the products and the ReLU in bfloat16 on both,
// the loss and every gradient in float32, equal within bfloat16's rounding.
TEST_F(CudaBackendTest, AutocastLinearReluLinearMatchesHost) {
  const Tensor x = random({8, 16}), w1 = random({32, 16}), b1 = random({32});
  const Tensor w2 = random({4, 32}), b2 = random({4}), target = random({8, 4});
  struct Run {
    Tensor y, loss;
    std::vector<Tensor> leaves;
  };
  const auto run = [&](Device d) {
    Run r;
    for (const Tensor& t : {x, w1, b1, w2, b2}) {
      r.leaves.push_back(t.clone().to(d).requires_grad_());
    }
    {
      autocast amp(d.type(), DType::kBFloat16);
      r.y = ops::linear(ops::relu(ops::linear(r.leaves[0], r.leaves[1], r.leaves[2])), r.leaves[3],
                        r.leaves[4]);
      r.loss = ops::mse_loss(r.y, target.to(d));
    }
    backward(r.loss);
    return r;
  };
  const Run host = run(kHost0), gpu = run(kCuda0);
  ASSERT_EQ(gpu.y.dtype(), DType::kBFloat16);
  ASSERT_EQ(host.y.dtype(), DType::kBFloat16);
  ASSERT_EQ(gpu.loss.dtype(), DType::kFloat32);
  EXPECT_TRUE(gpu.y.device().is_cuda());
  // Relative L2 distance: the two devices round the same float32 sums, so they differ only where
  // an accumulation lands on the other side of a bfloat16 rounding boundary.
  const auto rel = [](const Tensor& g, const Tensor& h) {
    const std::vector<float> a = g.to(kHost0).to(DType::kFloat32).to_vector<float>();
    const std::vector<float> b = h.to(DType::kFloat32).to_vector<float>();
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (a[i] - b[i]) * static_cast<double>(a[i] - b[i]);
      norm += b[i] * static_cast<double>(b[i]);
    }
    return std::sqrt(diff / norm);
  };
  EXPECT_LT(rel(gpu.y, host.y), 0x1p-7);
  EXPECT_NEAR(gpu.loss.item(), host.loss.item(), 0x1p-7 * std::fabs(host.loss.item()));
  const char* names[] = {"x", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  for (size_t i = 0; i < gpu.leaves.size(); ++i) {
    const Tensor g = gpu.leaves[i].grad(), h = host.leaves[i].grad();
    ASSERT_TRUE(g.defined()) << names[i];
    EXPECT_EQ(g.dtype(), DType::kFloat32) << names[i];
    EXPECT_TRUE(g.device().is_cuda()) << names[i];
    EXPECT_LT(rel(g, h), 0x1p-6) << names[i] << " grad";
  }
}

// --- the caching allocator ---

TEST_F(CudaBackendTest, CachingAllocatorCountsTensorBytesNotCachedBytes) {
  DeviceContext& ctx = Runtime::get().context(kCuda0);
  cuda::as_cuda(ctx).empty_cache();
  const MemoryStats before = ctx.allocator().stats();
  {
    Tensor t = Tensor::empty({1000}, DType::kFloat32, kCuda0);  // 4000 bytes, a 4096-byte block
    const MemoryStats during = ctx.allocator().stats();
    EXPECT_EQ(during.current_bytes, before.current_bytes + 4000);
    EXPECT_EQ(during.allocations, before.allocations + 1);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
  }
  EXPECT_EQ(ctx.allocator().stats().current_bytes, before.current_bytes);
  EXPECT_EQ(cuda::as_cuda(ctx).cached_bytes(), 4096);
  {
    Tensor again = Tensor::empty({900}, DType::kFloat32, kCuda0);  // same size class: reused
    EXPECT_EQ(cuda::as_cuda(ctx).cached_bytes(), 0);
    EXPECT_EQ(ctx.allocator().stats().current_bytes, before.current_bytes + 3600);
    EXPECT_EQ(ctx.allocator().stats().allocations, before.allocations + 2);
  }
  cuda::as_cuda(ctx).empty_cache();
  EXPECT_EQ(cuda::as_cuda(ctx).cached_bytes(), 0);
}

TEST_F(CudaBackendTest, OutOfMemoryNamesTheDeviceAndLeavesTheCountsUnchanged) {
  DeviceContext& ctx = Runtime::get().context(kCuda0);
  const MemoryStats before = ctx.allocator().stats();
  // 2^42 floats = 16 TiB: more than any GPU has.
  const std::string msg =
      error_of([] { Tensor::empty({int64_t{1} << 42}, DType::kFloat32, Device::parse("cuda:0")); });
  EXPECT_TRUE(contains(msg, "out of memory on cuda:0")) << msg;
  EXPECT_TRUE(contains(msg, "tried to allocate 17592186044416 bytes")) << msg;
  EXPECT_EQ(ctx.allocator().stats().current_bytes, before.current_bytes);
  EXPECT_EQ(ctx.allocator().stats().allocations, before.allocations);
  // The device still works.
  Tensor t = Tensor::full({16}, 2.0f, kCuda0);
  EXPECT_EQ(t.to_vector<float>(), std::vector<float>(16, 2.0f));
}

}  // namespace
}  // namespace dpe
