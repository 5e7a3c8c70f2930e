// Layer ops: matmul and bmm, linear, embedding, conv2d, max_pool2d, batch_norm, layer_norm,
// dropout.
#include <array>
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::has_fused_kernels;
using detail::like;
using detail::prepare;
using detail::prepare_activation;

Tensor bmm(const Tensor& a_in, const Tensor& b_in, bool trans_a, bool trans_b) {
  Tensor a = prepare("bmm", a_in, a_in, "batch1");
  Tensor b = prepare("bmm", b_in, a_in, "batch2");
  DPE_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) &&
                a.size(trans_a ? 1 : 2) == b.size(trans_b ? 2 : 1),
            "bmm: batch1 " << a.shape() << (trans_a ? " (transposed)" : "") << " and batch2 "
                           << b.shape() << (trans_b ? " (transposed)" : "")
                           << " cannot be multiplied");
  DeviceGuard guard(&a.context());
  Tensor c = Tensor::empty(Shape{a.size(0), a.size(trans_a ? 2 : 1), b.size(trans_b ? 1 : 2)},
                           DType::kFloat32, a.device());
  dispatch(prim::Bmm{a, b, trans_a, trans_b, c});
  record("bmm", {a_in, b_in}, {&c},
         [a, b, a_in, b_in, trans_a, trans_b](const std::vector<Tensor>& g) {
           // c = op(a) op(b): gop(a) = gc op(b)^T and gop(b) = op(a)^T gc, each written in the
           // layout its operand is held in by choosing which factor goes first and the flags.
           Tensor gc = g[0].contiguous();
           Tensor ga, gb;
           if (a_in.requires_grad()) {
             ga = like(a);
             if (!trans_a) {
               dispatch(prim::Bmm{gc, b, false, !trans_b, ga});
             } else {
               dispatch(prim::Bmm{b, gc, trans_b, true, ga});
             }
           }
           if (b_in.requires_grad()) {
             gb = like(b);
             if (!trans_b) {
               dispatch(prim::Bmm{a, gc, !trans_a, false, gb});
             } else {
               dispatch(prim::Bmm{gc, a, true, trans_a, gb});
             }
           }
           return std::vector<Tensor>{ga, gb};
         },
         {a, b});
  return c;
}

namespace {

// [..., M, K] @ [..., K, N] with equal leading dims: one bmm over the folded batch.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  bool lead_equal = sa.rank() == sb.rank();
  for (int64_t i = 0; lead_equal && i + 2 < sa.rank(); ++i) lead_equal = sa[i] == sb[i];
  DPE_CHECK(lead_equal && sa[sa.rank() - 1] == sb[sb.rank() - 2],
            "matmul: shapes " << sa << " and " << sb
                              << " cannot be multiplied (batched matmul needs [..., M, K] and "
                                 "[..., K, N] with equal leading dims)");
  const int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1], n = sb[sb.rank() - 1];
  std::vector<int64_t> out(sa.begin(), sa.end() - 2);
  int64_t folded = 1;
  for (int64_t d : out) folded *= d;
  out.push_back(m);
  out.push_back(n);
  Tensor c = bmm(reshape(a, Shape{folded, m, k}), reshape(b, Shape{folded, k, n}));
  return reshape(c, Shape(out));
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (a_in.defined() && b_in.defined() && (a_in.dim() > 2 || b_in.dim() > 2)) {
    return batched_matmul(a_in, b_in);
  }
  Tensor a = prepare("matmul", a_in, a_in, "a");
  Tensor b = prepare("matmul", b_in, a_in, "b");
  DPE_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
            "matmul: mat1 and mat2 shapes cannot be multiplied (" << a.shape() << " and "
                                                                  << b.shape() << ")");
  DeviceGuard guard(&a.context());
  Tensor c = Tensor::empty(Shape{a.size(0), b.size(1)}, DType::kFloat32, a.device());
  dispatch(prim::Matmul{a, b, c});
  record("matmul", {a_in, b_in}, {&c},
         [a, b, a_in, b_in](const std::vector<Tensor>& g) {
           Tensor gc = g[0].contiguous();
           Tensor ga, gb;
           if (a_in.requires_grad()) {  // gA = gC @ B^T
             ga = like(a);
             dispatch(prim::Matmul{gc, b.permute({1, 0}).contiguous(), ga});
           }
           if (b_in.requires_grad()) {  // gB = A^T @ gC
             gb = like(b);
             dispatch(prim::Matmul{a.permute({1, 0}).contiguous(), gc, gb});
           }
           return std::vector<Tensor>{ga, gb};
         },
         {a, b});
  return c;
}

