#include "kernels/host/embedding.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

namespace {

// Checked before the parallel loops: an exception must not leave an OpenMP region.
void check_indices(const int64_t* index, int64_t n, int64_t rows) {
  for (int64_t i = 0; i < n; ++i) {
    DPE_CHECK(index[i] >= 0 && index[i] < rows,
              "embedding: index " << index[i] << " is out of range for " << rows << " rows");
  }
}

}  // namespace

void embedding_forward(HostContext&, const float* weight, const int64_t* index, float* y, int64_t n,
                       int64_t rows, int64_t cols) {
  check_indices(index, n, rows);
#pragma omp parallel for if (n * cols >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(y + i * cols, weight + index[i] * cols, static_cast<size_t>(cols) * sizeof(float));
  }
}

void embedding_backward(HostContext&, const int64_t* index, const float* gy, float* gw, int64_t n,
                        int64_t rows, int64_t cols) {
  check_indices(index, n, rows);
#pragma omp parallel for simd if (parallel : rows * cols >= kParallelGrain)
  for (int64_t k = 0; k < rows * cols; ++k) gw[k] = 0.0f;
  // Each thread owns a block of columns and walks every index in order: repeated indices
  // accumulate without races, in the same order whatever the thread count.
  constexpr int64_t kColumnBlock = 64;
  const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (n * cols >= kParallelGrain)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kColumnBlock, j1 = std::min(cols, j0 + kColumnBlock);
    for (int64_t i = 0; i < n; ++i) {
      float* dst = gw + index[i] * cols;
      const float* src = gy + i * cols;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) dst[j] += src[j];
    }
  }
}

void embedding_backward_accumulate(HostContext&, const int64_t* index, const float* gy, float* gw,
                                   int64_t n, int64_t rows, int64_t cols) {
  check_indices(index, n, rows);
  // The positions in order of their row, and of position within a row: each row's run of them.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return index[a] < index[b]; });
  std::vector<int64_t> starts;
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 || index[order[k]] != index[order[k - 1]]) starts.push_back(k);
  }
  starts.push_back(n);
  const int64_t runs = static_cast<int64_t>(starts.size()) - 1;
  // Each row once, by one thread: its sum from zero in the order of i, then added to gw's row, as
  // embedding_backward's row and the engine's sum of the two gradients would be.
#pragma omp parallel if (n * cols >= kParallelGrain)
  {
    std::vector<float> sum(static_cast<size_t>(cols));
#pragma omp for
    for (int64_t run = 0; run < runs; ++run) {
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t k = starts[run]; k < starts[run + 1]; ++k) {
        const float* src = gy + order[k] * cols;
#pragma omp simd
        for (int64_t j = 0; j < cols; ++j) sum[j] += src[j];
      }
      float* dst = gw + index[order[starts[run]]] * cols;
#pragma omp simd
      for (int64_t j = 0; j < cols; ++j) dst[j] += sum[j];
    }
  }
}

}  // namespace dpe::host
