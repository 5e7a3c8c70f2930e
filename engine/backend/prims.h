// The prims: every operation on tensors a device type implements, each declared once as a struct
// in prims/*.h. A prim is its arguments (tensors by reference, outputs allocated by the caller
// with the documented shape) plus:
//   kName            the op's name in errors and traces;
//   first()          the tensor whose device runs it (every other tensor must be on that device);
//   check(OpCheck&)  its argument checks, written once for every device type;
//   cost()           its FLOPs and bytes (OpCost), for the op trace and the cost model;
//   launch(ctx)      its kernel call: an unqualified call that argument-dependent lookup resolves
//                    in the kernels' namespace of the context's type (host::HostContext finds
//                    kernels/host, cuda::CudaContext kernels/cuda), so one template serves every
//                    device type whose kernels share the signature;
// and optionally kOptional (a device type may lack it: supports<Op>()), short_circuit() (true
// when no kernel is needed, e.g. an empty batch, after writing what the outputs must hold),
// after() (what follows the kernel whether or not it ran, e.g. version bumps of in-place updates)
// and a `result` member (what dispatch() returns).
//
// Adding an op: its struct in the family's header, its check and cost in the family's .cc, one
// line in DPE_PRIMS below, its kernels, the differentiable op in engine/autograd, and for a fused
// op the layers that fuse in engine/nn (docs/design.md, "Adding an op").
#pragma once

#include <type_traits>

#include "engine/backend/prims/conv.h"
#include "engine/backend/prims/dense.h"
#include "engine/backend/prims/elementwise.h"
#include "engine/backend/prims/norm.h"
#include "engine/backend/prims/optim.h"
#include "engine/backend/prims/pool.h"
#include "engine/backend/prims/reduce.h"
#include "engine/backend/prims/softmax.h"

// X(Op) for every prim: the op table's slots (op_table.h) and its decorators follow from it.
#define DPE_PRIMS(X)                  \
  X(Add)                              \
  X(Mul)                              \
  X(Scale)                            \
  X(ReluForward)                      \
  X(ReluBackward)                     \
  X(GeluForward)                      \
  X(GeluBackward)                     \
  X(DropoutMask)                      \
  X(SumAll)                           \
  X(SumSquares)                       \
  X(ArgmaxRows)                       \
  X(AllFinite)                        \
  X(LinearForward)                    \
  X(LinearBackward)                   \
  X(Matmul)                           \
  X(Bmm)                              \
  X(EmbeddingForward)                 \
  X(EmbeddingBackward)                \
  X(EmbeddingBackwardAccumulate)      \
  X(Conv2dForward)                    \
  X(Conv2dBackward)                   \
  X(MaxPool2dForward)                 \
  X(MaxPool2dBackward)                \
  X(BatchNormForwardTrain)            \
  X(BatchNormForwardEval)             \
  X(BatchNormBackward)                \
  X(BatchNormReluForwardTrain)        \
  X(BatchNormReluBackward)            \
  X(BatchNormAddReluForwardTrain)     \
  X(BatchNormAddReluBackward)         \
  X(BatchNormReluMaxPoolForwardTrain) \
  X(BatchNormReluMaxPoolBackward)     \
  X(ChannelSums)                      \
  X(ChannelGradSums)                  \
  X(BatchNormElemt)                   \
  X(BatchNormBackwardElemt)           \
  X(LayerNormForward)                 \
  X(LayerNormBackward)                \
  X(SoftmaxForward)                   \
  X(SoftmaxBackward)                  \
  X(LogSoftmaxForward)                \
  X(LogSoftmaxBackward)               \
  X(NllLossForward)                   \
  X(NllLossBackward)                  \
  X(CrossEntropyForward)              \
  X(CrossEntropyBackward)             \
  X(SgdStep)                          \
  X(AdamStep)

namespace dpe::prim {

// Whether Op is optional (declares kOptional = true).
template <class Op, class = void>
struct IsOptional : std::false_type {};
template <class Op>
struct IsOptional<Op, std::void_t<decltype(Op::kOptional)>>
    : std::integral_constant<bool, Op::kOptional> {};
template <class Op>
constexpr bool is_optional_v = IsOptional<Op>::value;

// Whether Op has 16-bit kernels to launch (declares kLowPrecision = true and launch_lowp(ctx),
// which takes bfloat16 or float16 tensors of the op's compute dtype).
template <class Op, class = void>
struct HasLowPrecision : std::false_type {};
template <class Op>
struct HasLowPrecision<Op, std::void_t<decltype(Op::kLowPrecision)>>
    : std::integral_constant<bool, Op::kLowPrecision> {};
template <class Op>
constexpr bool has_low_precision_v = HasLowPrecision<Op>::value;

// The dtype an op computes in: its first tensor's when that is a floating dtype, else float32
// (OpCheck::dtype).
template <class Op>
DType compute_dtype(const Op& op) {
  const DType t = op.first().dtype();
  return is_floating_point(t) ? t : DType::kFloat32;
}

}  // namespace dpe::prim
