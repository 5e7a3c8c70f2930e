// CudaBackend: the Backend of CUDA devices (cuBLAS, cuDNN and dpe's kernels in kernels/cuda).
// Backend has checked the arguments (backend.cc, the same checks and messages as on the host);
// each do_<name> calls the launchers with the device's CudaContext.
//
// Design note "streams and synchronisation": every launcher enqueues on its device's compute
// stream, a *blocking* stream (kernels/cuda/cuda_context.h). The engine's copies
// (Runtime::copy -> cuda::copy_bytes: cudaMemcpy / cudaMemcpyPeer) and Tensor::fill_ run on the
// legacy default stream, which waits for all work queued on blocking streams of the device and is
// waited for by work queued later. So ops return without waiting for the GPU, and a host read that
// follows (item(), to_vector(), a copy to another device) still sees the finished result. Ops that
// must return a value or throw from a device-side check (all_finite, nll_loss with a bad label)
// read a flag back, which waits for the compute stream. nvcc must not be given
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
#include "engine/backend/cuda_backend.h"

#include <mutex>
#include <vector>

#include "engine/device/cuda_device.h"
#include "kernels/cuda/batch_norm.cuh"
#include "kernels/cuda/conv2d.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/cuda/dropout.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/log_softmax.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/max_pool2d.cuh"
#include "kernels/cuda/nll_loss.cuh"
#include "kernels/cuda/optim_step.cuh"
#include "kernels/cuda/reduce.cuh"

namespace dpe {

namespace {

// One backend call: its device's CudaContext, whose lock is held until the call returns.
class Call {
 public:
  Call(int device_index, std::mutex& mu, cuda::CudaContext& ctx) : lock_(mu), ctx_(ctx) {
    // Launches, cuBLAS and cuDNN use the calling thread's current device: make it this one (a
    // DeviceGuard may not be active on the calling thread).
    cuda::set_device(device_index);
  }

  cuda::CudaContext& ctx() { return ctx_; }

 private:
  std::unique_lock<std::mutex> lock_;
  cuda::CudaContext& ctx_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The launchers' views of checked arguments (backend.cc): x [N, C, ...] as [N, C, S]; a
// convolution of x [N, C, H, W] by w [O, C, kh, kw] into y [N, O, Ho, Wo]; pooling of x into
// y [N, C, Ho, Wo].
cuda::BatchNormShape bn_shape(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}
cuda::Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                             const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), p.stride,  p.padding, y.size(2), y.size(3)};
}
cuda::Pool2dShape pool_shape(const Tensor& x, const Pool2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), p.kernel,
          p.stride,  p.padding, y.size(2), y.size(3)};
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() : Backend(DeviceType::kCuda) {}

 private:
  void do_add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override;
  void do_mul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void do_scale(const Tensor& a, float s, Tensor& out) override;
  void do_relu_forward(const Tensor& x, Tensor& y) override;
  void do_relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;

  void do_sum_all(const Tensor& x, Tensor& out) override;
  void do_argmax_rows(const Tensor& x, Tensor& out) override;
  bool do_all_finite(const Tensor& x) override;

  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                          Tensor& gw, Tensor& gb) override;
  void do_matmul(const Tensor& a, const Tensor& b, Tensor& c) override;

  void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                         Tensor& y) override;
  void do_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                          Tensor& gx, Tensor& gw, Tensor& gb) override;
  void do_max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                             Tensor& workspace) override;
  void do_max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                              Tensor& gx) override;

  void do_batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   float eps, Tensor& y, Tensor& mean, Tensor& var) override;
  void do_batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& var, float eps,
                                  Tensor& y) override;
  void do_batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                              const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                              Tensor& ggamma, Tensor& gbeta) override;
  void do_channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override;
  void do_channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                            Tensor& sum_gy_xmu) override;
  void do_batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& beta, Tensor& y) override;
  void do_batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                    const Tensor& invstd, const Tensor& gamma,
                                    const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                    Tensor& gx) override;

  void do_log_softmax_forward(const Tensor& x, Tensor& y) override;
  void do_log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;
  void do_nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) override;
  void do_nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) override;

  void do_dropout_mask(float p, uint64_t seed, Tensor& mask) override;

  void do_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                   float dampening, float weight_decay, bool nesterov, bool first) override;
  void do_adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                    bool adamw) override;

  // One lock per CUDA device index, created on first use.
  struct Devices {
    std::mutex mu;  // guards `locks`, not the devices
    std::vector<std::unique_ptr<std::mutex>> locks;

    // The call on `t`'s device (a CUDA device, as Backend checked).
    Call call(const Tensor& t) {
      const int index = t.device().index();
      std::mutex* lock;
      {
        std::lock_guard<std::mutex> guard(mu);
        if (static_cast<int>(locks.size()) <= index) locks.resize(index + 1);
        if (!locks[index]) locks[index] = std::make_unique<std::mutex>();
        lock = locks[index].get();
      }
      return Call(index, *lock, cuda::cuda_context(t.context()));
    }
  };
  std::unique_ptr<Devices> devices_ = std::make_unique<Devices>();
};

}  // namespace

