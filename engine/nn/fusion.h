// Module fusion: a BatchNorm2d followed by a ReLU runs as one op (ops::batch_norm_relu) wherever a
// model chains the two, with a MaxPool2d after them the three run as one
// (ops::batch_norm_relu_max_pool2d), and with a residual sum between them too
// (ops::batch_norm_add_relu): nn::Sequential does it for adjacent children, and models that call
// their modules by hand (ResNet) call forward_batch_norm_relu(_max_pool) and
// forward_batch_norm_add_relu.
//
// Design note "same results, fewer passes": the output, the gradients, the running statistics, the
// modules and their state-dict keys are bit for bit those of the two modules run one after the
// other (tests/engine/nn/fusion_test.cc, tests/kernels/host/batch_norm_relu_test.cc). What changes
// is the work: in training the ReLU is applied in batch norm's output pass and its mask (y > 0)
// recomputed from x in batch norm's backward, which reads x anyway, so the pre-ReLU tensor, the
// ReLU's forward pass and its backward pass and gradient buffer are never made. Those passes are
// memory-bound: at batch 256 each is a trip through DRAM. PyTorch's eager mode does not fuse them
// (torch.compile and oneDNN graph do). What a user can observe: the autograd node's name
// ("<BatchNorm2d(...)>+ReLU" instead of "relu"), the op trace's names (batch_norm_relu, no relu),
// lower peak memory, and which in-place writes the saved-tensor check catches: the fused node
// saves batch norm's bias (for the mask) and not the ReLU's output, so writing the bias in place
// between forward and backward fails, and writing the output in place does not. In
// evaluation the two ops run as they are.
//
// A batch norm, the residual sum after it and a ReLU (the end of a ResNet block) fuse the same way
// (ops::batch_norm_add_relu, node "<BatchNorm2d(...)>+add+ReLU", trace batch_norm_add_relu): the
// sum and the ReLU in batch norm's output pass, and in the backward the ReLU's mask taken from the
// output (which the next layer keeps anyway) and the residual's gradient written, channels last,
// in the pass that takes batch norm's sums (NCHW: in relu_backward's pass). Bit for bit the three
// ops (fusion_test.cc, batch_norm_relu_test.cc). Its node saves x, gamma and the output, as the ops
// apart do between them, so the saved-tensor check catches what it catches for them.
//
// With the pooling fused too, the kernel normalises a cache-sized block of planes at a time and
// pools it from the caches, so the full-size ReLU output is never written to memory (at batch 256
// the ConvNet's first is 12.8 MB), and the backward makes the pooling's full-size gradient a
// block at a time in the same scratch. Its node is "<BatchNorm2d(...)>+ReLU+MaxPool2d"; the trace
// shows batch_norm_relu_max_pool2d in place of the two ops. Results are again bit for bit the
// unfused ones (tests/kernels/host/batch_norm_relu_test.cc, fusion_test.cc). It keeps
// each maximum's place in its window as one byte rather than an int64 index, so pooling windows
// wider than 16 (kMaxWindowCodeKernel) run as the ops apart.
//
// Only those exact classes fuse: a subclass, or another module in either place (SyncBatchNorm
// after convert_sync_batchnorm, a user's own ReLU), runs its own forward. Only device types with
// the fused kernels fuse (ops::has_fused_kernels, which the fused ops ask too): host devices; CUDA
// has none yet, so the ops run apart there.
// set_fusion_enabled(false) turns fusion off for the process: //tools:bench --fuse false measures
// the difference, and the cost model traces unfused steps, as PyTorch's eager mode runs them.
// The switch is one process-wide flag read at each forward: set it (or hold a FusionScope) from
// one thread while no other thread runs a model whose speed or trace should follow it.
#pragma once

#include <functional>

#include "engine/nn/module.h"

namespace dpe::nn {

// On by default; for every thread (the switch is read at each forward).
void set_fusion_enabled(bool enabled);
bool fusion_enabled();

// Sets fusion on or off until the end of its scope, then restores what was there.
class FusionScope {
 public:
  explicit FusionScope(bool enabled) : previous_(fusion_enabled()) { set_fusion_enabled(enabled); }
  ~FusionScope() { set_fusion_enabled(previous_); }
  FusionScope(const FusionScope&) = delete;
  FusionScope& operator=(const FusionScope&) = delete;

 private:
  bool previous_;
};

// True when `norm` is a BatchNorm2d and `activation` a ReLU, both exactly.
bool fuses_batch_norm_relu(const Module& norm, const Module& activation);

// activation.forward(norm.forward(x)), fused when fusion is enabled, fuses_batch_norm_relu and x
// is on a host device.
Tensor forward_batch_norm_relu(Module& norm, Module& activation, const Tensor& x);

// activation.forward(norm.forward(x) + residual()), a ResNet block's end: fused when fusion is
// enabled, fuses_batch_norm_relu, norm is training and x's device has the kernels
// (BatchNormAddReluForwardTrain). residual() makes the residual (a downsample's forward): after
// norm's forward when the ops run apart, the order of torchvision's Bottleneck, before the fused
// op.
Tensor forward_batch_norm_add_relu(Module& norm, Module& activation, const Tensor& x,
                                   const std::function<Tensor()>& residual);
// The same with the residual made already.
Tensor forward_batch_norm_add_relu(Module& norm, Module& activation, const Tensor& x,
                                   const Tensor& residual);

// True when `norm` is a BatchNorm2d, `activation` a ReLU and `pool` a MaxPool2d, all exactly.
bool fuses_batch_norm_relu_max_pool(const Module& norm, const Module& activation,
                                    const Module& pool);

// pool.forward(activation.forward(norm.forward(x))): the three fused where
// fuses_batch_norm_relu_max_pool and x's device has the kernels, else as
// forward_batch_norm_relu and then the pooling.
Tensor forward_batch_norm_relu_max_pool(Module& norm, Module& activation, Module& pool,
                                        const Tensor& x);

}  // namespace dpe::nn
