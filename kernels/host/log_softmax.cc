#include "kernels/host/log_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/prepared_primitive.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

namespace {

using dnnl::memory;

enum : int64_t { kLogSoftmaxForward = 0x6c736d01 };

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

// gx = gy - exp(y) * sum(gy), a row at a time with the exponentials in registers. oneDNN 2.6's
// own log-softmax backward has no JIT on AVX2 machines: its reference loop took 29% of a
// gpt-small step (0.64 s of 2.2 at batch 8).
void log_softmax_backward(HostContext&, const float* y, const float* gy, float* gx, int64_t rows,
                          int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* g = gy + r * cols;
    float* out = gx + r * cols;
    float sum = 0.0f;
    int nans = 0;
#pragma omp simd reduction(+ : sum, nans)
    for (int64_t j = 0; j < cols; ++j) {
      sum += g[j];
      nans += yr[j] != yr[j];
    }
    if (nans > 0) {  // torch's log-softmax of the row is NaN throughout (oneDNN's is not)
      std::fill(out, out + cols, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const vec::F s = vec::splat(sum);
    for (int64_t j = 0; j < cols; j += vec::kLanes) {
      const int64_t n = std::min(vec::kLanes, cols - j);
      vec::store_n(out + j,
                   vec::load_n(g + j, n, 0.0f) - vec::exp(vec::load_n(yr + j, n, 0.0f)) * s, n);
    }
  }
}

// Per row: its maximum m, then sum exp(x - m) with the exponentials in registers (the row again,
// from the cache) while the next row is fetched, lse = m + log(sum): x is read from memory once
// and nothing of its size is written.
void cross_entropy_forward(HostContext&, const float* x, const int64_t* target, float* out,
                           float* lse, int64_t rows, int64_t cols, int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    // A row with a NaN or +inf, or of -inf, gives NaN, as torch's log_softmax does.
    const float m = vec::max_of(xr, cols);
    const float* next = r + 1 < rows ? xr + cols : nullptr;
    lse[r] = std::isfinite(m) ? m + std::log(vec::exp_sum(xr, cols, m, next))
                              : std::numeric_limits<float>::quiet_NaN();
  }
  double total = 0.0;
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] != ignore_index) total += x[r * cols + target[r]] - lse[r];
  }
  out[0] = static_cast<float>(-total / static_cast<double>(count));  // NaN when nothing counts
}

// log_softmax_backward's gy - p * sum(gy) with nll_loss's gy (s at the target, else 0), in one
// pass over x that writes each gradient once: -p * s, then s more at the target.
void cross_entropy_backward(HostContext&, const float* x, const int64_t* target, const float* lse,
                            const float* gout, float* gx, int64_t rows, int64_t cols,
                            int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) return;
  const float s = -gout[0] / static_cast<float>(count);
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    float* o = gx + r * cols;
    if (std::isnan(lse[r])) {  // a row with a NaN or an infinity: NaN, as torch's
      std::fill(o, o + cols, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (target[r] == ignore_index) {
      std::fill(o, o + cols, 0.0f);
      continue;
    }
    vec::exp_scale(x + r * cols, cols, lse[r], -s, o);
    o[target[r]] += s;
  }
}

}  // namespace dpe::host
