// The CUDA device type's table of operations (cuBLAS, cuDNN and dpe's kernels in kernels/cuda).
// The validating front (engine/backend/checked_backend.cc) has checked the arguments, with the
// same checks and messages as on the host; each slot calls the launchers with the device's
// CudaContext.
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
// (tests/engine/backend/cuda_backend_test.cc, gradcheck_test.cc) only where one exists.
//
// Threading contract: every method may be called from any thread.
#include "engine/backend/cuda/cuda_backend.h"

#include <mutex>

#include "engine/backend/cuda/cuda_device.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/bmm.cuh"
#include "kernels/cuda/conv2d.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/dropout.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/gelu.cuh"
#include "kernels/cuda/layer_norm.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/max_pool2d.cuh"
#include "kernels/cuda/nll_loss.cuh"
#include "kernels/cuda/optim_step.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/softmax.cuh"

namespace dpe {

namespace {

// One backend call: the CudaContext of the device of `t`, locked (and that device made current on
// this thread) until the call returns.
class Call {
 public:
  explicit Call(const Tensor& t)
      : device_(cuda::as_cuda(t.context())), lock_(device_.lock_kernels()) {}

  cuda::CudaContext& ctx() { return device_.kernels(); }

 private:
  cuda::CudaDeviceContext& device_;
  std::unique_lock<std::mutex> lock_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The launchers' views of checked arguments: x [N, C, ...] as [N, C, S]; x [..., D] as [N, D]; a convolution of
// x [N, C, H, W] by w [O, C, kh, kw] into y [N, O, Ho, Wo]; pooling of x into y [N, C, Ho, Wo].
BatchNormShape bn_shape(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}
LayerNormShape ln_shape(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }
// x [..., Tq, Tk] as [B, Tq, Tk]; a 1-D x is one query.
SoftmaxShape softmax_shape(const Tensor& x, bool causal) {
  const int64_t tk = x.size(-1), tq = x.dim() >= 2 ? x.size(-2) : 1;
  return {tq * tk > 0 ? x.numel() / (tq * tk) : 0, tq, tk, causal};
}
Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), p.stride,  p.padding, y.size(2), y.size(3)};
}
Pool2dShape pool_shape(const Tensor& x, const Pool2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), p.kernel,
          p.stride,  p.padding, y.size(2), y.size(3)};
}

class CudaBackend final : public Backend {
 public:
  // --- elementwise ---

