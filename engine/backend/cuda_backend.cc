// CudaBackend: the Backend of CUDA devices (cuBLAS, cuDNN and dpe's kernels in kernels/cuda). It
// checks every argument as the host backend does (same messages, naming the op and the shapes)
// and calls the launchers with the device's CudaContext.
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
// Design note "one call at a time per device": a call holds its device's lock while it checks and
// enqueues, because the CudaContext's workspace is shared by the launchers of that device. Calls
// on different devices run in parallel.
//
// This file and the kernels are compiled on machines without a GPU and exercised by the GPU tests
// (tests/engine/backend/cuda_backend_test.cc, gradcheck_test.cc) only where one exists.
//
// Threading contract: every method may be called from any thread.
#include "engine/backend/cuda_backend.h"

#include <mutex>
#include <vector>

#include "engine/core/error.h"
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
#include "kernels/host/conv2d.h"
#include "kernels/host/max_pool2d.h"

namespace dpe {

namespace {

// One backend call: the op's name for messages, its device, and that device's CudaContext, whose
// lock is held until the call returns. The checks throw dpe::Error naming the op.
class Call {
 public:
  Call(const char* op, Device device, std::mutex& mu, cuda::CudaContext& ctx)
      : op_(op), device_(device), lock_(mu), ctx_(ctx) {
    // Launches, cuBLAS and cuDNN use the calling thread's current device: make it this one (a
    // DeviceGuard may not be active on the calling thread).
    cuda::set_device(device.index());
  }

  cuda::CudaContext& ctx() { return ctx_; }

  // Defined, on this call's device, of dtype `dt`, contiguous.
  void tensor(const Tensor& t, const char* what, DType dt = DType::kFloat32) const {
    DPE_CHECK(t.defined(), op_ << ": " << what << " is an undefined tensor");
    DPE_CHECK(t.device() == device_, op_ << ": expected all tensors to be on the same device, "
                                            "but found at least two devices, "
                                         << device_ << " and " << t.device() << " (" << what
                                         << ")");
    check_dtype(op_, t, dt, what);
    DPE_CHECK(t.is_contiguous(),
              op_ << ": " << what << " of shape " << t.shape() << " must be contiguous");
  }
  // tensor() plus an exact shape; `against` names where the expected shape comes from.
  void shaped(const Tensor& t, const char* what, const Shape& want, const char* against,
              const Shape& from, DType dt = DType::kFloat32) const {
    tensor(t, what, dt);
    DPE_CHECK(t.shape() == want, op_ << ": expected " << what << " of shape " << want << " for "
                                     << against << " of shape " << from << ", but got "
                                     << t.shape());
  }
  void rank(const Tensor& t, const char* what, int64_t r) const {
    tensor(t, what);
    DPE_CHECK(t.dim() == r,
              op_ << ": expected a " << r << "-D " << what << ", but got shape " << t.shape());
  }
  // An optional per-channel tensor: undefined, or [c].
  float* channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const {
    if (!t.defined()) return nullptr;
    shaped(t, what, Shape{c}, "input", x.shape());
    return t.data<float>();
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Device device_;
  std::unique_lock<std::mutex> lock_;
  cuda::CudaContext& ctx_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// x viewed as [N, C, S] for the batch-norm family.
cuda::BatchNormShape bn_shape(const Call& call, const Tensor& x) {
  call.tensor(x, "input");
  DPE_CHECK(x.dim() >= 2, call.op() << ": expected an input of at least 2 dimensions [N, C, ...], "
                                       "but got shape "
                                    << x.shape());
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

// The host computes the output shapes (and checks the parameters) with the same messages.
cuda::Pool2dShape pool_shape(int64_t n, int64_t c, int64_t h, int64_t w, const Pool2dParams& p) {
  const host::Pool2dShape s = host::max_pool2d_shape(n, c, h, w, p.kernel, p.stride, p.padding);
  return {s.n, s.c, s.h, s.w, s.kernel, s.stride, s.padding, s.ho, s.wo};
}

class CudaBackend final : public Backend {
 public:
  CudaBackend() = default;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override;
  void mul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void scale(const Tensor& a, float s, Tensor& out) override;
  void relu_forward(const Tensor& x, Tensor& y) override;
  void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;

  void sum_all(const Tensor& x, Tensor& out) override;
  void argmax_rows(const Tensor& x, Tensor& out) override;
  bool all_finite(const Tensor& x) override;

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx, Tensor& gw,
                       Tensor& gb) override;
  void matmul(const Tensor& a, const Tensor& b, Tensor& c) override;

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                      Tensor& y) override;
  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                       Tensor& gx, Tensor& gw, Tensor& gb) override;
  void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                          Tensor& workspace) override;
  void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                           Tensor& gx) override;

