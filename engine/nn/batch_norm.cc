#include "engine/nn/batch_norm.h"

#include <cstdio>

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/nn/recompute.h"

namespace dpe::nn {

BatchNorm2d::BatchNorm2d(int64_t num_features, float eps, float momentum, Device device)
    : channels_(num_features), eps_(eps), momentum_(momentum) {
  register_parameter("weight", Tensor::ones({channels_}, device));
  register_parameter("bias", Tensor::zeros({channels_}, DType::kFloat32, device));
  register_buffer("running_mean", Tensor::zeros({channels_}, DType::kFloat32, device));
  register_buffer("running_var", Tensor::ones({channels_}, device));
  register_buffer("num_batches_tracked", Tensor::zeros(Shape{}, DType::kInt64, device));
}

void BatchNorm2d::count_batch() {
  if (!is_training() || recomputing()) return;
  // num_batches_tracked counts on the host side of the tensor: a one-element int64 update.
  Tensor& n = buffer("num_batches_tracked");
  const int64_t next = n.to_vector<int64_t>()[0] + 1;
  n.copy_(Tensor::from_vector(std::vector<int64_t>{next}, Shape{}, Device()));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  count_batch();
  RunningStats stats = running_stats();
  return ops::batch_norm(x, param("weight"), param("bias"), stats.mean, stats.var, is_training(),
                         momentum_, eps_, repr());
}

Tensor BatchNorm2d::forward_relu(const Tensor& x) {
  count_batch();
  RunningStats stats = running_stats();
  return ops::batch_norm_relu(x, param("weight"), param("bias"), stats.mean, stats.var,
                              is_training(), momentum_, eps_, repr());
}

Tensor BatchNorm2d::forward_add_relu(const Tensor& x, const Tensor& residual) {
  RunningStats stats = running_stats();
  Tensor y = ops::batch_norm_add_relu(x, residual, param("weight"), param("bias"), stats.mean,
                                      stats.var, is_training(), momentum_, eps_, repr());
  count_batch();  // after the op's checks: a refused residual leaves the module as it was
  return y;
}

Tensor BatchNorm2d::forward_relu_max_pool(const Tensor& x, int64_t kernel_size, int64_t stride,
                                          int64_t padding) {
  count_batch();
  RunningStats stats = running_stats();
  return ops::batch_norm_relu_max_pool2d(x, param("weight"), param("bias"), stats.mean, stats.var,
                                         is_training(), momentum_, eps_, kernel_size, stride,
                                         padding, repr());
}

BatchNorm2d::RunningStats BatchNorm2d::running_stats() {
  // A checkpoint's recompute updates throwaway copies (recompute.h, "no second running-statistics
  // update"); handles share the buffers' storage, so the op's in-place update lands in them.
  if (is_training() && recomputing()) {
    return {buffer("running_mean").clone(), buffer("running_var").clone()};
  }
  return {buffer("running_mean"), buffer("running_var")};
}

std::string BatchNorm2d::repr() const {
  char buf[128];
  std::snprintf(buf, sizeof buf,
                "BatchNorm2d(%lld, eps=%g, momentum=%g, affine=True, track_running_stats=True)",
                static_cast<long long>(channels_), eps_, momentum_);
  return buf;
}

}  // namespace dpe::nn
