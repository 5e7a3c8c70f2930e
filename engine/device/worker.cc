#include "engine/device/worker.h"

#include <chrono>
#include <memory>

#include "engine/device/device_guard.h"

namespace dpe {

Worker::Worker(DeviceContext* context, int compute_threads)
    : context_(context), compute_threads_(compute_threads), thread_([this] { loop(); }) {}

Worker::~Worker() {
  queue_.push(nullptr);  // sentinel: everything queued before it still runs
  thread_.join();
}

std::future<void> Worker::submit(std::function<void()> task) {
  auto* packaged = new std::packaged_task<void()>(std::move(task));
  std::future<void> result = packaged->get_future();
  queue_.push(packaged);
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
    std::packaged_task<void()>* raw = nullptr;
    queue_.pop(raw);
    if (raw == nullptr) return;
    std::unique_ptr<std::packaged_task<void()>> task(raw);
    const auto start = std::chrono::steady_clock::now();
    (*task)();  // exceptions land in the task's future
    busy_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - start)
                           .count());
  }
}

}  // namespace dpe