namespace {

// A weight [out, in] that is the transpose of a dense [in, out] matrix (GPT-2's Conv1D passes
// W.t()): linear runs on it as it is stored.
bool dense_transpose(const Tensor& w) {
  return w.dim() == 2 && w.size(0) > 1 && w.size(1) > 1 && w.strides()[0] == 1 &&
         w.strides()[1] == w.size(0);
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const std::string& who) {
  Tensor x = prepare(who.c_str(), x_in, x_in, "input");
  // A transposed weight runs as stored (prim::LinearForward::w_transposed): no transposed copy of
  // it each forward, and its gradient is made [in, out], so that the transpose's backward hands
  // the parameter a dense gradient to keep rather than one to copy.
  DPE_CHECK(w_in.defined(), who << ": weight is undefined");
  const bool transposed = dense_transpose(w_in);
  Tensor w = prepare(who.c_str(), transposed ? w_in.permute({1, 0}) : w_in, x_in, "weight");
  Tensor b = b_in.defined() ? prepare(who.c_str(), b_in, x_in, "bias") : Tensor();
  const int64_t in = w.size(transposed ? 0 : 1), out = w.size(transposed ? 1 : 0);
  DPE_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == in,
            who << ": expected input of shape [N, " << in << "] for weight " << w_in.shape()
                << ", got " << x.shape());
  DeviceGuard guard(&x.context());
  Tensor y = Tensor::empty(Shape{x.size(0), out}, DType::kFloat32, x.device());
  dispatch(prim::LinearForward{x, w, b, y, transposed});
  record(who, {x_in, w_in, b_in}, {&y},
         [x, w, x_in, w_in, b_in, transposed](const std::vector<Tensor>& g) {
           // The weight's and bias's gradients go straight to the destinations offered for them
           // (design note "gradient destinations", node.h), scaled; a parameter without an
           // offer of that scale gets its plain gradient, from a call of its own if need be. A
           // transposed weight's offer (laid out [out, in]) is declined.
           const GradDestination* dw =
               w_in.requires_grad() && !transposed ? offered_destination(1) : nullptr;
           const GradDestination* db = b_in.requires_grad() ? offered_destination(2) : nullptr;
           const float scale = dw != nullptr ? dw->scale : db != nullptr ? db->scale : 1.0f;
           const bool w_there = dw != nullptr, b_there = db != nullptr && db->scale == scale;
           Tensor gx = x_in.requires_grad() ? like(x) : Tensor();
           Tensor gw = w_there ? dw->view : w_in.requires_grad() ? like(w) : Tensor();
           Tensor gb = b_there ? db->view : b_in.requires_grad() ? like(b_in) : Tensor();
           const Tensor gy = g[0].contiguous();
           const bool plain_w = gw.defined() && !w_there, plain_b = gb.defined() && !b_there;
           if (scale == 1.0f || (!plain_w && !plain_b)) {
             dispatch(prim::LinearBackward{x, w, gy, gx, gw, gb, scale, transposed});
           } else {
             Tensor sw = w_there ? gw : Tensor(), sb = b_there ? gb : Tensor();
             Tensor pw = plain_w ? gw : Tensor(), pb = plain_b ? gb : Tensor(), none;
             dispatch(prim::LinearBackward{x, w, gy, gx, sw, sb, scale, transposed});
             dispatch(prim::LinearBackward{x, w, gy, none, pw, pb, 1.0f, transposed});
           }
           if (transposed && gw.defined()) gw = gw.permute({1, 0});
           return std::vector<Tensor>{gx, gw, gb};
         },
         {x, w});
  return y;
}

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, int64_t stride,
              int64_t padding, const std::string& who) {
  const Conv2dParams p{stride, padding};
  Tensor x = prepare_activation(who.c_str(), x_in, "input");
  Tensor w = prepare(who.c_str(), w_in, x_in, "weight");
  Tensor b = b_in.defined() ? prepare(who.c_str(), b_in, x_in, "bias") : Tensor();
  DPE_CHECK(w.dim() == 4, who << ": weight must be 4-D [out, in, kh, kw], got " << w.shape());
  DPE_CHECK(x.dim() == 4 && x.size(1) == w.size(1), who << ": expected input [N, " << w.size(1)
                                                        << ", H, W] for weight " << w.shape()
                                                        << ", got " << x.shape());
  const int64_t ho = (x.size(2) + 2 * p.padding - w.size(2)) / p.stride + 1;
  const int64_t wo = (x.size(3) + 2 * p.padding - w.size(3)) / p.stride + 1;
  DPE_CHECK(ho > 0 && wo > 0, who << ": input " << x.shape() << " is smaller than the kernel "
                                  << w.shape() << " with padding " << p.padding);
  DeviceGuard guard(&x.context());
  const MemoryFormat format = prim::activation_format(x);
  Tensor y =
      Tensor::empty(Shape{x.size(0), w.size(0), ho, wo}, DType::kFloat32, x.device(), format);
  dispatch(prim::Conv2dForward{x, w, b, p, y});
  record(who, {x_in, w_in, b_in}, {&y},
         [x, w, p, x_in, w_in, b_in, format](const std::vector<Tensor>& g) {
           Tensor gx = x_in.requires_grad() ? like(x) : Tensor();
           Tensor gw = w_in.requires_grad() ? like(w) : Tensor();
           Tensor gb = b_in.requires_grad() ? like(b_in) : Tensor();
           dispatch(prim::Conv2dBackward{x, w, g[0].contiguous(format), p, gx, gw, gb});
           return std::vector<Tensor>{gx, gw, gb};
         },
         {x, w});
  return y;
}

