#include "engine/optim/sgd.h"

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
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&p.context());
    Tensor& buf = momentum_buffers_[i];
    const bool first = options_.momentum != 0.0f && !buf.defined();
    if (first) buf = Tensor::empty(p.shape(), DType::kFloat32, p.device());
    // lr_, not options_.lr: a scheduler may have changed it.
    const SgdStepParams o{lr_, options_.momentum, options_.dampening, options_.weight_decay,
                          options_.nesterov};
    dispatch(prim::SgdStep{p, g.contiguous(), buf, o, first});
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
  for (const auto& [name, t] : state) {
    const std::string prefix = "state.";
    const auto dot = name.find('.', prefix.size());
    DPE_CHECK(name.rfind(prefix, 0) == 0 && dot != std::string::npos &&
                  name.substr(dot + 1) == "momentum_buffer",
              "SGD.load_state_dict: unexpected key '" << name << "'");
    const size_t i = std::stoul(name.substr(prefix.size(), dot - prefix.size()));
    DPE_CHECK(
        i < params_.size() && t.shape() == params_[i].shape(),
        "SGD.load_state_dict: '" << name << "' " << t.shape() << " does not match any parameter");
    momentum_buffers_[i] = t.to(params_[i].device()).clone();
  }
}

}  // namespace dpe::optim
