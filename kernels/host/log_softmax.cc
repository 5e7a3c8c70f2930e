#include "kernels/host/log_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/host/exp_rows.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;

enum : int64_t {
  kLogSoftmaxForward = 0x6c736d01,
  kLogSoftmaxBackward = 0x6c736d02,
  kCrossEntropy = 0x6c736d03
};

memory::desc rows_md(int64_t rows, int64_t cols) {
  return memory::desc({rows, cols}, memory::data_type::f32, memory::format_tag::ab);
}

// oneDNN's JIT log-softmax (vectorised exp and log): the language models' [B*T, V] rows are the
// largest elementwise work of their step, which scalar libm calls made a fifth of it.
dnnl::logsoftmax_forward::primitive_desc forward_pd(HostContext& ctx, int64_t rows, int64_t cols) {
  return dnnl::logsoftmax_forward::primitive_desc(
      dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_training, rows_md(rows, cols), 1),
      user_scratchpad_attr(), ctx.engine());
}

}  // namespace

void log_softmax_forward(HostContext& ctx, const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  auto& e = ctx.cached<PreparedPrimitive>(CacheKey(kLogSoftmaxForward, {rows, cols}), [&] {
    auto e = std::make_unique<PreparedPrimitive>();
    const auto pd = forward_pd(ctx, rows, cols);
    e->bind(ctx, DNNL_ARG_SRC, rows_md(rows, cols));
    e->bind(ctx, DNNL_ARG_DST, rows_md(rows, cols));
    e->finish(ctx, dnnl::logsoftmax_forward(pd), pd);
    return e;
  });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DST, y);
  e.run(ctx);
}

// gx = gy - exp(y) * sum(gy), a block of rows at a time: oneDNN's JIT exp, then one vectorised
// pass. oneDNN 2.6's own log-softmax backward has no JIT on AVX2 machines: its reference loop
// took 29% of a gpt-small step (0.64 s of 2.2 at batch 8, where this takes a twentieth of that).
void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  std::vector<uint8_t> nan_row(static_cast<size_t>(rows), 0);
  ExpRows::get(ctx, kLogSoftmaxBackward, rows, cols)
      .for_each_block(
          ctx,
          [&](int64_t r, float* e) {
            const float* yr = y + r * cols;
            int nans = 0;
#pragma omp simd reduction(+ : nans)
            for (int64_t j = 0; j < cols; ++j) {
              e[j] = yr[j];
              nans += yr[j] != yr[j];
            }
            nan_row[r] = nans > 0;
          },
          [&](int64_t r, const float* p) {
            const float* g = gy + r * cols;
            float* out = gx + r * cols;
            if (nan_row[r]) {  // oneDNN's exp turns a NaN into a number; torch's gradient is NaN
              std::fill(out, out + cols, std::numeric_limits<float>::quiet_NaN());
              return;
            }
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < cols; ++j) sum += g[j];
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) out[j] = g[j] - p[j] * sum;
          });
}

// Per row: its maximum m, then exp(x - m) in the cached scratch, lse = m + log(sum): x is read from
// memory once, and nothing of the row's size is written.
void cross_entropy_forward(HostContext& ctx, const float* x, const int64_t* target, float* out,
                           float* lse, int64_t rows, int64_t cols, int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  ExpRows::get(ctx, kCrossEntropy, rows, cols)
      .for_each_block(
          ctx,
          [&](int64_t r, float* e) {
            const float* xr = x + r * cols;
            // A row with a NaN or +inf, or of -inf, gives NaN, as torch's log_softmax does.
            const float m = max_of(xr, cols);
            lse[r] = m;  // the row's max until its sum is known
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) e[j] = xr[j] - m;
          },
          [&](int64_t r, const float* p) {
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < cols; ++j) sum += p[j];
            lse[r] = std::isfinite(lse[r]) ? lse[r] + std::log(sum)
                                           : std::numeric_limits<float>::quiet_NaN();
          });
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] != ignore_index) total += x[r * cols + target[r]] - lse[r];
  }
  out[0] = static_cast<float>(-total / static_cast<double>(count));  // NaN when nothing counts
}

void cross_entropy_backward(HostContext& ctx, const float* x, const int64_t* target,
                            const float* lse, const float* gout, float* gx, int64_t rows,
                            int64_t cols, int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) return;
  const float s = -gout[0] / static_cast<float>(count);
  ExpRows::get(ctx, kCrossEntropy, rows, cols)
      .for_each_block(
          ctx,
          [&](int64_t r, float* e) {
            const float* xr = x + r * cols;
            const float l = lse[r];
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) e[j] = xr[j] - l;
          },
          [&](int64_t r, const float* p) {
            // log_softmax_backward's gy - p * sum(gy), with nll_loss's gy: s at the target, else 0.
            const bool counts = target[r] != ignore_index;
            const float g = counts ? s : 0.0f;
            float* o = gx + r * cols;
            if (std::isnan(lse[r])) {  // a row with a NaN or an infinity: NaN, as torch's
              std::fill(o, o + cols, std::numeric_limits<float>::quiet_NaN());
              return;
            }
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) o[j] = 0.0f - p[j] * g;
            if (counts) o[target[r]] = g - p[target[r]] * g;
          });
}

}  // namespace dpe::host
