// ZeroRedundancyOptimizer: the partition, the sharded step, consolidation and loading.
#include "engine/distributed/zero_redundancy_optimizer.h"

#include <algorithm>
#include <cctype>
#include <numeric>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "engine/distributed/broadcast_packed.h"
#include "engine/distributed/distributed.h"

namespace dpe {
namespace distributed {
namespace {

constexpr const char* kWho = "ZeroRedundancyOptimizer";

// "state.<i>.<field>" with <i> replaced by map(i), for every such key in an error message (the
// local optimizer names local keys and "parameter <i>"; the user gave global ones).
std::string renumber_message(const std::string& text, const std::vector<size_t>& to_global) {
  std::string out;
  size_t k = 0;
  const auto renumber_after = [&](const std::string& word) {
    if (text.compare(k, word.size(), word) != 0) return false;
    size_t end = k + word.size();
    while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
    if (end == k + word.size() || end - k - word.size() > 9) return false;
    const size_t local = std::stoul(text.substr(k + word.size(), end - k - word.size()));
    if (local >= to_global.size()) return false;
    out += word + std::to_string(to_global[local]);
    k = end;
    return true;
  };
  while (k < text.size()) {
    if (renumber_after("'state.") || renumber_after("parameter ")) continue;
    out += text[k++];
  }
  return out;
}

// The consolidation header of one rank's entries, as int64 words:
// per entry [global index, field length, field chars..., dtype, rank, dims...].
// A dtype in the header's words.
int64_t dtype_code(DType t) {
  switch (t) {
    case DType::kFloat32: return 0;
    case DType::kInt64: return 1;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 3;
  }
  return -1;
}

DType dtype_of_code(int64_t code) {
  for (DType t : kAllDTypes) {
    if (dtype_code(t) == code) return t;
  }
  DPE_THROW("ZeroRedundancyOptimizer: a state header names dtype code " << code
                                                                        << ", which is none");
}

std::vector<int64_t> encode_header(const std::vector<std::pair<size_t, std::string>>& keys,
                                   const StateDict& entries) {
  std::vector<int64_t> words;
  for (size_t e = 0; e < entries.size(); ++e) {
    const auto& [index, field] = keys[e];
    const Tensor& t = entries[e].second;
    words.push_back(static_cast<int64_t>(index));
    words.push_back(static_cast<int64_t>(field.size()));
    for (char c : field) words.push_back(static_cast<unsigned char>(c));
    words.push_back(dtype_code(t.dtype()));
    words.push_back(t.dim());
    for (int64_t d : t.shape()) words.push_back(d);
  }
  return words;
}

struct HeaderEntry {
  size_t index;
  std::string field;
  DType dtype;
  Shape shape;
};

std::vector<HeaderEntry> decode_header(const std::vector<int64_t>& w) {
  std::vector<HeaderEntry> out;
  size_t k = 0;
  while (k < w.size()) {
    HeaderEntry e;
    e.index = static_cast<size_t>(w[k++]);
    const int64_t n = w[k++];
    for (int64_t c = 0; c < n; ++c) e.field += static_cast<char>(w[k++]);
    e.dtype = dtype_of_code(w[k++]);
    std::vector<int64_t> dims(static_cast<size_t>(w[k++]));
    for (int64_t& d : dims) d = w[k++];
    e.shape = Shape(std::move(dims));
    out.push_back(std::move(e));
  }
  return out;
}

std::shared_ptr<ProcessGroup> or_default(std::shared_ptr<ProcessGroup> group) {
  return group ? std::move(group) : default_group();
}

}  // namespace

std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world_size) {
  DPE_CHECK(world_size >= 1, kWho << ": world size " << world_size << " is not positive");
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), size_t{0});
  // Python's sorted(reverse=True) is stable too: equal sizes keep their order.
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> sizes(static_cast<size_t>(world_size), 0);
  std::vector<int> owner(numels.size(), 0);
  for (size_t i : order) {
    // The first rank of least size, as _get_min_index.
    const int r = static_cast<int>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    owner[i] = r;
    sizes[static_cast<size_t>(r)] += numels[i];
  }
  return owner;
}

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<Tensor> params,
                                                 const OptimizerFactory& make_optimizer,
                                                 std::shared_ptr<ProcessGroup> group)
    : Optimizer(std::move(params), 0.0f), group_(or_default(std::move(group))) {
  std::vector<int64_t> numels;
  for (const Tensor& p : params_) numels.push_back(p.numel());
  owner_ = partition_parameters(numels, group_->size());
  // The shards in assignment order (largest first), as PyTorch's param groups per rank.
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  shards_.resize(static_cast<size_t>(group_->size()));
  for (size_t i : order) shards_[static_cast<size_t>(owner_[i])].push_back(i);

  std::vector<Tensor> mine;
  for (size_t i : shards_[static_cast<size_t>(rank())]) mine.push_back(params_[i]);
  if (!mine.empty()) {
    local_ = make_optimizer(std::move(mine));
    DPE_CHECK(local_ != nullptr, kWho << " (rank " << rank() << "): the factory returned null");
    lr_ = local_->lr();
  } else {
    lr_ = make_optimizer({params_[0]})->lr();
  }
}

