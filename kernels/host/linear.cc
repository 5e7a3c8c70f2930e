#include "kernels/host/linear.h"

#include <algorithm>

#include "kernels/host/matmul.h"

namespace dpe::host {

namespace {
constexpr int64_t kGwRows = 1024;
}  // namespace

void linear_forward(HostContext& ctx, const LinearShape& s, const float* x, const float* w,
                    const float* b, float* y) {
  float beta = 0.0f;
  if (b != nullptr) {  // y starts as the broadcast bias and SGEMM accumulates onto it
    for (int64_t r = 0; r < s.batch; ++r) {
      for (int64_t j = 0; j < s.out; ++j) y[r * s.out + j] = b[j];
    }
    beta = 1.0f;
  }
  const bool t = s.w_transposed;
  sgemm(ctx, false, !t, s.batch, s.out, s.in, 1.0f, x, s.in, w, t ? s.out : s.in, beta, y, s.out);
}

void linear_backward(HostContext& ctx, const LinearShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb, float param_grad_scale) {
  const bool t = s.w_transposed;
  if (gx != nullptr) {  // gx[n, i] = gy[n, o] @ w[o, i]
    sgemm(ctx, false, t, s.batch, s.in, s.out, 1.0f, gy, s.out, w, t ? s.out : s.in, 0.0f, gx,
          s.in);
  }
  if (gw != nullptr && !t) {  // gw[o, i] = gy^T[o, n] @ x[n, i]
    // In blocks of kGwRows output rows where there are many (a language model's head): oneDNN
    // 2.6's SGEMM ran gpt-small's [32000, 1024]^T x [1024, 256] 5% slower in one piece.
    const int64_t block = s.out > 2 * kGwRows ? kGwRows : s.out;
    for (int64_t o0 = 0; o0 < s.out; o0 += block) {
      sgemm(ctx, true, false, std::min(block, s.out - o0), s.in, s.batch, param_grad_scale, gy + o0,
            s.out, x, s.in, 0.0f, gw + o0 * s.in, s.in);
    }
  }
  if (gw != nullptr && t) {  // gw[i, o] = x^T[i, n] @ gy[n, o]
    sgemm(ctx, true, false, s.in, s.out, s.batch, param_grad_scale, x, s.in, gy, s.out, 0.0f, gw,
          s.out);
  }
  if (gb != nullptr) {
    for (int64_t j = 0; j < s.out; ++j) gb[j] = 0.0f;
    for (int64_t r = 0; r < s.batch; ++r) {
#pragma omp simd
      for (int64_t j = 0; j < s.out; ++j) gb[j] += gy[r * s.out + j];
    }
    if (param_grad_scale != 1.0f) {
      for (int64_t j = 0; j < s.out; ++j) gb[j] *= param_grad_scale;
    }
  }
}

}  // namespace dpe::host
