// Convolution prims (x [N, C, H, W], channels last where prim::activation_format says so). See
// prims.h for what a prim declares; pool.h holds max pooling.
#pragma once

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/backend/prims/views.h"
#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe::prim {

// x [N, C, H, W], w [O, C, kh, kw], b [O] or undefined, y [N, O, Ho, Wo]. An empty batch (N = 0)
// needs no kernel.
struct Conv2dForward {
  static constexpr const char* kName = "conv2d";
  const Tensor& x;
  const Tensor& w;
  const Tensor& b;
  const Conv2dParams& p;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  bool short_circuit() const { return x.size(0) == 0; }
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    conv2d_forward(ctx, conv_view(x, w, p, y), x.data<float>(), w.data<float>(), data_or_null(b),
                   y.data<float>());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    conv2d_forward_lowp(ctx, x.dtype(), conv_view(x, w, p, y), x.raw_data(), w.raw_data(),
                        b.defined() ? b.raw_data() : nullptr, y.raw_data());
  }
};

// gy [N, O, Ho, Wo]; any of gx, gw, gb may be undefined: then it is not computed. An empty batch
// contributes nothing: gw and gb are zeroed without a kernel.
struct Conv2dBackward {
  static constexpr const char* kName = "conv2d_backward";
  const Tensor& x;
  const Tensor& w;
  const Tensor& gy;
  const Conv2dParams& p;
  Tensor& gx;
  Tensor& gw;
  Tensor& gb;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  bool short_circuit() const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    conv2d_backward(ctx, conv_view(x, w, p, gy), x.data<float>(), w.data<float>(), gy.data<float>(),
                    data_or_null(gx), data_or_null(gw), data_or_null(gb));
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    const auto raw = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
    conv2d_backward_lowp(ctx, x.dtype(), conv_view(x, w, p, gy), x.raw_data(), w.raw_data(),
                         gy.raw_data(), raw(gx), raw(gw), raw(gb));
  }
};

}  // namespace dpe::prim
