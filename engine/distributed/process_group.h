// ProcessGroup: the collectives that ranks of one job run together (all_reduce, broadcast,
// all_gather, barrier), the Work handle of an asynchronous collective, and the WorkQueue that
// runs a group's collectives on one communication thread.
//
// Design note "one communication thread": every collective of a group, synchronous or not, is
// queued to the group's WorkQueue and runs there in submission order. Ranks submit collectives in
// the same order, so they meet in the same order on the wire; DDP launches bucket all-reduces from
// backward hooks (all_reduce_async) and waits on them at the end of backward. A synchronous call
// is an asynchronous one followed by wait(). After a failure the group is broken: later
// collectives throw the first error at once rather than desynchronise the ranks.
//
// Threading contract: every method may be called from any thread; the tensors passed to a
// collective must stay alive and untouched until its Work has completed.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {

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

 private:
  void loop();

  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work>>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

class ProcessGroup {
 public:
  ProcessGroup(int rank, int size);
  virtual ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;

  // In place on every rank: `tensor` becomes the reduction of all ranks' tensors.
  // float32 (every op) or int64 (sum, max, min); contiguous; on a host device.
  void all_reduce(Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  virtual std::shared_ptr<Work> all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::kSum) = 0;
  // In place: every rank's `tensor` becomes root's.
  void broadcast(Tensor& tensor, int root = 0);
  virtual std::shared_ptr<Work> broadcast_async(Tensor tensor, int root) = 0;
  // outputs[r] becomes rank r's `input`. An empty `outputs` is filled with size() new tensors;
  // otherwise it must hold size() tensors shaped like `input`.
  virtual void all_gather(const Tensor& input, std::vector<Tensor>& outputs) = 0;
  virtual void barrier() = 0;

 protected:
  // all_gather's outputs: fills an empty list with size() tensors shaped like `input`, or checks
  // the given list (count, shapes, dtypes), naming this rank in the error.
  void prepare_gather_outputs(const Tensor& input, std::vector<Tensor>& outputs) const;

  const int rank_;
  const int size_;
};

// Checks what every collective requires of a tensor; `op` names the collective in the message.
void check_collective_tensor(const char* op, const Tensor& t, int rank);

}  // namespace distributed
}  // namespace dpe
