#include "kernels/host/copy.h"

#include <algorithm>
#include <cstring>

namespace dpe::host {

namespace {

template <typename T>
void copy_dim(T*& dst, const T* src, int dim, int rank, const int64_t* sizes,
              const int64_t* strides) {
  if (dim == rank - 1) {
    const int64_t n = sizes[dim], s = strides[dim];
    if (s == 1) {
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(T));
      dst += n;
    } else {
      for (int64_t i = 0; i < n; ++i) *dst++ = src[i * s];
    }
    return;
  }
  for (int64_t i = 0; i < sizes[dim]; ++i) {
    copy_dim(dst, src + i * strides[dim], dim + 1, rank, sizes, strides);
  }
}

template <typename T>
void strided_copy_typed(void* dst, const void* src, int rank, const int64_t* sizes,
                        const int64_t* strides) {
  T* out = static_cast<T*>(dst);
  const T* in = static_cast<const T*>(src);
  if (rank == 0) {
    *out = *in;
    return;
  }
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] == 0) return;
  }
  copy_dim(out, in, 0, rank, sizes, strides);
}

}  // namespace

void strided_copy(void* dst, const void* src, size_t elem_size, int rank, const int64_t* sizes,
                  const int64_t* strides) {
  if (elem_size == 4) {
    strided_copy_typed<uint32_t>(dst, src, rank, sizes, strides);
  } else {
    strided_copy_typed<uint64_t>(dst, src, rank, sizes, strides);
  }
}

void fill(float* out, int64_t n, float value) { std::fill(out, out + n, value); }
void fill(int64_t* out, int64_t n, int64_t value) { std::fill(out, out + n, value); }

}  // namespace dpe::host
