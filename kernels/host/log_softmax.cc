#include "kernels/host/log_softmax.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;

enum : int64_t { kLogSoftmaxForward = 0x6c736d01, kLogSoftmaxBackward = 0x6c736d02 };

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

// gx = gy - exp(y) * sum(gy), a block of rows at a time: oneDNN's JIT exp into a block-sized
// scratch the caches hold, then one vectorised pass. oneDNN 2.6's own log-softmax backward has
// no JIT on AVX2 machines: its reference loop took 29% of a gpt-small step (0.64 s of 2.2 at
// batch 8, where this takes a twentieth of that).
struct BackwardBlock : HostContext::CacheEntry {
  std::unique_ptr<PreparedPrimitive> exp, exp_tail;  // full blocks, the last (shorter) one
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

}  // namespace

void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  constexpr int64_t kBlockFloats = int64_t{64} << 10;  // 256 KiB of exp(y): the L2's share
  const int64_t block = std::max<int64_t>(1, std::min(rows, kBlockFloats / cols));
  const int64_t tail = rows % block;
  auto& b = ctx.cached<BackwardBlock>(CacheKey(kLogSoftmaxBackward, {rows, cols}), [&] {
    auto b = std::make_unique<BackwardBlock>();
    b->exp = exp_primitive(ctx, block * cols);
    if (tail > 0) b->exp_tail = exp_primitive(ctx, tail * cols);
    b->e.resize(static_cast<size_t>(block * cols));
    return b;
  });
  float* e = b.e.data();
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    PreparedPrimitive& exp = n == block ? *b.exp : *b.exp_tail;
    exp.set(DNNL_ARG_SRC, y + r0 * cols);
    exp.set(DNNL_ARG_DST, e);
    exp.run(ctx);
    for (int64_t r = 0; r < n; ++r) {
      const float* g = gy + (r0 + r) * cols;
      const float* p = e + r * cols;
      float* out = gx + (r0 + r) * cols;
      float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
      for (int64_t j = 0; j < cols; ++j) sum += g[j];
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) out[j] = g[j] - p[j] * sum;
    }
  }
}

}  // namespace dpe::host