namespace {

// max_pool2d's parameters (stride 0: the kernel size) checked against x; returns them and the
// output's shape.
std::pair<Pool2dParams, Shape> checked_pool(const Tensor& x, int64_t kernel_size, int64_t stride,
                                            int64_t padding) {
  const Pool2dParams p{kernel_size, stride > 0 ? stride : kernel_size, padding};
  DPE_CHECK(x.dim() == 4, "max_pool2d: expected a 4-D input [N, C, H, W], got " << x.shape());
  DPE_CHECK(p.padding * 2 <= p.kernel, "max_pool2d: pad should be at most half of kernel size");
  const int64_t ho = (x.size(2) + 2 * p.padding - p.kernel) / p.stride + 1;
  const int64_t wo = (x.size(3) + 2 * p.padding - p.kernel) / p.stride + 1;
  DPE_CHECK(ho > 0 && wo > 0,
            "max_pool2d: input " << x.shape() << " is smaller than the kernel " << p.kernel);
  return {p, Shape{x.size(0), x.size(1), ho, wo}};
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, int64_t kernel_size, int64_t stride, int64_t padding) {
  Tensor x = prepare_activation("max_pool2d", x_in, "input");
  const auto [p, out] = checked_pool(x, kernel_size, stride, padding);
  DeviceGuard guard(&x.context());
  const MemoryFormat format = prim::activation_format(x);
  Tensor y = Tensor::empty(out, DType::kFloat32, x.device(), format);
  Tensor workspace = Tensor::empty(out, DType::kInt64, x.device(), format);
  dispatch(prim::MaxPool2dForward{x, p, y, workspace});
  const Shape in_shape = x.shape();
  record("max_pool2d", {x_in}, {&y},
         [workspace, p, in_shape, format](const std::vector<Tensor>& g) {
           Tensor gx = Tensor::empty(in_shape, DType::kFloat32, g[0].device(), format);
           dispatch(prim::MaxPool2dBackward{g[0].contiguous(format), workspace, p, gx});
           return std::vector<Tensor>{gx};
         });
  return y;
}

namespace {

// (running *= 1 - momentum) += momentum * batch, in place.
void update_running(Tensor& running, const Tensor& batch, float momentum) {
  dispatch(prim::Scale{running, 1.0f - momentum, running});
  dispatch(prim::Add{running, batch, momentum, running});
  running.bump_version();
}

// A training forward's batch statistics [C], for x [N, C, ...].
struct BatchStatistics {
  Tensor mean, var;
  int64_t per_channel;  // values per channel
};

BatchStatistics new_batch_statistics(const Tensor& x, const std::string& who) {
  const int64_t channels = x.size(1);
  const int64_t per_channel = x.numel() / channels;
  DPE_CHECK(per_channel > 1, who << ": expected more than 1 value per channel when training, "
                                    "got input size "
                                 << x.shape());
  return {Tensor::empty(Shape{channels}, DType::kFloat32, x.device()),
          Tensor::empty(Shape{channels}, DType::kFloat32, x.device()), per_channel};
}

// The running statistics updated in place from the batch's (unbiased variance), as PyTorch, when
// training and they exist.
void update_running_statistics(Tensor& running_mean, Tensor& running_var,
                               const BatchStatistics& batch, bool training, float momentum) {
  if (!training || !running_mean.defined()) return;
  NoGradGuard no_grad;
  Tensor unbiased = like(batch.var);
  const int64_t n = batch.per_channel;
  dispatch(prim::Scale{batch.var, static_cast<float>(n) / static_cast<float>(n - 1), unbiased});
  update_running(running_mean, batch.mean, momentum);
  update_running(running_var, unbiased, momentum);
}

// The training path of batch_norm and batch_norm_relu: batch statistics, running statistics
// updated in place, one node whose backward reads x, gamma (and beta for the ReLU's mask).
Tensor batch_norm_train(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                        const Tensor& x, const Tensor& gamma, const Tensor& beta,
                        Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                        float eps, bool relu, const std::string& who) {
  BatchStatistics batch = new_batch_statistics(x, who);
  Tensor y = like(x);
  Tensor mean = batch.mean, var = batch.var;
  if (relu) {
    dispatch(prim::BatchNormReluForwardTrain{x, gamma, beta, eps, y, mean, var});
  } else {
    dispatch(prim::BatchNormForwardTrain{x, gamma, beta, eps, y, mean, var});
  }
  update_running_statistics(running_mean, running_var, batch, training, momentum);
  record(
      relu ? who + "+ReLU" : who, {x_in, gamma_in, beta_in}, {&y},
      [x, gamma, beta, mean, var, eps, relu](const std::vector<Tensor>& g) {
        Tensor gx = like(x), ggamma = like(gamma), gbeta = like(gamma);
        const Tensor gy = g[0].contiguous(prim::activation_format(x));
        if (relu) {
          dispatch(
              prim::BatchNormReluBackward{x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta});
        } else {
          dispatch(prim::BatchNormBackward{x, gy, gamma, mean, var, eps, gx, ggamma, gbeta});
        }
        return std::vector<Tensor>{gx, ggamma, gbeta};
      },
      relu ? std::vector<Tensor>{x, gamma, beta} : std::vector<Tensor>{x, gamma});
  return y;
}

// What batch_norm and batch_norm_relu check of their arguments; returns {x, gamma, beta} as the
// backend takes them.
// A channels-last x stays so for the training path (train = true); evaluation takes it
// contiguous (its backward's per-channel sums have no channels-last kernel).
std::array<Tensor, 3> prepare_batch_norm(const Tensor& x_in, const Tensor& gamma_in,
                                         const Tensor& beta_in, const std::string& who,
                                         bool train) {
  Tensor x = train ? prepare_activation(who.c_str(), x_in, "input")
                   : prepare(who.c_str(), x_in, x_in, "input");
  DPE_CHECK(x.dim() == 2 || x.dim() == 4, who << ": expected 2-D or 4-D input, got " << x.shape());
  const int64_t channels = x.size(1);
  Tensor gamma = prepare(who.c_str(), gamma_in, x_in, "weight");
  Tensor beta = prepare(who.c_str(), beta_in, x_in, "bias");
  DPE_CHECK(gamma.shape() == Shape({channels}) && beta.shape() == Shape({channels}),
            who << ": expected " << channels << " channels (weight " << gamma.shape()
                << ") but got input " << x.shape());
  return {x, gamma, beta};
}

}  // namespace

Tensor batch_norm_relu(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                       Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                       float eps, const std::string& who) {
  if ((!training && running_mean.defined()) ||
      !has_fused_kernels<prim::BatchNormReluForwardTrain, prim::BatchNormReluBackward>(x_in)) {
    return relu(batch_norm(x_in, gamma_in, beta_in, running_mean, running_var, training, momentum,
                           eps, who));
  }
  auto [x, gamma, beta] = prepare_batch_norm(x_in, gamma_in, beta_in, who, /*train=*/true);
  DeviceGuard guard(&x.context());
  return batch_norm_train(x_in, gamma_in, beta_in, x, gamma, beta, running_mean, running_var,
                          training, momentum, eps, /*relu=*/true, who);
}

Tensor batch_norm_add_relu(const Tensor& x_in, const Tensor& residual_in, const Tensor& gamma_in,
                           const Tensor& beta_in, Tensor& running_mean, Tensor& running_var,
                           bool training, float momentum, float eps, const std::string& who) {
  if ((!training && running_mean.defined()) ||
      !has_fused_kernels<prim::BatchNormAddReluForwardTrain, prim::BatchNormAddReluBackward>(
          x_in)) {
    return relu(add(batch_norm(x_in, gamma_in, beta_in, running_mean, running_var, training,
                               momentum, eps, who),
                    residual_in));
  }
  auto [x, gamma, beta] = prepare_batch_norm(x_in, gamma_in, beta_in, who, /*train=*/true);
  DeviceGuard guard(&x.context());
  BatchStatistics batch = new_batch_statistics(x, who);
  // The residual's checks, as the sum apart makes them (after batch norm's).
  DPE_CHECK(residual_in.defined(), "add: b is undefined");
  const Tensor residual = detail::prepare_pair("add", x, residual_in)[1];
  Tensor y = like(x);
  Tensor mean = batch.mean, var = batch.var;
  dispatch(prim::BatchNormAddReluForwardTrain{x, residual, gamma, beta, eps, y, mean, var});
  update_running_statistics(running_mean, running_var, batch, training, momentum);
  const Tensor saved = y.detach();
  record(who + "+add+ReLU", {x_in, residual_in, gamma_in, beta_in}, {&y},
         [x, gamma, saved, mean, var, eps](const std::vector<Tensor>& g) {
           Tensor gx = like(x), gresidual = like(x), ggamma = like(gamma), gbeta = like(gamma);
           const Tensor gy = g[0].contiguous(prim::activation_format(x));
           dispatch(prim::BatchNormAddReluBackward{x, saved, gy, gamma, mean, var, eps, gx,
                                                   gresidual, ggamma, gbeta});
           return std::vector<Tensor>{gx, gresidual, ggamma, gbeta};
         },
         {x, gamma, saved});
  return y;
}

Tensor batch_norm_relu_max_pool2d(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                                  Tensor& running_mean, Tensor& running_var, bool training,
                                  float momentum, float eps, int64_t kernel_size, int64_t stride,
                                  int64_t padding, const std::string& who) {
  // Windows without codes (kernels/op_params.h: wider than 16) run apart.
  if ((!training && running_mean.defined()) || kernel_size > kMaxWindowCodeKernel ||
      !has_fused_kernels<prim::BatchNormReluMaxPoolForwardTrain,
                         prim::BatchNormReluMaxPoolBackward>(x_in)) {
    return max_pool2d(batch_norm_relu(x_in, gamma_in, beta_in, running_mean, running_var, training,
                                      momentum, eps, who),
                      kernel_size, stride, padding);
  }
  auto [x, gamma, beta] = prepare_batch_norm(x_in, gamma_in, beta_in, who, /*train=*/true);
  DeviceGuard guard(&x.context());
  // Batch norm's checks first, then the pooling's, as the ops apart would report them.
  BatchStatistics batch = new_batch_statistics(x, who);
  const auto [p, out] = checked_pool(x, kernel_size, stride, padding);
  const MemoryFormat format = prim::activation_format(x);
  Tensor y = Tensor::empty(out, DType::kFloat32, x.device(), format);
  Tensor workspace = Tensor::empty(prim::window_code_words(out), DType::kInt64, x.device());
  Tensor mean = batch.mean, var = batch.var;
  dispatch(prim::BatchNormReluMaxPoolForwardTrain{x, gamma, beta, eps, p, y, workspace, mean, var});
  update_running_statistics(running_mean, running_var, batch, training, momentum);
  record(who + "+ReLU+MaxPool2d", {x_in, gamma_in, beta_in}, {&y},
         [x, gamma, beta, mean, var, eps, workspace, p = p](const std::vector<Tensor>& g) {
           Tensor gx = like(x), ggamma = like(gamma), gbeta = like(gamma);
           const Tensor gy = g[0].contiguous(prim::activation_format(x));
           dispatch(prim::BatchNormReluMaxPoolBackward{x, gy, workspace, gamma, beta, mean, var,
                                                       eps, p, gx, ggamma, gbeta});
           return std::vector<Tensor>{gx, ggamma, gbeta};
         },
         {x, gamma, beta});
  return y;
}

Tensor batch_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in,
                  Tensor& running_mean, Tensor& running_var, bool training, float momentum,
                  float eps, const std::string& who) {
  const bool train = training || !running_mean.defined();
  auto [x, gamma, beta] = prepare_batch_norm(x_in, gamma_in, beta_in, who, train);
  DeviceGuard guard(&x.context());
  if (train) {
    return batch_norm_train(x_in, gamma_in, beta_in, x, gamma, beta, running_mean, running_var,
                            training, momentum, eps, /*relu=*/false, who);
  }
  Tensor y = like(x);
  Tensor rm = running_mean.contiguous(), rv = running_var.contiguous();
  dispatch(prim::BatchNormForwardEval{x, gamma, beta, rm, rv, eps, y});
  record(who, {x_in, gamma_in, beta_in}, {&y},
         [x, gamma, rm, rv, eps](const std::vector<Tensor>& g) {
           // With fixed statistics the op is affine per channel.
           std::vector<float> inv = rv.to_vector<float>();
           for (float& v : inv) v = 1.0f / std::sqrt(v + eps);
           Tensor invstd = Tensor::from_vector(inv, rv.shape(), rv.device());
           Tensor gy = g[0].contiguous();
           Tensor zeros = Tensor::zeros(rv.shape(), DType::kFloat32, rv.device());
           Tensor gx = like(x), sum_gy = like(rv), sum_gy_xmu = like(rv), ggamma = like(rv);
           dispatch(prim::BatchNormBackwardElemt{x, gy, rm, invstd, gamma, zeros, zeros, gx});
           dispatch(prim::ChannelGradSums{x, gy, rm, sum_gy, sum_gy_xmu});
           dispatch(prim::Mul{sum_gy_xmu, invstd, ggamma});
           return std::vector<Tensor>{gx, ggamma, sum_gy};
         },
         {x, gamma, rm, rv});
  return y;
}

