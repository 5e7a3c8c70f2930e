// Batch norm fused with the ReLU after it on the host, in training: max(batch_norm(x), 0), also
// with the residual sum before the ReLU (a ResNet block's end) or a max pooling after it, each bit
// for bit the kernels apart (batch_norm.h, elementwise.h, max_pool2d.h) without the tensors between
// them (engine/nn/fusion.h). Shapes, statistics and null gamma/beta as in batch_norm.h.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// max(batch_norm(x), 0) in training (a BatchNorm2d followed by a ReLU): y in batch norm's output
// pass, and the batch statistics mean[c] and biased var[c].
void batch_norm_relu_forward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, float eps, float* y,
                             float* mean, float* var);
// Gradients of the fused max(batch_norm(x), 0): the ReLU's mask (the forward's output > 0) is
// recomputed from x, mean, var, gamma and beta exactly as the forward computed it, so neither the
// output nor a separate ReLU gradient is read or written.
void batch_norm_relu_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gy, const float* gamma, const float* beta,
                              const float* mean, const float* var, float eps, float* gx,
                              float* ggamma, float* gbeta);
// max(batch_norm(x) + residual, 0) in training (a BatchNorm2d, the residual sum and a ReLU: the
// end of a ResNet block, fused): bit for bit batch_norm_forward_train, add_forward and
// relu_forward, without the two tensors between them.
void batch_norm_add_relu_forward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                                 const float* residual, const float* gamma, const float* beta,
                                 float eps, float* y, float* mean, float* var);
// Its gradients, from gy and the forward's output y: gresidual = gy where y > 0 (relu_backward),
// which is also the gradient reaching the batch norm. Bit for bit relu_backward then
// batch_norm_backward; channels last, the mask and gresidual are made in the pass that takes the
// batch norm's sums.
void batch_norm_add_relu_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                                  const float* y, const float* gy, const float* gamma,
                                  const float* mean, const float* var, float eps, float* gx,
                                  float* gresidual, float* ggamma, float* gbeta);
// max_pool2d(max(batch_norm(x), 0)) in training (a BatchNorm2d, a ReLU and a MaxPool2d, fused):
// y is the pooling's output (pool: its shape over x), codes each output's window code
// (op_params.h; a kernel up to kMaxWindowCodeKernel), mean and var the batch statistics. After the
// statistics, each block of planes (images, channels last) is normalised into a cache-sized
// scratch and pooled from there, or, where the pooling has such a kernel, in its registers: the
// full-size ReLU output is never written to memory. Bit for bit batch_norm_relu_forward then
// max_pool2d_forward, whose indices the codes name.
void batch_norm_relu_max_pool_forward(HostContext& ctx, const BatchNormShape& sh,
                                      const Pool2dShape& pool, const float* x, const float* gamma,
                                      const float* beta, float eps, float* y, uint8_t* codes,
                                      float* mean, float* var);
// Its gradients from gy, the pooled output's: bit for bit max_pool2d_backward then
// batch_norm_relu_backward. The pooling's gradient is written into gx a block at a time and
// summed while in the caches, then turned into gx in place: no full-size temporary, and one pass
// over memory fewer than the two ops.
void batch_norm_relu_max_pool_backward(HostContext& ctx, const BatchNormShape& sh,
                                       const Pool2dShape& pool, const float* x, const float* gy,
                                       const uint8_t* codes, const float* gamma, const float* beta,
                                       const float* mean, const float* var, float eps, float* gx,
                                       float* ggamma, float* gbeta);

}  // namespace dpe::host
