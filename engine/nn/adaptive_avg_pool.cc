#include "engine/nn/adaptive_avg_pool.h"

#include "engine/autograd/ops.h"
#include "engine/core/error.h"

namespace dpe::nn {

AdaptiveAvgPool2d::AdaptiveAvgPool2d(int64_t output_h, int64_t output_w) {
  DPE_CHECK(output_h == 1 && output_w == 1,
            "AdaptiveAvgPool2d: only output_size=(1, 1) is supported, got (" << output_h << ", "
                                                                             << output_w << ")");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  DPE_CHECK((x.dim() == 3 || x.dim() == 4) && x.dtype() == DType::kFloat32,
            repr() << ": expected a float32 [N, C, H, W] or [C, H, W] input, got "
                   << dtype_name(x.dtype()) << " " << x.shape() << " on " << x.device());
  const int64_t hw = x.size(-2) * x.size(-1);
  DPE_CHECK(hw > 0, repr() << ": input " << x.shape() << " has an empty plane");
  // A 1x1 plane (ResNet-tiny's last stage) is its own mean: x * 1, a new tensor as torch's, where
  // the product below was a [planes, 1] x [1, 1] matmul that took 0.1 ms each way at batch 256.
  Shape out = x.shape();
  out.at(-2) = out.at(-1) = 1;
  if (hw == 1) return ops::mul_scalar(x, 1.0f);
  // Each plane is a row of [planes, H*W]; its product with a column of 1/(H*W) is its mean, and
  // matmul's backward spreads the gradient evenly over the plane, as the pool's does.
  const int64_t planes = x.numel() / hw;
  const Tensor weights = Tensor::full({hw, 1}, 1.0f / static_cast<float>(hw), x.device());
  const Tensor means = ops::matmul(ops::reshape(x, Shape{planes, hw}), weights);
  return ops::reshape(means, out);
}

}  // namespace dpe::nn
