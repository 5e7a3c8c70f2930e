// ProcessGroup: the collectives that ranks of one job run together (all_reduce, broadcast,
// all_gather, barrier), the Work handle of an asynchronous collective, and the WorkQueue that
// runs a group's collectives on one communication thread.
//
// Flat collectives for sharded data parallel (fully_sharded_data_parallel.h): all_gather_into_tensor
// and reduce_scatter_tensor take one flat tensor holding every rank's chunk, rank r's at offset
// r * chunk, as PyTorch's functions of those names. MPI and NCCL run their own reduce-scatter; Gloo
// has none for arbitrary sizes in its options API, so there it is an all-reduce of which each rank
// keeps its chunk (twice the bytes a ring reduce-scatter moves, and the same result).
//
// Design note "one communication thread": every collective of a group, synchronous or not, is
// queued to the group's WorkQueue and runs there in submission order. Ranks submit collectives in
// the same order, so they meet in the same order on the wire; DDP launches bucket all-reduces from
// backward hooks (all_reduce_async) and waits on them at the end of backward. A synchronous call
// is an asynchronous one followed by wait(). A caller that would only wait may run a collective
// itself (all_reduce_here) while the thread is idle, holding the queue meanwhile: the order is the
// same, and two thread hand-offs are saved. After a failure the group is broken: later
// collectives throw the first error at once rather than desynchronise the ranks. Each collective
// gets a sequence number as it runs (1, 2, ...: the same on every rank), which the group's
// watchdog, when it has one, tracks (design note "collective watchdog" in watchdog.h).
//
// Threading contract: every public method may be called from any thread; the tensors passed to a
// collective must stay alive and untouched until its Work has completed. The run_* overrides and
// describe_failure run on the communication thread only.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {

class Watchdog;

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// The handle of a queued collective.
class Work {
 public:
  // Blocks until the collective has finished; rethrows its error (a dpe::Error naming the op and
  // the rank) if it failed. May be called more than once.
  void wait();
  bool is_completed();

  // Called by the WorkQueue.
  void finish(std::exception_ptr error);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

// A thread that runs queued functions in order, each completing its Work.
class WorkQueue {
 public:
  explicit WorkQueue(std::string name);
  ~WorkQueue();  // finishes the queued work, then joins the thread
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  std::shared_ptr<Work> submit(std::function<void()> fn);
  // Runs fn on the calling thread when nothing is queued or running, and holds the queue while it
  // runs (later submissions wait for it); otherwise submits it. The Work is completed when fn ran
  // here.
  std::shared_ptr<Work> run_here_or_submit(std::function<void()> fn);

 private:
  void loop();
  std::shared_ptr<Work> push_locked(std::function<void()> fn);  // queues fn; mu_ held

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work>>> queue_;
  bool running_ = false;  // an item runs, on the thread or on a caller
  bool stop_ = false;
  std::thread thread_;
};

// The public collectives check their arguments on the caller's thread, then queue the subclass's
// raw collective (run_*) on the group's communication thread. The base owns that thread and the
// "broken" state: once a raw collective fails in a way that desynchronises the ranks, every later
// collective of the group throws the first error at once.
class ProcessGroup {
 public:
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup();

  // Attaches the watchdog that tracks this group's collectives (init_process_group does), before
  // the first collective; it lives as long as the group.
  void set_watchdog(std::shared_ptr<Watchdog> watchdog);

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;
  // Whether a rank waiting in a collective spins on its core (MPI's progress loop) rather than
  // sleeping (Gloo's sockets): DDP then keeps collectives off cores its backward needs.
  virtual bool waits_spin() const { return false; }
  // This group's ranks on this machine: LOCAL_WORLD_SIZE (set by dpe-launch and torchrun) when it
  // is a number from 1 to size(), else size(). The MPI group asks the library.
  virtual int local_size() const;

