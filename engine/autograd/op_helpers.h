// Shared by the ops' implementation files: device scoping and argument checks.
//
// Threading contract: stateless helpers; callable from any thread that runs an op.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "engine/backend/dispatch.h"
#include "engine/backend/prims/views.h"
#include "engine/core/error.h"
#include "engine/device/device_guard.h"
#include "engine/tensor/tensor.h"

namespace dpe::ops::detail {

// A new tensor of t's shape, dtype and device, laid out as t when t is a channels-last activation
// (torch.empty_like's preserve_format), else contiguous.
inline Tensor like(const Tensor& t) {
  return Tensor::empty(t.shape(), t.dtype(), t.device(),
                       t.is_contiguous() ? MemoryFormat::kContiguous : prim::activation_format(t));
}

// The dtype an op's floating inputs must share: the first one's when it is floating (float32,
// bfloat16, float16), else float32.
inline DType floating_dtype_of(const Tensor& first) {
  return is_floating_point(first.dtype()) ? first.dtype() : DType::kFloat32;
}

// Inputs of most ops: defined, of the first one's floating dtype, contiguous (made so), all on
// the first one's device.
inline Tensor prepare(const char* op, const Tensor& t, const Tensor& first, const char* what) {
  DPE_CHECK(t.defined(), op << ": " << what << " is undefined");
  check_dtype(op, t, floating_dtype_of(first), what);
  check_same_device(op, first, t);
  return t.contiguous();
}

// prepare() for the activations of the ops with channels-last kernels (convolution, batch norm,
// max pooling): a channels-last input stays so (made dense where it is not), as in PyTorch, where
// such a network keeps its activations channels last from the input on.
inline Tensor prepare_activation(const char* op, const Tensor& t, const char* what) {
  DPE_CHECK(t.defined(), op << ": " << what << " is undefined");
  check_dtype(op, t, floating_dtype_of(t), what);
  return t.contiguous(prim::activation_format(t));
}

using prim::dense_view;

inline void check_same_shape(const char* op, const Tensor& a, const Tensor& b) {
  DPE_CHECK(a.shape() == b.shape(), op << ": the size of tensor a " << a.shape()
                                       << " must match the size of tensor b " << b.shape());
}

// a and b as the elementwise kernels take them: both laid out as a, channels last where a is a
// channels-last activation (a ResNet's residual sum keeps its layout), else contiguous.
inline std::array<Tensor, 2> prepare_pair(const char* op, const Tensor& a_in, const Tensor& b_in) {
  Tensor a = prepare_activation(op, a_in, "a");
  check_dtype(op, b_in, a.dtype(), "b");
  check_same_device(op, a_in, b_in);
  check_same_shape(op, a, b_in);
  return {a, b_in.contiguous(prim::activation_format(a))};
}

// Whether `device`'s type has a fused op's optional kernels (Forward and Backward); where it has
// not (CUDA), the fused ops run as the ops they fuse.
template <class Forward, class Backward>
bool has_fused_kernels(Device device) {
  return supports<Forward>(device) && supports<Backward>(device);
}
// The same for x's device; an undefined x takes the fused op's path, whose checks name it.
template <class Forward, class Backward>
bool has_fused_kernels(const Tensor& x) {
  return !x.defined() || has_fused_kernels<Forward, Backward>(x.device());
}

// max_pool2d's parameters (stride 0: the kernel size) checked against x; returns them and the
// output's shape.
inline std::pair<Pool2dParams, Shape> checked_pool(const Tensor& x, int64_t kernel_size,
                                                   int64_t stride, int64_t padding) {
  const Pool2dParams p{kernel_size, stride > 0 ? stride : kernel_size, padding};
  DPE_CHECK(x.dim() == 4, "max_pool2d: expected a 4-D input [N, C, H, W], got " << x.shape());
  DPE_CHECK(p.padding * 2 <= p.kernel, "max_pool2d: pad should be at most half of kernel size");
  const int64_t ho = (x.size(2) + 2 * p.padding - p.kernel) / p.stride + 1;
  const int64_t wo = (x.size(3) + 2 * p.padding - p.kernel) / p.stride + 1;
  DPE_CHECK(ho > 0 && wo > 0,
            "max_pool2d: input " << x.shape() << " is smaller than the kernel " << p.kernel);
  return {p, Shape{x.size(0), x.size(1), ho, wo}};
}

}  // namespace dpe::ops::detail
