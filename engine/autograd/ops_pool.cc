// Max pooling: max_pool2d, NCHW or channels last, its workspace the maxima's indices.
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::checked_pool;
using detail::prepare_activation;

Tensor max_pool2d(const Tensor& x_in, int64_t kernel_size, int64_t stride, int64_t padding) {
  if (autocast_detail::widens(x_in)) {  // dpe's float32 entries: no 16-bit kernel
    const autocast_detail::Running running;
    return max_pool2d(autocast_detail::float32(x_in), kernel_size, stride, padding);
  }
  Tensor x = prepare_activation("max_pool2d", x_in, "input");
  const auto [p, out] = checked_pool(x, kernel_size, stride, padding);
  DeviceGuard guard(&x.context());
  const MemoryFormat format = prim::activation_format(x);
  Tensor y = Tensor::empty(out, DType::kFloat32, x.device(), format);
  Tensor workspace = Tensor::empty(out, DType::kInt64, x.device(), format);
  dispatch(prim::MaxPool2dForward{x, p, y, workspace});
  const Shape in_shape = x.shape();
  record("max_pool2d", {x_in}, {&y},
         [workspace, p, in_shape, format](const std::vector<Tensor>& g) {
           Tensor gx = Tensor::empty(in_shape, DType::kFloat32, g[0].device(), format);
           dispatch(prim::MaxPool2dBackward{g[0].contiguous(format), workspace, p, gx});
           return std::vector<Tensor>{gx};
         });
  return y;
}

}  // namespace dpe::ops
