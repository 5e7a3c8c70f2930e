// FullyShardedDataParallel: PyTorch's torch.distributed.fsdp.FullyShardedDataParallel(module,
// process_group, sharding_strategy, auto_wrap_policy) with use_orig_params=False, for one process
// per device: each rank keeps 1/world of every parameter, its gradient and (through the optimizer
// over parameters()) its optimizer state, as ZeRO's stages 2 and 3.
//
// Design note "units and flat parameters": at construction every rank checks that all ranks hold
// the same parameters and takes rank 0's (as DDP). The submodules for which auto_wrap_policy
// returns true (the outermost ones) become units of their own, replaced in their parent by a
// wrapper; the root unit holds every other parameter. A unit's parameters are laid end to end in
// one flat buffer, padded to a multiple of the world size; rank r keeps elements
// [r * S, (r + 1) * S) of it as a leaf (the "flat parameter", named flat_param_<unit>, unit 0 the
// root) and these are this module's parameters(), the only ones an optimizer sees. The module's
// own parameters become views of the unit's gathered buffer, leaves of their own that require
// grad, so the wrapped module's forward code is unchanged.
//
// Design note "gather, free, reduce-scatter" (SHARD_GRAD_OP and FULL_SHARD):
// - before a unit's forward its flat parameters are all-gathered into the gathered buffer;
// - FULL_SHARD frees the buffer when a non-root unit's forward returns (the storage goes back to
//   the allocator while the views and the autograd graph keep their handles, storage.h) and an
//   identity node on the unit's output gathers it again when backward reaches the unit;
//   SHARD_GRAD_OP and the root unit keep it until the unit's backward ends;
// - each view's gradient, when autograd has accumulated it, is copied into the unit's flat
//   gradient; when the last one arrives the flat gradient is reduce-scattered (averaged over the
//   ranks, as DDP averages) into this rank's flat_param .grad and the gathered buffer is freed.
// Every rank runs the same graph on one device, so the collectives meet in the same order.
// Memory categories follow the ZeRO paper's accounting of model states: the flat parameters,
// their gradients and the optimizer state are parameters, gradients and optimizer state; the
// gathered buffers are parameters under SHARD_GRAD_OP (ZeRO-2 keeps the parameters whole) and
// communication under FULL_SHARD (ZeRO-3's transient buffers), as the flat gradients waiting for
// their reduce-scatter are. Unlike PyTorch there is no prefetch: each all-gather runs when its unit is
// reached. Every parameter of a unit must receive a gradient in each backward (DDP without
// find_unused_parameters); a unit left half-reduced makes the next forward throw, naming it.
//
// Design note "full state dicts": full_state_dict() gathers every unit and returns the unsharded
// module's state_dict (same names, order, shapes: the checkpoint files are a plain model's), and
// load_full_state_dict takes one back. The optimizer's state over the flat parameters converts the
// same way (full_optim_state_dict: keys state.<index of the parameter in the unwrapped module's
// parameters()>.<field>, as the optimizer over the unwrapped module would hold them).
//
// Threading contract: construction, forward and the state-dict functions are collectives: every
// rank calls them at the same point, from the thread that drives training, and not while a
// backward through this module runs. The gradient hooks run inside backward on that rank.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/nn/module.h"

namespace dpe {

// PyTorch's ShardingStrategy members of the same names.
enum class ShardingStrategy { kFullShard, kShardGradOp };
const char* sharding_strategy_name(ShardingStrategy s);  // "FULL_SHARD", "SHARD_GRAD_OP"

struct FullyShardedDataParallelOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::kFullShard;
  // Which submodules become units of their own (the outermost matches; PyTorch's
  // ModuleWrapPolicy). Empty: the whole module is one unit.
  std::function<bool(const Module&)> auto_wrap_policy;
};

namespace distributed {
struct FsdpState;  // fully_sharded_data_parallel.cc
}

class FullyShardedDataParallel : public Cloneable<FullyShardedDataParallel> {
 public:
  // process_group null: the default group. Throws when the ranks' parameters differ, when the
  // module spans devices, or when a parameter does not require grad.
  explicit FullyShardedDataParallel(std::shared_ptr<Module> module,
                                    std::shared_ptr<distributed::ProcessGroup> process_group = nullptr,
                                    FullyShardedDataParallelOptions options = {});
  FullyShardedDataParallel(const FullyShardedDataParallel&) = default;  // shares the units

  Tensor forward(const Tensor& x) override;
  Value forward_value(const Value& input) override;
  std::string repr() const override;

  // The wrapped module, for its forward; its parameters are views of the gathered buffers, valid
  // only inside this module's forward and backward.
  Module& module() const;
  ShardingStrategy sharding_strategy() const;
  // "" for the root unit, then each wrapped submodule's name ("h.0"), in flat_param order.
  std::vector<std::string> unit_names() const;

  // torch's FSDP.clip_grad_norm_: the 2-norm over every rank's flat gradients together (an
  // all-reduce of the squares), each scaled by max_norm / (total + 1e-6) when that is below 1.
  // A collective; returns the total norm before clipping.
  float clip_grad_norm_(float max_norm);

  // Collectives (design note "full state dicts"); every rank gets the full dict.
  StateDict full_state_dict() const;
  void load_full_state_dict(const StateDict& state);
  // `sharded`: the state_dict() of an optimizer over parameters(). Returns it keyed as an
  // optimizer over the unwrapped module's parameters() would hold it.
  StateDict full_optim_state_dict(const StateDict& sharded) const;
  // The inverse, for the optimizer's load_state_dict; not a collective. Throws naming the key of
  // an entry that names no parameter or whose shape is not its parameter's.
  StateDict shard_optim_state_dict(const StateDict& full) const;

 private:
  std::shared_ptr<distributed::FsdpState> state_;
};

}  // namespace dpe
