#include "engine/parallel/scatter.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/core/error.h"
#include "engine/parallel/functions.h"

namespace dpe {

std::vector<int64_t> chunk_sizes(int64_t n, int64_t chunks) {
  DPE_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: " << chunks);
  if (n == 0) return std::vector<int64_t>(static_cast<size_t>(chunks), 0);  // as torch.chunk
  const int64_t each = (n + chunks - 1) / chunks;
  std::vector<int64_t> out;
  for (int64_t start = 0; start < n; start += each) out.push_back(std::min(each, n - start));
  return out;
}

std::vector<int64_t> weighted_chunk_sizes(int64_t n, const std::vector<double>& weights) {
  DPE_CHECK(!weights.empty(), "weighted_chunk_sizes: no weights");
  double total = 0;
  for (double w : weights) {
    DPE_CHECK(w >= 0 && std::isfinite(w), "chunk weights must be finite and >= 0, got " << w);
    total += w;
  }
  DPE_CHECK(total > 0, "chunk weights must not all be zero");
  std::vector<int64_t> sizes(weights.size());
  std::vector<std::pair<double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double exact = static_cast<double>(n) * weights[i] / total;
    sizes[i] = static_cast<int64_t>(std::floor(exact));
    given += sizes[i];
    remainders.emplace_back(exact - static_cast<double>(sizes[i]), i);
  }
  std::stable_sort(remainders.begin(), remainders.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t i = 0; given < n; ++i, ++given) ++sizes[remainders[i % remainders.size()].second];
  return sizes;
}

int64_t batch_size_of(const Value& input, int64_t dim) {
  std::vector<Shape> shapes;
  input.for_each_tensor([&](const Tensor& t) { shapes.push_back(t.shape()); });
  if (shapes.empty()) return -1;
  int64_t n = -1;
  for (const Shape& s : shapes) {
    const int64_t size = s[dim];
    DPE_CHECK(n < 0 || size == n,
              "scatter: every tensor of the input must have the same size along dim "
                  << dim << ", but found " << n << " and " << size << " (shape " << s << ")");
    n = size;
  }
  return n;
}

Scattered scatter(const Value& input, const std::vector<Device>& devices, int64_t dim,
                  const std::vector<int64_t>* sizes, StepProfiler* profiler) {
  DPE_CHECK(!devices.empty(), "scatter: no devices given");
  const int64_t n = batch_size_of(input, dim);
  if (n < 0) return {std::vector<Value>(devices.size(), input), devices, {}};
  std::vector<int64_t> plan;
  if (sizes != nullptr) {
    DPE_CHECK(sizes->size() <= devices.size(),
              "scatter: " << sizes->size() << " chunk sizes for " << devices.size() << " devices");
    DPE_CHECK(std::accumulate(sizes->begin(), sizes->end(), int64_t{0}) == n,
              "scatter: chunk sizes sum to "
                  << std::accumulate(sizes->begin(), sizes->end(), int64_t{0})
                  << " but the batch has " << n);
    for (size_t k = 0; k < sizes->size(); ++k) {
      DPE_CHECK((*sizes)[k] >= 0, "scatter: negative chunk size " << (*sizes)[k]);
    }
    plan = *sizes;
  } else {
    plan = chunk_sizes(n, static_cast<int64_t>(devices.size()));
  }
  // Devices with an empty chunk are skipped (a weighted plan may give one nothing), except for an
  // empty batch, which every device runs on, as PyTorch's scatter gives each an empty chunk.
  std::vector<Device> used;
  std::vector<int64_t> used_sizes;
  for (size_t k = 0; k < plan.size(); ++k) {
    if (plan[k] == 0 && n > 0) continue;
    used.push_back(devices[k]);
    used_sizes.push_back(plan[k]);
  }
  StepProfiler::Scope scope(profiler, devices[0], Phase::kScatter);
  // pieces[j][k]: the j-th tensor of the input (in for_each_tensor's order) on used[k].
  std::vector<std::vector<Tensor>> pieces;
  input.for_each_tensor(
      [&](const Tensor& t) { pieces.push_back(Scatter::apply(t, used, used_sizes, dim)); });
  Scattered out;
  for (size_t k = 0; k < used.size(); ++k) {
    size_t next = 0;  // map_tensors visits the tensors in the same order
    out.chunks.push_back(input.map_tensors([&](const Tensor&) { return Value(pieces[next++][k]); }));
  }
  out.devices = used;
  out.sizes = used_sizes;
  return out;
}

}  // namespace dpe
