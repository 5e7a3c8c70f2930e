// Matrix products in bfloat16 and float16 on the host, with float32 accumulation: oneDNN's matmul
// primitive where it runs on AMX tiles (amx_bf16). On every other CPU (float16 in oneDNN 2.6;
// AVX512-BF16, whose oneDNN 2.6 kernel measured slower than the float32 GEMM; no AVX-512) the
// same product is computed in float32 on converted copies and rounded once to the output dtype:
// the same result as the native path within the output's rounding.
//
// Threading contract: as every host kernel (kernels/host/host_context.h).
#pragma once

#include <cstdint>
#include <string>

#include "engine/core/dtype.h"
#include "kernels/host/host_context.h"

namespace dpe::host {

// Row-major c[m, n] = alpha * op(a)[m, k] @ op(b)[k, n] (+ bias[n]), op = transpose when trans_*
// is true; a, b and bias are of dtype `in` (bfloat16 or float16), c of dtype `out` (in, or
// float32 for a gradient accumulated in float32). lda, ldb, ldc are the row strides as stored.
struct LowpGemm {
  DType in = DType::kBFloat16;
  DType out = DType::kBFloat16;
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  float alpha = 1.0f;
};
void lowp_gemm(HostContext& ctx, const LowpGemm& g, const void* a, const void* b, const void* bias,
               void* c);

// Whether g's shape is worth the matrix unit's tiles (at least 32 rows of op(a) and a depth k of
// at least 32); a smaller product is emulated even where the CPU has AMX.
bool lowp_gemm_tiles_pay(const LowpGemm& g);

// "AMX" or "emulated in float32": what lowp_gemm runs on for `dtype` on this CPU (what the
// tools print beside a low-precision row).
std::string lowp_gemm_engine(DType dtype);

}  // namespace dpe::host
