// broadcast_packed: pack, broadcast, unpack.
#include "engine/distributed/broadcast_packed.h"

#include "engine/core/error.h"
#include "engine/device/memory_category.h"
#include "engine/device/runtime.h"

namespace dpe {
namespace distributed {

void broadcast_packed(ProcessGroup& group, const std::vector<Tensor>& tensors, int root) {
  if (group.size() == 1 || tensors.empty()) return;
  // One collective for every dtype: the tensors' bytes, each at an 8-byte aligned offset, in a
  // float32 buffer. A broadcast moves bits and does no arithmetic, so int64 values survive.
  std::vector<int64_t> offsets;  // in bytes
  int64_t bytes = 0;
  for (const Tensor& t : tensors) {
    DPE_CHECK(t.defined() && t.is_contiguous(),
              "broadcast_packed (rank "
                  << group.rank() << "): expected defined contiguous tensors, got " << t.str());
    offsets.push_back(bytes);
    bytes += (static_cast<int64_t>(t.nbytes()) + 7) / 8 * 8;
  }
  if (bytes == 0) return;
  Tensor flat;
  {
    // A coalesced buffer, whichever phase broadcasts it (ZeRO-1's step among them).
    MemoryCategoryScope category(MemoryCategory::kCommunication);
    flat = Tensor::empty(Shape{bytes / 4}, DType::kFloat32, tensors[0].device());
  }
  Runtime& rt = Runtime::get();
  DeviceContext& ctx = flat.context();
  char* base = static_cast<char*>(flat.raw_data());
  // Tensors may live on several devices (a module that spans devices): each is copied from or to
  // its own device's memory.
  if (group.rank() == root) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      rt.copy(ctx, base + offsets[i], tensors[i].context(), tensors[i].raw_data(),
              tensors[i].nbytes());
    }
  }
  group.broadcast(flat, root);
  if (group.rank() == root) return;
  for (size_t i = 0; i < tensors.size(); ++i) {
    Tensor t = tensors[i];
    rt.copy(t.context(), t.raw_data(), ctx, base + offsets[i], t.nbytes());
    t.bump_version();
  }
}

}  // namespace distributed
}  // namespace dpe
