// Mean negative log-likelihood on CUDA over logp [n, c] at int64 targets [n], and its gradient,
// with the host backend's semantics (kernels/host/nll_loss.h): targets equal to ignore_index are
// skipped and not counted. A target outside [0, c) (other than ignore_index) throws
// "nll_loss: target <t> is out of bounds for <c> classes" naming the first bad one: the kernel
// records it and the launcher reads it back, so both launchers wait for the compute stream.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

// *out (device memory) = -sum(logp[i, target[i]]) / count; NaN when count == 0.
void nll_loss_forward(CudaContext& ctx, const float* logp, const int64_t* target, float* out,
                      int64_t n, int64_t c, int64_t ignore_index);
// gx = 0 except gx[i, target[i]] = -(*gout) / count for counted targets; gout is device memory.
void nll_loss_backward(CudaContext& ctx, const float* gout, const int64_t* target, float* gx,
                       int64_t n, int64_t c, int64_t ignore_index);

}  // namespace dpe::cuda
