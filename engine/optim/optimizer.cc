#include "engine/optim/optimizer.h"

#include "engine/core/error.h"

namespace dpe::optim {

Optimizer::Optimizer(std::vector<Tensor> params, float lr) : params_(std::move(params)), lr_(lr) {
  DPE_CHECK(!params_.empty(), "optimizer got an empty parameter list");
  DPE_CHECK(lr >= 0.0f, "Invalid learning rate: " << lr);
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
