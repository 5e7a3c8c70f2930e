#include "kernels/host/convert.h"

#include <cstring>
#include <type_traits>

#include "engine/core/error.h"

namespace dpe::host {

namespace {

constexpr int64_t kParallelGrain = 1 << 16;  // below this a conversion is cheaper than a team

template <class T>
float load(const T& v) {
  return to_float(v);
}
template <>
float load<int64_t>(const int64_t& v) {
  return static_cast<float>(v);
}

// A small conversion stays out of OpenMP altogether: `parallel if (false)` still opens a region
// of one thread, about a microsecond, which a product converting row by row paid per row.
template <class To, class From>
void convert_as(To* dst, const From* src, int64_t n) {
  if (n < kParallelGrain) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = from_float<To>(load<From>(src[i]));
    return;
  }
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] = from_float<To>(load<From>(src[i]));
}

// int64 to int64 and float32 to int64 keep their own paths: an int64 above 2^24 would lose bits
// through float32.
template <class From>
void convert_from(void* dst, DType dst_dtype, const From* src, int64_t n) {
  switch (dst_dtype) {
    case DType::kFloat32:
      return convert_as(static_cast<float*>(dst), src, n);
    case DType::kBFloat16:
      return convert_as(static_cast<BFloat16*>(dst), src, n);
    case DType::kFloat16:
      return convert_as(static_cast<Float16*>(dst), src, n);
    case DType::kInt64: {
      int64_t* out = static_cast<int64_t*>(dst);
#pragma omp parallel for simd if (n >= kParallelGrain)
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<From, int64_t>) {
          out[i] = src[i];
        } else {
          out[i] = static_cast<int64_t>(load<From>(src[i]));
        }
      }
      return;
    }
  }
}

}  // namespace

void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) {
  if (n <= 0) return;
  if (dst_dtype == src_dtype) {
    if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype));
    return;
  }
  switch (src_dtype) {
    case DType::kFloat32:
      return convert_from(dst, dst_dtype, static_cast<const float*>(src), n);
    case DType::kInt64:
      return convert_from(dst, dst_dtype, static_cast<const int64_t*>(src), n);
    case DType::kBFloat16:
      return convert_from(dst, dst_dtype, static_cast<const BFloat16*>(src), n);
    case DType::kFloat16:
      return convert_from(dst, dst_dtype, static_cast<const Float16*>(src), n);
  }
  DPE_THROW("convert: unknown source dtype");
}

}  // namespace dpe::host
