#include "kernels/host/vector_exp.h"

#include <limits>

namespace dpe::host::vec {

namespace {

// The running maximum: v where larger or NaN (a NaN, once in, stays).
template <typename V>
inline V take(V m, V v) {
  return (m < v) | (v != v) ? v : m;
}

inline float take(float m, float v) { return m < v || v != v ? v : m; }

}  // namespace

float max_of(const float* x, int64_t n) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // Two vectors of running maxima, so that one compare does not wait for the other.
  F m0 = splat(neg_inf), m1 = m0;
  int64_t j = 0;
  for (; j + 2 * kLanes <= n; j += 2 * kLanes) {
    m0 = take(m0, load(x + j));
    m1 = take(m1, load(x + j + kLanes));
  }
  if (j + kLanes <= n) {
    m0 = take(m0, load(x + j));
    j += kLanes;
  }
  if (j < n) m1 = take(m1, load_first(x + j, n - j, neg_inf));
  return fold(take(m0, m1), [](auto m, auto v) { return take(m, v); });
}

float exp_sum(const float* x, int64_t n, float shift, const float* next) {
  const F s = splat(shift);
  F acc = splat(0.0f);
  int64_t j = 0;
  if (next != nullptr) {
    // The next row's line at the same offset, one prefetch a vector (a vector is a cache line
    // with AVX-512, half of one with AVX).
    for (; j + kLanes <= n; j += kLanes) {
      __builtin_prefetch(next + j);
      acc += exp(load(x + j) - s);
    }
  }
  for (; j + kLanes <= n; j += kLanes) acc += exp(load(x + j) - s);
  // The tail's missing lanes are -inf: exp gives 0 there.
  if (j < n) acc += exp(load_first(x + j, n - j, -std::numeric_limits<float>::infinity()) - s);
  return sum(acc);
}

float exp_store(const float* x, int64_t n, float shift, float* y) {
  const F s = splat(shift);
  F acc = splat(0.0f);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    const F e = exp(load(x + j) - s);
    store(y + j, e);
    acc += e;
  }
  if (j < n) {
    const F e = exp(load_first(x + j, n - j, -std::numeric_limits<float>::infinity()) - s);
    store_first(y + j, e, n - j);
    acc += e;
  }
  return sum(acc);
}

void exp_scale(const float* x, int64_t n, float shift, float scale, float* y) {
  const F s = splat(shift), k = splat(scale);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) store(y + j, exp(load(x + j) - s) * k);
  if (j < n) store_first(y + j, exp(load_first(x + j, n - j, 0.0f) - s) * k, n - j);
}

}  // namespace dpe::host::vec
