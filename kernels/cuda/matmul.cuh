// Matrix product on CUDA: c[m, n] = a[m, k] @ b[k, n], row-major, with cuBLAS SGEMM (FP32 math).
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

void matmul(CudaContext& ctx, const float* a, const float* b, float* c, int64_t m, int64_t k,
            int64_t n);

}  // namespace dpe::cuda
