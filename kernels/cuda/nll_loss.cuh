// Mean negative log-likelihood on CUDA over logp [n, c] at int64 targets [n], and its gradient,
// with the host backend's semantics (kernels/host/nll_loss.h). A target outside [0, c) throws
// "nll_loss: target <t> is out of bounds for <c> classes" naming the first bad one: the kernel
// records it and the launcher reads it back, so both launchers wait for the compute stream.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

// *out (device memory) = -mean(logp[i, target[i]]); NaN for n == 0.
void nll_loss_forward(CudaContext& ctx, const float* logp, const int64_t* target, float* out,
                      int64_t n, int64_t c);
// gx = 0 except gx[i, target[i]] = -(*gout) / n; gout is device memory.
void nll_loss_backward(CudaContext& ctx, const float* gout, const int64_t* target, float* gx,
                       int64_t n, int64_t c);

}  // namespace dpe::cuda
