#include "kernels/host/elementwise_lowp.h"

#include <vector>

#include "engine/core/error.h"
#include "kernels/host/convert.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/gelu.h"

namespace dpe::host {

namespace {

// Calls f.template operator()<T>() with T the element type of dt.
template <class F>
void with_type(DType dt, F&& f) {
  switch (dt) {
    case DType::kBFloat16:
      return f(BFloat16{});
    case DType::kFloat16:
      return f(Float16{});
    case DType::kFloat32:
    case DType::kInt64:
      break;
  }
  DPE_THROW("elementwise: no 16-bit kernel for " << dtype_name(dt));
}

}  // namespace

void add_lowp(HostContext&, DType dt, const void* a, const void* b, float alpha, void* out,
              int64_t n) {
  with_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    T* o = static_cast<T*>(out);
#pragma omp parallel for simd if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = from_float<T>(to_float(x[i]) + alpha * to_float(y[i]));
  });
}

void mul_lowp(HostContext&, DType dt, const void* a, const void* b, void* out, int64_t n) {
  with_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    T* o = static_cast<T*>(out);
#pragma omp parallel for simd if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = from_float<T>(to_float(x[i]) * to_float(y[i]));
  });
}

void scale_lowp(HostContext&, DType dt, const void* a, float s, void* out, int64_t n) {
  with_type(dt, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(a);
    T* o = static_cast<T*>(out);
#pragma omp parallel for simd if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) o[i] = from_float<T>(to_float(x[i]) * s);
  });
}

// ReLU on the 16-bit words themselves: a value is > 0 when its word is neither 0 nor above the
// dtype's infinity (a set sign bit or a NaN is above it). The same outputs as widening and
// comparing, without the conversions.
uint16_t infinity_bits(DType dt) { return dt == DType::kBFloat16 ? 0x7f80 : 0x7c00; }

void relu_forward_lowp(HostContext&, DType dt, const void* x, void* y, int64_t n) {
  const uint16_t inf = infinity_bits(dt);
  const uint16_t* in = static_cast<const uint16_t*>(x);
  uint16_t* out = static_cast<uint16_t*>(y);
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = in[i] != 0 && in[i] <= inf ? in[i] : uint16_t{0};
  }
}

void relu_backward_lowp(HostContext&, DType dt, const void* y, const void* gy, void* gx,
                        int64_t n) {
  const uint16_t inf = infinity_bits(dt);
  const uint16_t* out = static_cast<const uint16_t*>(y);
  const uint16_t* g = static_cast<const uint16_t*>(gy);
  uint16_t* gi = static_cast<uint16_t*>(gx);
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) gi[i] = out[i] != 0 && out[i] <= inf ? g[i] : uint16_t{0};
}

void gelu_forward_lowp(HostContext& ctx, DType dt, const void* x, void* y, int64_t n) {
  std::vector<float> wide(static_cast<size_t>(n));
  convert(wide.data(), DType::kFloat32, x, dt, n);
  gelu_forward(ctx, wide.data(), wide.data(), n);
  convert(y, dt, wide.data(), DType::kFloat32, n);
}

void gelu_backward_lowp(HostContext& ctx, DType dt, const void* x, const void* gy, void* gx,
                        int64_t n) {
  std::vector<float> wx(static_cast<size_t>(n)), wg(static_cast<size_t>(n));
  convert(wx.data(), DType::kFloat32, x, dt, n);
  convert(wg.data(), DType::kFloat32, gy, dt, n);
  gelu_backward(ctx, wx.data(), wg.data(), wg.data(), n);
  convert(gx, dt, wg.data(), DType::kFloat32, n);
}

}  // namespace dpe::host
