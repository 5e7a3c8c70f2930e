#include "engine/optim/clip_grad.h"

#include <cmath>
#include <utility>

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/memory_category.h"
#include "engine/optim/gradient_scale.h"

namespace dpe::optim {

float clip_grad_norm_(const std::vector<Tensor>& params, float max_norm) {
  DPE_CHECK(max_norm >= 0.0f, "clip_grad_norm_: max_norm must be >= 0, got " << max_norm);
  // The squares are scratch, not optimizer state, whatever the caller's scope says: the step's
  // model states (memory_stats.h) must not count a gradient-sized temporary.
  MemoryCategoryScope scratch(MemoryCategory::kOther);
  // One running sum of squares per device, kept on that device so the host reads each once.
  std::vector<std::pair<Device, Tensor>> partial;
  for (const Tensor& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    DeviceGuard guard(&g.context());
    const Tensor gc = g.contiguous();
    Tensor s = Tensor::empty(Shape{}, DType::kFloat32, gc.device());
    if (supports<prim::SumSquares>(gc.device())) {
      dispatch(prim::SumSquares{gc, s});
    } else {
      Tensor sq = Tensor::empty(gc.shape(), DType::kFloat32, gc.device());
      dispatch(prim::Mul{gc, gc, sq});
      dispatch(prim::SumAll{sq, s});
    }
    auto it = partial.begin();
    while (it != partial.end() && it->first != g.device()) ++it;
    if (it == partial.end()) {
      partial.emplace_back(g.device(), s);
    } else {
      dispatch(prim::Add{it->second, s, 1.0f, it->second});
    }
  }
  double total_sq = 0.0;
  for (const auto& [device, sum] : partial) total_sq += static_cast<double>(sum.item());
  const double total = std::sqrt(total_sq);
  const double coef = static_cast<double>(max_norm) / (total + 1e-6);
  if (coef < 1.0) {
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (g.defined()) scale_gradient_(g, static_cast<float>(coef));
    }
  }
  return static_cast<float>(total);
}

}  // namespace dpe::optim
