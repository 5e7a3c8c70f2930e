// Worker: the one thread that runs a device's work, with that device's number of compute threads.
//
// Threading contract: submit() may be called from any thread; tasks run one at a time, in
// submission order, on the worker's own thread, under a DeviceGuard for the worker's device.
// An exception thrown by a task is stored in its future and rethrown by get(); the worker lives on.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

#include <tbb/concurrent_queue.h>

namespace dpe {

class DeviceContext;

class Worker {
 public:
  Worker(DeviceContext* context, int compute_threads);
  ~Worker();  // drains queued tasks, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::future<void> submit(std::function<void()> task);
  // Runs `task` on this worker and waits; runs inline when already on the worker's thread.
  void run(const std::function<void()>& task);
  bool on_worker_thread() const { return std::this_thread::get_id() == thread_.get_id(); }

  int compute_threads() const { return compute_threads_; }
  // Total time spent running tasks, for the busy-time report, including the running task's time
  // so far: a task may signal its caller before it returns (the backward engine does), and the
  // caller's reading must already count it.
  int64_t busy_ns() const;
  // Hand-offs: tasks run so far, and their total wait from submit() until this thread started
  // them (queueing behind earlier tasks, plus waking this thread when it slept). What a
  // multi-device step pays for spreading its work over threads (StepProfiler reports it).
  int64_t handoffs() const { return handoffs_.load(); }
  int64_t handoff_wait_ns() const { return handoff_wait_ns_.load(); }

 private:
  void loop();

  DeviceContext* const context_;
  const int compute_threads_;
  mutable std::mutex busy_mu_;  // busy_ns_ and running_since_ns_ change together
  int64_t busy_ns_ = 0;
  int64_t running_since_ns_ = 0;  // steady-clock start of the running task; 0: idle
  std::atomic<int64_t> handoffs_{0};
  std::atomic<int64_t> handoff_wait_ns_{0};
  struct Task {
    std::packaged_task<void()> fn;
    std::chrono::steady_clock::time_point submitted;
  };
  tbb::concurrent_bounded_queue<Task*> queue_;
  std::thread thread_;
};

}  // namespace dpe
