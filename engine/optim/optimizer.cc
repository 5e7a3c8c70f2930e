#include "engine/optim/optimizer.h"

#include "engine/core/error.h"

namespace dpe::optim {

Optimizer::Optimizer(std::vector<Tensor> params, float lr) : params_(std::move(params)), lr_(lr) {
  DPE_CHECK(!params_.empty(), "optimizer got an empty parameter list");
  DPE_CHECK(lr >= 0.0f, "Invalid learning rate: " << lr);
}

void Optimizer::zero_grad() {
  for (Tensor& p : params_) p.set_grad(Tensor());
}

}  // namespace dpe::optim
