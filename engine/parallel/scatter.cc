#include "engine/parallel/scatter.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/autograd/node.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"

namespace dpe {

std::vector<int64_t> chunk_sizes(int64_t n, int64_t chunks) {
  DPE_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: " << chunks);
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

namespace {

void collect_sizes(const Value& v, int64_t dim, std::vector<Shape>& shapes) {
  if (v.is_tensor()) {
    shapes.push_back(v.tensor().shape());
  } else if (v.is_list()) {
    for (const Value& e : v.list()) collect_sizes(e, dim, shapes);
  } else if (v.is_dict()) {
    for (const auto& [k, e] : v.dict()) collect_sizes(e, dim, shapes);
  }
}

// Splits one tensor; the pieces are the outputs of one autograd node whose backward concatenates
// their gradients on the input's device.
std::vector<Tensor> scatter_tensor(const Tensor& x, const std::vector<Device>& devices, int64_t dim,
                                   const std::vector<int64_t>& sizes) {
  const int64_t d = x.shape().normalize_dim(dim);
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Tensor piece = x.narrow(d, start, sizes[k]).detach();
    pieces.push_back(piece.device() == devices[k] && piece.is_contiguous()
                         ? piece
                         : piece.to(devices[k]).contiguous());
    start += sizes[k];
  }
  if (x.requires_grad()) {
    std::vector<Tensor*> outs;
    for (Tensor& p : pieces) outs.push_back(&p);
    const Device home = x.device();
    record("Scatter", {x}, outs, [home, d, sizes](const std::vector<Tensor>& grads) {
      std::vector<Tensor> parts;
      for (size_t k = 0; k < grads.size(); ++k) {
        parts.push_back(grads[k].defined() ? grads[k] : Tensor());
      }
      // Missing gradients count as zero.
      for (size_t k = 0; k < parts.size(); ++k) {
        if (!parts[k].defined()) {
          std::vector<int64_t> dims;
          for (size_t j = 0; j < grads.size(); ++j) {
            if (grads[j].defined()) dims = grads[j].shape().dims();
          }
          dims[d] = sizes[k];
          parts[k] = Tensor::zeros(Shape(dims), DType::kFloat32, home);
        }
      }
      return std::vector<Tensor>{ops::cat(parts, d, &home)};
    });
  }
  return pieces;
}

Value scatter_value(const Value& v, size_t k, const std::vector<std::vector<Tensor>>& pieces,
                    size_t& next) {
  if (v.is_tensor()) return pieces[next++][k];
  if (v.is_list()) {
    ValueList out;
    for (const Value& e : v.list()) out.push_back(scatter_value(e, k, pieces, next));
    return out;
  }
  if (v.is_dict()) {
    ValueDict out;
    for (const auto& [key, e] : v.dict()) out.emplace_back(key, scatter_value(e, k, pieces, next));
    return out;
  }
  return v;  // non-tensor values go to every replica unchanged
}

void scatter_all(const Value& v, const std::vector<Device>& devices, int64_t dim,
                 const std::vector<int64_t>& sizes, std::vector<std::vector<Tensor>>& pieces) {
  if (v.is_tensor()) {
    pieces.push_back(scatter_tensor(v.tensor(), devices, dim, sizes));
  } else if (v.is_list()) {
    for (const Value& e : v.list()) scatter_all(e, devices, dim, sizes, pieces);
  } else if (v.is_dict()) {
    for (const auto& [key, e] : v.dict()) scatter_all(e, devices, dim, sizes, pieces);
  }
}

}  // namespace

int64_t batch_size_of(const Value& input, int64_t dim) {
  std::vector<Shape> shapes;
  collect_sizes(input, dim, shapes);
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
  DPE_CHECK(n > 0, "scatter: the batch is empty (size 0 along dim " << dim << ")");
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
  // Devices with an empty chunk are skipped (a weighted plan may give one nothing).
  std::vector<Device> used;
  std::vector<int64_t> used_sizes;
  for (size_t k = 0; k < plan.size(); ++k) {
    if (plan[k] == 0) continue;
    used.push_back(devices[k]);
    used_sizes.push_back(plan[k]);
  }
  StepProfiler::Scope scope(profiler, devices[0], Phase::kScatter);
  std::vector<std::vector<Tensor>> pieces;
  scatter_all(input, used, dim, used_sizes, pieces);
  Scattered out;
  for (size_t k = 0; k < used.size(); ++k) {
    size_t next = 0;
    out.chunks.push_back(scatter_value(input, k, pieces, next));
  }
  out.devices = used;
  out.sizes = used_sizes;
  return out;
}

}  // namespace dpe