  void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override {
    Call c(a);
    cuda::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(),
                      a.numel());
  }

  void mul(const Tensor& a, const Tensor& b, Tensor& out) override {
    Call c(a);
    cuda::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }

  void scale(const Tensor& a, float s, Tensor& out) override {
    Call c(a);
    cuda::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    cuda::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
  }

  void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    cuda::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
  }

  void gelu_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    cuda::gelu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
  }

  void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) override {
    Call c(x);
    cuda::gelu_backward(c.ctx(), x.data<float>(), gy.data<float>(), gx.data<float>(), x.numel());
  }

  // --- reductions ---

  void sum_all(const Tensor& x, Tensor& out) override {
    Call c(x);
    cuda::sum_all(c.ctx(), x.data<float>(), out.data<float>(), x.numel());
  }

  void argmax_rows(const Tensor& x, Tensor& out) override {
    Call c(x);
    cuda::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
  }

  bool all_finite(const Tensor& x) override {
    Call c(x);
    return cuda::all_finite(c.ctx(), x.data<float>(), x.numel());
  }

  // --- dense layers ---

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    Call c(x);
    const LinearShape s{x.size(0), x.size(1), w.size(0)};
    cuda::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                         y.data<float>());
  }

  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx, Tensor& gw,
                       Tensor& gb, float param_grad_scale) override {
    Call c(x);
    const LinearShape s{x.size(0), x.size(1), w.size(0)};
    cuda::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                          data_or_null(gx), data_or_null(gw), data_or_null(gb), param_grad_scale);
  }

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override {
    Call c(a);
    cuda::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
                 b.size(1));
  }

  void bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out) override {
    Call c(a);
    const BmmShape s{a.size(0), out.size(1), out.size(2), a.size(trans_a ? 1 : 2), trans_a,
                     trans_b};
    cuda::bmm(c.ctx(), s, a.data<float>(), b.data<float>(), out.data<float>());
  }

  // --- embedding ---

  void embedding_forward(const Tensor& weight, const Tensor& index, Tensor& y) override {
    Call c(weight);
    cuda::embedding_forward(c.ctx(), weight.data<float>(), index.data<int64_t>(), y.data<float>(),
                            index.size(0), weight.size(0), weight.size(1));
  }

  void embedding_backward(const Tensor& index, const Tensor& gy, Tensor& gw) override {
    Call c(gw);
    cuda::embedding_backward(c.ctx(), index.data<int64_t>(), gy.data<float>(), gw.data<float>(),
                             index.size(0), gw.size(0), gw.size(1));
  }

  // --- convolution and pooling ---

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                      Tensor& y) override {
    Call c(x);
    cuda::conv2d_forward(c.ctx(), conv_shape(x, w, p, y), x.data<float>(), w.data<float>(),
                         data_or_null(b), y.data<float>());
  }

  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                       Tensor& gx, Tensor& gw, Tensor& gb) override {
    Call c(x);
    cuda::conv2d_backward(c.ctx(), conv_shape(x, w, p, gy), x.data<float>(), w.data<float>(),
                          gy.data<float>(), data_or_null(gx), data_or_null(gw), data_or_null(gb));
  }

  void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                          Tensor& workspace) override {
    Call c(x);
    cuda::max_pool2d_forward(c.ctx(), pool_shape(x, p, y), x.data<float>(), y.data<float>(),
                             workspace.data<int64_t>());
  }

  void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                           Tensor& gx) override {
    Call c(gy);
    cuda::max_pool2d_backward(c.ctx(), pool_shape(gx, p, gy), gy.data<float>(),
                              workspace.data<int64_t>(), gx.data<float>());
  }

  // --- batch normalisation ---

  void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                Tensor& y, Tensor& mean, Tensor& var) override {
    Call c(x);
    cuda::batch_norm_forward_train(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                   data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                                   var.data<float>());
  }

  void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps,
                               Tensor& y) override {
    Call c(x);
    cuda::batch_norm_forward_eval(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                  data_or_null(beta), mean.data<float>(), var.data<float>(), eps,
                                  y.data<float>());
  }

  void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                           Tensor& ggamma, Tensor& gbeta) override {
    Call c(x);
    cuda::batch_norm_backward(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                              data_or_null(gamma), mean.data<float>(), var.data<float>(), eps,
                              gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }

  // Composed from the unfused kernels (no fused CUDA kernel yet): the ReLU in place on y, and
  // for the backward the pre-ReLU output recomputed by the evaluation kernel with the batch
  // statistics, masked by relu_backward, then the plain backward.
  void batch_norm_relu_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, Tensor& y, Tensor& mean, Tensor& var) override {
    batch_norm_forward_train(x, gamma, beta, eps, y, mean, var);
    relu_forward(y, y);
  }

  void batch_norm_relu_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                const Tensor& beta, const Tensor& mean, const Tensor& var,
                                float eps, Tensor& gx, Tensor& ggamma, Tensor& gbeta) override {
    // z, then the masked gradient over it: relu_backward is elementwise, so in place is safe.
    Tensor z = Tensor::empty(x.shape(), DType::kFloat32, x.device());
    batch_norm_forward_eval(x, gamma, beta, mean, var, eps, z);
    relu_backward(z, gy, z);
    batch_norm_backward(x, z, gamma, mean, var, eps, gx, ggamma, gbeta);
  }

  void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override {
    Call c(x);
    const BatchNormShape s = bn_shape(x);
    cuda::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                       s.s);
  }

  void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                         Tensor& sum_gy_xmu) override {
    Call c(x);
    const BatchNormShape s = bn_shape(x);
    cuda::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                            sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
  }

  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& gamma, const Tensor& beta, Tensor& y) override {
    Call c(x);
    cuda::batch_norm_apply(c.ctx(), bn_shape(x), x.data<float>(), mean.data<float>(),
                           invstd.data<float>(), data_or_null(gamma), data_or_null(beta),
                           y.data<float>());
  }

  void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& gamma, const Tensor& mean_gy,
                                 const Tensor& mean_gy_xmu, Tensor& gx) override {
    Call c(x);
    cuda::batch_norm_backward_elemt(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                                    mean.data<float>(), invstd.data<float>(), data_or_null(gamma),
                                    mean_gy.data<float>(), mean_gy_xmu.data<float>(),
                                    gx.data<float>());
  }

  // --- layer normalisation ---

  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) override {
    Call c(x);
    cuda::layer_norm_forward(c.ctx(), ln_shape(x), x.data<float>(), data_or_null(gamma),
                             data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                             rstd.data<float>());
  }

  void layer_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, Tensor& gx, Tensor& ggamma,
                           Tensor& gbeta) override {
    Call c(x);
    cuda::layer_norm_backward(c.ctx(), ln_shape(x), x.data<float>(), gy.data<float>(),
                              data_or_null(gamma), mean.data<float>(), rstd.data<float>(),
                              gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }

  // --- softmax ---

  void softmax_forward(const Tensor& x, bool causal, Tensor& y) override {
    Call c(x);
    cuda::softmax_forward(c.ctx(), softmax_shape(x, causal), x.data<float>(), y.data<float>());
  }

  void softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    const int64_t cols = y.size(-1);
    cuda::softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                           cols > 0 ? y.numel() / cols : 0, cols);
  }

  // --- losses ---

  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    cuda::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
  }

  void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    cuda::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                               y.size(0), y.size(1));
  }

  void nll_loss_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                        Tensor& out) override {
    Call c(logp);
    cuda::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(), out.data<float>(),
                           logp.size(0), logp.size(1), ignore_index);
  }

  void nll_loss_backward(const Tensor& gout, const Tensor& target, int64_t ignore_index,
                         Tensor& gx) override {
    Call c(gx);
    cuda::nll_loss_backward(c.ctx(), gout.data<float>(), target.data<int64_t>(), gx.data<float>(),
                            gx.size(0), gx.size(1), ignore_index);
  }

  // --- dropout and optimizers ---

  void dropout_mask(float p, uint64_t seed, Tensor& mask) override {
    Call c(mask);
    cuda::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdOptions& o,
                bool first) override {
    Call c(param);
    cuda::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                   o.momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
  }

  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamOptions& o, int64_t step) override {
    Call c(param);
    cuda::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                    exp_avg_sq.data<float>(), o, step, param.numel());
  }
};

}  // namespace

Backend& cuda_backend() {
  // One table serves every CUDA device (each call locks its device's context); it lives until
  // exit, like the Runtime's device contexts, and is created on first use, thread-safely.
  static CudaBackend backend;
  return backend;
}

}  // namespace dpe
