#include "kernels/host/conv2d_lowp.h"

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "kernels/host/conv2d.h"
#include "kernels/host/convert.h"
#include "kernels/host/prepared_primitive.h"

namespace dpe::host {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

enum : int64_t { kLowpConvForward = 0x6c636f6e7601, kLowpConvData, kLowpConvWeights };

// AMX tiles take 32 bfloat16 of depth per row; with fewer than 16 input channels oneDNN pads the
// channel blocks and, for one channel, has no AMX kernel at all.
constexpr int64_t kMinTileChannels = 16;

memory::data_type dnnl_type(DType t) {
  return t == DType::kBFloat16 ? memory::data_type::bf16 : memory::data_type::f16;
}

// The caller's layouts (NCHW or NHWC activations, OIHW weights) and `any` ones for the primitive.
struct Descs {
  memory::desc src, wei, bias, dst, any_src, any_wei, any_dst;
  memory::dims strides, pad;
};

Descs descs(DType dt, const Conv2dShape& s) {
  const auto t = dnnl_type(dt);
  const tag act = s.channels_last ? tag::nhwc : tag::nchw;
  const memory::dims src{s.n, s.c, s.h, s.w}, wei{s.o, s.c, s.kh, s.kw}, dst{s.n, s.o, s.ho, s.wo};
  return {memory::desc(src, t, act),        memory::desc(wei, t, tag::oihw),
          memory::desc({s.o}, t, tag::x),   memory::desc(dst, t, act),
          memory::desc(src, t, tag::any),   memory::desc(wei, t, tag::any),
          memory::desc(dst, t, tag::any),   {s.stride, s.stride},
          {s.padding, s.padding}};
}

bool on_amx(const dnnl::primitive_desc_base& pd) {
  return std::string(pd.impl_info_str()).find("amx") != std::string::npos;
}

dnnl::convolution_forward::primitive_desc forward_pd(HostContext& ctx, const Descs& d, bool bias) {
  const auto kind = dnnl::prop_kind::forward_training;
  const auto algo = dnnl::algorithm::convolution_direct;
  auto desc = bias ? dnnl::convolution_forward::desc(kind, algo, d.any_src, d.any_wei, d.bias,
                                                     d.any_dst, d.strides, d.pad, d.pad)
                   : dnnl::convolution_forward::desc(kind, algo, d.any_src, d.any_wei, d.any_dst,
                                                     d.strides, d.pad, d.pad);
  return {desc, user_scratchpad_attr(), ctx.engine()};
}

// A cached primitive, or none where the layer is emulated.
struct Entry : HostContext::CacheEntry {
  std::unique_ptr<PreparedPrimitive> prim;
};

std::unique_ptr<PreparedPrimitive> native_forward(HostContext& ctx, DType dt, const Conv2dShape& s,
                                                  bool bias) {
  if (dt != DType::kBFloat16 || s.c < kMinTileChannels) return nullptr;
  try {
    const Descs d = descs(dt, s);
    const auto pd = forward_pd(ctx, d, bias);
    if (!on_amx(pd)) return nullptr;
    auto e = std::make_unique<PreparedPrimitive>();
    e->bind(ctx, DNNL_ARG_SRC, d.src, pd.src_desc(), false);
    e->bind(ctx, DNNL_ARG_WEIGHTS, d.wei, pd.weights_desc(), false);
    if (bias) e->bind(ctx, DNNL_ARG_BIAS, d.bias);
    e->bind(ctx, DNNL_ARG_DST, d.dst, pd.dst_desc(), true);
    e->finish(ctx, dnnl::convolution_forward(pd), pd);
    return e;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

std::unique_ptr<PreparedPrimitive> native_data(HostContext& ctx, DType dt, const Conv2dShape& s) {
  if (dt != DType::kBFloat16 || s.c < kMinTileChannels) return nullptr;
  try {
    const Descs d = descs(dt, s);
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.any_src,
                                               d.any_wei, d.any_dst, d.strides, d.pad, d.pad);
    dnnl::convolution_backward_data::primitive_desc pd(desc, user_scratchpad_attr(),
                                                       ctx.engine(), forward_pd(ctx, d, false));
    if (!on_amx(pd)) return nullptr;
    auto e = std::make_unique<PreparedPrimitive>();
    e->bind(ctx, DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false);
    e->bind(ctx, DNNL_ARG_WEIGHTS, d.wei, pd.weights_desc(), false);
    e->bind(ctx, DNNL_ARG_DIFF_SRC, d.src, pd.diff_src_desc(), true);
    e->finish(ctx, dnnl::convolution_backward_data(pd), pd);
    return e;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

std::unique_ptr<PreparedPrimitive> native_weights(HostContext& ctx, DType dt, const Conv2dShape& s,
                                                  bool bias) {
  if (dt != DType::kBFloat16 || s.c < kMinTileChannels) return nullptr;
  try {
    const Descs d = descs(dt, s);
    const auto algo = dnnl::algorithm::convolution_direct;
    auto desc = bias ? dnnl::convolution_backward_weights::desc(algo, d.any_src, d.any_wei, d.bias,
                                                                d.any_dst, d.strides, d.pad, d.pad)
                     : dnnl::convolution_backward_weights::desc(algo, d.any_src, d.any_wei,
                                                                d.any_dst, d.strides, d.pad, d.pad);
    dnnl::convolution_backward_weights::primitive_desc pd(desc, user_scratchpad_attr(),
                                                          ctx.engine(), forward_pd(ctx, d, bias));
    if (!on_amx(pd)) return nullptr;
    auto e = std::make_unique<PreparedPrimitive>();
    e->bind(ctx, DNNL_ARG_SRC, d.src, pd.src_desc(), false);
    e->bind(ctx, DNNL_ARG_DIFF_DST, d.dst, pd.diff_dst_desc(), false);
    e->bind(ctx, DNNL_ARG_DIFF_WEIGHTS, d.wei, pd.diff_weights_desc(), true);
    if (bias) e->bind(ctx, DNNL_ARG_DIFF_BIAS, d.bias);
    e->finish(ctx, dnnl::convolution_backward_weights(pd), pd);
    return e;
  } catch (const dnnl::error&) {
    return nullptr;
  }
}

CacheKey key(int64_t tag_, DType dt, const Conv2dShape& s, bool bias) {
  return CacheKey(tag_, {static_cast<int64_t>(dt), s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride,
                         s.padding, bias, s.channels_last});
}

// Float32 scratch, left uninitialised: every element is written before it is read.
using Scratch = std::unique_ptr<float[]>;
Scratch widened(const void* p, DType dt, int64_t n) {
  if (p == nullptr) return nullptr;
  Scratch out(new float[static_cast<size_t>(n)]);
  convert(out.get(), DType::kFloat32, p, dt, n);
  return out;
}
Scratch scratch_if(const void* p, int64_t n) {
  return p == nullptr ? nullptr : Scratch(new float[static_cast<size_t>(n)]);
}
void narrow(void* dst, DType dt, const Scratch& src, int64_t n) {
  if (dst != nullptr) convert(dst, dt, src.get(), DType::kFloat32, n);
}

int64_t x_size(const Conv2dShape& s) { return s.n * s.c * s.h * s.w; }
int64_t w_size(const Conv2dShape& s) { return s.o * s.c * s.kh * s.kw; }
int64_t y_size(const Conv2dShape& s) { return s.n * s.o * s.ho * s.wo; }

}  // namespace

bool conv2d_lowp_native(HostContext& ctx, DType dt, const Conv2dShape& s) {
  return native_forward(ctx, dt, s, false) != nullptr;
}

void conv2d_forward_lowp(HostContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                         const void* w, const void* b, void* y) {
  const bool bias = b != nullptr;
  auto& e = ctx.cached<Entry>(key(kLowpConvForward, dt, s, bias), [&] {
    auto entry = std::make_unique<Entry>();
    entry->prim = native_forward(ctx, dt, s, bias);
    return entry;
  });
  if (e.prim != nullptr) {
    e.prim->set(DNNL_ARG_SRC, x);
    e.prim->set(DNNL_ARG_WEIGHTS, w);
    if (bias) e.prim->set(DNNL_ARG_BIAS, b);
    e.prim->set(DNNL_ARG_DST, y);
    e.prim->run(ctx);
    return;
  }
  const Scratch fx = widened(x, dt, x_size(s)), fw = widened(w, dt, w_size(s));
  const Scratch fb = widened(b, dt, s.o);
  Scratch fy(new float[static_cast<size_t>(y_size(s))]);
  conv2d_forward(ctx, s, fx.get(), fw.get(), fb.get(), fy.get());
  narrow(y, dt, fy, y_size(s));
}

void conv2d_backward_lowp(HostContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb) {
  const bool bias = gb != nullptr;
  auto& data = ctx.cached<Entry>(key(kLowpConvData, dt, s, false), [&] {
    auto entry = std::make_unique<Entry>();
    entry->prim = native_data(ctx, dt, s);
    return entry;
  });
  auto& weights = ctx.cached<Entry>(key(kLowpConvWeights, dt, s, bias), [&] {
    auto entry = std::make_unique<Entry>();
    entry->prim = native_weights(ctx, dt, s, bias);
    return entry;
  });
  const bool native_gx = gx == nullptr || data.prim != nullptr;
  const bool native_gw = gw == nullptr || weights.prim != nullptr;
  if (gx != nullptr && data.prim != nullptr) {
    data.prim->set(DNNL_ARG_DIFF_DST, gy);
    data.prim->set(DNNL_ARG_WEIGHTS, w);
    data.prim->set(DNNL_ARG_DIFF_SRC, gx);
    data.prim->run(ctx);
  }
  if (gw != nullptr && weights.prim != nullptr) {
    weights.prim->set(DNNL_ARG_SRC, x);
    weights.prim->set(DNNL_ARG_DIFF_DST, gy);
    weights.prim->set(DNNL_ARG_DIFF_WEIGHTS, gw);
    if (bias) weights.prim->set(DNNL_ARG_DIFF_BIAS, gb);
    weights.prim->run(ctx);
  }
  // What is left (all of it where the layer is emulated) in float32 on converted copies.
  void* rest_gx = native_gx ? nullptr : gx;
  void* rest_gw = native_gw ? nullptr : gw;
  void* rest_gb = native_gw && gw != nullptr ? nullptr : gb;
  if (rest_gx == nullptr && rest_gw == nullptr && rest_gb == nullptr) return;
  const Scratch fx = rest_gw != nullptr ? widened(x, dt, x_size(s)) : nullptr;
  const Scratch fw = rest_gx != nullptr ? widened(w, dt, w_size(s)) : nullptr;
  const Scratch fgy = widened(gy, dt, y_size(s));
  Scratch fgx = scratch_if(rest_gx, x_size(s)), fgw = scratch_if(rest_gw, w_size(s));
  Scratch fgb = scratch_if(rest_gb, s.o);
  conv2d_backward(ctx, s, fx.get(), fw.get(), fgy.get(), fgx.get(), fgw.get(), fgb.get());
  narrow(rest_gx, dt, fgx, x_size(s));
  narrow(rest_gw, dt, fgw, w_size(s));
  narrow(rest_gb, dt, fgb, s.o);
}

}  // namespace dpe::host
