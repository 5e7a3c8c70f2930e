// Row-wise exponentials for the softmax kernels: oneDNN's JIT exp over blocks of whole rows in a
// scratch the caches hold (256 KiB, the L2's share), instead of a scalar libm call per element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/host_context.h"

namespace dpe::host {

struct PreparedPrimitive;

class ExpRows : public HostContext::CacheEntry {
 public:
  // The blocks for rows of `cols` floats, `rows` in all, cached in ctx under `key` (one key per
  // caller, so that callers with the same shape do not share a scratch mid-use).
  static ExpRows& get(HostContext& ctx, int64_t key, int64_t rows, int64_t cols);
  ~ExpRows() override;

  // For each block of rows: fill(r, e) writes the exponents of row r into e (cols floats), the
  // block is exponentiated in place, then use(r, e) reads row r's exponentials. fill and use run
  // on the block's rows in parallel where the block is large enough, so each may write only what
  // belongs to its row.
  template <typename Fill, typename Use>
  void for_each_block(HostContext& ctx, Fill fill, Use use) {
    float* e = scratch_.data();
    for (int64_t r0 = 0; r0 < rows_; r0 += rows_per_block_) {
      const int64_t n = std::min(rows_per_block_, rows_ - r0);
#pragma omp parallel for if (n * cols_ >= kParallelGrain)
      for (int64_t r = 0; r < n; ++r) fill(r0 + r, e + r * cols_);
      exp_in_place(ctx, n);
#pragma omp parallel for if (n * cols_ >= kParallelGrain)
      for (int64_t r = 0; r < n; ++r) use(r0 + r, e + r * cols_);
    }
  }

 private:
  ExpRows(HostContext& ctx, int64_t rows, int64_t cols);
  void exp_in_place(HostContext& ctx, int64_t block_rows);

  int64_t rows_, cols_, rows_per_block_;
  std::unique_ptr<PreparedPrimitive> exp_, exp_tail_;  // full blocks, the shorter last one
  std::vector<float> scratch_;
};

// The largest of x[0, n), or NaN when one is NaN, in 64 running maxima: GCC leaves a float max
// reduction scalar (one vmaxss after another) even under `omp simd reduction(max)`. A softmax
// whose row maximum is not finite (a NaN, +inf, or every entry -inf) is NaN throughout, as
// torch's: its callers write that themselves, since oneDNN's exp clamps its input and turns a NaN
// into a number.
float max_of(const float* x, int64_t n);

}  // namespace dpe::host
