// ZeroRedundancyOptimizer: PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer(params,
// optimizer_class, process_group, **defaults) — ZeRO stage 1: the optimizer state is sharded
// across the ranks of a group, the parameters and gradients are not.
//
// Design note "sorted-greedy partition": as PyTorch's _partition_parameters, the parameters are
// taken largest first (numel, descending; a stable sort, so equal sizes keep their order) and
// each goes to the rank with the fewest elements so far (the lowest such rank on a tie). A rank's
// shard lists its parameters in that assignment order; the local optimizer (the factory's, over
// the shard only) numbers them 0, 1, ... in it. Every rank computes the same partition from the
// shapes alone, so nothing is communicated to agree on it. A rank may own no parameter (more ranks
// than parameters): it holds no local optimizer but still takes part in every collective.
//
// Design note "step": gradients are already averaged (DDP); each rank steps its shard with the
// local optimizer (whose lr is set from this one's first, so a scheduler that calls set_lr here
// drives it), then every shard is broadcast from its owner: one broadcast_packed per rank, in rank
// order, so world_size collectives a step rather than one per tensor (PyTorch sends one per
// parameter unless parameters_as_bucket_view).
//
// Design note "consolidated state": consolidate_state_dict(to) is a collective: for each rank in
// turn, the owner broadcasts a header (its entries' keys remapped to global parameter indices,
// dtypes, shapes; int64 words) and then the entries (broadcast_packed). Rank `to` keeps them,
// ordered by global index with each parameter's fields in the local optimizer's order: exactly
// the state_dict of the unsharded optimizer over all parameters ("state.<i>.<field>"), so a
// checkpoint is the same file with or without ZeRO. Unlike PyTorch, whose state_dict() may return
// a stale consolidation, step() and load_state_dict() drop it: state_dict() then throws PyTorch's
// "not consolidated" error rather than silently save moments a step old.
//
// load_state_dict(full) is not a collective: each rank takes its shard's entries, renumbered to
// local indices, and the local optimizer checks and takes them; its errors are rethrown with the
// global keys and indices ("Adam.load_state_dict: 'state.7.exp_avg' is ..."). A malformed key
// fails on every rank; a bad entry fails on its owner only.
//
// Threading contract: as Optimizer (optimizer.h); step() and consolidate_state_dict() are
// collectives, called by one thread per rank at the same point on every rank. Every rank must
// pass the same parameter shapes in the same order (DDP checks that at its construction).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/optim/optimizer.h"

namespace dpe {
namespace distributed {

// owner[i]: the rank that steps parameter i (design note "sorted-greedy partition").
std::vector<int> partition_parameters(const std::vector<int64_t>& numels, int world_size);

class ZeroRedundancyOptimizer : public optim::Optimizer {
 public:
  // PyTorch's optimizer_class plus defaults: builds an optimizer over the given parameters.
  using OptimizerFactory =
      std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> params)>;

  // `group` null: default_group(). The factory builds the local optimizer over this rank's shard
  // (a rank with an empty shard calls it over parameter 0 only to learn the lr, and drops it).
  // lr() starts as the factory's lr.
  ZeroRedundancyOptimizer(std::vector<Tensor> params, const OptimizerFactory& make_optimizer,
                          std::shared_ptr<ProcessGroup> group = nullptr);

  void step() override;  // collective

  // Collective: gathers every rank's state on rank `to` (design note "consolidated state").
  void consolidate_state_dict(int to = 0);
  // On the rank that consolidated, since the last step or load: the unsharded optimizer's state.
  // Elsewhere throws PyTorch's "Optimizer state has not been consolidated on this rank ..." error.
  StateDict state_dict() const override;
  // Takes this rank's shard of a full (unsharded) state dict.
  void load_state_dict(const StateDict& state) override;

  // The partition, for tests and reports: owner(i) of global parameter i, shard(r) the global
  // indices rank r steps (local index order), and this rank's optimizer (null if its shard is
  // empty).
  int owner(size_t i) const { return owner_[i]; }
  const std::vector<size_t>& shard(int rank) const { return shards_[rank]; }
  const optim::Optimizer* local_optimizer() const { return local_.get(); }
  int rank() const { return group_->rank(); }

 private:
  std::shared_ptr<ProcessGroup> group_;
  std::vector<int> owner_;                  // per global parameter
  std::vector<std::vector<size_t>> shards_;  // per rank: global indices
  std::unique_ptr<optim::Optimizer> local_;  // over shards_[rank()]; null when that is empty
  bool consolidated_ = false;
  StateDict consolidated_state_;
};

}  // namespace distributed
}  // namespace dpe
