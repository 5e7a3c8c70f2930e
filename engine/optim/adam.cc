#include "engine/optim/adam.h"

#include <string>
#include <utility>
#include <vector>

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
    const Tensor g = params_[i].grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&params_[i].context());
    Tensor& p = update_target(i);
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = Tensor::zeros(p.shape(), DType::kFloat32, p.device());
      exp_avg_sq_[i] = Tensor::zeros(p.shape(), DType::kFloat32, p.device());
    }
    DPE_CHECK(steps_[i] < kMaxAdamStep,
              "Adam.step: parameter " << i << " has taken " << steps_[i] << " steps, the most");
    ++steps_[i];
    // lr_, not options_.lr: a scheduler may have changed it.
    const AdamStepParams o{lr_,          options_.beta1,        options_.beta2,
                           options_.eps, options_.weight_decay, options_.adamw};
    dispatch(prim::AdamStep{p, float32_grad(g), exp_avg_[i], exp_avg_sq_[i], o, steps_[i]});
    publish(i);
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
  // Every entry is checked before any is taken: a parameter's state is its two moments and its
  // step, all three (PyTorch's Adam fails at step() on a state without 'step').
  struct Entry {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;  // 0: none given
    bool given = false;
  };
  std::vector<Entry> loaded(params_.size());
  for (const auto& [name, t] : state) {
    const auto [i, field] = state_key("Adam", name);
    const auto shown = [&t = t] {
      return t.defined() ? std::string(dtype_name(t.dtype())) + " " + t.shape().str()
                         : std::string("undefined");
    };
    Entry& e = loaded[i];
    e.given = true;
    if (field == "step") {
      DPE_CHECK(t.defined() && t.dtype() == DType::kInt64 && t.numel() == 1,
                "Adam.load_state_dict: '" << name << "' is " << shown()
                                          << ", not an int64 scalar");
      const int64_t step = t.to_vector<int64_t>()[0];
      DPE_CHECK(step >= 1 && step <= kMaxAdamStep,
                "Adam.load_state_dict: '" << name << "' is " << step
                                          << ", not a step count from 1 to " << kMaxAdamStep);
      e.step = step;
    } else if (field == "exp_avg" || field == "exp_avg_sq") {
      DPE_CHECK(t.defined() && t.dtype() == DType::kFloat32 && t.shape() == params_[i].shape(),
                "Adam.load_state_dict: '" << name << "' is " << shown() << ", not float32 "
                                          << params_[i].shape() << " as parameter " << i);
      (field == "exp_avg" ? e.exp_avg : e.exp_avg_sq) = t;
    } else {
      DPE_THROW("Adam.load_state_dict: unexpected key '" << name << "'");
    }
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    const Entry& e = loaded[i];
    if (!e.given) continue;
    const std::string k = "state." + std::to_string(i) + ".";
    for (const auto& [field, missing] : {std::pair<const char*, bool>{"step", e.step == 0},
                                         {"exp_avg", !e.exp_avg.defined()},
                                         {"exp_avg_sq", !e.exp_avg_sq.defined()}}) {
      DPE_CHECK(!missing, "Adam.load_state_dict: no '" << k << field << "' beside the other "
                                                       << "entries of parameter " << i
                                                       << " (a state has exp_avg, exp_avg_sq "
                                                          "and step)");
    }
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    const Entry& e = loaded[i];
    if (!e.given) continue;
    exp_avg_[i] = e.exp_avg.to(params_[i].device()).clone();
    exp_avg_sq_[i] = e.exp_avg_sq.to(params_[i].device()).clone();
    steps_[i] = e.step;
  }
}

}  // namespace dpe::optim