void ZeroRedundancyOptimizer::step() {
  consolidated_ = false;
  consolidated_state_.clear();
  if (local_) {
    local_->set_lr(lr_);
    local_->step();
  }
  // Every rank, an empty shard's too, joins every owner's broadcast (broadcast_packed skips an
  // empty list on all ranks alike, since all know every shard).
  for (int r = 0; r < group_->size(); ++r) {
    std::vector<Tensor> shard;
    for (size_t i : shards_[static_cast<size_t>(r)]) shard.push_back(params_[i]);
    broadcast_packed(*group_, shard, r);
  }
}

void ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  DPE_CHECK(to >= 0 && to < group_->size(), kWho << ".consolidate_state_dict (rank " << rank()
                                                 << "): to=" << to << " is outside 0.."
                                                 << group_->size() - 1);
  StateDict gathered;
  std::vector<size_t> indices;  // the global parameter index of each gathered entry
  for (int r = 0; r < group_->size(); ++r) {
    const std::vector<size_t>& shard = shards_[static_cast<size_t>(r)];
    StateDict entries;
    std::vector<int64_t> words;
    if (r == rank() && local_) {
      entries = local_->state_dict();
      std::vector<std::pair<size_t, std::string>> keys;
      for (const auto& [name, t] : entries) {
        // state_key checks the form; the local index must name a shard parameter.
        auto [local, field] = state_key(kWho, name);
        DPE_CHECK(local < shard.size(), kWho << " (rank " << rank() << "): the local optimizer's '"
                                             << name << "' names parameter " << local << " of "
                                             << shard.size());
        DPE_CHECK(t.defined(), kWho << " (rank " << rank() << "): the local optimizer's '"
                                    << name << "' is undefined");
        keys.emplace_back(shard[local], field);
      }
      words = encode_header(keys, entries);
    }
    // On the parameters' device, which the group accepts (NCCL takes no host tensor).
    const Device device = params_[0].device();
    Tensor length =
        Tensor::from_vector(std::vector<int64_t>{int64_t(words.size())}, Shape{1}, device);
    group_->broadcast(length, r);
    const int64_t n = length.to_vector<int64_t>()[0];
    if (n == 0) continue;
    Tensor header = r == rank() ? Tensor::from_vector(words, Shape{n}, device)
                                : Tensor::empty(Shape{n}, DType::kInt64, device);
    group_->broadcast(header, r);
    const std::vector<HeaderEntry> decoded = decode_header(header.to_vector<int64_t>());
    std::vector<Tensor> tensors;
    for (size_t e = 0; e < decoded.size(); ++e) {
      const HeaderEntry& h = decoded[e];
      DPE_CHECK(h.index < params_.size(), kWho << ".consolidate_state_dict (rank " << rank()
                                               << "): rank " << r << " sent parameter "
                                               << h.index << " of " << params_.size());
      // The owner's own tensors are copied, so the consolidation is a snapshot.
      Tensor t = r == rank() ? entries[e].second.contiguous()
                             : Tensor::empty(h.shape, h.dtype, params_[h.index].device());
      tensors.push_back(t);
      if (rank() == to) {
        gathered.emplace_back("state." + std::to_string(h.index) + "." + h.field,
                              r == rank() ? t.clone() : t);
        indices.push_back(h.index);
      }
    }
    broadcast_packed(*group_, tensors, r);
  }
  consolidated_ = rank() == to;
  consolidated_state_.clear();
  if (!consolidated_) return;
  // The unsharded optimizer's order: by parameter, each parameter's fields as its optimizer
  // lists them (a stable sort keeps those).
  std::vector<size_t> order(gathered.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return indices[a] < indices[b]; });
  for (size_t e : order) consolidated_state_.push_back(std::move(gathered[e]));
}

StateDict ZeroRedundancyOptimizer::state_dict() const {
  DPE_CHECK(consolidated_,
            "Optimizer state has not been consolidated on this rank. Please call "
            "`consolidate_state_dict(to="
                << rank()
                << ")` on all ranks beforehand if you meant to save the global state.");
  return consolidated_state_;
}

void ZeroRedundancyOptimizer::load_state_dict(const StateDict& state) {
  // Local index of each global parameter this rank owns.
  const std::vector<size_t>& shard = shards_[static_cast<size_t>(rank())];
  std::vector<size_t> local_of(params_.size(), shard.size());
  for (size_t l = 0; l < shard.size(); ++l) local_of[shard[l]] = l;
  StateDict mine;
  for (const auto& [name, t] : state) {
    const auto [i, field] = state_key(kWho, name);  // every rank checks every key's form
    if (local_of[i] == shard.size()) continue;
    mine.emplace_back("state." + std::to_string(local_of[i]) + "." + field, t);
  }
  consolidated_ = false;
  consolidated_state_.clear();
  if (!local_) return;
  try {
    local_->load_state_dict(mine);
  } catch (const std::exception& e) {
    DPE_THROW(renumber_message(e.what(), shard) << " (" << kWho << ", rank " << rank() << ")");
  }
}

}  // namespace distributed
}  // namespace dpe
