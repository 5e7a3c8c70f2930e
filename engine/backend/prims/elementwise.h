// Elementwise prims (same shapes in and out) and the dropout mask. See prims.h for what a prim
// declares.
#pragma once

#include <cstdint>

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/tensor/tensor.h"

namespace dpe::prim {

// out = a + alpha * b.
struct Add {
  static constexpr const char* kName = "add";
  const Tensor& a;
  const Tensor& b;
  float alpha;
  Tensor& out;

  const Tensor& first() const { return a; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    add_forward(ctx, a.data<float>(), b.data<float>(), alpha, out.data<float>(), a.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    add_lowp(ctx, a.dtype(), a.raw_data(), b.raw_data(), alpha, out.raw_data(), a.numel());
  }
};

// out = a * b.
struct Mul {
  static constexpr const char* kName = "mul";
  const Tensor& a;
  const Tensor& b;
  Tensor& out;

  const Tensor& first() const { return a; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    mul_forward(ctx, a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    mul_lowp(ctx, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data(), a.numel());
  }
};

// out = s * a.
struct Scale {
  static constexpr const char* kName = "scale";
  const Tensor& a;
  float s;
  Tensor& out;

  const Tensor& first() const { return a; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    scale_forward(ctx, a.data<float>(), s, out.data<float>(), a.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    scale_lowp(ctx, a.dtype(), a.raw_data(), s, out.raw_data(), a.numel());
  }
};

// y = max(x, 0).
struct ReluForward {
  static constexpr const char* kName = "relu";
  const Tensor& x;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    relu_forward(ctx, x.data<float>(), y.data<float>(), x.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    relu_forward_lowp(ctx, x.dtype(), x.raw_data(), y.raw_data(), x.numel());
  }
};

// gx = gy * (y > 0), y the forward's output.
struct ReluBackward {
  static constexpr const char* kName = "relu_backward";
  const Tensor& y;
  const Tensor& gy;
  Tensor& gx;

  const Tensor& first() const { return y; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    relu_backward(ctx, y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    relu_backward_lowp(ctx, y.dtype(), y.raw_data(), gy.raw_data(), gx.raw_data(), y.numel());
  }
};

// GELU, tanh form (PyTorch's approximate='tanh').
struct GeluForward {
  static constexpr const char* kName = "gelu";
  const Tensor& x;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    gelu_forward(ctx, x.data<float>(), y.data<float>(), x.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    gelu_forward_lowp(ctx, x.dtype(), x.raw_data(), y.raw_data(), x.numel());
  }
};

// Its gradient, from the forward's input x.
struct GeluBackward {
  static constexpr const char* kName = "gelu_backward";
  const Tensor& x;
  const Tensor& gy;
  Tensor& gx;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    gelu_backward(ctx, x.data<float>(), gy.data<float>(), gx.data<float>(), x.numel());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    gelu_backward_lowp(ctx, x.dtype(), x.raw_data(), gy.raw_data(), gx.raw_data(), x.numel());
  }
};

// mask holds 0 or 1/(1-p), a function of `seed` alone (dropout's y = x * mask).
struct DropoutMask {
  static constexpr const char* kName = "dropout";
  float p;
  uint64_t seed;
  Tensor& mask;

  const Tensor& first() const { return mask; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    dropout_mask(ctx, p, seed, mask.data<float>(), mask.numel());
  }
};

}  // namespace dpe::prim
