// kernel_bench: the single-thread speed of the host backend's heavy kernels, so a change of kernel
// or layout can be measured: GFLOP/s of a large SGEMM through oneDNN and of the ConvNet's and
// ResNet-tiny's convolutions (forward, backward data, backward weights); GB/s of the memory-bound
// layers (among them the ConvNet's and a ResNet stem's batch norm + ReLU + pooling) and of the
// optimizers' updates. A benchmark, not a test.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/backend/dispatch.h"
#include "engine/tensor/random.h"

namespace {

using dpe::dispatch;
using dpe::Tensor;
namespace ops = dpe::ops;
namespace prim = dpe::prim;

// Evicts the caches (a 64 MiB buffer written), so the next call reads its operands from memory.
void evict_caches() {
  static std::vector<char> buffer(size_t{64} << 20);
  static char round = 0;
  std::fill(buffer.begin(), buffer.end(), ++round);
}

// Median seconds of `reps` calls after one warm-up call; with `cold`, each call after the caches
// are evicted, as a training step meets a layer's activations (written long before, by the
// forward, or by another layer).
double time_it(const std::function<void()>& f, int reps, bool cold = false) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    if (cold) evict_caches();
    const auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void report(const char* what, double flops, double seconds) {
  std::printf("%-40s %9.3f ms %8.1f GFLOP/s\n", what, seconds * 1e3, flops / seconds * 1e-9);
}

Tensor filled(const dpe::Shape& shape, float v) { return Tensor::full(shape, v); }

// Activations as a layer sees them: normal values, or after a ReLU (half of them exactly 0).
// Constant inputs would let data-dependent branches (pooling's maximum, ReLU's mask) predict
// perfectly and time kernels faster than a training step runs them.
Tensor activations(const dpe::Shape& shape, bool after_relu) {
  static dpe::Generator gen(1234);
  Tensor t = dpe::randn(shape, gen);
  if (after_relu) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] > 0 ? p[i] : 0.0f;
  }
  return t;
}

void bench_conv(const char* name, int64_t n, int64_t c, int64_t h, int64_t o, int64_t k,
                int64_t pad, int reps, dpe::MemoryFormat format = dpe::MemoryFormat::kContiguous,
                int64_t stride = 1, dpe::DType dt = dpe::DType::kFloat32) {
  Tensor x = filled({n, c, h, h}, 0.5f).to(dt).contiguous(format);
  Tensor w = filled({o, c, k, k}, 0.01f).to(dt);
  Tensor bias = filled({o}, 0).to(dt);
  const int64_t ho = (h + 2 * pad - k) / stride + 1;
  Tensor y = Tensor::empty({n, o, ho, ho}, dt, x.device(), format);
  Tensor gy = filled({n, o, ho, ho}, 0.1f).to(dt).contiguous(format);
  Tensor gx = Tensor::empty(x.shape(), dt, x.device(), format);
  Tensor gw = Tensor::empty(w.shape(), dt), gb = Tensor::empty({o}, dt);
  Tensor none;
  const dpe::Conv2dParams p{stride, pad};
  const double flops = 2.0 * n * o * ho * ho * c * k * k;
  char label[80];
  std::snprintf(label, sizeof label, "%s forward", name);
  report(label, flops, time_it([&] { dispatch(prim::Conv2dForward{x, w, bias, p, y}); }, reps));
  std::snprintf(label, sizeof label, "%s backward data", name);
  report(label, flops,
         time_it(
             [&] {
               dispatch(prim::Conv2dBackward{x, w, gy, p, gx, none, none});
             },
             reps));
  std::snprintf(label, sizeof label, "%s backward weights+bias", name);
  report(label, flops,
         time_it(
             [&] {
               dispatch(prim::Conv2dBackward{x, w, gy, p, none, gw, gb});
             },
             reps));
}