Tensor embedding(const Tensor& weight_in, const Tensor& index_in) {
  Tensor weight = prepare("embedding", weight_in, weight_in, "weight");
  DPE_CHECK(index_in.defined(), "embedding: indices are undefined");
  check_dtype("embedding", index_in, DType::kInt64, "indices");
  check_same_device("embedding", weight, index_in);
  DPE_CHECK(weight.dim() == 2, "embedding: expected a 2-D weight [V, D], got " << weight.shape());
  const int64_t n = index_in.numel(), d = weight.size(1);
  Tensor index = index_in.contiguous().view(Shape{n});
  std::vector<int64_t> out_dims(index_in.shape().begin(), index_in.shape().end());
  out_dims.push_back(d);
  DeviceGuard guard(&weight.context());
  Tensor y = Tensor::empty(Shape(out_dims), DType::kFloat32, weight.device());
  Tensor rows = y.view(Shape{n, d});
  dispatch(prim::EmbeddingForward{weight, index, rows});
  const Shape w_shape = weight.shape();
  record("embedding", {weight_in}, {&y},
         [index, w_shape, n, d](const std::vector<Tensor>& g) {
           const Tensor gy = g[0].contiguous().view(Shape{n, d});
           // Into a gradient of the weight that already arrived, where the engine offers one
           // (node.h, "accumulation offers"): a tied embedding's head gradient gets the rows the
           // tokens name added, with no [V, D] of zeros and no [V, D] sum.
           Tensor acc = offered_accumulator(0);
           if (acc.defined() && acc.shape() == w_shape &&
               supports<prim::EmbeddingBackwardAccumulate>(acc.device())) {
             dispatch(prim::EmbeddingBackwardAccumulate{index, gy, acc});
             return std::vector<Tensor>{acc};
           }
           Tensor gw = Tensor::empty(w_shape, DType::kFloat32, g[0].device());
           dispatch(prim::EmbeddingBackward{index, gy, gw});
           return std::vector<Tensor>{gw};
         },
         {index});
  return y;
}

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, float eps,
                  const std::string& who) {
  Tensor x = prepare(who.c_str(), x_in, x_in, "input");
  Tensor gamma = gamma_in.defined() ? prepare(who.c_str(), gamma_in, x_in, "weight") : Tensor();
  Tensor beta = beta_in.defined() ? prepare(who.c_str(), beta_in, x_in, "bias") : Tensor();
  DPE_CHECK(x.dim() >= 1 && x.size(-1) > 0,
            who << ": expected an input [..., D] with D > 0, got " << x.shape());
  const int64_t d = x.size(-1);
  DPE_CHECK((!gamma.defined() || gamma.shape() == Shape({d})) &&
                (!beta.defined() || beta.shape() == Shape({d})),
            who << ": expected weight and bias of shape [" << d << "] for input " << x.shape()
                << ", got " << (gamma.defined() ? gamma.shape() : Shape{}) << " and "
                << (beta.defined() ? beta.shape() : Shape{}));
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  Tensor mean = Tensor::empty(Shape{x.numel() / d}, DType::kFloat32, x.device());
  Tensor rstd = like(mean);
  dispatch(prim::LayerNormForward{x, gamma, beta, eps, y, mean, rstd});
  record(who, {x_in, gamma_in, beta_in}, {&y},
         [x, gamma, mean, rstd, gamma_in, beta_in](const std::vector<Tensor>& g) {
           Tensor gx = like(x);
           Tensor ggamma = gamma_in.requires_grad() ? like(gamma) : Tensor();
           Tensor gbeta = beta_in.requires_grad() ? like(beta_in) : Tensor();
           dispatch(
               prim::LayerNormBackward{x, g[0].contiguous(), gamma, mean, rstd, gx, ggamma, gbeta});
           return std::vector<Tensor>{gx, ggamma, gbeta};
         },
         {x, gamma});
  return y;
}

Tensor dropout(const Tensor& x_in, float p, bool training, uint64_t seed) {
  DPE_CHECK(p >= 0.0f && p <= 1.0f, "dropout probability has to be between 0 and 1, but got " << p);
  if (!training || p == 0.0f) return x_in;
  Tensor x = prepare("dropout", x_in, x_in, "input");
  DeviceGuard guard(&x.context());
  Tensor mask = like(x);
  dispatch(prim::DropoutMask{p, seed, mask});
  return mul(x_in, mask);
}

}  // namespace dpe::ops
