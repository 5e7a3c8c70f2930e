#include "engine/optim/adam.h"

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"

namespace dpe::optim {

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  DPE_CHECK(options.eps >= 0.0f, "Invalid epsilon value: " << options.eps);
  DPE_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0,
            "Invalid beta parameter at index 0: " << options.beta1);
  DPE_CHECK(options.beta2 >= 0.0 && options.beta2 < 1.0,
            "Invalid beta parameter at index 1: " << options.beta2);
  exp_avg_.resize(params_.size());
  exp_avg_sq_.resize(params_.size());
  steps_.assign(params_.size(), 0);
}

void Adam::step() {
  MemoryCategoryScope category(MemoryCategory::kOptimizerState);
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&p.context());
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::zeros(p.shape(), DType::kFloat32, p.device());
      exp_avg_sq_[i] = Tensor::zeros(p.shape(), DType::kFloat32, p.device());
    }
    ++steps_[i];
    // lr_, not options_.lr: a scheduler may have changed it.
    const AdamStepParams o{lr_,          options_.beta1,        options_.beta2,
                           options_.eps, options_.weight_decay, options_.adamw};
    dispatch(prim::AdamStep{p, g.contiguous(), exp_avg_[i], exp_avg_sq_[i], o, steps_[i]});
  }
}

StateDict Adam::state_dict() const {
  StateDict out;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!exp_avg_[i].defined()) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    out.emplace_back(k + "exp_avg", exp_avg_[i]);
    out.emplace_back(k + "exp_avg_sq", exp_avg_sq_[i]);
    out.emplace_back(k + "step", Tensor::from_vector(std::vector<int64_t>{steps_[i]}, Shape{}));
  }
  return out;
}

void Adam::load_state_dict(const StateDict& state) {
  MemoryCategoryScope category(MemoryCategory::kOptimizerState);
  for (const auto& [name, t] : state) {
    const std::string prefix = "state.";
    const auto dot = name.find('.', prefix.size());
    DPE_CHECK(name.rfind(prefix, 0) == 0 && dot != std::string::npos,
              "Adam.load_state_dict: unexpected key '" << name << "'");
    const size_t i = std::stoul(name.substr(prefix.size(), dot - prefix.size()));
    const std::string field = name.substr(dot + 1);
    DPE_CHECK(i < params_.size(), "Adam.load_state_dict: '" << name << "' names parameter " << i
                                                            << " of " << params_.size());
    if (field == "step") {
      steps_[i] = t.to_vector<int64_t>().at(0);
      continue;
    }
    DPE_CHECK(t.shape() == params_[i].shape(), "Adam.load_state_dict: '"
                                                   << name << "' " << t.shape()
                                                   << " does not match " << params_[i].shape());
    Tensor copy = t.to(params_[i].device()).clone();
    if (field == "exp_avg")
      exp_avg_[i] = copy;
    else if (field == "exp_avg_sq")
      exp_avg_sq_[i] = copy;
    else
      DPE_THROW("Adam.load_state_dict: unexpected key '" << name << "'");
  }
}

}  // namespace dpe::optim