  // In place on every rank: `tensor` becomes the reduction of all ranks' tensors.
  // float32 (every op) or int64 (sum, max, min); contiguous; on a device the group accepts.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::kSum);
  // all_reduce_async for a caller that would only wait for it: runs on the calling thread when the
  // communication thread is idle (design note "one communication thread"). Host tensors only: a
  // GPU group's collectives need the thread's own device setup.
  std::shared_ptr<Work> all_reduce_here(Tensor tensor, ReduceOp op = ReduceOp::kSum);
  // In place: every rank's `tensor` becomes root's.
  void broadcast(Tensor& tensor, int root = 0);
  std::shared_ptr<Work> broadcast_async(Tensor tensor, int root);
  // outputs[r] becomes rank r's `input`. An empty `outputs` is filled with size() new tensors;
  // otherwise it must hold size() tensors shaped like `input`.
  void all_gather(const Tensor& input, std::vector<Tensor>& outputs);
  // output (numel size() * input.numel(), input's dtype) receives rank r's `input` at offset
  // r * input.numel().
  void all_gather_into_tensor(Tensor& output, const Tensor& input);
  // output (numel input.numel() / size()) becomes this rank's chunk of the reduction of every
  // rank's `input`. float32; op sum, avg, max or min.
  void reduce_scatter_tensor(Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  void barrier();

  // The bytes of the tensors this rank has handed to collectives since the group was made: each
  // all-reduce's and broadcast's tensor, each gather's and reduce-scatter's input. Counted where
  // they are submitted, in their own dtype (a 16-bit bucket counts 2 bytes an element), for the
  // bench's bytes per step. How the library moves them (a ring all-reduce sends 2(n-1)/n of its
  // tensor on each link) is its own.
  int64_t bytes_submitted() const { return bytes_submitted_.load(std::memory_order_relaxed); }

 protected:
  // What a failed raw collective reports. `breaks`: later collectives refuse to run (a lost peer
  // leaves the ranks out of step); false for a usage error. `message` empty: the exception is
  // rethrown unchanged; otherwise a dpe::Error with this message replaces it.
  struct Failure {
    bool breaks = true;
    std::string message;
  };

  // The raw collectives, run on the communication thread in submission order; `tensor` passed the
  // checks. run_all_gather writes rank r's bytes of `input` at offset r * input.nbytes() of
  // `gathered` (numel: size() * input.numel(), input's dtype and device).
  virtual void run_all_reduce(Tensor& tensor, ReduceOp op) = 0;
  virtual void run_broadcast(Tensor& tensor, int root) = 0;
  virtual void run_all_gather(const Tensor& input, Tensor& gathered) = 0;
  // `output` gets this rank's chunk of the reduced `input` (design note "flat collectives"). The
  // default all-reduces a copy of `input` and keeps the chunk.
  virtual void run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op);
  virtual void run_barrier() = 0;
  // Checks that a collective accepts `t`, naming `op` and the rank. Default: host devices.
  virtual void check_tensor(const char* op, const Tensor& t) const;
  // Called on the communication thread when a raw collective of `op` throws `e`. Default: the
  // group breaks, the error is rethrown unchanged.
  virtual Failure describe_failure(const std::string& op, const std::exception& e);
  // The group's watchdog (null without one), for describe_failure's message.
  Watchdog* watchdog() const { return watchdog_.get(); }
  // ReduceOp::kAvg where the library only sums: divides the summed float32 `tensor` by size().
  void divide_by_size(Tensor& tensor) const;

  // The subclass starts the communication thread at the end of its constructor and stops it
  // first thing in its destructor: the thread calls the run_* overrides.
  void start_communication();
  void stop_communication();

  // all_gather's outputs: fills an empty list with size() tensors shaped like `input`, or checks
  // the given list (count, shapes, dtypes), naming this rank in the error.
  void prepare_gather_outputs(const Tensor& input, std::vector<Tensor>& outputs) const;

  const int rank_;
  const int size_;

 private:
  // Queues fn on the communication thread (here: or runs it on the caller, WorkQueue::
  // run_here_or_submit), refusing to run it once the group is broken.
  std::shared_ptr<Work> enqueue(const std::string& op, std::function<void()> fn, bool here = false);
  // all_reduce_async (here: all_reduce_here) after the argument checks.
  std::shared_ptr<Work> start_all_reduce(Tensor tensor, ReduceOp op, bool here);

  std::mutex broken_mu_;
  std::string broken_;  // the first failure that broke the group
  // Collectives started; touched only by whoever runs the queue's current item.
  int64_t seq_ = 0;
  std::shared_ptr<Watchdog> watchdog_;
  std::unique_ptr<WorkQueue> queue_;
  std::atomic<int64_t> bytes_submitted_{0};
  void count(const Tensor& t) {
    bytes_submitted_.fetch_add(static_cast<int64_t>(t.nbytes()), std::memory_order_relaxed);
  }
};

// Checks what every collective requires of a tensor; `op` names the collective in the message.
void check_collective_tensor(const char* op, const Tensor& t, int rank);

}  // namespace distributed
}  // namespace dpe
