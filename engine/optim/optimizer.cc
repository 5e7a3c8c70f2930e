#include "engine/optim/optimizer.h"

#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/memory_category.h"

namespace dpe::optim {

Optimizer::Optimizer(std::vector<Tensor> params, float lr) : params_(std::move(params)), lr_(lr) {
  DPE_CHECK(!params_.empty(), "optimizer got an empty parameter list");
  DPE_CHECK(lr >= 0.0f, "Invalid learning rate: " << lr);
  for (size_t i = 0; i < params_.size(); ++i) {
    DPE_CHECK(params_[i].defined() && is_floating_point(params_[i].dtype()),
              "optimizer: parameter "
                  << i << " is "
                  << (params_[i].defined() ? dtype_name(params_[i].dtype()) : "undefined")
                  << ", not a floating tensor");
  }
  masters_.resize(params_.size());
  published_version_.assign(params_.size(), 0);
}

Tensor& Optimizer::update_target(size_t i) {
  Tensor& p = params_[i];
  if (p.dtype() == DType::kFloat32) return p;
  Tensor& m = masters_[i];
  if (!m.defined() || p.version() != published_version_[i]) {
    MemoryCategoryScope category(MemoryCategory::kOptimizerState);
    DeviceGuard guard(&p.context());
    m = p.to(DType::kFloat32).contiguous();  // a new tensor: p is not float32
  }
  return m;
}

Tensor Optimizer::float32_grad(const Tensor& g) {
  if (g.dtype() == DType::kFloat32) return g.contiguous();
  MemoryCategoryScope scratch(MemoryCategory::kOther);
  DeviceGuard guard(&g.context());
  return g.to(DType::kFloat32).contiguous();
}

void Optimizer::publish(size_t i) {
  Tensor& p = params_[i];
  if (p.dtype() == DType::kFloat32) return;
  DeviceGuard guard(&p.context());
  p.copy_(masters_[i]);  // rounds to nearest even; bumps p's version
  published_version_[i] = p.version();
}

Tensor Optimizer::master_weight(size_t i) const {
  DPE_CHECK(i < params_.size(), "optimizer: no parameter " << i << " of " << params_.size());
  const Tensor& p = params_[i];
  if (p.dtype() == DType::kFloat32) return p;
  if (masters_[i].defined() && p.version() == published_version_[i]) return masters_[i];
  return p.to(DType::kFloat32);
}

void Optimizer::load_master_weight(size_t i, const Tensor& v) {
  DPE_CHECK(i < params_.size(), "optimizer: no parameter " << i << " of " << params_.size());
  Tensor& p = params_[i];
  DPE_CHECK(v.defined() && v.dtype() == DType::kFloat32 && v.shape() == p.shape(),
            "optimizer: the value for parameter "
                << i << " is " << (v.defined() ? dtype_name(v.dtype()) : "undefined") << " "
                << (v.defined() ? v.shape() : Shape{}) << ", not float32 " << p.shape());
  if (p.dtype() == DType::kFloat32) {
    p.copy_(v);
    return;
  }
  MemoryCategoryScope category(MemoryCategory::kOptimizerState);
  DeviceGuard guard(&p.context());
  masters_[i] = v.to(p.device()).clone();  // the caller's tensor is not shared
  publish(i);
}

std::pair<size_t, std::string> parse_state_key(const std::string& who, const std::string& name,
                                               size_t count, const char* what) {
  const std::string prefix = "state.";
  const size_t dot = name.find('.', prefix.size());
  bool ok = name.rfind(prefix, 0) == 0 && dot != std::string::npos && dot > prefix.size() &&
            dot - prefix.size() <= 9 && dot + 1 < name.size();
  for (size_t k = prefix.size(); ok && k < dot; ++k) ok = name[k] >= '0' && name[k] <= '9';
  DPE_CHECK(ok, who << ": unexpected key '" << name << "' (expected state.<" << what
                    << " index>.<field>)");
  const size_t i = std::stoul(name.substr(prefix.size(), dot - prefix.size()));
  DPE_CHECK(i < count, who << ": '" << name << "' names " << what << " " << i << " of " << count);
  return {i, name.substr(dot + 1)};
}

std::pair<size_t, std::string> Optimizer::state_key(const char* who,
                                                    const std::string& name) const {
  return parse_state_key(std::string(who) + ".load_state_dict", name, params_.size());
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace dpe::optim
