#include "kernels/host/batch_norm.h"

#include <cstring>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;
using flags = dnnl::normalization_flags;

enum : int64_t { kBnForwardTrain = 0x626e01, kBnForwardEval, kBnBackward };

// Per-channel stand-ins for null gamma / beta / ggamma / gbeta, so one primitive serves all.
struct BatchNormEntry : PreparedPrimitive {
  std::vector<float> ones, zeros, dscale, dshift;
  explicit BatchNormEntry(int64_t c) : ones(c, 1.0f), zeros(c, 0.0f), dscale(c), dshift(c) {}
};

memory::desc data_desc(const BatchNormShape& sh) {
  return memory::desc({sh.n, sh.c, sh.s, 1}, memory::data_type::f32, memory::format_tag::nchw);
}
memory::desc channel_desc(const BatchNormShape& sh) {
  return memory::desc({sh.c}, memory::data_type::f32, memory::format_tag::x);
}

// eps is part of the primitive: keyed by its exact bits.
int64_t eps_bits(float eps) {
  uint32_t bits;
  std::memcpy(&bits, &eps, sizeof bits);
  return bits;
}

const flags kAffine = flags::use_scale | flags::use_shift;

dnnl::batch_normalization_forward::primitive_desc forward_train_pd(HostContext& ctx,
                                                                   const BatchNormShape& sh,
                                                                   float eps) {
  dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_training, data_desc(sh),
                                               eps, kAffine);
  return {desc, user_scratchpad_attr(), ctx.engine()};
}

}  // namespace

void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var) {
  auto& e =
      ctx.cached<BatchNormEntry>(CacheKey(kBnForwardTrain, {sh.n, sh.c, sh.s, eps_bits(eps)}), [&] {
        auto e = std::make_unique<BatchNormEntry>(sh.c);
        const auto pd = forward_train_pd(ctx, sh, eps);
        e->bind(ctx, DNNL_ARG_SRC, data_desc(sh));
        e->bind(ctx, DNNL_ARG_DST, data_desc(sh));
        for (int arg : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) {
          e->bind(ctx, arg, channel_desc(sh));
        }
        e->finish(ctx, dnnl::batch_normalization_forward(pd), pd);
        return e;
      });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DST, y);
  e.set(DNNL_ARG_SCALE, gamma ? gamma : e.ones.data());
  e.set(DNNL_ARG_SHIFT, beta ? beta : e.zeros.data());
  e.set(DNNL_ARG_MEAN, mean);
  e.set(DNNL_ARG_VARIANCE, var);
  e.run(ctx);
}

void batch_norm_forward_eval(HostContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y) {
  auto& e =
      ctx.cached<BatchNormEntry>(CacheKey(kBnForwardEval, {sh.n, sh.c, sh.s, eps_bits(eps)}), [&] {
        auto e = std::make_unique<BatchNormEntry>(sh.c);
        dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference,
                                                     data_desc(sh), eps,
                                                     kAffine | flags::use_global_stats);
        dnnl::batch_normalization_forward::primitive_desc pd(desc, user_scratchpad_attr(),
                                                             ctx.engine());
        e->bind(ctx, DNNL_ARG_SRC, data_desc(sh));
        e->bind(ctx, DNNL_ARG_DST, data_desc(sh));
        for (int arg : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE}) {
          e->bind(ctx, arg, channel_desc(sh));
        }
        e->finish(ctx, dnnl::batch_normalization_forward(pd), pd);
        return e;
      });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DST, y);
  e.set(DNNL_ARG_SCALE, gamma ? gamma : e.ones.data());
  e.set(DNNL_ARG_SHIFT, beta ? beta : e.zeros.data());
  e.set(DNNL_ARG_MEAN, mean);
  e.set(DNNL_ARG_VARIANCE, var);
  e.run(ctx);
}

void batch_norm_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  auto& e =
      ctx.cached<BatchNormEntry>(CacheKey(kBnBackward, {sh.n, sh.c, sh.s, eps_bits(eps)}), [&] {
        auto e = std::make_unique<BatchNormEntry>(sh.c);
        dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data_desc(sh),
                                                      data_desc(sh), eps, kAffine);
        dnnl::batch_normalization_backward::primitive_desc pd(
            desc, user_scratchpad_attr(), ctx.engine(), forward_train_pd(ctx, sh, eps));
        e->bind(ctx, DNNL_ARG_SRC, data_desc(sh));
        e->bind(ctx, DNNL_ARG_DIFF_DST, data_desc(sh));
        e->bind(ctx, DNNL_ARG_DIFF_SRC, data_desc(sh));
        // oneDNN 2.6's backward asks for the shift too (and does not read it).
        for (int arg : {DNNL_ARG_SCALE, DNNL_ARG_SHIFT, DNNL_ARG_MEAN, DNNL_ARG_VARIANCE,
                        DNNL_ARG_DIFF_SCALE, DNNL_ARG_DIFF_SHIFT}) {
          e->bind(ctx, arg, channel_desc(sh));
        }
        e->finish(ctx, dnnl::batch_normalization_backward(pd), pd);
        return e;
      });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_DIFF_DST, gy);
  e.set(DNNL_ARG_DIFF_SRC, gx);
  e.set(DNNL_ARG_SCALE, gamma ? gamma : e.ones.data());
  e.set(DNNL_ARG_SHIFT, e.zeros.data());
  e.set(DNNL_ARG_MEAN, mean);
  e.set(DNNL_ARG_VARIANCE, var);
  e.set(DNNL_ARG_DIFF_SCALE, ggamma ? ggamma : e.dscale.data());
  e.set(DNNL_ARG_DIFF_SHIFT, gbeta ? gbeta : e.dshift.data());
  e.run(ctx);
}

void batch_norm_apply(HostContext&, const BatchNormShape& sh, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y) {
  const int64_t planes = sh.n * sh.c;
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t ch = p % sh.c;
    const float a = invstd[ch] * (gamma ? gamma[ch] : 1.0f);
    const float b = (beta ? beta[ch] : 0.0f) - mean[ch] * a;
    const float* in = x + p * sh.s;
    float* out = y + p * sh.s;
#pragma omp simd
    for (int64_t k = 0; k < sh.s; ++k) out[k] = in[k] * a + b;
  }
}

void batch_norm_backward_elemt(HostContext&, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  const int64_t planes = sh.n * sh.c;
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t ch = p % sh.c;
    const float is = invstd[ch], m = mean[ch], mg = mean_gy[ch];
    const float proj = is * is * mean_gy_xmu[ch];
    const float g = is * (gamma ? gamma[ch] : 1.0f);
    const float* xp = x + p * sh.s;
    const float* gp = gy + p * sh.s;
    float* out = gx + p * sh.s;
#pragma omp simd
    for (int64_t k = 0; k < sh.s; ++k) out[k] = (gp[k] - mg - (xp[k] - m) * proj) * g;
  }
}

}  // namespace dpe::host
