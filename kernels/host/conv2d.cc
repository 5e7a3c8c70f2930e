#include "kernels/host/conv2d.h"

#include <memory>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/conv2d_gemm.h"
#include "kernels/host/conv2d_one_channel.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// Tags of this file's cache entries.
enum : int64_t { kConvForward = 0x636f6e7601, kConvBackwardData, kConvBackwardWeights };

// The caller's plain layouts, and the layouts the primitives are created with: `any`, so oneDNN
// picks its blocked direct convolution, reordering from and to NCHW around it. Measured on the
// ConvNet's layers (tools/kernel_bench), that is 3-6x faster than the GEMM-based convolution
// oneDNN uses for plain NCHW, reorders included. The exceptions are layers with few input
// channels, which the blocked layout pads to a block of 8 or 16 (8x the work for one channel):
// their backward-data output stays plain, and their weight gradient reads NHWC (oneDNN's JIT
// kernel for it runs 5-10x faster than the padded one on AVX2, the output gradient's reorder
// into NHWC included; one channel's NCHW is already NHWC).
struct Descs {
  memory::desc src, wei, bias, dst;        // plain
  memory::desc any_src, any_wei, any_dst;  // the primitive's choice
  memory::desc bwd_src;                    // backward-data output
  memory::desc wgrad_src, wgrad_dst;       // the weight gradient's input and output gradient
  memory::desc user_wgrad_src;             // the caller's input, as the weight gradient binds it
  memory::dims strides, pad;
};

constexpr int64_t kMinBlockedChannels = 8;

Descs descs(const Conv2dShape& s) {
  const memory::dims src{s.n, s.c, s.h, s.w}, wei{s.o, s.c, s.kh, s.kw}, dst{s.n, s.o, s.ho, s.wo};
  if (s.channels_last) {
    // The caller's layout is the primitives' too: oneDNN's NHWC kernels, no reorder of the
    // activations (the weights, a few KiB, are reordered to the kernel's blocking).
    const memory::desc x(src, dt::f32, tag::nhwc), y(dst, dt::f32, tag::nhwc);
    return {x,
            memory::desc(wei, dt::f32, tag::oihw),
            memory::desc({s.o}, dt::f32, tag::x),
            y,
            x,
            memory::desc(wei, dt::f32, tag::any),
            y,
            x,
            x,
            y,
            x,
            {s.stride, s.stride},
            {s.padding, s.padding}};
  }
  const memory::desc any_src(src, dt::f32, tag::any), any_dst(dst, dt::f32, tag::any);
  const memory::desc plain_src(src, dt::f32, tag::nchw);
  const memory::desc nhwc_src(src, dt::f32, tag::nhwc);
  const bool few = s.c < kMinBlockedChannels;
  return {plain_src,
          memory::desc(wei, dt::f32, tag::oihw),
          memory::desc({s.o}, dt::f32, tag::x),
          memory::desc(dst, dt::f32, tag::nchw),
          any_src,
          memory::desc(wei, dt::f32, tag::any),
          any_dst,
          few ? plain_src : any_src,
          few ? nhwc_src : any_src,
          few ? memory::desc(dst, dt::f32, tag::nhwc) : any_dst,
          s.c == 1 ? nhwc_src : plain_src,
          {s.stride, s.stride},
          {s.padding, s.padding}};
}

dnnl::convolution_forward::primitive_desc forward_pd(HostContext& ctx, const Conv2dShape& s,
                                                     bool bias) {
  const Descs d = descs(s);
  const dnnl::primitive_attr attr = user_scratchpad_attr();
  auto desc = bias ? dnnl::convolution_forward::desc(
                         dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                         d.any_src, d.any_wei, d.bias, d.any_dst, d.strides, d.pad, d.pad)
                   : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training,
                                                     dnnl::algorithm::convolution_direct, d.any_src,
                                                     d.any_wei, d.any_dst, d.strides, d.pad, d.pad);
  return {desc, attr, ctx.engine()};
}

