#include "engine/nn/fusion.h"

#include <atomic>
#include <typeinfo>

#include "engine/autograd/ops.h"
#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"
#include "engine/nn/pooling.h"

namespace dpe::nn {

namespace {
std::atomic<bool> g_fusion_enabled{true};
}  // namespace

void set_fusion_enabled(bool enabled) { g_fusion_enabled.store(enabled); }

bool fusion_enabled() { return g_fusion_enabled.load(); }

bool fuses_batch_norm_relu(const Module& norm, const Module& activation) {
  return typeid(norm) == typeid(BatchNorm2d) && typeid(activation) == typeid(ReLU);
}

Tensor forward_batch_norm_relu(Module& norm, Module& activation, const Tensor& x) {
  if (fusion_enabled() && fuses_batch_norm_relu(norm, activation) && x.defined() &&
      ops::has_fused_kernels(ops::BatchNormFusion::kRelu, x.device())) {
    return static_cast<BatchNorm2d&>(norm).forward_relu(x);
  }
  return activation.forward(norm.forward(x));
}

Tensor forward_batch_norm_add_relu(Module& norm, Module& activation, const Tensor& x,
                                   const std::function<Tensor()>& residual) {
  if (fusion_enabled() && fuses_batch_norm_relu(norm, activation) && norm.is_training() &&
      x.defined() && ops::has_fused_kernels(ops::BatchNormFusion::kAddRelu, x.device())) {
    return static_cast<BatchNorm2d&>(norm).forward_add_relu(x, residual());
  }
  const Tensor h = norm.forward(x);
  return activation.forward(ops::add(h, residual()));
}

Tensor forward_batch_norm_add_relu(Module& norm, Module& activation, const Tensor& x,
                                   const Tensor& residual) {
  return forward_batch_norm_add_relu(norm, activation, x, [&] { return residual; });
}

bool fuses_batch_norm_relu_max_pool(const Module& norm, const Module& activation,
                                    const Module& pool) {
  return fuses_batch_norm_relu(norm, activation) && typeid(pool) == typeid(MaxPool2d);
}

Tensor forward_batch_norm_relu_max_pool(Module& norm, Module& activation, Module& pool,
                                        const Tensor& x) {
  if (fusion_enabled() && fuses_batch_norm_relu_max_pool(norm, activation, pool) && x.defined() &&
      ops::has_fused_kernels(ops::BatchNormFusion::kReluMaxPool2d, x.device())) {
    const auto& p = static_cast<const MaxPool2d&>(pool);
    return static_cast<BatchNorm2d&>(norm).forward_relu_max_pool(x, p.kernel_size(), p.stride(),
                                                                 p.padding());
  }
  return pool.forward(forward_batch_norm_relu(norm, activation, x));
}

}  // namespace dpe::nn