  void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                Tensor& y, Tensor& mean, Tensor& var) override;
  void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps,
                               Tensor& y) override;
  void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                           Tensor& ggamma, Tensor& gbeta) override;
  void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override;
  void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                         Tensor& sum_gy_xmu) override;
  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& gamma, const Tensor& beta, Tensor& y) override;
  void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& gamma, const Tensor& mean_gy,
                                 const Tensor& mean_gy_xmu, Tensor& gx) override;

  void log_softmax_forward(const Tensor& x, Tensor& y) override;
  void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) override;
  void nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) override;

  void dropout_mask(float p, uint64_t seed, Tensor& mask) override;

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, bool first) override;
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t step,
                 bool adamw) override;

 private:
  // One lock per CUDA device index, created on first use.
  struct Devices {
    std::mutex mu;  // guards `locks`, not the devices
    std::vector<std::unique_ptr<std::mutex>> locks;

    Call call(const char* op, const Tensor& first) {
      DPE_CHECK(first.defined(), op << ": the first tensor argument is undefined");
      const Device d = first.device();
      DPE_CHECK(d.is_cuda(), op << ": the cuda backend got a tensor on " << d);
      std::mutex* lock;
      {
        std::lock_guard<std::mutex> guard(mu);
        if (static_cast<int>(locks.size()) <= d.index()) locks.resize(d.index() + 1);
        if (!locks[d.index()]) locks[d.index()] = std::make_unique<std::mutex>();
        lock = locks[d.index()].get();
      }
      return Call(op, d, *lock, cuda::cuda_context(first.context()));
    }
  };
  std::unique_ptr<Devices> devices_ = std::make_unique<Devices>();
};

}  // namespace

// --- elementwise ---

void CudaBackend::add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  Call c = devices_->call("add", a);
  c.tensor(a, "a");
  c.shaped(b, "b", a.shape(), "a", a.shape());
  c.shaped(out, "out", a.shape(), "a", a.shape());
  cuda::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(), a.numel());
}

void CudaBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = devices_->call("mul", a);
  c.tensor(a, "a");
  c.shaped(b, "b", a.shape(), "a", a.shape());
  c.shaped(out, "out", a.shape(), "a", a.shape());
  cuda::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void CudaBackend::scale(const Tensor& a, float s, Tensor& out) {
  Call c = devices_->call("scale", a);
  c.tensor(a, "a");
  c.shaped(out, "out", a.shape(), "a", a.shape());
  cuda::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
}

void CudaBackend::relu_forward(const Tensor& x, Tensor& y) {
  Call c = devices_->call("relu", x);
  c.tensor(x, "input");
  c.shaped(y, "output", x.shape(), "input", x.shape());
  cuda::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
}

void CudaBackend::relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = devices_->call("relu_backward", y);
  c.tensor(y, "output");
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
  cuda::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
}

// --- reductions ---

void CudaBackend::sum_all(const Tensor& x, Tensor& out) {
  Call c = devices_->call("sum", x);
  c.tensor(x, "input");
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "sum: expected a scalar out, but got shape " << out.shape());
  cuda::sum_all(c.ctx(), x.data<float>(), out.data<float>(), x.numel());
}

