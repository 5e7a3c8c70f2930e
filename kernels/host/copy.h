// Host copies: strided gather into a contiguous buffer, and fills. Plain loops; the layout work
// here is memory-bound and small next to matmul and convolution.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpe::host {

// Copies the strided view (sizes, strides in elements, starting at src) into contiguous dst.
void strided_copy(void* dst, const void* src, size_t elem_size, int rank, const int64_t* sizes,
                  const int64_t* strides);
void fill(float* out, int64_t n, float value);
void fill(int64_t* out, int64_t n, int64_t value);

}  // namespace dpe::host
