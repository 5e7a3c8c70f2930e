#include "kernels/host/nll_loss.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpe::host {

int64_t counted_targets(const char* op, const int64_t* target, int64_t n, int64_t c,
                        int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) continue;
    DPE_CHECK(target[i] >= 0 && target[i] < c,
              op << ": target " << target[i] << " is out of bounds for " << c << " classes");
    ++count;
  }
  return count;
}

void nll_loss_forward(HostContext&, const float* logp, const int64_t* target, float* out, int64_t n,
                      int64_t c, int64_t ignore_index) {
  const int64_t count = counted_targets("nll_loss", target, n, c, ignore_index);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] != ignore_index) total += logp[i * c + target[i]];
  }
  // torch returns NaN when nothing counts (0 / 0).
  out[0] = static_cast<float>(-total / static_cast<double>(count));
}

void nll_loss_backward(HostContext&, const float* gout, const int64_t* target, float* gx, int64_t n,
                       int64_t c, int64_t ignore_index) {
  const int64_t count = counted_targets("nll_loss", target, n, c, ignore_index);
  std::fill(gx, gx + n * c, 0.0f);
  const float g = -gout[0] / static_cast<float>(count);
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] != ignore_index) gx[i * c + target[i]] = g;
  }
}

}  // namespace dpe::host