// ResNet-tiny's convolutions, channels last, in the order its forward runs them: a Bottleneck a
// stage on 28x28 images (7x7 after the stem, halved by each later stage's first block).
void bench_resnet_tiny_convs(int64_t n, int reps) {
  const auto nhwc = dpe::MemoryFormat::kChannelsLast;
  const auto name = [](int64_t stage, const char* what, int64_t c, int64_t o, int64_t h) {
    return "s" + std::to_string(stage) + " " + what + " " + std::to_string(c) + "->" +
           std::to_string(o) + " " + std::to_string(h) + "x" + std::to_string(h);
  };
  bench_conv("stem 7x7/2 1->8 28x28", n, 1, 28, 8, 7, 3, reps, nhwc, 2);
  int64_t in = 8, h = 7;
  for (int64_t stage = 1; stage <= 4; ++stage) {
    const int64_t width = int64_t{4} << stage, stride = stage == 1 ? 1 : 2;
    const int64_t ho = (h - 1) / stride + 1;
    bench_conv(name(stage, "1x1", in, width, h).c_str(), n, in, h, width, 1, 0, reps, nhwc);
    bench_conv(name(stage, stride == 1 ? "3x3" : "3x3/2", width, width, h).c_str(), n, width, h,
               width, 3, 1, reps, nhwc, stride);
    bench_conv(name(stage, "1x1", width, 4 * width, ho).c_str(), n, width, ho, 4 * width, 1, 0,
               reps, nhwc);
    bench_conv(name(stage, stride == 1 ? "down" : "down/2", in, 4 * width, h).c_str(), n, in, h,
               4 * width, 1, 0, reps, nhwc, stride);
    in = 4 * width;
    h = ho;
  }
}

// Memory-bound layers: reported as GB/s of the tensors read and written.
void report_bytes(const char* what, double bytes, double seconds) {
  std::printf("%-40s %9.3f ms %8.1f GB/s\n", what, seconds * 1e3, bytes / seconds * 1e-9);
}

void bench_bn_pool(const char* name, int64_t n, int64_t c, int64_t h, int reps) {
  Tensor x = activations({n, c, h, h}, false), y = Tensor::empty(x.shape());
  Tensor gy = activations(x.shape(), false), relu_x = activations(x.shape(), true);
  Tensor gx = Tensor::empty(x.shape());
  Tensor g = filled({c}, 1), beta = filled({c}, 0), mean = Tensor::empty({c}),
         var = Tensor::empty({c}), gg = Tensor::empty({c}), gb = Tensor::empty({c});
  const double bytes = 4.0 * x.numel();
  char label[80];
  std::snprintf(label, sizeof label, "%s bn forward", name);
  report_bytes(label, 2 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::BatchNormForwardTrain{x, g, beta, 1e-5f, y, mean, var});
                   },
                   reps));
  std::snprintf(label, sizeof label, "%s bn backward", name);
  report_bytes(label, 3 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::BatchNormBackward{x, gy, g, mean, var, 1e-5f, gx, gg, gb});
                   },
                   reps));
  std::snprintf(label, sizeof label, "%s relu forward", name);
  report_bytes(label, 2 * bytes, time_it([&] { dispatch(prim::ReluForward{x, y}); }, reps));
  Tensor p = Tensor::empty({n, c, h / 2, h / 2}),
         idx = Tensor::empty(p.shape(), dpe::DType::kInt64);
  std::snprintf(label, sizeof label, "%s max_pool2d forward", name);
  report_bytes(label, 1.75 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::MaxPool2dForward{relu_x, {2, 2, 0}, p, idx});
                   },
                   reps));
  Tensor gp = filled(p.shape(), 1);
  std::snprintf(label, sizeof label, "%s max_pool2d backward", name);
  report_bytes(label, 1.75 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::MaxPool2dBackward{gp, idx, {2, 2, 0}, gx});
                   },
                   reps));
}

