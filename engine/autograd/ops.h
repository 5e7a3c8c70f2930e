// Differentiable operations: each computes its forward with the backend of its inputs' device and,
// when grad mode is on and an input requires grad, records a node whose backward uses the same
// backend. Inputs must share one device (except `to` and `cat`, which move data) and fit in shape;
// otherwise a dpe::Error names the op and both devices or shapes.
//
// Threading contract: ops may run on any thread; each runs under a DeviceGuard for its device, so
// a host device's kernels use that device's compute-thread count wherever they are called from.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor/random.h"
#include "engine/tensor/tensor.h"

namespace dpe::ops {

// PyTorch's default ignore_index of nll_loss and cross_entropy: targets equal to it are skipped.
constexpr int64_t kDefaultIgnoreIndex = -100;

// --- elementwise and reductions ---
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul_scalar(const Tensor& a, float s);
Tensor relu(const Tensor& x);
// GELU in its tanh form: PyTorch's gelu(x, approximate='tanh'), GPT-2's activation. Any shape.
Tensor gelu(const Tensor& x);
Tensor sum(const Tensor& x);   // all elements -> scalar []
Tensor mean(const Tensor& x);  // all elements -> scalar []

// --- shapes and devices ---
Tensor reshape(const Tensor& x, const Shape& shape);
Tensor flatten(const Tensor& x, int64_t start_dim = 1);
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
// A differentiable copy to another device; gradients flow back to x's device.
Tensor to(const Tensor& x, Device device);
// torch.Tensor.to(dtype), differentiable: the gradient converts back to x's dtype (autocast's
// casts, a model's .to(bfloat16)). x itself when already of `dtype`.
Tensor to(const Tensor& x, DType dtype);
// Concatenates along dim on `device` (the first tensor's when unset); inputs may sit on any
// devices: the backward sends each slice of the gradient back to its input's device.
Tensor cat(const std::vector<Tensor>& xs, int64_t dim, const Device* device = nullptr);

// --- layers ---
// [M, K] @ [K, N]; or [..., M, K] @ [..., K, N] with equal leading dims (folded into one bmm).
Tensor matmul(const Tensor& a, const Tensor& b);
// Batched product of 3-d tensors: op(a) [B, M, K] @ op(b) [B, K, N] -> [B, M, N], where op
// transposes the last two dims when trans_* is set (a held as [B, K, M], b as [B, N, K]); the
// backward uses the flags too, so no transpose is ever copied.
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// x [N, in], w [out, in], b [out] or undefined. `who` names the layer in errors ("fc").
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b, const std::string& who = "linear");
// x [N, C, H, W], w [O, C, kh, kw], b [O] or undefined (torch.nn.functional.conv2d).
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int64_t stride = 1,
              int64_t padding = 0, const std::string& who = "conv2d");
// Square windows; stride 0 means the kernel size (torch.nn.functional.max_pool2d's default).
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
// Batch norm over (N, H, W). In training, normalises with the batch statistics and updates the
// running statistics in place (momentum, unbiased running variance, as PyTorch); in evaluation,
// uses the running statistics. running_* may be undefined (track_running_stats=False).
Tensor batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                  Tensor& running_var, bool training, float momentum, float eps,
                  const std::string& who = "batch_norm");
// relu(batch_norm(...)) with the same arguments and results. In training it is one op and one
// autograd node ("<who>+ReLU"): the ReLU is applied in batch norm's output pass and its mask
// recomputed in the backward, so the pre-ReLU tensor and the ReLU's two passes are never made.
// In evaluation with running statistics it is the two ops (without them, batch statistics: fused),
// and on a device type without the fused kernels (CUDA) too.
// The node saves x, gamma and beta (beta for the mask), so beta written in place between forward
// and backward fails the saved-tensor version check, where batch_norm's node would not notice.
Tensor batch_norm_relu(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                       Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                       float eps, const std::string& who = "batch_norm");
// relu(add(batch_norm(x, ...), residual)), the end of a ResNet block, with the same arguments and
// results. In training it is one op and one autograd node ("<who>+add+ReLU"): the sum and the ReLU
// are applied in batch norm's output pass, and the backward takes the ReLU's mask from the output
// (as relu's node does) and makes the residual's gradient, channels last, in the pass that takes
// batch norm's sums (NCHW: in relu_backward's pass). The node saves x, gamma and the output; a
// refused residual leaves the running statistics as they were. In evaluation with running
// statistics it is the three ops, and on a device type without the fused kernels (CUDA) too.
Tensor batch_norm_add_relu(const Tensor& x, const Tensor& residual, const Tensor& gamma,
                           const Tensor& beta, Tensor& running_mean, Tensor& running_var,
                           bool training, float momentum, float eps,
                           const std::string& who = "batch_norm");
