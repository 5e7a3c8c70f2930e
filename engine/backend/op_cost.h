// OpCost: the FLOPs and bytes of one backend op, which each prim states (prims/*.h) for the op
// trace (engine/trace) and the cost model that replays it. A multiply-add counts 2 FLOPs; bytes
// are what an ideal kernel reads and writes once (tensors' sizes), not what a given
// implementation touches.
//
// Threading contract: plain values and pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe {

// What bounds an op on a GPU, for the roofline's efficiency factor: "gemm" (linear, matmul, bmm),
// "conv", and memory-bound classes "elementwise", "norm", "softmax", "embedding", "loss", "pool",
// "reduction", "optimizer" ("fill" and "copy" are the trace's own).
struct OpCost {
  const char* op_class = "elementwise";
  double flops = 0;
  // Of flops, those on a convolution's zero padding: counted, as PyTorch's flop counter counts
  // them (every output element is C * kh * kw multiply-adds), but skipped by oneDNN's kernels, so
  // a roofline that priced them would allow less than the machine does.
  double padding_flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  std::vector<std::vector<int64_t>> shapes;  // of the op's tensor arguments, reads first
  // The dtype the op computes in: its first floating-point read (else its first floating write),
  // float32 when it has none. Under autocast it says which list an op followed.
  DType dtype = DType::kFloat32;
};

namespace op_cost {

// An op of class `op_class` doing `flops`, reading `reads` and writing `writes` (undefined tensors
// are skipped).
OpCost make(const char* op_class, double flops, std::initializer_list<const Tensor*> reads,
            std::initializer_list<const Tensor*> writes);
// `flops_per_element` per element of `first`.
OpCost elementwise(const char* op_class, double flops_per_element, const Tensor& first,
                   std::initializer_list<const Tensor*> reads,
                   std::initializer_list<const Tensor*> writes);

// 2 * N * Cout * Ho * Wo * Cin * kh * kw: one convolution's multiply-adds.
double conv2d_flops(const Tensor& w, const Tensor& y);
// Of conv2d_flops(w, y), those whose input element is padding: x [N, C, H, W] convolved with
// `stride` and `padding` on both sides.
double conv2d_padding_flops(const Tensor& x, const Tensor& w, const Tensor& y, int64_t stride,
                            int64_t padding);

}  // namespace op_cost

}  // namespace dpe