// --- elementwise ---

void CudaBackend::do_add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  Call c = devices_->call(a);
  cuda::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(), a.numel());
}

void CudaBackend::do_mul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = devices_->call(a);
  cuda::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void CudaBackend::do_scale(const Tensor& a, float s, Tensor& out) {
  Call c = devices_->call(a);
  cuda::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
}

void CudaBackend::do_relu_forward(const Tensor& x, Tensor& y) {
  Call c = devices_->call(x);
  cuda::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
}

void CudaBackend::do_relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = devices_->call(y);
  cuda::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
}

// --- reductions ---

void CudaBackend::do_sum_all(const Tensor& x, Tensor& out) {
  Call c = devices_->call(x);
  cuda::sum_all(c.ctx(), x.data<float>(), out.data<float>(), x.numel());
}

void CudaBackend::do_argmax_rows(const Tensor& x, Tensor& out) {
  Call c = devices_->call(x);
  cuda::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
}

bool CudaBackend::do_all_finite(const Tensor& x) {
  Call c = devices_->call(x);
  return cuda::all_finite(c.ctx(), x.data<float>(), x.numel());
}

// --- dense layers ---

void CudaBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  Call c = devices_->call(x);
  const cuda::LinearShape s{x.size(0), x.size(1), w.size(0)};
  cuda::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void CudaBackend::do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                                     Tensor& gw, Tensor& gb) {
  Call c = devices_->call(x);
  const cuda::LinearShape s{x.size(0), x.size(1), w.size(0)};
  cuda::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void CudaBackend::do_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = devices_->call(a);
  cuda::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
               b.size(1));
}

// --- convolution and pooling ---

void CudaBackend::do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                    const Conv2dParams& p, Tensor& y) {
  Call c = devices_->call(x);
  cuda::conv2d_forward(c.ctx(), conv_shape(x, w, p, y), x.data<float>(), w.data<float>(),
                       data_or_null(b), y.data<float>());
}

void CudaBackend::do_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                                     const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) {
  Call c = devices_->call(x);
  cuda::conv2d_backward(c.ctx(), conv_shape(x, w, p, gy), x.data<float>(), w.data<float>(),
                        gy.data<float>(), data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void CudaBackend::do_max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                        Tensor& workspace) {
  Call c = devices_->call(x);
  cuda::max_pool2d_forward(c.ctx(), pool_shape(x, p, y), x.data<float>(), y.data<float>(),
                           workspace.data<int64_t>());
}

void CudaBackend::do_max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                         const Pool2dParams& p, Tensor& gx) {
  Call c = devices_->call(gy);
  cuda::max_pool2d_backward(c.ctx(), pool_shape(gx, p, gy), gy.data<float>(),
                            workspace.data<int64_t>(), gx.data<float>());
}

// --- batch normalisation ---

