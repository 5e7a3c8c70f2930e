// How the prims present checked tensors to the kernels (kernels/op_params.h): x [N, C, ...] as
// [N, C, S]; x [..., D] as [N, D]; x [..., Tq, Tk] as [B, Tq, Tk]; a convolution or pooling as its
// full shape. Shared by the checks and the launches.
//
// Threading contract: pure functions.
#pragma once

#include <cstdint>

#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe::prim {

// Whether `type`'s op table declares channels-last kernels (OpTable::channels_last, op_table.cc);
// false where the type has no table.
bool has_channels_last_kernels(DeviceType type);

// The layout of an activation through the ops with channels-last kernels (convolution, batch
// norm, max pooling): channels last where a 4-D tensor's strides say so (suggest_memory_format)
// and its device type's table declares those kernels (the host's does), else contiguous. An op's
// other activations (output, gradients, indices) must be laid out as its input.
inline MemoryFormat activation_format(const Tensor& x) {
  return x.defined() && x.dim() == 4 && x.suggest_memory_format() == MemoryFormat::kChannelsLast &&
                 has_channels_last_kernels(x.device().type())
             ? MemoryFormat::kChannelsLast
             : MemoryFormat::kContiguous;
}

// An elementwise op's view of a channels-last activation: its NHWC buffer as a contiguous
// [N, H, W, C] tensor (every other tensor as it is). Elementwise kernels read and write flat
// buffers, so operands laid out alike may run on these views, whatever their layout.
inline Tensor dense_view(const Tensor& t) {
  return t.is_contiguous() ? t : t.permute({0, 2, 3, 1});
}

// x [N, C, ...] (at least 2-D) as [N, C, S], S the product of the trailing sizes ([N, S, C] when
// x is channels last).
inline BatchNormShape channels_view(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s, activation_format(x) == MemoryFormat::kChannelsLast};
}

// x [..., D] (D > 0) as [N, D].
inline LayerNormShape rows_view(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }

// x [..., Tq, Tk] as [B, Tq, Tk]; a 1-D x is one query.
inline SoftmaxShape softmax_view(const Tensor& x, bool causal) {
  const int64_t tk = x.size(-1), tq = x.dim() >= 2 ? x.size(-2) : 1;
  return {tq * tk > 0 ? x.numel() / (tq * tk) : 0, tq, tk, causal};
}

// x [N, C, H, W] convolved by w [O, C, kh, kw] into y [N, O, Ho, Wo].
inline Conv2dShape conv_view(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                             const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), p.stride,  p.padding, y.size(2), y.size(3),
          activation_format(x) == MemoryFormat::kChannelsLast};
}

// x [N, C, H, W] max-pooled into y [N, C, Ho, Wo].
inline Pool2dShape pool_view(const Tensor& x, const Pool2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), p.kernel, p.stride, p.padding, y.size(2),
          y.size(3), activation_format(x) == MemoryFormat::kChannelsLast};
}

// The data of an optional tensor: null when undefined.
inline float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace dpe::prim
