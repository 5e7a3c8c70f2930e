#include "kernels/host/bmm.h"

#include <algorithm>

#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;

enum : int64_t { kBmm = 0x626d6d01 };

// [batch, rows, cols] held row-major as [batch, rows, cols], or transposed: held as
// [batch, cols, rows], read through strides.
memory::desc operand(int64_t batch, int64_t rows, int64_t cols, bool transposed) {
  const memory::dims strides = transposed ? memory::dims{rows * cols, 1, rows}
                                          : memory::dims{rows * cols, cols, 1};
  return memory::desc({batch, rows, cols}, memory::data_type::f32, strides);
}

}  // namespace

void bmm(HostContext& ctx, const BmmShape& s, const float* a, const float* b, float* c) {
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {  // the product of empty matrices is zero
    std::fill(c, c + s.batch * s.m * s.n, 0.0f);
    return;
  }
  auto& e = ctx.cached<PreparedPrimitive>(
      CacheKey(kBmm, {s.batch, s.m, s.n, s.k, s.trans_a, s.trans_b}), [&] {
        auto e = std::make_unique<PreparedPrimitive>();
        const memory::desc a_md = operand(s.batch, s.m, s.k, s.trans_a);
        const memory::desc b_md = operand(s.batch, s.k, s.n, s.trans_b);
        const memory::desc c_md = operand(s.batch, s.m, s.n, false);
        const dnnl::primitive_attr attr = user_scratchpad_attr();
        dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, ctx.engine());
        e->bind(ctx, DNNL_ARG_SRC, a_md);
        e->bind(ctx, DNNL_ARG_WEIGHTS, b_md);
        e->bind(ctx, DNNL_ARG_DST, c_md);
        e->finish(ctx, dnnl::matmul(pd), pd);
        return e;
      });
  e.set(DNNL_ARG_SRC, a);
  e.set(DNNL_ARG_WEIGHTS, b);
  e.set(DNNL_ARG_DST, c);
  e.run(ctx);
}

}  // namespace dpe::host
