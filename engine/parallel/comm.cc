#include "engine/parallel/comm.h"

#include "engine/backend/dispatch.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/device/runtime.h"
#include "engine/tensor/concat.h"

namespace dpe::comm {

namespace {

// The slots of `specs` grouped by dtype, in order of first appearance: one packed buffer each,
// since a buffer holds one dtype.
std::vector<std::vector<size_t>> groups_by_dtype(const std::vector<TensorSpec>& specs) {
  std::vector<DType> dtypes;
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t g = 0;
    while (g < dtypes.size() && dtypes[g] != specs[i].dtype) ++g;
    if (g == dtypes.size()) {
      dtypes.push_back(specs[i].dtype);
      groups.emplace_back();
    }
    groups[g].push_back(i);
  }
  return groups;
}

// Copies the tensors of one group (zeros for undefined ones) into one flat tensor on `device`.
Tensor pack(const std::vector<Tensor>& tensors, const std::vector<TensorSpec>& specs,
            const std::vector<size_t>& group, Device device) {
  int64_t total = 0;
  for (size_t i : group) total += specs[i].shape.numel();
  Tensor flat = Tensor::empty(Shape{total}, specs[group[0]].dtype, device);
  int64_t offset = 0;
  for (size_t i : group) {
    const int64_t n = specs[i].shape.numel();
    Tensor slot = flat.narrow(0, offset, n);
    if (tensors[i].defined())
      slot.copy_(tensors[i].reshape(Shape{n}));
    else
      slot.zero_();
    offset += n;
  }
  return flat;
}

// The tensors of one group, on device `from`, packed into one flat tensor on `to`. Between host
// devices straight into the destination, slot by slot: each byte is copied once. Elsewhere packed
// where they are and moved as one transfer, since each copy across a link (PCIe, NVLink) is a
// transfer of its own that waits for both devices.
Tensor pack_to(const std::vector<Tensor>& tensors, const std::vector<TensorSpec>& specs,
               const std::vector<size_t>& group, Device from, Device to) {
  if (from.is_host() && to.is_host()) return pack(tensors, specs, group, to);
  return pack(tensors, specs, group, from).to(to);
}

// The inverse of pack: out[i] becomes a view of `flat` for every slot i of the group.
void unpack(const Tensor& flat, const std::vector<TensorSpec>& specs,
            const std::vector<size_t>& group, std::vector<Tensor>& out) {
  int64_t offset = 0;
  for (size_t i : group) {
    const Shape& s = specs[i].shape;
    out[i] = flat.narrow(0, offset, s.numel()).view(s);
    offset += s.numel();
  }
}

}  // namespace

std::vector<TensorSpec> specs_of(const std::vector<Tensor>& tensors) {
  std::vector<TensorSpec> specs;
  for (const Tensor& t : tensors) specs.push_back({t.shape(), t.dtype()});
  return specs;
}

std::vector<Tensor> scatter(const Tensor& x, const std::vector<Device>& devices,
                            const std::vector<int64_t>& sizes, int64_t dim) {
  DPE_CHECK(devices.size() == sizes.size(),
            "scatter: " << sizes.size() << " sizes for " << devices.size() << " devices");
  const int64_t d = x.shape().normalize_dim(dim);
  // Each piece keeps x's layout (a channels-last batch stays so on every device), as PyTorch's.
  const MemoryFormat format = x.suggest_memory_format();
  std::vector<Tensor> pieces;
  int64_t start = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Tensor piece = x.narrow(d, start, sizes[k]).detach();
    pieces.push_back(piece.device() == devices[k] && piece.is_contiguous(format)
                         ? piece
                         : piece.to(devices[k], format));
    start += sizes[k];
  }
  return pieces;
}

Tensor gather(const std::vector<Tensor>& xs, Device destination, int64_t dim) {
  return concat("gather", xs, dim, &destination);
}

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices) {
  std::vector<std::vector<Tensor>> out(devices.size());
  if (tensors.empty()) return out;
  const Device src = tensors[0].device();
  for (const Tensor& t : tensors) {
    DPE_CHECK(t.device() == src, "broadcast_coalesced: all tensors must be on "
                                     << src << ", found one on " << t.device());
  }
  const std::vector<TensorSpec> specs = specs_of(tensors);
  const auto groups = groups_by_dtype(specs);
  std::vector<Tensor> flats;  // packed on the source once, for devices that are not host devices
  for (size_t k = 0; k < devices.size(); ++k) {
    if (devices[k] == src) {
      for (const Tensor& t : tensors) out[k].push_back(t.detach());
      continue;
    }
    out[k].resize(tensors.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      if (src.is_host() && devices[k].is_host()) {
        unpack(pack_to(tensors, specs, groups[g], src, devices[k]), specs, groups[g], out[k]);
        continue;
      }
      if (flats.size() == g) flats.push_back(pack(tensors, specs, groups[g], src));  // first use
      unpack(flats[g].to(devices[k]), specs, groups[g], out[k]);
    }
  }
  return out;
}

