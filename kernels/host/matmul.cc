#include "kernels/host/matmul.h"

#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>

#include "engine/core/error.h"

namespace dpe::host {

void sgemm(HostContext&, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // oneDNN leaves c untouched; the product of empty matrices is zero
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    }
    return;
  }
  const dnnl::status st = dnnl::sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a,
                                      std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1), beta,
                                      c, std::max<int64_t>(ldc, 1));
  DPE_CHECK(st == dnnl::status::success, "sgemm: oneDNN failed with status "
                                             << static_cast<int>(st) << " for m=" << m << " n=" << n
                                             << " k=" << k);
}

void matmul(HostContext& ctx, const float* a, const float* b, float* c, int64_t m, int64_t k,
            int64_t n) {
  sgemm(ctx, false, false, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n);
}

}  // namespace dpe::host