// A ResNet block's end in training, channels last: batch norm, the residual sum and a ReLU as the
// three kernels (backward: relu_backward, then batch norm's) and as the fused op (engine/nn/
// fusion.h). GB/s of the fused op's tensors read and written, as its cost() states them.
void bench_bn_add_relu(int64_t n, int64_t c, int64_t h, int reps) {
  const auto nhwc = dpe::MemoryFormat::kChannelsLast;
  Tensor x = activations({n, c, h, h}, false).contiguous(nhwc);
  Tensor r = activations(x.shape(), false).contiguous(nhwc);
  Tensor gy = activations(x.shape(), false).contiguous(nhwc);
  const auto like_x = [&] { return Tensor::empty(x.shape(), dpe::DType::kFloat32, {}, nhwc); };
  Tensor h1 = like_x(), sum = like_x(), y = like_x(), g = like_x(), gx = like_x();
  Tensor gamma = filled({c}, 1), beta = filled({c}, 0), mean = Tensor::empty({c}),
         var = Tensor::empty({c}), gg = Tensor::empty({c}), gb = Tensor::empty({c});
  const prim::BatchNormAddReluForwardTrain forward{x, r, gamma, beta, 1e-5f, y, mean, var};
  const prim::BatchNormAddReluBackward backward{x, y, gy, gamma, mean, var, 1e-5f, gx, g, gg, gb};
  const double fwd_bytes =
      static_cast<double>(forward.cost().bytes_read + forward.cost().bytes_written);
  const double bwd_bytes =
      static_cast<double>(backward.cost().bytes_read + backward.cost().bytes_written);
  char label[80];
  const auto row = [&](const char* what, double bytes, const std::function<void()>& f) {
    std::snprintf(label, sizeof label, "[%lld, %lld, %lld, %lld] %s", static_cast<long long>(n),
                  static_cast<long long>(c), static_cast<long long>(h), static_cast<long long>(h),
                  what);
    report_bytes(label, bytes, time_it(f, reps));
  };
  // The elementwise kernels take the tensors as flat runs (ops pass dense views).
  Tensor h1d = prim::dense_view(h1), rd = prim::dense_view(r), sumd = prim::dense_view(sum),
         yd = prim::dense_view(y), gyd = prim::dense_view(gy), gd = prim::dense_view(g);
  row("forward apart", fwd_bytes, [&] {
    dispatch(prim::BatchNormForwardTrain{x, gamma, beta, 1e-5f, h1, mean, var});
    dispatch(prim::Add{h1d, rd, 1.0f, sumd});
    dispatch(prim::ReluForward{sumd, yd});
  });
  row("forward fused", fwd_bytes, [&] { dispatch(forward); });
  row("backward apart", bwd_bytes, [&] {
    dispatch(prim::ReluBackward{yd, gyd, gd});
    dispatch(prim::BatchNormBackward{x, g, gamma, mean, var, 1e-5f, gx, gg, gb});
  });
  row("backward fused", bwd_bytes, [&] { dispatch(backward); });
}

// Batch norm + ReLU + 2x2 max pooling in training, as the three kernels one after the other
// (batch_norm_relu, then max_pool2d; backward: max_pool2d's, then batch_norm_relu's) and as the
// fused op (engine/nn/fusion.h). GB/s of the fused op's tensors read and written.
void bench_bn_relu_pool(const char* name, int64_t n, int64_t c, int64_t h, int reps,
                        dpe::MemoryFormat format = dpe::MemoryFormat::kContiguous,
                        bool cold = false, dpe::Pool2dParams pool = {2, 2, 0}) {
  const auto laid_out = [&](const dpe::Shape& shape, dpe::DType dtype = dpe::DType::kFloat32) {
    return Tensor::empty(shape, dtype, {}, format);
  };
  Tensor x = activations({n, c, h, h}, false).contiguous(format), full = laid_out(x.shape());
  Tensor g = filled({c}, 1), beta = filled({c}, 0), mean = Tensor::empty({c}),
         var = Tensor::empty({c}), gg = Tensor::empty({c}), gb = Tensor::empty({c});
  const int64_t ho = (h + 2 * pool.padding - pool.kernel) / pool.stride + 1;
  Tensor p = laid_out({n, c, ho, ho}), idx = laid_out(p.shape(), dpe::DType::kInt64);
  Tensor codes = Tensor::empty(prim::window_code_words(p.shape()), dpe::DType::kInt64);
  Tensor gp = activations(p.shape(), false).contiguous(format), gfull = laid_out(x.shape()),
         gx = laid_out(x.shape());
  const prim::BatchNormReluMaxPoolForwardTrain fused_forward{x, g,     beta, 1e-5f, pool,
                                                             p, codes, mean, var};
  const prim::BatchNormReluMaxPoolBackward fused_backward{x,   gp,    codes, g,  beta, mean,
                                                          var, 1e-5f, pool,  gx, gg,   gb};
  // Both rows of a pair are measured against the fused op's traffic, as its cost() states it.
  const auto moved = [](const dpe::OpCost& c) {
    return static_cast<double>(c.bytes_read + c.bytes_written);
  };
  const double forward_bytes = moved(fused_forward.cost());
  const double backward_bytes = moved(fused_backward.cost());
  char label[80];
  std::snprintf(label, sizeof label, "%s bn+relu, pool forward", name);
  report_bytes(label, forward_bytes,
               time_it(
                   [&] {
                     dispatch(prim::BatchNormReluForwardTrain{x, g, beta, 1e-5f, full, mean, var});
                     dispatch(prim::MaxPool2dForward{full, pool, p, idx});
                   },
                   reps, cold));
  std::snprintf(label, sizeof label, "%s bn+relu+pool fused forward", name);
  report_bytes(label, forward_bytes, time_it([&] { dispatch(fused_forward); }, reps, cold));
  std::snprintf(label, sizeof label, "%s pool, bn+relu backward", name);
  report_bytes(
      label, backward_bytes,
      time_it(
          [&] {
            dispatch(prim::MaxPool2dBackward{gp, idx, pool, gfull});
            dispatch(prim::BatchNormReluBackward{x, gfull, g, beta, mean, var, 1e-5f, gx, gg, gb});
          },
          reps, cold));
  std::snprintf(label, sizeof label, "%s bn+relu+pool fused backward", name);
  report_bytes(label, backward_bytes, time_it([&] { dispatch(fused_backward); }, reps, cold));
}