void CudaBackend::argmax_rows(const Tensor& x, Tensor& out) {
  Call c = devices_->call("argmax", x);
  c.rank(x, "input", 2);
  DPE_CHECK(x.size(1) > 0,
            "argmax: expected a non-empty dim 1, but got input of shape " << x.shape());
  c.shaped(out, "out", Shape{x.size(0)}, "input", x.shape(), DType::kInt64);
  cuda::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
}

bool CudaBackend::all_finite(const Tensor& x) {
  Call c = devices_->call("all_finite", x);
  c.tensor(x, "input");
  return cuda::all_finite(c.ctx(), x.data<float>(), x.numel());
}

// --- dense layers ---

void CudaBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  Call c = devices_->call("linear", x);
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  DPE_CHECK(x.size(1) == w.size(1), "linear: input of shape "
                                        << x.shape() << " and weight of shape " << w.shape()
                                        << " cannot be multiplied (" << x.size(1)
                                        << " input features, weight expects " << w.size(1) << ")");
  const cuda::LinearShape s{x.size(0), x.size(1), w.size(0)};
  if (b.defined()) c.shaped(b, "bias", Shape{s.out}, "weight", w.shape());
  c.shaped(y, "output", Shape{s.batch, s.out}, "input", x.shape());
  cuda::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void CudaBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                                  Tensor& gw, Tensor& gb) {
  Call c = devices_->call("linear_backward", x);
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  DPE_CHECK(x.size(1) == w.size(1), "linear_backward: input of shape "
                                        << x.shape() << " and weight of shape " << w.shape()
                                        << " cannot be multiplied");
  const cuda::LinearShape s{x.size(0), x.size(1), w.size(0)};
  c.shaped(gy, "grad_output", Shape{s.batch, s.out}, "input", x.shape());
  if (gx.defined()) c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  if (gw.defined()) c.shaped(gw, "grad_weight", w.shape(), "weight", w.shape());
  if (gb.defined()) c.shaped(gb, "grad_bias", Shape{s.out}, "weight", w.shape());
  cuda::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void CudaBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = devices_->call("matmul", a);
  c.rank(a, "a", 2);
  c.rank(b, "b", 2);
  DPE_CHECK(a.size(1) == b.size(0), "matmul: a of shape " << a.shape() << " and b of shape "
                                                          << b.shape() << " cannot be multiplied");
  c.shaped(out, "out", Shape{a.size(0), b.size(1)}, "a", a.shape());
  cuda::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
               b.size(1));
}

// --- convolution and pooling ---

namespace {
cuda::Conv2dShape conv_shape(const Call& c, const Tensor& x, const Tensor& w,
                             const Conv2dParams& p) {
  c.rank(x, "input", 4);
  c.rank(w, "weight", 4);
  DPE_CHECK(x.size(1) == w.size(1), c.op() << ": weight of shape " << w.shape() << " expects input "
                                           << "with " << w.size(1)
                                           << " channels, but got input of shape " << x.shape());
  const host::Conv2dShape s =
      host::conv2d_shape(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
                         w.size(3), p.stride, p.padding);
  return {s.n, s.c, s.h, s.w, s.o, s.kh, s.kw, s.stride, s.padding, s.ho, s.wo};
}
}  // namespace

