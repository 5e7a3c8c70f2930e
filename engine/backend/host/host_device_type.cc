// The host device type's registration with the Runtime, and its options (host_device_options.h).
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "engine/backend/host/host_device.h"
#include "engine/backend/host/host_device_options.h"
#include "engine/core/error.h"
#include "engine/device/device_registry.h"
#include "engine/device/memory_stats.h"

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
  return static_cast<int>(env_whole_number(name, fallback, 1, kMaxHostDevices));
}

// Worker::spin for host devices: spinning pays only while every device's threads can hold a core
// of their own; DPE_HOST_SPIN_US (µs; 0 turns it off) overrides, to measure the difference. How
// long: a wake-up costs 25-45 µs on the machines measured, so up to 2 ms of idling it costs more
// than 2% of the wait. That covers a DataParallel step's serial part on device 0 (reduce-add,
// optimizer step, replicate: ~1 ms for the Mlp), during which the other devices idle; a spin of
// 50 µs let them sleep and pay the wake-up twice a step (the Mlp at batch 256 on 2 devices:
// 1.19-1.41x one device against 1.36-1.47x with 2 ms). Intel's OpenMP spins 200 ms
// (KMP_BLOCKTIME). The rule sees this process only: DDP ranks sharing a machine each decide
// alone, which costs little since a rank's caller runs its one device's work itself and its
// worker stays asleep.
std::chrono::nanoseconds host_worker_spin(int count, int threads) {
  const long us = env_whole_number("DPE_HOST_SPIN_US", -1, 0, 1000000);
  if (us >= 0) return std::chrono::microseconds(us);
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return count * threads <= cores ? std::chrono::milliseconds(2) : std::chrono::microseconds(0);
}

// The host device type as the Runtime sees it: its options, read from the environment on first
// use, and a HostDeviceContext per device.
class HostDeviceType final : public DeviceTypeImpl {
 public:
  int device_count() override { return options().count; }
  std::string status() override { return "ok"; }
  std::string unavailable(int index) override {
    const int count = options().count;
    return "device host:" + std::to_string(index) + " is out of range: " + std::to_string(count) +
           " host device(s) (host:0..host:" + std::to_string(count - 1) +
           "); set DPE_HOST_DEVICES for more";
  }
  std::unique_ptr<DeviceContext> make_context(int index) override {
    const HostDeviceOptions o = options();
    const int threads = default_host_threads(o.count, o.compute_threads);
    const auto spin = host_worker_spin(o.count, threads);
    auto ctx = std::make_unique<HostDeviceContext>(index, threads, o.capacity_bytes);
    ctx->set_worker_spin(spin);
    return ctx;
  }

  HostDeviceOptions options() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!options_) options_ = host_options_from_env();
    return *options_;
  }
  // Returns whether the options changed.
  bool set_options(const HostDeviceOptions& o) {
    std::lock_guard<std::mutex> lock(mu_);
    const bool same = options_ && o.count == options_->count &&
                      o.compute_threads == options_->compute_threads &&
                      o.capacity_bytes == options_->capacity_bytes;
    options_ = o;
    return !same;
  }

 private:
  std::mutex mu_;
  std::optional<HostDeviceOptions> options_;
};

HostDeviceType& host_type() {
  static HostDeviceType* type = new HostDeviceType();  // leaked, as the Runtime
  return *type;
}

const bool registered = [] {
  register_device_type(DeviceType::kHost, host_type());
  return true;
}();

}  // namespace

HostDeviceOptions host_options_from_env() {
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

HostDeviceOptions host_device_options() { return host_type().options(); }

bool store_host_device_options(const HostDeviceOptions& options) {
  return host_type().set_options(options);
}

}  // namespace dpe
