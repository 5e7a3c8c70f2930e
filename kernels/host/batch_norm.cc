#include "kernels/host/batch_norm.h"

#include <cmath>

#include "kernels/host/batch_norm_loops.h"

namespace dpe::host {

using bn::affine_rows;
using bn::apply_planes;
using bn::apply_rows;
using bn::backward_planes;
using bn::backward_rows;
using bn::elemt_planes;
using bn::elemt_rows;
using bn::forward_train;
using bn::RowCoefficients;
using bn::rows_if_single;
using bn::scratch_for;

void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& shape, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var) {
  forward_train<false, false>(ctx, shape, x, nullptr, gamma, beta, eps, y, mean, var);
}

void batch_norm_forward_eval(HostContext& ctx, const BatchNormShape& shape, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y) {
  const BatchNormShape sh = rows_if_single(shape);
  auto& scratch = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) scratch.a[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, scratch.a.data(), gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, 0, sh.n * sh.c, x, mean, scratch.a.data(), gamma, beta, y);
}

void batch_norm_backward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    backward_rows<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  backward_planes<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_elemt(HostContext& ctx, const BatchNormShape& shape, const float* x,
                      const float* mean, const float* invstd, const float* gamma, const float* beta,
                      float* y) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, invstd, gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, 0, sh.n * sh.c, x, mean, invstd, gamma, beta, y);
}

void batch_norm_backward_elemt(HostContext&, const BatchNormShape& shape, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    elemt_rows<false>(sh, k, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx);
    return;
  }
  elemt_planes<false>(sh, 0, sh.n * sh.c, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, nullptr,
                      gx);
}

}  // namespace dpe::host