void bench_linear(int64_t n, int64_t in, int64_t out, int reps, bool with_bias = true,
                  dpe::DType dt = dpe::DType::kFloat32) {
  Tensor x = filled({n, in}, 0.5f).to(dt), w = filled({out, in}, 0.01f).to(dt);
  Tensor bias = with_bias ? filled({out}, 0).to(dt) : Tensor();
  Tensor y = Tensor::empty({n, out}, dt), gy = filled({n, out}, 0.1f).to(dt);
  Tensor gx = Tensor::empty(x.shape(), dt), gw = Tensor::empty(w.shape(), dt);
  Tensor gb = with_bias ? Tensor::empty({out}, dt) : Tensor();
  Tensor none_x, none_w, none_b;  // the gradients a call does not want
  const double flops = 2.0 * n * in * out;
  char label[80];
  const auto labelled = [&](const char* part) {
    std::snprintf(label, sizeof label, "linear %s %lldx%lld->%lld %s", dpe::dtype_name(dt),
                  static_cast<long long>(n), static_cast<long long>(in),
                  static_cast<long long>(out), part);
    return label;
  };
  report(labelled("forward"), flops,
         time_it([&] { dispatch(prim::LinearForward{x, w, bias, y}); }, reps));
  report(labelled("backward"), 2 * flops,
         time_it([&] { dispatch(prim::LinearBackward{x, w, gy, gx, gw, gb, 1.0f}); }, reps));
  const auto data = [&] { dispatch(prim::LinearBackward{x, w, gy, gx, none_w, none_b, 1.0f}); };
  const auto weights = [&] { dispatch(prim::LinearBackward{x, w, gy, none_x, gw, gb, 1.0f}); };
  report(labelled("backward data"), flops, time_it(data, reps));
  report(labelled("backward weights"), flops, time_it(weights, reps));
}

// The optimizers' updates over n parameters (the Mlp has 669,706), as GB/s of the parameter,
// gradient and state tensors read and written: memory-bound when vectorized.
void bench_optimizers(int64_t n, int reps) {
  Tensor p = filled({n}, 0.5f), g = filled({n}, 0.01f), buf = filled({n}, 0.0f);
  Tensor v = filled({n}, 0.0f);
  const double bytes = 4.0 * static_cast<double>(n);
  char label[80];
  const dpe::SgdStepParams sgd{0.01f, 0.9f, 0.0f, 0.0f, false};
  std::snprintf(label, sizeof label, "sgd momentum, %lld params", static_cast<long long>(n));
  report_bytes(label, 5 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::SgdStep{p, g, buf, sgd, false});
                   },
                   reps));
  const dpe::AdamStepParams adam{1e-3f, 0.9, 0.999, 1e-8f, 0.01f, /*adamw=*/true};
  int64_t step = 0;
  std::snprintf(label, sizeof label, "adamw, %lld params", static_cast<long long>(n));
  report_bytes(label, 7 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::AdamStep{p, g, buf, v, adam, ++step});
                   },
                   reps));
}

