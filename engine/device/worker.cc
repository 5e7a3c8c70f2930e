#include "engine/device/worker.h"

#include <chrono>
#include <exception>
#include <memory>

#include "engine/device/device_guard.h"

namespace dpe {

namespace {
int64_t since_epoch_ns(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// The worker whose task the calling thread is running through try_run_here, if any.
thread_local const Worker* tls_running_here = nullptr;
}  // namespace

int64_t Worker::busy_ns() const {
  std::lock_guard<std::mutex> lock(busy_mu_);
  const int64_t running =
      running_since_ns_ == 0 ? 0
                             : since_epoch_ns(std::chrono::steady_clock::now()) - running_since_ns_;
  return busy_ns_ + running;
}

Worker::Worker(DeviceContext* context, std::chrono::nanoseconds spin)
    : context_(context), spin_(spin), thread_([this] { loop(); }) {}

bool Worker::on_worker_thread() const {
  return tls_running_here == this || std::this_thread::get_id() == thread_.get_id();
}

void Worker::start_busy() {
  std::lock_guard<std::mutex> lock(busy_mu_);
  running_since_ns_ = since_epoch_ns(std::chrono::steady_clock::now());
}

void Worker::end_busy() {
  std::lock_guard<std::mutex> lock(busy_mu_);
  busy_ns_ += since_epoch_ns(std::chrono::steady_clock::now()) - running_since_ns_;
  running_since_ns_ = 0;
}

Worker::~Worker() {
  queue_.push(nullptr);  // sentinel: everything queued before it still runs
  thread_.join();
}

std::future<void> Worker::submit(std::function<void()> task) {
  auto* t = new Task{std::move(task), std::promise<void>(), std::chrono::steady_clock::now()};
  std::future<void> result = t->done.get_future();
  pending_.fetch_add(1);
  queue_.push(t);
  return result;
}

void Worker::run(const std::function<void()>& task) {
  if (on_worker_thread()) {
    task();
    return;
  }
  std::future<void> f = submit(task);
  wait(f);
}

bool Worker::try_run_here(const std::function<void()>& task) {
  if (on_worker_thread()) {
    task();
    return true;
  }
  if (pending_.load() != 0) return false;
  std::unique_lock<std::mutex> running(run_mu_, std::try_to_lock);
  // A task submitted before the lock was taken runs first: this one would overtake it.
  if (!running.owns_lock() || pending_.load() != 0) return false;
  struct Here {  // restores the thread's state however the task ends
    Worker* worker;
    const Worker* previous = tls_running_here;
    explicit Here(Worker* w) : worker(w) {
      tls_running_here = w;
      w->start_busy();
    }
    ~Here() {
      worker->end_busy();
      tls_running_here = previous;
    }
  };
  DeviceGuard guard(context_);
  Here here(this);
  task();
  return true;
}

void Worker::wait(std::future<void>& f) const {
  spin_until([&f] { return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready; },
             spin_);
  f.get();
}

void Worker::loop() {
  // The guard also sizes this thread's OpenMP team, which oneDNN and dpe's loops use.
  DeviceGuard guard(context_);
  for (;;) {
    Task* raw = nullptr;
    if (!spin_until([&] { return queue_.try_pop(raw); }, spin_)) queue_.pop(raw);
    if (raw == nullptr) return;
    std::unique_ptr<Task> task(raw);
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> running(run_mu_);
      const auto start = std::chrono::steady_clock::now();
      handoffs_.fetch_add(1);
      handoff_wait_ns_.fetch_add(
          std::chrono::duration_cast<std::chrono::nanoseconds>(start - task->submitted).count());
      start_busy();
      try {
        task->fn();
      } catch (...) {
        error = std::current_exception();
      }
      end_busy();
      task->fn = nullptr;  // what the task holds is released before its waiter goes on
    }
    pending_.fetch_sub(1);
    // Only now is the worker idle for try_run_here: the waiter may try it as soon as it wakes.
    if (error) {
      task->done.set_exception(error);
    } else {
      task->done.set_value();
    }
  }
}

}  // namespace dpe
