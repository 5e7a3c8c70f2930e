#include "engine/optim/gradient_scale.h"

#include "engine/backend/dispatch.h"
#include "engine/device/device_guard.h"

namespace dpe::optim {

void scale_gradient_(Tensor& g, float s) {
  DeviceGuard guard(&g.context());
  if (g.is_contiguous()) {
    dispatch(prim::Scale{g, s, g});
  } else {
    Tensor scaled = Tensor::empty(g.shape(), DType::kFloat32, g.device());
    dispatch(prim::Scale{g.contiguous(), s, scaled});
    g.copy_(scaled);
  }
  g.bump_version();
}

}  // namespace dpe::optim
