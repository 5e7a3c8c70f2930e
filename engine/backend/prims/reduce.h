// Reduction prims: the sum of all elements, per-row argmax and the finiteness check. See prims.h
// for what a prim declares.
#pragma once

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/tensor/tensor.h"

namespace dpe::prim {

// out (a scalar, shape []) = the sum of every element of x.
struct SumAll {
  static constexpr const char* kName = "sum";
  const Tensor& x;
  Tensor& out;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    sum_all(ctx, x.data<float>(), out.data<float>(), x.numel());
  }
};

// out (a scalar) = the sum of the squares of x's elements, each square rounded to float and the sum
// taken as SumAll takes it: SumAll over Mul{x, x} in one read of x instead of three passes (the
// squares written, then read back). clip_grad_norm_'s norm. Optional: where a device type lacks
// it, the caller runs Mul then SumAll.
struct SumSquares {
  static constexpr const char* kName = "sum_squares";
  static constexpr bool kOptional = true;
  const Tensor& x;
  Tensor& out;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    sum_squares(ctx, x.data<float>(), out.data<float>(), x.numel());
  }
};

// Per-row argmax of x [N, C] (C > 0) into int64 out [N].
struct ArgmaxRows {
  static constexpr const char* kName = "argmax";
  const Tensor& x;
  Tensor& out;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    argmax_rows(ctx, x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
  }
};

// Whether every element of x is finite: dispatch() returns `result` (true when no kernel ran, as
// in a trace that skips the work).
struct AllFinite {
  static constexpr const char* kName = "all_finite";
  const Tensor& x;
  mutable bool result = true;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    result = all_finite(ctx, x.data<float>(), x.numel());
  }
};

}  // namespace dpe::prim
