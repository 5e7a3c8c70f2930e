#include "kernels/op_params.h"

#include "engine/core/error.h"

namespace dpe {

Conv2dShape conv2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh,
                         int64_t kw, int64_t stride, int64_t padding) {
  DPE_CHECK(stride >= 1 && padding >= 0,
            "conv2d: stride " << stride << " must be >= 1 and padding " << padding << " >= 0");
  const int64_t ho = (h + 2 * padding - kh) / stride + 1;
  const int64_t wo = (w + 2 * padding - kw) / stride + 1;
  DPE_CHECK(h + 2 * padding >= kh && w + 2 * padding >= kw,
            "conv2d: kernel " << kh << "x" << kw << " is larger than the padded input " << h << "x"
                              << w << " (padding " << padding << ")");
  return {n, c, h, w, o, kh, kw, stride, padding, ho, wo};
}

Pool2dShape max_pool2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kernel,
                             int64_t stride, int64_t padding) {
  DPE_CHECK(kernel >= 1 && stride >= 1,
            "max_pool2d: kernel " << kernel << " and stride " << stride << " must be >= 1");
  DPE_CHECK(padding >= 0 && padding * 2 <= kernel,
            "max_pool2d: pad should be at most half of effective kernel size, but got pad = "
                << padding << " and kernel_size = " << kernel);
  // Checked before dividing: C++ division rounds a negative (h + 2p - kernel) towards zero, which
  // would give a 1x1 output for a window wider than the padded input.
  DPE_CHECK(h + 2 * padding >= kernel && w + 2 * padding >= kernel,
            "max_pool2d: output size is too small for input "
                << h << "x" << w << " (kernel " << kernel << ", padding " << padding << ")");
  const int64_t ho = (h + 2 * padding - kernel) / stride + 1;
  const int64_t wo = (w + 2 * padding - kernel) / stride + 1;
  return {n, c, h, w, kernel, stride, padding, ho, wo};
}

}  // namespace dpe
