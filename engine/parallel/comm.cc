#include "engine/parallel/comm.h"

#include "engine/backend/backend.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"

namespace dpe::comm {

namespace {

int64_t total_numel(const std::vector<Shape>& shapes) {
  int64_t n = 0;
  for (const Shape& s : shapes) n += s.numel();
  return n;
}

// Copies each tensor (or zeros for undefined ones) into one flat tensor on their device.
Tensor pack(const std::vector<Tensor>& tensors, const std::vector<Shape>& shapes, Device device) {
  Tensor flat = Tensor::empty(Shape{total_numel(shapes)}, DType::kFloat32, device);
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const int64_t n = shapes[i].numel();
    Tensor slot = flat.narrow(0, offset, n);
    if (tensors[i].defined()) slot.copy_(tensors[i].reshape(Shape{n}));
    else slot.zero_();
    offset += n;
  }
  return flat;
}

std::vector<Tensor> unpack(const Tensor& flat, const std::vector<Shape>& shapes) {
  std::vector<Tensor> out;
  int64_t offset = 0;
  for (const Shape& s : shapes) {
    out.push_back(flat.narrow(0, offset, s.numel()).view(s));
    offset += s.numel();
  }
  return out;
}

}  // namespace

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices) {
  std::vector<std::vector<Tensor>> out(devices.size());
  if (tensors.empty()) return out;
  const Device src = tensors[0].device();
  std::vector<Shape> shapes;
  for (const Tensor& t : tensors) {
    DPE_CHECK(t.device() == src, "broadcast_coalesced: all tensors must be on "
                                     << src << ", found one on " << t.device());
    check_dtype("broadcast_coalesced", t, DType::kFloat32, "every tensor");
    shapes.push_back(t.shape());
  }
  Tensor flat;
  for (size_t k = 0; k < devices.size(); ++k) {
    if (devices[k] == src) {
      for (const Tensor& t : tensors) out[k].push_back(t.detach());
      continue;
    }
    if (!flat.defined()) flat = pack(tensors, shapes, src);
    out[k] = unpack(flat.to(devices[k]), shapes);
  }
  return out;
}

std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& per_device,
                                         const std::vector<Shape>& shapes, Device destination) {
  Tensor sum;
  for (const auto& tensors : per_device) {
    DPE_CHECK(tensors.size() == shapes.size(), "reduce_add_coalesced: " << tensors.size()
                                                   << " tensors for " << shapes.size()
                                                   << " shapes");
    Device where = destination;
    bool any = false;
    for (const Tensor& t : tensors) {
      if (!t.defined()) continue;
      where = t.device();
      any = true;
    }
    if (!any) continue;
    Tensor flat = pack(tensors, shapes, where).to(destination);
    if (!sum.defined()) {
      sum = flat;  // a fresh packed buffer on the destination: safe to add into
      continue;
    }
    DeviceGuard guard(&Runtime::get().context(destination));
    backend_for(destination).add(sum, flat, 1.0f, sum);
  }
  if (!sum.defined()) return std::vector<Tensor>(shapes.size());
  return unpack(sum, shapes);
}

}  // namespace dpe::comm
