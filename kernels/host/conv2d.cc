#include "kernels/host/conv2d.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/matmul.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// Tags of this file's cache entries.
enum : int64_t {
  kConvForward = 0x636f6e7601,
  kConvBackwardData,
  kConvBackwardWeights,
  kConvWeightGradIm2col
};

// The caller's plain layouts, and the layouts the primitives are created with: `any`, so oneDNN
// picks its blocked direct convolution, reordering from and to NCHW around it. Measured on the
// ConvNet's layers (tools/kernel_bench), that is 3-6x faster than the GEMM-based convolution
// oneDNN uses for plain NCHW, reorders included; the exception is the backward-data output of a
// layer with few input channels (the first layer's 1 channel would be padded to 16), kept plain.
struct Descs {
  memory::desc src, wei, bias, dst;        // plain
  memory::desc any_src, any_wei, any_dst;  // the primitive's choice
  memory::desc bwd_src;                    // backward-data output
  memory::dims strides, pad;
};

constexpr int64_t kMinBlockedChannels = 8;

Descs descs(const Conv2dShape& s) {
  const memory::dims src{s.n, s.c, s.h, s.w}, wei{s.o, s.c, s.kh, s.kw}, dst{s.n, s.o, s.ho, s.wo};
  const memory::desc any_src(src, dt::f32, tag::any);
  const memory::desc plain_src(src, dt::f32, tag::nchw);
  return {plain_src,
          memory::desc(wei, dt::f32, tag::oihw),
          memory::desc({s.o}, dt::f32, tag::x),
          memory::desc(dst, dt::f32, tag::nchw),
          any_src,
          memory::desc(wei, dt::f32, tag::any),
          memory::desc(dst, dt::f32, tag::any),
          s.c < kMinBlockedChannels ? plain_src : any_src,
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

// The weight gradient of a layer with few input channels, as GEMMs over im2col columns:
// gw[o, c kh kw] = sum_n gy[n][o, ho wo] @ col[n][c kh kw, ho wo]^T, a group of images at a time
// side by side (their gy packed beside each other too) so that each GEMM's inner dimension is
// long. oneDNN's direct convolution pads such a layer's channels to a block of 8 (8x the FLOPs:
// the ConvNet's first layer took a quarter of its step), and its GEMM-based one ran no faster.
struct Im2colScratch : HostContext::CacheEntry {
  std::vector<float> col, gy, grad;  // columns (+ a row of ones), gy packed alike, [gw | gb]
};

// Image x's columns into col[c kh kw][ld], from column 0.
void im2col(const Conv2dShape& s, const float* x, float* col, int64_t ld) {
  for (int64_t c = 0; c < s.c; ++c) {
    for (int64_t i = 0; i < s.kh; ++i) {
      for (int64_t j = 0; j < s.kw; ++j) {
        float* row = col + ((c * s.kh + i) * s.kw + j) * ld;
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          const int64_t h = oh * s.stride - s.padding + i;
          float* out = row + oh * s.wo;
          if (h < 0 || h >= s.h) {
            std::fill(out, out + s.wo, 0.0f);
            continue;
          }
          // Output columns lo..hi-1 read inside the row; the others are padding.
          const int64_t first = j - s.padding;  // the input column of ow = 0
          const int64_t lo = std::min(s.wo, first >= 0 ? 0 : (-first + s.stride - 1) / s.stride);
          const int64_t hi =
              std::max(lo, std::min(s.wo, s.w - first <= 0 ? 0
                                                           : (s.w - first + s.stride - 1) / s.stride));
          const float* in = x + (c * s.h + h) * s.w + first;
          std::fill(out, out + lo, 0.0f);
          if (s.stride == 1) {
            std::copy(in + lo, in + hi, out + lo);
          } else {
            for (int64_t ow = lo; ow < hi; ++ow) out[ow] = in[ow * s.stride];
          }
          std::fill(out + hi, out + s.wo, 0.0f);
        }
      }
    }
  }
}

// gb, when not null, comes out of the same GEMMs: a row of ones below the columns.
void conv2d_weight_grad_im2col(HostContext& ctx, const Conv2dShape& s, const float* x,
                               const float* gy, float* gw, float* gb) {
  const int64_t plane = s.ho * s.wo, k = s.c * s.kh * s.kw;
  constexpr int64_t kInner = 8192;  // columns per GEMM: long enough, small enough for the caches
  const int64_t group = std::max<int64_t>(1, std::min(s.n, kInner / std::max<int64_t>(plane, 1)));
  const int64_t ld = group * plane;
  auto& scratch = ctx.cached<Im2colScratch>(
      CacheKey(kConvWeightGradIm2col, {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding}),
      [&] {
        auto e = std::make_unique<Im2colScratch>();
        e->col.resize(static_cast<size_t>((k + 1) * ld));
        std::fill(e->col.begin() + k * ld, e->col.end(), 1.0f);
        e->gy.resize(static_cast<size_t>(s.o * ld));
        e->grad.resize(static_cast<size_t>(s.o * (k + 1)));
        return e;
      });
  const int64_t cols = gb != nullptr ? k + 1 : k;
  for (int64_t n0 = 0; n0 < s.n; n0 += group) {
    const int64_t g = std::min(group, s.n - n0);
    for (int64_t i = 0; i < g; ++i) {
      im2col(s, x + (n0 + i) * s.c * s.h * s.w, scratch.col.data() + i * plane, ld);
      for (int64_t o = 0; o < s.o; ++o) {
        const float* src = gy + ((n0 + i) * s.o + o) * plane;
        std::copy(src, src + plane, scratch.gy.data() + o * ld + i * plane);
      }
    }
    sgemm(ctx, false, true, s.o, cols, g * plane, 1.0f, scratch.gy.data(), ld, scratch.col.data(),
          ld, n0 == 0 ? 0.0f : 1.0f, scratch.grad.data(), k + 1);
  }
  for (int64_t o = 0; o < s.o; ++o) {
    const float* row = scratch.grad.data() + o * (k + 1);
    std::copy(row, row + k, gw + o * k);
    if (gb != nullptr) gb[o] = row[k];
  }
}

void conv2d_bias_grad(const Conv2dShape& s, const float* gy, float* gb) {
  const int64_t plane = s.ho * s.wo;
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
  const bool bias = b != nullptr;
  auto& e = ctx.cached<PreparedPrimitive>(
      CacheKey(kConvForward, {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, bias}),
      [&] {
        auto e = std::make_unique<PreparedPrimitive>();
        const auto pd = forward_pd(ctx, s, bias);
        const Descs d = descs(s);
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
  const Descs d = descs(s);
  PreparedPrimitive* data = nullptr;  // backward data, when run: its reordered gy serves both
  if (gx != nullptr) {
    auto& e = ctx.cached<PreparedPrimitive>(
        CacheKey(kConvBackwardData, {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding}),
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
  if (gw != nullptr && s.c < kMinBlockedChannels) {
    conv2d_weight_grad_im2col(ctx, s, x, gy, gw, gb);
  } else if (gw != nullptr) {
    const bool bias = gb != nullptr;
    auto& e = ctx.cached<PreparedPrimitive>(
        CacheKey(kConvBackwardWeights,
                 {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, bias}),
        [&] {
          auto e = std::make_unique<PreparedPrimitive>();
          const dnnl::primitive_attr attr = user_scratchpad_attr();
          auto desc = bias ? dnnl::convolution_backward_weights::desc(
                                 dnnl::algorithm::convolution_direct, d.any_src, d.any_wei, d.bias,
                                 d.any_dst, d.strides, d.pad, d.pad)
                           : dnnl::convolution_backward_weights::desc(
                                 dnnl::algorithm::convolution_direct, d.any_src, d.any_wei,
                                 d.any_dst, d.strides, d.pad, d.pad);
          dnnl::convolution_backward_weights::primitive_desc pd(desc, attr, ctx.engine(),
                                                                forward_pd(ctx, s, bias));
          e->bind(ctx, DNNL_ARG_SRC, d.src, pd.src_desc(), false);
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
