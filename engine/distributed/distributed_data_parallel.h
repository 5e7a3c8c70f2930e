// DistributedDataParallel: PyTorch's nn.parallel.DistributedDataParallel(module, process_group,
// device_ids, output_device, broadcast_buffers, bucket_cap_mb, find_unused_parameters,
// gradient_as_bucket_view) for one process per device, over a ProcessGroup.
//
// Design note "gradient buckets": at construction every rank checks that all ranks hold the same
// parameters (count, names and shapes: an all-gather of a hash, then of the full signature when
// the hashes differ, so every rank throws the same error naming the first difference), then takes
// rank 0's parameters and buffers (one coalesced broadcast per dtype). The parameters that require
// grad are split into buckets in *reverse* registration order (the order backward produces their
// gradients): the first bucket closes once it holds 1 MiB, later ones at bucket_cap_mb. Each bucket
// owns one flat gradient buffer. A post-accumulate hook on every parameter copies its gradient,
// divided by the world size, into its slot, as PyTorch's div_factor does. With
// gradient_as_bucket_view .grad is a view of the slot, and the op that computes a parameter's
// gradient may write it there already divided (linear layers do; design note "gradient
// destinations" in engine/autograd/node.h), so that no pass over it is left. When a bucket's last
// slot is filled, the bucket is launched as all_reduce_async(sum) — but only after every bucket
// with a smaller index, so all ranks queue the same all-reduces in the same order on the group's
// communication thread (design note "one communication thread", process_group.h), while backward
// goes on computing the remaining gradients (or, design note "when to overlap", all of them at the
// end of backward). The buckets live in reducer.{h,cc}, the parameter check in verify_params.h,
// the broadcast in broadcast_packed.h.
//
// Design note "end of backward": the autograd engine has no final callback, so the reducer counts
// ready parameters. The hook that marks the last parameter ready (which also launches the last
// bucket) waits for every bucket's Work, then copies the averaged values back into each .grad
// (views need no copy). It runs inside dpe::backward(), so when backward() returns the gradients
// are averaged — or backward() has thrown the collective's error (a lost rank is named). A
// parameter that never receives a gradient keeps its bucket (and every later one) from
// launching; the next training forward then throws PyTorch's "Expected to have finished reduction
// in the prior iteration ..." error naming those parameters, rather than hang. With
// find_unused_parameters the forward walks the autograd graph from the outputs
// (Node::next_edges) and the first hook of the backward marks the parameters it cannot reach as
// ready with a zero contribution; a usage map is all-reduced with the last bucket so a parameter
// that no rank used keeps an undefined .grad, as in PyTorch. Unlike PyTorch, buckets are not
// rebuilt from the order gradients arrived in during the first iteration.
//
// Design note "when to overlap": PyTorch starts each bucket's all-reduce as soon as the bucket is
// ready, so communication runs beside the rest of backward. That pays where the communication
// has resources of its own (a GPU's copy engines and spare SMs, a free core). On host devices
// whose ranks already give every core a compute thread, an all-reduce can only run by taking a
// core from backward, and over MPI, whose waits spin, a rank that reaches a collective first
// burns a core until its peer arrives: there (Overlap::kAuto) every bucket starts when backward
// ends, when the ranks' cores are free. Measured on 2 cores, Mlp, 2 ranks over MPI: 3.73 against
// 3.83 ms a step at batch 256, 2.16 against 2.19 at 100 (medians of 6 alternating runs); over
// Gloo, whose waits sleep, starting at the end was slower (9.5-10.9 against 9.0-9.4 ms), so
// kAuto keeps overlapping there.
//
// Threading contract: construction, forward, no_sync and destruction are called by one thread,
// and not while a backward through this module runs. The hooks may fire on any thread (the
// caller of backward(), or device workers for graphs that span devices); the reducer serialises
// them with a mutex. backward_trace() and bucket_parameter_names() may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/distributed/reducer.h"
#include "engine/nn/module.h"

