// The shapes and options of ops, defined once for the engine's backend interface and for every
// device type's kernels (host and CUDA): what a launcher needs beyond its pointers. Plain structs,
// so gcc and nvcc both compile this header. The factories that derive output sizes also check the
// parameters, so every device type reports the same errors.
//
// Threading contract: plain values and pure functions; safe from any thread.
#pragma once

#include <cstdint>

namespace dpe {

// --- parameters of the kernels (torch.nn.functional's and torch.optim's names; the layers and
// optimizers that use them own their user-facing options) ---
struct Conv2dParams {
  int64_t stride = 1;
  int64_t padding = 0;
};

struct Pool2dParams {
  int64_t kernel = 2;
  int64_t stride = 2;
  int64_t padding = 0;
};

// torch.optim.SGD: g = grad + wd * p; b = g (first use) or momentum * b + (1 - dampening) * g;
// g = nesterov ? g + momentum * b : b; p -= lr * g.
struct SgdStepParams {
  float lr;
  float momentum;
  float dampening;
  float weight_decay;
  bool nesterov;
};

// torch.optim.Adam / AdamW: bias-corrected moments, eps added after the square root. The betas
// are double, as PyTorch's Python floats: the kernels take 1 - beta rounded once from them (from
// 0.999f, 1 - beta2 would be 1.3e-5 off PyTorch's).
struct AdamStepParams {
  float lr;
  double beta1;
  double beta2;
  float eps;
  float weight_decay;
  bool adamw;  // decoupled weight decay (AdamW): p *= 1 - lr * weight_decay
};

// --- shapes as the kernels take them ---
// y[batch, out] = x[batch, in] @ w[out, in]^T (+ b[out]).
struct LinearShape {
  int64_t batch;
  int64_t in;
  int64_t out;
  // w (and gw) stored [in, out], the transpose of [out, in]: GPT-2's Conv1D keeps its weight so,
  // and the linear runs on it as it is instead of on a transposed copy.
  bool w_transposed = false;
};

// x [n, c, h, w] convolved by w [o, c, kh, kw] into y [n, o, ho, wo].
struct Conv2dShape {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t stride, padding;
  int64_t ho, wo;
  bool channels_last = false;  // x, y and their gradients laid out NHWC (w stays OIHW)
};

// Max pooling of x [n, c, h, w] into y [n, c, ho, wo] (square window).
struct Pool2dShape {
  int64_t n, c, h, w;
  int64_t kernel, stride, padding;
  int64_t ho, wo;
  bool channels_last = false;  // x, y, the indices and the gradients laid out NHWC
};

// Window codes: where the fused batch norm + ReLU + max pooling keeps each output's maximum, a
// byte per output instead of max_pool2d's int64 flat position in the plane (an eighth of the
// bytes its forward writes and its backward reads, and of the memory a training step holds):
// (ih - h0) * kernel + (iw - w0), its place inside its window, whose unclipped top-left is
// (h0, w0) = (oh, ow) * stride - padding. A byte holds them for kernels up to 16.
constexpr int64_t kMaxWindowCodeKernel = 16;
static_assert(kMaxWindowCodeKernel * kMaxWindowCodeKernel - 1 <= 255, "a window code is a byte");

// Batch normalisation of x [n, c, ...] viewed as [n, c, s] (s: the product of the trailing sizes).
struct BatchNormShape {
  int64_t n, c, s;
  bool channels_last = false;  // laid out [n, s, c] instead (an NHWC activation)
};

// Layer normalisation of x [..., cols] viewed as [rows, cols], over each row.
struct LayerNormShape {
  int64_t rows, cols;
};

// Batched matrix product c[b] = op(a[b]) @ op(b[b]), row-major: c [batch, m, n]; a is [batch, m, k]
// ([batch, k, m] when trans_a, op = transpose), b is [batch, k, n] ([batch, n, k] when trans_b).
struct BmmShape {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
};

// Softmax over the last dim of x [..., tq, tk] viewed as [batch, tq, tk]. When causal, entry
// (q, k) takes part only when k <= q + (tk - tq) (the last query sees every key); the others are
// exactly 0, and a row with no entry left (tq > tk) is all 0.
struct SoftmaxShape {
  int64_t batch, tq, tk;
  bool causal;
};

// Fills ho/wo: floor((h + 2p - kh) / stride) + 1. Throws dpe::Error for a stride below 1, a
// negative padding or a kernel larger than the padded input.
Conv2dShape conv2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh,
                         int64_t kw, int64_t stride, int64_t padding);
// Fills ho/wo: floor((h + 2p - k) / stride) + 1. Throws for padding > kernel / 2, as torch does.
Pool2dShape max_pool2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kernel,
                             int64_t stride, int64_t padding);

}  // namespace dpe