void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Conv2dParams& p, Tensor& y) {
  Call c = devices_->call("conv2d", x);
  const cuda::Conv2dShape s = conv_shape(c, x, w, p);
  if (b.defined()) c.shaped(b, "bias", Shape{s.o}, "weight", w.shape());
  c.shaped(y, "output", Shape{s.n, s.o, s.ho, s.wo}, "input", x.shape());
  if (s.n == 0) return;
  cuda::conv2d_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void CudaBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                                  const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) {
  Call c = devices_->call("conv2d_backward", x);
  const cuda::Conv2dShape s = conv_shape(c, x, w, p);
  c.shaped(gy, "grad_output", Shape{s.n, s.o, s.ho, s.wo}, "input", x.shape());
  if (gx.defined()) c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  if (gw.defined()) c.shaped(gw, "grad_weight", w.shape(), "weight", w.shape());
  if (gb.defined()) c.shaped(gb, "grad_bias", Shape{s.o}, "weight", w.shape());
  if (s.n == 0) {  // an empty batch contributes nothing
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return;
  }
  cuda::conv2d_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void CudaBackend::max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                     Tensor& workspace) {
  Call c = devices_->call("max_pool2d", x);
  c.rank(x, "input", 4);
  const cuda::Pool2dShape s = pool_shape(x.size(0), x.size(1), x.size(2), x.size(3), p);
  const Shape out{s.n, s.c, s.ho, s.wo};
  c.shaped(y, "output", out, "input", x.shape());
  c.shaped(workspace, "indices", out, "input", x.shape(), DType::kInt64);
  cuda::max_pool2d_forward(c.ctx(), s, x.data<float>(), y.data<float>(), workspace.data<int64_t>());
}

void CudaBackend::max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                      const Pool2dParams& p, Tensor& gx) {
  Call c = devices_->call("max_pool2d_backward", gy);
  c.rank(gx, "grad_input", 4);
  const cuda::Pool2dShape s = pool_shape(gx.size(0), gx.size(1), gx.size(2), gx.size(3), p);
  const Shape out{s.n, s.c, s.ho, s.wo};
  c.shaped(gy, "grad_output", out, "grad_input", gx.shape());
  c.shaped(workspace, "indices", out, "grad_input", gx.shape(), DType::kInt64);
  cuda::max_pool2d_backward(c.ctx(), s, gy.data<float>(), workspace.data<int64_t>(),
                            gx.data<float>());
}

// --- batch normalisation ---

void CudaBackend::batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           float eps, Tensor& y, Tensor& mean, Tensor& var) {
  Call c = devices_->call("batch_norm", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  DPE_CHECK(s.n * s.s > 1,
            "batch_norm: expected more than 1 value per channel when training, "
            "got input size "
                << x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  cuda::batch_norm_forward_train(c.ctx(), s, x.data<float>(), g, b, eps, y.data<float>(),
                                 mean.data<float>(), var.data<float>());
}

void CudaBackend::batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& mean, const Tensor& var, float eps,
                                          Tensor& y) {
  Call c = devices_->call("batch_norm", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(mean, "running_mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "running_var", Shape{s.c}, "input", x.shape());
  c.shaped(y, "output", x.shape(), "input", x.shape());
  if (x.numel() == 0) return;
  cuda::batch_norm_forward_eval(c.ctx(), s, x.data<float>(), g, b, mean.data<float>(),
                                var.data<float>(), eps, y.data<float>());
}

void CudaBackend::batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                      const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                                      Tensor& ggamma, Tensor& gbeta) {
  Call c = devices_->call("batch_norm_backward", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  float* gg = c.channel(ggamma, "grad_weight", s.c, x);
  float* gb = c.channel(gbeta, "grad_bias", s.c, x);
  cuda::batch_norm_backward(c.ctx(), s, x.data<float>(), gy.data<float>(), g, mean.data<float>(),
                            var.data<float>(), eps, gx.data<float>(), gg, gb);
}

void CudaBackend::channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) {
  Call c = devices_->call("channel_sums", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  c.shaped(sum, "sum", Shape{s.c}, "input", x.shape());
  c.shaped(sumsq, "sumsq", Shape{s.c}, "input", x.shape());
  cuda::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                     s.s);
}

void CudaBackend::channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                    Tensor& sum_gy, Tensor& sum_gy_xmu) {
  Call c = devices_->call("channel_grad_sums", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy, "sum_dy", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy_xmu, "sum_dy_xmu", Shape{s.c}, "input", x.shape());
  cuda::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                          sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
}

void CudaBackend::batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& gamma, const Tensor& beta, Tensor& y) {
  Call c = devices_->call("batch_norm_elemt", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  cuda::batch_norm_apply(c.ctx(), s, x.data<float>(), mean.data<float>(), invstd.data<float>(), g,
                         b, y.data<float>());
}

void CudaBackend::batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                            const Tensor& invstd, const Tensor& gamma,
                                            const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                            Tensor& gx) {
  Call c = devices_->call("batch_norm_backward_elemt", x);
  const cuda::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  c.shaped(mean_gy, "mean_dy", Shape{s.c}, "input", x.shape());
  c.shaped(mean_gy_xmu, "mean_dy_xmu", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  cuda::batch_norm_backward_elemt(c.ctx(), s, x.data<float>(), gy.data<float>(), mean.data<float>(),
                                  invstd.data<float>(), g, mean_gy.data<float>(),
                                  mean_gy_xmu.data<float>(), gx.data<float>());
}

// --- losses ---

void CudaBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  Call c = devices_->call("log_softmax", x);
  c.rank(x, "input", 2);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  cuda::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
}

