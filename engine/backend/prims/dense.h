// Dense prims: linear layers, matrix products and embeddings. See prims.h for what a prim
// declares.
#pragma once

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/backend/prims/views.h"
#include "engine/tensor/tensor.h"

namespace dpe::prim {

// The GEMM shape of x [N, I] times w [O, I], or w [I, O] when it is stored transposed.
inline LinearShape linear_shape(const Tensor& x, const Tensor& w, bool w_transposed) {
  return LinearShape{x.size(0), x.size(1), w.size(w_transposed ? 1 : 0), w_transposed};
}

// y[N, O] = x[N, I] @ w[O, I]^T (+ b[O] when defined).
struct LinearForward {
  static constexpr const char* kName = "linear";
  const Tensor& x;
  const Tensor& w;
  const Tensor& b;
  Tensor& y;
  bool w_transposed = false;  // w is [I, O] (LinearShape::w_transposed), else [O, I]

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    linear_forward(ctx, linear_shape(x, w, w_transposed), x.data<float>(), w.data<float>(),
                   data_or_null(b), y.data<float>());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    linear_forward_lowp(ctx, x.dtype(), linear_shape(x, w, w_transposed), x.raw_data(),
                        w.raw_data(), b.defined() ? b.raw_data() : nullptr, y.raw_data());
  }
};

// Any of gx [N, I], gw [O, I] (or [I, O] as w), gb [O] may be undefined: then it is not computed.
// gw and gb are multiplied by param_grad_scale (1: the plain gradients; DDP's 1/world when they are
// written straight into its buckets, design note "gradient destinations" in
// engine/autograd/node.h).
struct LinearBackward {
  static constexpr const char* kName = "linear_backward";
  const Tensor& x;
  const Tensor& w;
  const Tensor& gy;
  Tensor& gx;
  Tensor& gw;
  Tensor& gb;
  float param_grad_scale;
  bool w_transposed = false;  // w and gw are [I, O]

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    linear_backward(ctx, linear_shape(x, w, w_transposed), x.data<float>(), w.data<float>(),
                    gy.data<float>(), data_or_null(gx), data_or_null(gw), data_or_null(gb),
                    param_grad_scale);
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    const auto raw = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
    linear_backward_lowp(ctx, x.dtype(), linear_shape(x, w, w_transposed), x.raw_data(),
                         w.raw_data(), gy.raw_data(), raw(gx), raw(gw), raw(gb), param_grad_scale);
  }
};

// out[M, N] = a[M, K] @ b[K, N].
struct Matmul {
  static constexpr const char* kName = "matmul";
  const Tensor& a;
  const Tensor& b;
  Tensor& out;

  const Tensor& first() const { return a; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    matmul(ctx, a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
           b.size(1));
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    matmul_lowp(ctx, a.dtype(), a.raw_data(), b.raw_data(), out.raw_data(), a.size(0), a.size(1),
                b.size(1));
  }
};

// out[B, M, N] = op(a) @ op(b) per batch: a is [B, M, K] ([B, K, M] when trans_a, op =
// transpose), b is [B, K, N] ([B, N, K] when trans_b). Transposes are read in place, never copied.
struct Bmm {
  static constexpr const char* kName = "bmm";
  const Tensor& a;
  const Tensor& b;
  bool trans_a;
  bool trans_b;
  Tensor& out;

  const Tensor& first() const { return a; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    const BmmShape s{a.size(0), out.size(1), out.size(2), a.size(trans_a ? 1 : 2),
                     trans_a,   trans_b};
    bmm(ctx, s, a.data<float>(), b.data<float>(), out.data<float>());
  }
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    const BmmShape s{a.size(0), out.size(1), out.size(2), a.size(trans_a ? 1 : 2),
                     trans_a,   trans_b};
    bmm_lowp(ctx, a.dtype(), s, a.raw_data(), b.raw_data(), out.raw_data());
  }
};

// Row i of y [N, D] is row index[i] of weight [V, D]; index is int64 [N]. The kernel throws
// "embedding: index <i> is out of range for <V> rows" for an index outside [0, V).
struct EmbeddingForward {
  static constexpr const char* kName = "embedding";
  const Tensor& weight;
  const Tensor& index;
  Tensor& y;

  const Tensor& first() const { return weight; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    embedding_forward(ctx, weight.data<float>(), index.data<int64_t>(), y.data<float>(),
                      index.size(0), weight.size(0), weight.size(1));
  }
};

// gw [V, D] = 0, then gw[index[i]] += gy[i] for every i (repeated indices accumulate).
struct EmbeddingBackward {
  static constexpr const char* kName = "embedding_backward";
  const Tensor& index;
  const Tensor& gy;
  Tensor& gw;

  const Tensor& first() const { return gw; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    embedding_backward(ctx, index.data<int64_t>(), gy.data<float>(), gw.data<float>(),
                       index.size(0), gw.size(0), gw.size(1));
  }
};

// The same gradient added into gw [rows, cols], a gradient of the weight that already arrived
// (design note "accumulation offers", engine/autograd/node.h; a language model's tied embedding
// gets its head's first): each row an index names gets the sum of its rows of gy (in index order,
// from zero, as EmbeddingBackward's), the others stay as they are. Optional: where a device type
// lacks it, the engine sums EmbeddingBackward's full-size gradient in.
struct EmbeddingBackwardAccumulate {
  static constexpr const char* kName = "embedding_backward_accumulate";
  static constexpr bool kOptional = true;
  const Tensor& index;
  const Tensor& gy;
  Tensor& gw;

  const Tensor& first() const { return gw; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    embedding_backward_accumulate(ctx, index.data<int64_t>(), gy.data<float>(), gw.data<float>(),
                                  index.size(0), gw.size(0), gw.size(1));
  }
};

}  // namespace dpe::prim
