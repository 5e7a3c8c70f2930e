// Memory layout kernels on CUDA, the twins of kernels/host/copy.h: a strided view gathered into
// contiguous memory on the device (so Tensor::contiguous() of a view never goes through the
// host), and fills with an element of any width (float32, int64). Launchers take an explicit
// stream (a cudaStream_t as void*, so callers need no CUDA headers) and return without waiting.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpe::cuda {

// The most dimensions strided_copy takes (after merging dimensions that are contiguous together).
constexpr int kMaxCopyDims = 16;

// Copies the view of `src` (sizes and strides in elements of elem_size bytes: 1, 2, 4 or 8) into
// contiguous `dst`, both in the memory of the current device. Throws dpe::Error for another
// element size or more than kMaxCopyDims dimensions that cannot be merged.
void strided_copy(void* stream, void* dst, const void* src, size_t elem_size, int rank,
                  const int64_t* sizes, const int64_t* strides);

// Sets n elements of elem_size bytes (1, 2, 4 or 8) at dst to the bytes at `value` (host memory).
void fill(void* stream, void* dst, const void* value, size_t elem_size, int64_t n);

}  // namespace dpe::cuda