// gpt-small's layer norm: [batch x 128 tokens, 256], with its affine parameters.
// The language model's loss over its vocabulary: log_softmax then nll_loss, and the fused
// cross-entropy, forward and backward. GB/s of the logits read (and their gradient written).
void bench_cross_entropy(int64_t rows, int64_t cols, int reps) {
  Tensor x = activations({rows, cols}, false), logp = Tensor::empty(x.shape());
  Tensor target = Tensor::empty({rows}, dpe::DType::kInt64);
  for (int64_t r = 0; r < rows; ++r) target.data<int64_t>()[r] = (r * 7919) % cols;
  Tensor loss = Tensor::empty({}), lse = Tensor::empty({rows}), gout = filled({}, 1.0f);
  Tensor glogp = Tensor::empty(x.shape()), gx = Tensor::empty(x.shape());
  const double bytes = 4.0 * x.numel();
  char label[80];
  std::snprintf(label, sizeof label, "[%lld, %lld] log_softmax+nll forward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, 2 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::LogSoftmaxForward{x, logp});
                     dispatch(prim::NllLossForward{logp, target, -100, loss});
                   },
                   reps));
  std::snprintf(label, sizeof label, "[%lld, %lld] nll+log_softmax backward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, 4 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::NllLossBackward{gout, target, -100, glogp});
                     dispatch(prim::LogSoftmaxBackward{logp, glogp, gx});
                   },
                   reps));
  std::snprintf(label, sizeof label, "[%lld, %lld] cross_entropy forward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, bytes,
               time_it(
                   [&] {
                     dispatch(prim::CrossEntropyForward{x, target, -100, loss, lse});
                   },
                   reps));
  std::snprintf(label, sizeof label, "[%lld, %lld] cross_entropy backward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, 2 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::CrossEntropyBackward{x, target, lse, gout, -100, gx});
                   },
                   reps));
}

// GELU (tanh form) over a gpt-small MLP's hidden activations, as GB/s read and written.
void bench_gelu(int64_t rows, int64_t cols, int reps) {
  Tensor x = activations({rows, cols}, false), gy = activations({rows, cols}, false);
  Tensor y = Tensor::empty(x.shape()), gx = Tensor::empty(x.shape());
  const double bytes = 4.0 * static_cast<double>(rows * cols);
  char label[80];
  std::snprintf(label, sizeof label, "gelu [%lld, %lld] forward", static_cast<long long>(rows),
                static_cast<long long>(cols));
  report_bytes(label, 2 * bytes, time_it([&] { dispatch(prim::GeluForward{x, y}); }, reps));
  std::snprintf(label, sizeof label, "gelu [%lld, %lld] backward", static_cast<long long>(rows),
                static_cast<long long>(cols));
  report_bytes(label, 3 * bytes, time_it([&] { dispatch(prim::GeluBackward{x, gy, gx}); }, reps));
}

void bench_layer_norm(int64_t rows, int64_t cols, int reps) {
  Tensor x = activations({rows, cols}, false), gy = activations({rows, cols}, false);
  Tensor gamma = filled({cols}, 1.1f), beta = filled({cols}, 0.1f);
  Tensor y = Tensor::empty(x.shape()), gx = Tensor::empty(x.shape());
  Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor ggamma = Tensor::empty({cols}), gbeta = Tensor::empty({cols});
  const double bytes = 4.0 * static_cast<double>(rows * cols);
  char label[80];
  std::snprintf(label, sizeof label, "layer_norm [%lld, %lld] forward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, 2 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::LayerNormForward{x, gamma, beta, 1e-5f, y, mean, rstd});
                   },
                   reps));
  std::snprintf(label, sizeof label, "layer_norm [%lld, %lld] backward",
                static_cast<long long>(rows), static_cast<long long>(cols));
  report_bytes(label, 3 * bytes,
               time_it(
                   [&] {
                     dispatch(prim::LayerNormBackward{x, gy, gamma, mean, rstd, gx, ggamma, gbeta});
                   },
                   reps));
}

