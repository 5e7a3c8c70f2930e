// Element-type conversion on the host (Tensor::to(dtype), copy_ between dtypes, autocast's casts):
// float32 to and from bfloat16 and float16 with round-to-nearest-even, and any other pair of
// dpe's dtypes through float32 (int64 to a floating type converts the value, as PyTorch's).
//
// Threading contract: a pure function of its arguments; safe from any thread. Parallel over the
// OpenMP team of the calling thread when n is large.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

namespace dpe::host {

// Converts n contiguous elements at src (of src_dtype) into dst (of dst_dtype). The two buffers
// do not overlap unless they are the same and the dtypes are too.
void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n);

}  // namespace dpe::host