// max_pool2d(batch_norm_relu(...), kernel_size, stride, padding) with the same arguments and
// results. In training it is one op and one autograd node ("<who>+ReLU+MaxPool2d") whose kernel
// pools each block of normalised planes from the caches: the full-size ReLU output is never made,
// nor, in the backward, the pooling's full-size gradient. It saves x, gamma, beta and each
// maximum's place in its window as a byte (window codes, kernels/op_params.h). In evaluation with
// running statistics, for windows wider than kMaxWindowCodeKernel (16: a code would not fit a
// byte), and on a device type without the fused kernels (CUDA), it is the three ops.
Tensor batch_norm_relu_max_pool2d(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  Tensor& running_mean, Tensor& running_var, bool training,
                                  float momentum, float eps, int64_t kernel_size,
                                  int64_t stride = 0, int64_t padding = 0,
                                  const std::string& who = "batch_norm");
// The fused batch norm ops above: batch_norm_relu, batch_norm_add_relu, batch_norm_relu_max_pool2d.
enum class BatchNormFusion { kRelu, kAddRelu, kReluMaxPool2d };
// Whether `device`'s type has `fusion`'s kernels (its optional forward and backward prims: host
// devices do, CUDA devices not yet), without which the fused op runs as the ops it fuses. The
// layers' fusion (engine/nn/fusion.h) asks it too.
bool has_fused_kernels(BatchNormFusion fusion, Device device);
// Rows of weight [V, D] at int64 indices of any shape: out [..., D], as F.embedding(index, weight).
// The gradient scatter-adds into weight (repeated indices accumulate); indices get none.
Tensor embedding(const Tensor& weight, const Tensor& index);
// Layer norm over the last dim of x [..., D] (any rank >= 1), as F.layer_norm(x, (D,), gamma,
// beta, eps): gamma/beta [D] may be undefined (elementwise_affine=False).
Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps = 1e-5f,
                  const std::string& who = "layer_norm");
// The mask is a function of `seed` alone, so the same seed gives the same mask.
Tensor dropout(const Tensor& x, float p, bool training, uint64_t seed);

// --- attention ---
// Softmax over the last dim of x (any rank >= 1). causal (x at least 2-D, [..., Tq, Tk]) keeps
// entry (q, k) only when k <= q + (Tk - Tq), the others exactly 0: for Tq == Tk, PyTorch's
// softmax(x.masked_fill(~tril, -inf)).
Tensor softmax(const Tensor& x, bool causal = false);
// PyTorch 2's F.scaled_dot_product_attention(q, k, v, dropout_p, is_causal) for q [B, H, Tq, E],
// k [B, H, Tk, E], v [B, H, Tk, Ev] -> [B, H, Tq, Ev]: softmax(q k^T / sqrt(E)) v, computed as two
// bmm and one softmax (+ dropout of the attention weights when dropout_p > 0, its mask a function
// of `seed`). causal masks as ops::softmax does; it matches PyTorch's is_causal for Tq == Tk
// (PyTorch aligns the mask top-left when Tq != Tk, this bottom-right, as a KV cache needs).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal = false, float dropout_p = 0.0f, uint64_t seed = 0);

// --- losses (mean reduction) ---
Tensor log_softmax(const Tensor& x);  // over dim 1 of [N, C]
// Targets equal to ignore_index are skipped and not counted in the mean (NaN when all are).
Tensor nll_loss(const Tensor& logp, const Tensor& target,
                int64_t ignore_index = kDefaultIgnoreIndex);
// cross_entropy(logits, target, ignore_index = -100): logits [N, C] with target [N], or
// [B, T, V] with target [B, T] (flattened to [B*T, V]). A function object rather than a function
// with a default argument, so `ops::cross_entropy` converts to a two-argument Criterion
// (parallel_criterion, the trainer).
struct CrossEntropy {
  Tensor operator()(const Tensor& logits, const Tensor& target,
                    int64_t ignore_index = kDefaultIgnoreIndex) const;
};
inline constexpr CrossEntropy cross_entropy{};
Tensor mse_loss(const Tensor& input, const Tensor& target);

// --- evaluation helpers (no graph) ---
Tensor argmax_rows(const Tensor& x);  // int64 [N]
// True when every element of x is finite: the one call that detects a NaN/inf loss.
bool all_finite(const Tensor& x);

}  // namespace dpe::ops