namespace dpe {

struct DistributedDataParallelOptions {
  // Empty, or the one device the module lives on (PyTorch: "device_ids can only be None or
  // contain a single element"). Inputs are moved there before the forward. A module whose
  // parameters span several devices (model parallelism in each rank, seed 004's ToyMpModel) takes
  // neither device_ids nor output_device: inputs go to its first parameter's device, the output
  // stays where the module leaves it, and each gradient bucket holds one device's parameters.
  std::vector<Device> device_ids;
  std::optional<Device> output_device;  // default: the module's device (single-device modules)
  // Broadcast rank 0's buffers (running statistics) before each forward in training mode.
  bool broadcast_buffers = true;
  double bucket_cap_mb = 25.0;
  // The first bucket's cap (PyTorch's private dist._DEFAULT_FIRST_BUCKET_BYTES, 1 MiB): small, so
  // the first all-reduce starts early in backward.
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  // When bucket all-reduces start (design note "when to overlap"): kAuto as PyTorch, during
  // backward, except on host devices whose ranks fill the cores with a group whose waits spin.
  enum class Overlap { kAuto, kDuringBackward, kAfterBackward };
  Overlap overlap = Overlap::kAuto;
};

// kAuto's rule (design note "when to overlap"): whether all-reduces start during backward, for a
// module on a host device (or not), a group whose waits spin (or not), this machine's ranks of the
// group, each rank's compute threads and the machine's cores.
bool overlap_during_backward(DistributedDataParallelOptions::Overlap overlap, bool host_module,
                             bool waits_spin, int local_ranks, int threads_per_rank, int cores);

class DistributedDataParallel : public Cloneable<DistributedDataParallel> {
 public:
  // process_group null: the default group (distributed::default_group()). Collective: every rank
  // must construct its DDP at the same point. Throws when the ranks' parameters differ.
  explicit DistributedDataParallel(
      std::shared_ptr<Module> module,
      std::shared_ptr<distributed::ProcessGroup> process_group = nullptr,
      DistributedDataParallelOptions options = {});
  DistributedDataParallel(const DistributedDataParallel&) = default;  // shares the reducer
  ~DistributedDataParallel() override;

  Tensor forward(const Tensor& x) override;
  Value forward_value(const Value& input) override;
  std::string repr() const override;

  Module& module() const { return child("module"); }
  // What the options' `overlap` resolved to: true when all-reduces start during backward.
  bool overlaps_backward() const { return overlap_; }
  // PyTorch's register_comm_hook with one of its default hooks (reducer.h: CommHook), e.g.
  // bf16_compress_hook: 2-byte gradients on the wire. Once, before the first backward; every
  // rank must register the same hook.
  void register_comm_hook(distributed::CommHook hook) { reducer_->register_comm_hook(hook); }
  distributed::CommHook comm_hook() const { return reducer_->comm_hook(); }

  // with ddp.no_sync(): backward passes inside the guard accumulate gradients locally with no
  // communication; the first synchronised backward after it reduces the accumulated gradients.
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallel& ddp);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSyncGuard no_sync() { return NoSyncGuard(*this); }
  bool require_backward_grad_sync() const { return require_backward_grad_sync_; }

  // The parameter names of each bucket, bucket 0 first.
  std::vector<std::vector<std::string>> bucket_parameter_names() const;
  // The current (or last) synchronised backward.
  BackwardTrace backward_trace() const;

 private:
  void sync_buffers();

  std::shared_ptr<distributed::ProcessGroup> group_;
  bool overlap_ = true;
  DistributedDataParallelOptions options_;
  Device device_;  // where inputs go: device_ids[0], or the module's first parameter's device
  bool multi_device_ = false;  // the module's parameters span devices
  std::shared_ptr<distributed::Reducer> reducer_;
  bool require_backward_grad_sync_ = true;
};

}  // namespace dpe
