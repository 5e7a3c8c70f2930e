// Reducer: the gradient side of DistributedDataParallel — buckets, the post-accumulate hooks'
// bookkeeping, the bucket all-reduces launched during backward, and the end of backward. See the
// design notes "gradient buckets" and "end of backward" in distributed_data_parallel.h.
//
// Threading contract: construction, check_prior_reduction_finished, prepare_for_backward and
// destruction are called by one thread, not while a backward through the parameters runs. The
// hooks (on_gradient_ready) may fire on any thread (the caller of backward(), or device workers
// for graphs that span devices); a mutex serialises them. bucket_names() and trace() may be called
// from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/autograd/node.h"
#include "engine/distributed/process_group.h"
#include "engine/nn/value.h"
#include "engine/tensor/tensor.h"

namespace dpe {

// What one backward did, for tests and profiling: an observation, not a timing.
struct BucketLaunch {
  size_t bucket = 0;       // index of the bucket (0: the last parameters registered)
  size_t hooks_fired = 0;  // post-accumulate hooks that had fired in this backward at the launch
};

struct BackwardTrace {
  std::vector<BucketLaunch> launches;  // in launch order (always 0, 1, 2, ...)
  size_t hooks_fired = 0;              // hooks fired in this backward so far
  size_t unused_marked = 0;            // parameters marked ready by find_unused_parameters
  size_t written_in_place = 0;         // gradients an op wrote straight into their slots
  int64_t bytes_all_reduced = 0;       // the buckets' payloads (16-bit under a compressing hook)
  bool finished = false;               // every bucket was reduced and written back
};

namespace distributed {

// DDP's communication hooks, PyTorch's ddp_comm_hooks.default_hooks: allreduce_hook (the
// default), bf16_compress_hook and fp16_compress_hook. A compressing hook casts each bucket,
// already divided by the world size in float32, to 16 bits, all-reduces that (2 bytes an element
// on the wire; Gloo and MPI sum each hop in float32 and round once), and copies the sum back into
// the float32 bucket. PyTorch's hook casts first and divides in 16 bits: the same for a
// power-of-two world size, one rounding fewer otherwise.
enum class CommHook { kAllReduce, kBf16Compress, kFp16Compress };
// "allreduce", "bf16_compress", "fp16_compress".
const char* comm_hook_name(CommHook hook);

// DistributedDataParallelOptions' fields that the reducer reads (same names, same meaning; overlap
// as DistributedDataParallel resolved it).
struct ReducerOptions {
  double bucket_cap_mb = 25.0;
  double first_bucket_mb = 1.0;
  bool find_unused_parameters = false;
  bool gradient_as_bucket_view = false;
  // false: every bucket's all-reduce starts when backward ends, not when the bucket is ready
  // (design note "when to overlap" in distributed_data_parallel.h).
  bool overlap = true;
  CommHook comm_hook = CommHook::kAllReduce;
};

class Reducer {
 public:
  // `params`: the module's named parameters in registration order; those that require grad
  // (each once) are reduced, and must be float32. Installs a post-accumulate hook on each.
  Reducer(std::vector<std::pair<std::string, Tensor>> params, std::shared_ptr<ProcessGroup> group,
          const ReducerOptions& options);
  ~Reducer();  // removes its hooks
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // PyTorch's ensure_prior_reduction_finished(): throws when the previous synchronised backward
  // started (a hook fired) but some parameter never became ready.
  void check_prior_reduction_finished();
  // Arms the hooks for the next backward; with find_unused_parameters, finds the parameters that
  // `outputs` do not depend on.
  void prepare_for_backward(const Value& outputs);
  // The post-accumulate hook of parameter `index`.
  void on_gradient_ready(size_t index);
  // PyTorch's register_comm_hook: once, and before the first backward (every rank the same hook).
  void register_comm_hook(CommHook hook);
  CommHook comm_hook() const { return options_.comm_hook; }

  // The parameter names of each bucket, bucket 0 first.
  std::vector<std::vector<std::string>> bucket_names() const;
  // The current (or last) armed backward.
  BackwardTrace trace() const;

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor buffer;               // flat float32 [sum of numels] on the module's device
    Tensor wire;                 // a compressing comm hook's 16-bit copy, while it is reduced
    size_t pending = 0;          // slots not ready yet in this backward
    std::shared_ptr<Work> work;
  };

  Tensor slot(size_t i) const;
  bool is_slot_view(const Tensor& grad, size_t i) const;
  void mark_ready_locked(size_t i, bool used);
  void launch_ready_locked();
  void finalize_locked();
  // Design note "gradient destinations" (engine/autograd/node.h): armed by prepare_for_backward
  // for the parameters the outputs reach and whose first post-accumulate hook is the reducer's;
  // disarmed by finalize, the next prepare_for_backward, or destruction.
  void arm_destinations();
  void disarm_destinations();
  std::string unfinished_message_locked() const;

  std::vector<Tensor> params_;  // requiring grad, in registration order
  // gradient_as_bucket_view: each parameter's slot as its gradient destination (design note
  // "gradient destinations", engine/autograd/node.h), armed from prepare_for_backward to finalize.
  std::vector<std::shared_ptr<GradDestination>> destinations_;
  std::vector<size_t> armed_;  // the parameters whose destination is armed now
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  ReducerOptions options_;
  float inverse_size_ = 1.0f;  // 1 / the group's size: the gradients' scale into the buckets
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;  // within its bucket's buffer, in elements

  mutable std::mutex mu_;
  bool expect_hooks_ = false;      // armed by prepare_for_backward, disarmed by finalize
  bool require_finalize_ = false;  // a hook fired in this backward and finalize has not run
  bool unused_marked_ = false;
  bool hook_registered_ = false;
  bool any_backward_ = false;  // a hook fired once: the comm hook is fixed
  std::vector<size_t> unused_;       // found by the graph walk (find_unused_parameters)
  std::vector<char> ready_;          // per parameter, in this backward
  std::vector<int64_t> local_used_;  // per parameter: 1 when it has a gradient on this rank
  size_t num_ready_ = 0;
  size_t next_bucket_ = 0;
  Tensor used_map_;  // the all-reduced usage map (find_unused_parameters)
  std::shared_ptr<Work> used_work_;
  BackwardTrace trace_;
};

}  // namespace distributed
}  // namespace dpe
