#include "engine/optim/gradient_scale.h"

#include "engine/backend/dispatch.h"
#include "engine/backend/prims/views.h"
#include "engine/device/device_guard.h"

namespace dpe::optim {

void scale_gradient_(Tensor& g, float s) {
  DeviceGuard guard(&g.context());
  if (g.is_contiguous() || g.is_contiguous(MemoryFormat::kChannelsLast)) {
    // Elementwise over the dense buffer, whatever its layout (a convolution's channels-last
    // gradient): copy_ would refuse to write one back.
    Tensor dense = prim::dense_view(g);
    dispatch(prim::Scale{dense, s, dense});
  } else {
    Tensor scaled = Tensor::empty(g.shape(), DType::kFloat32, g.device());
    dispatch(prim::Scale{g.contiguous(), s, scaled});
    g.copy_(scaled);
  }
  g.bump_version();
}

}  // namespace dpe::optim
