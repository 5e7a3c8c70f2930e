// SyncBatchNorm: see the design note "global statistics" in sync_batch_norm.h.
#include "engine/distributed/sync_batch_norm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/distributed/distributed.h"
#include "engine/nn/batch_norm.h"

namespace dpe::nn {

using distributed::ProcessGroup;
using distributed::ReduceOp;

namespace {

Tensor vector_on(const std::vector<float>& v, Device device) {
  return Tensor::from_vector(v, Shape{static_cast<int64_t>(v.size())}, device);
}

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t num_features, float eps, float momentum,
                             std::shared_ptr<ProcessGroup> process_group, Device device)
    : channels_(num_features), eps_(eps), momentum_(momentum), group_(std::move(process_group)) {
  // BatchNorm2d's names, so checkpoints move between the two.
  register_parameter("weight", Tensor::ones({channels_}, device));
  register_parameter("bias", Tensor::zeros({channels_}, DType::kFloat32, device));
  register_buffer("running_mean", Tensor::zeros({channels_}, DType::kFloat32, device));
  register_buffer("running_var", Tensor::ones({channels_}, device));
  register_buffer("num_batches_tracked", Tensor::zeros(Shape{}, DType::kInt64, device));
}

Tensor SyncBatchNorm::forward(const Tensor& x_in) {
  const std::string who = repr();
  Tensor& running_mean = buffer("running_mean");
  Tensor& running_var = buffer("running_var");
  const Tensor& gamma = param("weight");
  const Tensor& beta = param("bias");
  if (!is_training()) {
    return ops::batch_norm(x_in, gamma, beta, running_mean, running_var, false, momentum_, eps_,
                           who);
  }
  DPE_CHECK(x_in.defined(), who << ": input is undefined");
  check_dtype(who.c_str(), x_in, DType::kFloat32, "input");
  DPE_CHECK(x_in.dim() == 2 || x_in.dim() == 4,
            who << ": expected 2-D or 4-D input, got " << x_in.shape());
  const int64_t channels = x_in.size(1);
  DPE_CHECK(channels == channels_,
            who << ": expected " << channels_ << " channels but got input " << x_in.shape());
  check_same_device(who.c_str(), x_in, gamma);
  Tensor x = x_in.contiguous();
  std::shared_ptr<ProcessGroup> group = group_;
  if (!group && distributed::is_initialized()) group = distributed::default_group();
  const bool communicate = group != nullptr && group->size() > 1;

  Tensor& tracked = buffer("num_batches_tracked");
  const int64_t next = tracked.to_vector<int64_t>()[0] + 1;
  tracked.copy_(Tensor::from_vector(std::vector<int64_t>{next}, Shape{}, Device()));

  DeviceGuard guard(&x.context());
  const Device dev = x.device();
  // [sum (C), sum of squares (C), count]: one all-reduce.
  Tensor stats = Tensor::empty(Shape{2 * channels + 1}, DType::kFloat32, dev);
  Tensor sum = stats.narrow(0, 0, channels);
  Tensor sumsq = stats.narrow(0, channels, channels);
  dispatch(prim::ChannelSums{x, sum, sumsq});
  stats.narrow(0, 2 * channels, 1).fill_(static_cast<float>(x.numel() / channels));
  if (communicate) group->all_reduce(stats, ReduceOp::kSum);
  const std::vector<float> s = stats.to_vector<float>();
  const double count = s[2 * channels];
  DPE_CHECK(count > 1, who << ": expected more than 1 value per channel when training, got input "
                              "size "
                           << x.shape() << " (" << count << " values per channel over all ranks)");
  std::vector<float> mean(channels), invstd(channels), unbiased(channels);
  for (int64_t c = 0; c < channels; ++c) {
    const double m = s[c] / count;
    const double var = std::max(static_cast<double>(s[channels + c]) / count - m * m, 0.0);
    mean[c] = static_cast<float>(m);
    invstd[c] = static_cast<float>(1.0 / std::sqrt(var + eps_));
    unbiased[c] = static_cast<float>(var * count / (count - 1));
  }
  Tensor mean_t = vector_on(mean, dev);
  Tensor invstd_t = vector_on(invstd, dev);
  {
    Tensor unbiased_t = vector_on(unbiased, dev);
    dispatch(prim::Scale{running_mean, 1.0f - momentum_, running_mean});
    dispatch(prim::Add{running_mean, mean_t, momentum_, running_mean});
    running_mean.bump_version();
    dispatch(prim::Scale{running_var, 1.0f - momentum_, running_var});
    dispatch(prim::Add{running_var, unbiased_t, momentum_, running_var});
    running_var.bump_version();
  }
  Tensor y = Tensor::empty(x.shape(), DType::kFloat32, dev);
  dispatch(prim::BatchNormElemt{x, mean_t, invstd_t, gamma, beta, y});

  const bool input_grad = x_in.requires_grad();
  record(who, {x_in, gamma, beta}, {&y},
         [x, gamma, mean_t, invstd_t, group, communicate, count, channels,
          input_grad](const std::vector<Tensor>& g) {
           Tensor gy = g[0].contiguous();
           const Device d = x.device();
           Tensor combined = Tensor::empty(Shape{2 * channels}, DType::kFloat32, d);
           Tensor sum_gy = combined.narrow(0, 0, channels);
           Tensor sum_gy_xmu = combined.narrow(0, channels, channels);
           dispatch(prim::ChannelGradSums{x, gy, mean_t, sum_gy, sum_gy_xmu});
           // PyTorch: the weight and bias gradients are the local sums (DDP averages them).
           Tensor ggamma = Tensor::empty(Shape{channels}, DType::kFloat32, d);
           dispatch(prim::Mul{sum_gy_xmu, invstd_t, ggamma});
           Tensor gbeta = sum_gy.clone();
           Tensor gx;
           if (input_grad) {
             if (communicate) group->all_reduce(combined, ReduceOp::kSum);
             Tensor mean_gy = Tensor::empty(Shape{channels}, DType::kFloat32, d);
             Tensor mean_gy_xmu = Tensor::empty(Shape{channels}, DType::kFloat32, d);
             const float inv = static_cast<float>(1.0 / count);
             dispatch(prim::Scale{sum_gy, inv, mean_gy});
             dispatch(prim::Scale{sum_gy_xmu, inv, mean_gy_xmu});
             gx = Tensor::empty(x.shape(), DType::kFloat32, d);
             dispatch(prim::BatchNormBackwardElemt{x, gy, mean_t, invstd_t, gamma, mean_gy,
                                                   mean_gy_xmu, gx});
           }
           return std::vector<Tensor>{gx, ggamma, gbeta};
         },
         {x, gamma});
  return y;
}

std::string SyncBatchNorm::repr() const {
  char buf[128];
  std::snprintf(buf, sizeof buf,
                "SyncBatchNorm(%lld, eps=%g, momentum=%g, affine=True, track_running_stats=True)",
                static_cast<long long>(channels_), eps_, momentum_);
  return buf;
}

std::shared_ptr<Module> SyncBatchNorm::convert_sync_batchnorm(
    std::shared_ptr<Module> module, std::shared_ptr<ProcessGroup> process_group) {
  DPE_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  if (auto bn = std::dynamic_pointer_cast<BatchNorm2d>(module)) {
    auto sync = std::make_shared<SyncBatchNorm>(bn->num_features(), bn->eps(), bn->momentum(),
                                                process_group, bn->device());
    for (const auto& [name, t] : bn->named_parameters(false)) sync->set_parameter(name, t);
    for (const auto& [name, t] : bn->named_buffers(false)) sync->set_buffer(name, t);
    sync->train(bn->is_training());
    return sync;
  }
  for (const auto& [name, child] : module->named_children()) {
    module->replace_module(name, convert_sync_batchnorm(child, process_group));
  }
  return module;
}

std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> module,
                                               std::shared_ptr<ProcessGroup> process_group) {
  return SyncBatchNorm::convert_sync_batchnorm(std::move(module), std::move(process_group));
}

}  // namespace dpe::nn
