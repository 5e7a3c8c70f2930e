// Dense matrix product on the host through oneDNN's SGEMM: c[m, n] = a[m, k] @ b[k, n].
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

void matmul(HostContext& ctx, const float* a, const float* b, float* c, int64_t m, int64_t k,
            int64_t n);

// Row-major SGEMM, c = alpha * op(a) @ op(b) + beta * c, op = transpose when trans_* is true.
// The one place that calls dnnl_sgemm, which checks its status.
void sgemm(HostContext& ctx, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
           float* c, int64_t ldc);

}  // namespace dpe::host
