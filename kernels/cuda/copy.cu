#include <cstring>

#include "kernels/cuda/copy.cuh"
#include "kernels/cuda/cuda_check.h"

namespace dpe::cuda {

namespace {

constexpr int kBlock = 256;

int grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// Sizes and strides travel by value in the kernel's parameters.
struct Layout {
  int rank;
  int64_t sizes[kMaxCopyDims];
  int64_t strides[kMaxCopyDims];
};

// Thread i writes dst[i]: its row-major index over `sizes` gives the source offset.
template <typename T>
__global__ void strided_copy_kernel(T* dst, const T* src, Layout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    int64_t rest = i, offset = 0;
    for (int d = layout.rank - 1; d >= 0; --d) {
      offset += (rest % layout.sizes[d]) * layout.strides[d];
      rest /= layout.sizes[d];
    }
    dst[i] = src[offset];
  }
}

template <typename T>
__global__ void fill_kernel(T* dst, T value, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = value;
  }
}

// Drops dimensions of size 1 and merges neighbours that are contiguous together, so a transpose
// of a matrix is 2 dimensions however the tensor was shaped, and a contiguous view is 1.
Layout merged_layout(int rank, const int64_t* sizes, const int64_t* strides) {
  Layout l{};
  for (int d = 0; d < rank; ++d) {
    if (sizes[d] == 1) continue;
    if (l.rank > 0 && l.strides[l.rank - 1] == strides[d] * sizes[d]) {
      l.sizes[l.rank - 1] *= sizes[d];
      l.strides[l.rank - 1] = strides[d];
      continue;
    }
    DPE_CHECK(l.rank < kMaxCopyDims, "strided_copy: a view of "
                                         << rank << " dimensions that cannot be merged to at most "
                                         << kMaxCopyDims);
    l.sizes[l.rank] = sizes[d];
    l.strides[l.rank] = strides[d];
    ++l.rank;
  }
  if (l.rank == 0) {  // a single element
    l.rank = 1;
    l.sizes[0] = 1;
    l.strides[0] = 1;
  }
  return l;
}

template <typename T>
void launch_strided_copy(cudaStream_t stream, void* dst, const void* src, const Layout& layout,
                         int64_t n) {
  strided_copy_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(dst),
                                                             static_cast<const T*>(src), layout, n);
}

template <typename T>
void launch_fill(cudaStream_t stream, void* dst, const void* value, int64_t n) {
  T v;
  std::memcpy(&v, value, sizeof(T));
  fill_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(dst), v, n);
}

}  // namespace

void strided_copy(void* stream, void* dst, const void* src, size_t elem_size, int rank,
                  const int64_t* sizes, const int64_t* strides) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) n *= sizes[d];
  if (n == 0) return;
  const Layout layout = merged_layout(rank, sizes, strides);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (elem_size) {
    case 1:
      launch_strided_copy<uint8_t>(s, dst, src, layout, n);
      break;
    case 2:
      launch_strided_copy<uint16_t>(s, dst, src, layout, n);
      break;
    case 4:
      launch_strided_copy<uint32_t>(s, dst, src, layout, n);
      break;
    case 8:
      launch_strided_copy<uint64_t>(s, dst, src, layout, n);
      break;
    default:
      DPE_THROW("strided_copy: elements of " << elem_size << " bytes are not supported");
  }
  DPE_CUDA_CHECK(cudaGetLastError());
}

void fill(void* stream, void* dst, const void* value, size_t elem_size, int64_t n) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  switch (elem_size) {
    case 1:
      launch_fill<uint8_t>(s, dst, value, n);
      break;
    case 2:
      launch_fill<uint16_t>(s, dst, value, n);
      break;
    case 4:
      launch_fill<uint32_t>(s, dst, value, n);
      break;
    case 8:
      launch_fill<uint64_t>(s, dst, value, n);
      break;
    default:
      DPE_THROW("fill: elements of " << elem_size << " bytes are not supported");
  }
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
