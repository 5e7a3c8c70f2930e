// The host device type's op table: every prim's launch (engine/backend/prims) resolved in the
// host kernels (kernels/host: oneDNN and loops), called with the device's HostContext under the
// device's lock. Registered when this library loads.
//
// Threading contract: calls on one device are serialised by its context's lock, calls on
// different devices run in parallel.
#include <mutex>

#include "engine/backend/host/host_device.h"
#include "engine/backend/kernel_table.h"
#include "kernels/host/batch_norm.h"
#include "kernels/host/batch_norm_relu.h"
#include "kernels/host/bmm.h"
#include "kernels/host/conv2d.h"
#include "kernels/host/conv2d_lowp.h"
#include "kernels/host/cross_entropy_lowp.h"
#include "kernels/host/dropout.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/elementwise_lowp.h"
#include "kernels/host/embedding.h"
#include "kernels/host/gelu.h"
#include "kernels/host/host_context.h"
#include "kernels/host/layer_norm.h"
#include "kernels/host/linear.h"
#include "kernels/host/linear_lowp.h"
#include "kernels/host/log_softmax.h"
#include "kernels/host/matmul.h"
#include "kernels/host/max_pool2d.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/optim_step.h"
#include "kernels/host/reduce.h"
#include "kernels/host/softmax.h"

namespace dpe {

namespace {

struct HostKernels {
  static constexpr const char* kName = "host";
  // Every prim, the optional ones included.
  template <class Op>
  static constexpr bool implements = true;
  // Convolution, batch norm and max pooling take channels-last activations as they are.
  static constexpr bool kChannelsLast = true;
  // bfloat16 and float16 kernels (oneDNN's matmul, widened loops) for the prims that have them.
  static constexpr bool kLowPrecision = true;

  // One call: the HostContext of the device of `t`, locked until the call returns.
  class Call {
   public:
    explicit Call(const Tensor& t) : device_(as_host(t.context())), lock_(device_.lock_kernels()) {}
    host::HostContext& ctx() { return device_.kernels(); }

   private:
    HostDeviceContext& device_;
    std::unique_lock<std::mutex> lock_;
  };
};

const bool registered = [] {
  static KernelTable<HostKernels> table;
  register_op_table(DeviceType::kHost, table);
  return true;
}();

}  // namespace

}  // namespace dpe
