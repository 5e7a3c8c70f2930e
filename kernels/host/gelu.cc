#include "kernels/host/gelu.h"

#include <memory>

#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;

enum : int64_t { kGeluForward = 0x67656c01, kGeluBackward = 0x67656c02 };

memory::desc flat_md(int64_t n) {
  return memory::desc({n}, memory::data_type::f32, memory::format_tag::a);
}

// oneDNN's JIT GELU, tanh form (PyTorch's approximate="tanh"), vectorised: a loop over scalar
// tanhf costs a tenth of a gpt step.
dnnl::eltwise_forward::primitive_desc forward_pd(HostContext& ctx, int64_t n) {
  return dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_tanh, flat_md(n), 0.0f, 0.0f),
      user_scratchpad_attr(), ctx.engine());
}

}  // namespace

void gelu_forward(HostContext& ctx, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  auto& e = ctx.cached<PreparedPrimitive>(CacheKey(kGeluForward, {n}), [&] {
    auto e = std::make_unique<PreparedPrimitive>();
    const auto pd = forward_pd(ctx, n);
    e->bind(ctx, DNNL_ARG_SRC, flat_md(n));
    e->bind(ctx, DNNL_ARG_DST, flat_md(n));
    e->finish(ctx, dnnl::eltwise_forward(pd), pd);
    return e;
  });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DST, y);
  e.run(ctx);
}

void gelu_backward(HostContext& ctx, const float* x, const float* gy, float* gx, int64_t n) {
  if (n == 0) return;
  auto& e = ctx.cached<PreparedPrimitive>(CacheKey(kGeluBackward, {n}), [&] {
    auto e = std::make_unique<PreparedPrimitive>();
    const memory::desc md = flat_md(n);
    const dnnl::eltwise_backward::primitive_desc pd(
        dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_tanh, md, md, 0.0f, 0.0f),
        user_scratchpad_attr(), ctx.engine(), forward_pd(ctx, n));
    e->bind(ctx, DNNL_ARG_SRC, md);
    e->bind(ctx, DNNL_ARG_DIFF_DST, md);
    e->bind(ctx, DNNL_ARG_DIFF_SRC, md);
    e->finish(ctx, dnnl::eltwise_backward(pd), pd);
    return e;
  });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DIFF_DST, gy);
  e.set(DNNL_ARG_DIFF_SRC, gx);
  e.run(ctx);
}

}  // namespace dpe::host
