// The FLOPs and bytes of each backend op, for the op trace (engine/device/op_trace.h) and the
// cost model that replays it. A multiply-add counts 2 FLOPs; bytes are what an ideal kernel reads
// and writes once (tensors' sizes), not what a given implementation touches.
#pragma once

#include <initializer_list>

#include "engine/device/op_trace.h"
#include "engine/tensor/tensor.h"

namespace dpe::op_cost {

// An op of class `op_class` doing `flops`, reading `reads` and writing `writes` (undefined tensors
// are skipped); shapes are recorded reads first.
OpCost make(const char* op_class, double flops, std::initializer_list<const Tensor*> reads,
            std::initializer_list<const Tensor*> writes);
// `flops_per_element` per element of `first`.
OpCost elementwise(const char* op_class, double flops_per_element, const Tensor& first,
                   std::initializer_list<const Tensor*> reads,
                   std::initializer_list<const Tensor*> writes);

// 2 * N * Cout * Ho * Wo * Cin * kh * kw: one convolution's multiply-adds.
double conv2d_flops(const Tensor& w, const Tensor& y);

}  // namespace dpe::op_cost
