// The main demo: lists the devices dpe sees and what each one holds. The DataParallel demo of the
// seeds (per-device input sizes) builds on it.
#include <cstdio>
#include <exception>

#include "engine/device/runtime.h"
#include "engine/tensor/tensor.h"

int main() {
  try {
    dpe::Runtime& rt = dpe::Runtime::get();
    std::printf("dpe devices: %d host, %d CUDA\n", rt.host_device_count(), rt.cuda_device_count());
    for (dpe::Device d : rt.host_devices()) {
      dpe::DeviceContext& ctx = rt.context(d);
      dpe::Tensor t = dpe::Tensor::ones({30, 5}, d);
      const dpe::MemoryStats s = ctx.allocator().stats();
      std::printf("  %s: %d compute thread(s), holds %s after allocating a %s tensor\n",
                  d.str().c_str(), ctx.compute_threads(), dpe::format_bytes(s.current_bytes).c_str(),
                  t.shape().str().c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "demo: %s\n", e.what());
    return 1;
  }
}
