// One element's reductions for the collectives that reduce hop by hop on the host (Gloo's ring,
// MPI's user-defined ops): sum, max and min of float32, int64, bfloat16 and float16. A 16-bit
// pair is combined in float32 and rounded once per hop, as NCCL's bfloat16 all-reduce does; the
// wire carries the 2-byte values (the reason to all-reduce in 16 bits at all).
//
// Threading contract: pure functions; any thread.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "engine/core/dtype.h"
#include "engine/distributed/process_group.h"

namespace dpe::distributed {

namespace reduce_detail {
inline float widen(BFloat16 v) { return to_float(v); }
inline float widen(Float16 v) { return to_float(v); }
inline float widen(float v) { return v; }
inline int64_t widen(int64_t v) { return v; }
template <class T, class W>
T narrow(W v) {
  if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>) {
    return from_float<T>(v);
  } else {
    return v;
  }
}
}  // namespace reduce_detail

// out[i] = a[i] (op) b[i] for i < n; kAvg sums (the caller divides afterwards). out may be a or b.
template <class T>
void reduce_elements(ReduceOp op, T* out, const T* a, const T* b, size_t n) {
  using reduce_detail::narrow;
  using reduce_detail::widen;
  switch (op) {
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) out[i] = narrow<T>(std::max(widen(a[i]), widen(b[i])));
      return;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) out[i] = narrow<T>(std::min(widen(a[i]), widen(b[i])));
      return;
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (size_t i = 0; i < n; ++i) out[i] = narrow<T>(widen(a[i]) + widen(b[i]));
      return;
  }
}

}  // namespace dpe::distributed
