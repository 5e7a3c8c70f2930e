#include "engine/device/runtime.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/host/host_device.h"
#include "engine/core/error.h"
#include "engine/device/op_trace.h"

namespace dpe {

namespace {

// The whole number in environment variable `name`, between lo and hi; `fallback` when unset.
long env_whole_number(const char* name, long fallback, long lo, long hi) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  DPE_CHECK(end != nullptr && *end == '\0' && v >= lo && v <= hi,
            name << "='" << text << "' is not a whole number between " << lo << " and " << hi);
  return v;
}

int parse_positive_env(const char* name, int fallback) {
  return static_cast<int>(env_whole_number(name, fallback, 1, Runtime::kMaxHostDevices));
}

// Worker::spin for host devices: spinning pays only while every device's threads can hold a core
// of their own; DPE_HOST_SPIN_US (µs; 0 turns it off) overrides, to measure the difference. How
// long: a wake-up costs 25-45 µs on the VMs measured, so up to 2 ms of idling it costs more than
// 2% of the wait. That covers a DataParallel step's serial part on device 0 (reduce-add, optimizer
// step, replicate: ~1 ms for the Mlp), during which the other devices idle; with 50 µs they slept
// and paid the wake-up twice a step (the Mlp at batch 256 on 2 devices: 1.19-1.41x one device
// against 1.36-1.47x, three alternating runs). Intel's OpenMP spins 200 ms (KMP_BLOCKTIME). The
// rule sees this process only: DDP ranks sharing a machine each decide alone, which costs little
// since a rank's caller runs its one device's work itself and its worker stays asleep.
std::chrono::nanoseconds host_worker_spin(int count, int threads) {
  const long us = env_whole_number("DPE_HOST_SPIN_US", -1, 0, 1000000);
  if (us >= 0) return std::chrono::microseconds(us);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return count * threads <= cores ? std::chrono::milliseconds(2) : std::chrono::microseconds(0);
}

}  // namespace

Runtime& Runtime::get() {
  // Leaked on purpose: device workers must outlive every static tensor destroyed at exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Runtime::Runtime() : host_options_(host_options_from_env()) {}

HostDeviceOptions Runtime::host_options_from_env() {
  HostDeviceOptions o;
  o.count = parse_positive_env("DPE_HOST_DEVICES", 2);
  o.compute_threads = parse_positive_env("DPE_HOST_THREADS", 0);
  if (const char* mem = std::getenv("DPE_HOST_DEVICE_MEMORY"); mem != nullptr && *mem != '\0') {
    o.capacity_bytes = parse_memory_size(mem, "DPE_HOST_DEVICE_MEMORY");
    // 0 would read as "no cap" (HostDeviceOptions' default) while it asks for none at all.
    DPE_CHECK(o.capacity_bytes > 0, "DPE_HOST_DEVICE_MEMORY='"
                                        << mem
                                        << "' is not a capacity: give at least 1 byte (e.g. "
                                           "512MiB), or unset it for no cap");
  }
  return o;
}

int Runtime::host_device_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_options_.count;
}

HostDeviceOptions Runtime::host_options() const {
  std::lock_guard<std::mutex> lock(mu_);
  return host_options_;
}

int Runtime::cuda_device_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (cuda_count_ < 0) cuda_count_ = cuda::visible_device_count();
  return cuda_count_;
}

void Runtime::set_host_devices(const HostDeviceOptions& options) {
  DPE_CHECK(
      options.count >= 1 && options.count <= kMaxHostDevices,
      "host device count must be between 1 and " << kMaxHostDevices << ", got " << options.count);
  DPE_CHECK(options.compute_threads >= 0, "compute threads must be >= 0");
  std::lock_guard<std::mutex> lock(mu_);
  const bool same_shape = options.compute_threads == host_options_.compute_threads &&
                          options.capacity_bytes == host_options_.capacity_bytes &&
                          options.count == host_options_.count;
  if (!same_shape) {
    // Thread counts depend on the device count, so every existing context is re-created lazily.
    for (size_t i = 0; i < host_contexts_.size(); ++i) {
      host_published_[i].store(nullptr, std::memory_order_release);
      if (host_contexts_[i]) retired_.push_back(std::move(host_contexts_[i]));
    }
    host_contexts_.clear();
  }
  host_options_ = options;
}

void Runtime::set_host_device_count(int count) {
  HostDeviceOptions o = host_options();
  o.count = count;
  set_host_devices(o);
}

