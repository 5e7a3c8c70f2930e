#include "kernels/host/exp_rows.h"

#include <limits>

#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

std::unique_ptr<PreparedPrimitive> exp_primitive(HostContext& ctx, int64_t n) {
  auto e = std::make_unique<PreparedPrimitive>();
  const dnnl::memory::desc md({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
  const dnnl::eltwise_forward::primitive_desc pd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_exp,
                                  md, 0.0f, 0.0f),
      user_scratchpad_attr(), ctx.engine());
  e->bind(ctx, DNNL_ARG_SRC, md);
  e->bind(ctx, DNNL_ARG_DST, md);
  e->finish(ctx, dnnl::eltwise_forward(pd), pd);
  return e;
}

// The running maximum: v when larger or NaN (a NaN, once in, stays).
inline float take(float m, float v) { return m < v || v != v ? v : m; }

}  // namespace

ExpRows& ExpRows::get(HostContext& ctx, int64_t key, int64_t rows, int64_t cols) {
  return ctx.cached<ExpRows>(CacheKey(key, {rows, cols}), [&] {
    return std::unique_ptr<ExpRows>(new ExpRows(ctx, rows, cols));
  });
}

ExpRows::ExpRows(HostContext& ctx, int64_t rows, int64_t cols) : rows_(rows), cols_(cols) {
  constexpr int64_t kBlockFloats = int64_t{64} << 10;
  rows_per_block_ = std::max<int64_t>(1, std::min(rows, kBlockFloats / std::max<int64_t>(cols, 1)));
  if (rows == 0 || cols == 0) return;
  exp_ = exp_primitive(ctx, rows_per_block_ * cols);
  if (rows % rows_per_block_ > 0) exp_tail_ = exp_primitive(ctx, rows % rows_per_block_ * cols);
  scratch_.resize(static_cast<size_t>(rows_per_block_ * cols));
}

ExpRows::~ExpRows() = default;

void ExpRows::exp_in_place(HostContext& ctx, int64_t block_rows) {
  PreparedPrimitive& exp = block_rows == rows_per_block_ ? *exp_ : *exp_tail_;
  exp.set(DNNL_ARG_SRC, scratch_.data());
  exp.set(DNNL_ARG_DST, scratch_.data());
  exp.run(ctx);
}

float max_of(const float* x, int64_t n) {
  constexpr int64_t kLanes = 64;
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int64_t k = 0; k < kLanes; ++k) lane[k] = take(lane[k], x[j + k]);
  }
  for (int64_t k = 0; j + k < n; ++k) lane[k] = take(lane[k], x[j + k]);
  // Folded in halves (vectorised) rather than lane after lane: a softmax over 128 keys spent as
  // long folding 64 lanes one by one as reading its row.
  for (int64_t half = kLanes / 2; half >= 1; half /= 2) {
#pragma omp simd
    for (int64_t k = 0; k < half; ++k) lane[k] = take(lane[k], lane[k + half]);
  }
  return lane[0];
}

}  // namespace dpe::host
