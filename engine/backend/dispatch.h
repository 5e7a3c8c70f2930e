// dispatch(prim): how the engine runs an operation on tensors. The prim's checks run first (the
// same messages on every device type), then the table of its first tensor's device type
// (op_table.h). The autograd ops, the optimizers, SyncBatchNorm and the DDP reducer call it:
//
//   dispatch(prim::LinearForward{x, w, b, y});
//   const bool finite = dispatch(prim::AllFinite{x});
//
// Threading contract: callable from any thread, concurrently across devices. It runs on the
// calling thread, which should be the device's worker (so the host kernels use that device's
// compute-thread count).
#pragma once

#include <type_traits>
#include <utility>

#include "engine/backend/op_check.h"
#include "engine/backend/op_table.h"

namespace dpe {

namespace detail {
template <class Op, class = void>
struct HasShortCircuit : std::false_type {};
template <class Op>
struct HasShortCircuit<Op, std::void_t<decltype(std::declval<const Op&>().short_circuit())>>
    : std::true_type {};
template <class Op, class = void>
struct HasAfter : std::false_type {};
template <class Op>
struct HasAfter<Op, std::void_t<decltype(std::declval<const Op&>().after())>> : std::true_type {};
template <class Op, class = void>
struct HasResult : std::false_type {};
template <class Op>
struct HasResult<Op, std::void_t<decltype(std::declval<const Op&>().result)>> : std::true_type {};
}  // namespace detail

// Checks `op` and runs it on its first tensor's device; returns op.result for prims that have
// one. Throws dpe::Error naming the op for a bad argument, or what the kernel reports.
template <class Op>
auto dispatch(const Op& op) {
  const OpCheck check(Op::kName, op.first());
  OpTable& table = op_table(check.device().type(), Op::kName);
  if (check.dtype() != DType::kFloat32) {
    const DTypeSet supported = table.dtypes(prim_id<Op>());
    if (!supported.has(check.dtype())) {
      throw_unsupported_dtype(Op::kName, check.device(), check.dtype(), supported);
    }
  }
  op.check(check);
  bool skip = false;
  if constexpr (detail::HasShortCircuit<Op>::value) skip = op.short_circuit();
  if (!skip) table.run(op);
  if constexpr (detail::HasAfter<Op>::value) op.after();
  if constexpr (detail::HasResult<Op>::value) return op.result;
}

// Whether `device`'s type has a kernel for Op (always true but for optional prims), computing in
// `dtype`.
template <class Op>
bool supports(Device device, DType dtype = DType::kFloat32) {
  const OpTable* t = find_op_table(device.type());
  return t != nullptr && t->has(prim_id<Op>()) && t->dtypes(prim_id<Op>()).has(dtype);
}

}  // namespace dpe
