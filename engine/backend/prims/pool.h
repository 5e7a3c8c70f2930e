// Max pooling prims (x [N, C, H, W], channels last where prim::activation_format says so; norm.h
// holds the pooling fused after batch norm + ReLU). See prims.h for what a prim declares.
#pragma once

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/backend/prims/views.h"
#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe::prim {

// y [N, C, Ho, Wo]; `workspace` (int64, y's shape) receives the flat index within its (n, c)
// plane of each output's maximum.
struct MaxPool2dForward {
  static constexpr const char* kName = "max_pool2d";
  const Tensor& x;
  const Pool2dParams& p;
  Tensor& y;
  Tensor& workspace;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    max_pool2d_forward(ctx, pool_view(x, p, y), x.data<float>(), y.data<float>(),
                       workspace.data<int64_t>());
  }
};

// Scatters gy through the forward's workspace into gx [N, C, H, W] (which gives the input shape).
struct MaxPool2dBackward {
  static constexpr const char* kName = "max_pool2d_backward";
  const Tensor& gy;
  const Tensor& workspace;
  const Pool2dParams& p;
  Tensor& gx;

  const Tensor& first() const { return gy; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    max_pool2d_backward(ctx, pool_view(gx, p, gy), gy.data<float>(), workspace.data<int64_t>(),
                        gx.data<float>());
  }
};

}  // namespace dpe::prim