void Runtime::empty_cache() {
  std::vector<DeviceContext*> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : host_contexts_) {
      if (c) contexts.push_back(c.get());
    }
    for (auto& c : cuda_contexts_) {
      if (c) contexts.push_back(c.get());
    }
  }
  for (DeviceContext* c : contexts) c->empty_cache();
  malloc_trim(0);  // glibc's heap
  // TCMalloc (bazel/third_party/tcmalloc.BUILD) keeps freed pages until told; malloc_trim does not
  // reach it. Looked up rather than linked, so that a build with glibc's malloc needs nothing.
  using Release = void (*)();
  if (auto release =
          reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "MallocExtension_ReleaseFreeMemory"))) {
    release();
  }
}

std::string Runtime::cuda_status() const { return cuda::device_count_status(); }

DeviceContext& Runtime::context(Device device) {
  if (device.is_cuda()) {
    const int count = cuda_device_count();
    DPE_CHECK(device.index() < count, "device " << device << " is not available: " << count
                                                << " CUDA device(s) visible ("
                                                << cuda::device_count_status()
                                                << "); host devices remain the default backend");
    std::lock_guard<std::mutex> lock(mu_);
    if (cuda_contexts_.size() < static_cast<size_t>(count)) cuda_contexts_.resize(count);
    auto& slot = cuda_contexts_[device.index()];
    if (!slot) slot = cuda::make_device_context(device.index());
    return *slot;
  }
  if (device.index() >= 0 && device.index() < kMaxHostDevices) {
    DeviceContext* published = host_published_[device.index()].load(std::memory_order_acquire);
    if (published != nullptr) return *published;
  }
  std::lock_guard<std::mutex> lock(mu_);
  DPE_CHECK(device.index() < host_options_.count,
            "device " << device << " is out of range: " << host_options_.count
                      << " host device(s) (host:0..host:" << host_options_.count - 1
                      << "); set DPE_HOST_DEVICES for more");
  if (host_contexts_.size() < static_cast<size_t>(host_options_.count)) {
    host_contexts_.resize(host_options_.count);
  }
  auto& slot = host_contexts_[device.index()];
  if (!slot) {
    const int threads = default_host_threads(host_options_.count, host_options_.compute_threads);
    const auto spin = host_worker_spin(host_options_.count, threads);  // may throw: before the slot
    slot =
        std::make_unique<HostDeviceContext>(device.index(), threads, host_options_.capacity_bytes);
    slot->set_worker_spin(spin);
    if (device.index() < kMaxHostDevices) {  // always, while counts are capped at that
      host_published_[device.index()].store(slot.get(), std::memory_order_release);
    }
  }
  return *slot;
}

std::vector<Device> Runtime::host_devices() const {
  std::vector<Device> out;
  for (int i = 0; i < host_device_count(); ++i) out.emplace_back(DeviceType::kHost, i);
  return out;
}

std::vector<Device> Runtime::cuda_devices() const {
  std::vector<Device> out;
  for (int i = 0; i < cuda_device_count(); ++i) out.emplace_back(DeviceType::kCuda, i);
  return out;
}

void Runtime::copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                   const StridedView& src) {
  const int64_t bytes = src.numel() * static_cast<int64_t>(src.elem_size);
  if (bytes == 0) return;
  if (!trace_copy(src_ctx.device(), dst_ctx.device(), bytes)) {
    // A trace that skips the work (engine/device/op_trace.h) still counts the traffic.
    if (dst_ctx.device() != src_ctx.device()) record_copy(src_ctx.device(), dst_ctx.device(), bytes);
    return;
  }
  // ggml's rule for buffers: the destination's type first, then the source's.
  DPE_CHECK(dst_ctx.copy(dst_ctx, dst, src_ctx, src) || src_ctx.copy(dst_ctx, dst, src_ctx, src),
            "cannot copy from " << src_ctx.device() << " to " << dst_ctx.device()
                                << ": neither device type copies between them");
  if (dst_ctx.device() != src_ctx.device()) record_copy(src_ctx.device(), dst_ctx.device(), bytes);
}

void Runtime::copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx, const void* src,
                   size_t bytes) {
  copy(dst_ctx, dst, src_ctx, StridedView::bytes(src, bytes));
}

void Runtime::record_copy(Device src, Device dst, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  copies_[{src, dst}] += bytes;
}

CopyMatrix Runtime::copy_matrix() const {
  std::lock_guard<std::mutex> lock(mu_);
  return copies_;
}

int64_t Runtime::copied_bytes(Device src, Device dst) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = copies_.find({src, dst});
  return it == copies_.end() ? 0 : it->second;
}

void Runtime::reset_copy_stats() {
  std::lock_guard<std::mutex> lock(mu_);
  copies_.clear();
}

}  // namespace dpe
