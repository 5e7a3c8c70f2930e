#include "kernels/host/nll_loss.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpe::host {

namespace {
void check_target(int64_t t, int64_t c) {
  DPE_CHECK(t >= 0 && t < c,
            "nll_loss: target " << t << " is out of bounds for " << c << " classes");
}
}  // namespace

float nll_loss_forward(HostContext&, const float* logp, const int64_t* target, int64_t n,
                       int64_t c) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    check_target(target[i], c);
    total += logp[i * c + target[i]];
  }
  // torch returns NaN for an empty batch (0 / 0).
  return static_cast<float>(-total / static_cast<double>(n));
}

void nll_loss_backward(HostContext&, float gout, const int64_t* target, float* gx, int64_t n,
                       int64_t c) {
  std::fill(gx, gx + n * c, 0.0f);
  const float g = -gout / static_cast<float>(n);
  for (int64_t i = 0; i < n; ++i) {
    check_target(target[i], c);
    gx[i * c + target[i]] = g;
  }
}

}  // namespace dpe::host
