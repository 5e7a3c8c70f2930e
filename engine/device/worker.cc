#include "engine/device/worker.h"

#include <chrono>
#include <memory>

#include "engine/device/device_guard.h"

namespace dpe {

namespace {
int64_t since_epoch_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
}  // namespace

int64_t Worker::busy_ns() const {
  std::lock_guard<std::mutex> lock(busy_mu_);
  const int64_t running =
      running_since_ns_ == 0 ? 0
                             : since_epoch_ns(std::chrono::steady_clock::now()) - running_since_ns_;
  return busy_ns_ + running;
}

Worker::Worker(DeviceContext* context, int compute_threads)
    : context_(context), compute_threads_(compute_threads), thread_([this] { loop(); }) {}

Worker::~Worker() {
  queue_.push(nullptr);  // sentinel: everything queued before it still runs
  thread_.join();
}

std::future<void> Worker::submit(std::function<void()> task) {
  auto* t = new Task{std::packaged_task<void()>(std::move(task)), std::chrono::steady_clock::now()};
  std::future<void> result = t->fn.get_future();
  queue_.push(t);
  return result;
}

void Worker::run(const std::function<void()>& task) {
  if (on_worker_thread()) {
    task();
    return;
  }
  submit(task).get();
}

void Worker::loop() {
  // The guard also sizes this thread's OpenMP team, which oneDNN and dpe's loops use.
  DeviceGuard guard(context_);
  for (;;) {
    Task* raw = nullptr;
    queue_.pop(raw);
    if (raw == nullptr) return;
    std::unique_ptr<Task> task(raw);
    const auto start = std::chrono::steady_clock::now();
    handoffs_.fetch_add(1);
    handoff_wait_ns_.fetch_add(
        std::chrono::duration_cast<std::chrono::nanoseconds>(start - task->submitted).count());
    {
      std::lock_guard<std::mutex> lock(busy_mu_);
      running_since_ns_ = since_epoch_ns(start);
    }
    task->fn();  // exceptions land in the task's future
    std::lock_guard<std::mutex> lock(busy_mu_);
    busy_ns_ += since_epoch_ns(std::chrono::steady_clock::now()) - running_since_ns_;
    running_since_ns_ = 0;
  }
}

}  // namespace dpe