void CudaBackend::do_batch_norm_forward_train(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, float eps, Tensor& y,
                                              Tensor& mean, Tensor& var) {
  Call c = devices_->call(x);
  cuda::batch_norm_forward_train(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                 data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                                 var.data<float>());
}

void CudaBackend::do_batch_norm_forward_eval(const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, const Tensor& mean,
                                             const Tensor& var, float eps, Tensor& y) {
  Call c = devices_->call(x);
  cuda::batch_norm_forward_eval(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                data_or_null(beta), mean.data<float>(), var.data<float>(), eps,
                                y.data<float>());
}

void CudaBackend::do_batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& var, float eps,
                                         Tensor& gx, Tensor& ggamma, Tensor& gbeta) {
  Call c = devices_->call(x);
  cuda::batch_norm_backward(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                            data_or_null(gamma), mean.data<float>(), var.data<float>(), eps,
                            gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
}

void CudaBackend::do_channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) {
  Call c = devices_->call(x);
  const cuda::BatchNormShape s = bn_shape(x);
  cuda::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                     s.s);
}

void CudaBackend::do_channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                       Tensor& sum_gy, Tensor& sum_gy_xmu) {
  Call c = devices_->call(x);
  const cuda::BatchNormShape s = bn_shape(x);
  cuda::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                          sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
}

void CudaBackend::do_batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                      const Tensor& gamma, const Tensor& beta, Tensor& y) {
  Call c = devices_->call(x);
  cuda::batch_norm_apply(c.ctx(), bn_shape(x), x.data<float>(), mean.data<float>(),
                         invstd.data<float>(), data_or_null(gamma), data_or_null(beta),
                         y.data<float>());
}

void CudaBackend::do_batch_norm_backward_elemt(const Tensor& x, const Tensor& gy,
                                               const Tensor& mean, const Tensor& invstd,
                                               const Tensor& gamma, const Tensor& mean_gy,
                                               const Tensor& mean_gy_xmu, Tensor& gx) {
  Call c = devices_->call(x);
  cuda::batch_norm_backward_elemt(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                                  mean.data<float>(), invstd.data<float>(), data_or_null(gamma),
                                  mean_gy.data<float>(), mean_gy_xmu.data<float>(),
                                  gx.data<float>());
}

// --- losses ---

void CudaBackend::do_log_softmax_forward(const Tensor& x, Tensor& y) {
  Call c = devices_->call(x);
  cuda::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
}

void CudaBackend::do_log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = devices_->call(y);
  cuda::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                             y.size(0), y.size(1));
}

void CudaBackend::do_nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) {
  Call c = devices_->call(logp);
  cuda::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(), out.data<float>(),
                         logp.size(0), logp.size(1));
}

void CudaBackend::do_nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) {
  Call c = devices_->call(gx);
  cuda::nll_loss_backward(c.ctx(), gout.data<float>(), target.data<int64_t>(), gx.data<float>(),
                          gx.size(0), gx.size(1));
}

// --- dropout and optimizers ---

void CudaBackend::do_dropout_mask(float p, uint64_t seed, Tensor& mask) {
  Call c = devices_->call(mask);
  cuda::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
}

void CudaBackend::do_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr,
                              float momentum, float dampening, float weight_decay, bool nesterov,
                              bool first) {
  Call c = devices_->call(param);
  const cuda::SgdOptions o{lr, momentum, dampening, weight_decay, nesterov};
  cuda::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                 momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
}

void CudaBackend::do_adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg,
                               Tensor& exp_avg_sq, float lr, float beta1, float beta2, float eps,
                               float weight_decay, int64_t step, bool adamw) {
  Call c = devices_->call(param);
  const cuda::AdamOptions o{lr, beta1, beta2, eps, weight_decay, adamw};
  cuda::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                  exp_avg_sq.data<float>(), o, step, param.numel());
}

Backend& cuda_backend() {
  // One CudaBackend serves every CUDA device (it keeps a lock per device); it lives until exit,
  // like the Runtime's DeviceContexts, and is created on first use, thread-safely.
  static CudaBackend backend;
  return backend;
}

}  // namespace dpe
