#include "engine/nn/fusion.h"

#include <atomic>
#include <typeinfo>

#include "engine/nn/activation.h"
#include "engine/nn/batch_norm.h"

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
      x.device().is_host()) {
    return static_cast<BatchNorm2d&>(norm).forward_relu(x);
  }
  return activation.forward(norm.forward(x));
}

}  // namespace dpe::nn
