#include "kernels/host/conv2d_gemm.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/host/linear.h"

namespace dpe::host {

namespace {

enum : int64_t { kConvGemmScratch = 0x636f6e7667 };

// A shape's gathered pixels and their gradient, or the weights one window meets and their
// gradient, kept between calls (sized on first use), so a step allocates nothing.
struct Scratch : HostContext::CacheEntry {
  std::vector<float> rows, grad_rows;
  std::vector<float> weights, grad_weights;  // one window's: [o, c * h * w]
};

Scratch& scratch(HostContext& ctx, const Conv2dShape& s) {
  return ctx.cached<Scratch>(CacheKey(kConvGemmScratch, {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw,
                                                         s.stride, s.padding, s.channels_last}),
                             [] { return std::make_unique<Scratch>(); });
}

// One output pixel whose window covers the image: every input value meets exactly one weight, so
// the convolution is a linear layer over each image's values, [n, c * h * w] (x as it is, in
// either layout) times the weights the image's pixels meet, [o, c * h * w]. The taps on the
// padding drop out of the product instead of being multiplied.
bool one_window(const Conv2dShape& s) {
  return s.ho == 1 && s.wo == 1 && s.h + s.padding <= s.kh && s.w + s.padding <= s.kw;
}

LinearShape images(const Conv2dShape& s) { return {s.n, s.c * s.h * s.w, s.o}; }

// Calls f(value, tap) for each value of an image: its place in the image's row of x and the
// place of the weight it meets in one output channel's [c, kh, kw].
template <typename F>
void for_each_value(const Conv2dShape& s, F f) {
  for (int64_t c = 0; c < s.c; ++c) {
    for (int64_t ih = 0; ih < s.h; ++ih) {
      for (int64_t iw = 0; iw < s.w; ++iw) {
        const int64_t value =
            s.channels_last ? (ih * s.w + iw) * s.c + c : (c * s.h + ih) * s.w + iw;
        f(value, (c * s.kh + ih + s.padding) * s.kw + iw + s.padding);
      }
    }
  }
}

// w's weights that the image's values meet, [o, c * h * w] in x's order.
const float* window_weights(const Conv2dShape& s, const float* w, std::vector<float>& out) {
  const int64_t values = s.c * s.h * s.w, taps = s.c * s.kh * s.kw;
  out.resize(static_cast<size_t>(s.o * values));
  for (int64_t o = 0; o < s.o; ++o) {
    float* row = out.data() + o * values;
    const float* wo = w + o * taps;
    for_each_value(s, [&](int64_t value, int64_t tap) { row[value] = wo[tap]; });
  }
  return out.data();
}

void one_window_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                         const float* gy, float* gx, float* gw) {
  Scratch& sc = scratch(ctx, s);
  const float* weights = gx != nullptr ? window_weights(s, w, sc.weights) : nullptr;
  const int64_t values = s.c * s.h * s.w, taps = s.c * s.kh * s.kw;
  if (gw != nullptr) sc.grad_weights.resize(static_cast<size_t>(s.o * values));
  linear_backward(ctx, images(s), gw != nullptr ? x : nullptr, weights, gy, gx,
                  gw != nullptr ? sc.grad_weights.data() : nullptr, nullptr);
  if (gw == nullptr) return;
  std::fill_n(gw, s.o * taps, 0.0f);  // the taps on the padding
  for (int64_t o = 0; o < s.o; ++o) {
    const float* row = sc.grad_weights.data() + o * values;
    float* go = gw + o * taps;
    for_each_value(s, [&](int64_t value, int64_t tap) { go[tap] = row[value]; });
  }
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
  rows.resize(static_cast<size_t>(s.n * s.ho * s.wo * s.c));
  if (s.padding > 0) std::fill(rows.begin(), rows.end(), 0.0f);  // else every row is copied
  for_each_read(s, [&](int64_t row, int64_t pixel) {
    std::copy_n(x + pixel * s.c, s.c, rows.data() + row * s.c);
  });
  return rows.data();
}

}  // namespace

bool conv2d_as_gemm(const Conv2dShape& s) {
  const bool one_by_one = s.kh == 1 && s.kw == 1;
  return (s.channels_last && one_by_one && s.ho * s.wo <= kGemmMaxOutputPixels) ||
         (!one_by_one && one_window(s));
}

void conv2d_gemm_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                         const float* b, float* y) {
  if (s.kh > 1 || s.kw > 1) {
    linear_forward(ctx, images(s), x, window_weights(s, w, scratch(ctx, s).weights), b, y);
    return;
  }
  linear_forward(ctx, pixels(s), gathered(s, x, scratch(ctx, s).rows), w, b, y);
}

void conv2d_gemm_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                          const float* gy, float* gx, float* gw) {
  if (s.kh > 1 || s.kw > 1) {
    one_window_backward(ctx, s, x, w, gy, gx, gw);
    return;
  }
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