// A first layer in channels last: one input channel and as many outputs as one block of oneDNN's
// blocked layout (16 on AVX-512, 8 on AVX2). Its NHWC input is NCHW byte for byte (one channel)
// and its NHWC output nChw16c (nChw8c) byte for byte (one block), so oneDNN's JIT first-layer
// kernel runs on the caller's memory, no reorder either side. For NHWC oneDNN 2.6 picks its brgconv
// kernel instead, 3.5x slower on the ConvNet's first layer (2.8 ms against 0.8 at batch 256 on an
// AVX-512 EPYC). Null when the shape is another or no JIT kernel takes these layouts.
struct FirstLayer {
  memory::desc src, dst;
  dnnl::convolution_forward::primitive_desc pd;
};

std::unique_ptr<FirstLayer> first_layer(HostContext& ctx, const Conv2dShape& s, const Descs& d,
                                        bool bias) {
  if (!s.channels_last || s.c != 1 || (s.o != 8 && s.o != 16)) return nullptr;
  const memory::desc src({s.n, s.c, s.h, s.w}, dt::f32, tag::nchw);
  const memory::desc dst({s.n, s.o, s.ho, s.wo}, dt::f32, s.o == 16 ? tag::aBcd16b : tag::aBcd8b);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  try {
    auto desc = bias ? dnnl::convolution_forward::desc(kind, algo, src, d.any_wei, d.bias, dst,
                                                       d.strides, d.pad, d.pad)
                     : dnnl::convolution_forward::desc(kind, algo, src, d.any_wei, dst, d.strides,
                                                       d.pad, d.pad);
    dnnl::convolution_forward::primitive_desc pd(desc, user_scratchpad_attr(), ctx.engine());
    if (std::string(pd.impl_info_str()).rfind("jit:", 0) != 0) return nullptr;
    return std::unique_ptr<FirstLayer>(new FirstLayer{src, dst, pd});
  } catch (const dnnl::error&) {  // no implementation takes these layouts
    return nullptr;
  }
}

void conv2d_bias_grad(const Conv2dShape& s, const float* gy, float* gb) {
  const int64_t plane = s.ho * s.wo;
  if (s.channels_last) {  // gy [n * ho * wo, o]
    std::vector<double> acc(static_cast<size_t>(s.o), 0.0);
    for (int64_t r = 0; r < s.n * plane; ++r) {
      for (int64_t oc = 0; oc < s.o; ++oc) acc[oc] += gy[r * s.o + oc];
    }
    for (int64_t oc = 0; oc < s.o; ++oc) gb[oc] = static_cast<float>(acc[oc]);
    return;
  }
  for (int64_t oc = 0; oc < s.o; ++oc) {
    double acc = 0.0;
    for (int64_t i = 0; i < s.n; ++i) {
      const float* p = gy + (i * s.o + oc) * plane;
      for (int64_t k = 0; k < plane; ++k) acc += p[k];
    }
    gb[oc] = static_cast<float>(acc);
  }
}

}  // namespace

void conv2d_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                    const float* b, float* y) {
  if (conv2d_as_gemm(s)) {
    conv2d_gemm_forward(ctx, s, x, w, b, y);
    return;
  }
  if (conv2d_one_channel_forward(s, x, w, b, y)) return;
  const bool bias = b != nullptr;
  auto& e = ctx.cached<PreparedPrimitive>(
      CacheKey(kConvForward,
               {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, bias, s.channels_last}),
      [&] {
        auto e = std::make_unique<PreparedPrimitive>();
        const Descs d = descs(s);
        if (const auto first = first_layer(ctx, s, d, bias)) {
          e->bind(ctx, DNNL_ARG_SRC, first->src);
          e->bind(ctx, DNNL_ARG_WEIGHTS, d.wei, first->pd.weights_desc(), false);
          if (bias) e->bind(ctx, DNNL_ARG_BIAS, d.bias);
          e->bind(ctx, DNNL_ARG_DST, first->dst);
          e->finish(ctx, dnnl::convolution_forward(first->pd), first->pd);
          return e;
        }
        const auto pd = forward_pd(ctx, s, bias);
        e->bind(ctx, DNNL_ARG_SRC, d.src, pd.src_desc(), false);
        e->bind(ctx, DNNL_ARG_WEIGHTS, d.wei, pd.weights_desc(), false);
        if (bias) e->bind(ctx, DNNL_ARG_BIAS, d.bias);
        e->bind(ctx, DNNL_ARG_DST, d.dst, pd.dst_desc(), true);
        e->finish(ctx, dnnl::convolution_forward(pd), pd);
        return e;
      });
  e.set(DNNL_ARG_SRC, x);
  e.set(DNNL_ARG_WEIGHTS, w);
  if (bias) e.set(DNNL_ARG_BIAS, b);
  e.set(DNNL_ARG_DST, y);
  e.run(ctx);
}

