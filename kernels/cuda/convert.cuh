// Element-type conversion on CUDA, the twin of kernels/host/convert.h: float32 to and from
// bfloat16 and float16 with round-to-nearest-even (cuda_bf16.h's and cuda_fp16.h's _rn
// intrinsics), a NaN written as the host's canonical one, and any other pair through float32.
// The launcher takes an explicit stream (a cudaStream_t as void*) and returns without waiting.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

namespace dpe::cuda {

// Converts n contiguous elements at src (of src_dtype) into dst (of dst_dtype), both in the
// memory of the current device.
void convert(void* stream, void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

}  // namespace dpe::cuda