void CudaBackend::log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = devices_->call("log_softmax_backward", y);
  c.rank(y, "output", 2);
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
  cuda::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                             y.size(0), y.size(1));
}

void CudaBackend::nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) {
  Call c = devices_->call("nll_loss", logp);
  c.rank(logp, "input", 2);
  c.tensor(target, "target", DType::kInt64);
  DPE_CHECK(target.dim() == 1 && target.size(0) == logp.size(0),
            "nll_loss: expected input batch_size ("
                << logp.size(0) << ") to match target batch_size ("
                << (target.dim() >= 1 ? target.size(0) : 0) << "), input of shape " << logp.shape()
                << " and target of shape " << target.shape());
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "nll_loss: expected a scalar out, but got shape " << out.shape());
  cuda::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(), out.data<float>(),
                         logp.size(0), logp.size(1));
}

void CudaBackend::nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) {
  Call c = devices_->call("nll_loss_backward", gx);
  c.rank(gx, "grad_input", 2);
  c.tensor(gout, "grad_output");
  DPE_CHECK(gout.numel() == 1,
            "nll_loss_backward: expected a scalar grad_output, but got shape " << gout.shape());
  c.shaped(target, "target", Shape{gx.size(0)}, "grad_input", gx.shape(), DType::kInt64);
  cuda::nll_loss_backward(c.ctx(), gout.data<float>(), target.data<int64_t>(), gx.data<float>(),
                          gx.size(0), gx.size(1));
}

// --- dropout and optimizers ---

void CudaBackend::dropout_mask(float p, uint64_t seed, Tensor& mask) {
  Call c = devices_->call("dropout", mask);
  c.tensor(mask, "mask");
  cuda::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
}

void CudaBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                           float dampening, float weight_decay, bool nesterov, bool first) {
  Call c = devices_->call("sgd", param);
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  DPE_CHECK(!nesterov || (momentum > 0.0f && dampening == 0.0f),
            "sgd: Nesterov momentum requires a momentum and zero dampening");
  if (momentum != 0.0f) c.shaped(buf, "momentum_buffer", param.shape(), "param", param.shape());
  cuda::SgdOptions o{lr, momentum, dampening, weight_decay, nesterov};
  cuda::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                 momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
  param.bump_version();
  if (momentum != 0.0f) buf.bump_version();
}

void CudaBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step, bool adamw) {
  Call c = devices_->call(adamw ? "adamw" : "adam", param);
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  c.shaped(exp_avg, "exp_avg", param.shape(), "param", param.shape());
  c.shaped(exp_avg_sq, "exp_avg_sq", param.shape(), "param", param.shape());
  cuda::AdamOptions o{lr, beta1, beta2, eps, weight_decay, adamw};
  cuda::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                  exp_avg_sq.data<float>(), o, step, param.numel());
  param.bump_version();
  exp_avg.bump_version();
  exp_avg_sq.bump_version();
}

Backend& cuda_backend() {
  // One CudaBackend serves every CUDA device (it keeps a lock per device); it lives until exit,
  // like the Runtime's DeviceContexts, and is created on first use, thread-safely.
  static CudaBackend backend;
  return backend;
}

}  // namespace dpe
