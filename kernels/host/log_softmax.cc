#include "kernels/host/log_softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

#include "engine/core/error.h"
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

namespace {

// exp over blocks of whole rows in a scratch the caches hold (256 KiB: the L2's share): oneDNN's
// JIT exp, one primitive for the full blocks and one for the shorter last block.
struct ExpBlocks : HostContext::CacheEntry {
  int64_t rows_per_block = 1;
  std::unique_ptr<PreparedPrimitive> exp, exp_tail;
  std::vector<float> e;
};

std::unique_ptr<PreparedPrimitive> exp_primitive(HostContext& ctx, int64_t n) {
  auto e = std::make_unique<PreparedPrimitive>();
  const memory::desc md({n}, memory::data_type::f32, memory::format_tag::a);
  const dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_exp,
                                  md, 0.0f, 0.0f),
      user_scratchpad_attr(), ctx.engine());
  e->bind(ctx, DNNL_ARG_SRC, md);
  e->bind(ctx, DNNL_ARG_DST, md);
  e->finish(ctx, dnnl::eltwise_forward(pd), pd);
  return e;
}

ExpBlocks& exp_blocks(HostContext& ctx, int64_t key, int64_t rows, int64_t cols) {
  constexpr int64_t kBlockFloats = int64_t{64} << 10;
  return ctx.cached<ExpBlocks>(CacheKey(key, {rows, cols}), [&] {
    auto b = std::make_unique<ExpBlocks>();
    b->rows_per_block = std::max<int64_t>(1, std::min(rows, kBlockFloats / cols));
    b->exp = exp_primitive(ctx, b->rows_per_block * cols);
    if (rows % b->rows_per_block > 0) {
      b->exp_tail = exp_primitive(ctx, rows % b->rows_per_block * cols);
    }
    b->e.resize(static_cast<size_t>(b->rows_per_block * cols));
    return b;
  });
}

// For each block of rows: fill(r, row of the scratch) writes the exponents of row r, the scratch
// is exponentiated in place, then use(r, exp row) consumes them.
template <typename Fill, typename Use>
void for_each_exp_block(ExpBlocks& b, HostContext& ctx, int64_t rows, int64_t cols, Fill fill,
                        Use use) {
  float* e = b.e.data();
  for (int64_t r0 = 0; r0 < rows; r0 += b.rows_per_block) {
    const int64_t n = std::min(b.rows_per_block, rows - r0);
    for (int64_t r = 0; r < n; ++r) fill(r0 + r, e + r * cols);
    PreparedPrimitive& exp = n == b.rows_per_block ? *b.exp : *b.exp_tail;
    exp.set(DNNL_ARG_SRC, e);
    exp.set(DNNL_ARG_DST, e);
    exp.run(ctx);
    for (int64_t r = 0; r < n; ++r) use(r0 + r, e + r * cols);
  }
}

}  // namespace

// gx = gy - exp(y) * sum(gy), a block of rows at a time: oneDNN's JIT exp, then one vectorised
// pass. oneDNN 2.6's own log-softmax backward has no JIT on AVX2 machines: its reference loop
// took 29% of a gpt-small step (0.64 s of 2.2 at batch 8, where this takes a twentieth of that).
void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  for_each_exp_block(
      exp_blocks(ctx, kLogSoftmaxBackward, rows, cols), ctx, rows, cols,
      [&](int64_t r, float* e) { std::copy(y + r * cols, y + (r + 1) * cols, e); },
      [&](int64_t r, const float* p) {
        const float* g = gy + r * cols;
        float* out = gx + r * cols;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; ++j) sum += g[j];
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) out[j] = g[j] - p[j] * sum;
      });
}

namespace {

// The targets that count, each checked (nll_loss's rule and message).
int64_t counted_targets(const int64_t* target, int64_t rows, int64_t cols, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] == ignore_index) continue;
    DPE_CHECK(target[r] >= 0 && target[r] < cols, "cross_entropy: target "
                                                      << target[r] << " is out of bounds for "
                                                      << cols << " classes");
    ++count;
  }
  return count;
}

// The largest of x[0, n) (NaNs skipped: they make the row's sum NaN anyway), in kLanes running
// maxima: GCC leaves a float max reduction scalar (one vmaxss after another) even under
// `omp simd reduction(max)`, which made the max a third of the fused forward.
float max_of(const float* x, int64_t n) {
  constexpr int64_t kLanes = 64;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) lane[k] = lane[k] < x[j + k] ? x[j + k] : lane[k];
  }
  for (int64_t k = 0; j + k < n; ++k) lane[k] = lane[k] < x[j + k] ? x[j + k] : lane[k];
  float m = lane[0];
  for (int64_t k = 1; k < kLanes; ++k) m = m < lane[k] ? lane[k] : m;
  return m;
}

}  // namespace

// Per row: its maximum m, then exp(x - m) in the cached scratch, lse = m + log(sum): x is read from
// memory once, and nothing of the row's size is written.
void cross_entropy_forward(HostContext& ctx, const float* x, const int64_t* target, float* out,
                           float* lse, int64_t rows, int64_t cols, int64_t ignore_index) {
  const int64_t count = counted_targets(target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  std::vector<float> row_max(static_cast<size_t>(rows));
  for_each_exp_block(
      exp_blocks(ctx, kCrossEntropy, rows, cols), ctx, rows, cols,
      [&](int64_t r, float* e) {
        const float* xr = x + r * cols;
        // A row of -inf (or with +inf or a NaN) gives NaN, as torch's log_softmax does.
        const float m = max_of(xr, cols);
        row_max[r] = m;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) e[j] = xr[j] - m;
      },
      [&](int64_t r, const float* p) {
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; ++j) sum += p[j];
        lse[r] = row_max[r] + std::log(sum);
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
  const int64_t count = counted_targets(target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) return;
  const float s = -gout[0] / static_cast<float>(count);
  for_each_exp_block(
      exp_blocks(ctx, kCrossEntropy, rows, cols), ctx, rows, cols,
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
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) o[j] = 0.0f - p[j] * g;
        if (counts) o[target[r]] = g - p[target[r]] * g;
      });
}

}  // namespace dpe::host
