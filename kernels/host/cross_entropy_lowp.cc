#include "kernels/host/cross_entropy_lowp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/host/convert.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

namespace {

constexpr int64_t kParallelGrain = 1 << 16;  // elements: below this one thread is faster

// Row r of the 16-bit x, widened into `row` (cols floats).
void widen_row(DType dt, const void* x, int64_t r, int64_t cols, float* row) {
  convert(row, DType::kFloat32, static_cast<const char*>(x) + r * cols * dtype_size(dt), dt, cols);
}

}  // namespace

void cross_entropy_forward_lowp(HostContext&, DType dt, const void* x, const int64_t* target,
                                float* out, float* lse, int64_t rows, int64_t cols,
                                int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) {
    out[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
  std::vector<float> picked(static_cast<size_t>(rows), 0.0f);  // each row's target logit
#pragma omp parallel if (rows * cols >= kParallelGrain)
  {
    std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      widen_row(dt, x, r, cols, row.data());
      // A row with a NaN or +inf, or of -inf, gives NaN, as torch's log_softmax does.
      const float m = vec::max_of(row.data(), cols);
      lse[r] = std::isfinite(m) ? m + std::log(vec::exp_sum(row.data(), cols, m))
                                : std::numeric_limits<float>::quiet_NaN();
      if (target[r] != ignore_index) picked[r] = row[target[r]];
    }
  }
  double total = 0.0;  // in row order, as the float32 kernel adds
  for (int64_t r = 0; r < rows; ++r) {
    if (target[r] != ignore_index) total += picked[r] - lse[r];
  }
  out[0] = static_cast<float>(-total / static_cast<double>(count));  // NaN when nothing counts
}

void cross_entropy_backward_lowp(HostContext&, DType dt, const void* x, const int64_t* target,
                                 const float* lse, const float* gout, void* gx, int64_t rows,
                                 int64_t cols, int64_t ignore_index) {
  const int64_t count = counted_targets("cross_entropy", target, rows, cols, ignore_index);
  if (rows == 0 || cols == 0) return;
  const float s = -gout[0] / static_cast<float>(count);
  const size_t elem = dtype_size(dt);
#pragma omp parallel if (rows * cols >= kParallelGrain)
  {
    std::vector<float> row(static_cast<size_t>(cols)), grad(static_cast<size_t>(cols));
#pragma omp for
    for (int64_t r = 0; r < rows; ++r) {
      if (std::isnan(lse[r])) {  // a row with a NaN or an infinity: NaN, as torch's
        std::fill(grad.begin(), grad.end(), std::numeric_limits<float>::quiet_NaN());
      } else if (target[r] == ignore_index) {
        std::fill(grad.begin(), grad.end(), 0.0f);
      } else {
        widen_row(dt, x, r, cols, row.data());
        vec::exp_scale(row.data(), cols, lse[r], -s, grad.data());
        grad[target[r]] += s;
      }
      convert(static_cast<char*>(gx) + r * cols * elem, dt, grad.data(), DType::kFloat32, cols);
    }
  }
}

}  // namespace dpe::host
