#include "kernels/host/copy.h"

#include <algorithm>
#include <cstring>

#include "engine/core/error.h"

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
  switch (elem_size) {
    case 1:
      strided_copy_typed<uint8_t>(dst, src, rank, sizes, strides);
      break;
    case 2:
      strided_copy_typed<uint16_t>(dst, src, rank, sizes, strides);
      break;
    case 4:
      strided_copy_typed<uint32_t>(dst, src, rank, sizes, strides);
      break;
    case 8:
      strided_copy_typed<uint64_t>(dst, src, rank, sizes, strides);
      break;
    default:
      DPE_THROW("strided_copy: elements of " << elem_size << " bytes are not supported");
  }
}

namespace {
template <typename T>
void fill_typed(void* dst, const void* value, int64_t n) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  std::fill(static_cast<T*>(dst), static_cast<T*>(dst) + n, v);
}
}  // namespace

void fill(void* dst, const void* value, size_t elem_size, int64_t n) {
  switch (elem_size) {
    case 1:
      fill_typed<uint8_t>(dst, value, n);
      break;
    case 2:
      fill_typed<uint16_t>(dst, value, n);
      break;
    case 4:
      fill_typed<uint32_t>(dst, value, n);
      break;
    case 8:
      fill_typed<uint64_t>(dst, value, n);
      break;
    default:
      DPE_THROW("fill: elements of " << elem_size << " bytes are not supported");
  }
}

}  // namespace dpe::host
