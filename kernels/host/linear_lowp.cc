#include "kernels/host/linear_lowp.h"

#include <vector>

#include "kernels/host/convert.h"
#include "kernels/host/lowp_gemm.h"

namespace dpe::host {

namespace {

LowpGemm gemm(DType dt, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
              int64_t ldb, int64_t ldc, float alpha = 1.0f) {
  LowpGemm g;
  g.in = g.out = dt;
  g.trans_a = trans_a;
  g.trans_b = trans_b;
  g.m = m;
  g.n = n;
  g.k = k;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.alpha = alpha;
  return g;
}

// gb [o] = scale * the sum of gy's rows, accumulated in float32.
void bias_gradient(DType dt, const LinearShape& s, const void* gy, void* gb, float scale) {
  std::vector<float> row(static_cast<size_t>(s.out)), sum(static_cast<size_t>(s.out), 0.0f);
  const size_t elem = dtype_size(dt);
  for (int64_t r = 0; r < s.batch; ++r) {
    convert(row.data(), DType::kFloat32, static_cast<const char*>(gy) + r * s.out * elem, dt,
            s.out);
    for (int64_t j = 0; j < s.out; ++j) sum[j] += row[j];
  }
  for (float& v : sum) v *= scale;
  convert(gb, dt, sum.data(), DType::kFloat32, s.out);
}

}  // namespace

void linear_forward_lowp(HostContext& ctx, DType dt, const LinearShape& s, const void* x,
                         const void* w, const void* b, void* y) {
  // w [o, i] read transposed, or w [i, o] as it is.
  lowp_gemm(ctx,
            gemm(dt, false, !s.w_transposed, s.batch, s.out, s.in, s.in,
                 s.w_transposed ? s.out : s.in, s.out),
            x, w, b, y);
}

void linear_backward_lowp(HostContext& ctx, DType dt, const LinearShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb,
                          float param_grad_scale) {
  if (gx != nullptr) {  // gx [n, i] = gy [n, o] @ w [o, i]
    lowp_gemm(ctx,
              gemm(dt, false, s.w_transposed, s.batch, s.in, s.out, s.out,
                   s.w_transposed ? s.out : s.in, s.in),
              gy, w, nullptr, gx);
  }
  if (gw != nullptr) {
    if (s.w_transposed) {  // gw [i, o] = x^T [i, n] @ gy [n, o]
      lowp_gemm(ctx,
                gemm(dt, true, false, s.in, s.out, s.batch, s.in, s.out, s.out, param_grad_scale),
                x, gy, nullptr, gw);
    } else {  // gw [o, i] = gy^T [o, n] @ x [n, i]
      lowp_gemm(ctx,
                gemm(dt, true, false, s.out, s.in, s.batch, s.out, s.in, s.in, param_grad_scale),
                gy, x, nullptr, gw);
    }
  }
  if (gb != nullptr) bias_gradient(dt, s, gy, gb, param_grad_scale);
}

void matmul_lowp(HostContext& ctx, DType dt, const void* a, const void* b, void* c, int64_t m,
                 int64_t k, int64_t n) {
  lowp_gemm(ctx, gemm(dt, false, false, m, n, k, k, n, n), a, b, nullptr, c);
}

void bmm_lowp(HostContext& ctx, DType dt, const BmmShape& s, const void* a, const void* b,
              void* c) {
  const size_t elem = dtype_size(dt);
  const int64_t a_size = s.m * s.k, b_size = s.k * s.n, c_size = s.m * s.n;
  const LowpGemm g = gemm(dt, s.trans_a, s.trans_b, s.m, s.n, s.k, s.trans_a ? s.m : s.k,
                          s.trans_b ? s.k : s.n, s.n);
  for (int64_t i = 0; i < s.batch; ++i) {
    lowp_gemm(ctx, g, static_cast<const char*>(a) + i * a_size * elem,
              static_cast<const char*>(b) + i * b_size * elem, nullptr,
              static_cast<char*>(c) + i * c_size * elem);
  }
}

}  // namespace dpe::host
