#include "engine/autograd/autocast_ops.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"

namespace dpe::autocast_detail {

namespace {

Tensor cast(const Tensor& t, DType dtype) {
  if (!t.defined() || !is_floating_point(t.dtype()) || t.dtype() == dtype) return t;
  // PyTorch caches the casts of leaves that require grad (parameters), with grad mode on.
  const bool cacheable = t.is_leaf() && t.requires_grad() && grad_enabled();
  if (cacheable) {
    if (Tensor hit = cached_cast(t, dtype); hit.defined()) return hit;
  }
  Tensor out = ops::to(t, dtype);
  if (cacheable) cache_cast(t, dtype, out);
  return out;
}

}  // namespace

Tensor lower(const Tensor& t) {
  return t.defined() ? cast(t, autocast_state(t.device().type()).dtype) : t;
}

Tensor float32(const Tensor& t) { return cast(t, DType::kFloat32); }

}  // namespace dpe::autocast_detail
