// The CUDA device type's op table: every prim's launch (engine/backend/prims) resolved in dpe's
// CUDA launchers (kernels/cuda: cuBLAS, cuDNN and dpe's kernels), called with the device's
// CudaContext. Registered when this library loads; compiled only where CUDA is built.
//
// Design note "streams and synchronisation": every launcher enqueues on its device's compute
// stream, a *blocking* stream (kernels/cuda/cuda_context.h). The engine's copies
// (CudaDeviceContext::copy: cudaMemcpy / cudaMemcpyPeer) run on the legacy default stream, which
// waits for all work queued on blocking streams of the device and is waited for by work queued
// later. So ops return without waiting for the GPU, and a host read that follows (item(),
// to_vector(), a copy to another device) still sees the finished result. Ops that must return a
// value or throw from a device-side check (all_finite, nll_loss with a bad label) read a flag back,
// which waits for the compute stream. nvcc must not be given
// --default-stream per-thread, which would remove the implicit ordering (NVCC_FLAGS does not).
//
// Design note "one call at a time per device": a call holds its device's lock while it enqueues,
// because the CudaContext's workspace is shared by the launchers of that device. Calls
// on different devices run in parallel.
//
// This file and the kernels are compiled on machines without a GPU and exercised by the GPU tests
// (tests/engine/backend/cuda) only where one exists.
#include <mutex>
#include <type_traits>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/backend/kernel_table.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/bmm.cuh"
#include "kernels/cuda/conv2d.cuh"
#include "kernels/cuda/conv2d_lowp.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/dropout.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/elementwise_lowp.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layer_norm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/linear_lowp.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/max_pool2d.cuh"
#include "kernels/cuda/nll_loss.cuh"
#include "kernels/cuda/optim_step.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/softmax.cuh"

namespace dpe {

namespace {

template <class Op, class... Ops>
constexpr bool is_one_of = (std::is_same_v<Op, Ops> || ...);

struct CudaKernels {
  static constexpr const char* kName = "cuda";
  // The optional prims CUDA devices have no kernel for, where the engine takes each one's way
  // around (KernelTable accepts no other prim here): the fused batch norm ops run as the ops they
  // fuse (engine/nn/fusion.h), clip_grad_norm_ squares then sums, an embedding's gradient is
  // summed into the one that arrived, cross_entropy is log_softmax then nll_loss.
  template <class Op>
  static constexpr bool lacks =
      is_one_of<Op, prim::SumSquares, prim::EmbeddingBackwardAccumulate,
                prim::BatchNormReluForwardTrain, prim::BatchNormReluBackward,
                prim::BatchNormAddReluForwardTrain, prim::BatchNormAddReluBackward,
                prim::BatchNormReluMaxPoolForwardTrain, prim::BatchNormReluMaxPoolBackward,
                prim::CrossEntropyForward, prim::CrossEntropyBackward>;
  template <class Op>
  static constexpr bool implements = !lacks<Op>;
  // NCHW kernels only: activations stay contiguous on CUDA devices.
  static constexpr bool kChannelsLast = false;
  // bfloat16 and float16 kernels (cuBLAS GemmEx, cuDNN, dpe's elementwise kernels) for the prims
  // that have them: linear, matmul, bmm, conv2d, add, mul, scale, relu, GELU.
  static constexpr bool kLowPrecision = true;

  // One call: the CudaContext of the device of `t`, locked (and that device made current on this
  // thread) until the call returns.
  class Call {
   public:
    explicit Call(const Tensor& t)
        : device_(cuda::as_cuda(t.context())), lock_(device_.lock_kernels()) {}
    cuda::CudaContext& ctx() { return device_.kernels(); }

   private:
    cuda::CudaDeviceContext& device_;
    std::unique_lock<std::mutex> lock_;
  };
};

const bool registered = [] {
  static KernelTable<CudaKernels> table;
  register_op_table(DeviceType::kCuda, table);
  return true;
}();

}  // namespace

}  // namespace dpe
