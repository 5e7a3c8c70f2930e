#include "kernels/host/log_softmax.h"

#include <memory>

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

void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  auto& e = ctx.cached<PreparedPrimitive>(CacheKey(kLogSoftmaxBackward, {rows, cols}), [&] {
    auto e = std::make_unique<PreparedPrimitive>();
    const memory::desc md = rows_md(rows, cols);
    const dnnl::logsoftmax_backward::primitive_desc pd(dnnl::logsoftmax_backward::desc(md, md, 1),
                                                       user_scratchpad_attr(), ctx.engine(),
                                                       forward_pd(ctx, rows, cols));
    e->bind(ctx, DNNL_ARG_DST, md);
    e->bind(ctx, DNNL_ARG_DIFF_DST, md);
    e->bind(ctx, DNNL_ARG_DIFF_SRC, md);
    e->finish(ctx, dnnl::logsoftmax_backward(pd), pd);
    return e;
  });
  e.set(DNNL_ARG_DST, y);
  e.set(DNNL_ARG_DIFF_DST, gy);
  e.set(DNNL_ARG_DIFF_SRC, gx);
  e.run(ctx);
}

}  // namespace dpe::host