void conv2d_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb) {
  if (conv2d_as_gemm(s)) {
    if (gx != nullptr || gw != nullptr) conv2d_gemm_backward(ctx, s, x, w, gy, gx, gw);
    if (gb != nullptr) conv2d_bias_grad(s, gy, gb);
    return;
  }
  const Descs d = descs(s);
  PreparedPrimitive* data = nullptr;  // backward data, when run: its reordered gy serves both
  if (gx != nullptr) {
    auto& e = ctx.cached<PreparedPrimitive>(
        CacheKey(kConvBackwardData,
                 {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, s.channels_last}),
        [&] {
          auto e = std::make_unique<PreparedPrimitive>();
          const dnnl::primitive_attr attr = user_scratchpad_attr();
          dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.bwd_src,
                                                     d.any_wei, d.any_dst, d.strides, d.pad, d.pad);
          dnnl::convolution_backward_data::primitive_desc pd(desc, attr, ctx.engine(),
                                                             forward_pd(ctx, s, false));
          e->bind(ctx, DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false);
          e->bind(ctx, DNNL_ARG_WEIGHTS, d.wei, pd.weights_desc(), false);
          e->bind(ctx, DNNL_ARG_DIFF_SRC, d.src, pd.diff_src_desc(), true);
          e->finish(ctx, dnnl::convolution_backward_data(pd), pd);
          return e;
        });
    e.set(DNNL_ARG_DIFF_DST, gy);
    e.set(DNNL_ARG_WEIGHTS, w);
    e.set(DNNL_ARG_DIFF_SRC, gx);
    e.run(ctx);
    data = &e;
  }
  if (gw != nullptr && conv2d_one_channel_weight_grad(s, x, gy, gw, gb)) return;
  if (gw != nullptr) {
    const bool bias = gb != nullptr;
    auto& e = ctx.cached<PreparedPrimitive>(
        CacheKey(kConvBackwardWeights,
                 {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, bias, s.channels_last}),
        [&] {
          auto e = std::make_unique<PreparedPrimitive>();
          const dnnl::primitive_attr attr = user_scratchpad_attr();
          auto desc = bias ? dnnl::convolution_backward_weights::desc(
                                 dnnl::algorithm::convolution_direct, d.wgrad_src, d.any_wei,
                                 d.bias, d.wgrad_dst, d.strides, d.pad, d.pad)
                           : dnnl::convolution_backward_weights::desc(
                                 dnnl::algorithm::convolution_direct, d.wgrad_src, d.any_wei,
                                 d.wgrad_dst, d.strides, d.pad, d.pad);
          dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, ctx.engine(),
                                                                forward_pd(ctx, s, bias));
          e->bind(ctx, DNNL_ARG_SRC, d.user_wgrad_src, pd.src_desc(), false);
          e->bind(ctx, DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false);
          e->bind(ctx, DNNL_ARG_DIFF_WEIGHTS, d.wei, pd.diff_weights_desc(), true);
          if (bias) e->bind(ctx, DNNL_ARG_DIFF_BIAS, d.bias);
          e->finish(ctx, dnnl::convolution_backward_weights(pd), pd);
          return e;
        });
    e.set(DNNL_ARG_SRC, x);
    e.set(DNNL_ARG_DIFF_DST, gy);
    e.set(DNNL_ARG_DIFF_WEIGHTS, gw);
    if (bias) e.set(DNNL_ARG_DIFF_BIAS, gb);
    if (data != nullptr) {
      e.run_sharing(ctx, DNNL_ARG_DIFF_DST, *data);
    } else {
      e.run(ctx);
    }
  } else if (gb != nullptr) {
    conv2d_bias_grad(s, gy, gb);
  }
}

}  // namespace dpe::host
