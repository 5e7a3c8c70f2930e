#include "kernels/host/conv2d_gemm.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/host/linear.h"

namespace dpe::host {

namespace {

enum : int64_t { kConvGemmScratch = 0x636f6e7667 };

// A shape's gathered pixels and their gradient, kept between calls (sized on first use), so a
// step allocates nothing.
struct Scratch : HostContext::CacheEntry {
  std::vector<float> rows, grad_rows;
};

Scratch& scratch(HostContext& ctx, const Conv2dShape& s) {
  return ctx.cached<Scratch>(
      CacheKey(kConvGemmScratch, {s.n, s.c, s.h, s.w, s.o, s.stride, s.padding}),
      [] { return std::make_unique<Scratch>(); });
}

// The linear layer over the output's pixels.
LinearShape pixels(const Conv2dShape& s) { return {s.n * s.ho * s.wo, s.c, s.o}; }

// Every output pixel reads the input pixel at its own place.
bool reads_x_as_is(const Conv2dShape& s) { return s.stride == 1 && s.padding == 0; }

// Calls f(row, pixel) for each output pixel (row) that reads an input pixel (not the padding).
template <typename F>
void for_each_read(const Conv2dShape& s, F f) {
  for (int64_t b = 0; b < s.n; ++b) {
    for (int64_t oy = 0; oy < s.ho; ++oy) {
      const int64_t iy = oy * s.stride - s.padding;
      if (iy < 0 || iy >= s.h) continue;
      for (int64_t ox = 0; ox < s.wo; ++ox) {
        const int64_t ix = ox * s.stride - s.padding;
        if (ix < 0 || ix >= s.w) continue;
        f((b * s.ho + oy) * s.wo + ox, (b * s.h + iy) * s.w + ix);
      }
    }
  }
}

// The input pixel each output pixel reads, [n * ho * wo, c] (zeros on the padding).
const float* gathered(const Conv2dShape& s, const float* x, std::vector<float>& rows) {
  if (reads_x_as_is(s)) return x;
  rows.assign(static_cast<size_t>(s.n * s.ho * s.wo * s.c), 0.0f);
  for_each_read(s, [&](int64_t row, int64_t pixel) {
    std::copy_n(x + pixel * s.c, s.c, rows.data() + row * s.c);
  });
  return rows.data();
}

}  // namespace

bool conv2d_as_gemm(const Conv2dShape& s) {
  return s.channels_last && s.kh == 1 && s.kw == 1 && s.ho * s.wo <= kGemmMaxOutputPixels;
}

void conv2d_gemm_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                         const float* b, float* y) {
  linear_forward(ctx, pixels(s), gathered(s, x, scratch(ctx, s).rows), w, b, y);
}

void conv2d_gemm_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                          const float* gy, float* gx, float* gw) {
  Scratch& sc = scratch(ctx, s);
  float* grad_rows = gx;
  if (gx != nullptr && !reads_x_as_is(s)) {
    sc.grad_rows.resize(static_cast<size_t>(s.n * s.ho * s.wo * s.c));
    grad_rows = sc.grad_rows.data();
  }
  const float* rows = gw != nullptr ? gathered(s, x, sc.rows) : nullptr;
  linear_backward(ctx, pixels(s), rows, w, gy, grad_rows, gw, nullptr);
  if (grad_rows != gx) {  // each read pixel's gradient back in place; the pixels skipped get 0
    std::fill_n(gx, s.n * s.h * s.w * s.c, 0.0f);
    for_each_read(s, [&](int64_t row, int64_t pixel) {
      std::copy_n(grad_rows + row * s.c, s.c, gx + pixel * s.c);
    });
  }
}

}  // namespace dpe::host
