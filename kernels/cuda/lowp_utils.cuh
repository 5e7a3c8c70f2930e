// Device-side helpers of dpe's 16-bit CUDA kernels: a bfloat16 or float16 element read as float
// and written with one round-to-nearest-even (cuda_bf16.h's and cuda_fp16.h's _rn intrinsics), a
// NaN as the canonical quiet one (0x7fc0, 0x7e00, as convert.cu writes), and the launchers'
// switch from a DType to the element type. Included only by .cu files; every function is inline.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "engine/core/dtype.h"
#include "engine/core/error.h"

namespace dpe::cuda {

__device__ inline float lowp_to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float lowp_to_float(__half v) { return __half2float(v); }

template <typename T>
__device__ T lowp_from_float(float v);
template <>
__device__ inline __nv_bfloat16 lowp_from_float<__nv_bfloat16>(float v) {
  return isnan(v) ? __ushort_as_bfloat16(0x7fc0) : __float2bfloat16_rn(v);
}
template <>
__device__ inline __half lowp_from_float<__half>(float v) {
  return isnan(v) ? __ushort_as_half(0x7e00) : __float2half_rn(v);
}

// The element type of a 16-bit dtype, as a value a generic lambda can take.
template <typename T>
struct LowpType {
  using type = T;
};

// Calls f(LowpType<T>{}) with T the element type of dt (__nv_bfloat16 or __half); throws naming
// `op` for any other dtype. The one switch on the dtype, at the launcher's entry.
template <class F>
void with_lowp_type(DType dt, const char* op, F&& f) {
  switch (dt) {
    case DType::kBFloat16:
      return f(LowpType<__nv_bfloat16>{});
    case DType::kFloat16:
      return f(LowpType<__half>{});
    case DType::kFloat32:
    case DType::kInt64:
      break;
  }
  DPE_THROW(op << ": no 16-bit CUDA kernel for " << dtype_name(dt));
}

// The bits of the dtype's +infinity: a 16-bit word is a value > 0 exactly when it is neither 0 nor
// above them (a set sign bit or a NaN is above them).
inline uint16_t lowp_infinity_bits(DType dt, const char* op) {
  switch (dt) {
    case DType::kBFloat16:
      return 0x7f80;
    case DType::kFloat16:
      return 0x7c00;
    case DType::kFloat32:
    case DType::kInt64:
      break;
  }
  DPE_THROW(op << ": no 16-bit CUDA kernel for " << dtype_name(dt));
}

}  // namespace dpe::cuda
