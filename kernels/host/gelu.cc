#include "kernels/host/gelu.h"

#include "kernels/host/elementwise.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

namespace {

// 1 + tanh(u) = 2 / (1 + exp(-2u)), so y = x / (1 + exp(-2u)) with u = sqrt(2/pi) (x + 0.044715
// x^3): one exp and one division a vector, in registers (oneDNN's JIT GELU took 2-3 times its
// memory-bound time, its backward more). The sigmoid form also keeps the far negative tail
// accurate, where 1 + tanh(u) cancels.
constexpr float kC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kA = 0.044715f;

// exp(-2u) at x: +inf far below 0, where y is x / inf = -0, as torch's.
inline vec::F exp_minus_2u(vec::F x) {
  return vec::exp(vec::splat(-2.0f * kC) * (x + vec::splat(kA) * x * x * x));
}

inline vec::F gelu(vec::F x) { return x / (vec::splat(1.0f) + exp_minus_2u(x)); }

// d/dx [x s(2u)] = s + x * 2 s (1 - s) du/dx, with s = 1 / (1 + e) and 1 - s = e s; where e is
// +inf, s = 0 and so is s (1 - s) (not inf * 0).
inline vec::F gelu_grad(vec::F x, vec::F gy) {
  const vec::F e = exp_minus_2u(x);
  const vec::F one = vec::splat(1.0f);
  const vec::F s = one / (one + e);
  const vec::F es2 = e == vec::splat(__builtin_inff()) ? vec::splat(0.0f) : (e * s) * s;
  const vec::F du = vec::splat(2.0f * kC) * (one + vec::splat(3.0f * kA) * x * x);
  return gy * (s + x * es2 * du);
}

// f(vectors of x[i...]) for every vector of the n floats, the last one partial.
template <typename F>
void for_each_vector(int64_t n, F f) {
  const int64_t full = n / vec::kLanes;
#pragma omp parallel for if (n >= kParallelGrain)
  for (int64_t v = 0; v < full; ++v) f(v * vec::kLanes, vec::kLanes);
  if (full * vec::kLanes < n) f(full * vec::kLanes, n - full * vec::kLanes);
}

}  // namespace

void gelu_forward(HostContext&, const float* x, float* y, int64_t n) {
  for_each_vector(n, [&](int64_t i, int64_t lanes) {
    vec::store_n(y + i, gelu(vec::load_n(x + i, lanes, 0.0f)), lanes);
  });
}

void gelu_backward(HostContext&, const float* x, const float* gy, float* gx, int64_t n) {
  for_each_vector(n, [&](int64_t i, int64_t lanes) {
    vec::store_n(gx + i,
                 gelu_grad(vec::load_n(x + i, lanes, 0.0f), vec::load_n(gy + i, lanes, 0.0f)),
                 lanes);
  });
}

}  // namespace dpe::host
