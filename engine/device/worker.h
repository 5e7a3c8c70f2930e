// Worker: the one thread that runs a device's work, with that device's number of compute threads.
//
// Threading contract: submit() may be called from any thread; tasks run one at a time, in
// submission order, on the worker's own thread, under a DeviceGuard for the worker's device.
// An exception thrown by a task is stored in its future and rethrown by get(); the worker lives on.
// try_run_here() lets a thread that would only hand a task over and wait run it itself, as the
// device's work, while the worker is idle; it still runs one task at a time for the device.
//
// Design note "hand-offs": waking a sleeping thread costs ~25 µs on a small VM, more than a toy
// model's whole step, and a DataParallel step hands work across threads several times. So the
// caller runs the first device's share itself (try_run_here) and waits on the others spinning
// first, and an idle worker spins before it sleeps (spin(): 2 ms on host devices, longer than a
// DataParallel step's serial part on device 0, see runtime.cc; 0 where the devices' compute threads
// outnumber the cores, since a spinning thread would then take a core from one computing).
#pragma once

#include <tbb/concurrent_queue.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace dpe {

// Calls `done` until it returns true or `budget` has passed, pausing the core in between; returns
// done()'s last answer. What a waiter does before it sleeps (see "hand-offs" above).
template <class Done>
bool spin_until(Done done, std::chrono::nanoseconds budget) {
  if (done()) return true;
  if (budget.count() <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#else
      std::this_thread::yield();
#endif
    }
    if (done()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
  }
}

class DeviceContext;

class Worker {
 public:
  Worker(DeviceContext* context, std::chrono::nanoseconds spin);
  ~Worker();  // drains queued tasks, then joins
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  std::future<void> submit(std::function<void()> task);
  // Runs `task` on this worker and waits; runs inline when already on the worker's thread.
  void run(const std::function<void()>& task);
  // Runs `task` on the calling thread, under a DeviceGuard for this device and counted in its busy
  // time, when no task is queued on or running on the worker; returns false without running it
  // otherwise (the caller then submits it). Exceptions propagate to the caller. While it runs, the
  // calling thread counts as this worker's thread (on_worker_thread()).
  bool try_run_here(const std::function<void()>& task);
  bool on_worker_thread() const;
  // Waits for `f`, spinning for spin() first; rethrows what the task threw.
  void wait(std::future<void>& f) const;
  // How long this worker, and those waiting on its tasks, spin before sleeping.
  std::chrono::nanoseconds spin() const { return spin_; }

  // Total time spent running tasks, for the busy-time report, including the running task's time
  // so far: a task may signal its caller before it returns (the backward engine does), and the
  // caller's reading must already count it.
  int64_t busy_ns() const;
  // Hand-offs: tasks run so far, and their total wait from submit() until this thread started
  // them (queueing behind earlier tasks, plus waking this thread when it slept). What a
  // multi-device step pays for spreading its work over threads (StepProfiler reports it).
  int64_t handoffs() const { return handoffs_.load(); }
  // Tasks submitted and not yet finished (the running one included).
  int64_t pending() const { return pending_.load(); }
  int64_t handoff_wait_ns() const { return handoff_wait_ns_.load(); }

 private:
  void loop();
  void start_busy();
  void end_busy();

  DeviceContext* const context_;
  const std::chrono::nanoseconds spin_;
  std::atomic<int64_t> pending_{0};  // tasks submitted and not finished
  std::mutex run_mu_;                // held by whoever runs this device's task: one at a time
  mutable std::mutex busy_mu_;       // busy_ns_ and running_since_ns_ change together
  int64_t busy_ns_ = 0;
  int64_t running_since_ns_ = 0;  // steady-clock start of the running task; 0: idle
  std::atomic<int64_t> handoffs_{0};
  std::atomic<int64_t> handoff_wait_ns_{0};
  struct Task {
    std::function<void()> fn;
    std::promise<void> done;
    std::chrono::steady_clock::time_point submitted;
  };
  tbb::concurrent_bounded_queue<Task*> queue_;
  std::thread thread_;
};

}  // namespace dpe
