// verify_params_across_processes: a signature per parameter, hashed, gathered, compared.
#include "engine/distributed/verify_params.h"

#include <algorithm>
#include <cstdint>

#include "engine/core/error.h"

namespace dpe {
namespace distributed {

namespace {

// FNV-1a: the same on every rank (std::hash need not be).
uint64_t fnv1a(const std::vector<int64_t>& v) {
  uint64_t h = 1469598103934665603ull;
  for (int64_t x : v) {
    for (int b = 0; b < 8; ++b) {
      h ^= static_cast<uint64_t>(x >> (8 * b)) & 0xffu;
      h *= 1099511628211ull;
    }
  }
  return h;
}

struct ParamSignature {
  std::string name;
  Shape shape;
  bool requires_grad = true;
};

// [ndim, dims..., requires_grad, name length, name bytes...] per parameter: a parameter frozen on
// one rank only would give the ranks different buckets.
std::vector<int64_t> encode(const std::vector<std::pair<std::string, Tensor>>& params) {
  std::vector<int64_t> out;
  for (const auto& [name, t] : params) {
    out.push_back(t.dim());
    for (int64_t d : t.shape()) out.push_back(d);
    out.push_back(t.requires_grad() ? 1 : 0);
    out.push_back(static_cast<int64_t>(name.size()));
    for (char c : name) out.push_back(static_cast<unsigned char>(c));
  }
  return out;
}

std::vector<ParamSignature> decode(const std::vector<int64_t>& v, size_t len) {
  std::vector<ParamSignature> out;
  size_t k = 0;
  auto next = [&]() -> int64_t {
    DPE_CHECK(k < len, "DistributedDataParallel: malformed parameter signature from a peer");
    return v[k++];
  };
  while (k < len) {
    ParamSignature s;
    std::vector<int64_t> dims(static_cast<size_t>(next()));
    for (int64_t& d : dims) d = next();
    s.shape = Shape(dims);
    s.requires_grad = next() != 0;
    const int64_t n = next();
    for (int64_t c = 0; c < n; ++c) s.name.push_back(static_cast<char>(next()));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

void verify_params_across_processes(ProcessGroup& group,
                                    const std::vector<std::pair<std::string, Tensor>>& params,
                                    Device device) {
  if (group.size() == 1) return;
  const std::vector<int64_t> sig = encode(params);
  Tensor header = Tensor::from_vector(
      std::vector<int64_t>{static_cast<int64_t>(params.size()), static_cast<int64_t>(fnv1a(sig)),
                           static_cast<int64_t>(sig.size())},
      Shape{3}, device);
  std::vector<Tensor> headers;
  group.all_gather(header, headers);
  std::vector<std::vector<int64_t>> h;
  for (const Tensor& t : headers) h.push_back(t.to_vector<int64_t>());
  bool same = true;
  int64_t max_len = 0;
  for (const auto& x : h) {
    same = same && x[0] == h[0][0] && x[1] == h[0][1] && x[2] == h[0][2];
    max_len = std::max(max_len, x[2]);
  }
  if (same) return;
  std::vector<int64_t> padded = sig;
  padded.resize(static_cast<size_t>(max_len), 0);
  std::vector<Tensor> all;
  group.all_gather(Tensor::from_vector(padded, Shape{max_len}, device), all);
  std::vector<std::vector<ParamSignature>> ranks;
  for (size_t r = 0; r < all.size(); ++r) {
    ranks.push_back(decode(all[r].to_vector<int64_t>(), static_cast<size_t>(h[r][2])));
  }
  size_t most = 0;
  for (const auto& s : ranks) most = std::max(most, s.size());
  for (size_t i = 0; i < most; ++i) {
    for (size_t r = 1; r < ranks.size(); ++r) {
      const auto& a = ranks[0];
      const auto& b = ranks[r];
      if (i < a.size() && i < b.size()) {
        if (a[i].shape == b[i].shape && a[i].name == b[i].name &&
            a[i].requires_grad == b[i].requires_grad) {
          continue;
        }
        DPE_CHECK(
            a[i].shape != b[i].shape || a[i].name != b[i].name,
            "DistributedDataParallel: DDP expects the same model on every rank, but parameter "
                << i << " (" << a[i].name << ") has requires_grad="
                << (a[i].requires_grad ? "true" : "false") << " on rank 0 and "
                << (b[i].requires_grad ? "true" : "false") << " on rank " << r);
        DPE_THROW(
            "DistributedDataParallel: DDP expects the same model on every rank, but parameter "
            << i << " is " << a[i].name << " with shape " << a[i].shape << " on rank 0 and "
            << b[i].name << " with shape " << b[i].shape << " on rank " << r);
      }
      if (i >= a.size() && i >= b.size()) continue;
      const bool on_zero = i < a.size();
      const ParamSignature& extra = on_zero ? a[i] : b[i];
      DPE_THROW("DistributedDataParallel: DDP expects the same model on every rank, but rank 0 has "
                << a.size() << " parameters and rank " << r << " has " << b.size() << ": parameter "
                << i << " (" << extra.name << " with shape " << extra.shape << ") on rank "
                << (on_zero ? 0 : r) << " has no counterpart on rank " << (on_zero ? r : 0));
    }
  }
  DPE_THROW(
      "DistributedDataParallel: the ranks' parameter signatures differ (hash) but no "
      "difference was found");
}

}  // namespace distributed
}  // namespace dpe
