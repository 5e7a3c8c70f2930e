#include "engine/optim/sgd.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"

namespace dpe::optim {

SGD::SGD(std::vector<Tensor> params, const SgdOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  DPE_CHECK(options.momentum >= 0.0f, "Invalid momentum value: " << options.momentum);
  DPE_CHECK(options.weight_decay >= 0.0f, "Invalid weight_decay value: " << options.weight_decay);
  DPE_CHECK(!options.nesterov || (options.momentum > 0.0f && options.dampening == 0.0f),
            "Nesterov momentum requires a momentum and zero dampening");
  momentum_buffers_.resize(params_.size());
}

void SGD::step() {
  MemoryCategoryScope category(MemoryCategory::kOptimizerState);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&params_[i].context());
    Tensor& p = update_target(i);
    Tensor& buf = momentum_buffers_[i];
    const bool first = options_.momentum != 0.0f && !buf.defined();
    if (first) buf = Tensor::empty(p.shape(), DType::kFloat32, p.device());
    // lr_, not options_.lr: a scheduler may have changed it.
    const SgdStepParams o{lr_, options_.momentum, options_.dampening, options_.weight_decay,
                          options_.nesterov};
    dispatch(prim::SgdStep{p, float32_grad(g), buf, o, first});
    publish(i);
  }
}

StateDict SGD::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < momentum_buffers_.size(); ++i) {
    if (momentum_buffers_[i].defined()) {
      out.emplace_back("state." + std::to_string(i) + ".momentum_buffer", momentum_buffers_[i]);
    }
  }
  return out;
}

void SGD::load_state_dict(const StateDict& state) {
  MemoryCategoryScope category(MemoryCategory::kOptimizerState);
  std::vector<std::pair<size_t, Tensor>> loaded;
  for (const auto& [name, t] : state) {
    const auto [i, field] = state_key("SGD", name);
    DPE_CHECK(field == "momentum_buffer", "SGD.load_state_dict: unexpected key '" << name << "'");
    DPE_CHECK(t.defined() && t.dtype() == DType::kFloat32 && t.shape() == params_[i].shape(),
              "SGD.load_state_dict: '" << name << "' is "
                                       << (t.defined() ? dtype_name(t.dtype()) : "undefined")
                                       << " " << (t.defined() ? t.shape() : Shape{})
                                       << ", not float32 " << params_[i].shape()
                                       << " as parameter " << i);
    loaded.emplace_back(i, t);
  }
  for (const auto& [i, t] : loaded) momentum_buffers_[i] = t.to(params_[i].device()).clone();
}

}  // namespace dpe::optim