// One training step of the ConvNet's layers at batch n (no autograd, no optimizer): the sum of
// the kernels the host backend runs, to set against PyTorch's time per step.
double convnet_step(int64_t n, int reps) {
  using dpe::Shape;
  auto e = [](const Shape& s) { return Tensor::empty(s); };
  Tensor x = activations({n, 1, 28, 28}, false), w1 = filled({16, 1, 5, 5}, 0.01f);
  Tensor b1 = filled({16}, 0);
  Tensor w2 = filled({32, 16, 5, 5}, 0.01f), b2 = filled({32}, 0);
  Tensor g1 = filled({16}, 1), be1 = filled({16}, 0), g2 = filled({32}, 1), be2 = filled({32}, 0);
  Tensor fw = filled({10, 1568}, 0.01f), fb = filled({10}, 0);
  Tensor c1 = e({n, 16, 28, 28}), n1 = e(c1.shape()), r1 = e(c1.shape()), p1 = e({n, 16, 14, 14});
  Tensor i1 = Tensor::empty(p1.shape(), dpe::DType::kInt64);
  Tensor c2 = e({n, 32, 14, 14}), n2 = e(c2.shape()), r2 = e(c2.shape()), p2 = e({n, 32, 7, 7});
  Tensor i2 = Tensor::empty(p2.shape(), dpe::DType::kInt64);
  Tensor logits = e({n, 10}), logp = e({n, 10}), loss = e({});
  Tensor m1 = e({16}), v1 = e({16}), m2 = e({32}), v2 = e({32});
  std::vector<int64_t> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = i % 10;
  Tensor target = Tensor::from_vector(labels, {n});
  // Gradients.
  Tensor glogp = e({n, 10}), glogits = e({n, 10}), gfw = e(fw.shape()), gfb = e({10});
  Tensor gp2 = e(p2.shape()), gr2 = e(r2.shape()), gn2 = e(n2.shape()), gc2 = e(c2.shape());
  Tensor gw2 = e(w2.shape()), gb2 = e({32}), gg2 = e({32}), gbe2 = e({32}), gp1 = e(p1.shape());
  Tensor gr1 = e(r1.shape()), gn1 = e(n1.shape()), gc1 = e(c1.shape()), gw1 = e(w1.shape());
  Tensor gb1 = e({16}), gg1 = e({16}), gbe1 = e({16}), none;
  Tensor one = Tensor::scalar(1.0f);
  return time_it(
      [&] {
        dispatch(prim::Conv2dForward{x, w1, b1, {1, 2}, c1});
        dispatch(prim::BatchNormForwardTrain{c1, g1, be1, 1e-5f, n1, m1, v1});
        dispatch(prim::ReluForward{n1, r1});
        dispatch(prim::MaxPool2dForward{r1, {2, 2, 0}, p1, i1});
        dispatch(prim::Conv2dForward{p1, w2, b2, {1, 2}, c2});
        dispatch(prim::BatchNormForwardTrain{c2, g2, be2, 1e-5f, n2, m2, v2});
        dispatch(prim::ReluForward{n2, r2});
        dispatch(prim::MaxPool2dForward{r2, {2, 2, 0}, p2, i2});
        const Tensor flat = p2.view({n, 1568});
        dispatch(prim::LinearForward{flat, fw, fb, logits});
        dispatch(prim::LogSoftmaxForward{logits, logp});
        dispatch(prim::NllLossForward{logp, target, ops::kDefaultIgnoreIndex, loss});
        dispatch(prim::NllLossBackward{one, target, ops::kDefaultIgnoreIndex, glogp});
        dispatch(prim::LogSoftmaxBackward{logp, glogp, glogits});
        Tensor gflat = gp2.view({n, 1568});
        dispatch(prim::LinearBackward{flat, fw, glogits, gflat, gfw, gfb, 1.0f});
        dispatch(prim::MaxPool2dBackward{gp2, i2, {2, 2, 0}, gr2});
        dispatch(prim::ReluBackward{r2, gr2, gn2});
        dispatch(prim::BatchNormBackward{c2, gn2, g2, m2, v2, 1e-5f, gc2, gg2, gbe2});
        dispatch(prim::Conv2dBackward{p1, w2, gc2, {1, 2}, gp1, gw2, gb2});
        dispatch(prim::MaxPool2dBackward{gp1, i1, {2, 2, 0}, gr1});
        dispatch(prim::ReluBackward{r1, gr1, gn1});
        dispatch(prim::BatchNormBackward{c1, gn1, g1, m1, v1, 1e-5f, gc1, gg1, gbe1});
        dispatch(prim::Conv2dBackward{x, w1, gc1, {1, 2}, none, gw1, gb1});
      },
      reps);
}

