#include "engine/device/runtime.h"

#include <dlfcn.h>
#include <malloc.h>

#include <algorithm>

#include "engine/core/error.h"
#include "engine/device/device_registry.h"
#include "engine/device/step_observer.h"

namespace dpe {

Runtime& Runtime::get() {
  // Leaked on purpose: device workers must outlive every static tensor destroyed at exit.
  static Runtime* runtime = new Runtime();
  return *runtime;
}

int Runtime::device_count(DeviceType type) const {
  DeviceTypeImpl* impl = find_device_type(type);
  return impl != nullptr ? impl->device_count() : 0;
}

std::string Runtime::device_status(DeviceType type) const {
  DeviceTypeImpl* impl = find_device_type(type);
  return impl != nullptr ? impl->status()
                         : std::string("no ") + device_type_name(type) +
                               " device type is linked into this program";
}

std::vector<Device> Runtime::devices(DeviceType type) const {
  std::vector<Device> out;
  const int n = device_count(type);
  for (int i = 0; i < n; ++i) out.emplace_back(type, i);
  return out;
}

DeviceContext& Runtime::context(Device device) {
  TypeContexts& t = contexts_[static_cast<size_t>(device.type())];
  const int index = device.index();
  if (index < kMaxDevicesPerType) {
    DeviceContext* published = t.published[index].load(std::memory_order_acquire);
    if (published != nullptr) return *published;
  }
  DeviceTypeImpl* impl = find_device_type(device.type());
  DPE_CHECK(impl != nullptr,
            "device " << device << " is not available: " << device_status(device.type()));
  // Asked outside mu_: a type's count may take its own lock, which holds while it retires.
  const int count = std::min(impl->device_count(), kMaxDevicesPerType);
  DPE_CHECK(index < count, impl->unavailable(index));
  std::lock_guard<std::mutex> lock(mu_);
  if (t.owned.size() < static_cast<size_t>(count)) t.owned.resize(count);
  auto& slot = t.owned[index];
  if (!slot) {
    slot = impl->make_context(index);
    t.published[index].store(slot.get(), std::memory_order_release);
  }
  return *slot;
}

void Runtime::retire_contexts(DeviceType type) {
  std::lock_guard<std::mutex> lock(mu_);
  TypeContexts& t = contexts_[static_cast<size_t>(type)];
  for (size_t i = 0; i < t.owned.size(); ++i) {
    t.published[i].store(nullptr, std::memory_order_release);
    if (t.owned[i]) retired_.push_back(std::move(t.owned[i]));
  }
  t.owned.clear();
}

void Runtime::empty_cache() {
  std::vector<DeviceContext*> contexts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (TypeContexts& t : contexts_) {
      for (auto& c : t.owned) {
        if (c) contexts.push_back(c.get());
      }
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

void Runtime::copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                   const StridedView& src) {
  const int64_t bytes = src.numel() * static_cast<int64_t>(src.elem_size);
  if (bytes == 0) return;
  const Device from = src_ctx.device(), to = dst_ctx.device();
  StepObserver* observer = step_observer();
  const bool perform = observer == nullptr || observer->on_copy(from, to, bytes);
  // ggml's rule for buffers: the destination's type first, then the source's.
  DPE_CHECK(
      !perform || dst_ctx.copy(dst_ctx, dst, src_ctx, src) ||
          src_ctx.copy(dst_ctx, dst, src_ctx, src),
      "cannot copy from " << from << " to " << to << ": neither device type copies between them");
  if (from != to) record_copy(from, to, bytes);  // skipped or not, the traffic counts
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