std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& per_device,
                                         const std::vector<TensorSpec>& specs, Device destination,
                                         int64_t buffer_bytes) {
  for (size_t i = 0; i < specs.size(); ++i) {
    // 16-bit slots add in float32 and round once per add, as torch.cuda.comm.reduce_add does.
    DPE_CHECK(is_floating_point(specs[i].dtype), "reduce_add_coalesced: slot "
                                                     << i << " is " << dtype_name(specs[i].dtype)
                                                     << "; only floating tensors can be summed");
  }
  std::vector<Device> where;  // each contributing k's device
  std::vector<const std::vector<Tensor>*> contributing;
  for (const auto& tensors : per_device) {
    DPE_CHECK(tensors.size() == specs.size(), "reduce_add_coalesced: " << tensors.size()
                                                                       << " tensors for "
                                                                       << specs.size() << " slots");
    Device device = destination;
    bool any = false;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].defined()) continue;
      DPE_CHECK(tensors[i].shape() == specs[i].shape && tensors[i].dtype() == specs[i].dtype,
                "reduce_add_coalesced: slot " << i << " expects " << dtype_name(specs[i].dtype)
                                              << " " << specs[i].shape << ", got "
                                              << tensors[i].str());
      DPE_CHECK(!any || tensors[i].device() == device,
                "reduce_add_coalesced: one device's tensors must share its device, found "
                    << device << " and " << tensors[i].device());
      device = tensors[i].device();
      any = true;
    }
    if (!any) continue;
    where.push_back(device);
    contributing.push_back(&tensors);
  }
  std::vector<Tensor> out(specs.size());
  if (contributing.empty()) return out;  // no device contributed
  // Chunk by chunk (PyTorch's buffer_size), so the destination holds one chunk in transit, not
  // every device's whole packed copy at once.
  for (const std::vector<size_t>& group : groups_by_dtype(specs)) {
    const int64_t element = static_cast<int64_t>(dtype_size(specs[group[0]].dtype));
    size_t begin = 0;
    while (begin < group.size()) {
      size_t end = begin;
      int64_t bytes = 0;
      while (end < group.size() && (end == begin || bytes < buffer_bytes)) {
        bytes += specs[group[end]].shape.numel() * element;
        ++end;
      }
      const std::vector<size_t> chunk(group.begin() + begin, group.begin() + end);
      // Device by device, in order: the destination's own slots are read where they are, another
      // device's arrive packed in one buffer on the destination (its transfer). Each byte moves
      // once and is summed once, into a storage per slot that AccumulateGrad can adopt as .grad.
      DeviceGuard guard(&Runtime::get().context(destination));
      // What sum[i] is: the destination's own gradient (read only), a slot of a transferred
      // buffer of this call (writable; its own storage only when the chunk is that one slot), or
      // a storage of its own.
      enum class Held { kBorrowed, kScratch, kOwned };
      std::vector<Tensor> sum(specs.size());
      std::vector<Held> held(specs.size(), Held::kBorrowed);
      for (size_t k = 0; k < contributing.size(); ++k) {
        std::vector<Tensor> term(specs.size());
        const bool here = where[k] == destination;
        if (here) {
          for (size_t i : chunk) {
            const Tensor& t = (*contributing[k])[i];
            if (t.defined()) term[i] = t.contiguous();  // kernels read dense memory
          }
        } else {
          unpack(pack_to(*contributing[k], specs, chunk, where[k], destination), specs, chunk,
                 term);
        }
        for (size_t i : chunk) {
          if (!term[i].defined()) continue;
          if (!sum[i].defined()) {
            sum[i] = term[i];
            held[i] = here ? Held::kBorrowed : Held::kScratch;
          } else if (held[i] != Held::kBorrowed) {
            dispatch(prim::Add{sum[i], term[i], 1.0f, sum[i]});
          } else {
            Tensor fresh = Tensor::empty(specs[i].shape, specs[i].dtype, destination);
            dispatch(prim::Add{sum[i], term[i], 1.0f, fresh});
            sum[i] = fresh;
            held[i] = Held::kOwned;
          }
        }
      }
      for (size_t i : chunk) {
        if (!sum[i].defined()) {
          out[i] = Tensor::zeros(specs[i].shape, specs[i].dtype, destination);
        } else if (held[i] == Held::kOwned || (held[i] == Held::kScratch && chunk.size() == 1)) {
          out[i] = sum[i];
        } else {
          out[i] = sum[i].clone();
        }
      }
      begin = end;
    }
  }
  return out;
}

}  // namespace dpe::comm