// gpt-small's attention core at batch `n` (4 layers of [n x 4 heads, 128, 64]): the scores
// q k^T, the causal softmax, att v, and their backward, as scaled_dot_product_attention runs
// them unfused. Against a whole step, it bounds what a fused attention kernel could save.
double gpt_small_attention(int64_t n, int reps) {
  const int64_t bh = n * 4, t = 128, e = 64, layers = 4;
  auto e3 = [&](int64_t x, int64_t y) { return filled({bh, x, y}, 0.01f); };
  Tensor q = e3(t, e), k = e3(t, e), v = e3(t, e), scores = e3(t, t), att = e3(t, t);
  Tensor out = e3(t, e), gout = e3(t, e), gatt = e3(t, t), gscores = e3(t, t);
  Tensor gq = e3(t, e), gk = e3(t, e), gv = e3(t, e);
  return layers * time_it(
                      [&] {
                        dispatch(prim::Bmm{q, k, false, true, scores});
                        dispatch(prim::SoftmaxForward{scores, true, att});
                        dispatch(prim::Bmm{att, v, false, false, out});
                        dispatch(prim::Bmm{gout, v, false, true, gatt});  // d att = d out v^T
                        dispatch(prim::Bmm{att, gout, true, false, gv});  // d v = att^T d out
                        dispatch(prim::SoftmaxBackward{att, gatt, gscores});
                        dispatch(prim::Bmm{gscores, k, false, false, gq});  // d q = d scores k
                        dispatch(prim::Bmm{gscores, q, true, false, gk});   // d k = d scores^T q
                      },
                      reps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dpe kernel_bench: the host kernels one at a time, 1 thread, medians"};
  std::vector<std::string> only;
  // --help lists them (IsMember); a misspelt group is an error rather than an empty run.
  const std::vector<std::string> groups = {
      "sgemm",         "conv",         "resnet_conv", "bn_pool",   "bn_relu_pool",
      "bn_add_relu",   "stem_pool",    "linear",      "optim",     "gelu",
      "cross_entropy", "convnet_step", "attention",   "layer_norm", "linear_bf16", "conv_bf16"};
  app.add_option("--only", only, "groups to run (default all)")->check(CLI::IsMember(groups));
  int64_t resnet_batch = 100;
  app.add_option("--resnet-batch", resnet_batch, "the batch of resnet_conv's layers (default 100)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}));
  CLI11_PARSE(app, argc, argv);
  const auto run = [&](const char* group) {
    return only.empty() || std::find(only.begin(), only.end(), group) != only.end();
  };
  omp_set_num_threads(1);
  std::printf("host backend, 1 thread (OpenMP), medians\n");

  if (run("sgemm")) {
    const int64_t m = 2048;
    Tensor a = filled({m, m}, 0.5f), bb = filled({m, m}, 0.25f), c = Tensor::empty({m, m});
    report("sgemm 2048x2048x2048", 2.0 * m * m * m,
           time_it(
               [&] {
                 dispatch(prim::Matmul{a, bb, c});
               },
               5));
  }
  const auto nhwc = dpe::MemoryFormat::kChannelsLast;
  if (run("conv")) {
    bench_conv("conv1 (1->16, 5x5, pad 2, 28x28) N=100", 100, 1, 28, 16, 5, 2, 20);
    bench_conv("conv2 (16->32, 5x5, pad 2, 14x14) N=100", 100, 16, 14, 32, 5, 2, 20);
    bench_conv("conv1 NHWC N=256", 256, 1, 28, 16, 5, 2, 20, nhwc);
    bench_conv("conv2 NHWC N=256", 256, 16, 14, 32, 5, 2, 20, nhwc);
  }
  if (run("conv_bf16")) {  // the ConvNet's layers at batch 256 in bfloat16 (autocast's)
    const auto bf16 = dpe::DType::kBFloat16;
    const auto nchw = dpe::MemoryFormat::kContiguous;
    bench_conv("conv1 bf16 N=256", 256, 1, 28, 16, 5, 2, 20, nchw, 1, bf16);
    bench_conv("conv2 bf16 N=256", 256, 16, 14, 32, 5, 2, 20, nchw, 1, bf16);
    bench_conv("conv1 fp32 N=256", 256, 1, 28, 16, 5, 2, 20);
    bench_conv("conv2 fp32 N=256", 256, 16, 14, 32, 5, 2, 20);
  }
  if (run("resnet_conv")) bench_resnet_tiny_convs(resnet_batch, 20);
  if (run("bn_pool")) {
    bench_bn_pool("[100, 16, 28, 28]", 100, 16, 28, 20);
    bench_bn_pool("[100, 32, 14, 14]", 100, 32, 14, 20);
    bench_bn_pool("[256, 16, 28, 28]", 256, 16, 28, 20);
    bench_bn_pool("[256, 32, 14, 14]", 256, 32, 14, 20);
  }
  if (run("bn_relu_pool")) {
    bench_bn_relu_pool("[100, 16, 28, 28]", 100, 16, 28, 20);
    bench_bn_relu_pool("[100, 32, 14, 14]", 100, 32, 14, 20);
    bench_bn_relu_pool("[256, 16, 28, 28]", 256, 16, 28, 20);
    bench_bn_relu_pool("[256, 32, 14, 14]", 256, 32, 14, 20);
    bench_bn_relu_pool("[256, 16, 28, 28] NHWC", 256, 16, 28, 20, nhwc);
    bench_bn_relu_pool("[256, 32, 14, 14] NHWC", 256, 32, 14, 20, nhwc);
    bench_bn_relu_pool("[256, 16, 28, 28] NHWC cold", 256, 16, 28, 20, nhwc, /*cold=*/true);
    bench_bn_relu_pool("[256, 32, 14, 14] NHWC cold", 256, 32, 14, 20, nhwc, /*cold=*/true);
  }
  if (run("bn_add_relu")) {  // ResNet-tiny's block ends at batch 256, and ResNet-50's first
    bench_bn_add_relu(256, 32, 7, 20);
    bench_bn_add_relu(256, 64, 4, 20);
    bench_bn_add_relu(256, 128, 2, 20);
    bench_bn_add_relu(256, 256, 1, 20);
    bench_bn_add_relu(8, 256, 56, 5);
  }
  if (run("stem_pool")) {  // a ResNet's stem: 3x3 windows, stride 2, padding 1
    bench_bn_relu_pool("[100, 8, 14, 14] NHWC 3x3/2", 100, 8, 14, 20, nhwc, false, {3, 2, 1});
    bench_bn_relu_pool("[256, 8, 14, 14] NHWC 3x3/2", 256, 8, 14, 20, nhwc, false, {3, 2, 1});
    bench_bn_relu_pool("[100, 8, 14, 14] 3x3/2", 100, 8, 14, 20, dpe::MemoryFormat::kContiguous,
                       false, {3, 2, 1});
    bench_bn_relu_pool("[32, 64, 112, 112] NHWC 3x3/2", 32, 64, 112, 5, nhwc, false, {3, 2, 1});
  }
  if (run("linear")) {
    bench_linear(100, 1568, 10, 50);
    bench_linear(64, 784, 512, 50);
    bench_linear(64, 512, 512, 50);
    bench_linear(64, 512, 10, 50);
    bench_linear(1024, 256, 32000, 5, false);  // gpt-small's tied language-model head
  }
  if (run("linear_bf16")) {  // the Mlp's layers at batch 256, bfloat16 (autocast's products)
    for (const auto& [in, out] : {std::pair<int64_t, int64_t>{784, 512}, {512, 512}, {512, 10}}) {
      bench_linear(256, in, out, 50, true, dpe::DType::kBFloat16);
    }
  }
  if (run("optim")) bench_optimizers(669706, 50);
  if (run("layer_norm")) bench_layer_norm(1024, 256, 50);
  if (run("gelu")) bench_gelu(1024, 1024, 50);
  if (run("cross_entropy")) bench_cross_entropy(1024, 32000, 10);
  if (run("convnet_step")) {
    std::printf("%-40s %9.3f ms\n", "ConvNet step kernels, batch 100", convnet_step(100, 20) * 1e3);
  }
  if (run("attention")) {
    std::printf("%-40s %9.3f ms\n", "gpt-small attention fwd+bwd, batch 8",
                gpt_small_attention(8, 10) * 1e3);
  }
  return 0;
}
