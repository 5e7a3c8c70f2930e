// Batch norm's five entry points: batch_norm (training and evaluation), and fused with the ReLU
// after it, with a residual sum before that ReLU, or with a max pooling after it.
#include <array>
#include <cmath>

#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::checked_pool;
using detail::like;
using detail::prepare;
using detail::prepare_activation;

bool has_fused_kernels(BatchNormFusion fusion, Device device) {
  switch (fusion) {
    case BatchNormFusion::kRelu:
      return detail::has_fused_kernels<prim::BatchNormReluForwardTrain,
                                       prim::BatchNormReluBackward>(device);
    case BatchNormFusion::kAddRelu:
      return detail::has_fused_kernels<prim::BatchNormAddReluForwardTrain,
                                       prim::BatchNormAddReluBackward>(device);
    case BatchNormFusion::kReluMaxPool2d:
      return detail::has_fused_kernels<prim::BatchNormReluMaxPoolForwardTrain,
                                       prim::BatchNormReluMaxPoolBackward>(device);
  }
  return false;
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

// Whether x's device type has `fusion`'s kernels; an undefined x takes the fused op's path, whose
// checks name it.
bool fused_kernels_for(BatchNormFusion fusion, const Tensor& x) {
  return !x.defined() || has_fused_kernels(fusion, x.device());
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
  if (autocast_detail::widens(x_in)) {  // dpe's float32 entries: no 16-bit kernels
    const autocast_detail::Running running;
    return batch_norm_relu(autocast_detail::float32(x_in), gamma_in, beta_in, running_mean,
                           running_var, training, momentum, eps, who);
  }
  if ((!training && running_mean.defined()) || !fused_kernels_for(BatchNormFusion::kRelu, x_in)) {
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
  if (autocast_detail::widens(x_in)) {  // dpe's float32 entries: no 16-bit kernels
    const autocast_detail::Running running;
    return batch_norm_add_relu(autocast_detail::float32(x_in),
                               autocast_detail::float32(residual_in), gamma_in, beta_in,
                               running_mean, running_var, training, momentum, eps, who);
  }
  if ((!training && running_mean.defined()) ||
      !fused_kernels_for(BatchNormFusion::kAddRelu, x_in)) {
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
  if (autocast_detail::widens(x_in)) {  // dpe's float32 entries: no 16-bit kernels
    const autocast_detail::Running running;
    return batch_norm_relu_max_pool2d(autocast_detail::float32(x_in), gamma_in, beta_in,
                                      running_mean, running_var, training, momentum, eps,
                                      kernel_size, stride, padding, who);
  }
  // Windows without codes (kernels/op_params.h: wider than 16) run apart.
  if ((!training && running_mean.defined()) || kernel_size > kMaxWindowCodeKernel ||
      !fused_kernels_for(BatchNormFusion::kReluMaxPool2d, x_in)) {
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
  if (autocast_detail::widens(x_in)) {  // dpe's float32 entries: no 16-bit kernels
    const autocast_detail::Running running;
    return batch_norm(autocast_detail::float32(x_in), gamma_in, beta_in, running_mean, running_var,
                      training, momentum, eps, who);
  }
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

}  // namespace dpe::ops
